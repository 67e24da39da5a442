#!/usr/bin/env python3
"""The target over llama.cpp's RPC backend, behind a link of 0, 2 and 10 ms round-trip time.

Starts two RPC servers on loopback — `localspec rpc-server` for localspec's runs and llama.cpp's own
`ggml-rpc-server` for llama.cpp's (an RPC server serves one client at a time, and scripts/bench.py
alternates the two engines prompt by prompt) — each behind scripts/delay_proxy.py, which adds the
round-trip time. Then for each RTT and temperature it runs scripts/bench.py with the target's layers on
the server and the draft on this machine's CPU: plain decoding over the link, localspec auto, and
llama.cpp's llama-speculative-simple --rpc at several n_max; and llama-bench --rpc for llama.cpp's
plain decoding over the same link. Prints one table per (RTT, T) and a summary.

On one machine the "remote" server shares the CPU with the local draft: the servers get --threads
and the local side too; the machine's cores are shared by both.

    python scripts/bench_rpc.py --rtt-ms 0,2,10 --temperatures 0,1 --n-prompts 3 --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import bench  # noqa: E402
import delay_proxy  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.config import ModelError  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench_rpc.py: {what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"bench_rpc.py: {what} did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s")


@contextmanager
def servers(args):
    """(localspec's port, llama.cpp's port), both RPC servers running; killed on exit."""
    ours, theirs = free_port(), free_port()
    cache = ["--cache", str(args.cache)] if args.cache else []
    cmds = [([sys.executable, "-m", "localspec", "rpc-server", "--port", str(ours),
              "--threads", str(args.server_threads), *cache], ours, "localspec rpc-server")]
    tool = args.llamacpp_bin / "ggml-rpc-server"
    if tool.is_file():
        cmds.append(([str(tool), "-p", str(theirs), "-t", str(args.server_threads)], theirs, "ggml-rpc-server"))
    procs = []
    try:
        for cmd, port, what in cmds:
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_listening(port, procs[-1], what)
        yield ours, (theirs if tool.is_file() else None)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def llama_bench_plain(args, target: Path, endpoint: str) -> float | None:
    """llama-bench's decoding tokens/s for the target over the RPC endpoint, or None without the tool."""
    tool = args.llamacpp_bin / "llama-bench"
    if not tool.is_file():
        return None
    cmd = [str(tool), "-m", str(target), "--rpc", endpoint, "-ngl", "999", "-p", "0", "-n", str(args.max_tokens),
           "-t", str(args.threads), "-r", "2", "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode:
        print(f"llama-bench failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(out.stdout)[0]["avg_ts"]


def run_bench(args, rtt_ms: float, temperature: float, ours: str, theirs: str | None) -> dict:
    """scripts/bench.py over the two links; its bench.json."""
    out = args.out / f"rtt{rtt_ms:g}-T{temperature:g}"
    scenarios = ["plain", "model:auto", args.localspec_scenarios]
    if theirs:
        scenarios += [f"llamacpp:{n}" for n in args.llamacpp_n.split(",")]
    argv = ["--scenarios", ",".join(s for s in scenarios if s), "--n-prompts", str(args.n_prompts),
            "--max-tokens", str(args.max_tokens), "--temperature", str(temperature), "--threads", str(args.threads),
            "--rpc", ours, "--out", str(out), "--llamacpp-bin", str(args.llamacpp_bin), *args.bench_args.split()]
    if args.prompts:
        argv += ["--prompts", str(args.prompts)]
    if theirs:
        argv += ["--llamacpp-rpc", theirs]
    bench.main(argv)
    return json.loads((out / "bench.json").read_text())


def summary_row(rtt_ms: float, temperature: float, report: dict, llama_bench_tps: float | None) -> str:
    rows = {r["scenario"]: r for r in report["rows"]}
    plain = rows.get("target-only", {}).get("tokens_per_s")
    auto = rows.get("model gamma=auto", {}).get("tokens_per_s")
    best = max((r for r in report["rows"] if r["scenario"].startswith("llama.cpp")), default=None,
               key=lambda r: r.get("tokens_per_s") or 0)
    fmt = lambda v: f"{v:.1f}" if v else "—"  # noqa: E731
    ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "—"  # noqa: E731
    best_tps = best.get("tokens_per_s") if best else None
    return (f"| {rtt_ms:g} | {temperature:g} | {fmt(plain)} | {fmt(llama_bench_tps)} | {fmt(auto)} "
            f"| {ratio(auto, plain)} "
            f"| {fmt(best_tps)} ({best['scenario'] if best else '—'}) | {ratio(auto, best_tps)} |")


def main() -> int:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rtt-ms", default="0,2,10")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompts", type=Path, default=None, help="JSONL prompts (default: bench.py's HumanEval)")
    ap.add_argument("--threads", type=int, default=2, help="this machine's llama.cpp threads (the draft)")
    ap.add_argument("--server-threads", type=int, default=2, help="the RPC servers' threads")
    ap.add_argument("--cache", type=Path, default=None, help="the servers' tensor cache (localspec rpc-server --cache)")
    ap.add_argument("--localspec-scenarios", default="", help="more localspec scenarios, e.g. hybrid:auto")
    ap.add_argument("--llamacpp-n", default="4,8,16", help="llama.cpp draft-simple n_max values")
    ap.add_argument("--llamacpp-bin", type=Path, default=bench.LLAMACPP_BIN)
    ap.add_argument("--bench-args", default="", help="more scripts/bench.py flags, e.g. '--target T --draft D'")
    ap.add_argument("--out", type=Path, default=Path("bench-out/rpc"))
    args = ap.parse_args()
    try:
        target = bench.resolve_paths(bench.parse_args(args.bench_args.split()))[0]
    except ModelError as e:
        ap.error(f"--bench-args: {e}")
    lines = ["| added RTT ms | T | plain over RPC tok/s | llama-bench --rpc tok/s | localspec auto tok/s | vs plain "
             "| llama.cpp spec-simple --rpc best | auto vs it |", "|---|---|---|---|---|---|---|---|"]
    with servers(args) as (ours_port, theirs_port):
        for rtt in (float(r) for r in args.rtt_ms.split(",")):
            p1, p2 = free_port(), free_port()
            stops = [delay_proxy.start_in_thread(p1, "127.0.0.1", ours_port, rtt / 1000)]
            if theirs_port:
                stops.append(delay_proxy.start_in_thread(p2, "127.0.0.1", theirs_port, rtt / 1000))
            try:
                lb = llama_bench_plain(args, target, f"127.0.0.1:{p2}") if theirs_port else None
                for t in (float(x) for x in args.temperatures.split(",")):
                    report = run_bench(args, rtt, t, f"127.0.0.1:{p1}", f"127.0.0.1:{p2}" if theirs_port else None)
                    lines.append(summary_row(rtt, t, report, lb if t == 0 else None))
                    print("\n".join(lines), file=sys.stderr)
            finally:
                for s in stops:
                    s.set()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
