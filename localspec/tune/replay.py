"""The prediction: replay the controller at a fixed γ along the target's own continuations, with
each draft accepted with the chance the rule would accept it, and price the steps with the measured
target costs (costmodel.step_seconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..costmodel import step_seconds
from ..drafters import NGramDrafter
from ..sampling import Dist


@dataclass
class Run:
    """A calibration prompt and the target's own continuation of it, which every candidate is scored on."""

    prompt: list[int]
    known: list[int]      # the continuation; after a 'length' finish all but its last token (never drafted)
    generated: int
    stopped: bool         # ended by an end-of-generation token, at position `generated`
    target_p: list[Dist] = field(default_factory=list)  # T>0: the target's distribution at 0..len(known)


@dataclass
class Costs:
    """The target side of a step: verify time per batch size, and the controller's own time."""

    verify_s: dict[int, float]  # k -> seconds to decode k tokens with all logits
    step_s: float               # controller time of a plain step (one row judged, one token emitted)
    row_s: float                # each further row judged and token emitted
    draft_step_s: float | None = None  # controller time of a step that drafted (default: step_s)

    def controller(self, drafted: int, accepted: int) -> float:
        """The controller's own time in one step."""
        base = self.step_s if not drafted or self.draft_step_s is None else self.draft_step_s
        return base + accepted * self.row_s

    def step(self, drafted: int, accepted: int, draft_s: float) -> float:
        """Seconds of one step (the cost model's step_seconds; draft_s is the whole draft time)."""
        return step_seconds(drafted, 0.0, self.verify_s.__getitem__, self.controller(drafted, accepted)) + draft_s

    def to_dict(self) -> dict:
        """In milliseconds, JSON-ready (saved in the profile, printed by --json)."""
        return {"verify_ms": {k: 1000 * v for k, v in sorted(self.verify_s.items())},
                "plain_step_controller_ms": 1000 * self.step_s, "row_ms": 1000 * self.row_s,
                "draft_step_controller_ms": None if self.draft_step_s is None else 1000 * self.draft_step_s}


# (start, asked, drafted, accepted, draft decodes) of one replayed step
Step = tuple[int, int, int, int, int]
# guess(s, k) -> (acceptance chance of each draft it makes at position s.., draft decodes spent)
Guess = Callable[[int, int], tuple[list[float], int]]


def replay(run: Run, gamma: int, max_tokens: int, guess: Guess, rng: np.random.Generator) -> list[Step]:
    """The controller's steps at a fixed γ along one continuation (speculative.SpeculativeDecoder);
    a draft is accepted with its chance, once every draft before it was."""
    steps: list[Step] = []
    s, end = 0, run.generated
    while s < end or (run.stopped and s == end):
        k = min(gamma, max_tokens - s - 1)
        chances, decodes = guess(s, k) if k > 0 else ([], 0)
        a = 0
        while a < len(chances) and rng.random() < chances[a]:
            a += 1
        steps.append((s, k, len(chances), a, decodes))
        s += a + 1
    return steps


def model_guess(run: Run, beta: Sequence[float], conf: Sequence[float], p_min: float) -> Guess:
    """guess() of a draft model: β (acceptance chance) and confidence per position, from teacher
    forcing. It stops before a position whose confidence is below p_min, as the planner's FixedStop
    stops ModelDrafter: a full proposal of k costs k decodes, one stopped after i drafts i + 1."""
    def guess(s: int, k: int) -> tuple[list[float], int]:
        chances = []
        for t in range(s, s + k):
            if p_min > 0 and (conf[t] if t < len(conf) else 0.0) < p_min:
                return chances, len(chances) + 1
            chances.append(beta[t] if t < len(beta) else 0.0)
        return chances, k
    return guess


def ngram_guess(run: Run, greedy: bool, is_eog: Callable[[int], bool]) -> Guess:
    """guess() of the n-gram drafter: its proposal at each step, scored against the continuation."""
    ngram = NGramDrafter(ends=is_eog)
    ngram.prefill(run.prompt)

    def chance(t: int, token: int) -> float:
        if not greedy:
            return run.target_p[t].prob_of(token) if t < len(run.target_p) else 0.0
        if t < len(run.known):
            return float(run.known[t] == token)
        return float(run.stopped and t == run.generated and is_eog(token))

    def guess(s: int, k: int) -> tuple[list[float], int]:
        ids = ngram.propose(run.prompt + run.known[:s], k).ids
        return [chance(s + i, t) for i, t in enumerate(ids)], 0
    return guess


def overlap(p: Dist, q: Dist) -> float:
    """Σ_x min(p(x), q(x)): the chance that the p/q rule accepts a draft sampled from q."""
    _, ip, iq = np.intersect1d(p.ids, q.ids, assume_unique=True, return_indices=True)
    return float(np.minimum(p.probs[ip], q.probs[iq]).sum())


def replay_all(runs: Sequence[Run], guesses: Sequence[Guess], gammas: Sequence[int], max_tokens: int,
               passes: int, seed: int) -> dict[int, list[list[list[Step]]]]:
    """γ -> [run][pass] -> the replayed steps, for every γ (one seeded generator over them all)."""
    rng = np.random.default_rng(seed)
    return {g: [[replay(run, g, max_tokens, guess, rng) for _ in range(passes)]
                for run, guess in zip(runs, guesses)] for g in gammas}
