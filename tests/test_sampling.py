"""The sampling math: llama.cpp's filter chain, and the p/q rule (p = target, q = draft, as in the paper)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from scipy.stats import binomtest, chisquare

from localspec.sampling import (
    Dist,
    SamplingParams,
    accept_drafts,
    accept_greedy,
    distribution,
    greedy_token,
    sample,
    top_probability,
)

N = 100_000  # outcomes per statistical test
ALPHA = 1e-3  # a statistical test passes when its p-value is above this
PURE = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)  # softmax, no filters


# ---------------------------------------------------------------- helpers


def dist(probs) -> Dist:
    """A Dist from a dense probability vector over ids 0..V-1 (zeros left out, highest first)."""
    probs = np.asarray(probs, dtype=np.float64)
    ids = np.flatnonzero(probs > 0)
    ids = ids[np.argsort(-probs[ids], kind="stable")]
    return Dist(ids.astype(np.int64), probs[ids] / probs[ids].sum())


def dense(d: Dist, vocab: int) -> np.ndarray:
    """The [vocab] probability vector of a Dist."""
    out = np.zeros(vocab)
    out[d.ids] = d.probs
    return out


def one_hot(token: int) -> Dist:
    """An n-gram drafter's q: all mass on one token."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


def peaked(token: int, vocab: int = 10) -> Dist:
    """A target or draft distribution from sharply peaked logits: ~1 on token, ~1e-26 on each other."""
    logits = np.zeros(vocab, dtype=np.float32)
    logits[token] = 60.0
    return distribution(logits, PURE)


def draw_rows(table: np.ndarray, prev: np.ndarray, rng) -> np.ndarray:
    """One vectorised draw per entry of prev from the rows table[prev] ([V, V] -> [n])."""
    cdf = np.cumsum(table[prev], axis=1)  # [n, V]
    u = rng.random(len(prev))[:, None] * cdf[:, -1:]  # [n, 1]
    return np.minimum((cdf <= u).sum(axis=1), table.shape[1] - 1)


def gof_pvalue(samples: np.ndarray, expected: np.ndarray) -> float:
    """Chi-square goodness of fit of integer samples to a dense distribution; cells expecting < 5 lumped.

    0.0 when a sample lands where expected is 0: an outcome that cannot happen.
    """
    expected = np.asarray(expected, dtype=np.float64)
    counts = np.bincount(samples, minlength=expected.size)
    if counts.size > expected.size or counts[expected == 0].any():
        return 0.0
    exp = expected / expected.sum() * len(samples)
    small = exp < 5
    obs_cells, exp_cells = list(counts[~small]), list(exp[~small])
    if exp[small].sum() > 0:
        obs_cells.append(counts[small].sum())
        exp_cells.append(exp[small].sum())
    return chisquare(obs_cells, exp_cells).pvalue


def first_tokens(p: Dist, q: Dist, n: int, rng, rule=accept_drafts) -> tuple[np.ndarray, int]:
    """The first emitted token of n steps with γ = 1 (draft x ~ q, then the rule), and how many accepted."""
    drafts = draw_rows(dense(q, q.ids.max() + 1)[None, :], np.zeros(n, dtype=np.int64), rng)  # [n]
    out = np.empty(n, dtype=np.int64)
    accepted = 0
    for j, x in enumerate(drafts.tolist()):
        emitted, n_accepted = rule([x], [q], [p, p], rng)
        assert len(emitted) == n_accepted + 1
        out[j] = emitted[0]
        accepted += n_accepted
    return out, accepted


def assert_acceptance_rate(accepted: int, n: int, p: Dist, q: Dist) -> None:
    """Leviathan et al.: a draft is accepted with probability β = Σ_x min(p(x), q(x))."""
    vocab = max(p.ids.max(), q.ids.max()) + 1
    beta = np.minimum(dense(p, vocab), dense(q, vocab)).sum()
    if beta <= 1e-12 or beta >= 1 - 1e-12:
        assert accepted == round(beta) * n
    else:
        assert binomtest(accepted, n, beta).pvalue > ALPHA


class ChainModel:
    """A tiny synthetic 'model': the distribution at each position depends only on the previous token."""

    def __init__(self, table: np.ndarray):
        self.table = table / table.sum(axis=1, keepdims=True)  # [V, V]: row = previous token
        self.rows = [dist(row) for row in self.table]


def speculative_step(target: ChainModel, draft: ChainModel, last: int, chain: list[int], rng, rule):
    """One draft -> rule step after context token last; chain holds the γ tokens the draft sampled."""
    prev = [last, *chain]  # the token before each position: [γ+1]
    return rule(chain, [draft.rows[t] for t in prev[:-1]], [target.rows[t] for t in prev], rng)


def draft_chains(draft: ChainModel, start: np.ndarray, gamma: int, rng) -> np.ndarray:
    """Vectorised drafting: γ tokens after each start token, each from q given the previous one ([n, γ])."""
    chains = np.empty((len(start), gamma), dtype=np.int64)
    prev = start
    for i in range(gamma):
        prev = chains[:, i] = draw_rows(draft.table, prev, rng)
    return chains


def first_two(target: ChainModel, draft: ChainModel, gamma: int, n: int, rng, rule=accept_drafts):
    """The first two tokens emitted after context token 0, n times: draft γ, apply the rule, repeat."""
    out = np.full((n, 2), -1, dtype=np.int64)
    for j, chain in enumerate(draft_chains(draft, np.zeros(n, dtype=np.int64), gamma, rng).tolist()):
        emitted, _ = speculative_step(target, draft, 0, chain, rng, rule)
        out[j, : min(2, len(emitted))] = emitted[:2]
    # A step that rejected the first draft emitted one token; a second step (after it) emits the next.
    again = np.flatnonzero(out[:, 1] < 0)
    for j, chain in zip(again.tolist(), draft_chains(draft, out[again, 0], gamma, rng).tolist()):
        out[j, 1] = speculative_step(target, draft, int(out[j, 0]), chain, rng, rule)[0][0]
    return out


V6 = 6


def chain_pair() -> tuple[ChainModel, ChainModel]:
    """A target and a draft over 6 tokens that disagree a lot, each with a token the other never emits."""
    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(V6), size=V6), rng.dirichlet(np.full(V6, 0.5), size=V6)
    p[np.arange(V6), (np.arange(V6) + 1) % V6] = 0.0  # after each token, one the target never emits
    q[np.arange(V6), (np.arange(V6) + 2) % V6] = 0.0  # and one the draft never proposes
    return ChainModel(p), ChainModel(q)


def accept_always(draft_ids, q, p, rng):
    """A BROKEN rule that trusts every draft: its output follows q, not p."""
    return [*map(int, draft_ids), sample(p[len(draft_ids)], rng)], len(draft_ids)


def resample_from_p(draft_ids, q, p, rng):
    """A BROKEN rule that resamples from p, not from norm(max(0, p - q)), after a rejection."""
    for i, x in enumerate(draft_ids):
        if rng.random() >= p[i].prob_of(x) / q[i].prob_of(x):
            return [*map(int, draft_ids[:i]), sample(p[i], rng)], i
    return [*map(int, draft_ids), sample(p[len(draft_ids)], rng)], len(draft_ids)


class LazyRows:
    """A p (or argmax) sequence like the controller's: rows built on access; reading past `last` fails."""

    def __init__(self, rows: list, last: int):
        self.rows, self.last, self.reads = rows, last, Counter()

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int):
        assert i <= self.last, f"row {i} was read, but only rows up to {self.last} were needed"
        self.reads[i] += 1
        return self.rows[i]


# ---------------------------------------------------------------- the p/q rule, peaked (exact) cases


@pytest.mark.parametrize("seed", range(20))
def test_rejects_draft_the_target_rules_out(seed):
    # The target puts ~1 (all but 1e-26) on 7; the draft proposed 2 from a q peaked on 2:
    # rejects draft 2, resamples 7 from max(0, p - q).
    rng = np.random.default_rng(seed)
    assert accept_drafts([2], [peaked(2)], [peaked(7), peaked(5)], rng) == ([7], 0)


@pytest.mark.parametrize("seed", range(20))
def test_accepts_drafts_the_target_agrees_with_then_adds_bonus(seed):
    # The target is near-certain of 4 then 5, as the draft was: accepts both, then samples the bonus 9.
    rng = np.random.default_rng(seed)
    q = [peaked(4), peaked(5)]
    assert accept_drafts([4, 5], q, [peaked(4), peaked(5), peaked(9)], rng) == ([4, 5, 9], 2)


@pytest.mark.parametrize("seed", range(20))
def test_accepts_two_of_three_then_resamples(seed):
    # Drafts 4, 5, 1; the target wants 4, 5, 8: accepts 4 and 5, rejects draft 1, resamples 8.
    rng = np.random.default_rng(seed)
    q = [peaked(4), peaked(5), peaked(1)]
    p = [peaked(4), peaked(5), peaked(8), peaked(9)]
    assert accept_drafts(np.array([4, 5, 1]), q, p, rng) == ([4, 5, 8], 2)


def test_gamma_zero_is_plain_sampling_from_p():
    # No drafts (target-only mode): one token from p[0], nothing accepted.
    assert accept_drafts([], [], [peaked(3)], np.random.default_rng(0)) == ([3], 0)


@pytest.mark.parametrize("seed", range(20))
def test_masked_draft_token_is_never_accepted(seed):
    # The target masks token 2 (-inf, probability exactly 0) and the draft is sure of it: a draft
    # with p(x) = 0 must be rejected every time, and the replacement comes from p.
    logits = np.array([1.0, 0.5, -np.inf, 0.2], dtype=np.float32)
    p = distribution(logits, PURE)
    emitted, n_accepted = accept_drafts([2], [one_hot(2)], [p, p], np.random.default_rng(seed))
    assert n_accepted == 0 and emitted[0] in (0, 1, 3)


def test_one_hot_draft_of_the_targets_choice_is_accepted():
    # An n-gram drafter (q one-hot on 6) guessing the target's near-certain 6: accepted, bonus 1.
    assert accept_drafts([6], [one_hot(6)], [peaked(6), peaked(1)], np.random.default_rng(0)) == ([6, 1], 1)


def test_emitted_tokens_are_python_ints():
    # Drafts often arrive as numpy ints; the rule hands back plain ints.
    emitted, n_accepted = accept_drafts(np.array([4], dtype=np.int64), [peaked(4)], [peaked(4), peaked(9)],
                                        np.random.default_rng(0))
    assert all(type(t) is int for t in emitted) and type(n_accepted) is int


def test_draft_token_outside_q_is_an_internal_error():
    # A drafter that reports a q giving its own proposal probability 0 has a bug: fail loudly.
    with pytest.raises(AssertionError, match="q\\(x\\) = 0"):
        accept_drafts([3], [one_hot(4)], [peaked(3), peaked(3)], np.random.default_rng(0))


def test_residual_is_sampled_from_p_when_p_equals_q_up_to_rounding():
    # Departure from the paper: with p == q there is no residual mass; a rejection (only possible
    # through rounding) falls back to p. Forced here with a generator whose uniform draw is 1.0.
    class AlwaysOne:
        def random(self):
            return 1.0

    p = dist([0.0, 0.0, 1.0])
    assert accept_drafts([2], [p], [p, p], AlwaysOne()) == ([2], 0)


# ---------------------------------------------------------------- laziness


def test_rows_after_the_first_rejection_are_never_read():
    # γ = 4, the target rejects draft 3 (index 2): rows 0..2 are read once each, rows 3 and 4 never.
    q = [peaked(4), peaked(5), peaked(1), peaked(2)]
    p = LazyRows([peaked(4), peaked(5), peaked(8), peaked(2), peaked(9)], last=2)
    assert accept_drafts([4, 5, 1, 2], q, p, np.random.default_rng(0)) == ([4, 5, 8], 2)
    assert p.reads == {0: 1, 1: 1, 2: 1}


def test_all_accepted_reads_each_row_once_including_the_bonus():
    # Every draft accepted: rows 0..γ are each built once (the controller's rows are recomputed per read).
    q = [peaked(4), peaked(5), peaked(6)]
    p = LazyRows([peaked(4), peaked(5), peaked(6), peaked(9)], last=3)
    assert accept_drafts([4, 5, 6], q, p, np.random.default_rng(0)) == ([4, 5, 6, 9], 3)
    assert p.reads == {0: 1, 1: 1, 2: 1, 3: 1}


def test_greedy_rule_reads_nothing_after_the_mismatch():
    # T = 0: the first draft already differs from the target's argmax: only row 0 is read.
    target_argmax = LazyRows([3, 2, 7], last=0)
    assert accept_greedy([1, 2], target_argmax) == ([3], 0)
    assert target_argmax.reads == {0: 1}


# ---------------------------------------------------------------- the greedy rule


def test_greedy_accepts_two_of_three_then_emits_the_targets_token():
    # Drafts 4, 5, 1; the target's argmax 4, 5, 8: accepts 4 and 5, then emits the target's 8.
    assert accept_greedy([4, 5, 1], [4, 5, 8, 9]) == ([4, 5, 8], 2)


def test_greedy_all_accepted_emits_the_bonus():
    # All three drafts match: accepted, plus the target's token at the bonus position, 9.
    assert accept_greedy(np.array([4, 5, 6]), np.array([4, 5, 6, 9])) == ([4, 5, 6, 9], 3)


def test_greedy_none_accepted():
    # The first draft is wrong: nothing accepted, the target's own first token emitted.
    assert accept_greedy([1, 2], [3, 2, 7]) == ([3], 0)


def test_greedy_gamma_zero():
    # No drafts: the target's argmax is the one token.
    assert accept_greedy([], [9]) == ([9], 0)


# ---------------------------------------------------------------- the p/q rule, statistically

V8 = 8
PAIRS = {
    # q equal to p: every draft accepted, output follows p.
    "p-equals-q": (dist([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02]),
                   dist([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02])),
    # Disjoint supports: every draft rejected, the residual is p itself.
    "disjoint": (dist([0.4, 0.3, 0.2, 0.1, 0, 0, 0, 0]), dist([0, 0, 0, 0, 0.25, 0.25, 0.25, 0.25])),
    # q one-hot (an n-gram drafter): accepted with probability p(3); the residual is p without 3.
    "q-one-hot": (dist([0.25, 0.1, 0.15, 0.3, 0.05, 0.1, 0.05, 0.0]), one_hot(3)),
    # Partly overlapping supports, q far from p: both accepted and residual tokens matter.
    "overlapping": (dist([0.05, 0.05, 0.1, 0.4, 0.2, 0.2, 0, 0]),
                    dist([0, 0, 0.05, 0.05, 0.5, 0.1, 0.2, 0.1])),
}


@pytest.mark.parametrize("name", PAIRS)
def test_first_token_follows_p(name):
    # Chi-square of the first emitted token against p over 100,000 seeded steps, and the acceptance
    # count against β = Σ min(p, q) (binomial test; exact when β is 0 or 1).
    p, q = PAIRS[name]
    rng = np.random.default_rng(1000 + list(PAIRS).index(name))
    tokens, accepted = first_tokens(p, q, N, rng)
    assert gof_pvalue(tokens, dense(p, V8)) > ALPHA
    assert_acceptance_rate(accepted, N, p, q)


def test_p_one_hot_always_emits_its_token():
    # The target is certain of 5 (p one-hot); q spreads over 0..7. Whatever the draft, the first
    # token is 5: accepted when the draft was 5 (probability q(5)), the residual's only token otherwise.
    p, q = one_hot(5), dist([0.2, 0.1, 0.1, 0.1, 0.1, 0.25, 0.1, 0.05])
    tokens, accepted = first_tokens(p, q, N, np.random.default_rng(11))
    assert np.all(tokens == 5)
    assert_acceptance_rate(accepted, N, p, q)


V12 = 12
FILTERED = {
    # Hotter, top-p-only draft against a top-k + top-p + min-p target (llama.cpp defaults, T 0.7).
    "defaults-vs-hot": (SamplingParams(0.7, top_k=6, top_p=0.95, min_p=0.05),
                        SamplingParams(1.3, top_k=0, top_p=0.8, min_p=0.0)),
    # Narrow top-k target against a wide draft: the draft often proposes tokens the target filtered out.
    "topk3-vs-topk9": (SamplingParams(1.0, top_k=3, top_p=1.0, min_p=0.0),
                       SamplingParams(1.0, top_k=9, top_p=0.9, min_p=0.02)),
}


@pytest.mark.parametrize("name", FILTERED)
def test_first_token_follows_filtered_p(name):
    # p and q built by distribution() from different random logits and different filters; the
    # first token must still follow the filtered, tempered p.
    rng = np.random.default_rng(2000 + list(FILTERED).index(name))
    target_params, draft_params = FILTERED[name]
    p = distribution(rng.normal(0, 1.5, V12).astype(np.float32), target_params)
    q = distribution(rng.normal(0, 1.5, V12).astype(np.float32), draft_params)
    assert len(p.ids) < V12 and len(q.ids) < V12  # the filters did cut something
    tokens, accepted = first_tokens(p, q, N, rng)
    assert gof_pvalue(tokens, dense(p, V12)) > ALPHA
    assert_acceptance_rate(accepted, N, p, q)


@pytest.mark.parametrize("gamma", [1, 2, 4, 8] + [pytest.param(g, marks=pytest.mark.slow) for g in (3, 5, 6, 7)])
def test_first_two_tokens_follow_the_target_for_each_gamma(gamma):  # γ 3, 5-7 only in the full run
    # The joint distribution of the first two emitted tokens after context token 0, over 100,000
    # seeded runs of the draft -> rule loop, must be p(t1) * p(t2 | t1): the rule is exact for any γ.
    target, draft = chain_pair()
    pairs = first_two(target, draft, gamma, N, np.random.default_rng(3000 + gamma))
    expected = target.table[0][:, None] * target.table  # [V, V]: p(t1) p(t2 | t1)
    assert gof_pvalue(pairs[:, 0] * V6 + pairs[:, 1], expected.ravel()) > ALPHA


def test_sample_follows_the_distribution():
    # sample() itself: 100,000 draws against the probabilities.
    p = dist([0.3, 0.2, 0.15, 0.1, 0.1, 0.08, 0.05, 0.02])
    rng = np.random.default_rng(5)
    assert gof_pvalue(np.array([sample(p, rng) for _ in range(N)]), dense(p, V8)) > ALPHA


# The same tests must fail a wrong rule, or passing them proves nothing.


def test_power_accept_always_fails_the_two_token_test():
    # Accepting every draft emits the draft's chain: the two-token test above (γ = 2) rejects it.
    target, draft = chain_pair()
    pairs = first_two(target, draft, 2, N, np.random.default_rng(3002), rule=accept_always)
    expected = (target.table[0][:, None] * target.table).ravel()
    codes = pairs[:, 0] * V6 + pairs[:, 1]
    assert gof_pvalue(codes, expected) < ALPHA
    # Not only through pairs the target cannot emit: the pairs it can emit are off too.
    assert gof_pvalue(codes[expected[codes] > 0], expected) < ALPHA


def test_power_resampling_from_p_fails_the_first_token_test():
    # Resampling from p instead of norm(max(0, p - q)) after a rejection double-counts tokens both
    # models like: the first-token test on the overlapping pair rejects it.
    p, q = PAIRS["overlapping"]
    tokens, _ = first_tokens(p, q, N, np.random.default_rng(1003), rule=resample_from_p)
    assert gof_pvalue(tokens, dense(p, V8)) < ALPHA


# ---------------------------------------------------------------- distribution()


def reference(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """llama.cpp's chain written densely and slowly: top_k, top_p, min_p on softmax(logits), then T ([V])."""
    logits = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-logits, kind="stable")
    if params.top_k > 0:
        order = order[: params.top_k]
    if params.top_p < 1.0:
        cum = np.cumsum(softmax(logits[order]))
        order = order[: np.flatnonzero(cum >= params.top_p)[0] + 1] if cum[-1] >= params.top_p else order
    if params.min_p > 0:
        probs = softmax(logits[order])
        order = order[probs >= params.min_p * probs.max()]
    out = np.zeros(len(logits))
    out[order] = softmax(logits[order] / params.temperature)
    return out


def assert_same(d: Dist, expected: np.ndarray, params: SamplingParams) -> None:
    """The same support (even tokens of probability 1e-20 count) and the same probabilities."""
    assert sorted(d.ids.tolist()) == np.flatnonzero(expected > 0).tolist(), params
    np.testing.assert_allclose(d.probs, expected[d.ids], rtol=1e-9, err_msg=str(params))


def softmax(x: np.ndarray) -> np.ndarray:
    """The dense softmax of a [n] vector."""
    e = np.exp(x - x.max())
    return e / e.sum()


SETTINGS = [SamplingParams(t, k, top_p, min_p)
            for t in (0.3, 1.0, 1.7) for k in (0, 1, 5, 40)
            for top_p in (1.0, 0.5, 0.95) for min_p in (0.0, 0.1)]


@pytest.mark.parametrize("masked", [False, True], ids=["dense", "masked"])
def test_distribution_matches_dense_reference(masked):
    # Random logits over 60 tokens (some masked -inf), every combination of the filters: same
    # probabilities as the dense reference, all probabilities > 0, and ids sorted by probability
    # where top-p cut (only top-p needs the order; elsewhere the sort is skipped to save time).
    rng = np.random.default_rng(int(masked))
    for trial in range(10):
        logits = rng.normal(0, 2.5, 60).astype(np.float32)
        if masked:
            logits[rng.choice(60, 25 + trial * 3, replace=False)] = -np.inf
        for params in SETTINGS:
            d = distribution(logits, params)
            assert d.ids.dtype == np.int64 and d.probs.dtype == np.float64
            assert np.all(d.probs > 0)
            if params.top_p < 1.0 and not params.greedy:
                assert np.all(np.diff(d.probs) <= 1e-12)
            assert abs(d.probs.sum() - 1) < 1e-12
            assert_same(d, reference(logits, params), params)


@pytest.mark.parametrize("shape", ["normal", "peaked", "heavy-tail", "mostly-masked"])
def test_distribution_at_full_vocabulary_size(shape):
    # The fast paths (windows below the max, argpartition on few logits) against the dense reference
    # at Qwen2.5's vocabulary size, for logit shapes that push the windows around.
    vocab = 151_936
    rng = np.random.default_rng(42)
    logits = rng.standard_t(1.5, vocab) * 2 if shape == "heavy-tail" else rng.normal(0, 3, vocab)
    logits = logits.astype(np.float32)
    if shape == "peaked":
        logits[123] = 60.0  # far above everything: the windows must widen a lot
    if shape == "mostly-masked":
        logits[rng.permutation(vocab)[: vocab - 30]] = -np.inf  # fewer unmasked tokens than top_k
    for params in (SamplingParams(), SamplingParams(1.0, 40, 1.0, 0.0), SamplingParams(1.0, 3000, 1.0, 0.0),
                   SamplingParams(0.8, 0, 0.9, 0.0), SamplingParams(0.8, 0, 0.95, 0.05)):
        assert_same(distribution(logits, params), reference(logits, params), params)


@pytest.mark.parametrize("peak", [None, 60.0], ids=["normal", "peaked"])
def test_top_k_never_sorts_the_vocabulary(monkeypatch, peak):
    # Performance: with top_k > 0 nothing of vocabulary size is sorted or partitioned, also when one
    # logit towers over the rest (the window below the max must widen, then narrow again).
    sizes = []
    for name in ("argsort", "argpartition", "sort", "partition"):
        def spy(a, *args, _real=getattr(np, name), **kwargs):
            sizes.append(np.size(a))
            return _real(a, *args, **kwargs)
        monkeypatch.setattr(np, name, spy)
    logits = np.random.default_rng(0).normal(0, 3, 151_936).astype(np.float32)
    if peak is not None:
        logits[99] = peak
    for params in (SamplingParams(), SamplingParams(1.0, 40, 1.0, 0.0)):
        sizes.clear()
        assert len(distribution(logits, params).ids) <= 40
        assert sizes and max(sizes) < 1000, params


def test_top_k_keeps_exactly_k():
    # 20 distinct logits, top_k = 5 and no other filter: exactly the 5 largest, softmax among them.
    logits = np.random.default_rng(3).permutation(20).astype(np.float32)
    d = distribution(logits, SamplingParams(1.0, top_k=5, top_p=1.0, min_p=0.0))
    assert sorted(d.ids.tolist()) == sorted(np.argsort(logits)[-5:].tolist())
    np.testing.assert_allclose(d.probs, softmax(logits[d.ids].astype(np.float64)))


FOUR = np.log([0.5, 0.3, 0.15, 0.05]).astype(np.float32)  # logits of the probabilities 0.5, 0.3, 0.15, 0.05


@pytest.mark.parametrize("top_p, kept", [(0.75, [0, 1]), (0.85, [0, 1, 2]), (0.4, [0]), (1.0, [0, 1, 2, 3])])
def test_top_p_keeps_smallest_prefix_reaching_top_p(top_p, kept):
    # 0.5 < 0.75 <= 0.8 keeps two; 0.8 < 0.85 <= 0.95 keeps three; 0.4 still keeps the first.
    assert distribution(FOUR, SamplingParams(1.0, top_k=0, top_p=top_p, min_p=0.0)).ids.tolist() == kept


def test_top_p_sees_the_top_k_survivors_renormalised():
    # Probabilities 0.4, 0.3, 0.2, 0.1 with top_k = 2 renormalise to 0.57, 0.43: top_p = 0.55 then
    # keeps one token (on the raw 0.4 it would keep two), as llama.cpp does.
    logits = np.log([0.4, 0.3, 0.2, 0.1]).astype(np.float32)
    assert distribution(logits, SamplingParams(1.0, top_k=2, top_p=0.55, min_p=0.0)).ids.tolist() == [0]


@pytest.mark.parametrize("min_p, kept", [(0.2, [0, 1, 2]), (0.65, [0]), (0.0, [0, 1, 2, 3])])
def test_min_p_keeps_tokens_above_a_fraction_of_the_max(min_p, kept):
    # min_p = 0.2: the floor is 0.1, so 0.05 goes; min_p = 0.65: the floor 0.325 leaves only 0.5.
    assert distribution(FOUR, SamplingParams(1.0, top_k=0, top_p=1.0, min_p=min_p)).ids.tolist() == kept


def test_temperature_is_applied_after_filtering():
    # top_p = 0.75 keeps {0, 1} from the untempered 0.5, 0.3, ...; T = 2 then flattens those two to
    # ∝ sqrt(0.5), sqrt(0.3). (Tempering first would give 0.37, 0.28, 0.2, ... and keep three.)
    d = distribution(FOUR, SamplingParams(2.0, top_k=0, top_p=0.75, min_p=0.0))
    assert d.ids.tolist() == [0, 1]
    np.testing.assert_allclose(d.probs, np.sqrt([0.5, 0.3]) / np.sqrt([0.5, 0.3]).sum())


def test_greedy_is_one_hot_and_ignores_filters():
    # T = 0: the argmax with probability 1, whatever the filters say.
    logits = np.array([0.1, 2.0, 3.5, -1.0], dtype=np.float32)
    d = distribution(logits, SamplingParams(0.0, top_k=1, top_p=0.01))
    assert d.ids.tolist() == [2] and d.probs.tolist() == [1.0]
    assert greedy_token(np.array([0.1, 2.0, 3.5, -np.inf], dtype=np.float32)) == 2


def test_masked_tokens_are_left_out():
    # -inf logits are legal (masked tokens): never candidates, even when top_k asks for more.
    logits = np.array([1.0, -np.inf, 0.5, -np.inf], dtype=np.float32)
    for params in (SamplingParams(1.0, top_k=3, top_p=1.0, min_p=0.0), PURE):
        assert sorted(distribution(logits, params).ids.tolist()) == [0, 2]


def test_tiny_temperature_drops_underflowing_tokens():
    # T = 0.001 makes a 1-nat gap 1000 nats: the runner-up underflows to 0 and is left out.
    logits = np.array([1.0, 0.0], dtype=np.float32)
    d = distribution(logits, SamplingParams(0.001, top_k=0, top_p=1.0, min_p=0.0))
    assert d.ids.tolist() == [0] and d.probs.tolist() == [1.0]


def test_prob_of():
    # Probability by token id; 0.0 outside the support.
    d = distribution(FOUR, SamplingParams(1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert d.prob_of(1) == pytest.approx(0.3 / 0.8) and d.prob_of(3) == 0.0 and d.prob_of(10**6) == 0.0


def bad_logits(kind: str) -> np.ndarray:
    """50 logits with a NaN or +inf at token 37, or all -inf."""
    logits = np.random.default_rng(0).normal(0, 1, 50).astype(np.float32)
    if kind == "nan":
        logits[37] = np.nan  # far from the top: a top-k shortcut must not skip the check
    elif kind == "+inf":
        logits[37] = np.inf
    else:
        logits[:] = -np.inf
    return logits


@pytest.mark.parametrize("kind", ["nan", "+inf", "all -inf"])
@pytest.mark.parametrize("params", [SamplingParams(), PURE, SamplingParams(0.0)],
                         ids=["defaults", "pure", "greedy"])
def test_invalid_logits_raise(kind, params):
    # NaN, +inf or nothing but -inf: a one-line ValueError naming the token and the likely fix, in words
    # for every caller (it said "lower --ngl", a flag the CLI lacks and a library caller has no use for).
    with pytest.raises(ValueError, match="invalid numbers — check the GGUF file, or put fewer of its layers on "
                       "the GPU$") as err:
        distribution(bad_logits(kind), params)
    assert ("token 37" in str(err.value)) == (kind != "all -inf") and "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["nan", "+inf", "all -inf"])
def test_greedy_token_rejects_invalid_logits(kind):
    # The same error from the argmax path.
    with pytest.raises(ValueError, match="invalid numbers"):
        greedy_token(bad_logits(kind))


# ---------------------------------------------------------------- SamplingParams


@pytest.mark.parametrize("kwargs, fragments", [
    ({"temperature": -0.5}, ["temperature must be >= 0", "-0.5", "use 0 for greedy"]),
    ({"temperature": float("nan")}, ["temperature", "nan"]),
    ({"temperature": float("inf")}, ["temperature", "inf"]),
    ({"top_k": 2.5}, ["top_k", "2.5", "use 0 to disable"]),
    ({"top_p": -0.1}, ["top_p must be in [0, 1]", "-0.1", "1.0 to disable"]),
    ({"top_p": 1.5}, ["top_p", "1.5"]),
    ({"top_p": float("nan")}, ["top_p", "nan"]),
    ({"min_p": 1.5}, ["min_p must be in [0, 1]", "1.5", "0.0 to disable"]),
    ({"min_p": -0.1}, ["min_p", "-0.1"]),
])
def test_validate_names_the_bad_value_and_the_fix(kwargs, fragments):
    # Each value out of range (or not finite): a ValueError naming the parameter, the value and the fix.
    with pytest.raises(ValueError) as err:
        SamplingParams(**kwargs).validate()
    assert all(f in str(err.value) for f in fragments), str(err.value)


def test_the_edges_llama_cpp_and_openai_accept_mean_what_they_mean_there():
    # top_p 0 (OpenAI clients send it for near-determinism) and min_p 1 keep the most likely token
    # alone; top_k below 0 disables top-k, as 0 does: llama.cpp reads them so, and they were refused.
    rng = np.random.default_rng(3)
    for size in (64, 151_936):  # a short row's path and a full row's
        logits = rng.normal(0.0, 3.0, size).astype(np.float32)
        top = int(np.argmax(logits))
        for params in (SamplingParams(0.8, 40, 0.0, 0.05), SamplingParams(0.8, 0, 0.95, 1.0)):
            d = distribution(logits, params.validate())
            assert d.ids.tolist() == [top] and d.probs.tolist() == [1.0]
        off, negative = SamplingParams(0.8, 0, 1.0, 0.0), SamplingParams(0.8, -1, 1.0, 0.0).validate()
        a, b = distribution(logits, off), distribution(logits, negative)
        assert sorted(a.ids.tolist()) == sorted(b.ids.tolist()) and len(a.ids) > 40


def test_validate_accepts_good_values():
    # The defaults, greedy, and the edges of each range are fine; validate returns the params.
    for params in (SamplingParams(), SamplingParams(0.0), SamplingParams(1.0, 0, 1.0, 0.0),
                   SamplingParams(2.0, 1, 1e-9, 0.99)):
        assert params.validate() is params
    assert SamplingParams(0.0).greedy and not SamplingParams().greedy


# ---------------------------------------------------------------- the draft's confidence (p-min)

def test_top_probability_is_the_top10_renormalised_softmax():
    # llama.cpp's draft sampler keeps 10 candidates and judges p-min on their renormalised softmax.
    rng = np.random.default_rng(7)
    logits = rng.normal(0, 3, 151_936).astype(np.float32)
    top10 = np.sort(logits.astype(np.float64))[-10:]
    expected = np.exp(top10[-1] - top10[-1]) / np.exp(top10 - top10[-1]).sum()
    assert top_probability(logits) == pytest.approx(expected, rel=1e-9)


def test_top_probability_peaked_and_flat():
    peaked = np.zeros(1000, dtype=np.float32)
    peaked[3] = 20.0  # e^20 against nine e^0: near certain
    assert top_probability(peaked) > 0.999
    flat = np.zeros(1000, dtype=np.float32)  # ten equal candidates
    assert top_probability(flat) == pytest.approx(0.1)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"gamma": "auto"}, "gamma must be a whole number >= 0, or None for auto (got 'auto')"),
    ({"max_tokens": "16"}, "max_tokens must be a whole number >= 1 (got '16')"),
    ({"max_tokens": 2.5}, "max_tokens must be a whole number >= 1 (got 2.5)"),
    ({"gamma": True}, "gamma must be a whole number"),
    ({"seed": "1"}, "seed must be a whole number >= 0, or None for a random one"),
    ({"logprobs": True}, "logprobs must be a whole number 0..20"),
    ({"sampling": {"temperature": 0}}, "sampling must be a SamplingParams"),
    ({"stop": "cache"}, "stop must be a tuple of strings (got 'cache')"),
    ({"stop": (None,)}, "stop must be a tuple of strings"),
    ({"stop": 5}, "stop must be a tuple of strings (got 5)"),  # was: TypeError 'int' object is not iterable
    ({"stop": {"a": 1}}, "stop must be a tuple of strings"),  # was: taken, its keys the stop strings
    ({"max_tokens": "x" * 200}, f"max_tokens must be a whole number >= 1 (got {'x' * 200!r:.60})"),  # as tune cuts it
    ({"sampling": SamplingParams(temperature="0.5")}, "temperature must be a number (got '0.5')"),
    ({"sampling": SamplingParams(top_p=None)}, "top_p must be a number (got None)"),
])
def test_a_config_field_of_the_wrong_type_is_named_with_its_fix(kwargs, fragment):
    # A library caller got TypeError "'<' not supported between 'str' and 'int'"; stop="cache" was
    # silently five stop strings, one a character; max_tokens=2.5 and gamma=True were taken.
    from localspec.config import GenerationConfig, GenerationError

    with pytest.raises(GenerationError) as err:
        GenerationConfig(**kwargs).validate()
    assert fragment in str(err.value)
