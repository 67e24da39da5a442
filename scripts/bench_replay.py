#!/usr/bin/env python3
"""A prompt set's real replies replayed at a GPU's costs, with localspec's real controller, on any CPU.

bench_fast_regime.py times the controller beside millisecond steps on a text's tokens, its prompt 40
of them: a copy there comes only from what repeats inside the reply. Here the target answers each
prompt once, greedily, on this machine (the prompt through its chat template, as bench.py --chat
sends it); then each scenario answers the same prompts again on timed fakes (bench_fakes.TimedRows)
whose rows follow those very replies, so the n-gram lookup finds what it would find in them: a copy
set's prompt holds the code its reply repeats. The fakes' decodes last as --curve and the other
cost flags say (a GPU's, measured with bench_rpc_costs.py); the draft agrees with every other
token. Each scenario keeps its trackers over the whole run, as one process would, and what a first
decode of each width costs (--first-ms) is paid once a run. Prints each scenario's tokens/s against
plain decoding over every reply, the controller's µs a token, tokens drafted a reply, and each
reply's ratio (a first reply that drafted nothing shows there); --parts, where the controller's time
goes, as bench_fast_regime.py --parts times it.

    python scripts/bench_replay.py --prompt-set copy --n-prompts 4 --max-tokens 160 --rounds 3 \\
        --target T.gguf --draft D.gguf --curve 1:1.81,2:3.9,3:4.0,4:4.1,8:5.5,16:7.4,40:9.3 \\
        --draft-ms 1.17 --after-wide-ms 5,3 --first-ms 5          # and --warm-up
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the one-process pair)
import numpy as np  # noqa: E402
from bench_fast_regime import PARTS, SCENARIOS, curve_arg, ms_list, one_ms, run, time_parts, timed_pair  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.llama import Model  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_one_process_args(ap, "copy", 4, 160)
    ap.add_argument("--curve", type=curve_arg, required=True,
                    help="the target's decode ms by rows, ROWS:MS,... (bench_rpc_costs.py prints it)")
    ap.add_argument("--draft-ms", type=one_ms, default=1.2, help="a draft decode (default 1.2)")
    ap.add_argument("--after-wide-ms", type=ms_list, default=[],
                    help="ms the first, second, ... one-token decode after a wider one takes longer")
    ap.add_argument("--first-ms", type=one_ms, default=0.0, help="ms the first decode of each width takes longer")
    ap.add_argument("--warm-up", action="store_true", help="decode each verify width once first, as a Pair on a GPU")
    ap.add_argument("--scenarios", default="plain,ngram,hybrid")
    ap.add_argument("--parts", action="store_true", help="time the controller's parts, µs a token")
    args = ap.parse_args(argv)
    kinds = args.scenarios.split(",")
    if "plain" not in kinds or any(k not in SCENARIOS for k in kinds):
        others = ", ".join(k for k in SCENARIOS if k != "plain")
        ap.error(f"--scenarios {args.scenarios}: give plain and any of {others}, comma-separated")
    bench.one_process_args(ap, args)
    return args


def replies(args) -> tuple[Model, list[tuple[list[int], list[int]]]]:
    """The target's vocabulary and each prompt's (tokens, greedy reply tokens ending in its end token)."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    out = []
    with bench.one_process_pair(args, "localspec-replay-") as pair:
        model = pair.target_model
        for text in texts:
            prompt = pair.prompt_tokens(text, True)
            config = GenerationConfig(max_tokens=args.max_tokens, gamma=0, sampling=SamplingParams(temperature=0))
            *_, reply = pair.stream(prompt, config)
            out.append((prompt, model.tokenize(reply.text, add_special=False) + [model.eos()]))
        return Model(model.path, vocab_only=True), out  # (the pair's model is freed with it)


def replay(model: Model, sets: list[tuple[list[int], list[int]]], args) -> dict[str, list[tuple[float, ...]]]:
    """Each scenario's (seconds, controller µs a token, drafted, then with --parts each part's µs a
    token) reply by reply, the scenarios in turn for each reply, each keeping its trackers over the run."""
    kinds = args.scenarios.split(",")
    kept: dict[str, dict] = {k: {} for k in kinds}
    results: dict[str, list] = {k: [] for k in kinds}
    shapes: tuple[set, set] = (set(), set())  # each model's widths decoded so far: their first decodes' extra once
    for n in range(args.rounds * len(sets)):
        prompt, reply = sets[n % len(sets)]
        target, draft = timed_pair(model, prompt + reply, args, args.draft_ms)
        target.shapes, draft.shapes = shapes
        if args.warm_up and n == 0:
            target.warm_up()
            draft.warm_up(logits="last")
        args.tokens = min(args.max_tokens, len(reply) - 1)
        for kind in kinds:
            rate, us, drafted, *parts = run(kind, target, draft, prompt, args, kept[kind])
            results[kind].append((args.tokens / rate, us, drafted, *parts))
    return results


def report(results: dict[str, list[tuple[float, ...]]], parts: bool = False) -> str:
    """The table: each scenario's plain seconds over its own, over every reply and reply by reply;
    parts: each row carries the controller's parts too (--parts), a column each."""
    plain = [row[0] for row in results["plain"]]
    parts = list(PARTS) if parts else []
    lines = ["| scenario | vs plain, every reply | controller µs / token |"
             + "".join(f" {part} |" for part in parts) + " drafted / reply | each reply |",
             "|---|---|---|" + "---|" * len(parts) + "---|---|"]
    for kind, rows in results.items():
        seconds = [row[0] for row in rows]
        each = " ".join(f"{p / s:.2f}" for s, p in zip(seconds, plain))
        spent = "".join(f" {np.mean([row[3 + i] for row in rows]):.0f} |" for i in range(len(parts)))
        lines.append(f"| {kind} | {sum(plain) / sum(seconds):.3f}x | {np.mean([row[1] for row in rows]):.0f} |"
                     f"{spent} {np.mean([row[2] for row in rows]):.0f} | {each} |")
    return "\n".join(lines)


def main() -> None:
    args = parse_args()
    args.calls = args.pricings = False  # (bench_fast_regime.run's counters)
    if args.parts:
        time_parts()
    args.plain_ms = args.row_ms = 0.0  # (timed_pair's: --curve times every decode)
    model, sets = replies(args)
    print(f"{len(sets)} prompts x {args.rounds} rounds, replies of up to {args.max_tokens} tokens replayed at "
          + ", ".join(f"{rows} rows {ms * 1e3:g} ms" for rows, ms in args.curve)
          + (f"; one-row decodes after a wider one +{', +'.join(f'{ms:g}' for ms in args.after_wide_ms)} ms"
             if args.after_wide_ms else "")
          + (f"; a width's first decode +{args.first_ms:g} ms" if args.first_ms else "")
          + ("; every verify width decoded once first" if args.warm_up else ""))
    print(report(replay(model, sets, args), args.parts))


if __name__ == "__main__":
    main()
