#!/usr/bin/env python3
"""The planner's forecasts against what its steps then measured, on a prompt set, in ONE process.

Before each step the planner prices the step it takes (Planner._choose): the tokens per second it
expects of the best known choice by the point estimate, of a probe by its optimistic estimate, or of
plain decoding. This script records that forecast and what the step measured (the tokens it emitted;
its seconds of drafting, verifying and judging: the step alone, not the controller's time between
steps) and sums them by kind of step and drafter. A forecast rate r_i is fixed before step i, so over
the steps sum(r_i * s_i), s_i their measured seconds, is what the forecasts expected them to emit:
"measured / forecast" near 1.0 is a planner whose estimates are right on average, above 1.0 a
cautious one, below an optimistic one. A known step's forecast is priced as the planner prices it
(a draft model under p-min auto drafts up to its offer, its rate the point estimate's γ's); a step
that brings a draft model up to the context first is listed apart, since its forecast spreads the
catch-up over the tokens the model may draft after it (Planner._catch_up_rate).

    python scripts/bench_forecast.py --target big.gguf --draft small.gguf \\
        --prompts scripts/prompts/prose.jsonl --chat --n-prompts 6 --max-tokens 96 --rounds 2
    python scripts/bench_forecast.py --quick      # SmolLM2 and its Q4_0 copy: the table's shape
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import NamedTuple, Sequence
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the one-process pair)
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.planner import Planner  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.stats import GenerationStats  # noqa: E402

# "plain, unpriced": a process's first steps, before a plain step is measured, and steps where no drafter offered
# a guess (the draft model resting between pricings counts: Planner._quiet)
KINDS = ("known", "known, catching up", "probe", "plain, measured again", "plain, priced", "plain, unpriced")
UNPRICED = ("plain, unpriced", "plain", 0.0)  # (kind, drafter, forecast) of a plan that prices nothing


class Step(NamedTuple):
    kind: str  # one of KINDS
    drafter: str  # the drafting source's name ("plain" for a plain step; for a plain step measured again, its probe's source)
    forecast: float  # tokens/s the planner expected (0.0: unpriced)
    tokens: int  # emitted
    seconds: float  # drafting, verifying and judging
    drafted: int  # guesses drafted


def kind_of(planner: Planner, choice) -> tuple[str, str]:
    """(kind, drafter) of the choice _choose just made."""
    exploring = planner.exploring
    if choice.source is None:
        if exploring is not None:
            return "plain, measured again", planner.sources[exploring][0].name
        return ("plain, priced" if choice.rate > 0 else "plain, unpriced"), "plain"
    name = planner.sources[choice.source][0].name
    if exploring is not None:
        return "probe", name
    return ("known, catching up" if planner._catch_up_s(choice.source) else "known"), name


@contextlib.contextmanager
def forecasts(steps: list[Step]):
    """While open, every step any Planner plans is appended to steps with its forecast."""
    plan, choose, record = Planner.plan, Planner._choose, Planner.record

    def planned(self, tokens, room):
        self._forecast = UNPRICED  # until _choose prices the step (it does not where nothing is offered, or at a fixed γ)
        return plan(self, tokens, room)

    def chosen(self, offers):
        choice = choose(self, offers)
        self._forecast = (*kind_of(self, choice), choice.rate)
        return choice

    def recorded(self, plan_, proposal, n_accepted, draft_s, verify_s, overhead_s, path=(), emitted=()):
        kind, drafter, rate = getattr(self, "_forecast", UNPRICED)
        steps.append(Step(kind, drafter, rate, len(emitted), draft_s + verify_s + overhead_s, len(proposal.ids)))
        return record(self, plan_, proposal, n_accepted, draft_s, verify_s, overhead_s, path, emitted)

    # patch.object puts back what each name was, an inherited one (record is Recording's) by removing the patch
    with mock.patch.object(Planner, "plan", planned), mock.patch.object(Planner, "_choose", chosen), \
            mock.patch.object(Planner, "record", recorded):
        yield steps


def summary(steps: Sequence[Step]) -> list[dict]:
    """One row per (kind, drafter) that occurred, in KINDS order: steps, tokens a step, ms a step, the
    measured rate, the forecast rate weighted by each step's seconds, and measured / forecast (None
    where no step of the row was priced)."""
    rows = []
    for kind in KINDS:
        for drafter in sorted({s.drafter for s in steps if s.kind == kind}):
            group = [s for s in steps if s.kind == kind and s.drafter == drafter]
            seconds, tokens = sum(s.seconds for s in group), sum(s.tokens for s in group)
            priced = [s for s in group if s.forecast > 0]
            expected = sum(s.forecast * s.seconds for s in priced)
            measured_priced = sum(s.tokens for s in priced)
            rows.append({
                "kind": kind, "drafter": drafter, "steps": len(group), "drafted": sum(s.drafted for s in group),
                "tokens_per_step": tokens / len(group), "ms_per_step": 1000 * seconds / len(group),
                "rate": tokens / max(seconds, 1e-300),
                "forecast": expected / max(sum(s.seconds for s in priced), 1e-300) if priced else None,
                "ratio": measured_priced / expected if expected > 0 else None,
            })
    return rows


def report(rows: Sequence[dict], title: str) -> str:
    lines = [title, "", "| step | drafter | steps | drafted | tokens a step | ms a step | measured tok/s | "
             "forecast tok/s | measured / forecast |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        forecast = "—" if r["forecast"] is None else f"{r['forecast']:.1f}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3f}"
        lines.append(f"| {r['kind']} | {r['drafter']} | {r['steps']} | {r['drafted']} | {r['tokens_per_step']:.2f} | "
                     f"{r['ms_per_step']:.1f} | {r['rate']:.1f} | {forecast} | {ratio} |")
    lines += ["", "A probe's forecast is its optimistic estimate, which it is taken on; every other row's is "
              "the point estimate."]
    return "\n".join(lines)


def run(args, pair) -> tuple[list[Step], list[GenerationStats]]:
    """Every prompt in turn, args.rounds times, through one pair (one process's planner measurements):
    the steps, and each reply's stats."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    prompts = [pair.prompt_tokens(text, bench.uses_chat(args)) for text in texts]
    steps: list[Step] = []
    stats = []
    with forecasts(steps):
        for n, prompt in enumerate([p for _ in range(args.rounds) for p in prompts]):
            config = GenerationConfig(max_tokens=args.max_tokens, seed=args.seed + n, drafter=args.drafter,
                                      sampling=SamplingParams(temperature=args.temperature, top_k=args.top_k))
            *_, last = pair.stream(prompt, config)
            stats.append(last.stats)
            print(f"reply {n}: {last.stats.generated} tokens in {last.stats.steps} steps", file=sys.stderr)
    return steps, stats


def parse_args(argv=None):
    ap = Parser(description=__doc__.split("\n\n")[0])
    bench.add_one_process_args(ap, "humaneval", 4, 96)
    ap.add_argument("--drafter", choices=["model", "ngram", "hybrid"], default="model")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--chat", action="store_true", help="apply the chat template to each prompt (edit, copy, mixed: always)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    bench.one_process_args(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with bench.one_process_pair(args, "localspec-forecast-") as pair:
        steps, _ = run(args, pair)
    title = (f"{Path(args.target).name} + {Path(args.draft).name}, {args.drafter} auto, T={args.temperature}, "
             f"{args.n_prompts} prompts x {args.max_tokens} tokens x {args.rounds} rounds, one process, warm start off")
    print(report(summary(steps), title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
