"""Measured costs and acceptance -> the draft length γ that maximises expected tokens per second.

Leviathan et al. (2022), §3.3: with acceptance rate α, a step that drafts γ tokens emits
(1 − α^(γ+1)) / (1 − α) tokens in expectation. Departure: we keep the acceptance of each draft
position separately (a_i = P(draft i accepted | drafts 1..i−1 accepted)), so
E(γ) = 1 + Σ_{i=1..γ} Π_{j≤i} a_j, which is the paper's formula when every a_i = α. A step costs
γ draft tokens + one target verify of γ+1 tokens (not linear in γ: on a 2-core CPU 27.6 ms for 1
token, 73.5 ms for 4) + the controller's own time. γ = 0 is plain decoding and is always a candidate.

Where a draft stops within γ is decided token by token (DraftStop, "p-min auto"): draft on while
what drafting on to some length within γ is expected to add, reach × (a + a² + ...) tokens with
a = a(confidence), costs less time than those tokens take at the rate the loop achieves (the draft
decodes plus the verify batch's growth, which can be negative: 4 tokens may verify faster than 3). That is
the stopping rule that maximises a renewal process's long-run rate E[tokens] / E[seconds]; a(c) is
the acceptance measured for drafts of confidence c, so a fixed p-min's guess becomes a measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence


def expected_tokens(accept: Sequence[float], gamma: int) -> float:
    """Tokens emitted per step with gamma drafts, given per-position conditional acceptance."""
    total, reach = 1.0, 1.0
    for i in range(gamma):
        reach *= accept[i] if i < len(accept) else accept[-1]
        total += reach
    return total


def step_seconds(gamma: int, draft_s: float, verify_s: Callable[[int], float], overhead_s: float) -> float:
    """Wall time of one step: gamma draft tokens, a verify batch of gamma+1, controller overhead."""
    return gamma * draft_s + verify_s(gamma + 1) + overhead_s


def best_gamma(accept: Sequence[float], draft_s: float, verify_s: Callable[[int], float],
               overhead_s: float, gamma_max: int, min_gain: float = 0.0) -> tuple[int, float]:
    """(gamma, predicted tokens/s) maximising expected tokens per second; gamma 0 included.

    Speculation must beat plain decoding by min_gain (a fraction) to be chosen: the prediction
    has errors, and losing to plain decoding is worse than missing a marginal win."""
    plain = 1.0 / step_seconds(0, draft_s, verify_s, overhead_s)
    best = (0, plain * (1 + min_gain))
    total, reach = 1.0, 1.0  # expected_tokens(accept, gamma), grown one position at a time
    for gamma in range(1, gamma_max + 1):
        reach *= accept[gamma - 1] if gamma - 1 < len(accept) else accept[-1]
        total += reach
        tps = total / step_seconds(gamma, draft_s, verify_s, overhead_s)
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
    past the next token matters where the verify's cost per token falls with the batch: on the 2-core
    CPU the light target verifies 4 tokens faster than 3 (171 against 182-210 ms), and a one-token
    lookahead stopped drafts at 1 or 2, the dearest batches, where the planner had chosen 3.

    The first draft of a step is always made: whether to speculate at all is the planner's call
    (CostTracker.plan), and a step it chose must measure something. Refusing it could trap the
    tracker: with verify(2) not yet measured it is extrapolated pessimistically, no draft would pay,
    and the draft's sync would be paid every step for nothing."""

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


class Ema:
    """An exponential moving average that starts at its first sample."""

    def __init__(self, weight: float = 0.1):
        self.weight, self.value, self.n = weight, None, 0

    def add(self, x: float) -> None:
        self.n += 1
        self.value = x if self.value is None else self.value + self.weight * (x - self.value)


@dataclass
class CostTracker:
    """Live measurements of one pair on one machine; chooses γ before each step.

    Policy: until a draft has been measured, probe at `probe_gamma`; afterwards take the γ with the
    best predicted tokens/s. While that is 0, and only if the measured costs would let speculation
    win at near-perfect acceptance (`optimistic_accept`), re-probe after `probe_every` plain steps so
    the choice can recover when acceptance changes; each probe that changes nothing doubles the wait
    (up to `probe_every_max`), because a probe costs the draft a catch-up over every token generated
    since it last ran. Where costs alone rule speculation out, it never probes again.
    """

    gamma_max: int = 8
    probe_gamma: int = 3
    probe_every: int = 16
    probe_every_max: int = 1024
    prior_accept: float = 0.6   # Beta-style prior, worth `prior_weight` observations per position
    prior_weight: float = 2.0
    optimistic_accept: float = 0.95
    min_gain: float = 0.03         # predicted edge over plain decoding needed to speculate
    min_gain_probe: float = 0.05   # ... and, at optimistic acceptance, to keep probing
    draft_s: Ema = field(default_factory=Ema)
    overhead_s: Ema = field(default_factory=Ema)
    verify: dict[int, Ema] = field(default_factory=dict)
    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    steps_since_probe: int = 0
    wait: int = 0  # plain steps before the next probe; 0 until the first choice of plain decoding
    _curve: dict[int, float] = field(default_factory=dict)  # verify_seconds memo, cleared by record()
    conf_judged: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    conf_accepted: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    step_tokens: Ema = field(default_factory=Ema)  # tokens and seconds of drafting steps: the rate achieved
    step_s: Ema = field(default_factory=Ema)

    def record(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float, overhead_s: float,
               confidences: Sequence[float] = ()) -> None:
        """Add one step's measurements (confidences: the draft's, per drafted token, when it gave them)."""
        self._curve.clear()
        self.verify.setdefault(n_drafted + 1, Ema()).add(verify_s)
        self.overhead_s.add(overhead_s)
        if n_drafted:
            self.draft_s.add(draft_s / n_drafted)
            self.steps_since_probe = 0
            self.step_tokens.add(n_accepted + 1)
            self.step_s.add(draft_s + verify_s + overhead_s)
        else:
            self.steps_since_probe += 1
        self._record_acceptance(n_drafted, n_accepted)
        for i, c in enumerate(confidences[: n_accepted + 1]):  # the drafts the target judged
            b = self._bin(c)
            self.conf_judged[b] += 1
            self.conf_accepted[b] += i < n_accepted

    @staticmethod
    def _bin(confidence: float) -> int:
        return min(max(int(confidence * CONFIDENCE_BINS), 0), CONFIDENCE_BINS - 1)

    def accept_at(self, confidence: float) -> float:
        """Measured acceptance of drafts of this confidence, smoothed towards an optimistic prior,
        (1 + confidence) / 2: a confidence whose drafts are never judged is never measured, and drafts
        are often accepted more than their confidence says (the 0.5B Qwen draft at T=0: 0.92 at 0.6-0.8)."""
        b, w = self._bin(confidence), self.prior_weight
        return (self.conf_accepted[b] + w * (1 + confidence) / 2) / (self.conf_judged[b] + w)

    def rate(self) -> float:
        """Tokens/s the loop achieves: drafting steps as measured, and never below plain decoding."""
        plain = 1.0 / max(self.verify_seconds(1) + (self.overhead_s.value or 0.0), 1e-9)
        if self.step_s.value is None:
            return plain
        return max(self.step_tokens.value / max(self.step_s.value, 1e-9), plain)

    def draft_stop(self, gamma: int | None = None) -> DraftStop | FixedStop:
        """The stopping rule for a draft of up to gamma (p-min auto); a fixed p-min until costs are measured."""
        if self.draft_s.value is None or 1 not in self.verify:
            return FixedStop(FALLBACK_P_MIN, first=True)  # a probe must measure the draft
        return DraftStop(self.accept_at, self.rate(), self.draft_s.value, self.verify_seconds, gamma)

    def _record_acceptance(self, n_drafted: int, n_accepted: int) -> None:
        grow = n_drafted - len(self.reached)
        if grow > 0:
            self.reached += [0] * grow
            self.accepted += [0] * grow
        for i in range(min(n_drafted, n_accepted + 1)):  # positions the target actually judged
            self.reached[i] += 1
            self.accepted[i] += i < n_accepted

    def acceptance(self) -> list[float]:
        """Per-position conditional acceptance, smoothed towards the prior."""
        w, a0 = self.prior_weight, self.prior_accept
        out = [(acc + w * a0) / (n + w) for n, acc in zip(self.reached, self.accepted)]
        return out or [a0]

    def verify_seconds(self, k: int) -> float:
        """Measured verify time for a batch of k, interpolated (or extrapolated linearly) otherwise."""
        if not self._curve:  # the whole curve at once, after each new measurement
            known = self._known_verify()
            self._curve.update((n, self._interpolate_verify(n, known)) for n in range(1, self.gamma_max + 2))
        t = self._curve.get(k)
        return t if t is not None else self._interpolate_verify(k, self._known_verify())

    def _known_verify(self) -> list[tuple[int, float]]:
        return sorted((n, e.value) for n, e in self.verify.items())

    def _interpolate_verify(self, k: int, known: list[tuple[int, float]]) -> float:
        if not known:
            return 0.0
        if k in self.verify:
            return self.verify[k].value
        if len(known) == 1:
            n, t = known[0]
            return t * k / n  # pessimistic: compute-bound, cost grows with the batch
        lo = max((p for p in known if p[0] < k), default=known[0])
        hi = min((p for p in known if p[0] > k), default=known[-1])
        if lo[0] == hi[0]:  # beyond the measured range: continue the last segment's slope
            lo, hi = (known[-2], known[-1]) if k > known[-1][0] else (known[0], known[1])
        slope = (hi[1] - lo[1]) / (hi[0] - lo[0])
        return max(lo[1] + slope * (k - lo[0]), known[0][1] * 0.5)

    def could_pay(self, gamma_max: int | None = None) -> bool:
        """Whether some γ > 0 would beat plain decoding at near-perfect acceptance, given the costs."""
        if self.draft_s.value is None or 1 not in self.verify:
            return True  # not measured yet
        accept = [self.optimistic_accept] * (gamma_max or self.gamma_max)
        gamma, _ = best_gamma(accept, self.draft_s.value, self.verify_seconds, self.overhead_s.value or 0.0,
                              gamma_max or self.gamma_max, self.min_gain_probe)
        return gamma > 0

    def choose(self, gamma_cap: int) -> int:
        """The draft length for the next step, at most gamma_cap."""
        return self.plan(gamma_cap)[0]

    def plan(self, gamma_cap: int) -> tuple[int, float]:
        """(draft length, predicted tokens/s) for the next step; a probe predicts +inf (it must run)."""
        gamma_max = min(self.gamma_max, gamma_cap)
        if gamma_max <= 0:
            return 0, 0.0
        if self.draft_s.value is None:
            return min(self.probe_gamma, gamma_max), math.inf
        if 1 not in self.verify:
            return 0, 0.0
        gamma, tps = best_gamma(self.acceptance(), self.draft_s.value, self.verify_seconds,
                                self.overhead_s.value or 0.0, gamma_max, self.min_gain)
        if gamma > 0:
            self.wait = 0
            return gamma, tps
        if not self.could_pay(gamma_max):
            return 0, tps
        if not self.wait:
            self.wait = self.probe_every
        if self.steps_since_probe >= self.wait:
            self.wait = min(2 * self.wait, self.probe_every_max)
            return min(self.probe_gamma, gamma_max), math.inf
        return 0, tps
