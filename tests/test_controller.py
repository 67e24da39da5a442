"""The controller end to end through real llama.cpp, on SmolLM2-135M (target) and a Q4_0 copy (draft)."""

from __future__ import annotations

from collections import Counter

import pytest
from scipy.stats import chi2_contingency

from localspec.drafters import ModelDrafter, NGramDrafter
from localspec.llama import Context, Model
from localspec.planner import CostTracker
from localspec.sampling import SamplingParams
from localspec.speculative import Finished, GenerationConfig, GenerationError, SpeculativeDecoder

PURE_T1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
PROMPT = "My favourite colour is"


@pytest.fixture(scope="module")
def target(smol_path):
    return Model(smol_path)


@pytest.fixture(scope="module")
def target_ctx(target):
    return Context(target, n_ctx=256, n_threads=2)


@pytest.fixture(scope="module")
def draft_ctx(smol_q4_0):
    return Context(Model(smol_q4_0), n_ctx=256, n_threads=2)


@pytest.fixture(scope="module")
def self_draft_ctx(target):
    """A second context over the target's own weights: a draft that is the target."""
    return Context(target, n_ctx=256, n_threads=2)


def collect(decoder, prompt, config):
    """Generate; return (emitted token ids, stats from the closing Finished)."""
    *pieces, finished = decoder.generate(prompt, config)
    assert isinstance(finished, Finished)
    return [p.token for p in pieces if p.token >= 0], finished.stats


def run(target_ctx, drafter, prompt, config):
    """Generate with one drafter (None: target-only) and a fresh tracker; (emitted ids, stats)."""
    return collect(SpeculativeDecoder(target_ctx, [(drafter, CostTracker())] if drafter else []), prompt, config)


def test_greedy_self_draft_accepts_every_draft(target, target_ctx, self_draft_ctx):
    # The draft is the target itself, so at T=0 every guess is the target's own argmax.
    prompt = target.tokenize("def fibonacci(n):", True)
    cfg = GenerationConfig(max_tokens=40, gamma=4, sampling=SamplingParams(temperature=0))
    _, stats = run(target_ctx, ModelDrafter(self_draft_ctx, cfg.sampling), prompt, cfg)
    assert stats.drafted > 20
    assert stats.accepted == stats.drafted


def test_greedy_speculative_equals_target_only(target, target_ctx, draft_ctx):
    # Token identity with plain decoding, for several draft lengths.
    prompt = target.tokenize("Here is a short story about a robot:", True)
    greedy = SamplingParams(temperature=0)
    baseline, base_stats = run(target_ctx, None, prompt, GenerationConfig(48, 0, greedy))
    assert base_stats.drafted == 0 and len(baseline) == 48
    for gamma in (1, 3, 6):
        cfg = GenerationConfig(48, gamma, greedy)
        spec, stats = run(target_ctx, ModelDrafter(draft_ctx, greedy), prompt, cfg)
        assert spec == baseline, f"gamma={gamma}"
        assert stats.drafted > 0 and stats.steps < 48


def first_two(target_ctx, drafter, prompt, sampling, gamma, seeds, costs=None):
    """The first two emitted tokens (EOS as -1) for each seed, and how many tokens were drafted."""
    out, drafted = [], 0
    for seed in seeds:
        cfg = GenerationConfig(max_tokens=max(2, (gamma or 3) + 1), gamma=gamma, sampling=sampling, seed=seed,
                               p_min=0.0 if gamma else None)
        sources = [(drafter, costs() if costs else CostTracker())] if drafter else []
        tokens, stats = collect(SpeculativeDecoder(target_ctx, sources), prompt, cfg)
        drafted += stats.drafted
        out.append(tuple((tokens + [-1, -1])[:2]))
    return out if costs is None else (out, drafted)


def eager_costs() -> CostTracker:
    """A cost tracker that has seen a cheap draft and a flat verify: auto mode drafts 1..8 tokens,
    changing its choice as the run's own acceptance comes in."""
    t = CostTracker()
    for k in (1, 3, 5, 9):
        t.record(k - 1, 0 if k == 1 else 1, draft_s=0.0005 * (k - 1), verify_s=0.010, overhead_s=0.0)
    return t


def same_distribution_pvalue(a, b) -> float:
    """Two-sample chi-square on outcome counts; outcomes seen fewer than 10 times in all are lumped."""
    ca, cb = Counter(a), Counter(b)
    common = [k for k in set(ca) | set(cb) if ca[k] + cb[k] >= 10]
    rows = [[ca[k] for k in common], [cb[k] for k in common]]
    rows[0].append(len(a) - sum(rows[0]))
    rows[1].append(len(b) - sum(rows[1]))
    if rows[0][-1] + rows[1][-1] == 0:
        rows = [r[:-1] for r in rows]
    return chi2_contingency(rows)[1]


@pytest.mark.parametrize("sampling, draft_sampling", [
    # A draft sampled hotter than the target: q far from p, many rejections and residual samples.
    (PURE_T1, SamplingParams(temperature=1.6, top_k=0, top_p=1.0, min_p=0.0)),
    # Filtered p and q (top-k, top-p, min-p as llama.cpp applies them).
    (SamplingParams(temperature=1.0, top_k=20, top_p=0.9, min_p=0.02),
     SamplingParams(temperature=1.0, top_k=20, top_p=0.9, min_p=0.02)),
], ids=["T1-hot-draft", "T1-filtered"])
def test_speculative_sampling_matches_target_only(target, target_ctx, draft_ctx, sampling, draft_sampling):
    # Joint distribution of the first two tokens over 2,000 seeds each, speculative (gamma 2) vs
    # target-only: the p/q rule must leave the target's distribution unchanged.
    prompt = target.tokenize(PROMPT, True)
    n = 2000
    plain = first_two(target_ctx, None, prompt, sampling, 0, range(n))
    spec = first_two(target_ctx, ModelDrafter(draft_ctx, draft_sampling), prompt, sampling, 2, range(n, 2 * n))
    assert len(set(plain)) > 20  # a spread-out distribution, not a near-certain continuation
    assert same_distribution_pvalue(plain, spec) > 1e-3


def test_auto_gamma_and_auto_p_min_keep_the_distribution(target, target_ctx, draft_ctx, monkeypatch):
    # Auto mode only changes how many tokens are drafted each step, never the rule; so does p-min
    # auto, which stops a draft from the draft's confidence and past steps' costs, never the target's.
    # The planner takes p-min auto at T=0 only; here it is forced on at T=1 to test the stop rule itself.
    import localspec.planner as planner_mod

    monkeypatch.setattr(planner_mod, "p_min_of", lambda config: None)
    prompt = target.tokenize(PROMPT, True)
    hot = SamplingParams(temperature=1.6, top_k=0, top_p=1.0, min_p=0.0)
    plain = first_two(target_ctx, None, prompt, PURE_T1, 0, range(2000))
    spec, drafted = first_two(target_ctx, ModelDrafter(draft_ctx, hot), prompt, PURE_T1, None,
                              range(2000, 4000), costs=eager_costs)
    assert drafted > 2000  # it did speculate
    assert same_distribution_pvalue(plain, spec) > 1e-3


def test_ngram_proposals_keep_the_distribution(target, target_ctx):
    # One-hot q from prompt lookup: accept with probability p(x), else sample p without x.
    prompt = target.tokenize("red, blue, green, red, blue, green, red, blue, green, red,", True)
    plain = first_two(target_ctx, None, prompt, PURE_T1, 0, range(2000))
    spec, drafted = first_two(target_ctx, NGramDrafter(), prompt, PURE_T1, 3, range(2000, 4000),
                              costs=CostTracker)
    assert drafted > 2000
    assert same_distribution_pvalue(plain, spec) > 1e-3


def test_distribution_test_has_power(target, target_ctx, draft_ctx, monkeypatch):
    # A broken rule that accepts every draft outputs the draft's (hotter) distribution: the same
    # test must reject it, or the test above proves nothing.
    import localspec.speculative as spec_mod

    prompt = target.tokenize(PROMPT, True)
    hot = SamplingParams(temperature=1.6, top_k=0, top_p=1.0, min_p=0.0)
    plain = first_two(target_ctx, None, prompt, PURE_T1, 0, range(1000))  # before the rule is broken
    monkeypatch.setattr(spec_mod, "accept_drafts", lambda ids, q, p, rng: (list(ids) + [ids[-1]], len(ids)))
    broken = first_two(target_ctx, ModelDrafter(draft_ctx, hot), prompt, PURE_T1, 2, range(1000, 2000))
    assert same_distribution_pvalue(plain, broken) < 1e-3


def test_seeded_runs_are_reproducible(target, target_ctx, draft_ctx):
    prompt = target.tokenize(PROMPT, True)
    cfg = GenerationConfig(max_tokens=24, gamma=4, sampling=PURE_T1, seed=123)
    a, _ = run(target_ctx, ModelDrafter(draft_ctx, PURE_T1), prompt, cfg)
    b, _ = run(target_ctx, ModelDrafter(draft_ctx, PURE_T1), prompt, cfg)
    assert a == b and len(a) > 0


def test_full_context_finishes_with_length(target, draft_ctx):
    # A context of 40 tokens fills up long before max_tokens: a clean finish, never a crash.
    ctx = Context(target, n_ctx=40, n_threads=2)
    prompt = target.tokenize("Count: 1 2 3 4 5 6 7 8", True)
    cfg = GenerationConfig(max_tokens=500, gamma=4, sampling=SamplingParams(temperature=0))
    tokens, stats = run(ctx, ModelDrafter(draft_ctx, cfg.sampling), prompt, cfg)
    assert stats.finish_reason == "length"
    assert len(prompt) + len(tokens) == ctx.n_ctx + 1  # the last token is emitted, never evaluated


def test_prompt_longer_than_context_is_refused(target):
    ctx = Context(target, n_ctx=32, n_threads=2)
    prompt = target.tokenize("word " * 50, True)
    with pytest.raises(GenerationError, match=r"prompt has \d+ tokens but the context holds 32"):
        list(SpeculativeDecoder(ctx).generate(prompt, GenerationConfig()))


def test_stop_strings_and_stats(target, target_ctx, draft_ctx):
    prompt = target.tokenize("1, 2, 3, 4,", True)
    greedy = SamplingParams(temperature=0)
    full, _ = run(target_ctx, None, prompt, GenerationConfig(30, 0, greedy))
    text = target.detokenize(full)
    stop = text[5:8]
    decoder = SpeculativeDecoder(target_ctx, [(ModelDrafter(draft_ctx, greedy), CostTracker())])
    *pieces, finished = decoder.generate(prompt, GenerationConfig(30, 4, greedy, stop=(stop,)))
    assert "".join(p.text for p in pieces) == text[: text.index(stop)]
    s = finished.stats
    assert s.finish_reason == "stop"
    assert s.steps >= 1 and s.mean_accepted_length == 1 + s.accepted / s.steps
    assert sum(s.drafted_at) == s.drafted and sum(s.accepted_at) == s.accepted


def test_p_min_stops_doubtful_drafts_and_keeps_greedy_output(target, target_ctx, draft_ctx):
    # p-min 0.9: the draft stops where it is less than 90% sure of its guess (llama.cpp's p-min), so it
    # drafts fewer than gamma tokens on some steps, and accepts a larger share; the text is unchanged.
    prompt = target.tokenize("Here is a short story about a robot:", True)
    greedy = SamplingParams(temperature=0)
    baseline, _ = run(target_ctx, None, prompt, GenerationConfig(48, 0, greedy))
    free, free_stats = run(target_ctx, ModelDrafter(draft_ctx, greedy), prompt,
                           GenerationConfig(48, 4, greedy, p_min=0.0))
    cautious, stats = run(target_ctx, ModelDrafter(draft_ctx, greedy), prompt,
                          GenerationConfig(48, 4, greedy, p_min=0.9))
    assert free == cautious == baseline
    assert stats.drafted < 4 * stats.steps
    assert stats.alpha > free_stats.alpha
    # p-min auto (auto γ at T=0): each step's stop comes from the tracker's measured costs; the text
    # is unchanged.
    costs = eager_costs()
    for _ in range(2):
        sources = [(ModelDrafter(draft_ctx, greedy), costs)]
        auto, auto_stats = collect(SpeculativeDecoder(target_ctx, sources), prompt,
                                   GenerationConfig(48, None, greedy, gamma_max=4))
        assert auto == baseline
    assert sum(costs.conf_judged) > 0  # the confidences of judged drafts were recorded
