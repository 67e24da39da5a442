"""The sampling math: llama.cpp's filter chain, and the speculative acceptance rule.

Letters follow Leviathan et al. 2022, "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1: **p is the target distribution, q the draft distribution.** Chen et al. 2023
("Accelerating Large Language Model Decoding with Speculative Sampling", Algorithm 2), gpt-fast and
transformers use the opposite letters.

numpy only, so that a reader can check the rule against the paper line by line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

# Windows (nats below the max logit) tried before sorting the whole vocabulary for top_p.
_TOP_P_WINDOWS = (4.0, 8.0, 16.0)
# Rows this short (a backend's top-k candidates) are partitioned or sorted whole: cheaper than the
# counting passes that spare a full vocabulary the sort.
_SHORT_ROW = 1024
# A residual max(0, p - q) with less total mass than this is float rounding of p == q.
_RESIDUAL_EPS = 1e-12
# The candidates llama.cpp's draft confidence looks at (top_probability).
CONFIDENCE_K = 10


@dataclass(frozen=True)
class SamplingParams:
    """How logits become a distribution; the meanings and defaults are llama.cpp's."""

    temperature: float = 0.8  # 0 means greedy (argmax); the filters are then ignored
    # As llama.cpp reads them (and OpenAI's top_p): top_k ≤ 0 disables it; top_p 0 and min_p 1 keep
    # the most likely token alone (top_p keeps at least one; min_p's floor is then the max)
    top_k: int = 40  # 0 (or less) disables
    top_p: float = 0.95  # 1.0 disables; must be in [0, 1]
    min_p: float = 0.05  # 0.0 disables; must be in [0, 1]

    def validate(self) -> SamplingParams:
        """Return self, or raise ValueError naming the bad value and the fix (problem's)."""
        bad = self.problem()
        if bad is not None:
            raise ValueError(" ".join(bad))
        return self

    def problem(self) -> tuple[str, str] | None:
        """The first bad field and the rule it breaks, with its value and the fix, e.g. ("temperature",
        "must be >= 0 (got -1); use 0 for greedy decoding"); None when all are good."""
        t, k, top_p, min_p = self.temperature, self.top_k, self.top_p, self.min_p
        for name, value in (("temperature", t), ("top_p", top_p), ("min_p", min_p)):
            if not is_real(value):  # a comparison would raise a TypeError naming neither
                return name, f"must be a number (got {value!r})"
        if not math.isfinite(t):
            return "temperature", f"must be a finite number (got {t}); use 0 for greedy decoding"
        if t < 0:
            return "temperature", f"must be >= 0 (got {t}); use 0 for greedy decoding"
        if not is_whole(k):
            return "top_k", f"must be an integer (got {k!r}); use 0 to disable top-k"
        if not 0 <= top_p <= 1:  # also false for NaN
            return "top_p", f"must be in [0, 1] (got {top_p}); use 1.0 to disable top-p"
        if not 0 <= min_p <= 1:
            return "min_p", f"must be in [0, 1] (got {min_p}); use 0.0 to disable min-p"
        return None

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0


def is_whole(value) -> bool:
    """An int that is not a bool (True would read as 1)."""
    return whole_type(type(value))


def whole_type(kind: type) -> bool:
    """The type of a whole number: int or a numpy integer, not bool."""
    return issubclass(kind, (int, np.integer)) and not issubclass(kind, (bool, np.bool_))


def is_real(value) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


class Dist(NamedTuple):
    """A sparse distribution: candidate ids and their probabilities (sorted only where top-p cut)."""

    ids: np.ndarray  # int64 [n]
    probs: np.ndarray  # float64 [n], sums to 1, all > 0

    def prob_of(self, token: int) -> float:
        """The probability of token; 0.0 for tokens outside ids."""
        hit = (self.ids == token).nonzero()[0]
        return float(self.probs[hit[0]]) if hit.size else 0.0


def distribution(logits: np.ndarray, params: SamplingParams) -> Dist:
    """The filtered, tempered distribution actually sampled from, for one row of logits [V] (float32)."""
    logits = np.asarray(logits)  # [V]
    if params.greedy:
        return Dist(np.array([greedy_token(logits)], dtype=np.int64), np.ones(1))
    top = _checked_max(logits)
    if logits.size <= _SHORT_ROW:
        return _short_distribution(logits, params, top)
    # llama.cpp's default chain: top_k, top_p, min_p, all on the untempered softmax(logits); then
    # temperature on the survivors. Here a logit floor drops tokens before the sort, with the same
    # result: top_p and min_p each keep a prefix of the candidates sorted by logit, min_p's floor
    # depends only on the max (always kept), and top_p's cumulative sums use log_z, fixed first.
    floor = top + math.log(params.min_p) if params.min_p > 0 else -math.inf  # masked tokens pass
    if 0 < params.top_k < logits.size:
        ids = _top_k_ids(logits, params.top_k, top)  # [k], any order
        log_z = _logsumexp(logits[ids], top)  # top_p sees the top-k survivors renormalised
        ids = ids[logits[ids] >= floor]
    else:
        log_z = _logsumexp(logits, top)  # top_k disabled: one O(V) pass
        floor = _top_p_floor(logits, params.top_p, top, log_z, floor)  # sort fewer, same result
        keep = logits >= floor if floor > -math.inf else logits > -math.inf  # [V]; never masked ones
        ids = np.flatnonzero(keep)
    if params.top_p < 1.0:
        ids = ids[np.argsort(-logits[ids])]  # [m], highest first: only top-p needs the order
        # The smallest prefix whose cumulative probability reaches top_p; at least one token.
        cum = np.cumsum(np.exp(logits[ids].astype(np.float64) - log_z))  # [m]
        ids = ids[: int(np.searchsorted(cum, params.top_p)) + 1]
    weights = np.exp((logits[ids].astype(np.float64) - top) / params.temperature)  # [m], weights[0] == 1
    kept = weights > 0  # drops masked (-inf) tokens and underflow
    ids, weights = ids[kept], weights[kept]
    return Dist(ids.astype(np.int64), weights / weights.sum())


def candidate_dist(ids: np.ndarray, probs: np.ndarray) -> Dist:
    """The Dist of a row that llama.cpp's backend sampler chain judged (the same filters, order and
    temperature as distribution): its candidates with probability > 0, renormalised in float64."""
    # ids: int32 [n], probs: float32 [n], 0 where a filter dropped the candidate
    keep = np.flatnonzero(probs)  # [m]
    kept = probs[keep].astype(np.float64)
    return Dist(ids[keep].astype(np.int64), kept / kept.sum())


def candidates_needed(params: SamplingParams) -> int:
    """How many of a row's largest logits determine both distribution(row, params) and
    top_probability(row); 0 when every logit may matter (top-k disabled at T > 0)."""
    if params.greedy:
        return CONFIDENCE_K
    return max(params.top_k, CONFIDENCE_K) if params.top_k > 0 else 0


def top_distribution(ids: np.ndarray, logits: np.ndarray, params: SamplingParams) -> Dist:
    """distribution() of a full row, from its candidates_needed(params) largest logits alone (ids [n],
    logits [n], any order): every filter of the chain keeps a subset of the top-k survivors."""
    if params.greedy:
        i = int(np.argmax(logits))
        if not math.isfinite(logits[i]):
            raise _invalid_logits(logits)
        tied = ids[logits == logits[i]]  # [t]: np.argmax over the full row takes the lowest id
        return Dist(np.array([tied.min() if tied.size > 1 else ids[i]], dtype=np.int64), np.ones(1))
    d = distribution(logits, params)  # d.ids index the candidates
    return Dist(ids[d.ids].astype(np.int64), d.probs)


def _short_distribution(logits: np.ndarray, params: SamplingParams, top: float) -> Dist:
    """distribution() of a short row (a backend's top-k candidates) by one sort: sorted by logit,
    top_k, top_p and min_p each keep a prefix, so the kept tokens are the shortest of the three."""
    order = np.argsort(-logits, kind="stable")  # [n], highest first
    if 0 < params.top_k < order.size:
        order = order[: params.top_k]
    rel = logits[order].astype(np.float64) - top  # [m], rel[0] == 0
    n = order.size
    if params.top_p < 1.0:  # the smallest prefix whose cumulative probability reaches top_p
        cum = np.cumsum(np.exp(rel))  # [m]
        n = int(np.searchsorted(cum, params.top_p * cum[-1])) + 1
    if params.min_p > 0:  # rel >= log(min_p), a prefix of the sorted row
        n = min(n, int(np.searchsorted(-rel, -math.log(params.min_p), side="right")))
    weights = np.exp(rel[:n] / params.temperature)  # [n], weights[0] == 1
    n = int(np.count_nonzero(weights))  # underflow and masked (-inf) tokens: zeros at the end
    return Dist(order[:n].astype(np.int64), weights[:n] / weights[:n].sum())


def sample(dist: Dist, rng: np.random.Generator) -> int:
    """One token drawn from dist."""
    return int(dist.ids[_draw(dist.probs, rng)])


def greedy_token(logits: np.ndarray) -> int:
    """The argmax token; ValueError if its logit is NaN or infinite."""
    token = int(np.argmax(logits))  # the first NaN, if there is one
    if not math.isfinite(logits[token]):
        raise _invalid_logits(logits)
    return token


def top_probability(logits: np.ndarray, k: int = CONFIDENCE_K) -> float:
    """The most likely token's probability among the k most likely, renormalised, at temperature 1.

    llama.cpp's draft confidence (its draft sampler keeps the top 10 candidates): drafting stops where
    this falls below p-min. Cheap: no pass over the whole vocabulary beyond a few counts."""
    logits = np.asarray(logits)  # [V]
    top = _checked_max(logits)
    ids = _top_k_ids(logits, min(k, logits.size), top)  # [k]
    return 1.0 / float(np.exp(logits[ids].astype(np.float64) - top).sum())


def accept_drafts(
    draft_ids: Sequence[int], q: Sequence[Dist], p: Sequence[Dist], rng: np.random.Generator
) -> tuple[list[int], int]:
    """Leviathan et al. 2022, Algorithm 1: accept a prefix of the drafts, then emit one more token."""
    # draft_ids: [γ]; q: [γ], q[i] is what draft_ids[i] was sampled from; p: [γ+1], p[γ] the bonus.
    # p may be lazy: each row is read once, and none after the first rejection.
    emitted: list[int] = []
    for i, x in enumerate(draft_ids):
        x = int(x)
        p_i, q_i = p[i], q[i]
        px, qx = p_i.prob_of(x), q_i.prob_of(x)
        assert qx > 0, f"draft token {x} at position {i} has q(x) = 0: it was not sampled from q"
        # r ~ U[0, 1); accept x with probability min(1, p(x) / q(x)). The strict < never accepts a
        # token with p(x) = 0, and p(x) >= q(x) always accepts.
        if rng.random() < px / qx:
            emitted.append(x)
            continue
        emitted.append(_sample_residual(p_i, q_i, rng))  # rejected: x ~ norm(max(0, p - q))
        return emitted, i
    emitted.append(sample(p[len(emitted)], rng))  # all γ accepted: the bonus token x ~ p_{γ+1}
    return emitted, len(emitted) - 1


def accept_greedy(draft_ids: Sequence[int], target_argmax: Sequence[int]) -> tuple[list[int], int]:
    """The T = 0 rule: accept drafts while they equal the target's argmax, then emit the target's token."""
    # draft_ids: [γ]; target_argmax: [γ+1], may be lazy: read once per row, none after a mismatch.
    emitted: list[int] = []
    for x in draft_ids:
        choice = int(target_argmax[len(emitted)])
        emitted.append(choice)  # equal to x when accepted; the target's own token when not
        if choice != int(x):
            return emitted, len(emitted) - 1
    emitted.append(int(target_argmax[len(emitted)]))  # all accepted: the bonus token
    return emitted, len(emitted) - 1


def _sample_residual(p: Dist, q: Dist, rng: np.random.Generator) -> int:
    """One token from norm(max(0, p - q)), over the union of both supports (Leviathan et al. 2022)."""
    diff = np.zeros(int(max(p.ids.max(), q.ids.max())) + 1)  # [max id + 1], indexed by token id
    diff[p.ids] = p.probs
    diff[q.ids] -= q.probs
    ids = np.flatnonzero(diff > 0)  # [n]
    weights = diff[ids]  # [n]
    if weights.sum() <= _RESIDUAL_EPS:
        # Departure from the paper: norm() is undefined when p == q (up to float rounding), which
        # leaves no residual mass; sample from p, the same distribution in that case.
        return sample(p, rng)
    return int(ids[_draw(weights, rng)])


def _draw(weights: np.ndarray, rng: np.random.Generator) -> int:
    """Index i with probability weights[i] / sum(weights), by inverting the cumulative sum."""
    cdf = np.cumsum(weights)  # [n]
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))  # zero weights never drawn
    return min(i, cdf.size - 1)  # rounding can put the draw exactly at cdf[-1]


def _top_k_ids(logits: np.ndarray, k: int, top: float) -> np.ndarray:
    """Ids of the k largest logits, in no particular order."""
    # Exact speed-up: the logits within any window [top - w, top] that holds >= k of them include the
    # k largest, so argpartition need only see those, and counting is far cheaper than partitioning
    # the whole vocabulary: widen the window until it holds k, then narrow it while it holds many more.
    if logits.size <= _SHORT_ROW:
        cut = logits.size - k
        return np.argpartition(logits, cut)[cut:] if cut > 0 else np.arange(logits.size)
    lo, hi = 0.0, 4.0  # window widths: lo holds fewer than k logits, hi at least k
    while (n := np.count_nonzero(logits >= top - hi)) < k and hi < 1024:
        lo, hi = hi, 2 * hi
    for _ in range(8):
        if n <= 4 * k + 64:
            break
        mid = (lo + hi) / 2
        if (m := np.count_nonzero(logits >= top - mid)) >= k:
            hi, n = mid, m
        else:
            lo = mid
    # [n]; when even 1024 nats hold fewer than k, all logits not masked (-inf)
    ids = np.flatnonzero(logits >= top - hi) if n >= k else np.flatnonzero(logits > -math.inf)
    cut = ids.size - k
    return ids[np.argpartition(logits[ids], cut)[cut:]] if cut > 0 else ids


def _top_p_floor(logits: np.ndarray, top_p: float, top: float, log_z: float, floor: float) -> float:
    """Raise floor to a logit whose survivors hold more than top_p of the mass: top_p keeps only those."""
    for window in _TOP_P_WINDOWS if top_p < 1.0 and logits.size > _SHORT_ROW else ():
        if top - window <= floor:
            break  # min_p's floor is already higher
        above = logits[logits >= top - window].astype(np.float64)  # [n]
        if np.exp(above - log_z).sum() >= top_p + 1e-6:  # a margin for rounding
            return top - window
    return floor


def _logsumexp(logits: np.ndarray, top: float) -> float:
    """log(sum(exp(logits))), given their max; exps in the logits' dtype, summed in float64."""
    return top + math.log(np.exp(logits - top).sum(dtype=np.float64))


def _checked_max(logits: np.ndarray) -> float:
    """The largest logit; ValueError if any logit is NaN or +inf, or all are -inf."""
    top = logits.max()  # NaN propagates: one vectorised pass checks everything
    if not math.isfinite(top):
        raise _invalid_logits(logits)
    return float(top)


def _invalid_logits(logits: np.ndarray) -> ValueError:
    """The error for logits holding NaN or +inf, or only -inf. Its fix names no setting: this module
    knows neither a library caller's LoadOptions nor a shell's flags, and its words are said as they are."""
    bad = np.flatnonzero(np.isnan(logits) | (logits == np.inf))
    where = f"NaN/inf at token {bad[0]} ({logits[bad[0]]})" if bad.size else "only -inf"
    return ValueError(f"logits contain {where}; the model produced invalid numbers — check the GGUF file, or put "
                      "fewer of its layers on the GPU")


def token_logprobs(logits: np.ndarray, token: int, n_top: int) -> tuple[float, tuple[tuple[int, float], ...]]:
    """log_softmax of a RAW row of target logits [V] (untempered, unfiltered, as OpenAI reports
    logprobs): the token's log-probability and the n_top likeliest (token, log-probability), best first."""
    row = np.asarray(logits, dtype=np.float64)  # [V]
    top = row.max()
    log_z = top + math.log(np.exp(row - top).sum())
    ids = np.argpartition(-row, n_top - 1)[:n_top] if n_top else np.empty(0, dtype=np.int64)
    ids = ids[np.argsort(-row[ids], kind="stable")]
    return float(row[token] - log_z), tuple((int(i), float(row[i] - log_z)) for i in ids)
