"""Drafters propose tokens AND the probabilities they drew them with, so the p/q rule stays exact."""

from __future__ import annotations

import time
from typing import Protocol, Sequence

import numpy as np

from .llama import Context
from .sampling import Dist, SamplingParams, distribution, greedy_token, sample


def one_hot(token: int) -> Dist:
    """The distribution of a deterministic proposal."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


class Drafter(Protocol):
    """What the controller needs from a source of guesses."""

    name: str

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> tuple[list[int], list[Dist]]:
        """Up to k guesses for the tokens after context, each with the distribution it came from."""
        ...

    def observe(self, n_accepted: int) -> None:
        """Told how many of the last proposal the target accepted."""
        ...


class ModelDrafter:
    """Drafts with a small model in its own llama.cpp context, sampling from q at T>0."""

    name = "model"

    def __init__(self, ctx: Context, params: SamplingParams):
        self.ctx = ctx
        self.params = params
        self.sync_s = 0.0  # time the last propose() spent catching up on the context

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator) -> tuple[list[int], list[Dist]]:
        k = min(k, self.ctx.n_ctx - len(context) + 1)
        if k <= 0:
            return [], []
        ctx = self.ctx
        # Keep what the cache shares with the context, but always re-decode the last token: its logits
        # are what the first guess is drawn from.
        t0 = time.perf_counter()
        n = ctx.reuse_prefix(context[:-1])
        ctx.decode(context[n:], logits="last")
        self.sync_s = time.perf_counter() - t0 if len(context) - n > 2 else 0.0
        ids: list[int] = []
        dists: list[Dist] = []
        for i in range(k):
            token, q = self._draw(ctx.logits(-1), rng)
            ids.append(token)
            dists.append(q)
            if i + 1 < k:
                ctx.decode([token], logits="last")
        return ids, dists

    def _draw(self, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, Dist]:
        if self.params.greedy:
            token = greedy_token(logits)
            return token, one_hot(token)
        q = distribution(logits, self.params)
        return sample(q, rng), q

    def observe(self, n_accepted: int) -> None:
        pass  # the KV cache is re-synced against the context at the next propose()
