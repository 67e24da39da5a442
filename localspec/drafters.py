"""Drafters propose tokens AND the probabilities they drew them with, so the p/q rule stays exact.

The protocol: propose(context, k, rng, stop, branch, handoff) -> Proposal; observe(n_accepted);
prefill(prompt); offer(context, k). The planner decides k, the stop rule, the tree's shape and where a
model draft hands over to a copy; a drafter only follows them.
"""

from __future__ import annotations

import bisect
import time
from typing import Callable, NamedTuple, Protocol, Sequence

import numpy as np

from .config import rows_on_backend
from .context import Context
from .llama import common_prefix_len
from .sampling import (Dist, SamplingParams, candidates_needed, distribution, greedy_token, sample,
                       top_distribution, top_probability)
from .treeplan import BranchRule


def one_hot(token: int) -> Dist:
    """The distribution of a deterministic proposal."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


class Proposal(NamedTuple):
    """A drafter's guesses for the tokens after the context."""

    ids: list[int]
    q: list[Dist]                        # the distribution each guess was drawn from (one-hot: deterministic)
    confidences: tuple[float, ...] = ()  # the drafter's confidence per guess, where a stop rule judged it
    catchup_s: float = 0.0               # seconds spent catching up on the context before the first guess
    parents: list[int] | None = None     # a token tree (rule_tree.Tree's parents); None: ids are a chain
    tail: int = 0                        # the last `tail` guesses continue the chain from an n-gram lookup (Handoff)
    copies: int = 0                      # the last `copies` nodes: an n-gram lookup's copy as a branch (Handoff.branch)
    first_apart: bool = False            # the catch-up's last token was decoded alone, outside catchup_s
    rows: int = 0                        # rows a draft model decoded for the step's own drafting (ModelDrafter.propose)

    def copies_taken(self, path: Sequence[int]) -> int:
        """How many nodes of the copy verified as a branch lie on the accepted path."""
        own = len(self.ids) - self.copies
        return sum(node >= own for node in path)


NO_PROPOSAL = Proposal([], [])


def tree_proposal(nodes: list[tuple[int, Dist, int, float]], copy: list[int], fork: int, judged: bool,
                  catchup_s: float, tail: int, first_apart: bool, rows: int) -> Proposal:
    """The Proposal of a model draft's nodes, (token, q, parent, confidence) parents first, with a copy
    beside the chain (a branch from node fork) last: the copy's first token a child of the fork, each
    later one a child of the one before. Confidences kept where a stop or branch rule judged them."""
    nodes = nodes + [(t, one_hot(t), fork if j == 0 else len(nodes) + j - 1, 1.0) for j, t in enumerate(copy)]
    ids, dists, parents, confidences = (list(column) for column in zip(*nodes)) if nodes else ([], [], [], [])
    is_tree = len(set(parents)) < len(parents)  # some node has a sibling
    return Proposal(ids, dists, tuple(confidences) if judged else (), catchup_s, parents if is_tree else None,
                    tail, len(copy), first_apart, rows)
# A draft model decodes up to this many tokens before its first guess as part of any step (its last
# draft and the target's bonus token, after a draft accepted whole); more is a catch-up over tokens
# generated while it did not draft, timed and priced apart (ModelDrafter._catch_up, the planner).
STEP_DECODE = 2


class StopRule(Protocol):
    """Where a draft stops within the step's γ: keep(i, confidence) before drafting token i + 1."""

    def keep(self, i: int, confidence: float) -> bool:
        ...


class Handoff(Protocol):
    """Where a model draft hands over to a copy: after(context, draft) is asked after each token the
    model drafts and returns the tokens that continue the draft instead of the model (none: go on).
    Then, where what the lookup offered in that token's place (asked by the call before, or by
    look(context) for the first token) differs from the guesses there (`here`: the token, and a sibling
    beside it if any), branch(here, rule) may return the offered tokens to verify beside them, as a
    branch of the tree."""

    def after(self, context: Sequence[int], draft: Sequence[int]) -> list[int]:
        ...

    def look(self, context: Sequence[int]) -> None:
        ...

    def branch(self, here: Sequence[int], rule: BranchRule) -> list[int]:
        ...


class Drafter(Protocol):
    """What the controller needs from a source of guesses."""

    name: str

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator,
                stop: StopRule | None = None, branch: BranchRule | None = None,
                handoff: Handoff | None = None) -> Proposal:
        """Up to k guesses for the tokens after context, each with the distribution it came from;
        stop (when given) may end the draft early, judging the drafter's confidence; branch (when
        given, and the drafter can) may add next-best guesses beside the chain's, making a tree;
        handoff (when given, and the drafter can) may end a chain with a copy's tokens instead."""
        ...

    def observe(self, n_accepted: int) -> None:
        """Told how many of the last proposal the target accepted."""
        ...

    def prefill(self, prompt: Sequence[int]) -> None:
        """Take in the prompt ahead of the first proposal (done during the prompt phase)."""
        ...

    def offer(self, context: Sequence[int], k: int) -> int:
        """How many tokens it could propose now, at most k (cheap: the controller asks every step)."""
        ...


class ModelDrafter:
    """Drafts with a small model in its own llama.cpp context, sampling from q at T>0.

    Before each guess a stop rule (when given) sees the draft's confidence (the top probability of its
    logits, as llama.cpp's p-min judges it) and may end the draft. Where to stop depends only on the
    draft's state and on past steps, never on the target's verdict, so the output stays exact."""

    name = "model"

    def __init__(self, ctx: Context, params: SamplingParams):
        self.ctx = ctx
        self.params = params
        self.sampled = False  # whether this proposal's rows arrive as top-k candidates
        self.prefill_s = 0.0  # seconds the last prefill took (without a load)
        self.prefill_tokens = 0  # the tokens it decoded
        self.timed_first = False  # whether a catch-up has decoded its last token alone (_catch_up)

    @property
    def ready(self) -> bool:
        """Whether the draft model is loaded (a lazily held one is loaded by the first prefill or propose)."""
        return getattr(self.ctx, "loaded", True)

    def _load(self) -> None:
        """Load a lazily held draft model now, outside any timing of the catch-up."""
        if not self.ready:
            self.ctx.get()

    def take_load_s(self) -> float:
        """The seconds its model's load took, the first time asked after the load (also one made
        before this drafter existed); 0.0 otherwise and for a model not held lazily."""
        take = getattr(self.ctx, "take_load_s", None)
        return take() if take is not None else 0.0

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator,
                stop: StopRule | None = None, branch: BranchRule | None = None,
                handoff: Handoff | None = None) -> Proposal:
        k = min(k, self.ctx.n_ctx - len(context) + 1)
        if k <= 0:
            return NO_PROPOSAL
        self._load()
        self._choose_rows()
        catchup_s, first_apart, rows = self._catch_up(context)
        # (token, q, parent, confidence) per node, parents first: each chain node, then its sibling if any
        nodes: list[tuple[int, Dist, int, float]] = []
        chain: list[int] = []  # the chain's tokens
        tip, tail = -1, []     # the chain's last node; a copy that continues it (handoff)
        copy, fork = [], -1    # a copy beside the chain (a branch from node `fork`), listed last
        if handoff is not None and branch is not None:
            handoff.look(context)  # what the lookup offers in the first token's place
        for i in range(k):
            candidates, logits = self.ctx.sampled_logits(-1) if self.sampled else (None, self.ctx.logits(-1))
            # the top 10 of a top-k row are the row's top 10: the confidence is the same
            confidence = top_probability(logits) if stop is not None or branch is not None else 0.0
            if stop is not None and not stop.keep(i, confidence):
                break
            token, q = self._draw(candidates, logits, rng)
            nodes.append((token, q, tip, confidence))
            chain.append(token)
            parent, tip = tip, len(nodes) - 1
            alone = len(nodes) == len(chain) and not copy  # no sibling or copy beside the chain yet
            # a copy continues a chain only (a tree's siblings judge the draft's own guesses)
            tail = handoff.after(context, chain) if handoff is not None and alone else []
            if tail:
                nodes += [(t, one_hot(t), tip + j, 1.0) for j, t in enumerate(tail)]  # each the child of the last
                break
            here = [token]  # the guesses at this depth
            if branch is not None and branch.siblings(i, confidence):
                sibling = self._next_best(candidates, logits, q, token)
                if sibling is not None:
                    nodes.append((sibling, one_hot(sibling), parent, confidence))
                    here.append(sibling)
            if alone and branch is not None and handoff is not None:
                copy, fork = handoff.branch(here, branch), parent  # the copy offered at this depth, if it pays
            if i + 1 < k:
                self.ctx.decode([token], logits="last", sampled=self.sampled)
                rows += 1
        judged = stop is not None or branch is not None
        return tree_proposal(nodes, copy, fork, judged, catchup_s, len(tail), first_apart, rows)

    def _choose_rows(self) -> None:
        """Where a row's top-k logits determine q and the confidence, llama.cpp keeps only those in the
        decode (a top_k chain on the backend) and numpy reads k floats instead of the whole row (sampled)."""
        top_k = candidates_needed(self.params) if rows_on_backend(self.ctx, greedy=self.params.greedy) else 0
        self.sampled = top_k > 0 and self.ctx.keep_top_k_on_backend(top_k)

    def _next_best(self, candidates: np.ndarray | None, logits: np.ndarray, q: Dist, token: int) -> int | None:
        """The draft's likeliest token other than token, a deterministic guess: by logit at T=0 (logits
        index candidates when given), by q otherwise (None when q holds token only)."""
        if self.params.greedy:
            second, first = np.argpartition(logits, -2)[-2:]  # the largest last
            ids = candidates if candidates is not None else np.arange(logits.size)
            return int(ids[second] if ids[first] == token else ids[first])
        others = q.ids != token
        return int(q.ids[others][np.argmax(q.probs[others])]) if others.any() else None

    def _catch_up(self, context: Sequence[int]) -> tuple[float, bool, int]:
        """Bring the cache to the context: (the seconds it took when more than the usual step's
        tokens, else 0.0; whether its last token was decoded apart, outside those seconds; the rows
        of it that are the step's own drafting: the usual step's tokens, or a catch-up's last).

        The last token's row gives the first guess, so a catch-up's batch also makes the step's first
        draft decode, and its seconds alone cannot tell the two apart: a small batch costs several
        times a token of a long one. So the drafter's first catch-up decodes the last token alone,
        once, which times a one-token decode (the step's own drafting) apart from the catch-up
        proper: what the planner prices a draft by is measured, not inferred from a batch."""
        # Keep what the cache shares with the context, but always re-decode the last token: its logits
        # are what the first guess is drawn from.
        t0 = time.perf_counter()
        n = self.ctx.reuse_prefix(context[:-1])
        catching_up = len(context) - n > STEP_DECODE
        if catching_up and not self.timed_first:
            self.ctx.decode(context[n:-1], logits="none")
            seconds = time.perf_counter() - t0
            self.ctx.decode(context[-1:], logits="last", sampled=self.sampled)
            self.timed_first = True
            return seconds, True, 1
        self.ctx.decode(context[n:], logits="last", sampled=self.sampled)
        return (time.perf_counter() - t0 if catching_up else 0.0), False, 1 if catching_up else len(context) - n

    def _draw(self, candidates: np.ndarray | None, logits: np.ndarray, rng: np.random.Generator) -> tuple[int, Dist]:
        """A token and the q it was drawn from: from the row's top-k candidates, or its full logits."""
        if candidates is not None:
            q = top_distribution(candidates, logits, self.params)
        elif self.params.greedy:
            return (token := greedy_token(logits)), one_hot(token)
        else:
            q = distribution(logits, self.params)
        return (int(q.ids[0]), q) if self.params.greedy else (sample(q, rng), q)

    def observe(self, n_accepted: int) -> None:
        pass  # the KV cache is re-synced against the context at the next propose()

    def prefill(self, prompt: Sequence[int]) -> None:
        self._load()
        t0 = time.perf_counter()
        n = self.ctx.reuse_prefix(prompt[:-1])
        self.ctx.decode(prompt[n:-1], logits="none")
        self.prefill_s = time.perf_counter() - t0
        self.prefill_tokens = max(0, len(prompt) - 1 - n)

    def offer(self, context: Sequence[int], k: int) -> int:
        return max(0, min(k, self.ctx.n_ctx - len(context) + 1))

    def held(self, context: Sequence[int]) -> int:
        """The tokens of context its cache already holds, which a catch-up keeps (_catch_up): a
        chat's earlier turns, or nothing for a model not yet loaded."""
        return common_prefix_len(self.ctx.tokens, context[:-1])


class NGramDrafter:
    """Prompt lookup: find the most recent earlier occurrence of the last n tokens (n from n_max down
    to n_min, longest first) in the prompt and generated text, and propose the tokens that followed.

    An index from each n-gram to the position it last ended at makes a lookup O(n_max) dict probes,
    whatever the context length; the index grows by O(n_max) per new token, its n_min-grams as each
    token comes and the longer n-grams when a lookup needs them (one finds its n_min-token tail
    indexed): on text that does not repeat, most steps, one n-gram a token. Proposals are
    deterministic, so q is one-hot and the p/q rule stays exact. Costs nothing to run.

    Each lookup also measures how far the match really reaches back (last_match: the tokens before
    the n-gram that agree too, up to match_cap): a copy being repeated matches far back, a phrase that
    merely recurs does not, and the planner keeps acceptance per match length to tell them apart.

    A proposal ends before the first end-of-generation token it would copy (`ends`: the target's,
    e.g. the chat template's end of a turn): a copy of a prompt's last line would otherwise run on
    into the chat template's turn markers, a wide verify's rows spent on guesses never kept. The end
    token itself is not guessed either: where the target would take it, the token the step draws from
    the target's row after the draft is that token anyway (generation ends the same, one verify row
    narrower), and where it would not (a reply that copies its prompt's code and closes a fence the
    prompt did not have), the guess is a rejection that teaches the planner that long copies fail
    near their start, one in each reply that ends a copy.
    """

    name = "ngram"

    def __init__(self, n_min: int = 2, n_max: int = 8, match_cap: int = 64,
                 ends: Callable[[int], bool] | None = None):
        assert 1 <= n_min <= n_max <= match_cap
        self.n_min, self.n_max, self.match_cap = n_min, n_max, match_cap
        self.ends = ends  # whether a token ends generation (None: none does)
        self.tokens: list[int] = []
        self.index: dict[tuple[int, ...], int] = {}  # n-gram -> position of its last token, latest
        self.long_to = 0                              # the tokens whose longer n-grams are indexed (_index_long)
        self.ends_at: list[int] = []                  # positions of end-of-generation tokens, ascending
        self.probes = 0                               # dict lookups made by propose (tests count them)
        self.last_n = 0                               # n-gram size of the last proposal ...
        self.last_ids: list[int] = []                 # ... and its tokens
        self.last_match = 0                           # tokens the last match agrees on, ≤ match_cap
        self.last_at = 0                              # where the last match's occurrence ends (a position) ...
        self.last_end = 0                             # ... in the context that ended here (its length)

    def propose(self, context: Sequence[int], k: int, rng: np.random.Generator | None = None,
                stop: StopRule | None = None, branch: BranchRule | None = None,
                handoff: Handoff | None = None) -> Proposal:
        ids = self._match(context, k)
        return Proposal(ids, [one_hot(t) for t in ids]) if ids else NO_PROPOSAL

    def _match(self, context: Sequence[int], k: int) -> list[int]:
        """The lookup of propose() and offer(): up to k tokens, the match's n, reach and end kept."""
        self._sync(context)
        ids, self.last_n, self.last_match, self.last_at = self._lookup((), k)
        self.last_ids, self.last_end = ids, len(self.tokens)
        return ids

    def continuation(self, context: Sequence[int], draft: Sequence[int], k: int) -> tuple[list[int], int, int]:
        """(up to k tokens that continue context + draft, how far their match reaches back, where its
        occurrence ends): the lookup of propose() at the end of a draft, which is not indexed (the
        target has not judged it), so a copy that begins inside a model's draft can continue it
        (planner.Handoff)."""
        self._sync(context)
        ids, _, reach, at = self._lookup(draft, k)
        return ids, reach, at

    def _lookup(self, extra: Sequence[int], k: int) -> tuple[list[int], int, int, int]:
        """(up to k tokens that followed the latest earlier occurrence of the longest n-gram ending
        the indexed tokens + extra, or the occurrence the last match's copy goes on at (_followed),
        n, how far the match reaches back, the position the occurrence ends at); ([], 0, 0, 0)
        without a match."""
        end = len(self.tokens) + len(extra)
        tail = tuple((self.tokens[-self.n_max:] + list(extra))[-self.n_max:] if extra else self.tokens[-self.n_max:])
        self.probes += 1  # a longer n-gram found implies its n_min-token tail is indexed: where that is
        if tail[len(tail) - self.n_min:] not in self.index:  # not (most steps of text that does not
            return [], 0, 0, 0                                # repeat), the longer ones are not probed
        self._index_long()
        for n in range(min(self.n_max, end), self.n_min - 1, -1):
            self.probes += 1
            pos = self.index.get(tail[len(tail) - n:])
            if pos is not None:
                pos, n, reach = self._followed(pos, n, self._reach(pos, n, extra), end, extra)
                return self._copy(pos + 1, k), n, reach, pos
        return [], 0, 0, 0

    def _followed(self, pos: int, n: int, reach: int, end: int, extra: Sequence[int]) -> tuple[int, int, int]:
        """(occurrence, n, reach): the one the last match's copy goes on at, where the tokens since
        agree with that copy and it reaches back at least as far as the latest occurrence pos; else
        pos's. In a copy of code a line that recurs makes its latest occurrence (the line's earlier
        instance, often in the reply itself) the n-gram's, and following it the copy would jump to
        what came after that instance, a long draft rejected within a few tokens, where the source
        it was copying still agrees as far back as the copy goes. One comparison where the copy
        broke off (its first token disagrees)."""
        at = self.last_at + end - self.last_end
        if not self.last_ids or at == pos or not 0 <= at < len(self.tokens) - 1:
            return pos, n, reach
        agrees = self._reach(at, 0, extra)
        return (at, min(agrees, self.n_max), agrees) if agrees >= max(reach, self.n_min) else (pos, n, reach)

    def _copy(self, start: int, k: int) -> list[int]:
        """Up to k indexed tokens from position start, ending before the first end-of-generation
        token among them (see the class); they may run into the end of the context."""
        end = start + k
        i = bisect.bisect_left(self.ends_at, start)
        if i < len(self.ends_at):
            end = min(end, self.ends_at[i])
        return self.tokens[start:end]

    def _reach(self, pos: int, n: int, extra: Sequence[int] = ()) -> int:
        """How many tokens the earlier occurrence ending at pos shares with the end of the indexed
        tokens + extra (≥ n, at most match_cap): O(match_cap) comparisons."""
        tokens, size = self.tokens, len(self.tokens)
        at = lambda j: tokens[j] if j < size else extra[j - size]  # noqa: E731
        last = size + len(extra) - 1
        while n < self.match_cap and pos - n >= 0 and tokens[pos - n] == at(last - n):
            n += 1
        return n

    def _sync(self, context: Sequence[int], full_check: bool = False) -> None:
        """Extend the index with new context tokens; rebuild when the context is not an extension.

        Within a generation the context only grows, so propose() checks the boundary token (O(1));
        prefill() compares the whole prefix once per generation."""
        n_old = len(self.tokens)
        same = len(context) >= n_old and (not n_old or context[n_old - 1] == self.tokens[-1])
        if not same or (full_check and self.tokens != list(context[:n_old])):
            self.tokens, self.index, self.ends_at, self.long_to, n_old = [], {}, [], 0, 0
            self.last_ids = []  # no copy to follow (_followed) into another text
        tokens, index, n_min = self.tokens, self.index, self.n_min
        for t in context[n_old:]:
            tokens.append(t)
            i = len(tokens) - 1  # t is the continuation of the n-grams ending at i - 1
            if self.ends is not None and self.ends(t):
                self.ends_at.append(i)
            if i >= n_min:
                index[tuple(tokens[i - n_min: i])] = i - 1

    def _index_long(self) -> None:
        """Index the n-grams longer than n_min ending before each token not yet so indexed, in order,
        so that each maps to its latest position as the n_min-grams do (_sync)."""
        tokens, index = self.tokens, self.index
        for i in range(max(self.long_to, self.n_min + 1), len(tokens)):
            window = tuple(tokens[max(i - self.n_max, 0): i])  # every n-gram ending at i - 1 is its tail
            for n in range(self.n_min + 1, min(self.n_max, i) + 1):
                index[window[len(window) - n:]] = i - 1
        self.long_to = len(tokens)

    def observe(self, n_accepted: int) -> None:
        pass  # its acceptance is the planner's to keep (CostTracker, per match bucket)

    def prefill(self, prompt: Sequence[int]) -> None:
        self._sync(prompt, full_check=True)

    def offer(self, context: Sequence[int], k: int) -> int:
        return len(self._match(context, k))  # O(n_max): a lookup, no proposal built
