"""Backend sampling: llama.cpp's sampler chain judges each decoded row (the target's verify rows as
candidate lists with probabilities or greedy tokens, the draft's rows as their top-k logits). The rule
must stay exact on those rows: the same distributions as numpy's, and chi-square tests on that path.
Pure and fake tests first; then SmolLM2-135M through real llama.cpp, marked slow."""

from __future__ import annotations

import numpy as np
import pytest

import localspec.speculative as spec_mod
from localspec.config import GenerationConfig, rows_on_backend
from localspec.sampling import (
    Dist,
    SamplingParams,
    candidate_dist,
    candidates_needed,
    distribution,
    greedy_token,
    sample,
    top_distribution,
    top_probability,
)

from conftest import GPU_LAYERS
from fakes import FakeContext, RecordingContext, SampledContext, fake_contexts
from test_controller import (GREEDY, HOT, PURE_T1, emitted_tokens, exact_first_two, first_two, generate,
                             model_source, same_distribution_pvalue, target_only_first_two)
from test_sampling import ALPHA, N, PAIRS, V8, dense, first_tokens, gof_pvalue

FILTERED = SamplingParams(temperature=0.7, top_k=20, top_p=0.9, min_p=0.02)
GREEDY_CONFIG = GenerationConfig(sampling=GREEDY)
HOT_FILTERED = SamplingParams(temperature=1.6, top_k=20, top_p=0.9, min_p=0.02)  # q far from p, filtered
SETTINGS = {
    "default": SamplingParams(),
    "pure": PURE_T1,
    "top-k": SamplingParams(temperature=1.0, top_k=40, top_p=1.0, min_p=0.0),
    "top-p": SamplingParams(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0),
    "min-p-hot": SamplingParams(temperature=1.3, top_k=0, top_p=1.0, min_p=0.1),
    "all-filters": FILTERED,
}


def as_backend_row(d: Dist, vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """d as llama.cpp's chain returns a row: every candidate in some order, float32, 0 where filtered."""
    order = np.random.default_rng(seed).permutation(vocab).astype(np.int32)
    return order, dense(d, vocab).astype(np.float32)[order]


def sorted_dist(d: Dist) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(d.ids)
    return d.ids[order], d.probs[order]


# ---------------------------------------------------------------- pure: rows as candidate lists


def test_candidate_dist_drops_filtered_candidates_and_renormalises():
    ids = np.array([7, 3, 9, 1], dtype=np.int32)
    probs = np.array([0.5, 0.0, 0.25, 0.25], dtype=np.float32) * 0.999  # float32 rounding: sums to 0.999
    d = candidate_dist(ids, probs)
    assert d.ids.tolist() == [7, 9, 1] and d.ids.dtype == np.int64
    assert d.probs.dtype == np.float64 and d.probs.sum() == pytest.approx(1.0, abs=1e-15)
    assert d.prob_of(3) == 0.0 and d.prob_of(7) == pytest.approx(0.5)


@pytest.mark.parametrize("name", ["overlapping", "q-one-hot", "disjoint"])
def test_first_token_follows_p_given_as_backend_rows(name):
    # The chi-square of test_sampling, with p arriving as llama.cpp's chain returns it (shuffled
    # candidates, float32, zeros): the first emitted token still follows p.
    p, q = PAIRS[name]
    p_row = candidate_dist(*as_backend_row(p, V8, seed=1))
    tokens, _ = first_tokens(p_row, q, N, np.random.default_rng(2000 + list(PAIRS).index(name)))
    assert gof_pvalue(tokens, dense(p, V8)) > ALPHA


def test_backend_rows_test_has_power():
    # The same test rejects a rule that resamples p after a rejection instead of the residual.
    p, q = PAIRS["overlapping"]
    p_row = candidate_dist(*as_backend_row(p, V8, seed=1))

    def resample_from_p(draft_ids, qs, ps, rng):
        if rng.random() >= ps[0].prob_of(draft_ids[0]) / qs[0].prob_of(draft_ids[0]):
            return [sample(ps[0], rng)], 0
        return [int(draft_ids[0]), sample(ps[1], rng)], 1

    tokens, _ = first_tokens(p_row, q, N, np.random.default_rng(2100), rule=resample_from_p)
    assert gof_pvalue(tokens, dense(p, V8)) < ALPHA


@pytest.mark.parametrize("name", ["default", "top-k", "all-filters"])
def test_top_distribution_equals_distribution_of_the_full_row(name):
    # A draft row kept to its top-k logits gives the same q and confidence as the whole row.
    params = SETTINGS[name]
    k = candidates_needed(params)
    for seed in range(20):
        row = (np.random.default_rng(seed).standard_normal(5000) * 3).astype(np.float32)
        ids = np.argpartition(-row, k - 1)[:k].astype(np.int32)
        full, top = distribution(row, params), top_distribution(ids, row[ids], params)
        assert np.array_equal(sorted_dist(full)[0], sorted_dist(top)[0])
        np.testing.assert_allclose(sorted_dist(full)[1], sorted_dist(top)[1], rtol=1e-12)
        assert top_probability(row[ids]) == pytest.approx(top_probability(row), rel=1e-12)


def test_top_distribution_greedy_takes_the_first_argmax_like_numpy():
    row = np.zeros(100, dtype=np.float32)
    row[[42, 17, 63]] = 5.0  # a three-way tie: np.argmax takes the lowest id
    ids = np.array([63, 42, 17, 0, 1, 2, 3, 4, 5, 6], dtype=np.int32)
    assert top_distribution(ids, row[ids], GREEDY).ids.tolist() == [greedy_token(row)] == [17]


def test_candidates_needed():
    assert candidates_needed(GREEDY) == 10  # the confidence's top 10
    assert candidates_needed(SamplingParams(top_k=40)) == 40
    assert candidates_needed(SamplingParams(top_k=5)) == 10
    assert candidates_needed(SamplingParams(top_k=0)) == 0  # every logit may matter: numpy on the row


# ---------------------------------------------------------------- the one switch


def test_rows_on_backend_where_rows_are_made_on_a_device(monkeypatch):
    monkeypatch.delenv("LOCALSPEC_BACKEND_SAMPLING", raising=False)
    device, cpu = fake_contexts(context=SampledContext, draft=False)[0], fake_contexts(draft=False)[0]
    assert rows_on_backend(device, GREEDY_CONFIG) and rows_on_backend(device, greedy=True)
    # sampled rows stay in numpy on a GPU too until the filtered chain's H100 failures are explained
    assert not rows_on_backend(device, GenerationConfig()) and not rows_on_backend(device)
    assert not rows_on_backend(cpu, GREEDY_CONFIG) and not rows_on_backend(cpu, greedy=True)  # numpy is cheaper there
    assert not rows_on_backend(device, GenerationConfig(logprobs=2, sampling=GREEDY))  # logprobs need the raw rows
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "0")
    assert not rows_on_backend(device, GREEDY_CONFIG)
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")
    assert rows_on_backend(cpu, GenerationConfig()) and not rows_on_backend(cpu, GenerationConfig(logprobs=2))


class SampledRecording(SampledContext, RecordingContext):
    """A SampledContext that logs its decodes with their sampled flag."""

    def decode(self, tokens, logits="last", sampled=False):
        self.calls.append(("decode", list(tokens), logits, sampled))
        FakeContext.decode(self, tokens, logits, sampled)

    def decodes(self) -> list[tuple]:
        """The logged decodes: ("decode", tokens, logits, sampled)."""
        return [c for c in self.calls if c[0] == "decode"]


def test_verify_batches_arrive_sampled_and_logprobs_read_raw_rows(monkeypatch):
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")  # sampled rows: the chain only where asked for
    target, _ = fake_contexts(context=SampledRecording)
    prompt = target.model.tokenize("My favourite colour is")
    generate(target, [], prompt, GenerationConfig(6, 0, PURE_T1, seed=1))
    verifies = [c for c in target.decodes() if c[2] == "all"]
    assert verifies and all(c[3] for c in verifies) and target.chain == PURE_T1
    target.calls.clear()
    *pieces, _ = spec_mod.SpeculativeDecoder(target, []).generate(prompt, GenerationConfig(6, 0, PURE_T1, logprobs=2))
    assert all(c[3] is False for c in target.decodes()) and target.chain is None
    assert all(p.logprob is not None for p in pieces)


def test_a_verify_wider_than_the_sampling_graph_falls_back_to_numpy(monkeypatch):
    monkeypatch.setattr(spec_mod, "SAMPLED_ROWS_MAX", 3)
    target, draft = fake_contexts(context=SampledRecording)
    prompt = target.model.tokenize("My favourite colour is")
    generate(target, model_source(draft, GREEDY), prompt, GenerationConfig(12, 4, GREEDY, p_min=0.0))
    widths = {(len(c[1]), c[3]) for c in target.decodes() if c[2] == "all"}
    assert (5, False) in widths and not any(s for w, s in widths if w > 3)


# ---------------------------------------------------------------- the controller on sampled fakes


@pytest.mark.parametrize("gamma", [1, 3])
def test_greedy_on_sampled_rows_equals_numpy_rows(gamma):
    plain_t, plain_d = fake_contexts()
    sampled_t, sampled_d = fake_contexts(context=SampledContext)
    prompt = plain_t.model.tokenize("The capital of France is")
    config = GenerationConfig(40, gamma, GREEDY, p_min=0.0)
    numpy_tokens, _ = generate(plain_t, model_source(plain_d), prompt, config)
    backend_tokens, stats = generate(sampled_t, model_source(sampled_d), prompt, config)
    assert backend_tokens == numpy_tokens and stats.drafted > 0
    assert sampled_d.chain == 10  # the draft's rows came as their top 10 logits


@pytest.mark.parametrize("sampling, draft_sampling", [(PURE_T1, HOT), (FILTERED, HOT_FILTERED)],
                         ids=["T1-hot-draft", "filtered-hot-draft"])
def test_sampled_rows_keep_the_target_distribution(sampling, draft_sampling, monkeypatch):
    # First two tokens over 4,000 seeds a side: speculative on backend rows (p as candidate lists,
    # q from the draft's top-k where the filters keep one) vs target-only on numpy rows.
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")
    plain_t, _ = fake_contexts()
    sampled_t, sampled_d = fake_contexts(context=SampledContext)
    prompt = plain_t.model.tokenize("My favourite colour is")
    n = 4000
    plain_prompt, plain = target_only_first_two("My favourite colour is", sampling, n)  # numpy rows, once a run
    assert plain_prompt == prompt
    spec, drafted = first_two(sampled_t, lambda: model_source(sampled_d, draft_sampling), prompt, sampling, 2,
                              range(n, 2 * n))
    assert drafted >= 2 * n and sampled_t.chain == sampling
    assert same_distribution_pvalue(plain, spec) > 1e-3


def test_sampled_rows_distribution_test_has_power(monkeypatch):
    # The test above rejects a rule that resamples p after a rejection, on the same backend rows.
    import localspec.sampling as rule_mod

    monkeypatch.setattr(rule_mod, "_sample_residual", lambda p, q, rng: sample(p, rng))
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")
    plain_t, _ = fake_contexts()
    sampled_t, sampled_d = fake_contexts(context=SampledContext)
    prompt = plain_t.model.tokenize("My favourite colour is")
    plain = target_only_first_two("My favourite colour is", PURE_T1, 4000)[1]  # as test_controller's plain_t1
    broken, _ = first_two(sampled_t, lambda: model_source(sampled_d, HOT), prompt, PURE_T1, 2, range(4000, 8000))
    assert same_distribution_pvalue(plain, broken) < 1e-6


# ---------------------------------------------------------------- real llama.cpp: SmolLM2-135M


@pytest.fixture(scope="module")
def smol_contexts(smol_path, smol_q4_0):
    """A numpy-path context and a backend-path context of the same model, and a Q4_0 draft context."""
    from localspec.context import Context
    from localspec.llama import Model

    model = Model(smol_path, n_gpu_layers=GPU_LAYERS)
    return (model, Context(model, n_ctx=256, n_threads=2), Context(model, n_ctx=256, n_threads=2),
            Context(Model(smol_q4_0, n_gpu_layers=GPU_LAYERS), n_ctx=256, n_threads=2))


@pytest.mark.slow
@pytest.mark.parametrize("name", [*SETTINGS, "greedy"])
def test_backend_chain_rows_equal_numpy_distribution(smol_contexts, name):
    # Every row of a 16-token batch: the same candidate set as numpy's distribution(), probabilities
    # within 1e-5; at T=0 the same argmax token.
    model, plain, backend, _ = smol_contexts
    params = SETTINGS.get(name, GREEDY)
    tokens = model.tokenize("The quick brown fox jumps over the lazy dog. Once upon a time, in a")[:16]
    assert backend.sample_on_backend(params)
    for ctx, sampled in ((plain, False), (backend, True)):
        ctx.truncate(0)
        ctx.decode(tokens, logits="all", sampled=sampled)
    for i in range(len(tokens)):
        want = distribution(plain.logits(i), params)
        if params.greedy:
            assert backend.sampled_token(i) == want.ids[0]
            continue
        got = candidate_dist(*backend.sampled_probs(i))
        assert np.array_equal(sorted_dist(got)[0], sorted_dist(want)[0]), f"row {i}"
        np.testing.assert_allclose(sorted_dist(got)[1], sorted_dist(want)[1], atol=1e-5)


@pytest.mark.slow
def test_top_k_chain_rows_are_the_rows_largest_logits(smol_contexts):
    model, plain, backend, _ = smol_contexts
    tokens = model.tokenize("The quick brown fox jumps over the lazy dog.")
    assert backend.keep_top_k_on_backend(40)
    for ctx, sampled in ((plain, False), (backend, True)):
        ctx.truncate(0)
        ctx.decode(tokens, logits="last", sampled=sampled)
    ids, logits = backend.sampled_logits(-1)
    row = plain.logits(-1)
    assert sorted(ids.tolist()) == sorted(np.argpartition(-row, 39)[:40].tolist())
    np.testing.assert_allclose(logits, row[ids], atol=1e-5)


@pytest.mark.slow
def test_a_raw_decode_removes_the_chain_and_logits_come_back(smol_contexts):
    model, plain, backend, _ = smol_contexts
    tokens = model.tokenize("Once upon a time")
    assert backend.sample_on_backend(SETTINGS["default"])
    backend.truncate(0)
    backend.decode(tokens, logits="last", sampled=True)
    with pytest.raises(AssertionError, match="no logits"):
        backend.logits(-1)
    backend.truncate(len(tokens) - 1)
    backend.decode(tokens[-1:], logits="last")  # a raw decode: the chain goes
    plain.truncate(0)
    plain.decode(tokens, logits="last")
    assert backend.chain_key is None
    np.testing.assert_allclose(backend.logits(-1), plain.logits(-1), atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [0, 3])
def test_real_greedy_backend_path_equals_numpy_path(smol_contexts, monkeypatch, gamma):
    model, _, target, draft = smol_contexts
    prompt = model.tokenize("Here is a short story about a robot:")
    config = GenerationConfig(40, gamma, GREEDY, p_min=0.0)
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "0")
    numpy_tokens, _ = generate(target, model_source(draft), prompt, config)
    assert target.chain_key is None and draft.chain_key is None
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")
    backend_tokens, stats = generate(target, model_source(draft), prompt, config)
    assert target.chain_key == ("chain", 0, 40, 0.95, 0.05)
    assert draft.chain_key == (("top_k", 10) if gamma else None)  # γ 0 never drafts
    assert backend_tokens == numpy_tokens and (stats.drafted > 0) == (gamma > 0)


@pytest.mark.slow
@pytest.mark.parametrize("sampling, draft_sampling", [(PURE_T1, HOT), (FILTERED, HOT_FILTERED)],
                         ids=["T1-hot-draft", "filtered-hot-draft"])
def test_real_backend_sampling_matches_target_only(smol_contexts, monkeypatch, sampling, draft_sampling):
    # The chi-square end to end through llama.cpp's chains: speculative (γ 2, the Q4_0 draft sampled
    # hotter) with p from the target's chain (and q from the draft's top-k chain where its filters keep
    # a top-k), 1,000 seeds, against target-only's exact probabilities of the first two tokens, read
    # from the target's rows in numpy (the numpy-path context of the same model).
    model, plain, target, draft = smol_contexts
    prompt = model.tokenize("My favourite colour is", True)
    cell, expected = exact_first_two(plain, prompt, sampling)
    monkeypatch.setenv("LOCALSPEC_BACKEND_SAMPLING", "1")
    spec, drafted = first_two(target, lambda: model_source(draft, draft_sampling), prompt, sampling, 2, range(1000),
                              emitted_tokens(monkeypatch))
    assert target.chain_key[0] == "chain" and drafted >= 2000
    assert draft.chain_key == (("top_k", 20) if draft_sampling.top_k else None)
    assert len(set(spec)) > 10
    assert gof_pvalue(np.array([cell(s) for s in spec]), expected) > 1e-3
