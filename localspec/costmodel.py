"""Pure cost formulas: expected tokens per step, step seconds, the best draft length, the draft's
token-by-token stop rule, and the two measurements they read (a verify-cost curve and acceptance per
draft position), each written once.

Leviathan et al. (2022), §3.3: with acceptance rate α, a step that drafts γ tokens emits
(1 − α^(γ+1)) / (1 − α) tokens in expectation. Departure: we keep the acceptance of each draft
position separately (a_i = P(draft i accepted | drafts 1..i−1 accepted)), so
E(γ) = 1 + Σ_{i=1..γ} Π_{j≤i} a_j, which is the paper's formula when every a_i = α. A step costs
γ draft tokens + one target verify of γ+1 tokens (measured per batch size: it is not linear in γ, and
not even monotone on some CPUs) + the controller's own time. γ = 0 is plain decoding.

Where a draft stops within γ is decided token by token (DraftStop, "p-min auto"): draft on while
what drafting on to some length within γ is expected to add, reach × (a + a² + ...) tokens with
a = a(confidence), costs less time than those tokens take at the rate the loop achieves (the draft
decodes plus the verify batch's growth, which can be negative where a wider batch verifies faster).
That is the stopping rule that maximises a renewal process's long-run rate E[tokens] / E[seconds].

A step whose draft such a rule may end early is priced by where it ends (DraftStops): with
g_i = P(the draft goes on past token i | tokens 1..i drafted and accepted) and
u_i = P(the draft goes on past token i | tokens 1..i drafted), measured, a step capped at γ emits
E(γ) = 1 + Σ_{i=1..γ} Π_{j<i} g_j · Π_{j≤i} a_j tokens (g_0 = 1: a step drafts its first token) and
costs S(γ) = verify(1) + Σ_{n=1..γ} P(N ≥ n) (c(n) − c(n−1)) + overhead with P(N ≥ n) = Π_{j<n} u_j
and c(n) = n draft tokens + verify(n+1): the expected cost over where the draft ends, which
telescopes to step_seconds(γ) when every draft runs to its cap. Departure from the papers, which price
a draft of fixed length: priced so, a draft stopped at its first token mostly, and accepted mostly
there, looks as dear as the γ it may reach.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, NamedTuple, Sequence


def rate_at(rates: Sequence[float], i: int) -> float:
    """Position i's rate in a per-position list whose last rate stands for every position past its end."""
    return rates[min(i, len(rates) - 1)]


def expected_tokens(accept: Sequence[float], gamma: int) -> float:
    """Tokens emitted per step with gamma drafts, given per-position conditional acceptance."""
    total, reach = 1.0, 1.0
    for i in range(gamma):
        reach *= rate_at(accept, i)
        total += reach
    return total


class Prediction(NamedTuple):
    """What one step is expected to bring: tokens emitted and seconds taken (Planner.predict)."""

    tokens: float
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / max(self.seconds, 1e-300)


MATCH_LENGTH_BUCKETS = 6


def match_bucket(length: int, in_output: bool = False) -> int:
    """The acceptance bucket of an n-gram match of this many tokens: 1, 2-3, 4-7, 8-15, 16-31, 32+
    (buckets 1..6) where the earlier occurrence lies in the prompt, 7..12 where it lies in the
    generation's own output (bucket 0 is a drafter without match lengths). A reply that copies its
    input and a reply that repeats itself are different bets: a short match of "```" at a code
    block's end against the block's opening "```python" reaches back as far as a copy's first match
    does, and is wrong where the copy is right."""
    bucket = min(max(length, 1).bit_length(), MATCH_LENGTH_BUCKETS)
    return bucket + MATCH_LENGTH_BUCKETS if in_output else bucket


def _on(go_on: Sequence[float], i: int) -> float:
    """go_on[i - 1], the chance a draft goes on past token i (1.0 where unmeasured: to its cap)."""
    return go_on[i - 1] if 0 < i <= len(go_on) else 1.0


def expected_tokens_upto(accept: Sequence[float], gamma_max: int, tokens_on: Sequence[float] = ()) -> list[float]:
    """E(γ) for every γ in 0..gamma_max, in one pass: expected_tokens(accept, γ) where every draft
    runs to its cap; with tokens_on (g_i, see the module docstring), where a stop rule may end it."""
    totals, reach, total = [1.0], 1.0, 1.0
    n, last, n_on = len(accept), accept[-1], len(tokens_on)  # (_on and rate_at inlined: the planner's every step)
    for i in range(gamma_max):
        a = accept[i] if i < n else last
        if 0 < i <= n_on:
            a *= tokens_on[i - 1]
        reach *= a
        total += reach
        totals.append(total)
    return totals


def step_seconds(gamma: int, draft_s: float, verify_s: Callable[[int], float], overhead_s: float) -> float:
    """Wall time of one step: gamma draft tokens, a verify batch of gamma+1, controller overhead."""
    return gamma * draft_s + verify_s(gamma + 1) + overhead_s


def expected_seconds_upto(gamma_max: int, draft_s: float, verify_s: Callable[[int], float], overhead_s: float,
                          draft_on: Sequence[float] = ()) -> list[float]:
    """S(γ) for every γ in 0..gamma_max (the module docstring): step_seconds(γ) where every draft
    runs to its cap; with draft_on (u_i), the expected seconds over where a stop rule ends it."""
    total, reach, last, n_on = step_seconds(0, draft_s, verify_s, overhead_s), 1.0, verify_s(1), len(draft_on)
    totals = [total]
    for n in range(1, gamma_max + 1):
        if 1 < n <= n_on + 1:
            reach *= draft_on[n - 2]  # P(N ≥ n): _on(draft_on, n - 1), inlined
        cost = n * draft_s + verify_s(n + 1)
        total += reach * (cost - last)
        totals.append(total)
        last = cost
    return totals


def best_gamma(accept: Sequence[float], draft_s: float, verify_s: Callable[[int], float],
               overhead_s: float, gamma_max: int, min_gain: float = 0.0,
               tokens_on: Sequence[float] = (), draft_on: Sequence[float] = ()) -> tuple[int, float]:
    """(gamma, predicted tokens/s) maximising expected tokens per second; gamma 0 included. gamma is a
    cap where tokens_on and draft_on say how a stop rule ends drafts before it (DraftStops).

    Speculation must beat plain decoding by min_gain (a fraction) to be chosen: the prediction
    has errors, and losing to plain decoding is worse than missing a marginal win."""
    tokens = expected_tokens_upto(accept, gamma_max, tokens_on)
    seconds = expected_seconds_upto(gamma_max, draft_s, verify_s, overhead_s, draft_on)
    plain = 1.0 / seconds[0]
    best = (0, plain * (1 + min_gain))
    for gamma in range(1, gamma_max + 1):
        tps = tokens[gamma] / seconds[gamma]
        if tps > best[1] * 1.0001:  # ties go to the shorter draft: less work, same speed
            best = (gamma, tps)
    return best if best[0] else (0, plain)


CONFIDENCE_BINS = 10
FALLBACK_P_MIN = 0.75  # before anything is measured: llama.cpp's common p-min


class DraftStop:
    """One step's cost-aware p-min: keep(i, confidence) before drafting token i + 1 (i drafted).

    Draft on while drafting on to some length j (up to the step's γ, `horizon`) pays: the tokens it
    adds, reach × (a + a² + ... ), a being the measured acceptance at this confidence, against the
    loop's rate × the seconds it costs (j - i draft decodes and the verify batch's growth). Looking
    past the next token matters where the verify's cost per token falls with the batch: a one-token
    lookahead would stop before a dear batch size even where a cheaper, wider one lies beyond it.

    The first draft of a step is always made: whether to speculate at all is the planner's call, and
    a step it chose must measure something. Refusing it could trap the planner: with verify(2) not yet
    measured it is extrapolated pessimistically, no draft would pay, and the draft's catch-up would be
    paid every step for nothing."""

    def __init__(self, accept: Callable[[float], float], rate: float, draft_s: float,
                 verify_s: Callable[[int], float], horizon: int | None = None):
        self.accept, self.rate, self.draft_s, self.verify_s = accept, rate, draft_s, verify_s
        self.horizon = horizon  # the step's γ; None: look one token ahead
        self.reach = 1.0

    def keep(self, i: int, confidence: float) -> bool:
        a = self.accept(confidence)
        if i == 0:
            self.reach = a
            return True
        if not self._pays(i, a):
            return False
        self.reach *= a
        return True

    def _pays(self, i: int, a: float) -> bool:
        """Whether drafting on from i drafts to some j in i+1..horizon adds more tokens than its
        seconds are worth at `rate` (each further draft assumed accepted with chance a)."""
        gain, reach, base = 0.0, self.reach, self.verify_s(i + 1)
        for j in range(i + 1, max(self.horizon or 0, i + 1) + 1):
            reach *= a
            gain += reach
            if gain > self.rate * ((j - i) * self.draft_s + self.verify_s(j + 1) - base):
                return True
        return False


class FixedStop:
    """A fixed p-min: keep drafting while the draft's confidence is at least p_min (first: the first
    draft of a step is always made, as DraftStop does)."""

    def __init__(self, p_min: float, first: bool = False):
        self.p_min, self.first = p_min, first

    def keep(self, i: int, confidence: float) -> bool:
        return (self.first and i == 0) or confidence >= self.p_min


STALL_FACTOR = 3.0  # past the first samples, one sample moves an average as if at most this many times it


class Ema:
    """A moving average: the median of the first 1/weight samples, then exponential from there. The
    median because first measurements are the least typical (a model's first decodes may still be
    faulting its weights in): one sample several times the rest would hold a mean of ten far above
    them, and a planner that stops drafting on it never measures the draft again. A value loaded
    from an earlier process counts as one sample (load, tracker.from_dict), so this run's first
    measurements move it at once.

    From there a sample counts as at most STALL_FACTOR times the average: a process stalled for
    seconds (another tenant of the machine, swapping) only ever adds time, and taken whole, a 2.4 s
    stall moved a 130 ms plain step's average by 224 ms; the planner then read drafts as wins against
    a plain step it thought slow, and lost 11% on prose. A cost that really grows is followed almost
    as fast: after a lasting fivefold rise, 15 samples take the average 77% of the way, against 79%
    taking every sample whole."""

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

    def load(self, value: float | None, n: int) -> None:
        """Start from a saved average that weighs as n samples (at most one)."""
        self.n = 0 if value is None else min(n, 1)
        self.value, self._first = value, [value] * self.n


TRUSTED_SAMPLES = 3  # a size measured this often has a median one outlier cannot set (Ema)
OUTLIER_FACTOR = 1.25  # an untrusted size this far above what the others put it may have stalled (_as_others_put_it)
MEMO_TOLERANCE = 0.01  # how far a trusted size's average may move before the curve is refitted (VerifyCurve.add)


class VerifyCurve:
    """Seconds to verify a batch of k tokens: measured per k (a moving average), linear between
    measured sizes; beyond the largest along the slope from the smallest to the largest, never
    negative (noise in the last segment cannot bend it down); below the smallest along the first
    segment. With one point only, cost is assumed to grow in proportion to k (pessimistic).

    One verify's seconds vary by 6-11% on a quiet 2-core CPU, and a size the planner does not choose
    is not measured again. So a size measured fewer than TRUSTED_SAMPLES times is read no cheaper
    than a narrower trusted size (one measured that often) and no dearer than a wider one: a wider
    batch costs no less. Read as it came, one fast sample held the planner at a size no cheaper than
    its neighbours. (Where trusted sizes break that law between themselves, it is held between them.)

    optimistic(k) is what a batch may cost at best: beyond the widest measured size no more than
    the widest (the estimate where that is lower), and a size wider than every trusted one also no
    more per row than the widest trusted size or any size between, since a wider batch seldom costs
    more per row. Within the trusted range the point estimate holds: there tile boundaries break
    that law by up to a quarter on a CPU, and nothing the planner does not choose is measured again.
    next_width(k), what an exploratory step is priced by, reads the optimistic curve up to the first
    size past the widest measured (one slow sample at the widest size otherwise priced every wider
    probe out of the budget for good), and wider sizes no cheaper a row than the widest: a bound on
    what the probe may lose, which the budget needs (ExploreBudget). Along the curve's slope it was
    none: where a plain step costs more than a 2-row verify (on the 2-core Xeon with the F16 target,
    one row takes another kernel) that slope is nearly flat, and a 36-row probe priced at 0.61 s took
    1.14 s. A size chosen is measured when it runs, and the widest measured size moves out only by
    trying a wider one."""

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
        every plain step adds a one-token verify, and rebuilt at each, they doubled the time a
        pricing took, at a GPU's steps a per cent of them (README, the H200 again). A trusted size
        reads as measured all the same (seconds)."""
        point = self.points.get(k)
        if point is None:
            point = self.points[k] = Ema()
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

    def _extend(self, mode: int, k: int) -> float:
        """Fill mode's table past k in one pass (see __init__), at least doubling it, since widths
        are read in ascending order; return its value at k."""
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
        return table[k]


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
    (an n-gram copy's widths), and one slow sample at the widest measured, read as it came, priced
    every wider copy out of the lookup's hope: it stayed at 52-token copies where a run whose curve
    had no such sample drafted 87."""
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
    than that: the hope that it was a stall. Read as it came, one stalled copy's first wide verify
    priced every width past the narrow trusted ones out of both the known choice and the hope, and
    the lookup drafted a few tokens a step for good (README, "The H200 again"); hoped for at what
    the others say, it is probed again under the budget until its median is trusted. (Where it is
    not far above them, it is read as it came: a size on the others' line would otherwise be read
    at one or the other by rounding alone.)"""
    out = []
    for i, (k, t) in enumerate(fit):
        if k in untrusted:  # a trusted size is in fit too: the others are never none
            put = _estimates([*fit[:i], *fit[i + 1:]], k, k)[0]
            t = min(t, put) if untrusted[k] > OUTLIER_FACTOR * put else t
        out.append((k, t))
    return out


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

    def record(self, n_drafted: int, n_accepted: int) -> None:
        """One verified proposal of n_drafted tokens, of which the first n_accepted were accepted."""
        grow = n_drafted - len(self.drafted)
        if grow > 0:
            for counts in (self.drafted, self.judged, self.accepted):
                counts.extend([0] * grow)
        for i in range(n_drafted):
            self.drafted[i] += 1
            self.judged[i] += i <= n_accepted
            self.accepted[i] += i < n_accepted

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


class DraftStops:
    """Where a stop rule ended drafts: per position i ≥ 1, of the steps that drafted token i with room
    for more (their γ above i), how many drafted token i + 1 — over all of them (u_i: what a step's
    drafting and verify cost) and over those whose first i drafts the target accepted (g_i: what it
    emits). A draft cut by its γ, or handed over to a copy, tells nothing of the rule past its end."""

    def __init__(self):
        self.could: list[int] = []     # drafted token i with room for more
        self.went: list[int] = []      # ... and drafted token i + 1
        self.could_ok: list[int] = []  # as could, with tokens 1..i accepted
        self.went_ok: list[int] = []

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
    def from_rows(cls, rows: Sequence[Sequence[int]]) -> DraftStops:
        """The counter saved by to_rows (ValueError for rows of unequal length)."""
        c = cls()
        c.could, c.went, c.could_ok, c.went_ok = ([int(n) for n in r] for r in rows)
        if len({len(r) for r in rows}) > 1:
            raise ValueError("draft stop rows of unequal length")
        return c


TEXTS_KEPT = 16     # the latest texts a draft model's acceptance per text is kept for
TEXT_LEAST = 8      # drafts a text must have had judged to count among them
TEXT_PRIOR_ROWS = 4.0  # until two texts are kept, a text's own counts lean on the pooled rate with this weight
SURE_SHIFT = 10.0   # a shift in log-odds that makes every rate 1 but for a few in 10^5: a text every guess fits


class TextAcceptance:
    """A draft's acceptance per text (a generation: a reply, a completion) and what it says of the
    text at hand and of the next one.

    Acceptance differs between texts far more than within one: a 0.5B draft's guesses at prose are
    taken less often than at code. Counts pooled over a process hold whatever it met first, and one
    prose reply measured at 0.6 kept the draft out of the code replies after it, where it is taken
    at 0.85. So the texts are a random-effects model: each text has its own rate, drawn around the
    mean of the texts kept with the variance between them that their counts show beyond chance
    (between_variance). The text at hand is estimated by its own counts shrunk towards that mean, with
    the weight p(1 - p) / variance in pseudo-drafts (empirical Bayes: texts that differ little lean
    on the mean, texts that differ much on their own counts; TEXT_PRIOR_ROWS until two texts are
    kept, when nothing says how much they differ). shift() is that estimate against the mean, in
    log-odds; outlook() the spread a new text's rate may take."""

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
