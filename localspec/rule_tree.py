"""The acceptance rules for a token tree: several guesses per position, verified in one target decode.

Letters as in sampling.py: **p is the target distribution, q the draft distribution.**

A tree's nodes are listed parents first. Node i holds a token, its parent (-1: a child of the root,
the slot right after the context) and q_i, the distribution the drafter drew it from GIVEN the
siblings listed before it: a sampled first child's q; a later child drawn without replacement has q
with the earlier siblings removed and renormalised; a deterministic guess (the draft's next-best
token, an n-gram continuation) has a one-hot q_i.

T > 0 (`accept_tree`): at each node reached, the children are tried in order by recursive rejection
sampling — Miao et al. 2023, "SpecInfer", multi-step speculative sampling (i.i.d. drafts), and Jeon
et al. 2024, "Recursive Speculative Decoding" (drafts without replacement): child x_i is accepted with
probability min(1, p_i(x_i) / q_i(x_i)); if rejected, p_{i+1} = norm(max(0, p_i - q_i)) and the next
child is tried; when none is accepted a token is drawn from the last residual. Each round emits a
token distributed as its p_i whatever happens after it (the single-draft lemma of Leviathan et al.
2022), so the node emits a token ~ p — for any mix of sampled and deterministic children, as long as
each q_i is the child's distribution given the siblings before it and the drafter never looked at the
target. A deterministic child (q_i one-hot) is accepted with probability p_i(x), and on rejection its
token's mass is removed from p and the rest renormalised. After an accepted child the rule descends
into it; at a leaf (or a node without children) the bonus token is drawn from p there.

Residuals are computed per token id over both supports. llama.cpp's examples/speculative subtracts
the draft's list from the target's by list position (both sorted by id), which is right only when
both lists hold the same tokens; that is not done here.

T = 0 (`accept_tree_greedy`): follow the target's argmax down the tree as far as a child holds it;
the bonus token is the argmax after the last accepted node.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from .sampling import Dist, sample

ROOT = -1  # the parent of the first guesses: the slot after the context
_RESIDUAL_EPS = 1e-12  # residual mass below this is float rounding of p_i == q_i


class Tree(NamedTuple):
    """A drafted token tree, parents before children, siblings in the order they were drawn."""

    tokens: list[int]   # [n] node tokens
    parents: list[int]  # [n] parent node index, ROOT for the first guesses
    q: list[Dist]       # [n] q_i: the node's distribution given its earlier siblings (one-hot: deterministic)

    def children(self, node: int) -> list[int]:
        """The children of node (ROOT for the first guesses), in sibling order."""
        return [i for i, parent in enumerate(self.parents) if parent == node]

    def depths(self) -> list[int]:
        """Depth of each node: 1 for the first guesses."""
        depth: list[int] = []
        for parent in self.parents:
            assert parent < len(depth), "nodes must be listed parents first"
            depth.append(1 if parent == ROOT else depth[parent] + 1)
        return depth

    def path_to(self, node: int) -> list[int]:
        """The nodes from the root's child down to node (empty for ROOT)."""
        path = []
        while node != ROOT:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def leaves(self) -> list[int]:
        """Nodes without children: one per branch."""
        has_child = set(self.parents)
        return [i for i in range(len(self.tokens)) if i not in has_child]


def chain_tree(ids: Sequence[int], q: Sequence[Dist]) -> Tree:
    """A chain of drafts as a tree with one branch."""
    return Tree([int(t) for t in ids], list(range(-1, len(ids) - 1)), list(q))


def accept_tree(tree: Tree, p: Sequence[Dist], rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """The exact T > 0 rule: (emitted tokens, accepted nodes). p has one row per slot: p[0] at the
    root, p[i + 1] after node i; it may be lazy (rows read only along the accepted path)."""
    emitted: list[int] = []
    path: list[int] = []
    node = ROOT
    while True:
        chosen, token = _accept_child(tree, tree.children(node), p[node + 1], rng)
        emitted.append(token)
        if chosen is None:
            return emitted, path
        path.append(chosen)
        node = chosen


def _accept_child(tree: Tree, children: list[int], p: Dist, rng: np.random.Generator) -> tuple[int | None, int]:
    """Recursive rejection sampling over one node's children: (accepted child or None, emitted token)."""
    for child in children:
        x, q_i = tree.tokens[child], tree.q[child]
        px, qx = p.prob_of(x), q_i.prob_of(x)
        assert qx > 0, f"node {child} (token {x}) has q(x) = 0: it was not drawn from its q"
        if rng.random() < px / qx:  # strict: p(x) = 0 is never accepted
            return child, x
        p = residual(p, q_i)  # p_{i+1} = norm(max(0, p_i - q_i))
    return None, sample(p, rng)


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p - q)) over the union of both supports, matched by token id."""
    ids = np.union1d(p.ids, q.ids)  # [n], sorted
    diff = np.zeros(ids.size)
    diff[np.searchsorted(ids, p.ids)] = p.probs
    diff[np.searchsorted(ids, q.ids)] -= q.probs
    keep = diff > 0
    mass = diff[keep].sum()
    if mass <= _RESIDUAL_EPS:
        # Departure from the papers: norm() is undefined when p_i == q_i (up to float rounding), and then
        # a rejection only happens through rounding; p_i itself is the same distribution.
        return p
    return Dist(ids[keep], diff[keep] / mass)


def without(q: Dist, tokens: Sequence[int]) -> Dist | None:
    """q with tokens removed and renormalised: the distribution of the next draw without replacement
    (None when nothing is left)."""
    keep = ~np.isin(q.ids, np.asarray(tokens, dtype=np.int64))
    mass = q.probs[keep].sum()
    if not keep.any() or mass <= _RESIDUAL_EPS:
        return None
    return Dist(q.ids[keep], q.probs[keep] / mass)


def accept_tree_greedy(tree: Tree, target_argmax: Sequence[int]) -> tuple[list[int], list[int]]:
    """The T = 0 rule: (emitted tokens, accepted nodes). target_argmax[0] is the target's choice at the
    root, target_argmax[i + 1] after node i; read only along the accepted path."""
    emitted: list[int] = []
    path: list[int] = []
    node = ROOT
    while True:
        choice = int(target_argmax[node + 1])
        emitted.append(choice)
        node = next((c for c in tree.children(node) if tree.tokens[c] == choice), None)
        if node is None:
            return emitted, path
        path.append(node)
