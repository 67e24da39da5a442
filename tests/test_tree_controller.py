"""Token trees in the controller on fakes (tests/fakes.py): T=0 identity with target-only, T>0
exactness by chi-square (with a power check), the planner's tree decisions; then on SmolLM2 through
llama.cpp's multi-sequence cache (slow)."""

from __future__ import annotations

import numpy as np
import pytest

import localspec.planner as planner_mod
import localspec.rule_tree as rule_tree
from localspec.config import GenerationConfig
from localspec.timings import VerifyCurve
from localspec.drafters import ModelDrafter, NGramDrafter
from localspec.planner import Planner
from localspec.planning.handoff import Handoff
from localspec.planning.plans import Plan
from localspec.tracker import CostTracker
from localspec.sampling import SamplingParams, distribution
from localspec.speculative import SpeculativeDecoder
from localspec.treeplan import BranchRule, SiblingAcceptance, branch_rule, tree_outcome

from fakes import FakeModel, fake_contexts
from test_sampling import gof_pvalue

GREEDY = SamplingParams(temperature=0)
TOP4 = SamplingParams(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)  # 16 cells for two tokens
PROMPT = "Here is a short story about a robot:"


class AlwaysBranch:
    """A branch rule that puts the next-best token beside every chain token the context allows."""

    def __init__(self, left: int):
        self.left = left

    def siblings(self, i: int, confidence: float) -> int:
        if self.left <= 0:
            return 0
        self.left -= 1
        return 1


@pytest.fixture
def always_branch(monkeypatch):
    """The planner's tree shape replaced by AlwaysBranch (trees wherever the target context allows)."""
    monkeypatch.setattr(planner_mod, "branch_rule", lambda *args: AlwaysBranch(args[-1] - 1) if args[-1] > 1 else None)


class EagerTracker(CostTracker):
    """A tracker that always drafts 3 under auto γ (the fakes' timings would choose plain decoding)."""

    def plan(self, gamma_max: int, bucket: int | None = None, switch: bool = False,
             cautious: bool = False, finish: bool = False) -> tuple[int, float]:
        return min(3, gamma_max), float("inf")

    def may_pay(self, cap: int) -> bool:
        return True  # so the draft takes in every prompt: no catch-up to price


def run(target, sources, prompt, config):
    *pieces, finished = SpeculativeDecoder(target, sources).generate(prompt, config)
    return [p.token for p in pieces if p.token >= 0], finished.stats


# --- pieces ------------------------------------------------------------------------------------------
def test_tree_outcome_counts_judged_siblings():
    # Chain 0 -> 2 -> 4 with siblings 1 (beside 0) and 3 (beside 2).
    parents = [-1, -1, 0, 0, 2]
    assert tree_outcome(parents, [0, 3]) == ([0, 2, 4], 1, [(3, True)])    # 2 rejected, sibling 3 taken
    assert tree_outcome(parents, [0]) == ([0, 2, 4], 1, [(3, False)])      # 2 and 3 rejected
    assert tree_outcome(parents, [1]) == ([0, 2, 4], 0, [(1, True)])       # 0 rejected, 1 taken
    assert tree_outcome(parents, [0, 2, 4]) == ([0, 2, 4], 3, [])          # the chain: no sibling judged


def test_branch_rule_adds_siblings_where_they_pay():
    flat = VerifyCurve({1: 0.010, 8: 0.010})  # a wider verify costs nothing more
    steep = VerifyCurve({1: 0.010, 8: 0.080})  # each row costs as much as a token is worth
    sure, unsure = (lambda c: 0.99), (lambda c: 0.3)
    sib = SiblingAcceptance()
    rule = BranchRule(unsure, sib.rate, 50.0, flat.seconds, 4, 3)
    assert [rule.siblings(i, 0.3) for i in range(5)] == [1, 1, 1, 0, 0]  # three sequences, then none left
    rule = BranchRule(unsure, sib.rate, 50.0, steep.seconds, 4, 3)
    assert rule.siblings(0, 0.3) == 0
    rule = BranchRule(sure, sib.rate, 100.0, VerifyCurve({1: 0.010, 8: 0.012}).seconds, 4, 3)
    assert rule.siblings(0, 0.99) == 0  # a sure draft: the sibling's tokens are worth less than its row
    assert branch_rule(unsure, sib, 50.0, flat.seconds, 4, max_branches=1) is None  # a chains-only context


def test_sibling_acceptance_learns():
    sib = SiblingAcceptance()
    assert sib.rate(0.3) == 0.5
    for _ in range(20):
        sib.record(0.3, False)
    assert sib.rate(0.3) < 0.1 and sib.rate(0.8) == 0.5


# --- T = 0 -------------------------------------------------------------------------------------------
def test_greedy_tree_equals_target_only(always_branch):
    target, draft = fake_contexts(n_ctx=256, noise=1.0, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    baseline, _ = run(target, [], prompt, GenerationConfig(64, 0, GREEDY))
    sources = [(ModelDrafter(draft, GREEDY), EagerTracker())]
    spec, stats = run(target, sources, prompt, GenerationConfig(64, None, GREEDY, p_min=0.0))
    assert spec == baseline
    assert stats.tree_steps > 5 and sum(sources[0][1].siblings.accepted) > 0  # siblings were taken


def test_greedy_tree_logprobs_are_read_from_the_accepted_rows(always_branch):
    target, draft = fake_contexts(n_ctx=256, noise=1.0, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    config = GenerationConfig(32, None, GREEDY, p_min=0.0, logprobs=1)
    *pieces, _ = SpeculativeDecoder(target, [(ModelDrafter(draft, GREEDY), EagerTracker())]).generate(prompt, config)
    context = list(prompt)
    for piece in pieces:  # the target's argmax has the top log-probability at its own position
        row = target.model.logits_at(context)
        assert piece.token == int(np.argmax(row)) and piece.top[0][0] == piece.token
        context.append(piece.token)


def test_without_trees_the_planner_keeps_chains(always_branch):
    # A target context of one sequence: the planner never asks for a tree.
    target, draft = fake_contexts(n_ctx=256, noise=1.0)
    _, stats = run(target, [(ModelDrafter(draft, GREEDY), EagerTracker())], target.model.tokenize(PROMPT),
                   GenerationConfig(48, None, GREEDY, p_min=0.0))
    assert stats.tree_steps == 0


def test_trees_off_keeps_chains_on_a_tree_context(always_branch):
    # config.trees=False (bench.py's chain scenario) on a context that verifies trees; same text.
    target, draft = fake_contexts(n_ctx=256, noise=1.0, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    sources = lambda: [(ModelDrafter(draft, GREEDY), EagerTracker())]  # noqa: E731
    tree, tree_stats = run(target, sources(), prompt, GenerationConfig(48, None, GREEDY, p_min=0.0))
    chain, chain_stats = run(target, sources(), prompt, GenerationConfig(48, None, GREEDY, p_min=0.0, trees=False))
    assert chain == tree and tree_stats.tree_steps > 0 and chain_stats.tree_steps == 0


# --- T > 0 -------------------------------------------------------------------------------------------
def first_two(n: int, seed0: int) -> tuple[np.ndarray, int]:
    """The first two tokens of n seeded generations with trees (codes t1 * V + t2), and tree steps."""
    target, draft = fake_contexts(n_ctx=64, noise=0.8, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    tracker = EagerTracker()  # kept across runs, as a Pair does: costs measured, so every step may branch
    codes, trees = [], 0
    for seed in range(seed0, seed0 + n):
        config = GenerationConfig(2, None, TOP4, seed=seed, p_min=0.0, gamma_max=3)
        tokens, stats = run(target, [(ModelDrafter(draft, TOP4), tracker)], prompt, config)
        codes.append(tokens[0] * target.model.n_vocab + tokens[1])
        trees += stats.tree_steps
    return np.array(codes), trees


def expected_two(n_vocab: int) -> np.ndarray:
    """p(t1) p(t2 | t1) of target-only sampling, dense over n_vocab ** 2 cells."""
    target, _ = fake_contexts(n_ctx=64, draft=False)
    prompt = target.model.tokenize(PROMPT)
    out = np.zeros(n_vocab * n_vocab)
    p1 = distribution(target.model.logits_at(prompt), TOP4)
    for t1, pr1 in zip(p1.ids, p1.probs):
        p2 = distribution(target.model.logits_at([*prompt, int(t1)]), TOP4)
        out[int(t1) * n_vocab + p2.ids] = pr1 * p2.probs
    return out


def test_sampled_tree_first_two_tokens_follow_the_target(always_branch):
    codes, trees = first_two(10_000, 0)
    assert trees > 5000  # most generations verified a tree
    assert gof_pvalue(codes, expected_two(114)) > 1e-3


def test_power_list_position_residual_fails(always_branch, monkeypatch):
    # llama.cpp examples/speculative's residual (by list position) in the same test: caught.
    from test_rule_tree import residual_by_list_position
    monkeypatch.setattr(rule_tree, "residual", residual_by_list_position)
    codes, _ = first_two(4000, 0)
    assert gof_pvalue(codes, expected_two(114)) < 1e-3


# --- SmolLM2 through llama.cpp (slow) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def smol(smol_f16, smol_q4_0):
    """SmolLM2 F16 as the target (a tree-verifying context) and its Q4_0 copy as the draft."""
    from localspec.context import Context
    from localspec.llama import Model

    target = Context(Model(smol_f16), n_ctx=256, n_threads=2, n_seq_max=4)
    draft = Context(Model(smol_q4_0), n_ctx=256, n_threads=2)
    return target, draft


@pytest.mark.parametrize("text", ["def fibonacci(n):", "The three primary colours are"])
def test_smol_greedy_tree_equals_target_only(always_branch, smol, text):
    target, draft = smol
    prompt = target.model.tokenize(text)
    baseline, _ = run(target, [], prompt, GenerationConfig(40, 0, GREEDY))
    tracker = EagerTracker()
    spec, stats = run(target, [(ModelDrafter(draft, GREEDY), tracker)], prompt,
                      GenerationConfig(40, None, GREEDY, p_min=0.0))
    assert spec == baseline
    assert stats.tree_steps > 3 and sum(tracker.siblings.judged) > 0


SMOL_T = SamplingParams(temperature=1.5, top_k=3, top_p=1.0, min_p=0.0)  # at most 9 cells for two tokens


def test_smol_sampled_tree_first_two_tokens_follow_the_target(always_branch, smol):
    # 600 seeded generations of two tokens with trees on llama.cpp against target-only's exact
    # probabilities, read from the target's own logits.
    target, draft = smol
    tracker = EagerTracker()
    stats = smol_first_two_follow_the_target(target, lambda: [(ModelDrafter(draft, SMOL_T), tracker)])
    assert sum(s.tree_steps for s in stats) > 300 and sum(tracker.siblings.accepted) > 10


def test_smol_sampled_copy_branches_first_two_tokens_follow_the_target(smol_copies, smol):
    # The same with a copy (the target's greedy tokens) beside the draft's sampled first token.
    target, draft = smol
    ngram, tracker = CostTracker(), EagerTracker()
    stats = smol_first_two_follow_the_target(
        target, lambda: [(NGramDrafter(), ngram), (ModelDrafter(draft, SMOL_T), tracker)])
    assert sum(s.copy_branches for s in stats) > 150 and sum(ngram.positions.accepted) > 30


def smol_first_two_follow_the_target(target, sources, n: int = 600) -> list:
    """n seeded generations of two tokens (sources() for each) against target-only's exact
    probabilities of the first two, read from the target's own logits (chi-square); their stats."""
    prompt = target.model.tokenize("My favourite animal is the")
    codes, stats = [], []
    v = target.model.n_vocab
    for seed in range(n):
        config = GenerationConfig(2, None, SMOL_T, seed=seed, p_min=0.0, gamma_max=3)
        tokens, st = run(target, sources(), prompt, config)
        codes.append(tokens[0] * v + tokens[1])
        stats.append(st)
    expected: dict[int, float] = {}
    target.reuse_prefix([])
    target.decode(prompt, logits="last")
    p1 = distribution(target.logits(), SMOL_T)
    for t1, pr1 in zip(p1.ids.tolist(), p1.probs):
        target.truncate(len(prompt))
        target.decode([t1], logits="last")
        p2 = distribution(target.logits(), SMOL_T)
        expected.update({t1 * v + t2: pr1 * pr2 for t2, pr2 in zip(p2.ids.tolist(), p2.probs)})
    cells = sorted(expected)
    index = {c: i for i, c in enumerate(cells)}
    assert all(c in index for c in codes)  # nothing target-only could not emit
    assert gof_pvalue(np.array([index[c] for c in codes]), np.array([expected[c] for c in cells])) > 1e-3
    return stats


# --- an n-gram lookup's copy as a branch (a hybrid's trees) ------------------------------------------
class AlwaysCopy:
    """A branch rule for the copy tests: a sibling beside the chain's first token, and every copy
    offered, whole, while the target context has sequences left."""

    def __init__(self, left: int, sibling: bool = True):
        self.left, self.width, self.sibling = left, 0, sibling

    def siblings(self, i: int, confidence: float) -> int:
        if i != 0 or self.left <= 0 or not self.sibling:
            return 0
        self.left -= 1
        return 1

    def copy(self, gains) -> int:
        if self.left <= 0:
            return 0
        self.left -= 1
        return len(gains) - 1


@pytest.fixture
def always_copy(monkeypatch):
    """Trees where the copy the lookup offers is verified beside the chain wherever it differs from
    the chain's token; the lookup always offers one: the target's own greedy tokens after the context,
    a copy that depends on the context alone (as a lookup's does), often the target's choice."""
    monkeypatch.setattr(planner_mod, "branch_rule", lambda *args: AlwaysCopy(args[-1] - 1) if args[-1] > 1 else None)
    model = FakeModel("fake-instruct.gguf")

    def continuation(self, context, draft, k):
        out = [*context, *draft]
        for _ in range(min(k, 3)):
            out.append(int(np.argmax(model.logits_at(out))))
        return out[len(context) + len(draft):], 8, 0  # a long match in the prompt
    monkeypatch.setattr(NGramDrafter, "continuation", continuation)


def hybrid_sources(draft, params, ngram: CostTracker | None = None):
    """The hybrid's sources: the lookup (a fresh tracker: its copies never take over as a handoff)
    and the draft model, always drafting 3."""
    return [(NGramDrafter(), ngram or CostTracker()), (ModelDrafter(draft, params), EagerTracker())]


def test_greedy_copy_branches_equal_target_only(always_copy, monkeypatch):
    # (the lookup's guesses are not also followed along the model's steps: only the copies count)
    monkeypatch.setattr(Planner, "_shadow_step", lambda self, plan, offers: None)
    # Every step the model's: a lookup step of its own (its first look, a probe: priced by the fakes'
    # timings) leaves the model behind, and a catch-up priced by those timings can hand the rest of
    # the reply to the lookup, so how many copies were branches would depend on the machine's pace.
    choose = Planner._choose
    monkeypatch.setattr(Planner, "_choose", lambda self, offers: choose(self, [c for c in offers if c.source == self._model]))
    target, draft = fake_contexts(n_ctx=256, noise=0.5, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    baseline, _ = run(target, [], prompt, GenerationConfig(64, 0, GREEDY))
    ngram = CostTracker()
    spec, stats = run(target, hybrid_sources(draft, GREEDY, ngram), prompt, GenerationConfig(64, None, GREEDY, p_min=0.0))
    assert spec == baseline
    assert stats.copy_branches > 5 and stats.by_drafter["ngram"][1] > 0  # copies verified, and taken
    # what the target judged of them is the lookup's to learn, in the match's bucket
    assert sum(ngram.positions.accepted) == stats.by_drafter["ngram"][1] and sum(ngram.positions.judged) > 0


def first_two_hybrid(n: int, seed0: int) -> tuple[np.ndarray, int]:
    """The first two tokens of n seeded hybrid generations with copies as branches (codes t1 * V + t2),
    and how many of them verified one."""
    target, draft = fake_contexts(n_ctx=64, noise=0.8, n_seq_max=4)
    prompt = target.model.tokenize(PROMPT)
    ngram, tracker = CostTracker(), EagerTracker()
    codes, copies = [], 0
    for seed in range(seed0, seed0 + n):
        config = GenerationConfig(2, None, TOP4, seed=seed, p_min=0.0, gamma_max=3)
        sources = [(NGramDrafter(), ngram), (ModelDrafter(draft, TOP4), tracker)]
        tokens, stats = run(target, sources, prompt, config)
        codes.append(tokens[0] * target.model.n_vocab + tokens[1])
        copies += stats.copy_branches
    return np.array(codes), copies


def test_sampled_copy_branches_first_two_tokens_follow_the_target(always_copy):
    # A copy beside the chain's first token and the draft's sibling there, tried after both, its
    # second token a child of its first: the joint of the first two tokens against target-only's
    # p(t1) p(t2 | t1).
    codes, copies = first_two_hybrid(10_000, 0)
    assert copies > 2000  # a quarter of them: where the copy's first token is neither guess of the draft
    assert gof_pvalue(codes, expected_two(114)) > 1e-3


def test_power_copy_branches_without_recursive_residuals_fail(always_copy, monkeypatch):
    # The copy judged against the node's full p, as if the chain's token and the sibling had not been
    # tried before it: caught by the same test with fewer samples.
    from test_rule_tree import residual_not_recursive
    monkeypatch.setattr(rule_tree, "residual", residual_not_recursive)
    codes, _ = first_two_hybrid(4000, 0)
    assert gof_pvalue(codes, expected_two(114)) < 1e-3


def test_a_copy_branch_pays_where_it_is_likely_judged_and_taken():
    flat, steep = VerifyCurve({1: 0.010, 16: 0.011}), VerifyCurve({1: 0.010, 16: 0.310})
    sib = SiblingAcceptance()
    gains = [0.0, 0.9, 1.7, 2.4, 3.0]  # a copy judged brings this many tokens, by its length
    unsure = BranchRule(lambda c: 0.3, sib.rate, 50.0, flat.seconds, 4, 3)
    unsure.siblings(0, 0.3)  # a sibling beside the chain's first token (the copy is tried after both)
    assert unsure.beside == pytest.approx(0.7 * 0.5)  # the chain's token and the sibling both not taken
    assert unsure.copy(gains) == 4 and unsure.width == 5 + 4  # flat: the whole copy
    dear = BranchRule(lambda c: 0.3, sib.rate, 50.0, steep.seconds, 4, 3)
    assert dear.siblings(0, 0.3) == 0 and dear.beside == pytest.approx(0.7)
    assert dear.copy(gains) == 0  # a row costs 20 ms, a token's worth: more than any length brings
    mild = VerifyCurve({1: 0.010, 16: 0.025}).seconds  # a row: 1 ms, a twentieth of a token's worth
    unsure = BranchRule(lambda c: 0.3, sib.rate, 50.0, mild, 4, 3)
    unsure.siblings(0, 0.3)
    assert unsure.copy(gains) > 0
    sure = BranchRule(lambda c: 0.99, sib.rate, 50.0, mild, 4, 3)
    sure.siblings(0, 0.99)
    assert sure.copy(gains) == 0  # the chain's token is seldom rejected: the copy is seldom judged
    full = BranchRule(lambda c: 0.3, sib.rate, 50.0, flat.seconds, 4, 1)
    full.siblings(0, 0.3)
    assert full.copy(gains) == 0  # its one sequence went to the sibling


def test_the_lookup_offers_a_copy_beside_a_token_it_differs_from():
    ngram = NGramDrafter()
    tracker = CostTracker()
    for _ in range(20):  # copies of matches reaching back 8+ tokens into the prompt: taken
        tracker.record_acceptance(4, 4, bucket=4)
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6, 7, 8]
    handoff = Handoff(ngram, tracker, cap=48, room=8, model_rate=100.0, prompt_len=len(context))
    rule = BranchRule(lambda c: 0.3, SiblingAcceptance().rate, 1.0, VerifyCurve({1: 0.010, 16: 0.011}).seconds, 4, 3)
    assert handoff.after(context, []) == [] and handoff.after(context, [9]) == []  # no handoff: the model is faster
    rule.siblings(0, 0.3)
    assert handoff.branch([9], rule) == []  # offered 9 in 9's place: the same guess
    handoff.after(context, [30])
    handoff.after(context, [30, 31])
    assert handoff.branch([31], rule) == []  # nothing was offered after 30
    handoff.after(context, [9])  # offered 10, 11, 12, 1, ... in place of the next token
    handoff.after(context, [9, 40])
    copy = handoff.branch([40], rule)
    assert copy == [10, 11, 12, 1] and handoff.branch_bucket == 4  # 4 = the room left: 8 + 1 - 5 rows
    assert handoff.branch([40], rule) == []  # one copy per step: the rule has no sequence left for more


def test_a_copy_branchs_outcome_is_the_lookups_to_learn_where_it_was_judged():
    # Chain 0 -> 1 -> 2; a copy 3 -> 4 beside node 1 (its parent: node 0).
    ngram, model = CostTracker(), CostTracker()
    planner = Planner([(NGramDrafter(), ngram), (NGramDrafter(), model)], GenerationConfig())
    planner._model = 1
    handoff = Handoff(NGramDrafter(), ngram, 48, 8, 1.0, 0)
    handoff.branch_bucket = 5
    plan = Plan(1, 3, None, 0, None, handoff)

    def record(path):
        proposal = ProposalOf([7, 8, 9, 10, 11], parents=[-1, 0, 1, 0, 3], copies=2)
        planner.record(plan, proposal, len(path), 0.01, 0.02, 0.0, path)

    record([0, 3, 4])      # chain's 8 rejected, the copy taken whole
    record([0, 3])         # ... its first token only
    record([0])            # the chain's 8 and the copy's first both rejected
    record([0, 1, 2])      # the chain taken: the copy was not judged
    record([])             # the chain's first rejected: the copy's fork was never reached
    assert ngram.buckets[5].judged[:2] == [3, 2] and ngram.buckets[5].accepted[:2] == [2, 1]
    assert model.positions.judged[:3] == [5, 4, 1] and model.positions.accepted[:3] == [4, 1, 1]


def ProposalOf(ids, parents, copies):
    from localspec.drafters import Proposal, one_hot
    return Proposal(ids, [one_hot(t) for t in ids], (0.5,) * len(ids), 0.0, parents, 0, copies)



@pytest.fixture
def smol_copies(monkeypatch, smol_f16):
    """AlwaysCopy trees (no sibling) on SmolLM2 whose lookup always offers the target's own greedy
    tokens after the context (read from a third context of the target's model): copies that depend
    on the context alone, verified wherever the draft's token differs."""
    from localspec.context import Context
    from localspec.llama import Model

    monkeypatch.setattr(planner_mod, "branch_rule", lambda *args: AlwaysCopy(args[-1] - 1, sibling=False))
    oracle = Context(Model(smol_f16), n_ctx=256, n_threads=2)

    def continuation(self, context, draft, k):
        out = [*context, *draft]
        oracle.decode(out[oracle.reuse_prefix(out[:-1]):], logits="last")
        for _ in range(min(k, 3) - 1):
            out.append(int(np.argmax(oracle.logits())))
            oracle.decode(out[-1:], logits="last")
        out.append(int(np.argmax(oracle.logits())))
        return out[len(context) + len(draft):], 8, 0
    monkeypatch.setattr(NGramDrafter, "continuation", continuation)


@pytest.mark.parametrize("text", ["def fibonacci(n):", "The three primary colours are"])
def test_smol_greedy_copy_branches_equal_target_only(smol_copies, smol, text):
    # Through llama.cpp's multi-sequence cache: a copy's path of several tokens is one branch's
    # sequence. 48 tokens: at the 54th of the first text the target's top two logits lie 0.007 apart,
    # and a batch's row and a single token's part there (README, "Exactness").
    target, draft = smol
    prompt = target.model.tokenize(text)
    baseline, _ = run(target, [], prompt, GenerationConfig(48, 0, GREEDY))
    spec, stats = run(target, hybrid_sources(draft, GREEDY), prompt, GenerationConfig(48, None, GREEDY, p_min=0.0))
    assert spec == baseline
    assert stats.copy_branches > 3 and stats.by_drafter["ngram"][1] > 3  # copies verified and taken
