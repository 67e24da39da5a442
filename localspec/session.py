"""A loaded target/draft pair ready to generate: what the CLI, benchmarks and server hold."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .compat import check_compatible
from .costmodel import CostTracker
from .drafters import ModelDrafter, NGramDrafter
from .llama import Context, Model
from .speculative import GenerationConfig, GenerationError, Piece, SpeculativeDecoder
from .stats import GenerationStats


@dataclass(frozen=True)
class LoadOptions:
    """How to load the pair: context size, threads, layers offloaded to the GPU per model."""

    n_ctx: int = 4096
    threads: int | None = None
    ngl_target: int = 999  # all layers; ignored by a CPU-only build
    ngl_draft: int = 999


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

    def decoder(self, config: GenerationConfig) -> SpeculativeDecoder:
        """A controller over this pair; target-only when there is no draft or gamma is 0."""
        kind = self.drafter_kind(config)
        sources = []
        for name in {"model": ["model"], "ngram": ["ngram"], "hybrid": ["ngram", "model"]}.get(kind, []):
            drafter = self.ngram if name == "ngram" else ModelDrafter(self.draft_ctx, config.sampling)
            # Costs and acceptance differ per drafter, and between greedy and sampled decoding.
            key = (name, config.sampling.greedy)
            sources.append((drafter, self.costs.setdefault(key, CostTracker(gamma_max=config.gamma_max))))
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
        m = self.target_model
        if not chat:
            return m.tokenize(text, add_special=True, parse_special=False)
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return m.tokenize_chat(m.apply_chat_template(messages))

    def generate(self, prompt: Sequence[int], config: GenerationConfig) -> Iterator[Piece]:
        """Stream pieces of text; `last_stats` holds the counters once the stream ends."""
        decoder = self.decoder(config)
        self.last_stats = decoder.stats
        try:
            yield from decoder.generate(prompt, config)
        finally:
            self.last_stats: GenerationStats = decoder.stats

    def close(self) -> None:
        """Free contexts, then models."""
        for obj in (self.target_ctx, self.draft_ctx, self.target_model, self.draft_model):
            if obj is not None:
                obj.close()
