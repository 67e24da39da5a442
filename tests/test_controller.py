"""The controller on fakes (tests/fakes.py): exactness over many seeded samples, the verify batches and
rollbacks it makes, stop strings, p-min and a full context; then once end to end through real
llama.cpp on SmolLM2-135M (target) and a Q4_0 copy (draft), marked slow."""

from __future__ import annotations

import functools
import threading
from collections import Counter

import numpy as np
import pytest
from scipy.stats import chi2_contingency

import localspec.sampling as rule_mod
import localspec.speculative as speculative_mod
from localspec.config import GenerationConfig, GenerationError
from localspec.drafters import ModelDrafter, NGramDrafter
from localspec.llama import common_prefix_len
from localspec.tracker import CostTracker
from localspec.sampling import SamplingParams, distribution, sample
from localspec.session import LoadOptions, Pair, Reply
from localspec.speculative import Finished, Piece, SpeculativeDecoder

from fakes import EOS, FakeContext, FakeModel, RecordingContext, fake_contexts
from test_sampling import gof_pvalue

PURE_T1 = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
HOT = SamplingParams(temperature=1.6, top_k=0, top_p=1.0, min_p=0.0)
FILTERED = SamplingParams(temperature=1.0, top_k=20, top_p=0.9, min_p=0.02)
GREEDY = SamplingParams(temperature=0)
# A fixed γ with p-min 0 drafts all γ tokens every step (the planner gives a fixed γ llama.cpp's p-min
# 0.75 otherwise, and the fakes' draft is seldom that sure).
N = 4000  # seeds per side of a distribution test: twice the 2,000 the real-model tests could afford


def generate(target_ctx, sources, prompt, config) -> tuple[list[int], object]:
    """Run the controller; return the emitted token ids and the stats of the closing Finished."""
    *pieces, finished = SpeculativeDecoder(target_ctx, sources).generate(prompt, config)
    assert isinstance(finished, Finished) and all(isinstance(p, Piece) for p in pieces)
    return [p.token for p in pieces if p.token >= 0], finished.stats


def model_source(ctx, sampling=GREEDY):
    return [(ModelDrafter(ctx, sampling), CostTracker())]


def stream(pair: Pair, prompt, config) -> tuple[list[int], Reply]:
    """Run a Pair; return the emitted token ids and its Reply."""
    items = list(pair.stream(prompt, config))
    return [p.token for p in items[:-1] if p.token >= 0], items[-1]


@pytest.fixture
def contexts():
    """A fake target context and a correlated draft context."""
    return fake_contexts(n_ctx=256)


def tokenize(ctx, text):
    return ctx.model.tokenize(text)


# --- greedy: token identity ------------------------------------------------------------------------
def test_greedy_self_draft_accepts_every_draft():
    # The draft is the target itself, so at T=0 every guess is the target's own argmax.
    model = FakeModel()
    target, draft = FakeContext(model), FakeContext(model)
    _, stats = generate(target, model_source(draft), tokenize(target, "def fibonacci(n):"),
                        GenerationConfig(max_tokens=40, gamma=4, sampling=GREEDY, p_min=0.0))
    assert stats.drafted > 20 and stats.accepted == stats.drafted


@pytest.mark.parametrize("gamma", [1, 3, 6, 8])
def test_greedy_speculative_equals_target_only(contexts, gamma):
    target, draft = contexts
    prompt = tokenize(target, "Here is a short story about a robot:")
    baseline, base_stats = generate(target, [], prompt, GenerationConfig(64, 0, GREEDY))
    assert base_stats.drafted == 0 and len(baseline) == 64
    spec, stats = generate(target, model_source(draft), prompt, GenerationConfig(64, gamma, GREEDY, p_min=0.0))
    assert spec == baseline
    assert 0 < stats.accepted < stats.drafted and stats.steps < 64  # some drafts rejected, some kept


@pytest.mark.parametrize("drafter", ["model", "ngram", "hybrid"])
@pytest.mark.parametrize("gamma", [None, 4])
def test_every_drafter_kind_keeps_greedy_output(drafter, gamma):
    # Through a Pair, as the CLI and server run it: auto γ with p-min auto, or a fixed γ that always drafts.
    pair = Pair.from_contexts(*fake_contexts(n_ctx=512), LoadOptions(n_ctx=512))
    prompt = tokenize(pair.target_ctx, "red, blue, green, red, blue, green, red, blue, green, red,")
    baseline, _ = stream(pair, prompt, GenerationConfig(96, 0, GREEDY))
    drafted = Counter()
    for _ in range(2):  # the second run starts from measured costs and warm caches
        config = GenerationConfig(96, gamma, GREEDY, drafter=drafter, p_min=None if gamma is None else 0.0)
        spec, reply = stream(pair, prompt, config)
        assert spec == baseline and reply.finish_reason == "length"
        assert reply.stats.drafter == {"hybrid": "ngram+model"}.get(drafter, drafter)
        drafted.update({name: d for name, (d, _) in reply.stats.by_drafter.items()})
    if gamma is not None:  # under auto, who drafts follows live timings (a loaded machine may skip one)
        assert set(+drafted) == set(reply.stats.drafter.split("+"))  # each source drafted (+: counts above 0)


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_a_draft_longer_than_the_targets_batch_is_cut_to_fit_it(drafter):
    # A verify's rows come from one decode: llama.cpp splits a longer batch into chunks whose rows
    # overwrite each other, so γ 600 on a batch of 512 judged drafts by other tokens' rows (the output
    # parted from target-only at its first token). Each step now drafts no more than the batch holds.
    model = FakeModel()
    target = RecordingContext(model, n_ctx=512)
    target.n_batch = 16
    draft = FakeContext(model)  # the target itself: every guess taken, so drafts run to their cap
    prompt = tokenize(target, "red, blue, green, red, blue, green, red, blue, green, red,")
    baseline, _ = generate(FakeContext(model), [], prompt, GenerationConfig(96, 0, GREEDY))
    source = [(NGramDrafter(), CostTracker())] if drafter == "ngram" else model_source(draft)
    spec, stats = generate(target, source, prompt, GenerationConfig(96, 600, GREEDY, p_min=0.0))
    assert spec == baseline
    verifies = [len(call[2]) for call in target.calls if call[0] == "decode" and call[3] == "all"]
    assert max(verifies) == 16 and stats.accepted >= 15  # a full batch: the cap is the batch, not less


class ScriptedHandoff:
    """Hands a model draft over to `copy` tokens after its `after_tokens`-th guess: the target's own
    greedy continuation, except that the copy's token at index `wrong` (if any) is the draft's last
    guess instead. Deterministic given the context and the draft, as an n-gram lookup's copy is."""

    bucket = 1  # the n-gram tracker's bucket its copies are counted in

    def __init__(self, target_model, after_tokens: int, copy: int, wrong: int | None = None):
        self.model, self.after_tokens, self.copy, self.wrong = target_model, after_tokens, copy, wrong

    def after(self, context, draft) -> list[int]:
        if len(draft) != self.after_tokens:
            return []
        text, tail = list(context) + list(draft), []
        for i in range(self.copy):
            token = draft[-1] if i == self.wrong else int(self.model.logits_at(text).argmax())
            tail.append(token)
            text.append(token)
        return tail


class CopiesOnly(NGramDrafter):
    """An n-gram source that never offers a step of its own: its guesses come by handoffs only."""

    def offer(self, context, k: int) -> int:
        return 0


def scripted_handoffs(monkeypatch, handoff) -> None:
    """Every model step of every planner hands over as `handoff` says (fixed γ included)."""
    import localspec.planner as planner_mod

    monkeypatch.setattr(planner_mod.Planner, "_handoff", lambda self, choice: handoff)


def test_a_handoff_to_a_copy_keeps_greedy_output(contexts, monkeypatch):
    # The model drafts 2 tokens, then 4 copied ones continue its draft in the same verify; the third
    # copied token is wrong, so the target rejects it and the step emits its own token there.
    target, draft = contexts
    prompt = tokenize(target, "Here is a short story about a robot:")
    baseline, _ = generate(target, [], prompt, GenerationConfig(64, 0, GREEDY))
    scripted_handoffs(monkeypatch, ScriptedHandoff(target.model, after_tokens=2, copy=4, wrong=2))
    sources = [(CopiesOnly(), CostTracker()), (ModelDrafter(draft, GREEDY), CostTracker())]
    spec, stats = generate(target, sources, prompt, GenerationConfig(64, 3, GREEDY, drafter="hybrid", p_min=0.0))
    assert spec == baseline
    assert stats.handoffs > 0 and stats.by_drafter["ngram"][0] == 4 * stats.handoffs
    assert 0 < stats.by_drafter["ngram"][1] <= 2 * stats.handoffs  # two right copies before the wrong one


# --- the verify batches and rollbacks ----------------------------------------------------------------
def test_each_step_is_one_verify_batch_then_a_rollback_to_the_accepted():
    target, draft = fake_contexts(n_ctx=256, context=RecordingContext)
    prompt = tokenize(target, "The cat sat on the mat.")
    emitted, stats = generate(target, model_source(draft, PURE_T1), prompt, GenerationConfig(40, 4, PURE_T1, seed=5, p_min=0.0))
    assert target.calls[0] == ("decode", 0, prompt[:-1], "none")  # the prompt but its last token, no logits
    steps = []  # per step: [the verify batch, how many of it the cache kept]
    for call in target.calls[1:]:
        if call[0] == "decode":  # [pending, d_1 .. d_k] at the end of the cache, logits for every row
            _, start, batch, logits = call
            assert start == len(prompt) - 1 + sum(kept for _, kept in steps) and logits == "all"
            assert 1 <= len(batch) <= 5
            steps.append([batch, len(batch)])
        else:  # a rejection: cut back to pending + the accepted drafts
            batch, kept = steps[-1]
            assert 1 <= call[1] - start < kept
            steps[-1][1] = call[1] - start
    assert len(steps) == stats.steps and sum(kept - 1 for _, kept in steps) == stats.accepted < stats.drafted
    # What the cache kept, step after step, is the text: the prompt and every emitted token but the last.
    kept_tokens = [t for batch, kept in steps for t in batch[:kept]]
    assert prompt[:-1] + kept_tokens == target.tokens == (prompt + emitted)[:-1]


def test_the_draft_catches_up_on_the_context_before_each_proposal():
    target, draft = fake_contexts(n_ctx=256, context=RecordingContext)
    prompt = tokenize(target, "The cat sat on the mat.")
    emitted, _ = generate(target, model_source(draft, PURE_T1), prompt, GenerationConfig(30, 3, PURE_T1, seed=2, p_min=0.0))
    assert draft.calls[0] == ("decode", 0, prompt[:-1], "none")  # prefilled with the prompt
    assert all(c[3] == "last" for c in draft.calls[1:] if c[0] == "decode")  # it reads only its last row
    # Its cache is the text so far, plus at most γ - 1 guesses of its last proposal (the last guess is
    # never decoded).
    shared = common_prefix_len(draft.tokens, prompt + emitted)
    assert shared >= len(prompt) - 1 and len(draft.tokens) - shared <= 2


def test_a_draft_model_says_how_much_of_a_context_its_cache_holds():
    # What the planner prices a catch-up by where the draft did not take in this prompt: a chat's
    # earlier turns, still in its cache, are not decoded again (ModelDrafter._catch_up keeps them).
    _, draft = fake_contexts(n_ctx=256)
    drafter = ModelDrafter(draft, GREEDY)
    prompt = tokenize(draft, "The cat sat on the mat.")
    assert drafter.held(prompt) == 0
    drafter.prefill(prompt)
    later = prompt + tokenize(draft, " and the dog")
    assert drafter.held(later) == len(prompt) - 1  # its last token is decoded with the first guess
    assert drafter.held([t + 1 for t in later]) == 0


def test_the_drafters_first_catch_up_times_its_last_token_alone():
    # A catch-up's last row gives the first guess, so its batch is also the step's first draft decode.
    # The first catch-up decodes that token alone, once, so a one-token decode is timed apart from
    # the catch-up proper; later catch-ups are one batch again.
    _, draft = fake_contexts(n_ctx=256, context=RecordingContext)
    drafter = ModelDrafter(draft, GREEDY)
    prompt = tokenize(draft, "The cat sat on the mat.")
    drafter.prefill(prompt)
    context = prompt + tokenize(draft, " and")[-1:] + tokenize(draft, "ing so")  # plain steps since
    first = drafter.propose(context, 1, np.random.default_rng(0))
    batch, alone = draft.calls[-2:]
    assert batch == ("decode", len(prompt) - 1, context[len(prompt) - 1:-1], "none")
    assert alone == ("decode", len(context) - 1, context[-1:], "last")
    assert first.first_apart and first.catchup_s > 0
    assert first.ids == [int(np.argmax(draft.model.logits_at(context)))]  # the row of the whole context
    longer = context + tokenize(draft, " the cat")
    later = drafter.propose(longer, 1, np.random.default_rng(0))
    assert not later.first_apart and later.catchup_s > 0
    assert draft.calls[-1] == ("decode", len(context), longer[len(context):], "last")


def test_a_draft_says_how_many_rows_it_decoded_for_its_own_drafting():
    # Besides a row per guess, a step decodes the token the last verify emitted; after a draft
    # accepted whole, also its last guess, never decoded (Proposal.rows: what the draft's cost is
    # measured per, CostTracker.record).
    _, draft = fake_contexts(n_ctx=256, context=RecordingContext)
    drafter = ModelDrafter(draft, GREEDY)
    context = tokenize(draft, "The cat sat on the mat.")
    drafter.prefill(context)

    def rows_of(context, k):
        before = len(draft.calls)
        proposal = drafter.propose(context, k, np.random.default_rng(0))
        decoded = sum(len(c[2]) for c in draft.calls[before:] if c[0] == "decode")
        return proposal, decoded

    first, decoded = rows_of(context, 4)  # its cache one behind: the prompt's last token, then 3 guesses
    assert first.rows == decoded == 4
    context = context + first.ids + [40]  # accepted whole, and the target's token
    whole, decoded = rows_of(context, 3)
    assert whole.rows == decoded == 2 + 2  # the last guess and the target's token, then 2 guesses
    context = context + whole.ids[:1] + [41]  # the first accepted, then another token
    part, decoded = rows_of(context, 1)
    assert part.rows == decoded == 1


# --- sampled: the distribution is the target's --------------------------------------------------------
def first_two(target_ctx, sources, prompt, sampling, gamma, seeds, run=generate):
    """The first two emitted tokens (EOS as -1) for each seed, and how many tokens were drafted.
    sources: a function returning fresh (drafter, tracker) pairs per seed, or None for plain decoding;
    run: generate, or another function like it (emitted_tokens)."""
    out, drafted = [], 0
    for seed in seeds:
        cfg = GenerationConfig(max_tokens=2 if gamma == 0 else max(2, (gamma or 3) + 1), gamma=gamma, sampling=sampling, seed=seed,
                               p_min=0.0 if gamma else None)
        tokens, stats = run(target_ctx, sources() if sources else [], prompt, cfg)
        drafted += stats.drafted
        out.append(tuple((tokens + [-1, -1])[:2]))
    return out, drafted


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


@functools.cache
def target_only_first_two(text: str, sampling: SamplingParams, n: int = N) -> tuple[list[int], list[tuple]]:
    """Target-only first two tokens after text on the fakes (numpy rows), seeds 0..n-1: the prompt and
    the samples. A fixed function of its arguments, computed once per run for the tests here and in
    test_backend_sampling.py that compare with the same reference."""
    target, _ = fake_contexts()
    prompt = tokenize(target, text)
    return prompt, first_two(target, None, prompt, sampling, 0, range(n))[0]


@pytest.fixture(scope="module")
def plain_t1():
    """Target-only first two tokens over N seeds at T=1: the reference every test below compares with."""
    prompt, samples = target_only_first_two("My favourite colour is", PURE_T1)
    assert len(set(samples)) > 100  # a spread-out distribution, not a near-certain continuation
    return prompt, samples


def eager_costs() -> CostTracker:
    """A cost tracker that has seen a cheap draft and a flat verify: auto mode drafts 1..8 tokens,
    changing its choice as the run's own acceptance comes in."""
    t = CostTracker()
    for k in (1, 1, 1, 3, 5, 9):  # three plain steps: what the planner measures before it drafts
        t.record(k - 1, 0 if k == 1 else 1, draft_s=0.0005 * (k - 1), verify_s=0.010, overhead_s=0.0)
    return t


@pytest.mark.parametrize("sampling, draft_sampling", [
    # A draft sampled hotter than the target: q far from p, many rejections and residual samples.
    (PURE_T1, HOT),
    # Filtered p and q (top-k, top-p, min-p as llama.cpp applies them).
    (FILTERED, FILTERED),
], ids=["T1-hot-draft", "T1-filtered"])
def test_speculative_sampling_matches_target_only(plain_t1, sampling, draft_sampling):
    # Joint distribution of the first two tokens over N seeds each, speculative (γ 2) vs target-only:
    # the p/q rule must leave the target's distribution unchanged.
    target, draft = fake_contexts()
    prompt, plain = plain_t1
    if sampling is not PURE_T1:
        plain, _ = first_two(target, None, prompt, sampling, 0, range(N))
    spec, drafted = first_two(target, lambda: model_source(draft, draft_sampling), prompt, sampling, 2,
                              range(N, 2 * N))
    assert drafted >= 2 * N  # every run drafted on its first step
    assert same_distribution_pvalue(plain, spec) > 1e-3


def trusted_costs(unsure: tuple[float, ...] = (0.25, 0.35)) -> CostTracker:
    """A cost tracker whose p-min auto is trusted (a two-row verify measured three times) and has
    learnt that the draft's guesses at the confidences `unsure` are seldom taken and its sure ones
    mostly are: its stop rule ends drafts, and declines first guesses, at the unsure ones."""
    t = CostTracker()
    for _ in range(3):  # three plain steps
        t.record(0, 0, draft_s=0.0, verify_s=0.010, overhead_s=0.0)
    for i in range(48):  # one-token drafts: the unsure ones rejected, the sure ones taken
        sure = i % 2
        t.record(1, sure, 0.0005, 0.016, 0.0, confidences=(0.95 if sure else unsure[i // 2 % len(unsure)],), cap=4, rows=1)
    for k in (3, 4, 5) * 3:  # every wider verify a step may take measured: nothing left to probe
        t.record(k - 1, k - 1, 0.0005 * (k - 1), 0.017, 0.0, confidences=(0.95,) * (k - 1), cap=4, rows=k - 1)
    return t


@pytest.mark.parametrize("unsure", [(0.25, 0.35), (0.55,)], ids=["stops-vary", "first-guess-declined"])
def test_auto_gamma_and_auto_p_min_keep_the_distribution(plain_t1, unsure):
    # Auto mode only changes how many tokens are drafted each step, never the rule; so does p-min
    # auto, which stops a draft (its first guess too, once trusted) from the draft's confidence and
    # past steps' costs, never the target's: the decision is made before the draft samples the guess.
    # At T > 0 the planner takes p-min auto with auto γ, as at T=0. Where the fakes' draft is unsure
    # at 0.25-0.35, drafts end at different lengths from seed to seed, a first guess declined now and
    # then; unsure at 0.55, the first step's guess (always that sure, after the same prompt) is
    # declined in every seed, and the next step drafts.
    target, draft = fake_contexts()
    prompt, plain = plain_t1
    trackers = []

    def sources():
        trackers.append(trusted_costs(unsure))
        return [(ModelDrafter(draft, HOT), trackers[-1])]
    spec, drafted = first_two(target, sources, prompt, PURE_T1, None, range(N, 2 * N))
    base = trusted_costs(unsure)
    assert base.stop_trusted()
    declined = sum(t.stops.declined - base.stops.declined for t in trackers)
    drafting_steps = {t.proposals - base.proposals for t in trackers}
    assert drafted > N and declined > N // 20 and len(drafting_steps) > 1
    assert same_distribution_pvalue(plain, spec) > 1e-3


def test_ngram_proposals_keep_the_distribution():
    # One-hot q from prompt lookup: accept with probability p(x), else sample p without x.
    target, _ = fake_contexts()
    prompt = tokenize(target, "red, blue, green, red, blue, green, red, blue, green, red,")
    plain, _ = first_two(target, None, prompt, PURE_T1, 0, range(N))
    spec, drafted = first_two(target, lambda: [(NGramDrafter(), CostTracker())], prompt, PURE_T1, 3,
                              range(N, 2 * N))
    assert drafted > N
    assert same_distribution_pvalue(plain, spec) > 1e-3


@pytest.mark.parametrize("break_copy_q", [False, True], ids=["exact", "power-wrong-copy-q"])
def test_a_handoff_to_a_copy_keeps_the_distribution(plain_t1, monkeypatch, break_copy_q):
    # A sampled draft token, then a copied one (the target's argmax after it, as a lookup's copy may
    # be): one-hot q, accepted with probability p(x). Power: the same test must reject a copy given the
    # wrong q (uniform: p(x)/q(x) > 1, always accepted), the mistake a mixed chain invites.
    import localspec.drafters as drafters_mod
    from localspec.sampling import Dist

    target, draft = fake_contexts()
    prompt, plain = plain_t1
    scripted_handoffs(monkeypatch, ScriptedHandoff(target.model, after_tokens=1, copy=1))
    if break_copy_q:
        uniform = Dist(np.arange(target.model.n_vocab), np.full(target.model.n_vocab, 1 / target.model.n_vocab))
        monkeypatch.setattr(drafters_mod, "one_hot", lambda token: uniform)
    sources = lambda: [(CopiesOnly(), CostTracker()), (ModelDrafter(draft, HOT), CostTracker())]  # noqa: E731
    spec, drafted = first_two(target, sources, prompt, PURE_T1, 1, range(N, 2 * N))
    assert drafted >= 2 * N  # every first step drafted a token and copied one
    if break_copy_q:
        assert same_distribution_pvalue(plain, spec) < 1e-6
    else:
        assert same_distribution_pvalue(plain, spec) > 1e-3


def broken_accept_all(ids, q, p, rng):
    """Accepts every draft and repeats the last as the bonus: outputs the draft's distribution."""
    return list(ids) + [ids[-1]], len(ids)


@pytest.mark.parametrize("break_rule", ["accept-all", "resample-from-p"])
def test_distribution_test_has_power(plain_t1, monkeypatch, break_rule):
    # The same test must reject a broken rule, or the tests above prove nothing: one that accepts
    # every draft (outputs the hotter draft's distribution), and a subtle one that, after a rejection,
    # samples p again instead of the residual norm(max(0, p - q)).
    import localspec.speculative as spec_mod

    target, draft = fake_contexts()
    prompt, plain = plain_t1
    if break_rule == "accept-all":
        monkeypatch.setattr(spec_mod, "accept_drafts", broken_accept_all)
    else:
        monkeypatch.setattr(rule_mod, "_sample_residual", lambda p, q, rng: sample(p, rng))
    broken, _ = first_two(target, lambda: model_source(draft, HOT), prompt, PURE_T1, 2, range(N, 2 * N))
    assert same_distribution_pvalue(plain, broken) < 1e-6


def test_seeded_runs_are_reproducible(contexts):
    target, draft = contexts
    prompt = tokenize(target, "My favourite colour is")
    config = GenerationConfig(max_tokens=24, gamma=4, sampling=PURE_T1, seed=123)
    a, _ = generate(target, model_source(draft, PURE_T1), prompt, config)
    b, _ = generate(target, model_source(draft, PURE_T1), prompt, config)
    c, _ = generate(target, model_source(draft, PURE_T1), prompt, GenerationConfig(24, 4, PURE_T1, seed=124))
    assert a == b and len(a) == 24 and c != a


# --- ends: length, context, stop strings, EOS --------------------------------------------------------
def test_full_context_finishes_with_length():
    # A context of 40 tokens fills up long before max_tokens: a clean finish, never a crash.
    target, draft = fake_contexts(n_ctx=40)
    prompt = tokenize(target, "Count: 1 2 3 4 5 6 7 8")
    tokens, stats = generate(target, model_source(draft), prompt, GenerationConfig(500, 4, GREEDY, p_min=0.0))
    assert stats.finish_reason == "length"
    assert len(prompt) + len(tokens) == target.n_ctx + 1  # the last token is emitted, never evaluated


def test_prompt_longer_than_context_is_refused():
    target, _ = fake_contexts(n_ctx=32)
    prompt = tokenize(target, "word " * 10)
    with pytest.raises(GenerationError, match=r"\d+ tokens but the context holds 32"):
        generate(target, [], prompt, GenerationConfig())
    with pytest.raises(GenerationError, match="empty"):
        generate(target, [], [], GenerationConfig())


def test_eos_ends_the_generation_and_is_not_printed():
    model = FakeModel(reply_len=10)
    target = FakeContext(model)
    prompt = model.tokenize("Hi")  # BOS, then 2 tokens of a reply
    tokens, stats = generate(target, model_source(FakeContext(model)), prompt, GenerationConfig(50, 4, GREEDY, p_min=0.0))
    assert len(tokens) == 10 - 2 and EOS not in tokens and stats.finish_reason == "stop"


def test_the_stats_count_each_drafters_exploratory_steps(contexts):
    # A bench run had a draft model alone take 74 steps on prose where other runs took 11, and
    # whether they were probes or known choices was not recorded. A new draft's first step is the
    # probe its entry pays for (Planner._entry_paid); a fixed γ never explores.
    target, draft = contexts
    prompt = tokenize(target, "red, blue, green, red, blue, green,")
    _, auto = generate(target, model_source(draft), prompt, GenerationConfig(40, None, GREEDY))
    assert 1 <= auto.probes["model"] <= auto.steps
    assert auto.to_dict()["probe_steps"] == auto.probes
    _, fixed = generate(target, model_source(draft), prompt, GenerationConfig(40, 4, GREEDY, p_min=0.0))
    assert fixed.probes == {} and fixed.by_drafter["model"][0] > 0


def test_the_stats_give_what_exploring_cost_as_the_budget_charged_it(contexts, monkeypatch):
    # The budget bounds what learning may cost; the stats say what it did cost, per drafter, in
    # the generation's seconds: what --stats, --json and the server's `speculative` block show.
    planners = []

    class Recorded(speculative_mod.Planner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            planners.append(self)

    monkeypatch.setattr(speculative_mod, "Planner", Recorded)
    target, draft = contexts
    prompt = tokenize(target, "red, blue, green, red, blue, green,")
    sources = [(NGramDrafter(), CostTracker()), *model_source(draft)]
    _, stats = generate(target, sources, prompt, GenerationConfig(40, None, GREEDY))
    spent = planners[-1].budget.spent
    assert spent and stats.exploration_s == {sources[i][0].name: s for i, s in spent.items()}
    assert set(stats.exploration_s) <= {"ngram", "model"} and set(stats.probes) <= set(stats.exploration_s)
    assert stats.to_dict()["exploration_s"] == stats.exploration_s
    line = next(x for x in stats.summary().splitlines() if x.startswith("exploring: "))
    for name, seconds in stats.exploration_s.items():
        n = stats.probes.get(name, 0)
        assert f"{name} {n} step{'' if n == 1 else 's'}, " in line and f"{abs(seconds):.3f} s" in line
    _, fixed = generate(target, model_source(draft), prompt, GenerationConfig(40, 4, GREEDY, p_min=0.0))
    assert fixed.exploration_s == {} and "exploring" not in fixed.summary()


def test_stop_strings_and_stats(contexts):
    target, draft = contexts
    prompt = tokenize(target, "1, 2, 3, 4,")
    full, _ = generate(target, [], prompt, GenerationConfig(30, 0, GREEDY))
    text = target.model.detokenize(full)
    stop = text[5:8]
    *pieces, (stats,) = SpeculativeDecoder(target, model_source(draft)).generate(
        prompt, GenerationConfig(30, 4, GREEDY, stop=(stop,), p_min=0.0))
    assert "".join(p.text for p in pieces) == text[: text.index(stop)]
    assert stats.finish_reason == "stop"
    assert stats.steps >= 1 and stats.mean_accepted_length == 1 + stats.accepted / stats.steps
    assert sum(stats.drafted_at) == stats.drafted and sum(stats.accepted_at) == stats.accepted


def test_p_min_stops_doubtful_drafts_and_keeps_greedy_output():
    # p-min 0.5: the draft stops where it is less than 50% sure of its guess (llama.cpp's p-min), so it
    # drafts fewer than γ tokens on some steps, and accepts a larger share; the text is unchanged.
    pair = Pair.from_contexts(*fake_contexts(n_ctx=256))
    prompt = tokenize(pair.target_ctx, "Here is a short story about a robot:")
    baseline, _ = stream(pair, prompt, GenerationConfig(48, 0, GREEDY))
    free, free_reply = stream(pair, prompt, GenerationConfig(48, 4, GREEDY, drafter="model", p_min=0.0))
    cautious, reply = stream(pair, prompt, GenerationConfig(48, 4, GREEDY, drafter="model", p_min=0.5))
    assert free == cautious == baseline
    assert free_reply.stats.drafted_at[3] >= free_reply.stats.steps - 3  # all 4, but where -n cut the last steps
    assert reply.stats.drafted < 4 * reply.stats.steps
    assert reply.stats.alpha > free_reply.stats.alpha
    # p-min auto (with auto γ): each step's stop comes from measured costs; the text is unchanged.
    for _ in range(2):
        auto, _ = stream(pair, prompt, GenerationConfig(48, None, GREEDY, drafter="model", p_min=None))
        assert auto == baseline


# --- once through real llama.cpp -----------------------------------------------------------------
# Two threads, one a core here, for a suite run alone. Beside other jobs on a 2-core
# machine llama.cpp's two threads wait on each other (48 tokens took 168 s against 3 s with one).
@pytest.fixture(scope="module")
def smol(smol_path, smol_q4_0):
    """SmolLM2-135M as target and its Q4_0 copy as draft, loaded once for the module."""
    from localspec.context import Context
    from localspec.llama import Model

    target = Model(smol_path)
    return target, Context(target, n_ctx=256, n_threads=2), Context(Model(smol_q4_0), n_ctx=256, n_threads=2)


@pytest.mark.slow
def test_real_greedy_speculative_equals_target_only(smol):
    # Token identity with plain decoding on a real model, for several draft lengths.
    model, target_ctx, draft_ctx = smol
    prompt = model.tokenize("Here is a short story about a robot:", True)
    baseline, base_stats = generate(target_ctx, [], prompt, GenerationConfig(48, 0, GREEDY))
    assert base_stats.drafted == 0 and len(baseline) == 48
    for gamma in (1, 3, 6):
        spec, stats = generate(target_ctx, model_source(draft_ctx), prompt, GenerationConfig(48, gamma, GREEDY, p_min=0.0))
        assert spec == baseline, f"gamma={gamma}"
        assert stats.drafted > 0 and stats.steps < 48


@pytest.mark.slow
def test_real_sampled_self_draft_is_accepted_nearly_always(smol):
    # The p/q rule over real llama.cpp rows: a draft that is the target, sampled as the target, has
    # q = p up to batch-vs-single numerics, so min(1, p/q) is about 1 at every draft. A verify row read
    # one position off, or a draft row that is not the one its token was drawn from, rejects most
    # drafts. (The chi-square tests of the distribution run on fakes above, 4,000 seeds a side.)
    model, target_ctx, _ = smol
    self_draft = type(target_ctx)(model, n_ctx=256, n_threads=1)
    prompt = model.tokenize("My favourite colour is", True)
    _, stats = generate(target_ctx, model_source(self_draft, PURE_T1), prompt,
                             GenerationConfig(48, 4, PURE_T1, seed=3, p_min=0.0))
    assert stats.drafted >= 8 and stats.alpha > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("gamma", [2, None], ids=["gamma-2", "auto-p-min-auto"])
def test_real_sampling_matches_target_only_through_llama_cpp(smol, monkeypatch, gamma):
    # The same test as on the fakes, end to end through llama.cpp's batched verify rows and rollback:
    # SmolLM2 target, its Q4_0 copy drafting hotter (q far from p), 1,000 seeds, against target-only's
    # exact probabilities of the first two tokens, read from the target's own rows (the power checks
    # run on the fakes above, with 4,000 seeds a side). γ 2 drafts every step; auto γ with p-min
    # auto (trusted costs) stops drafts by the draft's confidence, the first guess too.
    model, target_ctx, draft_ctx = smol
    prompt = model.tokenize("My favourite colour is", True)
    cell, expected = exact_first_two(target_ctx, prompt, PURE_T1)
    costs = CostTracker if gamma else trusted_costs
    spec, drafted = first_two(target_ctx, lambda: [(ModelDrafter(draft_ctx, HOT), costs())], prompt, PURE_T1, gamma,
                              range(1000), emitted_tokens(monkeypatch))
    assert len(set(spec)) > 20 and drafted >= (2000 if gamma else 500)
    assert gof_pvalue(np.array([cell(s) for s in spec]), expected) > 1e-3


def emitted_tokens(monkeypatch):
    """A generate() that returns the tokens as the controller emits them, up to the first end of
    generation: a token whose text is held back (part of a character) has no piece of its own, and
    the next piece would stand for both. The run is cancelled once two tokens are out (first_two
    reads no more): the steps after them draw nothing the first two depend on, and cost a decode or
    two a seed through llama.cpp."""
    emitted: list[int] = []
    done = threading.Event()
    emit = speculative_mod._Run._emit

    def recording(self, tokens, out, n_accepted, rows):
        emitted.extend(out)
        if len(emitted) >= 2:
            done.set()  # _emit ends the run after this step's first token
        return emit(self, tokens, out, n_accepted, rows)

    monkeypatch.setattr(speculative_mod._Run, "_emit", recording)

    def run(target_ctx, sources, prompt, config):
        emitted.clear()
        done.clear()
        *pieces, finished = SpeculativeDecoder(target_ctx, sources).generate(prompt, config, cancel=done)
        assert isinstance(finished, Finished) and all(isinstance(p, Piece) for p in pieces)
        ends = [i for i, t in enumerate(emitted) if target_ctx.model.is_eog(t)]
        return emitted[: ends[0] if ends else len(emitted)], finished.stats
    return run


def exact_first_two(ctx, prompt, params: SamplingParams, top: int = 50):
    """Target-only's probabilities of its first two tokens after prompt, read from ctx's rows as
    plain decoding reads them (one token at a time; every end-of-generation token as -1, which ends
    the reply): a cell for each pair among the `top` likeliest first tokens and the `top` likeliest
    second tokens after each, one for every other second token after each of those first tokens,
    and one for every other first token. Returns (the cell of a sampled pair, the cells' probabilities)."""
    ends = np.array([ctx.model.is_eog(t) for t in range(ctx.model.n_vocab)])  # [V]: asked once, not per row

    def likeliest_of_row() -> list[tuple[int, float]]:
        """The row's `top` likeliest tokens, every end-of-generation token summed as -1 (placed where
        the first of them stands), sorted by probability, ties in the row's order."""
        d = distribution(ctx.logits(-1), params)
        end = ends[d.ids]
        keys, probs = d.ids[~end], d.probs[~end]
        if end.any():
            at = int(np.argmax(end))  # the first end token: no other end token comes before it
            total = 0.0
            for pr in d.probs[end].tolist():  # added in the row's order (not sum(): 3.12's compensates)
                total += pr
            keys, probs = np.insert(keys, at, -1), np.insert(probs, at, total)
        order = np.argsort(-probs, kind="stable")[:top]
        return list(zip(keys[order].tolist(), probs[order].tolist()))

    ctx.truncate(0)
    ctx.decode(prompt[:-1], logits="none")
    ctx.decode(prompt[-1:], logits="last")
    cells: dict[tuple, int] = {}
    probs: list[float] = []
    for t1, p1 in likeliest_of_row():
        if t1 == -1:  # the reply ends
            cells[(-1, -1)] = len(probs)
            probs.append(p1)
            continue
        ctx.truncate(len(prompt))
        ctx.decode([t1], logits="last")
        seconds = likeliest_of_row()
        for t2, p2 in seconds:
            cells[(t1, t2)] = len(probs)
            probs.append(p1 * p2)
        cells[(t1, None)] = len(probs)
        probs.append(p1 * max(0.0, 1.0 - sum(p for _, p in seconds)))
    other = len(probs)
    probs.append(max(0.0, 1.0 - sum(probs)))

    def cell(pair: tuple[int, int]) -> int:
        return cells.get(pair, cells.get((pair[0], None), other))
    return cell, np.array(probs)


def test_a_prompt_that_fills_the_context_exactly_says_none_is_left_to_generate():
    from localspec.config import ContextFull, check_fits

    with pytest.raises(ContextFull, match=r"has 32 tokens and the context holds 32, none left to generate; raise"):
        check_fits(32, 32)
    with pytest.raises(ContextFull, match=r"has 33 tokens but the context holds 32; raise"):
        check_fits(33, 32)
    check_fits(31, 32)


def test_a_full_context_names_load_options_to_the_library_and_ctx_to_the_cli():
    # a Python caller was told to "raise --ctx", a flag it does not have: it loads the Pair with LoadOptions
    from fakes import fake_pair
    from localspec.config import ContextFull

    pair = fake_pair(n_ctx=32, draft=False)
    prompt = pair.prompt_tokens("word " * 10, chat=False)
    with pytest.raises(ContextFull) as e:
        list(pair.stream(prompt, GenerationConfig()))
    full = f"the prompt has {len(prompt)} tokens but the context holds 32"
    assert str(e.value) == f"{full}; raise n_ctx in the Pair's LoadOptions or shorten the prompt"
    from localspec.cli.errors import said
    assert said(e.value) == f"{full}; raise --ctx or shorten the prompt"


def test_a_full_context_is_worded_by_the_one_step_that_words_every_template():
    # ContextFull filled its template with LIBRARY_NAMES itself, a second copy of Worded.naming's step;
    # now both hand the template to Worded, which fills it (a message of None: the template's words)
    from localspec.cli.errors import said
    from localspec.config import ContextFull
    from localspec.server.types import SERVER_NAMES

    fix = "nothing was dropped: save it ({save}), then {reset}, or {restart}"
    full = ContextFull("the conversation has 40 tokens but the context holds 32", 40, 32, fix=fix)
    assert str(full) == ("the conversation has 40 tokens but the context holds 32; nothing was dropped: save it "
                         "(Chat.save(path)), then Chat.reset(), or raise n_ctx in the Pair's LoadOptions")
    assert said(full) == ("the conversation has 40 tokens but the context holds 32; nothing was dropped: save it "
                          "(/save FILE), then /reset, or restart with a larger --ctx")
    prompt = ContextFull("the prompt has 40 tokens but the context holds 32", 40, 32, fix="raise {n_ctx}")
    assert (str(prompt), prompt.worded(SERVER_NAMES)) == ("the prompt has 40 tokens but the context holds 32; raise "
                                                           "n_ctx in the Pair's LoadOptions", "the prompt has 40 "
                                                           "tokens but the context holds 32; raise --ctx")
    template = "the prompt has {{3}} tokens; {restart}"
    assert str(GenerationError(None, template=template)) == str(GenerationError.naming(template)) == \
        "the prompt has {3} tokens; raise n_ctx in the Pair's LoadOptions"


@pytest.mark.parametrize("drafter", ["model", "hybrid"])
def test_a_drafter_the_pair_cannot_run_names_the_pairs_setting_to_the_library_and_flags_to_the_cli(drafter):
    # a Python caller was told "give --draft, or use --drafter ngram": flags it does not have
    from fakes import fake_pair
    from localspec.cli.errors import said

    pair = fake_pair(draft=False)
    prompt = pair.prompt_tokens("hi", chat=False)
    with pytest.raises(GenerationError) as e:
        list(pair.stream(prompt, GenerationConfig(drafter=drafter)))
    assert str(e.value) == (f"drafter={drafter!r} needs a draft model; give the Pair a draft model, "
                            "or use drafter='ngram'")
    assert e.value.field == "drafter"
    assert said(e.value) == f"--drafter {drafter} needs a draft model; give --draft, or use --drafter ngram"
    # the server's: its fix was " and this server has none; ..." (each shell's fix began with its own joiner)
    from localspec.server.types import SERVER_NAMES
    assert e.value.worded(SERVER_NAMES) == (f"drafter {drafter!r} needs a draft model; this server was started "
                                            "without one: use drafter 'ngram', or restart it with --draft")
