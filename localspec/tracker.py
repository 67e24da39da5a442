"""CostTracker: the live measurements of one drafter on one pair and machine, and the two estimates
the planner reads from them.

Measured: the target's verify seconds per batch size (VerifyCurve), what a verify costs the one-row
decodes after it (ReturnCost), the draft's seconds per token (a draft model's per row: draft_s), the
controller's overhead, and acceptance per draft position, per acceptance bucket (an n-gram drafter's
match length, and whether the match lies in the prompt or the output: costmodel.match_bucket; 0 for a
draft model), per draft confidence (the draft model's stop rule reads that), per text
(acceptance.TextAcceptance: how far the text at hand lies from the texts measured moves every
acceptance estimate, text_shift), and where the draft model's stop rule ended its drafts
(draftstop.DraftStops: a step's γ is a cap, priced by where the draft is likely to end within it).

The point estimate is what the planner expects of a known choice: a bucket's counts smoothed towards
all buckets' counts, those towards `prior_accept` (0: a choice is known by its counts, and few
counts are held down); unmeasured batch sizes interpolated or extrapolated along the curve. The
cautious estimate is the point estimate less one standard error: what prices an exploratory step.
The optimistic estimate is the best the measurements still allow: counts smoothed towards
acceptance 1 plus a bonus that shrinks with the count (but the point estimate's for positions that
plain steps measure for free: estimate's followed), a batch wider than every measured one no
dearer than the widest measured, and a draft cost no dearer than the least a drafting step measured
(a STALL_FACTOR-th of the measured cost while it rests on fewer than TRUSTED_SAMPLES drafting steps,
since a stall may have inflated it: optimistic_draft_s). Until the draft's cost is measured all take
it as free, and only the optimistic one is used: a drafter is no known choice before one of its
steps has run.
Both depend on measured seconds only through their ratios: scaling every cost scales every
prediction of tokens/s by the same factor and changes no choice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from . import trackerfile
from .acceptance import (PositionAcceptance, TextAcceptance, overall, pooling_weight, posterior_var, shifted,
                         spliced)
from .costmodel import Estimate
from .draftstop import CONFIDENCE_BINS, FALLBACK_P_MIN, DraftStop, DraftStops, FirstLooks, FixedStop, confidence_bin
from .timings import RETURN_ROWS, STALL_FACTOR, TRUSTED_SAMPLES, Ema, ReturnCost, Seconds, VerifyCurve, Widths
from .lookupruns import LookupRuns
from .trackerfile import CONFIRM_STEPS, WARM_MAX_COUNT
from .treeplan import SiblingAcceptance


@dataclass
class CostTracker:
    """Live measurements of one drafter on one pair and machine (see the module docstring)."""

    prior_accept: float = 0.0   # the point estimate's prior (see the module docstring) ...
    prior_weight: float = 2.0   # ... worth this many observations
    min_gain: float = 0.03      # predicted edge over plain decoding needed to speculate
    ucb_scale: float = 0.1      # the optimistic estimate's bonus: sqrt(ucb_scale × ln(total) / count)
    # Seconds a draft token costs. A draft model's steps also decode the token the last verify
    # emitted before the first guess (with the last guess of a draft accepted whole, at the next
    # step's start): such a drafter's cost is measured per row it decoded, and a step is priced a
    # row more than its guesses (first_row, Estimate.first_s). That is exact where its stop rule
    # ended the draft (the declined guess's row was decoded) and up to a row dear where the draft
    # reached its γ, whose last guess is decoded only once accepted whole (README: priced exactly,
    # that lost on F16 prose at T=0).
    draft_s: Ema = field(default_factory=Seconds)
    first_row: bool = False
    overhead_s: Ema = field(default_factory=Ema)
    verify: VerifyCurve = field(default_factory=VerifyCurve)
    # what a verify wider than one row costs the one-row decodes after it (priced with every drafting step)
    after_wide: ReturnCost = field(default_factory=ReturnCost, repr=False, compare=False)
    positions: PositionAcceptance = field(default_factory=PositionAcceptance)  # all buckets together
    buckets: dict[int, PositionAcceptance] = field(default_factory=dict)
    conf_judged: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    conf_accepted: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    looks: FirstLooks = field(default_factory=FirstLooks)  # the draft's confidence at each step's first guess
    texts: TextAcceptance = field(default_factory=TextAcceptance)  # ... and per text (a generation)
    # How far the text at hand lies from the texts measured, in log-odds (TextAcceptance.shift): the
    # planner sets it before each step, and every acceptance estimate below is moved by it.
    text_shift: float = 0.0
    step_tokens: Ema = field(default_factory=Ema)  # tokens and seconds of drafting steps: the rate achieved
    step_s: Ema = field(default_factory=Ema)
    siblings: SiblingAcceptance = field(default_factory=SiblingAcceptance)  # a tree's next-best guesses
    stops: DraftStops = field(default_factory=DraftStops)  # where a stop rule ended the drafts
    # In a hybrid, what one of this drafter's steps costs the draft model later: its catch-up over the
    # tokens the step emitted, shared among the steps since the model last drafted (Planner.record).
    switch_s: Ema = field(default_factory=Ema)
    # A catch-up is the draft model decoding in one batch the tokens generated since it last drafted
    # (Planner.record): what a step from it costs beyond its own drafting. A batch costs a one-token
    # decode and a smaller amount for each further token; this is that amount (catchup_seconds).
    catchup_s: Ema = field(default_factory=Seconds)
    # Seconds to load the drafter's model where it is loaded on first use (session.Pair): part of
    # what a first step from it costs.
    load_s: Ema = field(default_factory=Ema)
    prefill_s: Ema = field(default_factory=Ema)  # ... and to take in a prompt (without the load)
    # Seconds of generation on this setup since the drafter was last made ready (it was not worth it
    # meanwhile); planning.budget.worth_preparing gives it another try once ε of them cover entry_s().
    idle_s: float = 0.0
    # Seconds on this setup since the drafter last drafted (they fund probes: ExploreBudget), its last re-measure's
    # loss, and the plain step's seconds when its draft's cost was last measured (Probes._remeasure, budget.pace)
    out_s: float = 0.0
    remeasure_loss: float = 0.0
    draft_pace: float | None = None
    lookup_runs: LookupRuns = field(default_factory=LookupRuns, repr=False, compare=False)  # a lookup's runs here
    # The seconds the planner's latest pricings of this drafter took (planner.Planner._rest): the
    # controller's own cost on this machine, kept across a process's generations and saved with the
    # rest, so that a new process's first losing pricing can rest at once.
    pricings: list[float] = field(default_factory=list, repr=False, compare=False)
    loaded: bool = False  # started from an earlier process's measurements (from_dict)
    saved_verify: VerifyCurve = field(default_factory=VerifyCurve)  # the curve as saved, plain step too
    # acceptance(bucket) as last computed, with the counts it read (_acceptance_key): the planner asks
    # for the same bucket's several times a step, and pooling a copy's many positions each time is costly
    _acceptance_memo: dict = field(default_factory=dict, repr=False, compare=False)
    saved_draft_s: Ema = field(default_factory=Ema)  # the draft's cost as saved (see may_pay)
    own_drafts: int = 0   # drafting steps this tracker has measured itself
    draft_least: float | None = None  # the least seconds a token any of those steps measured
    plain_last: float | None = None  # the latest plain step's seconds, verify and overhead (this process) ...
    plain_age: int = 0  # ... and the drafting steps since it (Planner._plain_again)
    proposals: int = 0    # proposals whose acceptance it counts, over every process that saved it (from_dict)
    steps: int = 0        # steps it has seen verified, its own and other sources' (optimistic_acceptance)

    def confirmed(self) -> bool:
        """Whether the point estimate rests on this process's own measurements: loaded ones may be
        stale (another moment's load, another placement), so until two drafting steps here confirm
        them, drafting on them is exploration, under the planner's budget."""
        return not self.loaded or self.own_drafts >= CONFIRM_STEPS

    def record(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float, overhead_s: float,
               confidences: Sequence[float] = (), bucket: int = 0, width: int | None = None,
               emitted: int | None = None, cap: int | None = None, rows: int = 0,
               first_look: float | None = None) -> None:
        """Add one step's measurements (confidences: the draft's, per drafted token, when it gave them;
        bucket: the proposal's acceptance bucket; cap: the most a stop rule let it draft, where one
        judged the draft; rows: those a draft model decoded for it, Proposal.rows; first_look: the
        confidence of its first guess, drafted or not, where a stop rule looked at it). A tree's step
        gives the rows of its verify batch (width) and the tokens it emitted, which its siblings make
        more than n_drafted + 1 and n_accepted + 1 of its chain."""
        self.record_verify(width or n_drafted + 1, verify_s, overhead_s)
        # per row a draft model decoded (first_row), else per token; weighed by them: the mean over
        # rows, not over steps (a step whose stop rule declined its first guess paid its decode too)
        units = rows or n_drafted
        per_unit = draft_s / units if units else 0.0
        if units:
            self.draft_s.add(per_unit, units)
            self.draft_pace = self.verify.seconds(1) if 1 in self.verify else None
        if n_drafted:
            self.own_drafts += 1
            self.first_row = self.first_row or rows > 0
            self.draft_least = per_unit if self.draft_least is None else min(self.draft_least, per_unit)
            self.step_tokens.add(emitted or n_accepted + 1)
            self.step_s.add(draft_s + verify_s + overhead_s)
        self.record_acceptance(n_drafted, n_accepted, bucket)
        if cap and (n_drafted or rows):  # (a proposal of none made without a decode: no room left)
            self.stops.record_first(n_drafted > 0)
        if first_look is not None:
            self.looks.record(first_look)
        if n_drafted and cap:
            self.stops.record(n_drafted, n_accepted, cap)
        for i, c in enumerate(confidences[: n_accepted + 1]):  # the drafts the target judged
            b = confidence_bin(c)
            self.conf_judged[b] += 1
            self.conf_accepted[b] += i < n_accepted

    def record_verify(self, width: int, verify_s: float, overhead_s: float) -> None:
        """Add a verify of `width` rows and the step's overhead (all that a plain step measures)."""
        self.record_width(width, verify_s)
        self.overhead_s.add(overhead_s)
        if width == 1:
            self.plain_last, self.plain_age = verify_s + overhead_s, 0

    def record_width(self, width: int, verify_s: float, own: bool = True) -> None:
        """Add a verify of `width` rows, this source's draft's (own) or another's (the target's cost), one
        step seen; a one-row decode after a wider one measures what that left behind (ReturnCost)."""
        self.steps += 1
        if width == 1 and self.after_wide.age < RETURN_ROWS:
            verify_s = self.after_wide.one_row(verify_s, self.verify.seconds(1) if 1 in self.verify else None)
            if verify_s is None:
                return  # (right after the prompt's intake: no sample)
        elif width > 1:
            self.after_wide.wider(own)
        self.verify.add(width, verify_s)

    def record_acceptance(self, n_drafted: int, n_accepted: int, bucket: int = 0, offset: int = 0) -> None:
        """Count n_drafted guesses in bucket, the first n_accepted accepted: a step's own (record), or
        guesses that continued another drafter's draft in its verify (a hybrid's handoff,
        planning.handoff.Handoff), whose costs are that drafter's to record. offset: the guesses
        continue a proposal already counted, whose first offset were all accepted (the lookup's
        guesses beyond a draft the target took whole, Planner._continue), at its positions offset on."""
        if n_drafted:
            self.proposals += not offset
            self.buckets.setdefault(bucket, PositionAcceptance()).record(n_drafted, n_accepted, offset)
            self.positions.record(n_drafted, n_accepted, offset)
            self.texts.record(min(n_accepted + 1, n_drafted), n_accepted)

    def judged(self, bucket: int) -> int:
        """How many proposals in bucket the target judged (their first guess)."""
        counts = self.buckets.get(bucket)
        return counts.judged[0] if counts is not None and counts.judged else 0

    def accept_at(self, confidence: float) -> float:
        """Measured acceptance of drafts of this confidence, smoothed towards an optimistic prior,
        (1 + confidence) / 2: a confidence whose drafts are never judged is never measured, and drafts
        are often accepted more than their confidence says."""
        b, w = confidence_bin(confidence), self.prior_weight
        return (self.conf_accepted[b] + w * (1 + confidence) / 2) / (self.conf_judged[b] + w)

    def plain_seconds(self) -> float:
        """Seconds of a plain step (0.0 until one is measured)."""
        return self.verify_seconds(1) + (self.overhead_s.value or 0.0)

    def rate(self) -> float:
        """Tokens/s the loop achieves: drafting steps as measured, and never below plain decoding."""
        plain = 1.0 / max(self.plain_seconds(), 1e-300)
        if self.step_s.value is None:
            return plain
        return max(self.step_tokens.value / max(self.step_s.value, 1e-300), plain)

    def draft_stop(self, gamma: int | None = None, probe: bool = False) -> DraftStop | FixedStop:
        """The stopping rule for a draft of up to gamma (p-min auto); a fixed p-min until costs are
        measured. probe: for an exploratory step, which reads the next unmeasured batch size as no
        dearer than the widest measured (VerifyCurve.next_width): along the point estimate's
        extrapolated slope a probe may stop short and never measure a wider batch that pays."""
        if self.draft_s.value is None or 1 not in self.verify:
            return FixedStop(FALLBACK_P_MIN, first=True)  # a probe must measure the draft
        verify = self.verify.next_width if probe else self.verify_seconds
        return DraftStop(self.accept_at, self.rate(), self.draft_s.value, verify, gamma,
                         decline_first=not probe and self.stop_trusted())

    def stop_trusted(self) -> bool:
        """Whether p-min auto's costs are trusted (DraftStop's decline_first): the draft's cost and a
        plain step measured, and a two-row verify TRUSTED_SAMPLES times."""
        return self.draft_s.value is not None and 1 in self.verify and self.verify.samples(2) >= TRUSTED_SAMPLES

    def acceptance(self, bucket: int | None = None) -> list[float]:
        """Per-position conditional acceptance (point estimate). All buckets' counts per position are
        smoothed towards the prior; a bucket's per position towards the bucket's rate over all its
        positions, and that towards all buckets' rate: a position a bucket has rarely reached takes
        the bucket's rate, not one chance rejection's. How strongly a bucket's positions lean on its
        rate depends on how much they differ beyond chance (pooling_weight): where chance explains
        their differences, each takes the bucket's rate. Otherwise the γ chosen would be the one
        whose few deep drafts were luckiest, and a draft far longer than pays would look worth its verify."""
        counts = self.buckets.get(bucket) if bucket is not None else None
        key = self._acceptance_key(counts) + (self.text_shift,)
        memo = self._acceptance_memo.get(bucket)
        if memo is not None and memo[0] == key:
            return memo[1]
        w = self.prior_weight
        pooled = self.positions.rates(self.prior_accept, w) or [self.prior_accept]
        if counts is None:
            rates = pooled
        else:
            rates = counts.rates(*self._pooled(counts)) or pooled
        rates = shifted(rates, self.text_shift)
        self._acceptance_memo[bucket] = key, rates
        return rates

    def _pooled(self, counts: PositionAcceptance) -> tuple[float, float]:
        """(rate, weight): a bucket's rate over all its positions (smoothed towards all buckets' rate),
        and the pseudo-observations of it each position's estimate is smoothed with (pooling_weight)."""
        w = self.prior_weight
        rate = overall(counts, overall(self.positions, self.prior_accept, w), w)
        return rate, pooling_weight(counts, rate, w)

    def _acceptance_key(self, counts: PositionAcceptance | None) -> tuple:
        """What acceptance() reads: every count it pools (each record adds to the judged totals) and
        the prior."""
        return (id(self.positions), sum(self.positions.judged), id(counts), sum(counts.judged) if counts else 0,
                self.prior_accept, self.prior_weight)

    def cautious_acceptance(self, bucket: int | None = None) -> list[float]:
        """The point estimate less one standard error per position: what the counts make likely at
        worst, for pricing an exploratory step. In a bucket a position's rate rests on its own
        judged count and on the bucket's rate, with the weight acceptance() pools it with
        (pooling_weight), so its error is the posterior's (posterior_var), not the prior weight's
        alone, which would price positions few drafts reached far below a well-measured bucket
        (scripts/results/HISTORY.md, "Copy widths held by a cautious estimate"). Each position is
        still one error below, as if one luck held the whole draft."""
        rates, w = self.acceptance(bucket), self.prior_weight  # (first: it checks the memo's key)
        counts = self.buckets.get(bucket) if bucket is not None else None
        memo = self._acceptance_memo.get(("cautious", bucket))
        if memo is not None and memo[0] is rates:  # acceptance() kept its rates: nothing it reads moved
            return memo[1]
        judged = (counts or self.positions).judged
        judged = [judged[i] if i < len(judged) else 0 for i in range(len(rates))]
        if counts is None:
            cautious = [max(r - math.sqrt(r * (1 - r) / (j + w)), 0.0) for r, j in zip(rates, judged)]
        else:
            rate, pooled = self._pooled(counts)
            rate_var = rate * (1 - rate) / (sum(counts.judged) + w)  # the bucket rate's own error
            cautious = [max(r - math.sqrt(posterior_var(r, rate_var, j, pooled)), 0.0)
                        for r, j in zip(rates, judged)]
        self._acceptance_memo[("cautious", bucket)] = rates, cautious
        return cautious

    def optimistic_acceptance(self, bucket: int | None = None) -> list[float]:
        """Per-position conditional acceptance as high as the counts still allow: each position's
        rate (smoothed towards its bucket's, that towards 1) plus a UCB1-style bonus, which shrinks
        with the position's own count and grows slowly with the rounds played: the guesses the
        tracker has had judged, or the steps it has seen, if more (UCB1's t counts every round,
        whichever arm played it; Auer et al. 2002). So a bucket that a few unlucky rejections made
        look bad is tried again, ever more rarely, and so is a draft model whose first probes were
        all rejected: nothing judges its guesses while it does not draft, and counted by its own
        guesses alone its bonus would never grow again."""
        counts = self.positions if bucket is None else self.buckets.get(bucket)
        if counts is None:
            return [1.0]
        w, total = self.prior_weight, math.log(max(sum(self.positions.judged), self.steps) + 2)
        rates = counts.rates(overall(counts, 1.0, w), w)
        bonus = [math.sqrt(self.ucb_scale * total / (j + w)) for j in counts.judged]
        # a text whose first drafts fared worse than the texts' mean may yet fare as well as it: its
        # few counts moved the point estimate, not what is still possible (so a probe can tell)
        return shifted([min(1.0, r + b) for r, b in zip(rates, bonus)], max(self.text_shift, 0.0)) or [1.0]

    def optimistic_draft_s(self) -> float:
        """The least a draft token may cost given the measurements: once the cost rests on
        TRUSTED_SAMPLES drafting steps (over every process that saved it), as measured or the least
        a token cost in any of this process's drafting steps, whichever is less; before that a
        STALL_FACTOR-th of it. A draft's first measurement is often its only one, and read as it came
        a stalled one would keep a draft that pays from ever being probed again; a stall only ever
        adds time, so the least a step measured is a bound no stall can raise. Probes it allows are
        priced at the measured cost against the budget, so a draft that truly costs that much loses
        at most what the budget lets it."""
        draft = self.draft_s.value or 0.0
        if not self.cost_trusted():
            return draft / STALL_FACTOR
        return draft if self.draft_least is None else min(draft, self.draft_least)

    def cost_trusted(self) -> bool:
        """Whether the draft's cost rests on TRUSTED_SAMPLES drafting steps, over every process that
        saved it: a median of that many is one stall cannot set (timings.Ema)."""
        return self.proposals >= TRUSTED_SAMPLES

    def verify_seconds(self, k: int) -> float:
        """Measured verify time for a batch of k, interpolated or extrapolated otherwise."""
        return self.verify.seconds(k)

    def estimate(self, bucket: int | None = None, optimistic: bool = False, switch: bool = False,
                 curve: VerifyCurve | None = None, probe: bool = False, followed: int = 0) -> Estimate:
        """The point or the optimistic estimate for a proposal in this bucket (needs verify(1) measured);
        a drafting step also costs what its verify leaves the one-row decodes after it (ReturnCost), at
        the share of its verifies they followed, in the optimistic one at most the chance its draft is
        broken (ReturnCost.shares: none before its first verify, lest a GPU's first probes miss a copy);
        switch: a drafting step also costs switch_s (a hybrid's other drafter catching up later);
        curve: the verify costs to read instead of this process's (not the optimistic estimate's);
        probe: the point estimate with the first width beyond the widest measured read as no dearer
        than the widest (VerifyCurve.next_width), as an exploratory step's loss is priced;
        followed: in the optimistic estimate, the first positions read at the point estimate's
        acceptance, for guesses whose acceptance there plain steps measure at no cost
        (planner.Planner._shadow_step)."""
        overhead, draft = self.overhead_s.value or 0.0, self.draft_s.value or 0.0
        extra = (self.switch_s.value or 0.0) if switch else 0.0  # (drafting steps only: widths above one)
        if optimistic:
            verify, draft = Widths(self.verify, 1, extra), self.optimistic_draft_s()
        else:
            verify = Widths(self.verify if curve is None else curve, 2 if probe else 0,
                            extra + self.after_wide.seconds())
        accept = self.optimistic_acceptance(bucket) if optimistic else self.acceptance(bucket)
        if optimistic and followed:
            accept = spliced(self.acceptance(bucket), accept, followed)
        est = Estimate(accept, draft, verify, overhead, *self.stops.rates(self.prior_weight), self.first_row,
                       self.stops.first_on(self.prior_weight), self.after_wide.shares() if optimistic else ())
        return est if optimistic or probe or curve is not None else self.first_kept(est)

    def first_kept(self, est: Estimate) -> Estimate:
        """est with a step's first guess as the stop rule of a known step takes it, once that rule is
        trusted to decline the unsure ones (stop_trusted): drafted at the share of first looks it
        keeps, taken at their acceptance (FirstLooks.kept, moved by the text's shift as every
        position is), its lookahead over the deepest position drafted so far."""
        if not self.stop_trusted():
            return est
        stop = self.draft_stop(max(len(self.positions.judged), 1))
        kept = self.looks.kept(lambda c: stop.keep(0, c), self.accept_at)
        if kept is None:
            return est
        first_on, first = kept
        return est._replace(accept=[*shifted([first], self.text_shift), *est.accept[1:]], first_on=first_on)

    def could_pay(self, cap: int) -> bool:
        """Whether some γ ≤ cap could beat plain decoding by min_gain, as far as the measurements tell."""
        if 1 not in self.verify or self.draft_s.value is None:
            return True  # not measured yet
        return self.estimate(optimistic=True).best(cap, self.min_gain)[0] > 0

    def may_pay(self, cap: int) -> bool:
        """Whether the measurements leave the drafter a chance to pay, which makes it worth making
        ready before it is asked (its model loaded, the prompt taken in). Saved ones that this
        process has not yet confirmed are judged by their point estimate, its own by the optimistic
        one: a drafter that saved measurements say does not pay costs a new process nothing
        (planning.budget.worth_preparing says when it is tried again)."""
        if self.draft_s.value is None:
            return self._costs_allow(cap)  # acceptance not measured (or over too few proposals to load)
        if not self.confirmed():  # the saved curve: this process's plain step is not measured yet
            if 1 not in self.saved_verify:
                return True
            # per acceptance bucket, as the planner prices a step (the pooled counts, smoothed towards
            # prior_accept, would hold a saved tracker's few counts far below what they measured)
            return any(self.estimate(bucket, curve=self.saved_verify).best(cap, self.min_gain)[0] > 0
                       for bucket in (self.buckets or [None]))
        return self.could_pay(cap)

    def _costs_allow(self, cap: int) -> bool:
        """Whether some γ ≤ cap would beat plain decoding by min_gain if every guess were accepted, by
        the saved draft cost and verify curve (True where either is unsaved): where no acceptance
        could make it pay, a new process does not load a draft for a second look at its acceptance."""
        draft = self.saved_draft_s.value
        if draft is None or 1 not in self.saved_verify:
            return True
        every = Estimate([1.0], draft, self.saved_verify.seconds, self.overhead_s.value or 0.0,
                         first_row=self.first_row)
        return every.best(cap, self.min_gain)[0] > 0

    def add_catchup(self, k: int, seconds: float) -> None:
        """One batch of k > 1 tokens the draft model decoded (a catch-up, or a prompt's prefill):
        what it took beyond a one-token decode, per further token (with no draft measured yet, its
        mean per token, which is more: the safe side)."""
        one = self.draft_s.value
        self.catchup_s.add(max(0.0, seconds - one) / (k - 1) if one is not None else seconds / k)

    def catchup_seconds(self, k: int) -> float:
        """What a step that first decodes k tokens the draft model has not seen, in one batch, costs
        beyond its own drafting: the batch is a one-token decode, which is the step's first draft
        decode (priced with its γ tokens), and the measured cost of each further token; until a
        batch is measured, the draft cost for each (a batch costs less per token: the safe side)."""
        more = self.catchup_s.value if self.catchup_s.value is not None else self.draft_s.value or 0.0
        return (k - 1) * more if k > 0 else 0.0

    def entry_s(self) -> float | None:
        """What making the drafter ready cost when it last was: its model's load and a prompt's prefill."""
        return None if self.load_s.value is None else self.load_s.value + (self.prefill_s.value or 0.0)

    def plan(self, gamma_max: int, bucket: int | None = None, switch: bool = False,
             cautious: bool = False, finish: bool = False) -> tuple[int, float]:
        """(draft length ≤ gamma_max, predicted tokens/s) by the point estimate; (0, 0.0) before a
        plain step and a draft are measured (exploring beyond the point estimate is the Planner's
        call). cautious: with the cautious acceptance (cautious_acceptance), and the draft's cost no
        dearer than the least a token cost in any drafting step here (draft_least): the price of a
        catch-up, paid before the drafts it buys, where what is uncertain is whether the guesses are
        accepted (a stall only ever adds time). finish: Estimate.best's."""
        if gamma_max <= 0 or 1 not in self.verify or self.draft_s.value is None:
            return 0, 0.0
        estimate = self.estimate(bucket, switch=switch)
        if cautious:
            least = estimate.draft_s if self.draft_least is None else min(estimate.draft_s, self.draft_least)
            estimate = self.first_kept(estimate._replace(accept=self.cautious_acceptance(bucket), draft_s=least))
        return estimate.best(gamma_max, self.min_gain, finish)

    def to_dict(self) -> dict:
        """The measurements as JSON-ready data, for a warm start (trackerfile.saved_data)."""
        return trackerfile.saved_data(self)

    @classmethod
    def from_dict(cls, data: dict, max_count: int = WARM_MAX_COUNT) -> CostTracker:
        """A tracker that starts from saved measurements, counts scaled down to at most max_count
        (trackerfile.load_saved, which says what a file from an older version loads)."""
        return trackerfile.load_saved(cls(loaded=True), data, max_count)
