"""A Context whose decode only fills rows, for timing the controller around it (bench_controller.py).

Rows are real-sized (the model's whole vocabulary), noise plus a peak on the next token of a fixed
script and three runner-up tokens that depend on the seed, so a draft context with another seed agrees
on the argmax (T=0) but not on the whole distribution (T>0). What llama.cpp's backend sampler chain
would return for a row is computed inside decode, as llama.cpp computes it inside llama_decode.
TimedRows makes each decode last as long as a model's would (bench_fast_regime.py).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from localspec import models, naming
from localspec.config import ModelError
from localspec.context import SAMPLED_ROWS_MAX, WARM_WIDTHS, warm_order
from localspec.llama import Model, common_prefix_len
from localspec.sampling import SamplingParams, distribution

SCRIPT = '''def merge_sort(items):
    """Return a sorted copy of items."""
    if len(items) <= 1:
        return list(items)
    middle = len(items) // 2
    left, right = merge_sort(items[:middle]), merge_sort(items[middle:])
    merged = []
    while left and right:
        merged.append(left.pop(0) if left[0] <= right[0] else right.pop(0))
    return merged + left + right
'''
# Logits: the script's next token, 3 runners-up, the noise's scale. The draft's confidence (top 10 at
# T=1) is then about 0.84, above the fixed p-min of 0.75, so drafts are made.
PEAK, RUNNER_UP, NOISE = 16.0, 13.2, 1.5


LIGHT_PAIR = "qwen2.5-coder"  # the catalog's Qwen2.5-Coder 1.5B + 0.5B, Q4_K_M: Qwen's real vocabulary


def light_models(*roles: str) -> list[Path]:
    """The light pair's files for the roles asked ("target", "draft"): the tests' copies in
    LOCALSPEC_TEST_MODELS (default ~/.cache/localspec/test-models) where they are there, else the
    store's, pulled where missing as any command that needs the default pair pulls it
    (./scripts/demo.sh put them there). Where neither can be had, one line naming why (SystemExit)."""
    tests = Path(os.environ.get("LOCALSPEC_TEST_MODELS", Path.home() / ".cache/localspec/test-models"))
    try:
        names = dict(zip(("target", "draft"), models.resolve_pair(LIGHT_PAIR)))
        files = [tests / models.load_catalog().entry(names[role]).file for role in roles]
        if all(f.is_file() for f in files):
            return files
        return [naming.resolve_model(names[role]) for role in roles]
    except ModelError as e:
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")


class RowsContext:
    """The surface of localspec.llama.Context over synthetic rows of the model's vocabulary size."""

    def __init__(self, model: Model, seed: int, n_ctx: int = 8192, sweep_mb: int = 0,
                 script: Sequence[int] | None = None):
        """script: the tokens whose next one each row peaks on (default: SCRIPT's, repeated)."""
        self.model, self.n_ctx, self.seed = model, n_ctx, seed
        self.n_seq_max, self.n_batch = 1, 512  # as localspec.llama.Context's defaults
        # Memory each decode reads through, as a real decode streams the weights: the controller then
        # runs with cold caches, as it does after a decode on the CPU.
        self._sweep = np.ones(sweep_mb << 18, dtype=np.float32)
        self.tokens: list[int] = []
        self.chain_key: tuple | None = None
        self.script = list(script) if script is not None else model.tokenize(SCRIPT, add_special=False)
        vocab = model.n_vocab
        self._bank = (np.random.default_rng(seed).standard_normal((4, vocab)) * NOISE).astype(np.float32)
        self._out = np.zeros((SAMPLED_ROWS_MAX, vocab), dtype=np.float32)  # [rows, V]
        self._judged: list = [None] * SAMPLED_ROWS_MAX  # what the backend chain returned per row
        self._all_ids = np.arange(vocab, dtype=np.int32)
        self._n_rows = 0

    def decode(self, tokens: Sequence[int], logits: str = "last", sampled: bool = False) -> None:
        if not sampled and logits != "none":
            self.chain_key = None
        self._sweep.sum()
        start = len(self.tokens)
        self.tokens.extend(tokens)
        ends = range(start, len(self.tokens)) if logits == "all" else [len(self.tokens) - 1] * (logits == "last")
        for i, pos in enumerate(ends):
            row = self._out[i]
            row[:] = self._bank[pos % 4]
            row[self._runners_up(pos)] = RUNNER_UP
            row[self.script[(pos + 1) % len(self.script)]] = PEAK
            self._judged[i] = self._judge(row) if sampled else None
        self._n_rows = len(ends)

    def _runners_up(self, pos: int) -> np.ndarray:
        return (np.arange(1, 4) * 7919 * (pos + 3 + self.seed * 101)) % self.model.n_vocab

    def _judge(self, row: np.ndarray):
        """What llama.cpp's chain returns for a row: its top k logits, the greedy token, or probabilities."""
        if self.chain_key[0] == "top_k":
            k = self.chain_key[1]
            ids = np.argpartition(-row, k - 1)[:k].astype(np.int32)
            return ids, row[ids]
        params = SamplingParams(*self.chain_key[1:])
        if params.greedy:
            return int(np.argmax(row))
        d = distribution(row, params)
        if params.top_k == 0:  # llama.cpp returns every token's probability, 0 where filtered
            probs = np.zeros(row.size, dtype=np.float32)
            probs[d.ids] = d.probs
            return self._all_ids, probs
        ids = np.argpartition(-row, params.top_k - 1)[: params.top_k].astype(np.int32)
        probs = np.zeros(ids.size, dtype=np.float32)
        probs[np.searchsorted(np.sort(ids), d.ids)] = d.probs  # top-k survivors in sorted-id order
        return np.sort(ids), probs

    def logits(self, row: int = -1) -> np.ndarray:
        assert self.chain_key is None
        return self._out[: self._n_rows][row]

    def sample_on_backend(self, params) -> bool:
        self.chain_key = ("chain", params.temperature, params.top_k, params.top_p, params.min_p)
        return True

    def keep_top_k_on_backend(self, k: int) -> bool:
        self.chain_key = ("top_k", k)
        return True

    def sampled_token(self, row: int) -> int:
        return self._judged[: self._n_rows][row]

    def sampled_probs(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        return self._judged[: self._n_rows][row]

    def sampled_logits(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        return self._judged[: self._n_rows][row]

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        n = common_prefix_len(self.tokens, tokens)
        self.truncate(n)
        return n


def parse_curve(text: str) -> list[tuple[int, float]]:
    """"ROWS:MS,ROWS:MS,..." (a verify curve as measured, e.g. "1:1.9,2:5.4,36:10.3") as sorted
    (rows, seconds): a point at one row (a plain step) and one point per row count."""
    try:
        points = sorted((int(rows), float(ms) / 1e3) for rows, ms in (item.split(":") for item in text.split(",")))
    except ValueError:
        raise ValueError(f"bad curve {text!r}: give ROWS:MS pairs separated by commas, e.g. 1:1.9,2:5.4,36:10.3") from None
    if not points or points[0][0] != 1 or len({rows for rows, _ in points}) != len(points):
        raise ValueError(f"bad curve {text!r}: it needs a point at 1 row (a plain step) and one point per row count")
    if any(ms <= 0 for _, ms in points):
        raise ValueError(f"bad curve {text!r}: every point needs more than 0 ms")
    return points


def curve_seconds(points: Sequence[tuple[int, float]], rows: int) -> float:
    """A decode of `rows` rows along the curve: linear between its points, below the first along the
    first segment (never under 0), beyond the last along the last segment (flat with one point)."""
    if len(points) == 1:
        return points[0][1]
    i = 1
    while i < len(points) - 1 and points[i][0] < rows:
        i += 1
    (r0, s0), (r1, s1) = points[i - 1], points[i]
    return max(s0 + (s1 - s0) * (rows - r0) / (r1 - r0), 0.0)


class TimedRows(RowsContext):
    """A RowsContext whose decode lasts as long as a model's would: base_s a decode and row_s more
    per row of logits asked for, or a measured curve's seconds for that many rows (curve: see
    curve_seconds), spent in a busy wait (exact to microseconds, unlike a sleep). after_wide: seconds
    the first, second, ... one-token decode after a decode of more tokens lasts longer (as a GPU's
    one-row decodes do after a verify: timings.ReturnCost). first_s: what the first decode of
    each batch width lasts longer (as a GPU's do, loading that width's kernels: Context.warm_up).
    Decode seconds are added up in decode_s, for the controller's share (wall time less them)."""

    def __init__(self, model: Model, seed: int, base_s: float, row_s: float = 0.0,
                 curve: Sequence[tuple[int, float]] | None = None, after_wide: Sequence[float] = (),
                 first_s: float = 0.0, **kwargs):
        super().__init__(model, seed, **kwargs)
        self.base_s, self.row_s, self.curve, self.decode_s = base_s, row_s, curve, 0.0
        self.after_wide, self.since_wide = list(after_wide), len(after_wide)  # one-token decodes since a wider one
        self.first_s, self.shapes = first_s, set()  # the first decode of each width lasts first_s longer

    def warm_up(self, widths: Sequence[int] = WARM_WIDTHS, logits: str = "all") -> None:
        """As Context.warm_up: one decode of each width, the widest first, on an empty cache, then
        none left (their first decodes' extra, first_s, paid here)."""
        assert not self.tokens
        for n in warm_order(widths, min(self.n_batch, self.n_ctx)):
            self.decode([0] * n, logits=logits)
            self.truncate(0)

    def seconds(self, rows: int) -> float:
        """How long a decode asking for `rows` rows of logits lasts."""
        if self.curve:
            return curve_seconds(self.curve, max(rows, 1))
        return self.base_s + self.row_s * rows

    def decode(self, tokens: Sequence[int], logits: str = "last", sampled: bool = False) -> None:
        t0 = time.perf_counter()
        super().decode(tokens, logits, sampled)
        end = t0 + self.lasts(tokens, logits)
        while time.perf_counter() < end:
            pass
        self.decode_s += time.perf_counter() - t0

    def lasts(self, tokens: Sequence[int], logits: str) -> float:
        """How long the decode of tokens, asking for logits' rows, lasts: seconds(rows), first_s more
        for the first decode of its width, and a one-token decode's after_wide share by its place
        after the last wider decode (kept here)."""
        seconds = self.seconds(len(tokens) if logits == "all" else int(logits == "last"))
        if len(tokens) not in self.shapes:  # (a GPU loads a batch width's kernels at its first launch)
            self.shapes.add(len(tokens))
            seconds += self.first_s
        if len(tokens) > 1:
            self.since_wide = 0
        elif self.since_wide < len(self.after_wide):
            seconds += self.after_wide[self.since_wide]
            self.since_wide += 1
        return seconds
