"""Per-generation counters: steps, drafted, accepted, acceptance per draft position, timings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from .acceptance import PositionAcceptance


@dataclass
class GenerationStats:
    """What one generation did, and where its time went."""

    prompt_tokens: int = 0
    generated: int = 0
    steps: int = 0
    tree_steps: int = 0    # steps that verified a token tree (a chain with next-best siblings)
    handoffs: int = 0      # steps whose model draft went on with an n-gram lookup's copy (planning.handoff.Handoff)
    copy_branches: int = 0  # tree steps with an n-gram lookup's copy as a branch (planning.handoff.Handoff.branch)
    drafted: int = 0       # tokens proposed, a tree's siblings included
    accepted: int = 0
    positions: PositionAcceptance = field(default_factory=PositionAcceptance)  # per draft position
    prefill_s: float = 0.0
    # of prefill_s, the draft model taking in the prompt (its load included where the prefill made it):
    # a cost of drafting with a model that plain decoding and the n-gram lookup never pay
    draft_prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    total_s: float = 0.0   # the decode loop, prefill excluded
    finish_reason: str = ""
    reused_tokens: int = 0
    drafter: str = "none"  # who may propose: model, ngram, ngram+model (hybrid), or none
    by_drafter: dict[str, list[int]] = field(default_factory=dict)  # name -> [drafted, accepted]
    probes: dict[str, int] = field(default_factory=dict)  # name -> exploratory steps (planning.budget.ExploreBudget)
    # name -> what its exploratory steps lost, net, in seconds, as the planner's budget charged it:
    # learning's measured cost in this generation (a probe that paid counts negative)
    exploration_s: dict[str, float] = field(default_factory=dict)
    gamma_mode: str = ""   # "auto" or the fixed draft length
    warm_start: bool = False  # the planner started from measurements saved by an earlier process
    seed: int | None = None  # the sampling seed used: the one asked for, or the one drawn (speculative._Run)
    # whether the draft model was loaded by the generation's end (None: no draft model); a warm start
    # whose saved measurements say the draft does not pay leaves it unloaded (session.Pair)
    draft_loaded: bool | None = None
    verify_at: dict[int, list] = field(default_factory=dict)  # verify batch size -> [steps, seconds]
    trace: list[tuple[int, list[int], int]] = field(default_factory=list)  # (start, batch, kept) when traced
    _verify_counted: float = field(default=0.0, repr=False)   # verify_s already attributed to a batch size

    def record_step(self, n_drafted: int, n_accepted: int, drafter: str | None = None, copied: int = 0,
                    copies_taken: int | None = None) -> None:
        """Count one draft-verify step (drafter: who proposed, when anyone did; copied: how many of
        its last drafts the n-gram lookup proposed: a hybrid's handoff, or with copies_taken, how many
        of them the target took, a copy verified as a branch of a tree)."""
        self.steps += 1
        self.handoffs += copied > 0 and copies_taken is None
        self.copy_branches += copies_taken is not None
        own = n_drafted - copied
        taken = max(n_accepted - own, 0) if copies_taken is None else copies_taken
        for name, drafted, accepted in ((drafter, own, n_accepted - taken), ("ngram", copied, taken)):
            if name and drafted:
                counts = self.by_drafter.setdefault(name, [0, 0])
                counts[0] += drafted
                counts[1] += accepted
        self.drafted += n_drafted
        self.accepted += n_accepted
        self.positions.record(n_drafted, n_accepted)
        self._count_verify(n_drafted)

    def _count_verify(self, n_drafted: int) -> None:
        """Per verify batch size, steps and seconds. The controller adds a step's verify time to
        verify_s before record_step: the growth since the last step is this step's verify."""
        cell = self.verify_at.setdefault(n_drafted + 1, [0, 0.0])
        cell[0] += 1
        cell[1] += self.verify_s - self._verify_counted
        self._verify_counted = self.verify_s

    @property
    def drafted_at(self) -> list[int]:
        """Drafts proposed at each draft position."""
        return self.positions.drafted

    @property
    def accepted_at(self) -> list[int]:
        """Drafts accepted at each draft position."""
        return self.positions.accepted

    @property
    def judged_at(self) -> list[int]:
        """Drafts the target judged at each draft position (all up to the first rejection)."""
        return self.positions.judged

    def acceptance_at(self) -> list[float]:
        """Conditional acceptance per draft position: P(draft i accepted | drafts before it accepted),
        the a_i of localspec.costmodel.expected_tokens."""
        return self.positions.rates()

    @property
    def alpha(self) -> float | None:
        """Fraction of drafted tokens the target accepted (None before any draft)."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target verify: 1 + accepted / steps."""
        return 1 + self.accepted / self.steps if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.total_s if self.total_s > 0 else 0.0

    @property
    def controller_s(self) -> float:
        """Loop time spent outside the draft and the target verify."""
        return max(0.0, self.total_s - self.draft_s - self.verify_s)

    def alpha_at(self) -> list[float]:
        """Acceptance rate per draft position (conditional on the position being drafted)."""
        return self.positions.alpha_at()

    @property
    def drafter_flag(self) -> str:
        """The drafter as --drafter names it: model, ngram, hybrid (both sources), or none (target only)."""
        return "hybrid" if "+" in self.drafter else self.drafter

    @property
    def gamma_value(self) -> str | int:
        """Gamma as --gamma takes it: "auto" or a whole number."""
        return self.gamma_mode if self.gamma_mode == "auto" else int(self.gamma_mode)

    def drafter_counts(self) -> dict[str, dict[str, int]]:
        """Each drafter's tokens drafted and accepted, as --json and the server's `speculative` give them."""
        return {k: {"drafted": d, "accepted": a} for k, (d, a) in self.by_drafter.items()}

    def exploration_line(self) -> str:
        """What learning cost this generation: each drafter's exploratory steps, their net loss
        against the best known choice, and its share of the decode loop."""
        t = self.total_s or 1e-9
        steps = lambda n: f"{n} step" + ("" if n == 1 else "s")  # noqa: E731
        return "exploring: " + ", ".join(
            f"{name} {steps(self.probes.get(name, 0))}, {'lost' if s >= 0 else 'gained'} {abs(s):.3f} s "
            f"({100 * s / t:+.1f}% of the loop)" for name, s in self.exploration_s.items())

    def to_dict(self) -> dict:
        """A JSON-ready summary."""
        return {
            "prompt_tokens": self.prompt_tokens, "generated_tokens": self.generated,
            "reused_tokens": self.reused_tokens, "finish_reason": self.finish_reason,
            "drafter": self.drafter_flag, "sources": [n for n in self.drafter.split("+") if n != "none"],
            "gamma": self.gamma_value, "warm_start": self.warm_start,
            "draft_loaded": self.draft_loaded, "seed": self.seed,
            "by_drafter": self.drafter_counts(), "probe_steps": dict(self.probes),
            "exploration_s": dict(self.exploration_s),
            "steps": self.steps, "tree_steps": self.tree_steps, "copy_branches": self.copy_branches, "handoffs": self.handoffs, "drafted": self.drafted, "accepted": self.accepted,
            "alpha": self.alpha, "mean_accepted_length": self.mean_accepted_length,
            "alpha_per_position": self.alpha_at(), "tokens_per_s": self.tokens_per_s,
            "time_s": {"prefill": self.prefill_s, "draft_prefill": self.draft_prefill_s, "draft": self.draft_s,
                       "verify": self.verify_s, "controller": self.controller_s, "decode": self.total_s,
                       "total": self.prefill_s + self.total_s},  # total = prefill + decode
        }

    def summary(self) -> str:
        """A few readable lines for --stats."""
        alpha = "n/a" if self.alpha is None else f"{self.alpha:.3f}"
        per_pos = " ".join(f"{a:.2f}" for a in self.alpha_at()) or "n/a"
        t = self.total_s or 1e-9
        return "\n".join([
            f"tokens: {self.generated} generated, {self.prompt_tokens} prompt "
            f"({self.reused_tokens} reused); finish: {self.finish_reason}",
            f"speed: {self.tokens_per_s:.1f} tok/s over {self.total_s:.2f} s (prefill {self.prefill_s:.2f} s"
            f"{f', the draft model {self.draft_prefill_s:.2f} s of it' if self.draft_prefill_s else ''})",
            ("drafter: none (target only)" if self.drafter == "none" else
             f"speculation ({self.drafter_flag} drafter, gamma {self.gamma_mode}, "
             f"{'warm start' if self.warm_start else 'cold start'}"
             f"{', draft model not loaded' if self.draft_loaded is False else ''}): {self.steps} steps "
            f"({self.tree_steps} trees, {self.copy_branches} with a copy as a branch, "
            f"{self.handoffs} handoffs to a copy), "
            f"{self.drafted} drafted, {self.accepted} accepted, "
            f"alpha {alpha}, mean accepted length {self.mean_accepted_length:.2f}"),
            f"alpha per draft position: {per_pos}",
            "by drafter: " + (", ".join(f"{k} {a}/{d}" for k, (d, a) in self.by_drafter.items()) or "n/a"),
            *([self.exploration_line()] if self.exploration_s else []),
            f"time split: draft {100 * self.draft_s / t:.0f}%, verify {100 * self.verify_s / t:.0f}%, "
            f"controller {100 * self.controller_s / t:.0f}%",
        ])


def pooled_verify(runs: Sequence[GenerationStats]) -> dict[int, tuple[int, float]]:
    """Verify batch size -> (steps, seconds), summed over runs."""
    cells: dict[int, list] = {}
    for stats in runs:
        for k, (n, seconds) in stats.verify_at.items():
            cell = cells.setdefault(k, [0, 0.0])
            cell[0] += n
            cell[1] += seconds
    return {k: (n, seconds) for k, (n, seconds) in sorted(cells.items())}


class Stopwatch:
    """Adds elapsed wall time to an attribute of a stats object: `with Stopwatch(s, 'draft_s'):`."""

    def __init__(self, stats: GenerationStats, attr: str):
        self.stats, self.attr = stats, attr

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        setattr(self.stats, self.attr, getattr(self.stats, self.attr) + time.perf_counter() - self.t0)
