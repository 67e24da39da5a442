#!/usr/bin/env python3
"""The most a draft model's chain could give on a prompt set at T=0, beside what localspec's model drafter gives, in ONE run.

At T=0 a chain's guess is taken where it is the target's greedy token. Each reply is answered by
target-only decoding; the draft then reads the prompt and the reply in one decode, which gives at every
position its guess (its most likely token), that guess's confidence (localspec's and llama.cpp's:
the top probability among the 10 most likely, sampling.top_probability) and its second guess. A chain
that starts at a position drafts the draft's guesses there and on; all are taken up to the first wrong
one. Priced on this machine's costs, measured right after each reply (the target's verify of k rows at the
prompt's depth, the draft's one-token decode; the pace moves between replies, and with it what a wider
verify costs against one row), three chains are compared over the same replies:

- oracle stops: a chain that drafts exactly as many of the next correct guesses as pays, never a wrong
  one, and skips the draft on a plain step (a dynamic program over the positions). A drafting step
  decodes k + 1 draft rows: the token before its first guess, and each guess (the last one at the next
  step's start). No chain drafted by this draft model exceeds it, whatever its stop rule;
- the best threshold rule in hindsight: the draft stops where its confidence falls below a threshold
  (one for the first guess, one for the rest), at most a cap, optionally with its second guess verified
  beside each guess below a third threshold (a T=0 token tree of leaves), or with every first guess
  drafted (as localspec's p-min auto drafts a step's first guess); every setting of a grid tried,
  the best kept (plain decoding among them). Each look at a confidence costs a draft decode, as it
  does in a real chain;
- a fixed γ (no stop rule), its best γ;
- localspec's own stop rule (p-min auto) replayed along the replies at the cap, its acceptance per
  confidence counted over them all: the rule apart from the planner's learning, γ and probes.

And localspec's model drafter (auto) itself, measured against target-only side by side (the two
alternate reply by reply), and priced on the same costs: its steps' verifies on each reply's curve,
its draft's seconds as measured ("by curve"). Beside them, how well each signal tells the draft's
right guesses from its wrong ones (the area under the ROC curve: 0.5 none, 1.0 perfectly).

    python scripts/bench_stop_bound.py --target big.gguf --draft small.gguf \\
        --prompts scripts/prompts/prose.jsonl --n-prompts 4 --max-tokens 96 --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np
from scipy.stats import mannwhitneyu

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the reply order)
from bench_copy_bound import bound, curve_of, reply  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.draftstop import DraftStop, confidence_bin  # noqa: E402
from localspec.sampling import top_probability  # noqa: E402
from localspec.session import Pair  # noqa: E402
from localspec.tracker import CostTracker  # noqa: E402

REPEATS = 3
REPLAY_ROUNDS = 6  # fixed-point iterations of the replayed rule's rate (replayed)
THRESHOLDS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
SIBLING_BELOW = (0.0, 0.5, 0.7, 0.9)  # 0: no siblings
BEFORE = (0.5, 0.7, 0.8, 0.9, 0.95)  # the target's confidence at the token before a first guess (Rule.before)


class Guesses(NamedTuple):
    """The draft at each position of a reply, given the reply before it: whether its guess is the
    target's token, its confidence, and whether its second guess is."""

    correct: np.ndarray  # [n] bool
    confidence: np.ndarray  # [n] float
    second: np.ndarray  # [n] bool
    before: np.ndarray  # [n] float: the target's confidence at the token before (1.0 at the reply's first)


class Costs(NamedTuple):
    verify: Callable[[int], float]  # seconds of a target decode of k rows
    draft: float  # seconds of a one-token draft decode


class Rule(NamedTuple):
    first: float  # the first guess is drafted where its confidence is at least this
    rest: float  # ... and each later one
    cap: int
    sibling: float  # the second guess is verified beside a guess whose confidence is below this
    before: float = 0.0  # ... and a first guess is drafted only where the target's confidence before is at least this


def rows_along(ctx, prompt: Sequence[int], tokens: Sequence[int]) -> list[np.ndarray]:
    """ctx's logits at each token of a reply, given the prompt and the reply before it: one decode."""
    held = ctx.reuse_prefix(prompt[:-1])
    ctx.decode(prompt[held:-1], logits="none")
    ctx.decode([prompt[-1], *tokens[:-1]], logits="all")
    rows = [np.asarray(ctx.logits(i), dtype=np.float64) for i in range(len(tokens))]
    ctx.truncate(len(prompt) - 1)
    return rows


def guesses(pair: Pair, prompt: Sequence[int], tokens: Sequence[int]) -> Guesses:
    """The draft's guesses along one reply (Guesses), and the target's confidence at each token."""
    correct, confidence, second = [], [], []
    for row, token in zip(rows_along(pair.draft_ctx, prompt, tokens), tokens):
        top2 = np.argpartition(-row, 2)[:2]
        top2 = top2[np.argsort(-row[top2])]
        correct.append(top2[0] == token)
        second.append(top2[1] == token)
        confidence.append(top_probability(row))
    target = [top_probability(row) for row in rows_along(pair.target_ctx, prompt, tokens)]
    return Guesses(np.array(correct), np.array(confidence), np.array(second), np.array([1.0, *target[:-1]]))


def decode_medians(pair: Pair, prompt: Sequence[int], filler: Sequence[int], verify_widths: Sequence[int],
                   draft_widths: Sequence[int]) -> dict[tuple[int, int], float]:
    """Seconds of the target's (0, k) and the draft's (1, k) decode of k rows at the prompt's depth:
    the prompt's last token and k - 1 of filler (repeated where it is shorter), every row's logits,
    the median of REPEATS rounds, each round every width in turn (the machine's pace drifts over a
    minute: measured one width after another, a drift would bend the curve)."""
    contexts = []
    for ctx in (pair.target_ctx, pair.draft_ctx):
        held = ctx.reuse_prefix(prompt[:-1])
        ctx.decode(prompt[held:-1], logits="none")
        contexts.append((ctx, len(ctx.tokens)))
    widest = max([*verify_widths, *draft_widths])
    rows = [prompt[-1], *(list(filler) * (widest // max(len(filler), 1) + 1))]
    samples: dict[tuple[int, int], list[float]] = {}
    for _ in range(REPEATS):
        for which, k in [(0, k) for k in verify_widths] + [(1, k) for k in draft_widths]:
            ctx, base = contexts[which]
            t = time.perf_counter()
            ctx.decode(rows[:k], logits="all")
            samples.setdefault((which, k), []).append(time.perf_counter() - t)
            ctx.truncate(base)
    return {key: statistics.median(v) for key, v in samples.items()}


def measure_costs(pair: Pair, prompt: Sequence[int], filler: Sequence[int], widths: Sequence[int]) -> Costs:
    """The target's verify of each width and the draft's one-token decode at the prompt's depth
    (decode_medians)."""
    median = decode_medians(pair, prompt, filler, widths, (1,))
    return Costs(curve_of({k: median[0, k] for k in widths}), median[1, 1])


def oracle_seconds(g: Guesses, costs: Costs, cap: int) -> float:
    """The least seconds over the reply for chains that draft only correct guesses: the copy bound's
    dynamic program (bench_copy_bound.bound) over the runs of correct guesses, a step of width w that
    drafts priced w draft rows beside its verify (the token before its first guess, and each guess,
    the last one at the next step's start)."""
    runs = [0] * (len(g.correct) + 1)  # how many correct guesses in a row start at each position
    for i in range(len(g.correct) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if g.correct[i] else 0
    return bound(runs[:-1], lambda w: costs.verify(w) + (w * costs.draft if w > 1 else 0.0), cap)[0]


def rule_step(g: Guesses, costs: Costs, rule: Rule, i: int) -> tuple[int, float]:
    """(tokens emitted, seconds) of one step of the threshold rule starting at position i."""
    if rule.first == math.inf:  # plain decoding: the draft never runs
        return 1, costs.verify(1)
    n, seconds = len(g.correct), costs.draft  # the decode whose row gives position i's confidence
    if g.confidence[i] < rule.first or g.before[i] < rule.before or i == n - 1:
        return 1, seconds + costs.verify(1)
    k = 1
    while k < rule.cap and i + k < n - 1:
        seconds += costs.draft  # the drafted token decoded: the next position's confidence
        if g.confidence[i + k] < rule.rest:
            break
        k += 1
    taken = int(np.argmin(g.correct[i : i + k])) if not g.correct[i : i + k].all() else k
    if taken == k == rule.cap:
        seconds += costs.draft  # the last guess, taken, is decoded at the next step's start (ModelDrafter)
    siblings = int((g.confidence[i : i + k] < rule.sibling).sum())
    emitted = taken + 1
    if taken < k and g.confidence[i + taken] < rule.sibling and g.second[i + taken]:
        emitted += 1  # the sibling was the target's token: taken, and its row gives the next
    return min(emitted, n - i), seconds + costs.verify(k + 1 + siblings)


def stop_step(g: Guesses, costs: Costs, stop: DraftStop, cap: int, i: int) -> tuple[int, float]:
    """(tokens emitted, seconds) of one step starting at position i whose draft a stop rule ends (at
    most cap guesses), each look at a confidence a draft decode, as in rule_step."""
    n, seconds = len(g.correct), costs.draft
    if i == n - 1 or not stop.keep(0, g.confidence[i]):
        return 1, seconds + costs.verify(1)
    k = 1
    while k < cap and i + k < n - 1:
        seconds += costs.draft
        if not stop.keep(k, g.confidence[i + k]):
            break
        k += 1
    taken = int(np.argmin(g.correct[i : i + k])) if not g.correct[i : i + k].all() else k
    if taken == k == cap:
        seconds += costs.draft
    return taken + 1, seconds + costs.verify(k + 1)


def replayed(replies: Sequence[tuple[Guesses, Costs]], cap: int) -> float:
    """The seconds of localspec's p-min auto (DraftStop, its first guess judged) over every reply,
    its acceptance per confidence counted over all of them in hindsight (smoothed as CostTracker's
    is), at the rate it achieves (found by fixed-point iteration from plain decoding's): whether the
    rule, given what a planner could learn, reaches the threshold rules, apart from the planner's
    learning, its γ and its probes."""
    tracker = CostTracker()
    for g, _ in replies:
        for c, ok in zip(g.confidence, g.correct):
            tracker.conf_judged[confidence_bin(c)] += 1
            tracker.conf_accepted[confidence_bin(c)] += bool(ok)
    total, tokens = 0.0, sum(len(g.correct) for g, _ in replies)
    rate = tokens / sum(len(g.correct) * c.verify(1) for g, c in replies)
    for _ in range(REPLAY_ROUNDS):
        total = 0.0
        for g, costs in replies:
            i = 0
            while i < len(g.correct):
                stop = DraftStop(tracker.accept_at, rate, costs.draft, costs.verify, cap, decline_first=True)
                emitted, seconds = stop_step(g, costs, stop, cap, i)
                i, total = i + emitted, total + seconds
        rate = tokens / total
    return total


def rule_seconds(g: Guesses, costs: Costs, rule: Rule) -> float:
    i, total = 0, 0.0
    while i < len(g.correct):
        emitted, seconds = rule_step(g, costs, rule, i)
        i, total = i + emitted, total + seconds
    return total


def grid_seconds(replies: Sequence[tuple[Guesses, Costs]], caps: Sequence[int],
                 siblings: Sequence[float] = SIBLING_BELOW, thresholds: Sequence[float] = THRESHOLDS,
                 befores: Sequence[float] = (0.0,)) -> dict[Rule, float]:
    """Every rule of the grid (plain decoding among the first guess's thresholds) and its seconds over
    all replies, in the grid's order."""
    grid = itertools.product((*thresholds, math.inf), thresholds, caps, siblings, befores)
    return {rule: sum(rule_seconds(g, c, rule) for g, c in replies) for rule in map(Rule._make, grid)}


def best_rule(scored: dict[Rule, float], keep: Callable[[Rule], bool] = lambda rule: True) -> tuple[Rule, float]:
    """The rule with the least seconds among those kept (the first in the grid's order on a tie)."""
    return min(((rule, seconds) for rule, seconds in scored.items() if keep(rule)), key=lambda rs: rs[1])


def separation(score: np.ndarray, correct: np.ndarray) -> float:
    """How well score tells correct guesses from wrong ones: the area under the ROC curve, the chance
    that a correct guess scores above a wrong one (ties half), from the Mann-Whitney U."""
    right, wrong = score[correct], score[~correct]
    if not len(right) or not len(wrong):
        return math.nan
    return mannwhitneyu(right, wrong).statistic / (len(right) * len(wrong))


def widths_of(cap: int) -> list[int]:
    """The verify widths measured: every chain up to cap, and trees with up to a sibling a guess."""
    return [*range(1, cap + 2), cap + 1 + (cap + 1) // 2, 2 * cap + 1]


def run(args, pair: Pair) -> tuple[list[dict], dict[int, Guesses], list[str]]:
    """One record per reply: prompt, round, per scenario (tokens, seconds, widths, draft seconds), and
    the costs measured right after it (the machine's pace moves between replies); each prompt's
    guesses along its target-only reply."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    prompts = [pair.prompt_tokens(t, True) for t in texts]
    scenarios = ["target-only", "model"]
    trackers: dict[str, dict] = {name: {} for name in scenarios}
    records, along, notes = [], {}, []
    for n, i in enumerate([i for _ in range(args.rounds) for i in range(len(prompts))]):
        record = {"prompt": i, "round": n // len(prompts)}
        for name in bench.reply_order(scenarios, n):
            pair.trackers = trackers[name]  # each plans from its own measurements, as its own process would
            record[name] = reply(pair, prompts[i], args, "model", 0 if name == "target-only" else None)
        tokens = record["target-only"][0]
        if record["model"][0] != tokens:
            notes.append(f"reply {n}: the model drafter's tokens differ from target-only's")
        if i not in along:  # (the prompt's reply is the same each round, at T=0)
            along[i] = guesses(pair, prompts[i], tokens)
        record["costs"] = measure_costs(pair, prompts[i], tokens, widths_of(args.cap))
        print(f"reply {n} (prompt {i}): " + "  ".join(f"{name} {len(record[name][0]) / record[name][1]:.1f} tok/s"
                                                  for name in scenarios), file=sys.stderr, flush=True)
        records.append(record)
    return records, along, notes


def bounds(args, records: list[dict], along: dict[int, Guesses]) -> dict:
    """The chains' ratios to plain decoding over every reply, each priced on the costs measured
    right after it, and what localspec's model drafter measured."""
    replies = [(along[r["prompt"]], r["costs"]) for r in records]
    plain = sum(len(g.correct) * c.verify(1) for g, c in replies)
    scored = grid_seconds(replies, range(1, args.cap + 1))  # one pass: each row below a part of the grid
    chain, chain_s = best_rule(scored, lambda r: not r.sibling)
    tree, tree_s = best_rule(scored)
    always, always_s = best_rule(scored, lambda r: not r.sibling and r.first == 0.0)
    fixed_rule, fixed_s = best_rule(scored, lambda r: r.first == r.rest == r.sibling == 0.0)
    scored.update(grid_seconds(replies, range(1, args.cap + 1), (0.0,), befores=BEFORE))
    before, before_s = best_rule(scored, lambda r: not r.sibling)
    # rates, not seconds: on an F16 target a reply may part from target-only's at a near tie (other
    # batch sizes, other sums) and run longer or shorter, and its seconds then price other tokens
    model_curve = rate(records, "model", lambda r: sum(r["costs"].verify(w) for w in r["model"][2]) + r["model"][3])
    plain_curve = rate(records, "target-only", lambda r: len(r["target-only"][0]) * r["costs"].verify(1))
    correct = np.concatenate([g.correct for g in along.values()])
    second = np.concatenate([g.second for g in along.values()])
    confidence = np.concatenate([g.confidence for g in along.values()])
    target_before = np.concatenate([g.before[1:] for g in along.values()])  # (none before a reply's first)
    later = np.concatenate([g.correct[1:] for g in along.values()])
    return {"oracle": plain / sum(oracle_seconds(g, c, args.cap) for g, c in replies),
            "chain": (plain / chain_s, chain), "tree": (plain / tree_s, tree), "fixed": (plain / fixed_s, fixed_rule.cap),
            "always": (plain / always_s, always), "before": (plain / before_s, before),
            "separation": (separation(confidence, correct), separation(target_before, later)),
            "replayed": plain / replayed(replies, args.cap), "cap": args.cap,
            "model_curve": model_curve / plain_curve,
            "model_measured": (rate(records, "model", lambda r: r["model"][1])
                               / rate(records, "target-only", lambda r: r["target-only"][1])),
            "first_guess": correct.mean(), "second_when_first_wrong": second[~correct].mean(),
            "draft_ms": 1e3 * statistics.mean(c.draft for _, c in replies),
            "verify_ms": {k: round(1e3 * statistics.mean(c.verify(k) for _, c in replies), 1) for k in widths_of(args.cap)},
            "plain_ms": [round(1e3 * c.verify(1), 1) for _, c in replies]}


def rate(records: Sequence[dict], scenario: str, seconds: Callable[[dict], float]) -> float:
    """A scenario's tokens per second over every reply, its seconds per reply given by seconds."""
    return sum(len(r[scenario][0]) for r in records) / sum(seconds(r) for r in records)


def report(b: dict) -> str:
    def rule(r: Rule) -> str:
        if r.first == math.inf:
            return "none drafted: plain decoding"
        sib = f", second guess beside confidences below {r.sibling}" if r.sibling else ""
        before = f", the target's confidence before it ≥ {r.before}" if r.before else ""
        return f"first guess at confidence ≥ {r.first}{before}, later ones ≥ {r.rest}, at most {r.cap}{sib}"
    return "\n".join([
        f"draft's guess is the target's token at {b['first_guess']:.1%} of positions; its second guess at "
        f"{b['second_when_first_wrong']:.1%} of those where the first is not",
        f"how well a signal tells its right guesses from its wrong ones (ROC area; 0.5: not at all): its confidence "
        f"{b['separation'][0]:.3f}; the target's confidence at the token before {b['separation'][1]:.3f}",
        f"costs, the mean over the replies: a draft token {b['draft_ms']:.1f} ms; a verify of k rows {b['verify_ms']} ms",
        f"a one-row decode after each reply: {b['plain_ms']} ms",
        "| chain (T=0) | vs plain, priced on the measured costs |", "|---|---|",
        f"| oracle stops: only correct guesses drafted (no chain of this draft exceeds it) | {b['oracle']:.2f}x |",
        f"| best threshold rule in hindsight ({rule(b['chain'][1])}) | {b['chain'][0]:.2f}x |",
        f"| ... with second guesses as leaves ({rule(b['tree'][1])}) | {b['tree'][0]:.2f}x |",
        f"| ... drafting every first guess, where a step drafts ({rule(b['always'][1])}) | {b['always'][0]:.2f}x |",
        f"| ... a first guess also declined where the target was unsure at the token before ({rule(b['before'][1])}) "
        f"| {b['before'][0]:.2f}x |",
        f"| best fixed γ ({b['fixed'][1]}) | {b['fixed'][0]:.2f}x |",
        f"| localspec's stop rule (p-min auto) replayed at most {b['cap']} a step, its acceptance per confidence "
        f"counted over these replies | {b['replayed']:.2f}x |",
        f"| localspec model drafter (auto), its steps priced on the costs | {b['model_curve']:.2f}x |",
        f"| localspec model drafter (auto), measured beside target-only | {b['model_measured']:.2f}x |"])


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_one_process_args(ap, "humaneval", 4, 96)
    ap.add_argument("--cap", type=int, default=GenerationConfig().gamma_max,
                    help="the most a chain drafts a step (localspec's draft model cap by default)")
    args = ap.parse_args(argv)
    if args.cap < 1:
        ap.error(f"--cap {args.cap}: give 1 or more")
    bench.one_process_args(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with bench.one_process_pair(args, "localspec-stops-") as pair:
        records, along, notes = run(args, pair)
    result = bounds(args, records, along)
    print(report(result))
    for note in notes:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
