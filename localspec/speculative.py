"""The controller: draft γ tokens, verify them in ONE target decode, apply the rule, roll back.

Each step the target context holds every token but the last one emitted (`pending`). The planner
picks the drafter, γ and the draft's stop rule; the target decodes [pending, d_1 .. d_γ] with logits
for all γ+1 rows; row i is the target's distribution for the slot of d_{i+1}, row γ the bonus slot.
The rule (localspec.sampling) accepts n drafts and emits one more token, and the target's cache is cut
back to pending + the n accepted drafts. With γ = 0 the same loop is plain decoding: the baseline
every benchmark compares against.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np

from .config import GenerationConfig, GenerationError, check_fits, rows_on_backend
from .drafters import NO_PROPOSAL, Drafter, Proposal
from .context import Context, SAMPLED_ROWS_MAX
from .llama import TextStream
from .planner import Planner
from .planning.plans import Plan
from .tracker import CostTracker
from .rule_tree import Tree, accept_tree, accept_tree_greedy
from .sampling import (accept_drafts, accept_greedy, candidate_dist, distribution, greedy_token,
                       token_logprobs)
from .stats import GenerationStats, Stopwatch


class Piece(NamedTuple):
    """The text an emitted token released: token, from_draft when a drafter guessed it. A token may
    release none (part of a UTF-8 character, text held back as the possible start of a stop string):
    the next piece then carries its text too, and n_tokens counts every token the piece covers,
    n_drafted those a drafter guessed (None: from_draft alone). The last piece may hold text held back
    to the end, token -1. With config.logprobs set every token has its piece (text or none), logprob
    its log-probability under the target and top the config.logprobs likeliest (token,
    log-probability) pairs at its position (see token_logprobs)."""

    text: str
    token: int
    from_draft: bool
    logprob: float | None = None
    top: tuple[tuple[int, float], ...] | None = None
    n_tokens: int = 1
    n_drafted: int | None = None

    @property
    def drafted(self) -> int:
        """How many of the tokens this piece covers a drafter guessed."""
        return int(self.from_draft) if self.n_drafted is None else self.n_drafted


class Finished(NamedTuple):
    """The last item of every generation: its counters (finish_reason says why it ended)."""

    stats: GenerationStats


class Rows(Sequence):
    """A lazy sequence: row i is computed on first access (the rule reads only what it needs)."""

    def __init__(self, n: int, compute: Callable[[int], object]):
        self.n, self.compute = n, compute

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.compute(i)


class StopStrings:
    """Holds back text that may be the start of a stop string; finds the first full match."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False

    def feed(self, text: str) -> tuple[str, bool]:
        """Return (text safe to print, stopped)."""
        buf = self.held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held, self.stopped = "", True
            return buf[: min(hits)], True
        keep = max((self._partial(buf, s) for s in self.stops), default=0)
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    @staticmethod
    def _partial(buf: str, stop: str) -> int:
        for n in range(min(len(stop) - 1, len(buf)), 0, -1):
            if buf.endswith(stop[:n]):
                return n
        return 0


class SpeculativeDecoder:
    """Generates from the target, exactly, with guesses from drafters (or none: target-only)."""

    def __init__(self, target: Context, sources: Sequence[tuple[Drafter, CostTracker]] = ()):
        """sources: drafters, each with its own cost tracker, tried in order (the hybrid: n-gram, model)."""
        self.target = target
        self.sources = list(sources)

    def generate(self, prompt: Sequence[int], config: GenerationConfig,
                 cancel: threading.Event | None = None) -> Iterator[Piece | Finished]:
        """Yield the text of each emitted token, then one Finished with the counters. A set cancel
        ends the generation after the piece in flight (finish_reason "cancelled")."""
        config.validate()
        if not prompt:
            raise GenerationError("the prompt is empty; give some text to continue")
        check_fits(len(prompt), self.target.n_ctx)
        stats = GenerationStats(prompt_tokens=len(prompt), gamma_mode="auto" if config.gamma is None else str(config.gamma),
                                drafter="+".join(d.name for d, _ in self.sources) or "none")
        planner = Planner(self.sources, config, max_branches=self.target.n_seq_max if config.trees else 1)
        with Stopwatch(stats, "prefill_s"):
            self._prefill(prompt, stats, planner)
        run = _Run(self.target, planner, config, stats, cancel)
        t0 = time.perf_counter()
        try:
            yield from run.loop(list(prompt))
        finally:
            stats.total_s = time.perf_counter() - t0
            stats.exploration_s = {self.sources[i][0].name: s for i, s in planner.budget.spent.items()}
        yield Finished(stats)

    def _prefill(self, prompt: Sequence[int], stats: GenerationStats, planner: Planner) -> None:
        stats.reused_tokens = self.target.reuse_prefix(prompt[:-1])
        self.target.decode(prompt[stats.reused_tokens : -1], logits="none")
        planner.note_intake(len(prompt) - 1 - stats.reused_tokens)
        for i, (drafter, _) in enumerate(self.sources):
            if planner.wants_prefill(i, prompt):
                with Stopwatch(stats, "draft_prefill_s"):
                    drafter.prefill(prompt)
                planner.note_prefill(i)


class _Run:
    """The state of one generation's decode loop."""

    def __init__(self, target: Context, planner: Planner, config: GenerationConfig, stats: GenerationStats,
                 cancel: threading.Event | None):
        self.target, self.planner, self.config, self.stats, self.cancel = target, planner, config, stats, cancel
        # no seed asked for: one drawn and reported (stats.seed), so that a sample can be repeated with
        # --seed, as llama.cpp prints the seed it drew
        stats.seed = config.seed if config.seed is not None else secrets.randbits(32)
        self.rng = np.random.default_rng(stats.seed)
        self.text, self.stops = TextStream(target.model), StopStrings(config.stop)
        self.unreleased = (0, 0)  # tokens emitted since the last piece, and how many a drafter guessed
        self.backend = rows_on_backend(target, config)
        # the most tokens a step may draft: its verify (the pending token, the draft and a tree's
        # siblings, one each beside up to max_branches - 1 chain tokens) in one batch of the target's
        self.batch_room = target.n_batch - planner.max_branches

    def loop(self, tokens: list[int]) -> Iterator[Piece]:
        stats = self.stats
        while not stats.finish_reason:
            room = self.target.n_ctx - len(tokens)  # the verify batch fills positions len-1 .. len-1+γ
            if room < 0:
                stats.finish_reason = "length"
                break
            # ... and its rows, with a tree's siblings, one decode's batch
            room = min(room, self.config.max_tokens - stats.generated - 1, self.batch_room)
            plan = self.planner.plan(tokens, room)
            n_accepted, emitted, rows = self._step(tokens, plan)
            yield from self._emit(tokens, emitted, n_accepted, rows)
        if not self.stops.stopped:  # print what was held back for a stop string that never came
            safe, _ = self.stops.feed(self.text.flush())
            if safe + self.stops.held:
                n, drafted = self.unreleased
                yield Piece(safe + self.stops.held, -1, False, n_tokens=n, n_drafted=drafted)

    def _emit(self, tokens: list[int], emitted: list[int], n_accepted: int, rows: list[int]) -> Iterator[Piece]:
        """Append emitted tokens until EOS, a stop string, max_tokens or a cancel; yield their text.
        rows[i]: the verify row that judged emitted[i]."""
        stats, model = self.stats, self.target.model
        for i, token in enumerate(emitted):
            if model.is_eog(token):
                stats.finish_reason = "stop"
                return
            tokens.append(token)
            stats.generated += 1
            safe, stopped = self.stops.feed(self.text.push(token))
            n, drafted = self.unreleased  # what the next piece covers, this token included
            n, drafted = n + 1, drafted + (i < n_accepted)
            self.unreleased = (0, 0)
            if self.config.logprobs is not None:  # a Piece per token, text or not: row i judged emitted[i]
                yield Piece(safe, token, i < n_accepted, *token_logprobs(self.target.logits(rows[i]), token,
                                                                         self.config.logprobs))
            elif safe:
                yield Piece(safe, token, i < n_accepted, n_tokens=n, n_drafted=drafted)
            else:
                self.unreleased = (n, drafted)  # no text released: the next piece carries them
            if stopped:
                stats.finish_reason = "stop"
            elif stats.generated >= self.config.max_tokens:
                stats.finish_reason = "length"
            elif self.cancel is not None and self.cancel.is_set():
                stats.finish_reason = "cancelled"
            if stats.finish_reason:
                return

    def _step(self, tokens: list[int], plan: Plan) -> tuple[int, list[int], list[int]]:
        """One draft -> verify -> rule -> rollback step; returns (accepted, emitted, the verify row
        that judged each emitted token)."""
        drafter = self.planner.sources[plan.source][0] if plan.source is not None else None
        t0 = time.perf_counter()
        proposal = (drafter.propose(tokens, plan.gamma, self.rng, plan.stop, plan.branch, plan.handoff)
                    if drafter else NO_PROPOSAL)
        t1 = time.perf_counter()
        start = len(tokens) - 1
        sampled = False
        if proposal.parents is None:
            batch = [tokens[-1], *proposal.ids]
            sampled = self._sampled(len(batch))
            self.target.decode(batch, logits="all", sampled=sampled)
        else:  # a tree's rows are judged in numpy: the backend chain serves sequence 0 only
            self.target.decode_tree(tokens[-1], proposal.ids, proposal.parents)
        t2 = time.perf_counter()
        emitted, path = self._judge(proposal, sampled)
        if proposal.parents is None:
            self.target.truncate(start + 1 + len(path))
        else:
            self.target.keep_path(path)
        n_accepted = len(path)
        if proposal.ids:
            drafter.observe(n_accepted)
        t3 = time.perf_counter()
        self._account(plan, proposal, path, (t0, t1, t2, t3), drafter, emitted)
        if self.config.trace:
            self.stats.trace.append((start, [tokens[-1], *proposal.ids], 1 + n_accepted))
        return n_accepted, emitted, [0, *(node + 1 for node in path)]

    def _account(self, plan: Plan, proposal: Proposal, path: list[int], times: tuple, drafter,
                 emitted: list[int]) -> None:
        """Count the step in the stats and teach the planner what it measured."""
        t0, t1, t2, t3 = times
        self.stats.draft_s += t1 - t0
        self.stats.verify_s += t2 - t1
        self.stats.tree_steps += proposal.parents is not None
        taken = proposal.copies_taken(path) if proposal.copies else None
        self.stats.record_step(len(proposal.ids), len(path), drafter.name if proposal.ids else None,
                               proposal.tail or proposal.copies, taken)
        if self.planner.exploring is not None:  # a plain step measured again counts as the source's probe it displaced
            name = self.planner.sources[self.planner.exploring][0].name
            self.stats.probes[name] = self.stats.probes.get(name, 0) + 1
        self.planner.record(plan, proposal, len(path), t1 - t0, t2 - t1, t3 - t2, path, emitted)

    def _sampled(self, n_rows: int) -> bool:
        """Whether this verify's rows arrive judged by the backend chain (installed on first use); a
        verify wider than llama.cpp's sampling graph allows (SAMPLED_ROWS_MAX) is judged in numpy."""
        return (self.backend and n_rows <= SAMPLED_ROWS_MAX
                and self.target.sample_on_backend(self.config.sampling))

    def _judge(self, proposal: Proposal, sampled: bool) -> tuple[list[int], list[int]]:
        """Apply the greedy rule or the p/q rule to the verify batch's rows: (emitted, accepted nodes);
        a chain's nodes are its positions. Row 0 is the root's; row i + 1 judges what follows node i.
        The rows are the backend chain's tokens or candidate lists when sampled, else numpy on the
        logits; both apply llama.cpp's filters."""
        n, params, target = len(proposal.ids) + 1, self.config.sampling, self.target
        if params.greedy:
            argmax = Rows(n, target.sampled_token if sampled else lambda i: greedy_token(target.logits(i)))
        elif sampled:
            p = Rows(n, lambda i: candidate_dist(*target.sampled_probs(i)))
        else:
            p = Rows(n, lambda i: distribution(target.logits(i), params))
        if proposal.parents is not None:
            tree = Tree(proposal.ids, proposal.parents, proposal.q)
            return accept_tree_greedy(tree, argmax) if params.greedy else accept_tree(tree, p, self.rng)
        if params.greedy:
            emitted, n_accepted = accept_greedy(proposal.ids, argmax)
        else:
            emitted, n_accepted = accept_drafts(proposal.ids, proposal.q, p, self.rng)
        return emitted, list(range(n_accepted))
