"""Measured seconds: a moving average that a stall cannot set (Ema), the one verify-cost curve
(VerifyCurve: seconds to verify a batch of k tokens, measured per k, estimated between and beyond),
and what a wider decode costs the one-row decodes after it (ReturnCost).
"""

from __future__ import annotations

import math
import statistics
from typing import Sequence

STALL_FACTOR = 3.0  # past the first samples, one sample moves an average as if at most this many times it


class Ema:
    """A moving average: the median of the first 1/weight samples, then exponential from there. The
    median because first measurements are the least typical (a model's first decodes may still be
    faulting its weights in), and a planner that stops drafting on one inflated sample never measures
    the draft again. A value loaded from an earlier process counts as one sample (load,
    trackerfile.load_saved), so this run's first measurements move it at once.

    From there a sample counts as at most STALL_FACTOR times the average: a stall (another tenant of
    the machine, swapping) only ever adds time, and taken whole it would make a plain step look slow
    and drafts look like wins. A cost that really grows is followed almost as fast."""

    def __init__(self, weight: float = 0.1):
        self.weight, self.value, self.n = weight, None, 0
        self._first: list[float] = []  # the samples so far, while n ≤ 1/weight

    def add(self, x: float, times: int = 1) -> None:
        """One sample x, or `times` samples of it (a value measured over that many tokens)."""
        for _ in range(times):  # (one body, no call a sample: every plain step adds one to each tracker)
            self.n += 1
            if self.n * self.weight <= 1.0:
                self._first.append(x)
                self.value = statistics.median(self._first)
                continue
            if self._first:
                self._first = []  # the median is taken: the samples are no longer needed
            # (an average of nothing measurable yet holds no sample back)
            sample = min(x, STALL_FACTOR * self.value) if self.value > 0.0 else x
            self.value += self.weight * (sample - self.value)

    def first(self) -> bool:
        """Whether the value is still the median of the first samples (at most 1/weight of them; add
        reads the same inline, a call a sample being dearer there)."""
        return self.n * self.weight <= 1.0

    def load(self, value: float | None, n: int) -> None:
        """Start from a saved average that weighs as n samples (at most one)."""
        self.n = 0 if value is None else min(n, 1)
        self.value, self._first = value, [value] * self.n


class Seconds(Ema):
    """An Ema of one kind of decode's seconds (a draft row, a verify of k rows) that starts over at a
    sample below a STALL_FACTOR-th of it while it rests on fewer than `fresh` samples (by default
    while it is its first samples' median). A stall only ever adds time, so an average that far above
    what the decode just took was set by a stretch of stalls (a few can fill the first samples), or
    the machine has since got faster: either way it does not say what the decode costs, and a
    drafter those costs keep out is measured again only rarely (Probes._remeasure). Past them,
    STALL_FACTOR holds what one stalled sample adds."""

    def __init__(self, fresh: int | None = None, weight: float = 0.1):
        super().__init__(weight)
        self.fresh = fresh

    def add(self, x: float, times: int = 1) -> None:
        young = self.first() if self.fresh is None else self.n < self.fresh
        if self.value is not None and young and x * STALL_FACTOR < self.value:
            self.value, self.n, self._first = None, 0, []
        super().add(x, times)


TRUSTED_SAMPLES = 3  # a size measured this often has a median one outlier cannot set (Ema)
OUTLIER_FACTOR = 1.25  # an untrusted size this far above what the others put it may have stalled (_as_others_put_it)
MEMO_TOLERANCE = 0.01  # how far a trusted size's average may move before the curve is refitted (VerifyCurve.add)


class VerifyCurve:
    """Seconds to verify a batch of k tokens: measured per k (a moving average), linear between
    measured sizes; beyond the largest along the slope from the smallest to the largest, never
    negative (noise in the last segment cannot bend it down); below the smallest along the first
    segment. With one point only, cost is assumed to grow in proportion to k (pessimistic).

    One verify's seconds vary, and a size the planner does not choose is not measured again. So a
    size measured fewer than TRUSTED_SAMPLES times is read no cheaper than a narrower trusted size
    (one measured that often) and no dearer than a wider one: a wider batch costs no less. (Where
    trusted sizes break that law between themselves, it is held between them.)

    optimistic(k) is what a batch may cost at best: beyond the widest measured size no more than the
    widest, and past every trusted size no more per row than the widest trusted size or any between
    (a wider batch seldom costs more a row); within the trusted range, where tile boundaries break
    that law, the point estimate holds.
    next_width(k), what an exploratory step is priced by, reads the optimistic curve up to the first
    size past the widest measured, and wider sizes no cheaper a row than the widest: a bound on what
    the probe may lose, which the budget needs (ExploreBudget) and the curve's slope does not give.
    The widest measured size moves out only by trying a wider one."""

    def __init__(self, means: dict[int, float] | None = None):
        self.points: dict[int, Ema] = {}
        # seconds(k), optimistic(k), next_width(k) for k = 0, 1, ..., until the curve moves (add):
        # the planner reads every width up to a drafter's cap (127 for n-gram copies) each step, so
        # each table is filled in one pass along the curve's segments, as far as it is read (_extend)
        self._memo: tuple[list[float], ...] = ([], [], [])
        self._fits: dict[bool | str, list[tuple[int, float]]] = {}  # fitted(hopeful), _hoped(), until the curve moves
        self._basis: dict[int, float] = {}  # each size's seconds when the fits were made
        for k, seconds in (means or {}).items():
            self.add(k, seconds)

    def add(self, k: int, seconds: float) -> None:
        """One measured verify of k tokens. The tables and fits are kept while the size is trusted
        before and after, and its average stays within MEMO_TOLERANCE of what they were made from:
        every plain step adds a one-token verify, and rebuilding them at each would slow every
        pricing. A trusted size reads as measured all the same (seconds)."""
        point = self.points.get(k)
        if point is None:  # (a size measured fewer than TRUSTED_SAMPLES times may be a stall's)
            point = self.points[k] = Seconds(TRUSTED_SAMPLES)
        point.add(seconds)
        basis = self._basis.get(k)
        if (basis is None or point.n <= TRUSTED_SAMPLES
                or abs(point.value - basis) > MEMO_TOLERANCE * basis):
            for table in self._memo:
                table.clear()
            self._fits.clear()
            self._basis.clear()
        elif k < len(self._memo[0]):
            self._memo[0][k] = point.value  # a trusted size reads as measured (seconds)

    def __contains__(self, k: int) -> bool:
        return k in self.points

    def samples(self, k: int) -> int:
        """How many verifies of k tokens the estimate rests on (a saved one counts as one)."""
        return self.points[k].n if k in self.points else 0

    def known(self) -> list[tuple[int, float]]:
        """Measured (k, seconds), by k."""
        return sorted((k, e.value) for k, e in self.points.items())

    def fitted(self, hopeful: bool = False) -> list[tuple[int, float]]:
        """known(), each size measured fewer than TRUSTED_SAMPLES times held between the trusted
        sizes around it; hopeful: one wider than every trusted size also no dearer per row than the
        widest trusted or any size between (_no_dearer_a_row). Kept until the curve moves (add)."""
        fit = self._fits.get(hopeful)
        if fit is None:
            known = self.known()
            if not self._basis:  # what every fit until the next refit is measured against (add)
                self._basis = dict(known)
            trusted = [(k, t) for k, t in known if self.points[k].n >= TRUSTED_SAMPLES]
            fit = known if not trusted else [
                (k, t if self.points[k].n >= TRUSTED_SAMPLES else _bounded(k, t, trusted)) for k, t in known]
            if hopeful and trusted:
                fit = _no_dearer_a_row(fit, trusted[-1][0])
            self._fits[hopeful] = fit
        return fit

    def _hoped(self) -> list[tuple[int, float]]:
        """fitted(hopeful=True), each untrusted size wider than every trusted one also no dearer than
        the other sizes put it (_as_others_put_it): what optimistic() reads. Not next_width(), whose
        widest size bounds a probe's loss for the budget. Kept until the curve moves (add)."""
        fit = self._fits.get("others")
        if fit is None:
            fit = self.fitted(hopeful=True)
            trusted = [k for k, e in self.points.items() if e.n >= TRUSTED_SAMPLES]
            if trusted:
                widest = max(trusted)
                fit = _as_others_put_it(fit, {k: e.value for k, e in self.points.items()
                                              if k > widest and e.n < TRUSTED_SAMPLES})
            self._fits["others"] = fit
        return fit

    def seconds(self, k: int) -> float:
        """Measured, interpolated or extrapolated seconds for a batch of k (0.0 before any measurement).
        A trusted size reads as measured, without a fit: a plain step measures one token's verify and
        asks its seconds again each step, which would otherwise refit the curve every time."""
        table = self._memo[0]
        if k < len(table):
            return table[k]
        point = self.points.get(k)
        return point.value if point is not None and point.n >= TRUSTED_SAMPLES else self._extend(0, k)

    def optimistic(self, k: int) -> float:
        """The least a batch of k may cost given the measurements (see the class docstring)."""
        table = self._memo[1]
        return table[k] if k < len(table) else self._extend(1, k)

    def next_width(self, k: int) -> float:
        """The optimistic estimate up to the first size wider than every measured one, and beyond it
        the estimate but no cheaper a row than the widest measured size: what an exploratory step's
        stop rule and its loss read, so that the draft reaches one size the curve has not measured,
        and stops beyond it where drafting on may not pay, and a probe's loss is priced at no less
        than its verify may cost (a wider batch seldom costs more a row)."""
        table = self._memo[2]
        return table[k] if k < len(table) else self._extend(2, k)

    def upto(self, mode: int, k: int) -> list[float]:
        """mode's table (0: seconds, 1: optimistic, 2: next_width) filled at least to k: every width
        0..k at once, as pricing reads them (Widths.upto). The table itself: not to be changed."""
        table = self._memo[mode]
        if len(table) <= k:
            self._extend(mode, k)
        return table

    def _extend(self, mode: int, k: int) -> float:
        """Fill mode's table past k in one pass (see __init__), at least doubling it, since widths
        are read in ascending order; return its value at k. A trusted size in the seconds table reads
        as measured, as add() keeps it (the fits it is filled from are kept within MEMO_TOLERANCE)."""
        known = self._hoped() if mode == 1 else self.fitted(hopeful=mode == 2)
        table = self._memo[mode]
        start = len(table)
        end = max(k, 2 * start, 16)
        values = _estimates(known, start, end)
        if known:
            widest, widest_s = known[-1]
            if mode == 1:  # beyond the widest measured size, no dearer than it
                values = [min(t, widest_s) if w > widest else t for w, t in enumerate(values, start)]
            elif mode == 2:  # the first size beyond it likewise; wider ones no cheaper a row than it
                values = [min(t, widest_s) if w == widest + 1 else max(t, widest_s * w / widest) if w > widest
                          else t for w, t in enumerate(values, start)]
        table.extend(values)
        if mode == 0:
            for w, point in self.points.items():
                if start <= w < len(table) and point.n >= TRUSTED_SAMPLES:
                    table[w] = point.value
        return table[k]


RETURN_ROWS = 2  # the one-row decodes after a wider one whose extra seconds are the wider one's (ReturnCost)


OWN, OTHER, INTAKE = 0, 1, 2  # whose wider decode the one-row decodes after it follow (ReturnCost)


class ReturnCost:
    """What a decode wider than one row (a verify of drafts) costs the one-row decodes after it,
    beyond a steady one-row decode. A backend may keep state for the shape it last ran that another
    shape resets: ggml's CUDA backend replays a captured graph for each one-row decode, and after a
    decode of another shape runs the next one-row decode without it and captures it again at the
    one after (it waits for two calls of one shape); llama.cpp rebuilds its own graph at each change
    of shape. Those decodes are plain steps, but their extra seconds are the drafting step's doing.

    Measured by position after a wider decode (the first RETURN_ROWS one-row decodes), as each
    decode's seconds beyond the steady one-row cost, and charged to each of the drafter's own wider
    decodes at the share of them that such a decode followed (a copy's drafting steps often follow
    each other, each paying its own change of shape inside its verify). The one-row curve takes
    those decodes less their position's measured extra, so that it stays the steady cost and a plain
    step measured again after drafting (planning/baseline.py) still counts."""

    __slots__ = ("extra", "followed", "wide", "age", "after")

    def __init__(self):
        self.extra = [Ema() for _ in range(RETURN_ROWS)]  # seconds beyond steady, by position after a wider decode
        self.followed = [0] * RETURN_ROWS  # own wider decodes that a one-row decode at that position followed
        self.wide = 0                      # own wider decodes seen
        self.age = RETURN_ROWS             # one-row decodes since the latest wider decode, up to RETURN_ROWS
        self.after = OWN                   # whose that decode was: OWN, OTHER's or the prompt's INTAKE

    def wider(self, own: bool = True) -> None:
        """A decode wider than one row: a verify of this tracker's drafter's own draft, or of another
        drafter's. Both measure the extra of the one-row decodes after them (the target's, whoever
        drafted); a drafter's share of verifies they follow is its own verifies' (a copy's follow
        each other, a draft model's seldom), so that a hybrid's draft model, whose verifies plain
        steps follow, does not price the lookup's copies at its share (the lookup's first probe of a
        copy was priced out of a GPU's budget in plannersim)."""
        self.age, self.after = 0, OWN if own else OTHER
        self.wide += own

    def intake(self) -> None:
        """The prompt's intake in one decode wider than one row: no drafting step's. The one-row
        decodes after it leave the steady curve as those after a verify do (one_row), less the
        extra measured after verifies, and measure nothing of it: an intake is no drafting step's
        cost, and its batch, far wider than a verify's, may cost them more."""
        self.age, self.after = 0, INTAKE

    def one_row(self, seconds: float, steady: float | None) -> float | None:
        """A one-row decode of `seconds`, the steady one-row cost `steady` (None: none measured yet);
        returns its seconds as the steady curve takes them, or None where it is no sample of it: one
        right after the prompt's intake whose extra is not known (a GPU's first decodes of a reply
        would otherwise set the plain step of a process's first plans: timings.Ema's median)."""
        i = self.age
        if i >= RETURN_ROWS:
            return seconds
        self.age = i + 1
        extra = self.extra[i]
        if self.after == INTAKE:
            return None if steady is None or extra.value is None else seconds - max(extra.value, 0.0)
        self.followed[i] += self.after == OWN
        if steady is None:
            return seconds
        extra.add(seconds - steady)
        return seconds - max(extra.value, 0.0)

    def seconds(self) -> float:
        """What a wider decode adds to the one-row decodes after it, over the wider decodes seen."""
        if not self.wide:
            return 0.0
        return sum(max(e.value or 0.0, 0.0) * n for e, n in zip(self.extra, self.followed)) / self.wide

    def shares(self) -> list[tuple[float, float]]:
        """(seconds beyond steady, share of the wider decodes seen it followed) of each position after
        a wider decode whose extra is above nothing; none before the first wider decode. What the
        hope counts of them (CostTracker.estimate) is each at most at the chance a step's draft is
        broken (costmodel.Estimate.returned: a draft taken whole is drafted on from)."""
        if not self.wide:
            return []
        return [(e.value, n / self.wide) for e, n in zip(self.extra, self.followed) if e.value and e.value > 0.0]


class Widths:
    """One of a VerifyCurve's estimates by batch width (mode: 0 seconds, 1 optimistic, 2 next_width),
    plus extra for every batch wider than one (a hybrid's switch cost, CostTracker.estimate): called
    with k, a batch of k's seconds; upto(k), those of every width 0..k in one list, what the cost
    formulas read (costmodel.expected_seconds_upto) where a drafter's cap reaches 127 widths."""

    __slots__ = ("curve", "mode", "extra", "_read")

    def __init__(self, curve: VerifyCurve, mode: int, extra: float = 0.0):
        self.curve, self.mode, self.extra = curve, mode, extra
        self._read = (curve.seconds, curve.optimistic, curve.next_width)[mode]

    def __call__(self, k: int) -> float:
        seconds = self._read(k)
        return seconds + self.extra if k > 1 else seconds

    def upto(self, k: int) -> Sequence[float]:
        table = self.curve.upto(self.mode, k)
        if not self.extra:
            return table
        extra = self.extra
        return [t + extra if w > 1 else t for w, t in enumerate(table[: k + 1])]


def _estimates(known: Sequence[tuple[int, float]], lo: int, hi: int) -> list[float]:
    """Seconds for every batch size lo..hi along the measured points (k, t), sorted by k: a measured
    size as measured; between two, linear (never below half the smallest's seconds); below the
    smallest, along the first segment; beyond the widest, along the slope from the smallest to the
    widest, never falling; one point alone, in proportion to k; none: 0.0."""
    if not known:
        return [0.0] * (hi - lo + 1)
    if len(known) == 1:
        n, t = known[0]
        return [t if k == n else t * k / n for k in range(lo, hi + 1)]
    (k0, t0), (kn, tn) = known[0], known[-1]
    floor, end = t0 * 0.5, hi + 1
    (ka, ta), (kb, tb) = known[0], known[1]
    slope = (tb - ta) / (kb - ka)
    out = [max(ta + slope * (k - ka), floor) for k in range(lo, min(end, k0))]  # below the smallest
    for (ka, ta), (kb, tb) in zip(known, known[1:]):  # segment by segment, in one list
        if lo <= ka < end:
            out.append(ta)
        slope = (tb - ta) / (kb - ka)
        out += [max(ta + slope * (k - ka), floor) for k in range(max(lo, ka + 1), min(end, kb))]
    if lo <= kn < end:
        out.append(tn)
    rise = max(0.0, (tn - t0) / (kn - k0))
    return out + [tn + rise * (k - kn) for k in range(max(lo, kn + 1), end)]


def _bounded(k: int, seconds: float, trusted: Sequence[tuple[int, float]]) -> float:
    """seconds for a batch of k held no lower than the trusted (k', t') narrower than k and no higher
    than those wider (between the two where the trusted break that order)."""
    low = max((t for w, t in trusted if w < k), default=0.0)
    high = min((t for w, t in trusted if w > k), default=math.inf)
    return min(max(seconds, min(low, high)), max(low, high))


def _no_dearer_a_row(fit: Sequence[tuple[int, float]], widest_trusted: int) -> list[tuple[int, float]]:
    """fit, each size wider than the widest trusted one held no dearer per row than any size from
    that one up to it: the hope beyond the trusted range. Those sizes are each measured about once
    (an n-gram copy's widths), and one slow sample at the widest measured, read as it came, would
    price every wider copy out of the lookup's hope."""
    out, least = [], math.inf
    for k, t in fit:
        if k > widest_trusted:
            t = min(t, least * k)
        if k >= widest_trusted:
            least = min(least, t / k)
        out.append((k, t))
    return out


def _as_others_put_it(fit: Sequence[tuple[int, float]], untrusted: dict[int, float]) -> list[tuple[int, float]]:
    """fit, each untrusted size (untrusted: its seconds as measured) that came out more than
    OUTLIER_FACTOR above what the rest of fit puts it at (_estimates without it) read no dearer
    than that: the hope that it was a stall. Read as it came, one stalled wide verify would price
    every wider width out of both the known choice and the hope for good (scripts/results/HISTORY.md,
    "The H200 again"); hoped for at what the others say, it is probed again under the budget until its
    median is trusted. (Where it is not far above them, it is read as it came.)"""
    out = []
    for i, (k, t) in enumerate(fit):
        if k in untrusted:  # a trusted size is in fit too: the others are never none
            put = _estimates([*fit[:i], *fit[i + 1:]], k, k)[0]
            t = min(t, put) if untrusted[k] > OUTLIER_FACTOR * put else t
        out.append((k, t))
    return out
