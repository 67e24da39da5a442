"""The bindings layer: with context.py (contexts) and devices.py (ggml's devices and RPC), the only
modules that import llama_cpp.

Thin wrappers over llama-cpp-python's low-level ctypes API: load a model (on the devices asked
for), tokenize and detokenize, vocabulary facts, chat templates and quantize. Contexts (decode,
logits, rollback, trees, backend sampling) are in context.py.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import re
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as lc  # before numpy: see localspec/__init__.py
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from .config import Worded

GGUF_MAGIC = b"GGUF"
SPLIT_TAIL = re.compile(r"-(\d{5})-of-(\d{5})(\.gguf)$", re.IGNORECASE)  # model-00002-of-00003.gguf
_SILENT_LOG = lc.llama_log_callback(lambda level, text, user_data: None)
_backend_ready = False
# Set by devices.add_rpc_servers: the devices a Model offloads to when none are named, so that RPC
# servers hold only what was placed there (llama.cpp's own default takes every registered device).
default_devices: Callable[[], list[int]] | None = None


class LlamaError(Worded):
    """A user-facing llama.cpp failure; str() is one line naming the value and the fix. One about a load
    option (LlamaError.about, .naming) names it as the Pair's LoadOptions do; a shell words it with its
    own names (config.Worded)."""


class NoChatTemplate(LlamaError):
    """The GGUF has no chat template to format a conversation with (Model.apply_chat_template)."""


def init_backend(verbose: bool = False) -> None:
    """Initialise llama.cpp once per process; silence its log unless verbose."""
    global _backend_ready
    if _backend_ready:
        return
    if not verbose and not os.environ.get("LOCALSPEC_VERBOSE"):
        lc.llama_log_set(_SILENT_LOG, ctypes.c_void_p(0))
    lc.llama_backend_init()
    _backend_ready = True


@contextlib.contextmanager
def held_interrupts():
    """Hold Ctrl-C (and SIGTERM) while llama.cpp works, then raise KeyboardInterrupt once it returns.

    llama.cpp logs through a Python callback (_SILENT_LOG) all along a model's load or a quantize;
    an interrupt raised inside a ctypes callback is printed and dropped, and the command went on to
    the end. Yields the list a signal is noted in: a model load's progress callback reads it to stop
    loading at once. Off the main thread (where signals are not delivered) it holds nothing, and a
    signal the process ignores (nohup) stays ignored."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) != signal.SIG_IGN}
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if noted:
        raise KeyboardInterrupt


def amx_guard() -> bool:
    """True when weights must not go to ggml's extra (repacked) buffers: its AMX kernels are compiled in.

    ggml's AMX matmul segfaults on some AMX machines (llama.cpp issue #20824) on the first decode of
    Q4_0/Q4_1/Q8_0/Q4_K models. scripts/setup.sh builds without AMX; for other
    builds, skipping the extra buffers avoids the AMX path (and CPU repacking with it: slower, but
    correct). LOCALSPEC_ALLOW_AMX=1 keeps them; 0 or unset, the guard (any other value is refused as a
    command starts: config.check_environment)."""
    compiled = b"AMX_INT8 = 1" in (lc.llama_print_system_info() or b"")
    return compiled and os.environ.get("LOCALSPEC_ALLOW_AMX", "0") != "1"


def check_gguf_file(path: Path) -> None:
    """Raise LlamaError unless path is an existing file that starts with the GGUF magic."""
    try:
        if path.is_dir():
            raise LlamaError(f"{path} is a directory, not a model file; give the path of a .gguf file in it")
        if not path.is_file():
            raise LlamaError(f"Model file not found: {path}; check the path or run `localspec models pull`")
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:  # the file, or a folder above it, that this user may not read
        raise LlamaError(unreadable(path, e)) from None
    if magic != GGUF_MAGIC:
        raise LlamaError(f"Not a GGUF file: {path} (starts with {magic!r}); give a .gguf model file")


def unreadable(path: Path, e: OSError) -> str:
    """The error for a model file that cannot be read (its permissions, or its folder's)."""
    return (f"Cannot read {path} ({e.strerror or e}); check its permissions and its folder's, or run as a "
            "user who can read it")


def split_parts(path: Path) -> list[Path]:
    """The files of the split model whose part path is (model-00001-of-00003.gguf: parts 1 to 3, named
    as llama.cpp's llama_split_path names them beside the first), or [path] for a model in one file."""
    path = Path(path)
    split = SPLIT_TAIL.search(path.name)
    if not split:
        return [path]
    stem, count, ext = path.name[:split.start()], split.group(2), split.group(3)
    return [path.with_name(f"{stem}-{i:05d}-of-{count}{ext}") for i in range(1, int(count) + 1)]


def load_failure(path: Path) -> str:
    """Why llama.cpp may have refused path, and the fix: a split model given by a later part, or one
    with parts missing beside the first, else a damaged file."""
    parts = split_parts(path)
    missing = [p.name for p in parts if not p.is_file()]
    if len(parts) > 1 and path.name != parts[0].name:
        why = (f"it is part {parts.index(path) + 1} of a model split in {len(parts)} files; "
               f"give its first part, {parts[0]}")
    elif missing:
        why = (f"it is the first of {len(parts)} parts of a split model, and {', '.join(missing)} "
               f"{'is' if len(missing) == 1 else 'are'} missing beside it; download every part")
    else:
        why = ("the file is truncated or corrupt, or its architecture is unsupported; download it again "
               "(a catalog model: `localspec models pull NAME`)")
    return f"llama.cpp could not load {path}: {why}"


class Model:
    """A loaded GGUF model and its vocabulary."""

    ptr = None  # set once loaded; close() and __del__ are safe on a failed load

    def __init__(self, path: str | Path, n_gpu_layers: int = 0, vocab_only: bool = False,
                 devices: Sequence[int] | None = None, tensor_split: Sequence[float] | None = None):
        """devices: ggml_backend_dev_t handles (devices.py) to offload to, [] for none, None for llama.cpp's
        default (every GPU and RPC device); tensor_split: the share of layers per device, in that order."""
        self.path = Path(path)
        check_gguf_file(self.path)
        init_backend()
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.vocab_only = vocab_only
        if amx_guard():
            params.use_extra_bufts = False
        if vocab_only:
            devices = []  # no weights: no device is asked anything (a dead RPC server would abort)
        elif devices is None and default_devices is not None:
            devices = default_devices()
        self._placement = place(params, devices, tensor_split)  # arrays llama.cpp reads while loading
        with held_interrupts() as noted:
            # llama.cpp stops loading where its progress callback returns false: a held Ctrl-C
            progress = lc.llama_progress_callback(lambda done, data: not noted)  # alive through the load
            params.progress_callback = progress
            self.ptr = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise LlamaError(load_failure(self.path))
        self.vocab = lc.llama_model_get_vocab(self.ptr)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_layer = lc.llama_model_n_layer(self.ptr)
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
        """Format chat messages with the GGUF's own Jinja template, as the Hub's tokenizer would; NoChatTemplate
        where there is none, LlamaError where it fails (the fix is its caller's to give: Pair.chat_tokens)."""
        tmpl = self.chat_template()
        if tmpl is None:
            raise NoChatTemplate(f"{self.path.name} has no chat template")
        formatter = Jinja2ChatFormatter(tmpl, eos_token=self.token_text(self.eos()).decode("utf-8", "replace"),
                                        bos_token=self.token_text(self.bos()).decode("utf-8", "replace"),
                                        add_generation_prompt=add_assistant)
        try:
            return formatter(messages=list(messages)).prompt
        except Exception as e:  # jinja2 errors, or the template's own raise_exception()
            raise LlamaError(f"the chat template of {self.path.name} failed ({e})") from None

    def tokenize_prompt(self, prompt: str) -> list[int]:
        """Tokenize a prompt as llama.cpp's llama-cli and llama-server do: special tokens written in it
        (a chat template's markers, or a raw prompt's hand-written ones) parsed, BOS added only where
        the text does not begin with it."""
        bos = self.token_text(self.bos()).decode("utf-8", "replace")
        add_bos = self.adds_bos() and not (bos and prompt.startswith(bos))
        return self.tokenize(prompt, add_special=add_bos, parse_special=True)


def place(params, devices: Sequence[int] | None, tensor_split: Sequence[float] | None) -> tuple:
    """Set the model params' NULL-terminated device list and tensor split; return the arrays (keep them)."""
    dev_array = split_array = None
    if devices is not None:
        dev_array = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
        params.devices = ctypes.cast(dev_array, ctypes.c_void_p)  # typed c_void_p by llama-cpp-python
    if tensor_split:
        n_max = lc.llama_max_devices()
        if len(tensor_split) > n_max:
            raise LlamaError.about("tensor_split", f"has {len(tensor_split)} parts; this build takes at most {n_max}")
        split_array = (ctypes.c_float * n_max)(*tensor_split)
        params.tensor_split = split_array
    return dev_array, split_array


class TextStream:
    """Incremental detokenizer: multi-byte UTF-8 split across tokens prints once complete."""

    def __init__(self, model: Model):
        self.model = model
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self.model.piece(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


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


def threads_of(n: int | None) -> int:
    """The CPU threads --threads n asks for: n where positive, else the default (None, or llama.cpp's
    -t -1 and 0)."""
    return n if n is not None and n > 0 else default_threads()


QUANT_TYPES = {
    "F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
    "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
    "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32,
}


# The tensor types an output layer may be re-stored as (llama-quantize's --output-tensor-type), by
# ggml's names: a file type such as Q4_K_M stores most tensors as Q4_K.
TENSOR_TYPES = {name: getattr(lc, f"GGML_TYPE_{name}") for name in (
    "F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")}


def check_types(quant: str, output: str | None = None) -> None:
    """Raise LlamaError naming quant (a file type, QUANT_TYPES) or output (a tensor type, TENSOR_TYPES)
    where llama.cpp has no such type, and the types it has."""
    if quant.upper() not in QUANT_TYPES:
        raise LlamaError(f"Unknown quantization type {quant!r}; choose one of {', '.join(QUANT_TYPES)}")
    if output is not None and output.upper() not in TENSOR_TYPES:
        raise LlamaError(f"Unknown output tensor type {output!r}; choose one of {', '.join(TENSOR_TYPES)}")


def quantize(src: Path, dst: Path, quant: str, threads: int | None = None, output: str | None = None) -> None:
    """Write src re-stored as quant to dst (llama_model_quantize with allow_requantize); output: the
    output layer's tensor type (TENSOR_TYPES), None for llama.cpp's choice for quant."""
    check_types(quant, output)
    check_gguf_file(Path(src))
    init_backend()
    params = lc.llama_model_quantize_default_params()
    params.ftype = QUANT_TYPES[quant.upper()]
    if output is not None:
        params.output_tensor_type = TENSOR_TYPES[output.upper()]
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    with held_interrupts():
        rc = lc.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise LlamaError(f"llama.cpp refused to convert {src} to {quant} (code {rc}): the file may be "
                         "truncated or corrupt (`localspec models check` tells), or cannot be re-stored as "
                         f"{quant}; try another type")


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
