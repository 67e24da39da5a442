"""The controller: draft γ tokens, verify them in ONE target decode, apply the rule, roll back.

Each step the target context holds every token but the last one emitted (`pending`). The target
decodes [pending, d_1 .. d_γ] with logits for all γ+1 rows; row i is the target's distribution for
the slot of d_{i+1}, row γ the bonus slot. The rule (localspec.sampling) accepts n drafts and emits
one more token, and the target's cache is cut back to pending + the n accepted drafts. With γ = 0
the same loop is plain decoding: the baseline every benchmark compares against.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np

from .drafters import Drafter
from .llama import Context, TextStream
from .sampling import SamplingParams, accept_drafts, accept_greedy, distribution, greedy_token
from .costmodel import CostTracker
from .stats import GenerationStats, Stopwatch


DRAFTERS = ("auto", "model", "ngram", "hybrid")


class GenerationError(ValueError):
    """A request that cannot be generated; str() names the value and the fix."""


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate: length, sampling, draft length, seed and stop strings."""

    max_tokens: int = 256
    gamma: int | None = None  # None: chosen before each step by the cost model ("auto")
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    trace: bool = False  # record each verify batch (tests replay them)
    gamma_max: int = 8   # the most that auto may draft from a draft model
    # ... and from n-gram lookup: its drafts cost nothing to make, only verify width, and on a CPU the
    # target verifies wide batches at a fraction of a token's cost (2 cores: 16 tokens at 26 ms each,
    # 1 token at 96 ms), so a long copied span is worth proposing whole, as llama.cpp's ngram-simple does.
    ngram_gamma_max: int = 16
    drafter: str = "auto"  # model | ngram | hybrid | auto (hybrid when a draft model is loaded, else ngram)
    p_min: float | None = None  # the draft model stops below this confidence; None: where it stops paying

    def validate(self) -> "GenerationConfig":
        """Return self, or raise GenerationError naming the bad value and the fix."""
        if self.gamma is not None and self.gamma < 0:
            raise GenerationError(f"gamma must be >= 0 or auto (got {self.gamma}); use 0 for plain decoding")
        if self.drafter not in DRAFTERS:
            raise GenerationError(f"unknown drafter {self.drafter!r}; choose one of {', '.join(DRAFTERS)}")
        for name in ("gamma_max", "ngram_gamma_max"):
            if getattr(self, name) < 0:
                raise GenerationError(f"{name} must be >= 0 (got {getattr(self, name)})")
        if self.p_min is not None and not 0 <= self.p_min < 1:
            raise GenerationError(f"p_min must be in [0, 1) (got {self.p_min}); "
                                  "use 0 to never stop a draft early, or auto")
        if self.max_tokens < 1:
            raise GenerationError(f"max_tokens must be >= 1 (got {self.max_tokens})")
        try:
            self.sampling.validate()
        except ValueError as e:
            raise GenerationError(str(e)) from None
        return self


def auto_cap(drafter: Drafter, config: GenerationConfig) -> int:
    """The most that auto γ may draft from this drafter."""
    return config.ngram_gamma_max if drafter.name == "ngram" else config.gamma_max


class Piece(NamedTuple):
    """Text produced by one emitted token; from_draft when a drafter guessed it."""

    text: str
    token: int
    from_draft: bool


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
    """Generates from the target, exactly, with guesses from a drafter (or none: target-only)."""

    def __init__(self, target: Context, drafter: Drafter | None = None, costs: CostTracker | None = None,
                 sources: Sequence[tuple[Drafter, CostTracker]] | None = None):
        """sources: drafters, each with its own cost tracker, tried in order (the hybrid: n-gram, model)."""
        self.target = target
        if sources is None:
            sources = [(drafter, costs if costs is not None else CostTracker())] if drafter is not None else []
        self.sources = list(sources)
        self.stats = GenerationStats()
        self.trace: list[tuple[int, list[int], int]] = []  # (start position, batch, tokens kept)

    def generate(self, prompt: Sequence[int], config: GenerationConfig) -> Iterator[Piece]:
        """Yield the text of each emitted token; self.stats holds the counters afterwards."""
        config.validate()
        self._check_prompt(prompt)
        self.stats = stats = GenerationStats(prompt_tokens=len(prompt))
        stats.drafter = "+".join(d.name for d, _ in self.sources) or "none"
        stats.gamma_mode = "auto" if config.gamma is None else str(config.gamma)
        self.trace = []
        rng = np.random.default_rng(config.seed)
        with Stopwatch(stats, "prefill_s"):
            stats.reused_tokens = self.target.reuse_prefix(prompt[:-1])
            self.target.decode(prompt[stats.reused_tokens : -1], logits="none")
            for drafter, costs in self.sources:
                if config.gamma != 0 and (config.gamma or costs.could_pay()):
                    drafter.prefill(prompt)  # as llama.cpp does; skipped where costs rule drafting out
        tokens = list(prompt)
        text, stops = TextStream(self.target.model), StopStrings(config.stop)
        t0 = time.perf_counter()
        try:
            yield from self._loop(tokens, config, rng, text, stops)
        finally:
            stats.total_s = time.perf_counter() - t0

    def _loop(self, tokens, config, rng, text: TextStream, stops: StopStrings) -> Iterator[Piece]:
        stats = self.stats
        while not stats.finish_reason:
            source, gamma = self._plan(tokens, config)
            if gamma < 0:
                stats.finish_reason = "length"
                break
            _, n_accepted, emitted = self._step(tokens, source, gamma, config, rng)
            yield from self._emit(tokens, emitted, n_accepted, config, text, stops)
        if not stops.stopped:  # print what was held back for a stop string that never came
            safe, _ = stops.feed(text.flush())
            if safe + stops.held:
                yield Piece(safe + stops.held, -1, False)

    def _emit(self, tokens, emitted, n_accepted, config, text, stops) -> Iterator[Piece]:
        """Append emitted tokens until EOS, a stop string or max_tokens; yield their text."""
        stats, model = self.stats, self.target.model
        for i, token in enumerate(emitted):
            if model.is_eog(token):
                stats.finish_reason = "stop"
                return
            tokens.append(token)
            stats.generated += 1
            safe, stopped = stops.feed(text.push(token))
            if safe:
                yield Piece(safe, token, i < n_accepted)
            if stopped:
                stats.finish_reason = "stop"
                return
            if stats.generated >= config.max_tokens:
                stats.finish_reason = "length"
                return

    def _plan(self, tokens: list[int], config: GenerationConfig) -> tuple[int | None, int]:
        """(source index or None, draft length) for this step, within the context and the tokens still
        wanted; gamma -1 when the context is full. Fixed gamma: the first source with a guess to offer.
        Auto: each source's own cost model, and the one predicting the most tokens/s (plain included)."""
        room = self.target.n_ctx - len(tokens)  # the verify batch fills positions len-1 .. len-1+γ
        if room < 0:
            return None, -1
        cap = min(room, config.max_tokens - self.stats.generated - 1)
        best: tuple[int | None, int, float] = (None, 0, 0.0)
        for i, (drafter, costs) in enumerate(self.sources if cap > 0 else []):
            limit = min(cap, auto_cap(drafter, config) if config.gamma is None else config.gamma, drafter.offer(tokens, cap))
            if limit <= 0:
                continue
            if config.gamma is not None:
                return i, limit
            gamma, tps = costs.plan(limit)
            if gamma and tps > best[2]:
                best = (i, gamma, tps)
        return best[0], best[1]

    def _step(self, tokens: list[int], source: int | None, gamma: int, config: GenerationConfig,
              rng) -> tuple[list[int], int, list[int]]:
        """One draft -> verify -> rule -> rollback step; returns (drafts, accepted, emitted)."""
        stats = self.stats
        drafter = self.sources[source][0] if source is not None else None
        t0 = time.perf_counter()
        if drafter is not None and getattr(drafter, "p_min", 0.0) is None:  # p-min auto: from its costs
            drafter.stop = self.sources[source][1].draft_stop(gamma)
        draft_ids, q = drafter.propose(tokens, gamma, rng) if drafter and gamma else ([], [])
        t1 = time.perf_counter()
        start = len(tokens) - 1
        self.target.decode([tokens[-1], *draft_ids], logits="all")
        t2 = time.perf_counter()
        emitted, n_accepted = self._judge(draft_ids, q, config.sampling, rng)
        self.target.truncate(start + 1 + n_accepted)
        if draft_ids:
            drafter.observe(n_accepted)
        t3 = time.perf_counter()
        stats.draft_s += t1 - t0
        stats.verify_s += t2 - t1
        stats.record_step(len(draft_ids), n_accepted, drafter.name if draft_ids else None)
        # A catch-up over tokens generated while not drafting is a one-off, not the draft's per-token cost.
        catchup = getattr(drafter, "sync_s", 0.0) if draft_ids else 0.0
        confidences = getattr(drafter, "confidences", ()) if draft_ids else ()
        for i, (_, costs) in enumerate(self.sources):
            if i == source or not draft_ids:  # a plain step teaches every source the cost of verify(1)
                costs.record(len(draft_ids), n_accepted, t1 - t0 - catchup, t2 - t1, t3 - t2, confidences)
        if config.trace:
            self.trace.append((start, [tokens[-1], *draft_ids], 1 + n_accepted))
        return draft_ids, n_accepted, emitted

    def _judge(self, draft_ids, q, params: SamplingParams, rng) -> tuple[list[int], int]:
        """Apply the greedy rule or the p/q rule to the verify batch's logits."""
        n = len(draft_ids) + 1
        logits = self.target.logits
        if params.greedy:
            return accept_greedy(draft_ids, Rows(n, lambda i: greedy_token(logits(i))))
        return accept_drafts(draft_ids, q, Rows(n, lambda i: distribution(logits(i), params)), rng)

    def _check_prompt(self, prompt: Sequence[int]) -> None:
        if not prompt:
            raise GenerationError("the prompt is empty; give some text to continue")
        if len(prompt) >= self.target.n_ctx:
            raise GenerationError(
                f"the prompt has {len(prompt)} tokens but the context holds {self.target.n_ctx}; "
                "raise --ctx or shorten the prompt")
