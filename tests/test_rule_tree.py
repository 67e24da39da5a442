"""The token-tree rules (p = target, q = draft): exact cases, then chi-square tests with power checks."""

from __future__ import annotations

import bisect
import functools

import numpy as np
import pytest

from localspec import rule_tree
from localspec.rule_tree import ROOT, Tree, accept_tree, accept_tree_greedy, chain_tree, residual, without
from localspec.sampling import Dist, accept_drafts
from test_sampling import ALPHA, LazyRows, dense, dist, gof_pvalue, one_hot, peaked

N_TREE = 40_000  # generations per statistical tree test
V = 6


# ---------------------------------------------------------------- exact cases


def test_tree_helpers():
    # Root children 0 and 1; node 2 under 0; node 3 under 2.
    tree = Tree([5, 6, 7, 8], [ROOT, ROOT, 0, 2], [one_hot(t) for t in (5, 6, 7, 8)])
    assert tree.children(ROOT) == [0, 1] and tree.children(0) == [2] and tree.children(1) == []
    assert tree.depths() == [1, 1, 2, 3]
    assert tree.path_to(3) == [0, 2, 3] and tree.path_to(ROOT) == []
    assert tree.leaves() == [1, 3]
    assert chain_tree([4, 9], [one_hot(4), one_hot(9)]).parents == [ROOT, 0]


def test_residual_matches_by_token_id_not_list_position():
    # p on {1, 2, 3}, q on {2, 3, 4}: max(0, p - q) is 0.5 on 1 and 0.1 on 3, whatever the lists' order.
    p = Dist(np.array([3, 1, 2]), np.array([0.3, 0.5, 0.2]))
    q = Dist(np.array([4, 2, 3]), np.array([0.5, 0.3, 0.2]))
    r = residual(p, q)
    np.testing.assert_allclose(dense(r, 5), [0, 0.5 / 0.6, 0, 0.1 / 0.6, 0])


def test_residual_of_equal_distributions_is_p():
    p = dist([0.5, 0.5])
    assert residual(p, p) is p


def test_without_removes_and_renormalises():
    q = dist([0.5, 0.3, 0.2])
    np.testing.assert_allclose(dense(without(q, [0]), 3), [0, 0.6, 0.4])
    assert without(q, [0, 1, 2]) is None


def test_greedy_follows_the_argmax_down_the_second_branch():
    # Root children 3 and 4; the target picks 4, then 7 (node 3 under node 1), then bonus 2.
    tree = Tree([3, 4, 5, 6, 7], [ROOT, ROOT, 0, 1, 1], [one_hot(t) for t in (3, 4, 5, 6, 7)])
    argmax = LazyRows([4, 0, 7, 0, 0, 2], last=5)  # rows: root, after nodes 0..4
    emitted, path = accept_tree_greedy(tree, argmax)
    assert (emitted, path) == ([4, 7, 2], [1, 4])
    assert set(argmax.reads) == {0, 2, 5}  # only the accepted path's rows


def test_greedy_no_child_matches_emits_the_targets_token():
    tree = Tree([3, 4], [ROOT, ROOT], [one_hot(3), one_hot(4)])
    assert accept_tree_greedy(tree, [9, 0, 0]) == ([9], [])


def test_peaked_target_accepts_its_token_in_the_second_sibling(seed=0):
    # The target is sure of 4: sibling 3 is rejected (p(3) ~ 0), sibling 4 accepted, then node 2's
    # slot, where the target is sure of 1, is the bonus.
    tree = Tree([3, 4, 8], [ROOT, ROOT, 0], [one_hot(3), one_hot(4), one_hot(8)])
    p = LazyRows([peaked(4), peaked(0), peaked(1), peaked(0)], last=2)
    emitted, path = accept_tree(tree, p, np.random.default_rng(seed))
    assert (emitted, path) == ([4, 1], [1])
    assert set(p.reads) == {0, 2}


def test_chain_tree_agrees_with_the_chain_rule():
    # One branch: the tree rule consumes the same random numbers as Leviathan's chain rule.
    p, q = dist([0.2, 0.3, 0.5]), dist([0.6, 0.3, 0.1])
    for seed in range(200):
        ids = [0, 0]
        chain = accept_drafts(ids, [q, q], [p, p, p], np.random.default_rng(seed))
        emitted, path = accept_tree(chain_tree(ids, [q, q]), [p, p, p], np.random.default_rng(seed))
        assert (emitted, len(path)) == chain


# ---------------------------------------------------------------- statistically


def tables() -> tuple[np.ndarray, np.ndarray]:
    """p and q over V tokens given the previous one ([V, V] rows), far apart, each with a token the
    other never gives, so that residuals and sibling order matter."""
    rng = np.random.default_rng(17)
    p, q = rng.dirichlet(np.ones(V), size=V), rng.dirichlet(np.full(V, 0.4), size=V)
    p[np.arange(V), (np.arange(V) + 1) % V] = 0.0
    q[np.arange(V), (np.arange(V) + 2) % V] = 0.0
    return p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)


P, Q = tables()
P_ROWS, Q_ROWS = [dist(r) for r in P], [dist(r) for r in Q]


@functools.cache
def q_without(prev: int, drawn: tuple[int, ...]) -> Dist:
    """q after token prev with the siblings drawn so far removed: a fixed function of its arguments,
    computed once per run (the drafting was four fifths of these tests' time, the rule one fifth)."""
    return without(Q_ROWS[prev], list(drawn))


@functools.cache
def best_guess(prev: int, drawn: tuple[int, ...]) -> tuple[int, Dist]:
    """q's most likely token after prev not yet drawn, and its one-hot q: a deterministic guess."""
    left = q_without(prev, drawn)
    token = int(left.ids[np.argmax(left.probs)])
    return token, one_hot(token)


_CDFS: dict[int, tuple[Dist, list[int], list[float]]] = {}  # id(q) -> q (kept: no other takes its id), ids, cumsums


def draw(q: Dist, rng) -> int:
    """sample(q, rng): the same token from the same uniform draw, inverting cumulative sums made as
    sampling._draw makes them, once per q (the drafter's q's are cached objects): a third of the
    drafting time once its q's were cached."""
    if id(q) not in _CDFS:
        _CDFS[id(q)] = (q, q.ids.tolist(), np.cumsum(q.probs).tolist())
    _, ids, cdf = _CDFS[id(q)]
    return ids[min(bisect.bisect_right(cdf, rng.random() * cdf[-1]), len(cdf) - 1)]


def draw_children(prev: int, width: int, mode: str, rng) -> list[tuple[int, Dist]]:
    """Siblings after token prev, each with its q given the earlier ones. 'iid': sampled from q with
    replacement (SpecInfer); 'wor': without replacement (RSD); 'mixed': one sampled, then q's most
    likely token not yet drawn as a deterministic guess, then one more without replacement."""
    q, out = Q_ROWS[prev], []
    for i in range(width):
        drawn = tuple(t for t, _ in out)
        if mode == "mixed" and i == 1:
            out.append(best_guess(prev, drawn))
            continue
        q_i = q if mode == "iid" else q_without(prev, drawn)
        out.append((draw(q_i, rng), q_i))
    return out


def draw_tree(last: int, widths: tuple[int, ...], mode: str, rng) -> Tree:
    """A tree of len(widths) levels after token last: every node of level d gets widths[d] children."""
    tokens, parents, qs = [], [], []
    frontier = [(ROOT, last)]
    for width in widths:
        nxt = []
        for node, prev in frontier:
            for token, q_i in draw_children(prev, width, mode, rng):
                tokens.append(token)
                parents.append(node)
                qs.append(q_i)
                nxt.append((len(tokens) - 1, token))
        frontier = nxt
    return Tree(tokens, parents, qs)


def first_tokens(widths, mode, n_tokens, n, seed) -> np.ndarray:
    """The first n_tokens emitted after context token 0, n times: draw a tree, apply the rule, repeat."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, n_tokens), dtype=np.int64)
    for j in range(n):
        got: list[int] = []
        while len(got) < n_tokens:
            last = got[-1] if got else 0
            tree = draw_tree(last, widths, mode, rng)
            rows = [P_ROWS[last]] + [P_ROWS[t] for t in tree.tokens]  # chain model: p depends on the previous token
            got += accept_tree(tree, rows, rng)[0]
        out[j] = got[:n_tokens]
    return out


def joint_expected(n_tokens: int) -> np.ndarray:
    """p(t1) p(t2 | t1) ... after context token 0, raveled over V ** n_tokens cells."""
    joint = P[0]
    for _ in range(n_tokens - 1):
        joint = (joint[..., None] * P[np.arange(V)].reshape((1,) * (joint.ndim - 1) + (V, V)))
    return joint.ravel()


def codes(samples: np.ndarray) -> np.ndarray:
    return np.ravel_multi_index(samples.T, (V,) * samples.shape[1])


SHAPES = [((3, 2), "wor"), ((3, 2), "mixed"),
          pytest.param((3, 2), "iid", marks=pytest.mark.slow), pytest.param((2, 1, 2), "wor", marks=pytest.mark.slow)]
SEEDS = {"wor": 4000, "mixed": 4001, "iid": 4002}


@pytest.mark.parametrize("widths,mode", SHAPES)
def test_first_three_tokens_follow_the_target(widths, mode):
    # Trees of depth 2-3 with 2-3 siblings per node; the joint distribution of the first three
    # emitted tokens must be p(t1) p(t2 | t1) p(t3 | t2) (chi-square over 216 cells, small ones lumped).
    # Slow-marked shapes run in the full suite only.
    samples = first_tokens(widths, mode, 3, N_TREE, seed=SEEDS[mode] + len(widths))
    assert gof_pvalue(codes(samples), joint_expected(3)) > ALPHA


def residual_by_list_position(p: Dist, q: Dist) -> Dist:
    """BROKEN, as llama.cpp's examples/speculative: both lists sorted by id, q subtracted by position."""
    p_order, q_order = np.argsort(p.ids), np.argsort(q.ids)
    diff = p.probs[p_order].copy()
    m = min(diff.size, q_order.size)
    diff[:m] = np.maximum(diff[:m] - q.probs[q_order][:m], 0)
    if diff.sum() <= 0:
        return p
    return Dist(p.ids[p_order][diff > 0], diff[diff > 0] / diff.sum())


def residual_not_recursive(p: Dist, q: Dist) -> Dist:
    """BROKEN: every sibling judged against the node's full p (no residual between siblings)."""
    return p


@pytest.mark.parametrize("broken", [residual_by_list_position, residual_not_recursive])
def test_power_broken_residuals_fail_the_three_token_test(monkeypatch, broken):
    # The same test, the same trees: a wrong residual must be caught, or passing proves nothing.
    monkeypatch.setattr(rule_tree, "residual", broken)
    samples = first_tokens((3, 2), "mixed", 3, N_TREE // 4, seed=99)  # a quarter of the samples suffice
    assert gof_pvalue(codes(samples), joint_expected(3)) < ALPHA
