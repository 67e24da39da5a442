"""The tree's shape: where the draft model's next-best token joins the verify batch as a sibling.

The chain's token at depth i was drafted with confidence c (the draft's top probability) and the
target accepts it with the measured chance a(c). The draft's next-best token beside it, as a leaf,
turns a rejection there into two emitted tokens (the sibling and the token after it) when the target
takes the sibling: reach_i × (1 − a(c)) × s(c) more tokens per step, reach_i being the chance that
the chain gets to depth i and s(c) the measured chance that the target takes the sibling where it
rejected the chain's token. It costs one more row in the verify batch, verify(w + 1) − verify(w)
seconds at the step's width w, read from the measured verify curve. A sibling is added where its
tokens are worth more than its seconds at the rate the loop achieves (the DraftStop argument of
draftstop.py, one token at a time). So the tree collapses to a chain where siblings do not pay —
dear wide verifies, siblings seldom taken, confident drafts — and the planner's γ = 0 collapses it
further to plain decoding.

Which token a sibling holds depends only on the draft, never on the target, so the tree rule of
rule_tree.py stays exact (the sibling is a deterministic guess, listed after the chain's token).

In a hybrid, the n-gram lookup's copy may be a branch too: where the lookup offered a copy at depth i
and the draft model's token there differs from it, the copy's first L tokens, a path of deterministic
guesses, join the tree beside the chain's token (planning.handoff.Handoff.branch). It is judged where the chain
reaches depth i − 1 and the target takes neither the chain's token nor the model's sibling there:
reach × (1 − a(c)) × (1 − s(c) where a sibling was added) of the steps; then it brings the tokens the
copy's acceptance promises, Σ_{j≤L} Π_{m≤j} a_m with a_m measured per position in the match's bucket.
It costs verify(w + L) − verify(w), and L is chosen where the gain beats those seconds at the loop's
rate by the most (none if nowhere). The copy depends on the context only, so the rule stays exact.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .draftstop import CONFIDENCE_BINS, confidence_bin

MAX_BRANCHES = 4  # sequences of a target context that may verify trees: the chain and up to 3 siblings


class SiblingAcceptance:
    """Per draft-confidence bin: siblings the target judged (it rejected the chain's token beside
    them) and siblings it took."""

    def __init__(self, prior: float = 0.5, weight: float = 2.0):
        self.prior, self.weight = prior, weight  # optimistic until measured, so siblings get measured
        self.judged = [0] * CONFIDENCE_BINS
        self.accepted = [0] * CONFIDENCE_BINS

    def record(self, confidence: float, accepted: bool) -> None:
        """One sibling the target judged."""
        b = confidence_bin(confidence)
        self.judged[b] += 1
        self.accepted[b] += accepted

    def rate(self, confidence: float) -> float:
        """s(c): the chance the target takes a sibling it judges, smoothed towards the prior."""
        b = confidence_bin(confidence)
        return (self.accepted[b] + self.weight * self.prior) / (self.judged[b] + self.weight)


class BranchRule:
    """One step's sibling decisions: siblings(i, confidence) after the chain's token at depth i + 1
    is drafted (i from 0), in order."""

    def __init__(self, accept: Callable[[float], float], sibling: Callable[[float], float], rate: float,
                 verify_s: Callable[[int], float], width: int, max_siblings: int):
        self.accept, self.sibling, self.rate, self.verify_s = accept, sibling, rate, verify_s
        self.width = width          # rows of the verify batch so far: the planned chain and its siblings
        self.left = max_siblings    # siblings the target context can still take (one sequence each)
        self.reach = 1.0            # the chance that the chain gets to the current depth
        self.beside = 0.0           # the chance that the target takes nothing at the last depth judged

    def siblings(self, i: int, confidence: float) -> int:
        """How many of the draft's next-best tokens to add beside the chain's token (0 or 1)."""
        a = self.accept(confidence)
        self.beside, self.reach = self.reach * (1.0 - a), self.reach * a
        if self.left <= 0:
            return 0
        taken = self.sibling(confidence)
        if self.beside * taken <= self.rate * (self.verify_s(self.width + 1) - self.verify_s(self.width)):
            return 0  # its tokens per step are worth less than its row
        self.beside *= 1.0 - taken
        self.width += 1
        self.left -= 1
        return 1

    def copy(self, gains: Sequence[float]) -> int:
        """How many tokens of a copy to add beside the chain's token at the depth last judged by
        siblings() (0: none): gains[L] is what a copy of L tokens brings where the target judges it."""
        if self.left <= 0:
            return 0
        best, value, base = 0, 0.0, self.verify_s(self.width)
        for n in range(1, len(gains)):
            worth = self.beside * gains[n] - self.rate * (self.verify_s(self.width + n) - base)
            if worth > value:
                best, value = n, worth
        if best:
            self.width += best
            self.left -= 1
        return best


def branch_rule(accept: Callable[[float], float], siblings: SiblingAcceptance, rate: float,
                verify_s: Callable[[int], float], gamma: int, max_branches: int) -> BranchRule | None:
    """The sibling rule for a model draft of up to gamma tokens, or None where the target context
    verifies chains only."""
    if max_branches <= 1:
        return None
    return BranchRule(accept, siblings.rate, rate, verify_s, gamma + 1, max_branches - 1)


def tree_outcome(parents: Sequence[int], path: Sequence[int]) -> tuple[list[int], int, list[tuple[int, bool]]]:
    """What a verified tree of a chain and leaf siblings teaches: (the chain's nodes, how many of
    them were accepted, [(sibling, taken)] for the siblings the target judged). A sibling is judged
    where the chain reached its parent and the chain's token beside it was rejected."""
    chain, tip = [], -1
    for i, parent in enumerate(parents):  # the chain: the root's first child, then first children
        if parent == tip:
            chain.append(i)
            tip = i
    n_chain = next((j for j, node in enumerate(chain) if j >= len(path) or path[j] != node), len(chain))
    depth_of = {node: j for j, node in enumerate(chain)}
    judged = [(i, i in path) for i, parent in enumerate(parents)
              if i not in depth_of and (0 if parent < 0 else depth_of[parent] + 1) == n_chain]
    return chain, n_chain, judged
