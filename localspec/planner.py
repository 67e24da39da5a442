"""The planner: the ONLY place that decides, before each step, who drafts, how many tokens (γ), and
where a model draft may stop within them (the stop rule: a fixed p-min, or p-min auto from costs).

It reads live measurements (CostTracker: verify cost per batch size, draft cost, acceptance per
position and per draft confidence) and the pure formulas of costmodel.py. The controller asks it
once per step and reports back what the step measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from .config import GenerationConfig
from .costmodel import (CONFIDENCE_BINS, FALLBACK_P_MIN, DraftStop, Ema, FixedStop, PositionAcceptance,
                        VerifyCurve, best_gamma)
from .drafters import Drafter, Proposal, StopRule
from .treeplan import BranchRule, SiblingAcceptance, branch_rule, tree_outcome

WARM_MAX_COUNT = 64  # saved acceptance counts weigh at most this many observations in a new process
SOURCES = {"model": ("model",), "ngram": ("ngram",), "hybrid": ("ngram", "model")}  # tried in this order


def source_names(kind: str | None) -> tuple[str, ...]:
    """The drafters a drafter kind runs (none for plain decoding)."""
    return SOURCES.get(kind, ()) if kind else ()


def cap_of(drafter_name: str, config: GenerationConfig) -> int:
    """The most that auto γ may draft from this drafter."""
    return config.ngram_gamma_max if drafter_name == "ngram" else config.gamma_max


def p_min_of(config: GenerationConfig) -> float | None:
    """The draft model's p-min; None is p-min auto. Auto goes with auto γ at T=0 only: a fixed γ takes
    llama.cpp's FALLBACK_P_MIN, so `--gamma N` drafts what it says and a seed repeats a sampled run
    token for token (auto follows live timings); sampled decoding keeps it too, since the draft's
    top-token confidence says little about a token it sampled."""
    if config.p_min is None and (config.gamma is not None or not config.sampling.greedy):
        return FALLBACK_P_MIN
    return config.p_min


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
    verify: VerifyCurve = field(default_factory=VerifyCurve)
    positions: PositionAcceptance = field(default_factory=PositionAcceptance)
    steps_since_probe: int = 0
    wait: int = 0  # plain steps before the next probe; 0 until the first choice of plain decoding
    conf_judged: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    conf_accepted: list[int] = field(default_factory=lambda: [0] * CONFIDENCE_BINS)
    step_tokens: Ema = field(default_factory=Ema)  # tokens and seconds of drafting steps: the rate achieved
    step_s: Ema = field(default_factory=Ema)
    siblings: SiblingAcceptance = field(default_factory=SiblingAcceptance)  # a tree's next-best guesses

    def record(self, n_drafted: int, n_accepted: int, draft_s: float, verify_s: float, overhead_s: float,
               confidences: Sequence[float] = (), width: int | None = None, emitted: int | None = None) -> None:
        """Add one step's measurements (confidences: the draft's, per drafted token, when it gave them).
        A tree's step gives the rows of its verify batch (width) and the tokens it emitted, which its
        siblings make more than n_drafted + 1 and n_accepted + 1 of its chain."""
        self.verify.add(width or n_drafted + 1, verify_s)
        self.overhead_s.add(overhead_s)
        if n_drafted:
            self.draft_s.add(draft_s / n_drafted)
            self.steps_since_probe = 0
            self.step_tokens.add(emitted or n_accepted + 1)
            self.step_s.add(draft_s + verify_s + overhead_s)
        else:
            self.steps_since_probe += 1
        self.positions.record(n_drafted, n_accepted)
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
        are often accepted more than their confidence says."""
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

    def acceptance(self) -> list[float]:
        """Per-position conditional acceptance, smoothed towards the prior."""
        return self.positions.rates(self.prior_accept, self.prior_weight) or [self.prior_accept]

    def verify_seconds(self, k: int) -> float:
        """Measured verify time for a batch of k, interpolated or extrapolated otherwise."""
        return self.verify.seconds(k)

    def could_pay(self, cap: int) -> bool:
        """Whether some γ ≤ cap would beat plain decoding at near-perfect acceptance, given the costs."""
        if self.draft_s.value is None or 1 not in self.verify:
            return True  # not measured yet
        gamma, _ = best_gamma([self.optimistic_accept] * cap, self.draft_s.value, self.verify_seconds,
                              self.overhead_s.value or 0.0, cap, self.min_gain_probe)
        return gamma > 0

    def to_dict(self) -> dict:
        """The measurements (not the probing state) as JSON-ready data, for a warm start."""
        ema = lambda e: [e.value, e.n]  # noqa: E731
        return {"draft_s": ema(self.draft_s), "overhead_s": ema(self.overhead_s),
                "step_tokens": ema(self.step_tokens), "step_s": ema(self.step_s),
                "verify": {str(k): ema(e) for k, e in self.verify.points.items()},
                "positions": [self.positions.drafted, self.positions.judged, self.positions.accepted],
                "confidence": [self.conf_judged, self.conf_accepted]}

    @classmethod
    def from_dict(cls, data: dict, max_count: int = WARM_MAX_COUNT) -> CostTracker:
        """A tracker that starts from saved measurements. Counts are scaled down to at most max_count
        per position and per confidence bin, so that this run's own steps soon outweigh them."""
        t = cls()
        for name in ("draft_s", "overhead_s", "step_tokens", "step_s"):
            _load_ema(getattr(t, name), data[name])
        for k, e in data["verify"].items():
            _load_ema(t.verify.points.setdefault(int(k), Ema()), e)
        t.positions.drafted, t.positions.judged, t.positions.accepted = _scaled(data["positions"], max_count)
        t.conf_judged, t.conf_accepted = _scaled(data["confidence"], max_count)
        if len(t.conf_judged) != CONFIDENCE_BINS:
            raise ValueError(f"expected {CONFIDENCE_BINS} confidence bins")
        return t

    def choose(self, gamma_cap: int) -> int:
        """The draft length for the next step, at most gamma_cap."""
        return self.plan(gamma_cap)[0]

    def plan(self, gamma_max: int) -> tuple[int, float]:
        """(draft length ≤ gamma_max, predicted tokens/s) for the next step; a probe predicts +inf (it must run)."""
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


def _load_ema(ema: Ema, saved: Sequence) -> None:
    value, n = saved
    ema.value, ema.n = (None if value is None else float(value)), int(n)


def _scaled(rows: Sequence[Sequence[int]], max_count: int) -> list[list[int]]:
    """Count rows (the first the denominators) scaled down together so no denominator exceeds max_count."""
    top = max((max(r, default=0) for r in rows), default=0)
    f = min(1.0, max_count / top) if top else 1.0
    return [[round(int(n) * f) for n in r] for r in rows]


class Plan(NamedTuple):
    """One step's decision: which source drafts (None: a plain step), γ, and the stop rule the drafter
    follows within γ (None: draft all γ)."""

    source: int | None
    gamma: int
    stop: StopRule | None = None
    branch: BranchRule | None = None  # where the draft adds next-best guesses (a tree); None: a chain


class Planner:
    """Decides every step of one generation over its sources (drafter, tracker), tried in order."""

    def __init__(self, sources: Sequence[tuple[Drafter, CostTracker]], config: GenerationConfig,
                 max_branches: int = 1):
        """max_branches: the branches one verify can hold (the target context's sequences; 1: chains)."""
        self.sources = list(sources)
        self.config = config
        self.p_min = p_min_of(config)
        self.max_branches = max_branches

    def wants_prefill(self, i: int) -> bool:
        """Whether source i should take in the prompt now: not where measured costs rule it out
        (as llama.cpp does, the draft is prefilled with the prompt otherwise)."""
        drafter, tracker = self.sources[i]
        return self.config.gamma != 0 and bool(self.config.gamma or tracker.could_pay(cap_of(drafter.name, self.config)))

    def plan(self, tokens: Sequence[int], room: int) -> Plan:
        """The next step after tokens, drafting at most `room` tokens (what the context and the tokens
        still wanted allow). Fixed γ: the first source with a guess to offer. Auto: each source's
        tracker, and the one predicting the most tokens/s (plain decoding included)."""
        best: tuple[int | None, int, float] = (None, 0, 0.0)
        for i, (drafter, tracker) in enumerate(self.sources if room > 0 else []):
            fixed = self.config.gamma
            limit = min(room, cap_of(drafter.name, self.config) if fixed is None else fixed,
                        drafter.offer(tokens, room))
            if limit <= 0:
                continue
            if fixed is not None:
                return Plan(i, limit, self._stop(drafter, tracker, limit))
            gamma, tps = tracker.plan(limit)
            if gamma and tps > best[2]:
                best = (i, gamma, tps)
        i, gamma, _ = best
        if i is None:
            return Plan(None, gamma)
        return Plan(i, gamma, self._stop(*self.sources[i], gamma), self._branch(*self.sources[i], gamma))

    def _branch(self, drafter: Drafter, tracker: CostTracker, gamma: int) -> BranchRule | None:
        """The tree's shape for a model draft under auto γ, once its costs are measured (treeplan.py)."""
        if self.config.gamma is not None or drafter.name != "model" or tracker.draft_s.value is None:
            return None
        return branch_rule(tracker.accept_at, tracker.siblings, tracker.rate(), tracker.verify_seconds, gamma,
                           self.max_branches)

    def _stop(self, drafter: Drafter, tracker: CostTracker, gamma: int) -> StopRule | None:
        """The draft model's stop rule: p-min auto from the tracker, a fixed p-min, or none."""
        if drafter.name != "model":
            return None
        if self.p_min is None:
            return tracker.draft_stop(gamma)
        return FixedStop(self.p_min) if self.p_min > 0 else None

    def record(self, plan: Plan, proposal: Proposal, n_accepted: int, draft_s: float, verify_s: float,
               overhead_s: float, path: Sequence[int] = ()) -> None:
        """Teach the trackers what the step measured: the drafting source its costs and acceptance; a
        plain step teaches every source the cost of a one-token verify. A tree (path: its accepted
        nodes) teaches its chain's acceptance, its siblings' and the cost of its full width."""
        width = emitted = None
        if proposal.parents is not None:
            width, emitted = len(proposal.ids) + 1, len(path) + 1
            proposal, n_accepted = self._record_tree(plan, proposal, path)
        n = len(proposal.ids)
        for i, (_, tracker) in enumerate(self.sources):
            if i == plan.source or not n:
                # A catch-up over tokens generated while not drafting is a one-off, not the draft's
                # per-token cost.
                tracker.record(n, n_accepted, draft_s - proposal.catchup_s, verify_s, overhead_s,
                               proposal.confidences, width, emitted)

    def _record_tree(self, plan: Plan, proposal: Proposal, path: Sequence[int]) -> tuple[Proposal, int]:
        """Record the siblings the target judged; return the tree's chain as a proposal and how many of
        the chain's tokens were accepted."""
        chain, n_chain, judged = tree_outcome(proposal.parents, path)
        siblings = self.sources[plan.source][1].siblings
        for node, accepted in judged:
            siblings.record(proposal.confidences[node], accepted)
        confidences = tuple(proposal.confidences[i] for i in chain) if proposal.confidences else ()
        return Proposal([proposal.ids[i] for i in chain], [proposal.q[i] for i in chain], confidences,
                        proposal.catchup_s), n_chain
