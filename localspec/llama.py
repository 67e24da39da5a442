"""The bindings layer: the only module that imports llama_cpp.

Thin wrappers over llama-cpp-python's low-level ctypes API: load a model, decode a batch with
logits only for the rows asked for, view a row of logits without copying, drop KV cells after a
position (rollback), tokenize and detokenize, vocabulary facts, chat templates and quantize.
"""

from __future__ import annotations

import codecs
import ctypes
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import llama_cpp as lc  # before numpy: see localspec/__init__.py
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

import numpy as np

GGUF_MAGIC = b"GGUF"
_SILENT_LOG = lc.llama_log_callback(lambda level, text, user_data: None)
# The most output rows one decode may ask a backend sampler chain to judge (llama.cpp sizes the
# sampling graph by it): a verify of up to this many rows can arrive sampled.
SAMPLED_ROWS_MAX = 64
_backend_ready = False


class LlamaError(Exception):
    """A user-facing llama.cpp failure; str() is one line naming the value and the fix."""


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process; silence its log unless verbose."""
    global _backend_ready
    if _backend_ready:
        return
    if not verbose and not os.environ.get("LOCALSPEC_VERBOSE"):
        lc.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
    lc.llama_backend_init()
    _backend_ready = True


def amx_guard() -> bool:
    """True when weights must not go to ggml's extra (repacked) buffers: its AMX kernels are compiled in.

    ggml's AMX matmul segfaults on some AMX machines (llama.cpp issue #20824) on the first decode of
    Q4_0/Q4_1/Q8_0/Q4_K models. scripts/setup.sh builds without AMX; for other
    builds, skipping the extra buffers avoids the AMX path (and CPU repacking with it: slower, but
    correct). LOCALSPEC_ALLOW_AMX=1 keeps them."""
    compiled = b"AMX_INT8 = 1" in (lc.llama_print_system_info() or b"")
    return compiled and not os.environ.get("LOCALSPEC_ALLOW_AMX")


def check_gguf_file(path: Path) -> None:
    """Raise LlamaError unless path is an existing file that starts with the GGUF magic."""
    if not path.is_file():
        raise LlamaError(f"Model file not found: {path}; check the path or run `localspec models pull`")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise LlamaError(f"Not a GGUF file: {path} (starts with {magic!r}); give a .gguf model file")


class Model:
    """A loaded GGUF model and its vocabulary."""

    ptr = None  # set once loaded; close() and __del__ are safe on a failed load

    def __init__(self, path: str | Path, n_gpu_layers: int = 0, vocab_only: bool = False):
        self.path = Path(path)
        check_gguf_file(self.path)
        init_backend()
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        if amx_guard():
            params.use_extra_bufts = False
        self.ptr = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise LlamaError(
                f"llama.cpp could not load {self.path}: the file is truncated or corrupt, or its "
                "architecture is unsupported; download it again (`localspec models pull`)"
            )
        self.vocab = lc.llama_model_get_vocab(self.ptr)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self._pieces: dict[int, bytes] = {}

    def close(self) -> None:
        """Free the model (contexts made from it must be closed first)."""
        if self.ptr:
            lc.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):
        self.close()

    # --- metadata -------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string, or None."""
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_model_meta_val_str(self.ptr, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def description(self) -> str:
        """llama.cpp's one-line description, e.g. 'qwen2 1.5B Q4_K - Medium'."""
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self.ptr, buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def n_ctx_train(self) -> int:
        return lc.llama_model_n_ctx_train(self.ptr)

    def chat_template(self) -> str | None:
        """The chat template stored in the GGUF, or None."""
        tmpl = lc.llama_model_chat_template(self.ptr, None)
        return tmpl.decode("utf-8", "replace") if tmpl else None

    # --- vocabulary -----------------------------------------------------------------------
    def vocab_type(self) -> int:
        return lc.llama_vocab_type(self.vocab)

    def bos(self) -> int:
        return lc.llama_vocab_bos(self.vocab)

    def eos(self) -> int:
        return lc.llama_vocab_eos(self.vocab)

    def adds_bos(self) -> bool:
        return bool(lc.llama_vocab_get_add_bos(self.vocab))

    def adds_eos(self) -> bool:
        return bool(lc.llama_vocab_get_add_eos(self.vocab))

    def token_text(self, token: int) -> bytes:
        """The raw vocabulary text of a token (as stored, not detokenized)."""
        return lc.llama_vocab_get_text(self.vocab, token) or b""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>, ...)."""
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Text -> token ids, adding BOS as the model's vocabulary asks when add_special."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            buf = (lc.llama_token * -n)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, -n, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token prints as (control tokens print nothing); cached."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            cached = self._pieces[token] = buf.raw[:n]
        return cached

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Token ids -> text (UTF-8 errors replaced)."""
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def apply_chat_template(self, messages: Sequence[dict], add_assistant: bool = True) -> str:
        """Format chat messages with the GGUF's own Jinja template, as the Hub's tokenizer would."""
        tmpl = self.chat_template()
        if tmpl is None:
            raise LlamaError(f"{self.path.name} has no chat template; use --raw to send the prompt as is")
        formatter = Jinja2ChatFormatter(tmpl, eos_token=self.token_text(self.eos()).decode("utf-8", "replace"),
                                        bos_token=self.token_text(self.bos()).decode("utf-8", "replace"),
                                        add_generation_prompt=add_assistant)
        try:
            return formatter(messages=list(messages)).prompt
        except Exception as e:  # jinja2 errors, or the template's own raise_exception()
            raise LlamaError(f"the chat template of {self.path.name} failed ({e}); use --raw") from None

    def tokenize_chat(self, prompt: str) -> list[int]:
        """Tokenize a templated prompt: special tokens parsed, BOS added only if the template lacks it."""
        bos = self.token_text(self.bos()).decode("utf-8", "replace")
        add_bos = self.adds_bos() and not (bos and prompt.startswith(bos))
        return self.tokenize(prompt, add_special=add_bos, parse_special=True)


class TextStream:
    """Incremental detokenizer: multi-byte UTF-8 split across tokens prints once complete."""

    def __init__(self, model: Model):
        self.model = model
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self.model.piece(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class Context:
    """A llama.cpp context over one sequence; `tokens` mirrors what its KV cache holds."""

    ptr = None

    def __init__(self, model: Model, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512):
        self.model = model
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = n_batch
        threads = n_threads or default_threads()
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        params.n_outputs_max_per_seq = SAMPLED_ROWS_MAX
        self.ptr = lc.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise LlamaError(f"llama.cpp could not create a context of {n_ctx} tokens; lower --ctx")
        # llama.cpp pads n_ctx up (to 256) but clamps n_batch to the n_ctx asked for: honour both.
        self.n_ctx = min(n_ctx, lc.llama_n_ctx(self.ptr))
        self.n_batch = lc.llama_n_batch(self.ptr)
        self.memory = lc.llama_get_memory(self.ptr)
        self._batch = lc.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []
        self._rows: list[int] = []  # batch index of each output row of the last decode
        self._chain = None  # the backend sampler chain installed for sequence 0, if any
        self.chain_key: tuple | None = None  # (temperature, top_k, top_p, min_p) of that chain

    def close(self) -> None:
        if self.ptr:
            lc.llama_batch_free(self._batch)
            lc.llama_free(self.ptr)
            self.ptr = None
        if self._chain is not None:
            lc.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self):
        self.close()

    def decode(self, tokens: Sequence[int], logits: str = "last", sampled: bool = False) -> None:
        """Append tokens to the KV cache; output rows for 'last', 'all' or 'none' of them. sampled: the
        rows arrive judged by the installed backend chain (sampled_*) instead of as logits."""
        assert logits in ("last", "all", "none")
        assert not sampled or self._chain is not None, "decode(sampled=True) needs a backend chain installed"
        if not sampled and logits != "none" and self._chain is not None:
            self._install(None)  # raw logits again: llama.cpp skips them for rows its chain judges
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise LlamaError(f"context full: {len(self.tokens)} + {len(tokens)} tokens > --ctx {self.n_ctx}")
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            is_last_chunk = start + self.n_batch >= len(tokens)
            self._decode_chunk(chunk, logits if is_last_chunk else "none")

    def _decode_chunk(self, tokens: Sequence[int], logits: str) -> None:
        b, n, pos0 = self._batch, len(tokens), len(self.tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = pos0 + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = logits == "all" or (logits == "last" and i == n - 1)
        b.n_tokens = n
        rc = lc.llama_decode(self.ptr, b)
        if rc != 0:
            raise LlamaError(f"llama_decode failed with code {rc} at position {pos0}; lower --ctx or --ngl")
        self.tokens.extend(tokens)
        self._rows = list(range(n)) if logits == "all" else [n - 1] if logits == "last" else []

    def logits(self, row: int = -1) -> np.ndarray:
        """A no-copy float32 [V] view of an output row of the last decode; valid until the next decode."""
        assert self._chain is None, "rows decoded with sampled=True have no logits"
        ptr = lc.llama_get_logits_ith(self.ptr, self._rows[row])
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))

    # --- backend sampling: llama.cpp's sampler chain judges each output row inside the decode ------
    def sample_on_backend(self, params) -> bool:
        """Install llama.cpp's sampler chain for sequence 0: top_k, top_p, min_p, temperature, then dist
        (its probabilities), or greedy at temperature 0. params: a SamplingParams. False where the
        chain cannot run on this device. Rows then arrive as sampled_token / sampled_probs."""
        return self._install(("chain", params.temperature, params.top_k, params.top_p, params.min_p))

    def keep_top_k_on_backend(self, k: int) -> bool:
        """Install a chain of top_k alone: each row arrives as its k largest logits (sampled_logits)."""
        return self._install(("top_k", k))

    def _install(self, key: tuple | None) -> bool:
        """Make the chain described by key (None: no chain) the one for sequence 0; the next decode
        re-plans its graph after a change, so callers keep one chain per generation."""
        if key == self.chain_key:
            return True
        old, self._chain, self.chain_key = self._chain, None, None
        lc.llama_set_sampler(self.ptr, 0, None)
        if old is not None:
            lc.llama_sampler_free(old)
        if key is None:
            return True
        chain = _sampler_chain(key)
        if not lc.llama_set_sampler(self.ptr, 0, chain):
            lc.llama_sampler_free(chain)
            return False
        self._chain, self.chain_key = chain, key
        return True

    def sampled_token(self, row: int) -> int:
        """The token the greedy chain chose for an output row of the last sampled decode."""
        return lc.llama_get_sampled_token_ith(self.ptr, self._rows[row])

    def sampled_probs(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """No-copy views (candidate ids int32 [n], probabilities float32 [n]) of a row of the last
        sampled decode; filtered-out candidates have probability 0. Valid until the next decode."""
        return self._sampled_row(row, lc.llama_get_sampled_probs_count_ith, lc.llama_get_sampled_probs_ith)

    def sampled_logits(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        """No-copy views (candidate ids int32 [n], logits float32 [n]) of a row of the last sampled
        decode under a top_k chain: the row's k largest logits, in no particular order."""
        return self._sampled_row(row, lc.llama_get_sampled_logits_count_ith, lc.llama_get_sampled_logits_ith)

    def _sampled_row(self, row: int, count, values) -> tuple[np.ndarray, np.ndarray]:
        """(candidate ids, values) of a sampled row, read through llama.cpp's count and values getters."""
        i = self._rows[row]
        n = count(self.ptr, i)
        if n == 0:
            raise LlamaError("llama.cpp's backend sampler produced no rows on this device; "
                             "set LOCALSPEC_BACKEND_SAMPLING=0 to sample in numpy")
        # Where no filter chose candidates, llama.cpp returns the whole vocabulary in order: ids 0 .. n-1.
        ids = np.ctypeslib.as_array(lc.llama_get_sampled_candidates_ith(self.ptr, i), shape=(n,))
        return ids, np.ctypeslib.as_array(values(self.ptr, i), shape=(n,))

    def truncate(self, n: int) -> None:
        """Drop the KV cells at positions >= n (rollback)."""
        if n >= len(self.tokens):
            return
        if not lc.llama_memory_seq_rm(self.memory, 0, n, -1):
            raise LlamaError(f"{self.model.path.name} cannot roll back its cache (recurrent model?); "
                             "speculative decoding needs a transformer model")
        del self.tokens[n:]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix shared with tokens, drop the rest; return its length."""
        n = common_prefix_len(self.tokens, tokens)
        self.truncate(n)
        return n


def _sampler_chain(key: tuple):
    """A new llama.cpp sampler chain for a key of Context._install: ("top_k", k) alone, or ("chain",
    temperature, top_k, top_p, min_p): top_k, top_p, min_p, temperature, dist; greedy at temperature 0."""
    if key[0] == "top_k":
        links = [lc.llama_sampler_init_top_k(key[1])]
    elif key[1] == 0:
        links = [lc.llama_sampler_init_greedy()]
    else:
        _, temperature, top_k, top_p, min_p = key
        links = [lc.llama_sampler_init_top_k(top_k)] if top_k > 0 else []
        links += [lc.llama_sampler_init_top_p(top_p, 1)] if top_p < 1.0 else []
        links += [lc.llama_sampler_init_min_p(min_p, 1)] if min_p > 0.0 else []
        # dist's own draw is unused: only its probabilities are read
        links += [lc.llama_sampler_init_temp(temperature), lc.llama_sampler_init_dist(0)]
    chain = lc.llama_sampler_chain_init(lc.llama_sampler_chain_default_params())
    for link in links:
        lc.llama_sampler_chain_add(chain, link)
    return chain


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    # Called every draft step over the whole context: compare slices (C speed) and bisect to the first
    # difference, rather than a Python loop over every token.
    a, b = list(a), list(b)
    lo, hi = 0, min(len(a), len(b))  # a[:lo] == b[:lo]; the first difference, if any, is before hi
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def build_info() -> str:
    """The llama.cpp build: bindings version and the CPU/backend features it was compiled with."""
    return f"llama-cpp-python {lc.__version__}: {(lc.llama_print_system_info() or b'').decode(errors='replace')}"


def gpu_offload_supported() -> bool:
    """True when llama.cpp was built with a GPU backend (layers can be offloaded)."""
    return bool(lc.llama_supports_gpu_offload())


def default_threads() -> int:
    """Physical-ish core count, as llama.cpp's tools default to."""
    return max(1, min(os.cpu_count() or 1, 8))


QUANT_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
    "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32,
}


def quantize(src: Path, dst: Path, quant: str, threads: int | None = None) -> None:
    """Write src re-stored as quant to dst (llama_model_quantize with allow_requantize)."""
    ftype = QUANT_TYPES.get(quant.upper())
    if ftype is None:
        raise LlamaError(f"Unknown quantization type {quant!r}; choose one of {', '.join(QUANT_TYPES)}")
    check_gguf_file(Path(src))
    init_backend()
    params = lc.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise LlamaError(f"llama.cpp refused to convert {src} to {quant} (code {rc}); try another type")


def quant_name(file_type: str | None) -> str:
    """'15' -> 'Q4_K_M': the name of a GGUF general.file_type value."""
    names = {str(v): k for k, v in QUANT_TYPES.items()}
    return names.get(file_type or "", f"type {file_type}" if file_type else "?")


@dataclass(frozen=True)
class ModelInfo:
    path: Path
    size: int
    architecture: str
    quant: str
    n_vocab: int


def model_info(path: Path) -> ModelInfo:
    """Facts shown by `models list`, from a vocabulary-only load (fast, no weights read)."""
    m = Model(path, vocab_only=True)
    try:
        return ModelInfo(Path(path), Path(path).stat().st_size, m.meta("general.architecture") or "?",
                         quant_name(m.meta("general.file_type")), m.n_vocab)
    finally:
        m.close()
