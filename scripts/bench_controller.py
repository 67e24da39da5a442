#!/usr/bin/env python3
"""The controller's own time per emitted token: everything the decode loop does outside llama_decode
(the target's verify and the draft's decodes), with Qwen's 151,936-token vocabulary.

    python scripts/bench_controller.py                        # fake decodes: T=0 and T=1, both paths
    python scripts/bench_controller.py --real --tokens 48     # the real Qwen pair (slow on a CPU)
    python scripts/bench_controller.py --temperatures 1 --paths backend --profile

Every decode of both contexts is timed; the controller's time is the generation's wall time minus
their sum, divided by the tokens emitted. By default the contexts are fakes (bench_fakes.py) with the
real Qwen vocabulary (pieces, end-of-generation tokens) and real-sized rows, whose decode only fills
rows: the controller's share is then measured without a model's noise around it. --real runs the
real pair, where the backend path moves the filtering into llama.cpp's decode: its decode column shows
what that costs; --sweep-mb 64 makes each fake decode evict the caches as a CPU decode's weight
reads do. Each cell is the minimum over --repeats runs after one warm-up run: other processes
on the machine only ever add time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec.config import GenerationConfig  # noqa: E402
from localspec.drafters import ModelDrafter  # noqa: E402
from localspec.context import Context  # noqa: E402
from localspec.llama import Model  # noqa: E402
from localspec.tracker import CostTracker  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.speculative import Finished, SpeculativeDecoder  # noqa: E402

from bench_fakes import RowsContext, light_models  # noqa: E402
from script_args import Parser  # noqa: E402

PROMPT = "def quicksort(arr):\n    \"\"\"Sort a list of integers in ascending order.\"\"\"\n"


class DecodeTimer:
    """Wraps a context's decode to add up the seconds spent in it (and count the target's verifies)."""

    def __init__(self, *contexts: Context):
        self.seconds, self.calls = 0.0, 0
        for ctx in contexts:
            ctx.decode = self._timed(ctx.decode)

    def _timed(self, decode):
        def timed(tokens, logits="last", sampled=False):
            t0 = time.perf_counter()
            try:
                decode(tokens, logits, sampled)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
        return timed


def run_once(target: Context, draft: Context, config: GenerationConfig, timer: DecodeTimer,
             profile: cProfile.Profile | None = None) -> tuple[float, float, int, float]:
    """One generation: (controller seconds, decode seconds, tokens emitted, tokens per verify)."""
    prompt = target.model.tokenize(PROMPT)
    target.truncate(0)
    draft.truncate(0)
    sources = [(ModelDrafter(draft, config.sampling), CostTracker())]
    timer.seconds = 0.0
    if profile:
        profile.enable()
    t0 = time.perf_counter()
    *_, finished = SpeculativeDecoder(target, sources).generate(prompt, config)
    wall = time.perf_counter() - t0
    if profile:
        profile.disable()
    assert isinstance(finished, Finished)
    stats = finished.stats
    return wall - timer.seconds, timer.seconds, stats.generated, stats.generated / max(1, stats.steps)


def measure(target, draft, timer, temperature: float, path: str, args) -> dict:
    """The minimum controller µs per emitted token over the repeats, with its run's decode time."""
    os.environ["LOCALSPEC_BACKEND_SAMPLING"] = "1" if path == "backend" else "0"
    sampling = SamplingParams(temperature=temperature) if temperature else SamplingParams(temperature=0)
    config = GenerationConfig(max_tokens=args.tokens, gamma=args.gamma, sampling=sampling, seed=1)
    run_once(target, draft, config, timer)  # warm-up: graph reserve, caches
    runs = [run_once(target, draft, config, timer) for _ in range(args.repeats)]
    best = min(runs, key=lambda r: r[0] / r[2])
    if args.profile:  # a run of its own: the profiler's overhead stays out of the timed runs
        profile = cProfile.Profile()
        run_once(target, draft, config, timer, profile)
        print(f"--- profile T={temperature} {path}")
        pstats.Stats(profile).sort_stats("tottime").print_stats("localspec|numpy|builtins", 22)
    return {"us": 1e6 * best[0] / best[2], "decode_ms": 1e3 * best[1] / best[2], "tokens": best[2],
            "per_step": best[3]}


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])  # its first paragraph, rewrapped
    parser.add_argument("--temperatures", default="0,1", help="comma-separated (default 0,1)")
    parser.add_argument("--paths", default="numpy,backend", help="numpy, backend or both (default)")
    parser.add_argument("--tokens", type=int, default=400, help="tokens per generation (default 400)")
    parser.add_argument("--gamma", type=int, default=4, help="fixed draft length (default 4)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per cell (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads per context")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions per cell")
    parser.add_argument("--real", action="store_true", help="the real Qwen pair instead of fake decodes")
    parser.add_argument("--sweep-mb", type=int, default=0,
                        help="fake decodes read this much memory, leaving the caches cold as a CPU decode does")
    args = parser.parse_args()
    target_file, draft_file = light_models("target", "draft")
    if args.real:
        target, draft = Context(Model(target_file), 1024, args.threads), Context(Model(draft_file), 1024, args.threads)
    else:
        vocab = Model(target_file, vocab_only=True)
        target = RowsContext(vocab, seed=0, sweep_mb=args.sweep_mb)
        draft = RowsContext(vocab, seed=1, sweep_mb=args.sweep_mb)
    timer = DecodeTimer(target, draft)
    print(f"target {target_file.name}, draft {draft_file.name}, vocabulary {target.model.n_vocab}, gamma {args.gamma}")
    print("| T | path | controller µs / token | decode ms / token | tokens | tokens / verify |")
    print("|---|---|---|---|---|---|")
    for t in (float(x) for x in args.temperatures.split(",")):
        for path in args.paths.split(","):
            r = measure(target, draft, timer, t, path, args)
            print(f"| {t:g} | {path} | {r['us']:.0f} | {r['decode_ms']:.1f} | {r['tokens']} | {r['per_step']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
