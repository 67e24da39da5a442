#!/usr/bin/env python3
"""Two checkouts' planners side by side in ONE process, reply by reply, against plain decoding.

bench.py gives each scenario its own measurements, but what a planner learns in one reply and
carries into the next (a first reply that keeps the draft out of the replies after it) shows only in
a run of many replies, and a ratio of two bench.py runs carries the drift between them. Here the
other checkout's localspec/ is imported under another name and loads the same pair a second time;
its planner and this checkout's answer the same prompts, alternating with target-only decoding, in an
order that changes from reply to reply (bench.reply_order). Each keeps its own measurements over the
whole run, as a process serving those replies would. Prints each planner's tokens/s against
target-only, over decoding and with the draft's prompt intakes counted, with paired 90% intervals,
and this checkout's against the other's.

A planner's replies in one process are tied together by what it learnt in the earlier ones (a first
reply that probed a long copy early speeds up all the others), so the paired interval, which
resamples replies, does not say how far another run would move: two runs of old against new on
the copy set put "this" ahead by 1.20x and by 1.16x with either checkout as "this". --processes N
runs N such processes in turn (fresh pairs, each planner starting from no saved plans) and prints
this / other for each and their geometric mean with a t interval over the processes.

    git worktree add /tmp/before HEAD~1
    python scripts/bench_planners.py --other /tmp/before --prompt-set mixed --n-prompts 8 --rounds 2 \\
        --target big.gguf --draft small.gguf
"""

from __future__ import annotations

import argparse
import importlib
import math
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets, the reply order and the paired interval)
import numpy as np  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec import config as this_config, sampling as this_sampling, session as this_session  # noqa: E402

OTHER = "localspec_other"  # the name the other checkout's package is imported under


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--other", type=Path, required=True, help="another checkout of localspec (its localspec/ is used)")
    bench.add_one_process_args(ap, "mixed", 8, 96)
    ap.add_argument("--drafter", choices=["model", "hybrid", "ngram"], default="model")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--processes", type=int, default=1,
                    help="runs of the whole set, each with fresh pairs whose planners start from no saved plans "
                         "(default 1: one run, whose planners start from the store's plans)")
    args = ap.parse_args(argv)
    if args.processes < 1:
        ap.error(f"--processes {args.processes}: give 1 or more")
    if not (args.other / "localspec" / "session.py").is_file():
        ap.error(f"--other {args.other} holds no localspec/session.py; give a checkout of localspec")
    bench.one_process_args(ap, args)
    return args


def import_other(checkout: Path, into: Path):
    """The other checkout's localspec, copied into `into` and imported as OTHER (its imports are relative)."""
    shutil.copytree(checkout / "localspec", into / OTHER, ignore=shutil.ignore_patterns("__pycache__"))
    for name in [m for m in sys.modules if m == OTHER or m.startswith(OTHER + ".")]:
        del sys.modules[name]  # a copy imported before, from another folder
    sys.path.insert(0, str(into))
    return [importlib.import_module(f"{OTHER}.{name}") for name in ("session", "config", "sampling")]


def reply(modules, pair, text: str, args, seed: int, gamma: int | None):
    """(tokens, decode seconds, decode + the draft's prompt intake, tokens drafted) of one reply."""
    session, config, sampling = modules
    cfg = config.GenerationConfig(max_tokens=args.max_tokens, seed=seed, gamma=gamma,
                                  sampling=sampling.SamplingParams(temperature=args.temperature),
                                  drafter=args.drafter if gamma is None else "model")
    *_, last = pair.stream(pair.prompt_tokens(text, True), cfg)
    s = last.stats
    return s.generated, s.total_s, s.total_s + s.draft_prefill_s, s.drafted


def run(args) -> dict[str, list[tuple[int, float, float, int]]]:
    """Every reply of every process, by scenario; with --processes > 1 each list holds process p's
    replies at [p * replies : (p + 1) * replies]."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    this = (this_session, this_config, this_sampling)
    results: dict[str, list] = {"target-only": [], "other": [], "this": []}
    with tempfile.TemporaryDirectory(prefix="localspec-planners-") as tmp:
        if args.quick:
            args.target, args.draft = bench.quick_pair(Path(tmp))
        other = import_other(args.other, Path(tmp))
        for process in range(args.processes):
            if args.processes > 1:
                print(f"process {process + 1} of {args.processes}", file=sys.stderr)
            one_process(args, texts, {"this": this, "other": other}, results)
    return results


def one_process(args, texts: list[str], checkouts: dict, results: dict[str, list]) -> None:
    """The set answered by fresh pairs of both checkouts, alternating with target-only, into results."""
    warm = args.processes == 1  # several processes: each planner starts from no saved plans
    pairs = {name: mods[0].Pair(args.target, args.draft,
                                mods[0].LoadOptions(n_ctx=args.ctx, threads=args.threads, warm_start=warm))
             for name, mods in checkouts.items()}
    # (label, modules, pair, gamma): target-only runs on this checkout's pair
    scenarios = [("target-only", checkouts["this"], "this", 0), ("other", checkouts["other"], "other", None),
                 ("this", checkouts["this"], "this", None)]
    try:
        for n, text in enumerate([t for _ in range(args.rounds) for t in texts]):
            for label, mods, pair, gamma in bench.reply_order(scenarios, n):
                results[label].append(reply(mods, pairs[pair], text, args, 1000 + n, gamma))
            print(f"reply {n}: " + "  ".join(f"{k} {v[-1][0] / v[-1][1]:.1f} tok/s" for k, v in results.items()),
                  file=sys.stderr)
    finally:
        for pair in pairs.values():
            pair.close()


def report(results: dict[str, list[tuple[int, float, float, int]]], processes: int = 1) -> str:
    """Each planner against target-only, over decoding and with intakes counted; this against the other."""
    def ratio(num, den, k, k_den):  # num's speed over den's, num's seconds read from column k, den's from k_den
        a, b = [(r[0], r[k]) for r in num], [(r[0], r[k_den]) for r in den]
        span = bench.paired_interval(a, b)
        return f"{bench.speed_of(a) / bench.speed_of(b):.3f}x" + (f" ({bench.interval_text(span)})" if span else "")
    plain = results["target-only"]
    lines = ["| planner | vs target-only, decoding | with the draft's intakes |", "|---|---|---|"]
    for label in ("other", "this"):
        lines.append(f"| {label} | {ratio(results[label], plain, 1, 1)} | {ratio(results[label], plain, 2, 1)} |")
    lines.append(f"| this / other | {ratio(results['this'], results['other'], 1, 1)} | "
                 f"{ratio(results['this'], results['other'], 2, 2)} |")
    return "\n".join(lines + process_lines(results, processes))


def process_lines(results: dict[str, list[tuple[int, float, float, int]]], processes: int) -> list[str]:
    """With several processes: this / other in each (over decoding), and their geometric mean with a
    90% t interval over the processes (each process one draw of what the planners learn)."""
    if processes < 2:
        return []
    size = len(results["this"]) // processes
    ratios = [bench.speed_of([(r[0], r[1]) for r in results["this"][p * size:(p + 1) * size]])
              / max(bench.speed_of([(r[0], r[1]) for r in results["other"][p * size:(p + 1) * size]]), 1e-300)
              for p in range(processes)]
    from scipy.stats import t as scipy_t  # (here: a GPU machine without scipy runs one process)
    logs = np.log(np.maximum(ratios, 1e-300))
    half = scipy_t.ppf(0.95, processes - 1) * logs.std(ddof=1) / math.sqrt(processes)
    mean = logs.mean()
    return ["", "this / other in each process: " + ", ".join(f"{r:.3f}x" for r in ratios),
            f"over the processes: {math.exp(mean):.3f}x (90%: {math.exp(mean - half):.2f}-{math.exp(mean + half):.2f}x)"]


def main(argv=None) -> int:
    args = parse_args(argv)
    print(report(run(args), args.processes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
