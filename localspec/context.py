"""The bindings layer's llama.cpp context: one sequence's KV cache (several for a token tree), batch
decode with logits for the rows asked for, no-copy views of them, rollback, and backend sampling (a
sampler chain that judges each output row inside the decode).

Part of the bindings layer with llama.py and devices.py (the only modules that import llama_cpp).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as lc  # before numpy: see localspec/__init__.py

import numpy as np

from .devices import watchdog
from .llama import LlamaError, Model, common_prefix_len, held_interrupts, threads_of
from .sampling import SamplingParams

# The most output rows one decode may ask a backend sampler chain to judge (llama.cpp sizes the
# sampling graph by it): a verify of up to this many rows can arrive sampled, the widest an n-gram
# draft makes (config.ngram_gamma_max + 1) among them.
SAMPLED_ROWS_MAX = 128
MAX_THREADS = 512  # GGML_MAX_N_THREADS
# The decode widths whose kernels differ on llama.cpp's CUDA backend: a matrix-vector kernel per
# width up to 8 (ggml-cuda/mmvq.cuh, MMVQ_MAX_BATCH_SIZE), then one tile width J per multiple of 8
# (ggml-cuda/mmq.cuh: the least J covering the batch) up to SAMPLED_ROWS_MAX.
WARM_WIDTHS = tuple(range(1, 9)) + tuple(range(16, SAMPLED_ROWS_MAX + 1, 8))


class Context:
    """A llama.cpp context; `tokens` mirrors what its KV cache holds in sequence 0. With n_seq_max > 1
    it can also verify a token tree in one decode (decode_tree, then keep_path)."""

    ptr = None
    _batch = None  # (class defaults: close() runs from __del__ on a context whose __init__ raised,
    _chain = None  # an interrupt held while llama.cpp made it among them)
    _tree: tuple[list[list[int]], int, list[int]] | None = None  # the last decode_tree, until keep_path

    def __init__(self, model: Model, n_ctx: int = 4096, n_threads: int | None = None, n_batch: int = 512,
                 n_seq_max: int = 1):
        # Named as the Pair's LoadOptions name them (a shell words them with its own: config.Worded)
        if n_ctx < 0:
            raise LlamaError.about("n_ctx", f"must be >= 0 (got {n_ctx}); 0 takes the model's own context length")
        if 0 < n_ctx < n_seq_max:  # llama.cpp reserves a row per sequence and aborts where n_ctx holds fewer
            raise LlamaError.about("n_ctx", f"{n_ctx} is smaller than the {n_seq_max} sequences a draft's token "
                                   f"trees are verified in; give {n_seq_max} or more")
        if n_threads is not None and n_threads > MAX_THREADS:  # ggml's thread pool: more crashes the process
            raise LlamaError.about("threads", f"{n_threads} is more than llama.cpp's {MAX_THREADS}; give at most "
                                   f"{MAX_THREADS}, or 0 for the default")
        self.model = model
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx  # 0: the length the model was trained for, as llama.cpp's -c 0
        params.n_batch = params.n_ubatch = n_batch
        threads = threads_of(n_threads)
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        # One cell pool for every sequence: sequence 0 keeps the whole n_ctx, a tree node's cell can be in
        # several sequences, and llama.cpp splits a batch of coupled sequences only over a unified cache.
        params.n_seq_max = n_seq_max
        params.kv_unified = True
        params.n_outputs_max_per_seq = SAMPLED_ROWS_MAX
        with held_interrupts():  # llama.cpp logs through a Python callback while it allocates
            self.ptr = lc.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise LlamaError.naming(f"llama.cpp could not create a context of {n_ctx} tokens; lower {{n_ctx}}",
                                    "n_ctx")
        # llama.cpp pads n_ctx up (to 256) but clamps n_batch to the n_ctx asked for: honour both.
        made = lc.llama_n_ctx(self.ptr)
        self.n_ctx = min(n_ctx, made) if n_ctx else made
        self.n_batch = lc.llama_n_batch(self.ptr)
        self.memory = lc.llama_get_memory(self.ptr)
        self.n_seq_max = lc.llama_n_seq_max(self.ptr)
        self._batch = lc.llama_batch_init(self.n_batch, 0, self.n_seq_max)
        self.tokens: list[int] = []
        self._rows: list[int] = []  # batch index of each output row of the last decode
        self._chain = None  # the backend sampler chain installed for sequence 0, if any
        self.rows_offloaded = False  # whether output rows are made off the CPU (set where the model is placed)
        self.chain_key: tuple | None = None  # (temperature, top_k, top_p, min_p) of that chain

    def close(self) -> None:
        if self.ptr:
            if self._batch is not None:
                lc.llama_batch_free(self._batch)
                self._batch = None
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
        if logits == "all" and len(tokens) > self.n_batch:  # a batch beyond n_batch is decoded in chunks,
            # and each chunk's rows overwrite the last: only the final chunk's would be read back
            raise LlamaError(f"{len(tokens)} rows of logits in one decode, more than its batch of {self.n_batch}")
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
        rc = decode_sync(self.ptr, b)
        if rc != 0:
            raise LlamaError.naming(f"llama_decode failed with code {rc} at position {pos0}; {{lower_memory}}")
        self.tokens.extend(tokens)
        self._rows = list(range(n)) if logits == "all" else [n - 1] if logits == "last" else []

    def logits(self, row: int = -1) -> np.ndarray:
        """A no-copy float32 [V] view of an output row of the last decode; valid until the next decode."""
        assert self._chain is None, "rows decoded with sampled=True have no logits"
        ptr = lc.llama_get_logits_ith(self.ptr, self._rows[row])
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,))

    def decode_tree(self, root: int, tokens: Sequence[int], parents: Sequence[int]) -> None:
        """Decode root (at the next position) and a token tree after it in ONE llama_decode, with logits
        for every row: row 0 is root's, row i + 1 node i's. parents[i] is node i's parent, -1 for root;
        nodes are listed parents first. Each leaf's branch is one sequence (0, 1, ...); a node is in the
        sequences of the branches through it, at the position of its depth, and sees only its ancestors."""
        if self._chain is not None:
            self._install(None)  # raw logits for every row: the backend chain serves sequence 0 only
        seqs, depths = _branch_seqs(parents), _depths(parents)
        n_branches = 1 + max((s[-1] for s in seqs), default=0)
        pos0 = len(self.tokens)
        if n_branches > self.n_seq_max:
            raise LlamaError(f"a tree of {n_branches} branches needs a context of n_seq_max >= {n_branches}")
        if len(tokens) + 1 > self.n_batch or pos0 + 1 + max(depths, default=0) > self.n_ctx:
            raise LlamaError(f"a tree of {len(tokens)} nodes does not fit the batch {self.n_batch} or --ctx {self.n_ctx}")
        for s in range(1, n_branches):  # the context's cells join every branch's sequence
            lc.llama_memory_seq_cp(self.memory, 0, s, -1, -1)
        b = self._batch
        rows = [(root, pos0, range(n_branches))] + [(t, pos0 + d, s) for t, d, s in zip(tokens, depths, seqs)]
        for i, (token, pos, in_seqs) in enumerate(rows):
            b.token[i], b.pos[i], b.logits[i], b.n_seq_id[i] = token, pos, True, len(in_seqs)
            for j, s in enumerate(in_seqs):
                b.seq_id[i][j] = s
        b.n_tokens = len(rows)
        rc = decode_sync(self.ptr, b)
        if rc != 0:
            lc.llama_memory_seq_rm(self.memory, -1, pos0, -1)
            lc.llama_memory_seq_keep(self.memory, 0)
            raise LlamaError.naming(f"llama_decode failed with code {rc} on a tree at position {pos0}; "
                                    "lower {n_ctx}", "n_ctx")
        self.tokens.append(root)
        self._rows = list(range(len(rows)))
        self._tree = (seqs, pos0 + 1, list(tokens))

    def keep_path(self, path: Sequence[int]) -> None:
        """After decode_tree: keep root and the nodes of path (a chain from a child of root down) in
        sequence 0, and remove every other cell of the tree from the cache."""
        assert self._tree is not None, "keep_path() follows decode_tree()"
        seqs, start, tokens = self._tree
        branch = seqs[path[-1]][0] if path else 0  # a branch through the last node holds the whole path
        assert all(branch in seqs[i] for i in path) and len(path) == len(set(path)), path
        if branch != 0:
            lc.llama_memory_seq_rm(self.memory, 0, start, -1)
            lc.llama_memory_seq_cp(self.memory, branch, 0, start, start + len(path))
        else:
            lc.llama_memory_seq_rm(self.memory, 0, start + len(path), -1)
        lc.llama_memory_seq_keep(self.memory, 0)  # frees the cells no longer in sequence 0
        self.tokens.extend(tokens[i] for i in path)
        self._tree = None
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

    def warm_up(self, widths: Sequence[int] = WARM_WIDTHS, logits: str = "all") -> None:
        """Decode one batch of each width on an empty cache, the widest first, then empty it: what a
        decode pays only the first time, paid at load, not inside a step whose seconds the planner
        reads as that width's cost. A GPU backend loads each kernel at its first launch (CUDA's lazy
        module loading), and llama.cpp's CUDA backend picks its matrix kernels by batch width (one
        matrix-vector kernel per width up to 8, one tile width per multiple of 8 up to 128: the
        widths of WARM_WIDTHS). And llama.cpp grows its output buffer only when a decode asks for
        more rows than ever before, allocating the whole new size (with a backend chain four
        vocabulary-sized arrays a row, page-locked where rows come from a GPU): the widest decode
        sizes it. With logits "all" each row is judged by the greedy chain where the rows are made on
        a GPU (rows_offloaded), as a verify's are; no chain is left installed."""
        assert not self.tokens, "warm_up() runs on an empty context"
        sampled = logits == "all" and self.rows_offloaded and self.sample_on_backend(SamplingParams(temperature=0.0))
        for n in warm_order(widths, min(self.n_batch, self.n_ctx)):
            self.decode([0] * n, logits=logits, sampled=sampled)  # any token: only the shapes count
            self.truncate(0)
        self._install(None)

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        """Keep the longest cached prefix shared with tokens, drop the rest; return its length."""
        n = common_prefix_len(self.tokens, tokens)
        self.truncate(n)
        return n


def warm_order(widths: Sequence[int], most: int) -> list[int]:
    """The widths a warm-up decodes (Context.warm_up), each at most `most` (what a decode holds) and
    once, the widest first: the output buffer grows once, to its widest."""
    return sorted({min(w, most) for w in widths}, reverse=True)


def _depths(parents: Sequence[int]) -> list[int]:
    """Depth of each tree node below the root (1 for the root's children); nodes listed parents first."""
    depths: list[int] = []
    for parent in parents:
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def _branch_seqs(parents: Sequence[int]) -> list[list[int]]:
    """The sequence ids of each tree node: one sequence per leaf (in node order), a node in all of its
    leaves' sequences, sorted."""
    has_child = set(parents)
    seqs: list[list[int]] = [[] for _ in parents]
    for seq, leaf in enumerate(i for i in range(len(parents)) if i not in has_child):
        node = leaf
        while node >= 0:
            seqs[node].append(seq)
            node = parents[node]
    return seqs


def decode_sync(ctx, batch) -> int:
    """llama_decode, then wait for the backend: on asynchronous backends (RPC, GPUs) llama_decode
    returns before the compute ends, and the controller's timings must see the whole verify. With RPC
    servers added, the watchdog bounds the wait (a server that hangs ends the process's generation)."""
    dog = watchdog()
    started = dog.arm(batch.n_tokens) if dog else 0.0
    rc = lc.llama_decode(ctx, batch)
    if rc == 0:
        lc.llama_synchronize(ctx)
    if dog:
        dog.disarm(started, batch.n_tokens)
    return rc

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


class LazyContext:
    """A Context made on first use: how a Pair holds a draft model that saved measurements say may
    not pay (it may never be loaded). Reading any attribute of Context's other than these loads it
    (load() may raise LlamaError); load_s is the seconds that took."""

    def __init__(self, load: Callable[[], Context], n_ctx: int, path: Path | None = None, where: str = "CPU"):
        """load: makes the Context (and its model); n_ctx: the size it will have; path: the model file;
        where: the device it will run on, as --stats names it."""
        self._load, self._ctx = load, None
        self._n_ctx, self.path, self.where = n_ctx, path, where
        self.load_s: float | None = None
        self._unreported = False

    @property
    def loaded(self) -> bool:
        return self._ctx is not None

    @property
    def rows_offloaded(self) -> bool:
        return self._ctx.rows_offloaded if self._ctx is not None else False

    @property
    def n_ctx(self) -> int:
        return self._ctx.n_ctx if self._ctx is not None else self._n_ctx

    @property
    def tokens(self) -> list[int]:
        return self._ctx.tokens if self._ctx is not None else []

    def get(self) -> Context:
        """The context, loading it now if it is not yet."""
        if self._ctx is None:
            t0 = time.perf_counter()
            self._ctx = self._load()
            self.load_s = time.perf_counter() - t0
            self._unreported = True
        return self._ctx

    def take_load_s(self) -> float:
        """The load's seconds the first time asked after it happened, 0.0 otherwise."""
        seconds, self._unreported = (self.load_s or 0.0) if self._unreported else 0.0, False
        return seconds

    def __getattr__(self, name: str):
        return getattr(self.get(), name)

    def close(self) -> None:
        """Free the context and its model, if they were loaded."""
        if self._ctx is not None:
            self._ctx.close()
            self._ctx.model.close()
