#!/usr/bin/env python3
"""Verify curves of several targets measured in ONE process, width by width in turn: which stored
form of the same weights verifies a wide batch for less on this machine.

What speculation gains rests on what a verify row costs beside the first: a step of γ drafts pays
v(γ + 1) where plain decoding pays v(1) a token. The weights' format sets it as much as the machine
does: on a CPU, one row reads every weight once (bound by memory), and each further row is compute
on the same weights, which F16 does through a conversion to F32 and BF16, on a CPU with AVX512_BF16,
with one instruction. Each target is loaded here side by side and each width decoded on every
target in turn, a one-row decode before each as a run alternates with plain steps, so the machine's
pace, which drifts by tens of percent over minutes on a shared host, moves every curve alike.
Prints the median ms per width, each width in one row's time, and what a second row adds.

    localspec models convert qwen2.5-coder-heavy --quant BF16 -o /tmp/heavy-bf16.gguf
    python scripts/bench_verify_curves.py --targets qwen2.5-coder-heavy,/tmp/heavy-bf16.gguf
    python scripts/bench_verify_curves.py --quick      # SmolLM2 and a Q4_0 copy of it: the table's shape
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bench  # noqa: E402  (the one model resolver of its scripts)
from bench_rpc_costs import PROMPT, timed  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.context import Context  # noqa: E402
from localspec.llama import LlamaError, Model  # noqa: E402


BATCH = 512  # the rows one decode takes (localspec.context.Context's n_batch): a verify is one decode


def context_size(widths: Sequence[int], reps: int) -> int:
    """The context a run fills: the prompt, one token kept by every timed decode (bench_rpc_costs.timed),
    a one-row and a width's decode per width and repetition (measure), and the widest decode's rows."""
    return len(PROMPT) + 2 * reps * len(widths) + max(widths)


def measure(ctxs: dict, widths: Sequence[int], reps: int,
            decode: Callable[[object, int], float] = lambda ctx, w: timed(ctx, w, "all")) -> dict:
    """{(name, width): [seconds, ...]}: for each repetition, each width in turn on every target in
    turn, a one-row decode before each (not counted), so that every target sees the same pace."""
    seen: dict = {(name, w): [] for name in ctxs for w in widths}
    for _ in range(reps):
        for w in widths:
            for name, ctx in ctxs.items():
                decode(ctx, 1)
                seen[(name, w)].append(decode(ctx, w))
    return seen


def report(seen: dict, names: Sequence[str], widths: Sequence[int]) -> str:
    """The markdown table of median ms per width, and each width in one row's time, per target."""
    ms = {key: 1000 * statistics.median(v) for key, v in seen.items()}
    lines = ["| width | " + " | ".join(f"{n} ms" for n in names) + " | "
             + " | ".join(f"{n} / one row" for n in names) + " |",
             "|---|" + "---|" * (2 * len(names))]
    for w in widths:
        lines.append(f"| {w} | " + " | ".join(f"{ms[(n, w)]:.1f}" for n in names) + " | "
                     + " | ".join(f"{ms[(n, w)] / ms[(n, 1)]:.2f}" for n in names) + " |")
    if 1 in widths and 2 in widths:
        lines.append("a second row adds: " + ", ".join(
            f"{n} {ms[(n, 2)] - ms[(n, 1)]:.1f} ms ({ms[(n, 2)] / ms[(n, 1)] - 1:.0%} of one row)" for n in names))
    return "\n".join(lines)


def main() -> None:
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", help="comma-separated .gguf paths or model names, as bench.py takes them")
    ap.add_argument("--widths", default="1,2,3,4,6,8,12,16", help="verify widths in rows (1 is always measured)")
    ap.add_argument("--reps", type=int, default=12, help="repetitions of every width (medians are printed)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="SmolLM2 and a Q4_0 copy of it, 2 repetitions")
    args = ap.parse_args()
    try:
        widths = sorted({1, *(int(w) for w in args.widths.split(","))})
    except ValueError:
        ap.error(f"--widths {args.widths!r}: give rows as integers, e.g. 1,2,4,8")
    if min(widths) < 1 or args.reps < 1:
        ap.error(f"--widths {args.widths!r} --reps {args.reps}: widths and repetitions start at 1")
    if max(widths) > BATCH:
        ap.error(f"--widths {args.widths!r}: at most {BATCH} rows, what one llama.cpp decode takes")
    with tempfile.TemporaryDirectory(prefix="verify-curves-") as tmp:
        if args.quick:
            paths, args.reps = list(bench.quick_pair(Path(tmp))), 2
        elif not args.targets:
            ap.error("give --targets A,B (or --quick)")
        else:
            paths = bench.resolve_models(ap, *args.targets.split(","))
        names = [p.stem for p in paths]
        if len(set(names)) < len(names):
            names = [f"{i + 1}:{n}" for i, n in enumerate(names)]
        try:  # a file that is not a model llama.cpp can load, or threads it refuses: one line naming it
            models = [Model(p) for p in paths]
            ctxs = {n: Context(m, context_size(widths, args.reps), args.threads, BATCH) for n, m in zip(names, models)}
        except LlamaError as e:
            ap.error(str(e))
        for ctx in ctxs.values():
            ctx.decode(PROMPT, logits="none")
        print(f"{args.reps} repetitions, {args.threads} threads, each width on every target in turn")
        print(report(measure(ctxs, widths, args.reps), names, widths))


if __name__ == "__main__":
    main()
