"""Acceptance counts: per draft position (PositionAcceptance, the a_i of costmodel.expected_tokens)
and per text (TextAcceptance: how far the text at hand lies from the texts measured), with the
random-effects estimate of how much groups of counts differ beyond chance (between_variance).
"""

from __future__ import annotations

import math
from typing import Sequence

from .costmodel import rate_at


def between_variance(counts: Sequence[tuple[int, int]], p: float) -> float | None:
    """How much the true rates of several groups of (judged, accepted) counts differ around p, their
    common rate: the variance between groups the counts show beyond what chance alone would give
    them (the DerSimonian-Laird moment estimate, DerSimonian and Laird 1986; 0.0 where chance
    explains it all). None where fewer than two groups were judged."""
    pairs = [(j, a) for j, a in counts if j]
    total = sum(j for j, _ in pairs)
    scale = total - sum(j * j for j, _ in pairs) / total if total else 0.0
    if len(pairs) < 2 or scale <= 0:
        return None
    q = sum(j * (a / j - p) ** 2 for j, a in pairs)
    return max(0.0, (q - (len(pairs) - 1) * p * (1 - p)) / scale)


class PositionAcceptance:
    """Drafts per draft position: proposed, judged by the target (all up to the first rejection) and
    accepted. rates()[i] is the a_i of expected_tokens: P(draft i accepted | drafts before it accepted)."""

    def __init__(self):
        self.drafted: list[int] = []
        self.judged: list[int] = []
        self.accepted: list[int] = []

    def record(self, n_drafted: int, n_accepted: int, offset: int = 0) -> None:
        """One verified proposal of n_drafted tokens, of which the first n_accepted were accepted;
        offset: they continue a proposal whose first offset drafts were all accepted (its positions
        offset on)."""
        grow = offset + n_drafted - len(self.drafted)
        if grow > 0:
            for counts in (self.drafted, self.judged, self.accepted):
                counts.extend([0] * grow)
        for i in range(n_drafted):
            self.drafted[offset + i] += 1
            self.judged[offset + i] += i <= n_accepted
            self.accepted[offset + i] += i < n_accepted

    @classmethod
    def pooled(cls, counters: Sequence[PositionAcceptance]) -> PositionAcceptance:
        """The counts of several counters added up, position by position."""
        total = cls()
        for c in counters:
            grow = len(c.drafted) - len(total.drafted)
            for mine, theirs in ((total.drafted, c.drafted), (total.judged, c.judged), (total.accepted, c.accepted)):
                mine.extend([0] * max(grow, 0))
                for i, n in enumerate(theirs):
                    mine[i] += n
        return total

    def rates(self, prior: float | Sequence[float] = 0.0, weight: float = 0.0) -> list[float]:
        """Conditional acceptance per position, smoothed towards prior with weight pseudo-observations
        (prior: one rate for every position, or one per position, the last repeated beyond its end;
        an infinite weight gives every position its prior)."""
        priors = [prior] if isinstance(prior, (int, float)) else list(prior) or [0.0]
        if math.isinf(weight):
            return [rate_at(priors, i) for i in range(len(self.judged))]
        return [(a + weight * rate_at(priors, i)) / (j + weight) if j + weight else 0.0
                for i, (j, a) in enumerate(zip(self.judged, self.accepted))]

    def longest_accepted(self) -> int:
        """The most drafts of one proposal accepted so far (0 before any)."""
        return next((i + 1 for i in range(len(self.accepted) - 1, -1, -1) if self.accepted[i]), 0)

    def spread(self, p: float) -> float | None:
        """How much the positions' true rates differ around p, their common rate (between_variance);
        None where fewer than two positions were judged."""
        return between_variance(list(zip(self.judged, self.accepted)), p)

    def to_rows(self) -> list[list[int]]:
        """[drafted, judged, accepted], for saving."""
        return [list(self.drafted), list(self.judged), list(self.accepted)]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> PositionAcceptance:
        """The counter saved by to_rows (ValueError for rows of unequal length)."""
        c = cls()
        c.drafted, c.judged, c.accepted = ([int(n) for n in r] for r in rows)
        if not len(c.drafted) == len(c.judged) == len(c.accepted):
            raise ValueError("acceptance rows of unequal length")
        return c

    def alpha_at(self) -> list[float]:
        """Accepted / proposed per position (unconditional on the earlier drafts)."""
        return [a / d if d else 0.0 for a, d in zip(self.accepted, self.drafted)]


TEXTS_KEPT = 16     # the latest texts a draft model's acceptance per text is kept for
TEXT_LEAST = 8      # drafts a text must have had judged to count among them
TEXT_PRIOR_ROWS = 4.0  # until two texts are kept, a text's own counts lean on the pooled rate with this weight
SURE_SHIFT = 10.0   # a shift in log-odds that makes every rate 1 but for a few in 10^5: a text every guess fits


class TextAcceptance:
    """A draft's acceptance per text (a generation: a reply, a completion) and what it says of the
    text at hand and of the next one.

    Acceptance differs between texts far more than within one (a draft's guesses at prose are taken
    less often than at code), and counts pooled over a process hold whatever it met first, which can
    keep the draft out of the texts after it. So the texts are a random-effects model: each text has
    its own rate, drawn around the mean of the texts kept with the variance between them that their
    counts show beyond chance (between_variance). The text at hand is estimated by its own counts
    shrunk towards that mean, with the weight p(1 - p) / variance in pseudo-drafts (empirical Bayes:
    texts that differ little lean on the mean, texts that differ much on their own counts;
    TEXT_PRIOR_ROWS until two texts are kept, when nothing says how much they differ). shift() is that
    estimate against the mean, in log-odds; outlook() the spread a new text's rate may take."""

    def __init__(self):
        self.texts: list[tuple[int, int]] = []  # (judged, accepted) of the latest texts
        self.judged = 0    # the text at hand's
        self.accepted = 0
        self.second = False  # whether a second text was taken in before two were kept (planner._intake_pays)
        # shift() as last computed, until the counts change (record, begin): the planner asks for it
        # at every step, and the draft model's counts change only at its own drafting steps
        self._shift: float | None = None

    def record(self, judged: int, accepted: int) -> None:
        """Drafts of the text at hand judged, and of them accepted."""
        self.judged += judged
        self.accepted += accepted
        self._shift = None

    def begin(self) -> None:
        """A new text begins: keep the one at hand among the texts if enough of it was judged."""
        if self.judged >= TEXT_LEAST:
            self.texts = [*self.texts, (self.judged, self.accepted)][-TEXTS_KEPT:]
        self.judged = self.accepted = 0
        self._shift = None

    def mean(self) -> float | None:
        """The acceptance over the texts kept and the text at hand (None before any draft was judged)."""
        judged = sum(j for j, _ in self.texts) + self.judged
        return (sum(a for _, a in self.texts) + self.accepted) / judged if judged else None

    def variance(self, mean: float) -> float | None:
        """The variance between the texts kept (between_variance; None before two)."""
        return between_variance(self.texts, mean)

    def weight(self, mean: float) -> float:
        """The pseudo-drafts at the mean that a text's own counts are shrunk with (see the class)."""
        variance = self.variance(mean)
        if variance is None:
            return TEXT_PRIOR_ROWS
        return mean * (1 - mean) / variance if variance > 0 else math.inf

    def shift(self) -> float:
        """How far the text at hand lies from the mean, in log-odds (0.0 with none of it judged, or
        where the texts differ no more than chance makes them)."""
        if self._shift is None:
            self._shift = self._shift_now()
        return self._shift

    def _shift_now(self) -> float:
        mean = self.mean()
        if mean is None or not self.judged:
            return 0.0
        w = self.weight(mean)
        if math.isinf(w):
            return 0.0
        return logit((self.accepted + w * mean) / (self.judged + w)) - logit(mean)

    def outlook(self) -> list[tuple[float, float]] | None:
        """A new text's rate against the mean, as (weight, log-odds shift) points: the three-point
        Gauss-Hermite rule (weights 1/6, 2/3, 1/6 at -√3, 0, √3 standard deviations) for the
        variance between texts, read in log-odds by the delta method. None before two texts are
        kept: then nothing says how far a new text may lie."""
        mean = self.mean()
        variance = self.variance(mean) if mean is not None else None
        if variance is None:
            return None
        sd = math.sqrt(variance) / max(mean * (1 - mean), 1e-3)
        return [(1 / 6, -math.sqrt(3) * sd), (2 / 3, 0.0), (1 / 6, math.sqrt(3) * sd)]

    def to_rows(self) -> list[list[int]]:
        """[judged per text, accepted per text], the text at hand among them as begin() would keep it."""
        texts = [*self.texts, (self.judged, self.accepted)] if self.judged >= TEXT_LEAST else self.texts
        return [[j for j, _ in texts[-TEXTS_KEPT:]], [a for _, a in texts[-TEXTS_KEPT:]]]

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> TextAcceptance:
        c = cls()
        judged, accepted = rows
        if len(judged) != len(accepted):
            raise ValueError("text acceptance rows of unequal length")
        c.texts = [(int(j), int(a)) for j, a in zip(judged, accepted)][-TEXTS_KEPT:]
        return c


def logit(p: float) -> float:
    p = min(max(p, 1e-3), 1 - 1e-3)
    return math.log(p / (1 - p))


def shifted(rates: Sequence[float], shift: float) -> list[float]:
    """Per-position rates moved by shift in log-odds (TextAcceptance.shift); 0 and 1 stay as they are."""
    if not shift:
        return list(rates)
    return [r if r <= 0.0 or r >= 1.0 else 1.0 / (1.0 + math.exp(-(math.log(r / (1 - r)) + shift)))
            for r in rates]


def spliced(first: Sequence[float], rest: Sequence[float], n: int) -> list[float]:
    """Per-position rates: first's for the first n positions, rest's after them (each list's last
    rate standing for the positions beyond its end)."""
    return [rate_at(first if i < n else rest, i) for i in range(max(len(first), len(rest), n + 1))]


def pooling_weight(counts: PositionAcceptance, rate: float, weight: float) -> float:
    """The pseudo-observations of the bucket's rate each position's estimate is smoothed with: a
    binomial count's variance over the variance between positions (PositionAcceptance.spread), the
    weight of a random-effects mean; at least `weight`, and without limit where the positions differ
    no more than chance makes them."""
    spread = counts.spread(rate)
    if spread is None:
        return weight
    return max(weight, rate * (1 - rate) / spread) if spread > 0 else math.inf


def posterior_var(r: float, rate_var: float, judged: int, weight: float) -> float:
    """The variance of a position's rate r, estimated from its judged count smoothed with `weight`
    pseudo-observations of its bucket's rate, whose own variance is rate_var (weight inf: the
    position takes the bucket's rate)."""
    if math.isinf(weight):
        return rate_var
    share = weight / (judged + weight)
    return r * (1 - r) / (judged + weight) + share * share * rate_var


def overall(counts: PositionAcceptance, prior: float, weight: float) -> float:
    """The acceptance of counts over all positions, smoothed towards prior."""
    return (sum(counts.accepted) + weight * prior) / (sum(counts.judged) + weight)
