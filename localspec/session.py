"""A loaded target/draft pair ready to generate, and conversations over it: what the CLI,
benchmarks and server hold.

A `Chat` keeps a conversation. Each turn formats the whole history with the GGUF's chat template;
the target and the draft context each keep the longest token prefix their KV cache shares with it
and evaluate only the rest, so a new turn costs its new tokens, not the conversation so far.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .compat import check_compatible
from .costmodel import FALLBACK_P_MIN, CostTracker
from .drafters import ModelDrafter, NGramDrafter
from .llama import Context, Model, common_prefix_len
from .speculative import GenerationConfig, GenerationError, Piece, SpeculativeDecoder, auto_cap
from .stats import GenerationStats


@dataclass(frozen=True)
class LoadOptions:
    """How to load the pair: context size, threads, layers offloaded to the GPU per model."""

    n_ctx: int = 4096
    threads: int | None = None
    ngl_target: int = 999  # all layers; ignored by a CPU-only build
    ngl_draft: int = 999


def p_min_of(config: GenerationConfig) -> float | None:
    """The draft model's p-min. Auto (None) goes with auto γ; a fixed γ takes the fixed FALLBACK_P_MIN
    (llama.cpp's), so `--gamma N` drafts what it says, and a seed repeats a sampled run token for
    token (auto follows live timings). On the light pair, p-min auto under a fixed γ cut every draft
    to its first token: 0.71x plain decoding where auto itself chose plain decoding. Sampled (T > 0)
    decoding keeps 0.75 too: the draft's top-token confidence says little about a token it sampled, and
    on the F16 target at T=1 auto with p-min auto ran at 1.60x plain against 2.28x for a fixed γ 4."""
    if config.p_min is None and (config.gamma is not None or not config.sampling.greedy):
        return FALLBACK_P_MIN
    return config.p_min


class Pair:
    """A target model, an optional draft model, their contexts and the controller over them."""

    def __init__(self, target: str | Path, draft: str | Path | None, options: LoadOptions = LoadOptions()):
        self.options = options
        self.target_model = Model(target, n_gpu_layers=options.ngl_target)
        self.draft_model = Model(draft, n_gpu_layers=options.ngl_draft) if draft else None
        if self.draft_model is not None:
            check_compatible(self.target_model, self.draft_model)
        self.target_ctx = Context(self.target_model, options.n_ctx, options.threads)
        self.draft_ctx = Context(self.draft_model, options.n_ctx, options.threads) if self.draft_model else None
        self.costs: dict[tuple, CostTracker] = {}  # measured costs and acceptance, kept across generations
        self.ngram = NGramDrafter()

    @classmethod
    def from_contexts(cls, target_ctx: Context, draft_ctx: Context | None = None,
                      options: LoadOptions = LoadOptions()) -> Pair:
        """A Pair over contexts already made (tests pass fakes); their vocabularies are not checked."""
        pair = cls.__new__(cls)
        pair.options, pair.target_ctx, pair.draft_ctx = options, target_ctx, draft_ctx
        pair.target_model = target_ctx.model
        pair.draft_model = draft_ctx.model if draft_ctx is not None else None
        pair.costs, pair.ngram = {}, NGramDrafter()
        return pair

    def decoder(self, config: GenerationConfig) -> SpeculativeDecoder:
        """A controller over this pair; target-only when there is no draft or gamma is 0."""
        kind = self.drafter_kind(config)
        sources = []
        for name in {"model": ["model"], "ngram": ["ngram"], "hybrid": ["ngram", "model"]}.get(kind, []):
            drafter = (self.ngram if name == "ngram"
                       else ModelDrafter(self.draft_ctx, config.sampling, p_min_of(config)))
            # Costs and acceptance differ per drafter, and between greedy and sampled decoding.
            key = (name, config.sampling.greedy)
            costs = self.costs.setdefault(key, CostTracker())
            costs.gamma_max = auto_cap(drafter, config)
            sources.append((drafter, costs))
        return SpeculativeDecoder(self.target_ctx, sources=sources)

    def drafter_kind(self, config: GenerationConfig) -> str | None:
        """Which drafter a generation uses: None for plain decoding."""
        if config.gamma == 0:
            return None
        if config.drafter in ("model", "hybrid") and self.draft_ctx is None:
            raise GenerationError(f"--drafter {config.drafter} needs a draft model; give --draft, or use --drafter ngram")
        if config.drafter == "auto":
            return "hybrid" if self.draft_ctx is not None else "ngram"
        return config.drafter

    def is_instruct(self) -> bool:
        """True when the target has a chat template and calls itself instruct/chat."""
        m = self.target_model
        name = f"{m.meta('general.name') or ''} {m.path.name}".lower()
        return m.chat_template() is not None and ("instruct" in name or "chat" in name)

    def prompt_tokens(self, text: str, chat: bool, system: str | None = None) -> list[int]:
        """The prompt as target tokens, through the chat template when chat is set."""
        if not chat:
            return self.target_model.tokenize(text, add_special=True, parse_special=False)
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return self.chat_tokens(messages)

    def chat_tokens(self, messages: Sequence[dict]) -> list[int]:
        """A conversation as target tokens, formatted by the GGUF's chat template, ready for the reply."""
        m = self.target_model
        return m.tokenize_chat(m.apply_chat_template(messages))

    def check_prompt(self, prompt: Sequence[int]) -> None:
        """Raise GenerationError, naming the limit, unless the prompt leaves room to generate."""
        n_ctx = self.target_ctx.n_ctx
        if len(prompt) >= n_ctx:
            raise GenerationError(f"the prompt has {len(prompt)} tokens but the context holds {n_ctx}; "
                                  "raise --ctx or shorten the prompt")

    def generate(self, prompt: Sequence[int], config: GenerationConfig) -> Iterator[Piece]:
        """Stream pieces of text; `last_stats` holds the counters once the stream ends."""
        decoder = self.decoder(config)
        self.last_stats = decoder.stats
        try:
            yield from decoder.generate(prompt, config)
        finally:
            self.last_stats: GenerationStats = decoder.stats

    def stream(self, prompt: Sequence[int], config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[Piece | Reply]:
        """Stream pieces of text, then one Reply. Setting cancel stops the generation after the
        piece in flight (within one step); the caches stay consistent for the next prompt."""
        self.check_prompt(prompt)
        reused_draft = common_prefix_len(self.draft_ctx.tokens, prompt[:-1]) if self.draft_ctx else None
        parts: list[str] = []
        pieces = self.generate(prompt, config)
        try:
            for piece in pieces:
                parts.append(piece.text)
                yield piece
                if cancel is not None and cancel.is_set():
                    break
        finally:
            pieces.close()
        yield Reply.of(self, "".join(parts), self.last_stats, config, reused_draft)

    def close(self) -> None:
        """Free contexts, then models."""
        for obj in (self.target_ctx, self.draft_ctx, self.target_model, self.draft_model):
            if obj is not None:
                obj.close()


@dataclass(frozen=True)
class Reply:
    """How one generation ended: its text, why it ended, what it reused and the counters."""

    text: str
    finish_reason: str        # stop | length | cancelled
    stats: GenerationStats
    reused_target: int        # prompt tokens found in the target's KV cache
    reused_draft: int | None  # ... in the draft's (None without a draft model)
    context_full: bool        # stopped because the context (n_ctx tokens) was full
    n_ctx: int

    @classmethod
    def of(cls, pair: Pair, text: str, stats: GenerationStats, config: GenerationConfig,
           reused_draft: int | None) -> Reply:
        """The Reply for a finished (or cancelled) generation on pair."""
        stats.finish_reason = stats.finish_reason or "cancelled"  # stopped before it finished
        full = stats.finish_reason == "length" and stats.generated < config.max_tokens
        return cls(text, stats.finish_reason, stats, stats.reused_tokens, reused_draft, full, pair.target_ctx.n_ctx)

    @property
    def evaluated(self) -> int:
        """Prompt tokens the target evaluated this time: all but the reused prefix."""
        return self.stats.prompt_tokens - self.reused_target

    def to_dict(self) -> dict:
        """A JSON-ready summary: the generation's stats plus reuse and why it ended."""
        return {**self.stats.to_dict(), "finish_reason": self.finish_reason, "reused_draft_tokens": self.reused_draft,
                "evaluated_tokens": self.evaluated, "context_full": self.context_full, "n_ctx": self.n_ctx}

    def summary(self) -> str:
        """Readable lines for /stats: the generation's summary and the cache reuse."""
        draft = "no draft model" if self.reused_draft is None else f"draft reused {self.reused_draft}"
        return (f"{self.stats.summary()}\ncache: target reused {self.reused_target} of {self.stats.prompt_tokens} "
                f"prompt tokens and evaluated {self.evaluated}; {draft}")


ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Sequence[dict]) -> list[dict]:
    """Return messages as plain {role, content} dicts, or raise GenerationError naming the bad one."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise GenerationError(f"message {i} must be {{'role': one of {', '.join(ROLES)}, 'content': text}} "
                                  f"(got {m!r:.80})")
        out.append({"role": m["role"], "content": m["content"]})
    return out


class Chat:
    """A conversation over a Pair. send() streams the reply to a new turn, reusing the longest token
    prefix that the target's and the draft's KV caches share with the conversation so far.

        chat = Chat(pair, GenerationConfig(max_tokens=200), system="Answer briefly.")
        for item in chat.send("What is a KV cache?"):
            print(item.text if isinstance(item, Piece) else f"\n{item.summary()}", end="")
    """

    def __init__(self, pair: Pair, config: GenerationConfig = GenerationConfig(), system: str | None = None,
                 messages: Sequence[dict] = ()):
        self.pair, self.config, self.system = pair, config.validate(), system
        self.messages: list[dict] = check_messages(messages)
        self.replies: list[Reply] = []
        self._cancel = threading.Event()

    def send(self, message: str | Sequence[dict], config: GenerationConfig | None = None) -> Iterator[Piece | Reply]:
        """Add a user message (or a list of messages) and stream the reply: Pieces, then one Reply.

        Raises GenerationError, changing nothing, when the conversation no longer fits the context.
        The reply joins the conversation, also when cut short by stop() or by closing the iterator."""
        new = [{"role": "user", "content": message}] if isinstance(message, str) else list(message)
        messages = self.messages + check_messages(new)
        prompt = self.prompt(messages)
        self.check_fits(prompt)
        self._cancel.clear()
        parts: list[str] = []
        reply = None
        try:
            for item in self.pair.stream(prompt, (config or self.config).validate(), self._cancel):
                if isinstance(item, Reply):
                    reply = item
                    break
                parts.append(item.text)
                yield item
        except GeneratorExit:
            self._record(messages, "".join(parts), None)
            raise
        self._record(messages, "".join(parts), reply)
        yield reply

    def prompt(self, messages: Sequence[dict] | None = None) -> list[int]:
        """The tokens of a conversation (default: this one) with the system prompt, ready for a reply."""
        messages = self.messages if messages is None else messages
        system = [{"role": "system", "content": self.system}] if self.system else []
        return self.pair.chat_tokens(system + list(messages))

    def check_fits(self, prompt: Sequence[int]) -> None:
        """Raise GenerationError when a turn's prompt leaves no room for a reply; say how to go on."""
        n_ctx = self.pair.target_ctx.n_ctx
        if len(prompt) >= n_ctx:
            raise GenerationError(
                f"the conversation has {len(prompt)} tokens but the context holds {n_ctx}; nothing was "
                "dropped: save it (/save FILE), then /reset, or restart with a larger --ctx")

    def _record(self, messages: list[dict], text: str, reply: Reply | None) -> None:
        self.messages = messages + [{"role": "assistant", "content": text}]
        if reply is not None:
            self.replies.append(reply)

    def stop(self) -> None:
        """Stop the reply being generated after the piece in flight (safe from a signal handler or thread)."""
        self._cancel.set()

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays; cached tokens are reused where they match)."""
        self.messages, self.replies = [], []

    def save(self, path: str | Path) -> Path:
        """Write the conversation and per-turn stats to a JSON file; return its path."""
        path = Path(path).expanduser()
        system = [{"role": "system", "content": self.system}] if self.system else []
        data = {"target": str(self.pair.target_model.path),
                "draft": str(self.pair.draft_model.path) if self.pair.draft_model else None,
                "messages": system + self.messages, "turns": [r.to_dict() for r in self.replies]}
        path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path
