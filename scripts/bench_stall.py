#!/usr/bin/env python3
"""A stalled stretch in a process's first drafting steps, and what the model drafter does after it, in ONE run.

Processes that spin on every core (--hogs) run beside the first --stalled replies of the model
drafter (auto), each --stalled-tokens long, as where the machine is shared when a process starts:
its first drafting steps measure the draft and the verify many times dearer than they are. How
much dearer varies from run to run (two llama.cpp hogs stretched the 2-core Xeon's decodes 5 to 100
times); --stall-factor F instead makes every decode of those replies take F times its seconds
(--draft-stall-factor: the draft's another number of times, as the hogs stretched its small decodes more).
Then the hogs stop, and the replies go on, auto alternating with target-only reply by reply (each planning from its own
measurements, as its own process would; bench.reply_order). Printed: each later reply's ratio to
target-only's on the same prompt and the tokens it drafted, the draft's cost as its tracker read it
after the stretch and at the end, and the later replies' ratio over all of them and over their
second half. Before the planner re-measured a cost that keeps a draft out (Probes._remeasure), a
stretch like this kept the model out for the whole process. --next-process: the later replies are
a next process's, warm from the plan the stalled replies saved, and beside auto runs "auto-unpaced",
the same plan loaded without what reads a stretch at the pace the plain step shows later
(budget.pace) and funds the draft's re-measure (out_s), as a plan saved before 75cac1e loads.

    python scripts/bench_stall.py --target big.gguf --draft small.gguf \\
        --prompts scripts/prompts/prose.jsonl --n-prompts 4 --rounds 3 --max-tokens 96
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the reply order)
from bench_copy_bound import streamed  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.context import Context  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import Pair  # noqa: E402
from localspec.tracker import CostTracker  # noqa: E402

SCENARIOS = ["target-only", "auto"]
HOG_LOAD_S = 5.0  # what a llama.cpp hog is given to load its model before the stalled replies
# A hog that decodes with llama.cpp (argv: model, threads): its OpenMP threads spin at each barrier as
# another llama.cpp process's do, which stalls ours far more than a process that only computes.
LLAMA_HOG = """
import sys, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_threads=int(sys.argv[2]), n_ctx=512, verbose=False)
tokens = llm.tokenize(b"def fibonacci(n):") * 4
while True:
    llm.reset()
    for t in tokens:
        llm.eval([t])
"""


def reply(pair: Pair, prompt: list[int], args, name: str, max_tokens: int | None = None) -> dict:
    """One greedy reply (max_tokens: by default --max-tokens): tokens, decode seconds and tokens drafted."""
    bench.empty_draft_cache(pair)  # (the scenarios share one draft context)
    cfg = GenerationConfig(max_tokens=max_tokens or args.max_tokens, gamma=0 if name == "target-only" else None, seed=0,
                           drafter="model", sampling=SamplingParams(temperature=0.0))
    tokens, stats = streamed(pair, prompt, cfg)
    return {"tokens": len(tokens), "seconds": stats.total_s, "drafted": stats.drafted,
            "ready": stats.draft_prefill_s > 0}


def draft_cost(trackers: dict) -> str:
    """The model tracker's draft cost a row and its one-row and two-row verify, as it reads them."""
    t = trackers.get(("model", True))
    if t is None or t.draft_s.value is None:
        return "draft cost not measured"
    entry, pace = t.entry_s(), t.draft_pace
    return (f"draft {t.draft_s.value * 1e3:.0f} ms a row ({t.draft_s.n} rows), plain step "
            f"{t.plain_seconds() * 1e3:.0f} ms, 2-row verify {t.verify_seconds(2) * 1e3:.0f} ms; "
            f"its entry {'not measured' if entry is None else f'{entry * 1e3:.0f} ms'}, "
            f"measured beside a plain step of {'—' if pace is None else f'{pace * 1e3:.0f}'} ms; "
            f"{t.idle_s:.1f} s since made ready, {t.out_s:.1f} s since it drafted")


@contextlib.contextmanager
def slowed(factor: float, kind: type = Context, draft_factor: float | None = None, draft=None):
    """Every llama.cpp decode of this process (a `kind`'s), the target's and the draft's, takes
    `factor` times its seconds (it sleeps the rest after it): a stall as deep as the machine-wide
    ones seen, the same for every run. draft_factor: the `draft` context's decodes take that many
    times instead (llama.cpp hogs stretched the draft's small decodes more than the target's)."""
    draft_factor = factor if draft_factor is None else draft_factor
    if factor == draft_factor == 1.0:
        yield
        return
    originals = {name: getattr(kind, name) for name in ("decode", "decode_tree")}

    def wrap(method):
        def slow(self, *a, **kw):
            t0 = time.perf_counter()
            out = method(self, *a, **kw)
            time.sleep(((draft_factor if self is draft else factor) - 1.0) * (time.perf_counter() - t0))
            return out
        return slow
    try:
        for name, method in originals.items():
            setattr(kind, name, wrap(method))
        yield
    finally:
        for name, method in originals.items():
            setattr(kind, name, method)


def stalled(pair: Pair, prompts: list[list[int]], args, trackers: dict) -> list[dict]:
    """The first --stalled replies of auto with --hogs spinning processes beside them, every decode
    slowed --stall-factor times."""
    if args.hogs == 0:
        hogs = []
    elif args.hog_model is None:
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    else:
        hogs = [subprocess.Popen([sys.executable, "-c", LLAMA_HOG, str(args.hog_model), str(args.threads)])
                for _ in range(args.hogs)]
        time.sleep(HOG_LOAD_S)  # (its model loaded: decoding)
    try:
        pair.trackers = trackers
        with slowed(args.stall_factor, draft_factor=args.draft_stall_factor, draft=pair.draft_ctx):
            return [reply(pair, prompts[i % len(prompts)], args, "auto", args.stalled_tokens)
                    for i in range(args.stalled)]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        time.sleep(1.0)


# What a saved plan keeps to read a stretch at the pace the plain step shows later (budget.pace) and
# to fund the draft's re-measure (CostTracker.out_s): left out, the plan loads as an older file does.
PACED = ("draft_pace", "out_s", "remeasure_loss")


def next_process(trackers: dict) -> dict[str, dict]:
    """auto's trackers as a next process starts from them, saved and loaded as warm start does
    (CostTracker.to_dict, from_dict): "auto", and "auto-unpaced" from the same plan without PACED."""
    def loaded(drop: tuple = ()) -> dict:
        return {key: CostTracker.from_dict({k: v for k, v in t.to_dict().items() if k not in drop})
                for key, t in trackers.items()}
    return {"target-only": {}, "auto": loaded(), "auto-unpaced": loaded(PACED)}


def run(args, pair: Pair) -> str:
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    prompts = [pair.prompt_tokens(t, True) for t in texts]
    trackers: dict[str, dict] = {name: {} for name in SCENARIOS}
    first = stalled(pair, prompts, args, trackers["auto"])
    kind = "spinning processes" if args.hog_model is None else f"processes decoding {args.hog_model.name}"
    draft = "" if args.draft_stall_factor is None else f", the draft's {args.draft_stall_factor:g} times"
    lines = [f"stalled replies ({args.hogs} {kind} beside, every decode {args.stall_factor:g} times as long{draft}): "
             + ", ".join(f"{r['tokens'] / r['seconds']:.1f} tok/s, {r['drafted']} drafted" for r in first),
             "after them: " + draft_cost(trackers["auto"])]
    if args.next_process:
        trackers = next_process(trackers["auto"])
        lines.append("the later replies are a next process's, warm from the plan the stalled one saved "
                     "(auto-unpaced: the plan without " + ", ".join(PACED) + ", as an older file)")
    later, drafting = [], [name for name in trackers if name != "target-only"]
    for n, i in enumerate([i for _ in range(args.rounds) for i in range(len(prompts))]):
        record = {}
        for name in bench.reply_order(list(trackers), n):
            pair.trackers = trackers[name]
            record[name] = reply(pair, prompts[i], args, name)
        lines.append(f"reply {n} (prompt {i}): " + "; ".join(
            f"{name} {ratio_of([record], name):.2f}x target-only, {record[name]['drafted']} drafted"
            + ("" if record[name]["ready"] else " (the draft not made ready)") for name in drafting))
        later.append(record)
    half = later[len(later) // 2:]
    for name in drafting:
        lines += [f"at the end: {name}: " + draft_cost(trackers[name]),
                  f"later replies: {name} {ratio_of(later, name):.3f}x target-only; "
                  f"their second half {ratio_of(half, name):.3f}x"]
    return "\n".join(lines)


def rate(replies: list[dict]) -> float:
    return sum(r["tokens"] for r in replies) / sum(r["seconds"] for r in replies)


def ratio_of(records: list[dict], name: str = "auto") -> float:
    """A drafting scenario's tokens/s over target-only's, each summed over the records."""
    return rate([r[name] for r in records]) / rate([r["target-only"] for r in records])


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_one_process_args(ap, "humaneval", 4, 96)
    ap.add_argument("--stalled", type=int, default=1, help="auto's replies with the spinning processes beside")
    ap.add_argument("--stalled-tokens", type=int, default=16, help="the stalled replies' length")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2,
                    help="spinning processes (default: one a core; 0: none)")
    ap.add_argument("--stall-factor", type=float, default=1.0,
                    help="every decode of the stalled replies takes this many times its seconds (default 1)")
    ap.add_argument("--hog-model", type=Path, default=None,
                    help="a .gguf each hog decodes with llama.cpp on --threads threads (default: plain Python loops)")
    ap.add_argument("--draft-stall-factor", type=float, default=None,
                    help="the draft's decodes in the stalled replies take this many times their seconds "
                         "(default: --stall-factor)")
    ap.add_argument("--next-process", action="store_true",
                    help="the later replies start from the plan the stalled replies saved, as a next process "
                         "does, beside the same plan loaded as an older file (auto-unpaced)")
    args = ap.parse_args(argv)
    draft_factor = 1.0 if args.draft_stall_factor is None else args.draft_stall_factor
    for flag, value, least in (("--stalled", args.stalled, 1), ("--stalled-tokens", args.stalled_tokens, 1),
                               ("--stall-factor", args.stall_factor, 1), ("--hogs", args.hogs, 0),
                               ("--draft-stall-factor", draft_factor, 1)):
        if value < least:
            ap.error(f"{flag} {value}: give {least} or more")
    if args.hog_model is not None and not args.hog_model.is_file():
        ap.error(f"--hog-model {args.hog_model}: no such file; give a .gguf path")
    bench.one_process_args(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with bench.one_process_pair(args, "localspec-stall-") as pair:
        print(run(args, pair))
    return 0


if __name__ == "__main__":
    sys.exit(main())
