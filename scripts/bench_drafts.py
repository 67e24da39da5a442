#!/usr/bin/env python3
"""Several drafts for one target, side by side in ONE process: which stored form of a draft makes
speculation fastest on this machine.

A draft's form changes what speculation costs, never what the target says. On a CPU a small draft's
token costs what its kernels make of its types (ggml repacks Q4_0, Q4_K and IQ4_NL weights for its
fastest kernels and not Q5_0, which a 0.5B "Q4_K_M" holds most of) and of its output layer, the
largest matrix of a small model; how often its guesses are taken moves less. Each draft gets a Pair
of its own (planner and measurements of its own, as a process running only it would have), plain
decoding runs on the first, and each reply runs every scenario in an order in which, over the run,
each follows every other equally often (bench.reply_order), so the machine's pace, which drifts over
minutes on a shared host, moves all alike. Prints tok/s, the ratio to target-only with its paired
interval, α, and a draft token's ms.

    localspec models pull qwen2.5-coder-0.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_0
    python scripts/bench_drafts.py --target qwen2.5-coder-1.5b-instruct-f16 --chat \\
        --drafts qwen2.5-coder-0.5b-instruct-q4_k_m,qwen2.5-coder-0.5b-instruct-q4_0 \\
        --prompts scripts/prompts/prose.jsonl --n-prompts 4 --max-tokens 96 --rounds 3
    python scripts/bench_drafts.py --quick      # SmolLM2 and two Q4_0 copies of it: the table's shape
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bench  # noqa: E402  (prompts, the reply order, the paired interval, the model resolver)
from script_args import Parser  # noqa: E402
from localspec import models  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import LoadOptions, Pair  # noqa: E402
from localspec.stats import GenerationStats  # noqa: E402

PLAIN = "target only"


def parse_args(argv=None):
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", help="a .gguf path or a model's name, as bench.py takes it")
    ap.add_argument("--drafts", help="comma list of drafts (paths or names) to set side by side")
    ap.add_argument("--prompts", type=Path, help="JSONL file of {\"prompt\": ...} (default: --prompt-set)")
    ap.add_argument("--prompt-set", choices=["humaneval", "edit", "copy", "mixed"], default="humaneval")
    ap.add_argument("--n-prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--chat", action="store_true", help="apply the chat template to each prompt")
    ap.add_argument("--drafter", choices=["model", "hybrid"], default="model", help="what auto drafts with")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quick", action="store_true", help="tiny SmolLM2 target and two drafts, 2 prompts, 16 tokens")
    args = ap.parse_args(argv)
    if args.quick:
        args.n_prompts, args.max_tokens, args.rounds = 2, 16, 1
    elif not args.target or not args.drafts:
        ap.error("give --target and --drafts (or --quick)")
    else:
        names = [d.strip() for d in args.drafts.split(",") if d.strip()]
        args.target, *args.drafts = bench.resolve_models(ap, args.target, *names)
        if len(set(args.drafts)) != len(args.drafts) or not args.drafts:
            ap.error(f"--drafts {','.join(names)!r}: give each draft once")
    return args


def quick_models(tmp: Path) -> tuple[Path, list[Path]]:
    """SmolLM2, its Q4_0 copy, and a Q4_0 copy whose output layer is Q4_0 too."""
    target, draft = bench.quick_pair(tmp)
    second = tmp / "smol-q4_0-output.gguf"
    models.convert(target, second, "Q4_0", "Q4_0")
    return target, [draft, second]


def run(pairs: dict[str, Pair], texts: Sequence[str], args) -> dict[str, list[GenerationStats]]:
    """Every prompt, every round, every scenario (plain first in the name list, on the first pair) in
    reply_order; the stats of each scenario's replies in the run's order."""
    names = [PLAIN, *pairs]
    seen: dict[str, list[GenerationStats]] = {name: [] for name in names}
    first = next(iter(pairs.values()))
    sampling = SamplingParams(temperature=args.temperature)
    n = 0
    for r in range(args.rounds):
        for i, text in enumerate(texts):
            for name in bench.reply_order(names, n):
                pair = first if name == PLAIN else pairs[name]
                cfg = GenerationConfig(max_tokens=args.max_tokens, sampling=sampling, seed=1000 * r + i,
                                       gamma=0 if name == PLAIN else None, drafter=args.drafter)
                *_, reply = pair.stream(pair.prompt_tokens(text, args.chat), cfg)
                seen[name].append(reply.stats)
            n += 1
    return seen


def report(seen: dict[str, list[GenerationStats]]) -> str:
    """The markdown table: each scenario's tok/s and ratio to target-only with its paired interval,
    α (accepted / drafted), and a draft token's ms (the drafting seconds, catch-ups included, a token)."""
    base = bench.per_reply(seen[PLAIN])
    lines = ["| scenario | tok/s | vs target-only | 90% interval | drafted | α | draft ms/token |",
             "|---|---|---|---|---|---|---|"]
    for name, stats in seen.items():
        replies = bench.per_reply(stats)
        speed = bench.speed_of(replies)
        drafted, accepted = sum(s.drafted for s in stats), sum(s.accepted for s in stats)
        alpha = f"{accepted / drafted:.3f}" if drafted else ""
        per_token = f"{1e3 * sum(s.draft_s for s in stats) / drafted:.1f}" if drafted else ""
        span = "" if name == PLAIN else bench.interval_text(bench.paired_interval(replies, base))
        lines.append(f"| {name} | {speed:.1f} | {speed / bench.speed_of(base):.3f}x | {span} | {drafted} | "
                     f"{alpha} | {per_token} |")
    return "\n".join(lines)


@contextlib.contextmanager
def loaded(target: Path, drafts: Sequence[Path], args):
    """One Pair per draft, the target loaded in each (its weights mapped once, shared), closed at the end."""
    pairs: dict[str, Pair] = {}
    try:
        for d in drafts:
            pairs[Path(d).stem] = Pair(target, d, LoadOptions(n_ctx=args.ctx, threads=args.threads,
                                                              warm_start=False))
        yield pairs
    finally:
        for pair in pairs.values():
            pair.close()


def main(argv=None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-drafts-") as tmp:
        target, drafts = quick_models(Path(tmp)) if args.quick else (args.target, args.drafts)
        texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
        with loaded(target, drafts, args) as pairs:
            seen = run(pairs, texts, args)
    print(f"target {Path(target).name}, {len(texts)} prompts x {args.max_tokens} tokens x {args.rounds} rounds, "
          f"T={args.temperature:g}, {args.drafter} drafter at auto, {args.threads} threads")
    print(report(seen))
    print("\n".join(bench.order_notes(len(seen), len(texts) * args.rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
