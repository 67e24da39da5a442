#!/usr/bin/env python3
"""What one decode costs with the target over llama.cpp's RPC backend, per batch width, against the
same decode with the target local; and the local draft's cost per token beside the server.

These are the inputs of the bound on speculation over a link: a step of γ drafts at acceptance α
yields (1 − α^(γ+1)) / (1 − α) tokens in γ·c + v(γ+1) seconds (c: the draft's cost per token, v(k):
a verify of k rows), at most γ + 1 of them; plain decoding yields one in t = v(1). So with every
draft accepted a step of width k = γ + 1 runs k·t / ((k − 1)·c + v(k)) times plain decoding, and no
draft can do better. Prints that bound for the widths measured, and a free draft's (an n-gram
copy's, drafted in no time): k·t / v(k).

Starts a loopback `localspec rpc-server` behind scripts/delay_proxy.py (the added RTT), loads the
pair twice (target over RPC, then local; with --local, once and no server) and times each width in
a steady run and alternating with width 1 (the verify widths a run alternates between), rows read
for every token (a verify) or the last only (llama-bench's tg), medians of --reps; and each width's
first decode in the process, which on a GPU pays its kernels' loading where the Pair's warm-up at
load did not (--no-warm-up leaves it out).

    python scripts/bench_rpc_costs.py --rtt-ms 10 --target T.gguf --draft D.gguf --threads 2
    python scripts/bench_rpc_costs.py --local --target T.gguf --draft D.gguf --widths 1,2,3,4,5,8,12,16,32
        # this machine alone: whether any draft could pay here
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bench  # noqa: E402  (the one model resolver of its scripts)
import delay_proxy  # noqa: E402
from bench_rpc import free_port, wait_listening  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.session import LoadOptions, Pair  # noqa: E402

PROMPT = list(range(1000, 1060))  # any 60 tokens: costs, not text, are measured


def timed(ctx, width: int, rows: str) -> float:
    """Seconds to decode `width` tokens and read their output rows ('all' or 'last'); then rolled back."""
    n = len(ctx.tokens)
    t0 = time.perf_counter()
    ctx.decode([1234] * width, logits=rows)
    for r in range(width if rows == "all" else 1):
        ctx.logits(r).max()
    seconds = time.perf_counter() - t0
    ctx.truncate(n)  # (the context stays at the prompt: every width at every repetition fits --ctx)
    return seconds


def median_ms(ctx, widths: list[int], rows: str, reps: int) -> dict[int, float]:
    """Median milliseconds per width, the widths decoded in turn `reps` times."""
    seen: dict[int, list[float]] = {}
    for _ in range(reps):
        for w in widths:
            seen.setdefault(w, []).append(timed(ctx, w, rows))
    return {w: 1000 * statistics.median(v) for w, v in seen.items()}


def drafted(draft, n: int) -> None:
    """n draft tokens one decode at a time, each read as a draft reads its row; then rolled back."""
    start = len(draft.tokens)
    for _ in range(n):
        draft.decode([1234], logits="last")
        draft.logits(-1).argmax()
    draft.truncate(start)


def overlap_ms(target, draft, gamma: int, reps: int) -> tuple[float, float]:
    """Median ms of drafting gamma tokens and then verifying gamma + 1 rows, one after the other, and
    of the same two at once (the verify in a second thread, as a pipelined controller would draft the
    next step while the target verifies this one)."""
    serial, parallel = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        drafted(draft, gamma)
        timed(target, gamma + 1, "all")
        serial.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        verify = threading.Thread(target=timed, args=(target, gamma + 1, "all"))
        verify.start()
        drafted(draft, gamma)
        verify.join()
        parallel.append(time.perf_counter() - t0)
    return 1000 * statistics.median(serial), 1000 * statistics.median(parallel)


def measure(pair: Pair, widths: list[int], reps: int) -> dict:
    target, draft = pair.target_ctx, pair.draft_ctx.get()
    target.decode(PROMPT, logits="none")
    draft.decode(PROMPT, logits="none")
    out = {"draft": median_ms(draft, [1], "last", reps)[1]}
    for w in widths:  # each width's first decode in the process, before any other of its width
        out[("first", w)] = 1000 * timed(target, w, "all")
    for w in widths:
        out[("steady", w)] = median_ms(target, [w], "all", reps)[w]
        out[("alternating", w)] = median_ms(target, [1, w], "all", reps)[w]
        out[("last row", w)] = median_ms(target, [w], "last", reps)[w]
        if w > 1:
            out[("overlap", w)] = overlap_ms(target, draft, w - 1, reps)
    return out


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="a .gguf path or a model's name, as bench.py takes it")
    ap.add_argument("--draft", required=True, help="a .gguf path or a model's name, as bench.py takes it")
    ap.add_argument("--rtt-ms", type=float, default=10.0, help="round-trip time the proxy adds")
    ap.add_argument("--threads", type=int, default=2, help="the server's threads and this side's")
    ap.add_argument("--widths", default="1,2,5,9")
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--local", action="store_true", help="the pair local only, no RPC server: this machine's costs")
    ap.add_argument("--no-warm-up", action="store_true",
                    help="load without a GPU's warm-up decodes (Context.warm_up): the first decode of each width "
                         "then pays what loading its kernels takes")
    args = ap.parse_args()
    args.target, args.draft = bench.resolve_models(ap, args.target, args.draft)
    widths = [int(w) for w in args.widths.split(",")]
    results = {"local": measure_pair(args, widths, ())} if args.local else over_rpc(args, widths)
    report(results, widths, None if args.local else args.rtt_ms)


def measure_pair(args, widths: list[int], rpc: tuple[str, ...]) -> dict:
    """The pair's costs, the target on the RPC servers rpc (none: local)."""
    pair = Pair(args.target, args.draft, LoadOptions(n_ctx=1024, threads=args.threads, rpc=rpc, warm_start=False,
                                                     warm_up=not args.no_warm_up))
    try:
        return measure(pair, widths, args.reps)
    finally:
        pair.close()


def over_rpc(args, widths: list[int]) -> dict:
    """The pair's costs with the target behind a loopback rpc-server and the delaying proxy, then local."""
    port, proxy_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-m", "localspec", "rpc-server", "--port", str(port),
                               "--threads", str(args.threads)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stop = None
    try:
        wait_listening(port, server, "localspec rpc-server")
        stop = delay_proxy.start_in_thread(proxy_port, "127.0.0.1", port, args.rtt_ms / 1000)
        return {where: measure_pair(args, widths, rpc)
                for where, rpc in (("over RPC", (f"127.0.0.1:{proxy_port}",)), ("local", ()))}
    finally:
        if stop is not None:
            stop.set()
        server.terminate()
        server.wait(10)


KINDS = ("steady", "alternating", "last row", "first")  # the table's columns per placement (measure)


def report(results: dict, widths: list[int], rtt_ms: float | None) -> None:
    """The table of ms per decode and, for each placement, the bounds; rtt_ms None: local only."""
    print("\nms per decode, local:\n" if rtt_ms is None else
          f"\nms per decode, target over RPC with {rtt_ms:g} ms added RTT vs local (the server idle beside it):\n")
    print("| width | " + " | ".join(f"{kind}, {where}" for where in results for kind in KINDS) + " |")
    print("|---" * (1 + len(KINDS) * len(results)) + "|")
    for w in widths:
        print(f"| {w} | " + " | ".join(f"{results[where][(kind, w)]:.1f}" for where in results for kind in KINDS)
              + " |")
    for where, r in results.items():
        t, c = r[("steady", 1)], r["draft"]
        bound = {k: k * t / ((k - 1) * c + r[("steady", k)]) for k in widths}
        overlap = ", ".join(f"γ={k - 1} {r[('overlap', k)][0]:.0f} → {r[('overlap', k)][1]:.0f} ms "
                            f"({r[('overlap', k)][0] / r[('overlap', k)][1]:.2f}x)" for k in widths if k > 1)
        print(f"\n{where}: drafting γ tokens, then verifying γ + 1 rows, against both at once: {overlap}")
        print(f"{where}: plain step t = {t:.1f} ms, draft token c = {c:.1f} ms; with every draft accepted, "
              "k·t / ((k − 1)·c + v(k)): " + ", ".join(f"k={k} {b:.2f}x" for k, b in bound.items()))
        free = ", ".join(f"k={k} {k * t / r[('steady', k)]:.2f}x" for k in widths if k > 1)
        print(f"{where}: a free draft (an n-gram copy) of k − 1 tokens, every one accepted, k·t / v(k): {free}")
        curve = ",".join(f"{k}:{r[('steady', k)]:.2f}" for k in widths)
        print(f"{where}: simulate with bench_fast_regime.py --curve {curve} --draft-ms {c:.2f}")


if __name__ == "__main__":
    main()
