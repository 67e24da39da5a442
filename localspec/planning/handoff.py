"""The hybrid's Handoff: where a model draft hands over to the n-gram lookup within one step
(the planner decides it per step: planner.Planner._handoff)."""

from __future__ import annotations

from typing import Sequence

from ..costmodel import expected_tokens_upto, ngram_bucket
from ..drafters import NGramDrafter
from ..tracker import CostTracker
from ..treeplan import BranchRule


class Handoff:
    """Where a hybrid's model draft hands over to the n-gram lookup, within one step.

    After each token the draft model drafts, the lookup is asked what continues the context and the
    draft so far (NGramDrafter.continuation). Where it has a match, and an n-gram step in the
    match's bucket, priced as the planner prices one by the point estimate, would run faster than
    the model's step was predicted to, the model stops and the draft goes on with that step's γ of
    the lookup's tokens: one verify takes both. So a copy that begins inside a model draft is drafted
    from where it begins, not after the model's γ (the n-gram step's γ is chosen for a verify of its
    own width: the combined one is wider by the model's tokens, an approximation). The choice depends
    on the draft only, never on the target, so the rule stays exact."""

    def __init__(self, ngram: NGramDrafter, tracker: CostTracker, cap: int, room: int, model_rate: float,
                 prompt_len: int):
        self.ngram, self.tracker, self.cap, self.room, self.model_rate = ngram, tracker, cap, room, model_rate
        self.prompt_len = prompt_len  # where the generation's output begins (see ngram_bucket)
        self.bucket = 0  # the acceptance bucket of the continuation handed over to
        self.branch_bucket = 0  # ... and of a copy verified as a branch (branch())
        self._offered: tuple[list[int], int] = ([], 0)   # the last lookup's tokens and bucket ...
        self._previous: tuple[list[int], int] = ([], 0)  # ... and the one before: offered in place of the last token

    def after(self, context: Sequence[int], draft: Sequence[int]) -> list[int]:
        """The lookup's tokens that continue context + draft, where they pay more than the model; []."""
        ids, bucket = self._lookup(context, draft)
        if not ids:
            return []
        gamma, rate = self.tracker.plan(len(ids), bucket, switch=True)
        if not gamma or rate <= self.model_rate:
            return []
        self.bucket = bucket
        return ids[:gamma]

    def look(self, context: Sequence[int]) -> None:
        """Look up what continues the context (before a draft's first token: see branch())."""
        self._lookup(context, [])

    def _lookup(self, context: Sequence[int], draft: Sequence[int]) -> tuple[list[int], int]:
        """The lookup's tokens that continue context + draft and their bucket, kept (see branch())."""
        limit = min(self.cap, self.room - len(draft))
        ids, reach, at = self.ngram.continuation(context, draft, limit) if limit > 0 else ([], 0, 0)
        bucket = ngram_bucket(reach, at, self.prompt_len) if ids else 0
        self._previous, self._offered = self._offered, (ids, bucket)
        return ids, bucket

    def branch(self, here: Sequence[int], rule: BranchRule) -> list[int]:
        """The copy the lookup offered in place of the model's latest token (the lookup before the
        last after(), or look()'s), as a branch beside the guesses `here` at that depth, where its
        first token is none of them and the branch pays (BranchRule.copy, by the copy's acceptance
        in its bucket, point estimate); []. The tree stays within the step's room."""
        ids, bucket = self._previous
        ids = ids[: max(self.room + 1 - rule.width, 0)]
        if not ids or ids[0] in here:
            return []
        gains = [total - 1.0 for total in expected_tokens_upto(self.tracker.acceptance(bucket), len(ids))]
        n = rule.copy(gains)
        self.branch_bucket = bucket
        return ids[:n]
