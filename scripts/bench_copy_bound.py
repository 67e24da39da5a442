#!/usr/bin/env python3
"""The most any n-gram lookup could give on a prompt set, beside what localspec's drafters give, in ONE run.

A lookup drafts copies of earlier text. A copier that knew each reply in advance could draft, at each
position, any run of the reply that occurs earlier in the prompt or in the reply so far, and exactly as
far as pays: a step that drafts k tokens costs one verify of k + 1 rows and emits k + 1 tokens, a plain
step one row and one token. The least time over all such step sequences (a dynamic program over the
reply's positions) against plain decoding's is the bound: no lookup exceeds it on this machine's verify
curve, whatever its planner. Its ideal copier also starts a copy at its first token, which a lookup,
needing a key to find the copy's source, cannot.

Each prompt is answered by target-only decoding (T=0), then by each drafter (the same tokens: greedy
decoding is token-identical), in an order that changes from reply to reply (bench.reply_order); each
drafter plans from its own measurements, the first reply as a new process's, and keeps them over the
run. The verify curve is measured after the replies at each prompt's depth (the batches a first step
would verify, all rows' logits, the median of three). Each drafter's steps are priced on that curve
too ("by curve"), so that what separates it from the bound is what it drafted, not the machine's pace
at that moment.

    python scripts/bench_copy_bound.py --target big.gguf --draft small.gguf --prompt-set copy \\
        --n-prompts 4 --max-tokens 160 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the reply order)
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import Pair  # noqa: E402
from localspec.stats import GenerationStats  # noqa: E402

CURVE_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # rows measured; linear between
CURVE_REPEATS = 3


def copyable_runs(context: Sequence[int], reply: Sequence[int]) -> list[int]:
    """For each position i of reply, the longest run reply[i:i+L] that also starts at an earlier
    position of context + reply (it may run on into the reply itself, as a repeat does)."""
    full = list(context) + list(reply)
    runs = []
    for i in range(len(reply)):
        p, best = len(context) + i, 0
        for s in range(p):
            n = 0
            while p + n < len(full) and full[s + n] == full[p + n]:
                n += 1
            best = max(best, n)
        runs.append(best)
    return runs


def bound(runs: Sequence[int], verify: Callable[[int], float], cap: int) -> tuple[float, list[int]]:
    """The least seconds to emit len(runs) tokens where position i may draft up to min(runs[i], cap)
    tokens, a step of k drafted costing verify(k + 1) and emitting k + 1; and its steps' verify widths."""
    n = len(runs)
    best, width = [0.0] * (n + 1), [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i], width[i] = verify(1) + best[i + 1], 1
        for k in range(1, min(runs[i], cap, n - i - 1) + 1):  # the last token of the reply is never drafted
            seconds = verify(k + 1) + best[i + k + 1]
            if seconds < best[i]:
                best[i], width[i] = seconds, k + 1
    steps, i = [], 0
    while i < n:
        steps.append(width[i])
        i += width[i]
    return best[0], steps


def curve_of(points: dict[int, float]) -> Callable[[int], float]:
    """Seconds for k rows, linear between the measured widths (flat beyond the widest)."""
    ks = np.array(sorted(points), dtype=float)
    ts = np.array([points[k] for k in sorted(points)])
    return lambda k: float(np.interp(k, ks, ts))


def measure_curve(pair: Pair, prompt: Sequence[int], filler: Sequence[int]) -> dict[int, float]:
    """Seconds to verify each CURVE_WIDTHS batch at the prompt's depth: the prompt's last token and
    k - 1 of filler (the reply: token ids barely move a batch's cost), every row's logits, after the
    rest of the prompt (the cache holds the last reply's prompt: what this one shares is kept)."""
    ctx = pair.target_ctx
    held = ctx.reuse_prefix(prompt[:-1])
    ctx.decode(prompt[held:-1], logits="none")
    base = len(ctx.tokens)
    rows = [prompt[-1], *(list(filler) * (CURVE_WIDTHS[-1] // max(len(filler), 1) + 1))]
    points = {}
    for k in CURVE_WIDTHS:
        seconds = []
        for _ in range(CURVE_REPEATS):
            t = time.perf_counter()
            ctx.decode(rows[:k], logits="all")
            seconds.append(time.perf_counter() - t)
            ctx.truncate(base)
        points[k] = statistics.median(seconds)
    return points


def streamed(pair: Pair, prompt: list[int], cfg: GenerationConfig) -> tuple[list[int], GenerationStats]:
    """The tokens of one reply and its stats."""
    tokens, stats = [], None
    for item in pair.stream(prompt, cfg):
        if hasattr(item, "stats"):
            stats = item.stats
        elif item.token >= 0:
            tokens.append(item.token)
    return tokens, stats


def reply(pair: Pair, prompt: list[int], args, drafter: str, gamma: int | None) -> tuple[list[int], float, list[int], float]:
    """(tokens, decode seconds, each step's verify width, the draft's seconds) of one greedy reply."""
    cfg = GenerationConfig(max_tokens=args.max_tokens, gamma=gamma, seed=0, drafter=drafter, trace=True,
                           sampling=SamplingParams(temperature=0.0))
    tokens, stats = streamed(pair, prompt, cfg)
    return tokens, stats.total_s, [len(batch) for _, batch, _ in stats.trace], stats.draft_s


def run(args, pair: Pair) -> tuple[list[dict], list[str]]:
    """One record per reply: its prompt's number and round, and per scenario (tokens, seconds, widths)."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    prompts = [pair.prompt_tokens(t, True) for t in texts]
    scenarios = ["target-only", *args.drafters]
    trackers: dict[str, dict] = {name: {} for name in scenarios}
    records, notes = [], []
    for n, i in enumerate([i for _ in range(args.rounds) for i in range(len(prompts))]):
        record = {"prompt": i, "round": n // len(prompts)}
        for name in bench.reply_order(scenarios, n):
            pair.trackers = trackers[name]  # each plans from its own measurements, as its own process would
            record[name] = reply(pair, prompts[i], args, "ngram" if name == "target-only" else name,
                                 0 if name == "target-only" else None)
        plain = record["target-only"][0]
        for name in args.drafters:
            if record[name][0] != plain:
                notes.append(f"reply {n}: {name}'s tokens differ from target-only's (greedy on a non-deterministic build?)")
        print(f"reply {n} (prompt {i}): " + "  ".join(
            f"{name} {len(r[0]) / r[1]:.1f} tok/s {r[2] if name != 'target-only' else ''}" for name, r in
            ((name, record[name]) for name in scenarios)), file=sys.stderr, flush=True)
        records.append(record)
    curves = [curve_of(measure_curve(pair, p, records[i]["target-only"][0])) for i, p in enumerate(prompts)]
    for record in records:
        verify = curves[record["prompt"]]
        tokens = record["target-only"][0]
        record["bound"] = bound(copyable_runs(prompts[record["prompt"]], tokens), verify, args.cap)
        record["plain_by_curve"] = len(tokens) * verify(1)
        record["by_curve"] = {name: sum(verify(w) for w in record[name][2]) for name in args.drafters}
    return records, notes


def report(records: list[dict], drafters: Sequence[str]) -> str:
    """Per drafter and over the first round and the rest: measured speed over target-only's, the same
    priced on the curve, and the bound's, each a ratio of summed tokens over summed seconds."""
    lines = ["| replies | drafter | measured vs target-only | by curve | bound (by curve) | by curve / bound |",
             "|---|---|---|---|---|---|"]
    groups = [("first round", [r for r in records if r["round"] == 0]),
              ("later rounds", [r for r in records if r["round"] > 0])]
    if groups[1][1]:
        groups.append(("all", records))
    for label, rows in groups:
        if not rows:
            continue
        plain_s = sum(r["target-only"][1] for r in rows)
        plain_curve = sum(r["plain_by_curve"] for r in rows)
        bound_x = plain_curve / sum(r["bound"][0] for r in rows)
        for name in drafters:
            measured = plain_s / sum(r[name][1] for r in rows)
            by_curve = plain_curve / sum(r["by_curve"][name] for r in rows)
            lines.append(f"| {label} ({len(rows)}) | {name} | {measured:.2f}x | {by_curve:.2f}x | {bound_x:.2f}x | "
                         f"{by_curve / bound_x:.0%} |")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_one_process_args(ap, "copy", 4, 160)
    ap.add_argument("--drafters", default="ngram,hybrid", help="comma-separated: ngram, hybrid")
    ap.add_argument("--cap", type=int, default=GenerationConfig().ngram_gamma_max,
                    help="the most the bound's copier drafts a step (localspec's lookup cap by default)")
    args = ap.parse_args(argv)
    args.drafters = [d for d in args.drafters.split(",") if d]
    for d in args.drafters:
        if d not in ("ngram", "hybrid"):
            ap.error(f"--drafters: unknown drafter {d!r}; choose from ngram, hybrid")
    bench.one_process_args(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with bench.one_process_pair(args, "localspec-bound-") as pair:
        records, notes = run(args, pair)
    print(report(records, args.drafters))
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
