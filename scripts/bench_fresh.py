#!/usr/bin/env python3
"""Fresh `localspec generate` processes, as a CLI user runs them, alternating prompt by prompt:
--target-only, auto with warm start off (every process relearns its costs), and auto with warm start
(plans saved in the model store by earlier runs), in an order that changes from prompt to prompt so
that each variant follows every other equally often (bench.reply_order; in a fixed order the process
right after a cold one, which loads the draft, was always the warm one). Prints each variant's
tokens/s over prefill and decoding, summed over its runs, and its ratio to --target-only from this
one run; and the same over each process's wall time, model loading included (what a user waits for:
a draft costs its load). Both are per generated token. A second table gives the same over decoding
alone, as bench.py times it (without taking in the prompt, which costs every variant the same and
for a long prompt takes much of a short reply's time). A third groups the auto processes by
whether they loaded the draft, each against the target-only process of the same prompt and round:
what the draft's entry costs, apart from the spread between processes. A fourth says where each
variant's prefill-and-decode seconds went, as shares of them: what its exploratory steps lost (the
budget's ledger, exploration_s), the draft's prompt intakes, and the controller's own time.

With --against DIR, a fourth variant runs auto with warm start from another checkout of localspec
(its plans in a store of its own), side by side with this one's in the same run: how a change moves
the ratio, apart from the drift between runs.

    python scripts/bench_fresh.py --prompts scripts/prompts/prose.jsonl --rounds 3 -n 96
    git worktree add /tmp/before HEAD~1
    python scripts/bench_fresh.py --against /tmp/before --extra "-m /abs/target.gguf -d /abs/draft.gguf"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from script_args import Parser  # scripts/, beside this file

VARIANTS = {"target-only": (["--target-only"], {}),
            "auto, cold": ([], {"LOCALSPEC_WARM_START": "0"}),
            "auto, warm": ([], {})}


# Every process without the target's tune profile: beside the target (a `localspec tune` run left one
# there), it would fill --draft/--drafter/--gamma/--p-min, and "auto" would silently be the profile's
# pick. As a variable, not --no-profile: a --against checkout without the flag ignores it.
NO_PROFILE = {"LOCALSPEC_PROFILE": "0"}


def run(prompt: str, flags: list[str], env: dict, args) -> tuple[dict, float]:
    """One process's stats and its wall seconds. A variant whose env sets PYTHONPATH (--against)
    runs from there: `python -m` puts the working directory first on the module path."""
    cmd = [sys.executable, "-m", "localspec", "generate", prompt, "--json", "--temperature", str(args.temperature),
           "-n", str(args.max_tokens), "--threads", str(args.threads), *args.extra.split(), *flags]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env={**os.environ, **NO_PROFILE, **env}, capture_output=True, text=True, timeout=600,
                         cwd=env.get("PYTHONPATH"))
    wall = time.perf_counter() - t0
    if out.returncode:  # with --json the error is a JSON object on stdout, the rest on stderr
        sys.exit(f"localspec failed: {failure_text(out.stdout, out.stderr)}")
    return json.loads(out.stdout)["stats"], wall


def failure_text(stdout: str, stderr: str) -> str:
    """What a failed `localspec generate --json` said: its JSON error's message (on stdout), else stderr."""
    try:
        message = json.loads(stdout)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return stderr.strip() or stdout.strip()
    return "; ".join(text for text in (message, stderr.strip()) if text)


class Process(NamedTuple):
    """One process of a variant: its prompt and round, its --json stats, its wall seconds."""

    prompt: int
    round: int
    stats: dict
    wall: float

    @property
    def tokens(self) -> int:
        return self.stats["generated_tokens"]

    @property
    def seconds(self) -> float:
        """Prefill (the draft's too) and decoding."""
        return self.stats["time_s"]["total"]

    @property
    def decode(self) -> float:
        """Decoding alone: the loop bench.py times, without taking in the prompt."""
        return self.stats["time_s"]["decode"]


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=Path, default=Path(__file__).parent / "prompts/prose.jsonl")
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", "--max-tokens", type=int, default=96)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--extra", default="", help="more flags for every run, e.g. '--target M --draft D'")
    ap.add_argument("--against", type=Path,
                    help="another checkout of localspec (an earlier commit, say) whose auto with warm start "
                         "runs beside this one's, its plans in a store of its own; give the models by absolute path in --extra")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench import reply_order  # scripts/bench.py, beside this file
    from bench import load_prompt_file

    prompts = load_prompt_file(args.prompts, args.n_prompts)
    variants = dict(VARIANTS)
    if args.against:
        variants[f"auto, warm, {args.against.name}"] = ([], {"PYTHONPATH": str(args.against.resolve()),
                                                             "LOCALSPEC_MODELS": tempfile.mkdtemp(prefix="plans-")})
    runs: dict[str, list[Process]] = {name: [] for name in variants}  # in the order they ran
    for n, (r, i) in enumerate((r, i) for r in range(args.rounds) for i in range(len(prompts))):
        for name in reply_order(list(variants), n):
            flags, env = variants[name]
            p = Process(i, r, *run(prompts[i], flags, env, args))
            runs[name].append(p)
            drafted = {k: v["drafted"] for k, v in p.stats.get("by_drafter", {}).items()}
            print(f"round {r} prompt {i} {name}: {p.tokens / p.seconds:.1f} tok/s, {p.wall:.1f} s wall "
                  f"(warm_start {p.stats.get('warm_start')}, draft loaded {p.stats.get('draft_loaded')}, "
                  f"drafted {drafted})", file=sys.stderr)
    print(speed_table(runs))
    print("\n" + decode_table(runs))
    print("\n" + beside_table(runs))
    print("\n" + spent_table(runs))
    for note in empty_baseline_notes(runs):
        print(f"\n- {note}")


class Speed(NamedTuple):
    """A variant's processes over one of their times: tokens, seconds, tok/s, the ratio to
    target-only's (None where target-only generated nothing) and its interval (empty for target-only)."""

    tokens: int
    seconds: float
    rate: float
    ratio: float | None
    span: str


def times(ratio: float | None) -> str:
    """A ratio as the tables print it: '1.02x', or nothing where it is undefined."""
    return "" if ratio is None else f"{ratio:.2f}x"


def empty_baseline_notes(runs: dict[str, list[Process]]) -> list[str]:
    """Why the ratio columns are empty where target-only's every reply was (the tiny models can end
    each prose prompt at once), as bench.py says it; and how many processes the table of processes
    side by side leaves out for an empty target-only process beside them."""
    from bench import EMPTY_BASELINE

    base = runs["target-only"]
    if not sum(p.tokens for p in base):
        return [EMPTY_BASELINE]
    empty = {(p.prompt, p.round) for p in base if not p.tokens}
    left = sum((p.prompt, p.round) in empty for name, procs in runs.items() if name != "target-only" for p in procs)
    return [f"{left} auto processes left out of the side-by-side table: the target-only process beside "
            "each generated no tokens"] if left else []


def speeds(runs: dict[str, list[Process]], time: str) -> dict[str, Speed]:
    """Each variant's tokens/s over `time` (a Process attribute: seconds, decode or wall), summed over
    its processes, against target-only's. Per token: at T=0 a near-tie decided differently in a batch
    can end a reply earlier or later. Each ratio's interval: bench.paired_interval over the prompts
    and rounds, each process paired with the target-only process of the same prompt and round."""
    from bench import interval_text, paired_interval

    pairs = {name: [(p.tokens, getattr(p, time)) for p in procs] for name, procs in runs.items()}
    totals = {name: [sum(col) for col in zip(*rows)] for name, rows in pairs.items()}
    n0, s0 = totals["target-only"]
    out = {}
    for name, (n, s) in totals.items():
        span = interval_text(paired_interval(pairs[name], pairs["target-only"])) if name != "target-only" else ""
        out[name] = Speed(n, s, n / s, n / s / (n0 / s0) if n0 else None, span)
    return out


def speed_table(runs: dict[str, list[Process]]) -> str:
    """Each variant's tokens/s over prefill and decoding and over wall time against target-only's
    (speeds)."""
    from bench import INTERVAL

    level = f"{INTERVAL:.0%} interval"
    lines = [f"| variant | tokens | tok/s | vs target-only | {level} | wall s | tok/s over wall | vs target-only | "
             f"{level} |", "|" + "---|" * 9]
    loop, wall = speeds(runs, "seconds"), speeds(runs, "wall")
    for name in runs:
        a, w = loop[name], wall[name]
        lines.append(f"| {name} | {a.tokens} | {a.rate:.1f} | {times(a.ratio)} | {a.span} | {w.seconds:.1f} | "
                     f"{w.rate:.1f} | {times(w.ratio)} | {w.span} |")
    return "\n".join(lines)


def decode_table(runs: dict[str, list[Process]]) -> str:
    """Each variant's tokens/s over decoding alone against target-only's, as bench.py counts them: a
    long prompt (a copy's) takes as long to take in for every variant, and over prefill and decoding
    the ratio reads lower than the decode loop's."""
    from bench import INTERVAL

    lines = [f"| variant | decode s | tok/s over decoding | vs target-only | {INTERVAL:.0%} interval |",
             "|" + "---|" * 5]
    for name, d in speeds(runs, "decode").items():
        lines.append(f"| {name} | {d.seconds:.1f} | {d.rate:.1f} | {times(d.ratio)} | {d.span} |")
    return "\n".join(lines)


def beside_table(runs: dict[str, list[Process]]) -> str:
    """The spread between processes, apart from what the draft costs: each auto process against the
    target-only process of the same prompt and round, grouped by whether it loaded the draft; not
    beside a target-only process that generated nothing (empty_baseline_notes counts them)."""
    base = {(p.prompt, p.round): p.tokens / p.seconds for p in runs["target-only"]}
    beside: dict[tuple[str, bool], list[float]] = {}
    for name, procs in runs.items():
        if name != "target-only":
            for p in procs:
                if not base[p.prompt, p.round]:
                    continue
                key = name, bool(p.stats.get("draft_loaded"))
                beside.setdefault(key, []).append(p.tokens / p.seconds / base[p.prompt, p.round])
    lines = ["| variant | draft loaded | processes | mean vs the target-only process beside it | range |",
             "|---|---|---|---|---|"]
    for (name, loaded), ratios in sorted(beside.items()):
        lines.append(f"| {name} | {'yes' if loaded else 'no'} | {len(ratios)} | {sum(ratios) / len(ratios):.2f}x | "
                     f"{min(ratios):.2f}–{max(ratios):.2f}x |")
    return "\n".join(lines)


def spent_table(runs: dict[str, list[Process]]) -> str:
    """Where each variant's prefill-and-decode seconds went (spent_by), as shares of them."""
    lines = ["| variant | exploring (the budget's ledger) | the draft's prompt intakes | controller |",
             "|---|---|---|---|"]
    for name, procs in runs.items():
        parts = [sum(col) for col in zip(*(spent_by(p.stats) for p in procs))]
        loop = sum(p.seconds for p in procs)
        lines.append(f"| {name} | " + " | ".join(f"{100 * part / loop:.2f}%" for part in parts) + " |")
    return "\n".join(lines)


def spent_by(stats: dict) -> tuple[float, float, float]:
    """A process's seconds lost to exploring (net, every drafter's, as the budget charged them), spent
    taking in the prompt with the draft, and spent in the controller outside llama.cpp's decodes."""
    t = stats["time_s"]
    return sum(stats.get("exploration_s", {}).values()), t.get("draft_prefill", 0.0), t.get("controller", 0.0)


if __name__ == "__main__":
    main()
