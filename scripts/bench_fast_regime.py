#!/usr/bin/env python3
"""Auto against plain decoding where a step takes about a millisecond (a GPU), simulated on any CPU.

The target and the draft are fake contexts over Qwen's real vocabulary (bench_fakes.TimedRows) whose
decodes last a set time in a busy wait: --plain-ms a decode, --row-ms more per verify row, and
--draft-ms a draft decode. Everything else is localspec's own controller, planner and numpy on
151,936-wide rows, timed for real: what this measures is what the controller costs beside steps
that short. The reply is a seeded random token sequence (the n-gram lookup finds nothing in it),
or a text file's tokens (--text: what the lookup finds in prose and code), and the draft agrees
with every other token. Each --draft-ms is one setting: with a draft token dearer than a plain
step, no draft can pay and auto should match plain; with a cheap one, the model pays. Scenarios
run in turn, plain first and last, each with its own new trackers per round (--keep: one set per
scenario kept across its rounds, as a chat session or the server keeps them); ratios are to the
mean of this run's plain replies.

    python scripts/bench_fast_regime.py                          # 1 ms steps, drafts 1.2 and 0.5 ms
    python scripts/bench_fast_regime.py --plain-ms 3 --row-ms 0.3 --draft-ms 3.5
    python scripts/bench_fast_regime.py --plain-ms 2 --row-ms 0.1 --draft-ms 3.3 --text README.md
    python scripts/bench_fast_regime.py --curve 1:1.9,2:5.4,6:5.9,36:10.3 --draft-ms 1.7 --text README.md

--calls counts localspec's own Python function calls a token: what the controller does per step,
the same on every machine, where a busy machine's timings move more than a change of a few
microseconds. Counting slows the controller (the tok/s and µs columns are then not comparable with
a run without it), and the planner, which times its own pricing, rests a losing choice longer.
--pricings counts the sources priced a reply (Planner._probe: once a source a pricing step) at
the controller's own pace. --parts times where the controller's time goes, µs a token: choosing each
step (Planner.plan), and within it pricing the offers (Planner._choose) and asking the drafters for
them (Planner._offers), and teaching the planner what a step measured (Planner.record); the rest of
the controller's time is reading the rows, the rule, the text and the loop. Each timed call adds
about a microsecond of its own.

--first-ms makes the first decode of each batch width (the prompt's intake too) that much longer,
in both contexts, as a GPU's are where a width's kernels load at their first launch; --warm-up
decodes each verify width once before the first reply, as a Pair does at load on a GPU
(Context.warm_up). Kernels stay loaded across rounds, as in one process.

--curve gives the target's verify cost as measured, rows to milliseconds (linear between its
points, along the last segment beyond), for curves no straight line fits: on the H200 a 2-row
verify cost 2.5-3 plain steps and a 36-row one 5 (README, the H200 run).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.config import GenerationConfig  # noqa: E402
from localspec.drafters import NGramDrafter  # noqa: E402
from localspec.llama import Model  # noqa: E402
from localspec.planner import Planner  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import make_sources  # noqa: E402
from localspec.speculative import Finished, SpeculativeDecoder  # noqa: E402

from bench_fakes import TimedRows, light_models, parse_curve  # noqa: E402
from script_args import Parser  # noqa: E402

SCENARIOS = {"plain": (), "ngram": ("ngram",), "model": ("model",), "hybrid": ("ngram", "model")}


def contexts(vocab: Model, args, draft_ms: float) -> tuple[TimedRows, TimedRows, list[int]]:
    """The target, the draft (agreeing on every other token) and the reply's tokens."""
    if args.text:  # a real text's tokens: the lookup finds what it would find in such a reply
        try:
            text = args.text.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            sys.exit(f"--text {args.text}: {e}; give a text file")
        script = vocab.tokenize(text, add_special=False)[:50_000]
    else:
        script = [int(t) for t in np.random.default_rng(0).integers(1000, 100_000, 50_000)]
    need = 1000 * (args.rounds - 1) + 40 + args.tokens + 1  # the last round's prompt and reply
    if len(script) < need:
        sys.exit(f"--text {args.text}: {len(script)} tokens, {need} needed for {args.rounds} rounds of "
                 f"{args.tokens} tokens; give a longer text, or fewer --rounds or --tokens")
    target, draft = timed_pair(vocab, script, args, draft_ms)
    if args.warm_up:  # as a Pair on a GPU does at load
        target.warm_up()
        draft.warm_up(logits="last")
    return target, draft, script


def timed_pair(vocab: Model, script: list[int], args, draft_ms: float) -> tuple[TimedRows, TimedRows]:
    """A target whose rows follow script, timed as args say (--plain-ms and --row-ms or --curve,
    --after-wide-ms, --first-ms), and a draft of draft_ms a decode that agrees with every other token."""
    target = TimedRows(vocab, 0, args.plain_ms / 1e3, args.row_ms / 1e3, curve=args.curve, script=script,
                       after_wide=[ms / 1e3 for ms in args.after_wide_ms], first_s=args.first_ms / 1e3)
    draft = TimedRows(vocab, 1, draft_ms / 1e3, script=[t if i % 2 else t + 1 for i, t in enumerate(script)],
                      first_s=args.first_ms / 1e3)
    return target, draft


class CallCount:
    """A profile hook (sys.setprofile) that counts calls of localspec's Python functions."""

    def __init__(self):
        self.calls = 0

    def __call__(self, frame, event, arg) -> None:
        if event == "call" and f"{os.sep}localspec{os.sep}" in frame.f_code.co_filename:
            self.calls += 1


PRICED = [0]  # sources priced so far (--pricings: Planner._probe, counted)


def count_pricings() -> None:
    """Count every Planner._probe call in PRICED."""
    probe = Planner._probe

    def counted(self, *args, **kwargs):
        PRICED[0] += 1
        return probe(self, *args, **kwargs)

    Planner._probe = counted


# what --parts times, inclusive (pricing and offers are part of plan), and the seconds spent in each so far
PARTS = {"plan": "plan", "pricing": "_choose", "offers": "_offers", "record": "record"}
SPENT = dict.fromkeys(PARTS, 0.0)


def time_parts() -> None:
    """Time every call of each PARTS method of Planner into SPENT."""
    for part, name in PARTS.items():
        setattr(Planner, name, _timed(part, getattr(Planner, name)))


def _timed(part: str, method):
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT[part] += time.perf_counter() - t0
    return timed


def run(kind: str, target: TimedRows, draft: TimedRows, prompt: list[int], args,
        trackers: dict) -> tuple[float, ...]:
    """One reply: (tokens/s, controller µs per token, tokens drafted), then with --calls localspec's
    calls a token, with --pricings the sources priced and with --parts each part's µs a token;
    trackers: the scenario's."""
    config = GenerationConfig(max_tokens=args.tokens, gamma=None if SCENARIOS[kind] else 0,
                              sampling=SamplingParams(temperature=0), seed=1)
    target.truncate(0)
    draft.truncate(0)
    target.decode_s = draft.decode_s = 0.0
    sources = make_sources(SCENARIOS[kind], draft, config, trackers, NGramDrafter())
    count, PRICED[0] = CallCount() if args.calls else None, 0
    SPENT.update(dict.fromkeys(PARTS, 0.0))
    t0 = time.perf_counter()
    sys.setprofile(count)
    try:
        *_, finished = SpeculativeDecoder(target, sources).generate(prompt, config)
    finally:
        sys.setprofile(None)
    wall = time.perf_counter() - t0
    assert isinstance(finished, Finished)
    n = finished.stats.generated
    row = n / wall, 1e6 * (wall - target.decode_s - draft.decode_s) / n, finished.stats.drafted
    parts = tuple(1e6 * SPENT[part] / n for part in PARTS) if args.parts else ()
    return row + ((count.calls / n,) if count else ()) + ((PRICED[0],) if args.pricings else ()) + parts


def curve_arg(text: str) -> list[tuple[int, float]]:
    """--curve's value, or argparse's one-line error naming it."""
    try:
        return parse_curve(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def one_ms(text: str) -> float:
    """One value in milliseconds (--first-ms), or argparse's one-line error naming it."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: give one value in milliseconds, not below 0 (e.g. 5)")
    return value


def ms_list(text: str) -> list[float]:
    """A list of milliseconds (--draft-ms, --after-wide-ms), or argparse's one-line error naming it."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or any(not 0 <= v < math.inf for v in values):  # (nan and inf too: a wait without end)
        raise argparse.ArgumentTypeError(f"{text!r}: give milliseconds not below 0, comma-separated (e.g. 1.2,1.0)")
    return values


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])  # its first paragraph, rewrapped
    parser.add_argument("--plain-ms", type=float, default=1.0, help="a target decode (default 1.0)")
    parser.add_argument("--row-ms", type=float, default=0.1, help="more per verify row (default 0.1)")
    parser.add_argument("--curve", type=curve_arg, help="the target's decode ms by rows, ROWS:MS,... "
                        "(e.g. 1:1.9,2:5.4,36:10.3; replaces --plain-ms and --row-ms)")
    parser.add_argument("--after-wide-ms", type=ms_list, default=[],
                        help="ms the first, second, ... one-token decode after a wider one takes longer, "
                             "comma-separated (a GPU's: see timings.ReturnCost; default none)")
    parser.add_argument("--first-ms", type=one_ms, default=0.0,
                        help="ms the first decode of each batch width takes longer (a GPU loading its kernels; "
                             "default 0)")
    parser.add_argument("--warm-up", action="store_true",
                        help="decode each verify width once before the first reply, as a Pair on a GPU does")
    parser.add_argument("--draft-ms", type=ms_list, default="1.2,0.5",
                        help="draft decode(s), comma-separated (default 1.2,0.5)")
    parser.add_argument("--tokens", type=int, default=300, help="tokens per reply (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="replies per scenario (default 5)")
    parser.add_argument("--scenarios", default="plain,ngram,model,hybrid,plain")
    parser.add_argument("--keep", action="store_true", help="keep each scenario's trackers across its rounds")
    parser.add_argument("--text", type=Path, help="reply tokens from this text file (default: random tokens)")
    parser.add_argument("--calls", action="store_true", help="count localspec's Python calls a token")
    parser.add_argument("--pricings", action="store_true", help="count the sources priced a reply")
    parser.add_argument("--parts", action="store_true", help="time the controller's parts, µs a token")
    args = parser.parse_args()
    vocab = Model(*light_models("target"), vocab_only=True)  # the light target's vocabulary
    kinds = args.scenarios.split(",")
    costs = (", ".join(f"{rows} rows {ms * 1e3:g} ms" for rows, ms in args.curve) if args.curve
             else f"plain decode {args.plain_ms} ms + {args.row_ms} ms a verify row")
    if args.after_wide_ms:
        slower = ", ".join(f"+{ms:g}" for ms in args.after_wide_ms)
        costs += f"; after a wider decode the next one-token decodes {slower} ms"
    if args.first_ms:
        costs += f"; the first decode of each width +{args.first_ms:g} ms"
    if args.warm_up:
        costs += "; each verify width decoded once before the first reply"
    print(f"{costs}; {args.tokens} tokens x {args.rounds}"
          f"{'; trackers kept across rounds' if args.keep else ''}")
    counted = " localspec calls / token |" * args.calls + " pricings / reply |" * args.pricings
    counted += "".join(f" {part} µs / token |" for part in PARTS) * args.parts
    print("| draft ms | scenario | tok/s | vs plain | controller µs / token | drafted / reply |" + counted)
    print("|---|---|---|---|---|---|" + "---|" * (args.calls + args.pricings + len(PARTS) * args.parts))
    if args.pricings:
        count_pricings()
    if args.parts:
        time_parts()
    for draft_ms in args.draft_ms:
        target, draft, script = contexts(vocab, args, draft_ms)
        results: dict[str, list[tuple[float, ...]]] = {k: [] for k in kinds}  # run()'s rows
        kept: dict[str, dict] = {k: {} for k in kinds}
        for r in range(args.rounds):
            for kind in kinds:
                trackers = kept[kind] if args.keep else {}
                results[kind].append(run(kind, target, draft, script[1000 * r: 1000 * r + 40], args, trackers))
        plain = np.mean([row[0] for row in results["plain"]]) if "plain" in results else float("nan")
        for kind, rows in results.items():
            rate, us, drafted, *counts = (np.mean(column) for column in zip(*rows))
            counts = "".join(f" {c:.1f} |" for c in counts)
            print(f"| {draft_ms:g} | {kind} | {rate:.0f} | {rate / plain:.3f}x | {us:.0f} | {drafted:.0f} |{counts}",
                  flush=True)


if __name__ == "__main__":
    main()
