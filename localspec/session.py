"""A loaded target/draft pair ready to generate (Pair, its one sources factory make_sources) and how
one generation ended (Reply): what the CLI, benchmarks, tune and the server hold. Conversations over a
Pair are chat.py's."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from . import warmstart
from .compat import check_compatible
from .config import GenerationConfig, GenerationError, check_fits, literal
from .drafters import Drafter, ModelDrafter, NGramDrafter
from .devices import keep_alive, local_devices, rpc_endpoints
from .context import Context, LazyContext
from .llama import LlamaError, Model, NoChatTemplate, common_prefix_len, gpu_offload_supported, threads_of
from .placement import Placement, place_pair
from .planner import source_names
from .planning.budget import worth_preparing
from .tracker import CostTracker
from .sampling import is_whole, whole_type
from .speculative import Finished, Piece, SpeculativeDecoder
from .stats import GenerationStats
from .treeplan import MAX_BRANCHES

# What a generation asking for a drafter that needs a draft model is refused with on a pair without one
# (drafter_kind): templates of LIBRARY_NAMES' keys, which each shell names its own way (config.Worded).
NEEDS_DRAFT = {"model": "{model_drafter} needs a draft model; {no_draft}",
               "hybrid": "{hybrid_drafter} needs a draft model; {no_draft}"}


@dataclass(frozen=True)
class LoadOptions:
    """How to load the pair: context size, threads, layers offloaded to the GPU per model."""

    n_ctx: int = 4096
    threads: int | None = None
    ngl_target: int = 999  # all layers; ignored by a CPU-only build
    ngl_draft: int = 999
    device_target: tuple[str, ...] | None = None  # device names (`localspec devices`); None: llama.cpp's choice
    device_draft: tuple[str, ...] | None = None
    rpc: tuple[str, ...] | None = None  # HOST:PORT of `localspec rpc-server`s; the target goes there
    tensor_split: tuple[float, ...] | None = None  # the target's share per device
    warm_start: bool = True  # plan from the measurements an earlier process saved for this setup
    warm_up: bool = True  # on a GPU, decode each verify width once at load (Context.warm_up)


def make_sources(names: Sequence[str], draft_ctx: Context | None, config: GenerationConfig,
                 trackers: dict, ngram: NGramDrafter | None = None) -> list[tuple[Drafter, CostTracker]]:
    """The (drafter, tracker) sources for drafter names, in order. Trackers are kept in `trackers`
    across generations, one per drafter and per greedy/sampled decoding (costs and acceptance differ)."""
    sources = []
    for name in names:
        if name == "ngram":
            drafter = ngram if ngram is not None else NGramDrafter()
        else:
            drafter = ModelDrafter(draft_ctx, config.sampling)
        sources.append((drafter, trackers.setdefault((name, config.sampling.greedy), CostTracker())))
    return sources


def rows_on_gpu(placed: Placement, n_gpu_layers: int, n_layer: int) -> bool:
    """Whether a model's output rows are made on a GPU of this machine, where llama.cpp's backend
    sampler chain should judge them (config.rows_on_backend): every layer there, the output layer
    with them (llama.cpp counts it as one past the last). Not on the CPU (numpy reads a row faster
    than the chain runs) and not on an RPC server, where the chain is slower than numpy reading the
    row (scripts/bench_rpc.py), likely because its results are read back in round trips of their own.
    Such a model is also warmed up at load (Context.warm_up): partly on the CPU, the warm decodes
    would cost the CPU's prompt speed over a thousand tokens, and an RPC server may be a CPU."""
    return placed.where != "CPU" and not placed.remote and n_gpu_layers > n_layer


def token_ids(prompt: Sequence[int], n_vocab: int) -> bool:
    """Whether every entry of prompt is a whole number in 0..n_vocab-1: each type once, then the least
    and the greatest, in C (not a Python test per token, which is slow on a long prompt)."""
    kinds_whole = all(whole_type(kind) for kind in set(map(type, prompt)))
    return kinds_whole and (len(prompt) == 0 or 0 <= min(prompt) and max(prompt) < n_vocab)


class Pair:
    """A target model, an optional draft model, their contexts and the controller over them."""

    def __init__(self, target: str | Path, draft: str | Path | None, options: LoadOptions = LoadOptions()):
        o = options
        where_t, where_d = place_pair(Path(target), Path(draft) if draft else None, o.ngl_target, o.ngl_draft,
                                     o.device_target, o.device_draft, o.rpc)
        target_model = Model(target, o.ngl_target, devices=where_t.handles, tensor_split=o.tensor_split)
        target_model.where = where_t.where
        for endpoint in rpc_endpoints():
            keep_alive(endpoint)  # ggml's own connections have no timeout
        # A model draft's trees are verified in one decode, a branch per sequence of the target's cache.
        target_ctx = Context(target_model, options.n_ctx, options.threads, n_seq_max=MAX_BRANCHES if draft else 1)
        target_ctx.rows_offloaded = rows_on_gpu(where_t, o.ngl_target, target_model.n_layer)
        if o.warm_up and target_ctx.rows_offloaded:  # a GPU's first decode at a width loads its kernels: not in a verify
            target_ctx.warm_up()
        draft_ctx = None
        if draft:
            # the draft's context as long as the target's (--ctx 0: the target model's own length)
            draft_ctx = LazyContext(lambda: self._load_draft(Path(draft), where_d), target_ctx.n_ctx, Path(draft),
                                    where_d.where)
        self._wrap(target_ctx, draft_ctx, options)

    def _load_draft(self, path: Path, where_d: Placement) -> Context:
        """Load the draft model and its context (LazyContext calls this once). The vocabulary check is
        skipped where a plan was saved for this very pair: only a compatible pair ever generated."""
        o = self.options
        model = Model(path, o.ngl_draft, devices=where_d.handles)
        model.where = where_d.where
        if not self.warm:
            try:
                check_compatible(self.target_model, model)
            except Exception:
                model.close()
                raise
        ctx = Context(model, self.target_ctx.n_ctx, o.threads)
        ctx.rows_offloaded = rows_on_gpu(where_d, o.ngl_draft, model.n_layer)
        if o.warm_up and ctx.rows_offloaded:  # (its catch-ups after a copy decode up to the lookup's widest draft)
            ctx.warm_up(logits="last")
        return ctx

    def draft_deferred(self) -> bool:
        """Whether the draft model is left unloaded until a generation asks for it: only where this
        setup's saved measurements say it does not pay here (planner.worth_preparing, for each
        decoding mode saved). Its first use then loads it, at a cost the planner's budget counts."""
        saved = [t for (name, _), t in self.trackers.items() if name == "model"]
        cap = GenerationConfig().gamma_max
        return bool(saved) and not any(worth_preparing(t, cap) for t in saved)

    @classmethod
    def from_contexts(cls, target_ctx: Context, draft_ctx: Context | None = None,
                      options: LoadOptions = LoadOptions()) -> Pair:
        """A Pair over contexts made elsewhere (any objects with Context's surface; the draft's may be
        a LazyContext, loaded at once unless saved measurements defer it)."""
        pair = cls.__new__(cls)
        pair._wrap(target_ctx, draft_ctx, options)
        return pair

    def _wrap(self, target_ctx: Context, draft_ctx: Context | LazyContext | None, options: LoadOptions) -> None:
        self.options = options
        self.target_ctx, self.draft_ctx = target_ctx, draft_ctx
        self.target_model = target_ctx.model
        # the draft's file and where it runs, known before it is loaded (a LazyContext says them)
        draft = draft_ctx if isinstance(draft_ctx, LazyContext) else getattr(draft_ctx, "model", None)
        self.draft_path: Path | None = draft.path if draft is not None else None
        # where each model runs, as --stats and --json name it ("CPU", "CUDA0", "RPC0[host:port]")
        self.placement = {role: getattr(m, "where", "CPU") for role, m in
                          (("target", self.target_model), ("draft", draft)) if m is not None}
        self.ngram = NGramDrafter(ends=self.target_model.is_eog)  # a copy ends where generation would
        # One generation at a time owns the caches (_steps): a later one supersedes it, and each step
        # runs under the lock, so a stream resumed after another generation, or one in another
        # thread, raises instead of decoding over the other's cache.
        self._lock, self._generation, self._closed = threading.Lock(), 0, False
        self.plan_key = self._plan_key() if options.warm_start and warmstart.enabled() else None
        # measured costs and acceptance, kept across generations (and processes, with a plan key)
        self.trackers: dict[tuple, CostTracker] = warmstart.load(self.plan_key) if self.plan_key else {}
        self.warm = bool(self.trackers)
        if isinstance(draft_ctx, LazyContext) and not self.draft_deferred():
            draft_ctx.get()  # as llama.cpp does: load errors surface now, not in a first generation

    @property
    def draft_model(self) -> Model | None:
        """The draft Model once loaded (None without a draft, or while it is deferred: see draft_path)."""
        ctx = self.draft_ctx
        return ctx.model if ctx is not None and getattr(ctx, "loaded", True) else None

    def placement_now(self) -> dict[str, str]:
        """Where each model runs, as --json and the server's /v1/models say it: placement, except that a
        draft left unloaded (draft_deferred) runs nowhere yet: 'not loaded (CPU if it is)', as --stats
        says it. Same keys and string values either way."""
        if self.draft_path is None or self.draft_model is not None:
            return dict(self.placement)
        return {**self.placement, "draft": f"not loaded ({self.placement['draft']} if it is)"}

    def _plan_key(self) -> dict:
        o = self.options
        gpu = gpu_offload_supported() and bool(local_devices() or o.rpc)  # an RPC build alone offloads nothing
        placement = {"ngl_target": o.ngl_target if gpu else 0, "ngl_draft": o.ngl_draft if gpu else 0,
                     "threads": threads_of(o.threads)}
        if o.rpc or o.device_target or o.device_draft or o.tensor_split:  # other devices, other costs
            placement.update(where=self.placement, tensor_split=list(o.tensor_split or ()))
        return warmstart.plan_key(self.target_model.path, self.draft_path, placement)

    def sources(self, config: GenerationConfig) -> list[tuple[Drafter, CostTracker]]:
        """The drafters this config runs on this pair, each with the tracker it keeps."""
        return make_sources(source_names(self.drafter_kind(config)), self.draft_ctx, config, self.trackers, self.ngram)

    def decoder(self, config: GenerationConfig) -> SpeculativeDecoder:
        """A controller over this pair; target-only when there is no draft or gamma is 0."""
        return SpeculativeDecoder(self.target_ctx, self.sources(config))

    def drafter_kind(self, config: GenerationConfig) -> str | None:
        """Which drafter a generation uses: None for plain decoding; GenerationError for one that needs
        the draft model this pair lacks."""
        if config.gamma == 0:
            return None
        if config.drafter in NEEDS_DRAFT and self.draft_ctx is None:
            raise GenerationError.naming(NEEDS_DRAFT[config.drafter], "drafter")
        if config.drafter == "auto":
            return "hybrid" if self.draft_ctx is not None else "ngram"
        return config.drafter

    def chats_by_default(self) -> bool:
        """True when the target's GGUF has a chat template: a prompt then goes through it unless the
        caller asks for raw text, as llama-cli (its conversation mode), Ollama and LM Studio do. The
        model's name is not consulted: gemma-3-1b-it, Qwen3-0.6B and Ollama's hash-named blobs say
        neither "instruct" nor "chat", and given the bare prompt they answer garbage."""
        return self.target_model.chat_template() is not None

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        draft = self.draft_path.name if self.draft_path else None
        state = "closed" if self._closed else f"n_ctx={self.target_ctx.n_ctx}"
        return f"Pair(target={self.target_model.path.name!r}, draft={draft!r}, {state})"

    def _open(self) -> None:
        """Raise GenerationError once close() has freed the models (llama.cpp would be handed freed memory)."""
        if self._closed:
            raise GenerationError("this Pair is closed; make a new Pair to generate again")

    def prompt_tokens(self, text: str, chat: bool, system: str | None = None) -> list[int]:
        """The prompt as target tokens, through the chat template when chat is set; a raw prompt's
        special tokens (<|im_start|> written out) are parsed, as llama.cpp parses them."""
        self._open()
        if not chat:
            return self.target_model.tokenize_prompt(text)
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
        return self.chat_tokens(messages)

    def chat_tokens(self, messages: Sequence[dict]) -> list[int]:
        """A conversation as target tokens, formatted by the GGUF's chat template, ready for the reply;
        GenerationError where the target has none or it fails, naming how to send the text as is."""
        self._open()
        m = self.target_model
        try:
            text = m.apply_chat_template(messages)
        except NoChatTemplate:
            raise GenerationError.naming(f"{literal(m.path.name)} has no chat template; use {{raw}} to send the "
                                         "prompt as is") from None
        except LlamaError as e:  # the template's own raise_exception(), or jinja's error: named in e
            raise GenerationError.naming(f"{literal(str(e))}; use {{raw}}") from None
        return m.tokenize_prompt(text)

    def check_prompt(self, prompt: Sequence[int]) -> None:
        """Raise ContextFull, naming the limit, unless the prompt leaves room to generate; GenerationError
        for a token id the target's vocabulary lacks (llama.cpp's decode only fails, 'code -1')."""
        self._open()
        n_vocab = self.target_model.n_vocab
        if not token_ids(prompt, n_vocab):  # then find the first bad one, to name it
            i, t = next((i, t) for i, t in enumerate(prompt) if not is_whole(t) or not 0 <= t < n_vocab)
            raise GenerationError(f"prompt[{i}] = {t!r} is not a token id of the target's vocabulary "
                                  f"(0..{n_vocab - 1}); give token ids, e.g. from pair.prompt_tokens(text, chat)")
        check_fits(len(prompt), self.target_ctx.n_ctx)

    def stream(self, prompt: Sequence[int], config: GenerationConfig,
               cancel: threading.Event | None = None) -> Iterator[Piece | Reply]:
        """Stream pieces of text, then one Reply. Setting cancel stops the generation after the
        piece in flight (within one step); the caches stay consistent for the next prompt. One
        generation at a time: a stream resumed after a later one started on this Pair (another thread's,
        or one begun while this was paused) raises GenerationError."""
        with self._lock:
            self.check_prompt(prompt)
            self._generation += 1
            mine = self._generation
            reused_draft = common_prefix_len(self.draft_ctx.tokens, prompt[:-1]) if self.draft_ctx else None
        parts: list[str] = []
        for item in self._steps(self.decoder(config).generate(prompt, config, cancel), mine):
            if isinstance(item, Finished):
                item.stats.warm_start = self.warm
                item.stats.draft_loaded = getattr(self.draft_ctx, "loaded", True) if self.draft_ctx else None
                self._count_idle(prompt, config, item.stats)
                if self.plan_key and item.stats.steps:
                    warmstart.save(self.plan_key, self.trackers)
                yield Reply.of(self, "".join(parts), item.stats, config, reused_draft)
                return
            parts.append(item.text)
            yield item

    def _steps(self, items: Iterator, mine: int) -> Iterator:
        """items, each one made under the lock while generation `mine` is still the latest."""
        while True:
            with self._lock:
                if self._generation != mine or self._closed:
                    raise GenerationError("a later generation on this Pair has taken its caches (or it was "
                                          "closed); finish or close one stream before starting the next")
                item = next(items, None)
            if item is None:
                return
            yield item

    def _count_idle(self, prompt: Sequence[int], config: GenerationConfig, stats: GenerationStats) -> None:
        """Add a generation's seconds to the draft model's idle time unless it took in this prompt."""
        tracker = self.trackers.get(("model", config.sampling.greedy))
        if tracker is None or self.draft_ctx is None:
            return
        ready = common_prefix_len(self.draft_ctx.tokens, prompt[:-1]) >= len(prompt) - 1
        tracker.idle_s = 0.0 if ready else tracker.idle_s + stats.prefill_s + stats.total_s

    def close(self) -> None:
        """Free contexts, then models (a second close does nothing); the Pair cannot be used after."""
        with self._lock:  # not while a step of a stream in another thread runs (_steps)
            if self._closed:
                return
            self._closed = True
            draft_model = self.draft_model
            for obj in (self.target_ctx, self.draft_ctx, self.target_model, draft_model):
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
