"""What the planner decides and chooses among: Plan (one step's decision), Choice (a candidate step),
and how far auto γ may draft from each drafter (cap_of)."""

from __future__ import annotations

from typing import NamedTuple

from ..config import GenerationConfig
from ..drafters import StopRule
from ..treeplan import BranchRule
from .handoff import Handoff


class Plan(NamedTuple):
    """One step's decision: which source drafts (None: a plain step), γ, the stop rule the drafter
    follows within γ (None: draft all γ), and the acceptance bucket its proposal is counted in."""

    source: int | None
    gamma: int
    stop: StopRule | None = None
    bucket: int = 0
    branch: BranchRule | None = None  # where the draft adds next-best guesses (a tree); None: a chain
    handoff: Handoff | None = None    # where a model draft may hand over to the n-gram lookup (a hybrid)


PLAIN = Plan(None, 0)  # a plain step


class Choice(NamedTuple):
    """A candidate step: source (None: plain), γ, bucket, and its predicted tokens/s."""

    source: int | None
    gamma: int
    bucket: int
    rate: float


def cap_of(drafter_name: str, config: GenerationConfig) -> int:
    """The most that auto γ may draft from this drafter."""
    return config.ngram_gamma_max if drafter_name == "ngram" else config.gamma_max
