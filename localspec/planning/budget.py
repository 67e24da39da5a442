"""The exploration budget (ExploreBudget): what the planner may lose over a generation to steps it
takes for what they may teach, per drafter; and when a drafter that was not worth making ready (its
model loaded, the prompt taken in) is tried again (worth_preparing, retry_due)."""

from __future__ import annotations

from typing import NamedTuple

from ..drafters import StopRule
from ..tracker import CostTracker

EXPLORE_FRACTION = 0.01  # ε: exploration may cost at most this fraction of a generation's time ...
GRACE_STEPS = 128         # ... counting a generation as at least this many plain steps long


def worth_preparing(tracker: CostTracker, cap: int, fraction: float = EXPLORE_FRACTION) -> bool:
    """Whether a drafter should be made ready before it is asked (its model loaded, the prompt taken
    in): where its measurements leave it a chance to pay (CostTracker.may_pay), and where not,
    again once a retry is due (retry_due)."""
    return tracker.may_pay(cap) or retry_due(tracker, fraction)


def retry_due(tracker: CostTracker, fraction: float = EXPLORE_FRACTION, cost: float | None = None) -> bool:
    """Whether ε of the generation seconds spent without the drafter cover what making it ready
    costs: cost seconds, by default what it cost last time (entry_s: a load and a prompt's intake) at
    the machine's pace now (pace). So a draft that did not pay on one kind of text is tried on
    whatever comes later, at a cost of at most ε of the time between tries (the try itself then
    explores under the budget)."""
    entry = tracker.entry_s() if cost is None else cost
    return entry is not None and fraction * tracker.idle_s >= entry * (pace(tracker) if cost is None else 1.0)


def pace(tracker: CostTracker) -> float:
    """The target's one-row decode now over what it took when a step last measured the draft's cost
    (CostTracker.draft_pace), at most 1: what the draft's costs measured then are read at now. A
    stretch that stalled the machine (another process's threads spinning beside) stalls the target's
    decodes with the draft's, and a draft measured in it, its prompt's intake with it, would
    otherwise be priced at that stretch long after it ended (Probes._remeasure), in a later process too:
    one that has not measured its plain step yet reads the saved one."""
    now = tracker.verify if 1 in tracker.verify else tracker.saved_verify  # (a new process: the saved one)
    if not tracker.draft_pace or 1 not in now:
        return 1.0
    return min(1.0, now.seconds(1) / tracker.draft_pace)


class Exploration(NamedTuple):
    """An exploratory step: its source, the best known choice's predicted tokens/s, and where that
    choice drafts from the same source, its γ and stop rule (the step it would have run instead)."""

    source: int
    r_best: float
    known: tuple[int, StopRule | None] | None = None
    remeasure: bool = False  # a re-measure of a cost that kept the source out (Planner._remeasure)


class ExploreBudget:
    """The ledger of the exploration rule over one generation (an explicit budget).

    A step is exploratory when the planner takes it for what it may teach rather than for its point
    estimate. Its loss is counted against the best known choice at that step, whose predicted rate is
    r_best (never below plain decoding): loss = seconds − tokens / r_best, the time the step took
    beyond what the best known choice would have needed for the same tokens (negative when the step
    did better: a probe that pays funds the next one). Where the best known choice drafts from the
    same source, the step is compared with the step that choice would have run on this very draft
    (Planner._loss): a probe whose draft ended where the known γ would have ended it ran the known
    step and lost nothing, so chance does not drain the budget. An exploratory step is taken only when

        spent[source] + its predicted loss ≤ ε × max(elapsed, W × plain step seconds, sat out),

    its loss predicted cautiously (acceptance one standard error below the point estimate, see
    CostTracker.cautious_acceptance), and afterwards its measured loss is added to spent[source]. In
    a hybrid an n-gram step also costs the draft model's catch-up over its tokens, which its price
    counts (the switch cost) and which comes due when the model next drafts: an exploratory step's
    share is added to spent[source] then (Planner._charge_switches). So each source's exploration in
    a generation costs at most ε of its time (ε of W plain steps' time, for a shorter one) plus what
    its last exploratory step lost beyond the cautious prediction, and in a hybrid the n-gram probes'
    shares of a catch-up still to come: ε for a single drafter, 2ε for the hybrid. One step is outside
    it: the first probe of a draft model made ready for the generation and not yet measured
    (Planner._entry_paid), one token, once per tracker, is part of making it ready, as its load and
    prefill are. Another is the n-gram lookup's first look at a match bucket never judged
    (Planner._first_look): one token, at most once a generation, its loss charged.
    "Sat out" is the seconds since the source last drafted, over the generations of every process
    that shared the saved plan (CostTracker.out_s, saved with it): a probe that no short generation's
    allowance fits (a draft model whose first guesses chance rejected, its every probe that could win
    priced at the cautious acceptance) is taken once ε of them cover it. In those seconds the source
    spent nothing, so over those processes its exploration still costs at most ε of the time, with
    W's grace a generation. A re-measure (Planner._remeasure) is funded so too, priced at no less
    than the last one lost. The budget is per source so that one drafter's learning never starves
    the other's: the hybrid learns each part as the part alone would. Every term is in seconds of
    the machine at hand, so the rule compares ratios only."""

    def __init__(self, fraction: float = EXPLORE_FRACTION, grace_steps: int = GRACE_STEPS):
        self.fraction, self.grace_steps = fraction, grace_steps
        self.spent: dict[int, float] = {}  # net measured loss of each source's exploratory steps so far
        self.elapsed = 0.0                 # seconds of every step so far

    def allowance(self, plain_s: float, sat_out: float = 0.0) -> float:
        """What a source may have spent by now: ε × max(elapsed, W plain steps, the seconds it sat out)."""
        return self.fraction * max(self.elapsed, self.grace_steps * plain_s, sat_out)

    def allows(self, source: int, loss: float, plain_s: float, sat_out: float = 0.0) -> bool:
        """Whether an exploratory step of source predicted to lose `loss` seconds fits its budget,
        sat_out seconds since it last drafted."""
        return self.needs(source, loss) <= self.allowance(plain_s, sat_out)

    def needs(self, source: int, loss: float) -> float:
        """The allowance at which an exploratory step of source predicted to lose `loss` fits."""
        return self.spent.get(source, 0.0) + max(loss, 0.0)

    def charge(self, seconds: float, explored: tuple[int, float] | None = None) -> None:
        """Account one step; explored is (source, its loss) for an exploratory step."""
        self.elapsed += seconds
        if explored is not None:
            source, loss = explored
            self.spent[source] = self.spent.get(source, 0.0) + loss
