"""The draft's stop rules within a step's γ, and where they ended drafts.

Where a draft stops within γ is decided token by token (DraftStop, "p-min auto"): draft on while
what drafting on to some length within γ is expected to add, reach × (a + a² + ...) tokens with
a = a(confidence), costs less time than those tokens take at the rate the loop achieves (the draft
decodes plus the verify batch's growth, which can be negative where a wider batch verifies faster).
That is the stopping rule that maximises a renewal process's long-run rate E[tokens] / E[seconds].
FixedStop is llama.cpp's fixed p-min. DraftStops counts where a rule ended the drafts, which the
pure formulas (costmodel.py: E(γ) and S(γ) with g_i and u_i) price a step by.
"""

from __future__ import annotations

from typing import Callable, Sequence

CONFIDENCE_BINS = 10
FALLBACK_P_MIN = 0.75  # before anything is measured: llama.cpp's common p-min
LOOKS_LEAST = 8  # first looks FirstLooks needs before it prices a step's first guess


def confidence_bin(confidence: float) -> int:
    """The bin of CONFIDENCE_BINS that a draft's confidence is counted in."""
    return min(max(int(confidence * CONFIDENCE_BINS), 0), CONFIDENCE_BINS - 1)


class DraftStop:
    """One step's cost-aware p-min: keep(i, confidence) before drafting token i + 1 (i drafted).

    Draft on while drafting on to some length j (up to the step's γ, `horizon`) pays: the tokens it
    adds, reach × (a + a² + ... ), a being the measured acceptance at this confidence, against the
    loop's rate × the seconds it costs (j - i draft decodes and the verify batch's growth). Looking
    past the next token matters where the verify's cost per token falls with the batch: a one-token
    lookahead would stop before a dear batch size even where a cheaper, wider one lies beyond it.

    The first draft of a step is made where drafting pays by the same test (_pays), the step
    plain otherwise: whether to speculate is the planner's call by the mean acceptance, and the draft's
    confidence at this very token tells more (a first guess the draft is unsure of is taken seldom,
    and its verify row and the rows drafted after it cost as much as a sure one's). Only where the
    costs are trusted (decline_first): with verify(2) not yet measured it is extrapolated
    pessimistically, no draft would pay, and a rule that then refused every first draft would never
    measure it; a probe's first draft is always made, as a step taken to measure must measure."""

    def __init__(self, accept: Callable[[float], float], rate: float, draft_s: float,
                 verify_s: Callable[[int], float], horizon: int | None = None, decline_first: bool = False):
        self.accept, self.rate, self.draft_s, self.verify_s = accept, rate, draft_s, verify_s
        self.horizon = horizon  # the step's γ; None: look one token ahead
        self.decline_first = decline_first
        self.reach = 1.0
        self.first: float | None = None  # the confidence of the step's first guess, once looked at

    def keep(self, i: int, confidence: float) -> bool:
        a = self.accept(confidence)
        if i == 0:
            self.reach, self.first = a, confidence
            return not self.decline_first or self._pays(0, a)
        if not self._pays(i, a):
            return False
        self.reach *= a
        return True

    def _pays(self, i: int, a: float) -> bool:
        """Whether drafting on from i drafts to some j in i+1..horizon adds more tokens than its
        seconds are worth at `rate` (each further draft assumed accepted with chance a): the verify's
        growth, and a draft decode a token but at i = 0, where the first guess came with the decode
        that gave its confidence, made whether it is drafted or not."""
        gain, reach, base = 0.0, self.reach if i else 1.0, self.verify_s(i + 1)
        for j in range(i + 1, max(self.horizon or 0, i + 1) + 1):
            reach *= a
            gain += reach
            if gain > self.rate * ((j - i - (i == 0)) * self.draft_s + self.verify_s(j + 1) - base):
                return True
        return False


class FixedStop:
    """A fixed p-min: keep drafting while the draft's confidence is at least p_min (first: the first
    draft of a step is always made, as DraftStop's is where its costs are not trusted)."""

    def __init__(self, p_min: float, first: bool = False):
        self.p_min, self.always_first = p_min, first
        self.first: float | None = None  # the confidence of the step's first guess, once looked at

    def keep(self, i: int, confidence: float) -> bool:
        if i == 0:
            self.first = confidence
        return (self.always_first and i == 0) or confidence >= self.p_min


class FirstLooks:
    """The draft's confidence at each step's first guess, whether a stop rule then drafted it or not
    (counts per confidence_bin): what share of first guesses a rule that declines unsure ones lets
    through, and how often those are taken (kept). The acceptance per position pools the first
    guesses of every step that drafted, a probe's among them (it drafts every first guess): read as
    the first guess of a step whose rule declines the unsure ones, it prices that step by guesses
    it would not draft, and a draft whose sure guesses pay may never be taken where half its first
    guesses are unsure (tests/test_planner.py, the sure runs)."""

    def __init__(self, counts: Sequence[int] | None = None):
        self.counts = [int(n) for n in counts] if counts is not None else [0] * CONFIDENCE_BINS
        if len(self.counts) != CONFIDENCE_BINS or min(self.counts) < 0:
            raise ValueError(f"expected {CONFIDENCE_BINS} first-look counts, none negative")

    def record(self, confidence: float) -> None:
        self.counts[confidence_bin(confidence)] += 1

    def kept(self, keep: Callable[[float], bool], accept: Callable[[float], float]) -> tuple[float, float] | None:
        """(the share of first looks keep lets draft, their acceptance by accept), each bin read at
        its middle confidence; (0.0, 0.0) where it keeps none; None before LOOKS_LEAST looks."""
        total = sum(self.counts)
        if total < LOOKS_LEAST:
            return None
        middles = [(b + 0.5) / CONFIDENCE_BINS for b in range(CONFIDENCE_BINS)]
        kept = [(n, accept(c)) for n, c in zip(self.counts, middles) if n and keep(c)]
        n_kept = sum(n for n, _ in kept)
        return (n_kept / total, sum(n * a for n, a in kept) / n_kept) if n_kept else (0.0, 0.0)


class DraftStops:
    """Where a stop rule ended drafts: per position i ≥ 1, of the steps that drafted token i with room
    for more (their γ above i), how many drafted token i + 1 — over all of them (u_i: what a step's
    drafting and verify cost) and over those whose first i drafts the target accepted (g_i: what it
    emits). A draft cut by its γ, or handed over to a copy, tells nothing of the rule past its end.
    And of the steps a rule judged, how many it let draft their first token (u_0, first_on): a fixed
    p-min declines a first guess below it, after the draft's decode that gave the guess."""

    def __init__(self):
        self.could: list[int] = []     # drafted token i with room for more
        self.went: list[int] = []      # ... and drafted token i + 1
        self.could_ok: list[int] = []  # as could, with tokens 1..i accepted
        self.went_ok: list[int] = []
        self.asked = 0     # steps a rule judged ...
        self.declined = 0  # ... that it let draft none

    def record_first(self, drafted: bool) -> None:
        """One step a rule judged: whether it let the step draft its first token."""
        self.asked += 1
        self.declined += not drafted

    def first_on(self, weight: float) -> float:
        """u_0, smoothed towards 1 (a rule that has declined nothing drafts every first token)."""
        return (self.asked - self.declined + weight) / (self.asked + weight)

    def record(self, n_drafted: int, n_accepted: int, cap: int) -> None:
        """One step that drafted n_drafted tokens of at most cap, the first n_accepted accepted."""
        top = min(n_drafted, cap - 1)
        grow = top - len(self.could)
        if grow > 0:
            for counts in (self.could, self.went, self.could_ok, self.went_ok):
                counts.extend([0] * grow)
        for i in range(1, top + 1):
            went = n_drafted > i
            self.could[i - 1] += 1
            self.went[i - 1] += went
            if n_accepted >= i:
                self.could_ok[i - 1] += 1
                self.went_ok[i - 1] += went

    def rates(self, weight: float) -> tuple[list[float], list[float]]:
        """(g, u) per position from 1, what expected_tokens_upto and expected_seconds_upto read: u
        smoothed towards 1 (a draft runs to its cap), g towards u (a draft that seldom goes on past
        a position seldom does so after accepted guesses either), each with weight pseudo-observations."""
        u = [(w + weight) / (c + weight) for w, c in zip(self.went, self.could)]
        g = [(w + weight * ui) / (c + weight) if c + weight else ui
             for w, c, ui in zip(self.went_ok, self.could_ok, u)]
        return g, u

    def to_rows(self) -> list[list[int]]:
        """[could, went, could_ok, went_ok], for saving."""
        return [list(self.could), list(self.went), list(self.could_ok), list(self.went_ok)]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]], first: Sequence[int] = (0, 0)) -> DraftStops:
        """The counter saved by to_rows, and first: [asked, declined] (ValueError for rows of unequal
        length, or more first guesses declined than judged)."""
        c = cls()
        c.could, c.went, c.could_ok, c.went_ok = ([int(n) for n in r] for r in rows)
        if len({len(r) for r in rows}) > 1:
            raise ValueError("draft stop rows of unequal length")
        c.asked, c.declined = (int(n) for n in first)
        if c.declined > c.asked:
            raise ValueError("more first guesses declined than judged")
        return c
