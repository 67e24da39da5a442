"""`localspec tune`: which drafter, draft quantization, draft length and device is fastest for one
target on this machine; the answer is saved beside the target as its profile.

Every configuration samples exactly from the target (the p/q rule), so only speed is at stake.
1. Calibrate: the target alone continues each calibration prompt. That is the target-only speed,
   and its continuations are what every candidate is scored on. The target's verify time for a
   batch of k = 1..γmax+1 tokens is timed inside the real loop (a probe drafter proposes k - 1
   tokens that the rule rejects).
2. Measure each candidate. A draft model reads prompt + continuation in one pass (teacher forcing);
   at each position its guess is scored by the chance that the rule accepts it: 1 if it equals the
   target's token at T=0, Σ_x min(p(x), q(x)) at T>0 (Leviathan et al. 2022, §3.1; p = target,
   q = draft). Its time per draft decode is timed in two short real runs, scaled to the machine's
   speed during calibration by the target's verifies in those runs. The n-gram drafter is looked
   up along the same continuations.
3. Predict: replay the controller at each fixed γ along the continuations (draft lengths, p-min
   stops, acceptance, the max-tokens cap) and price each step with the measured costs
   (costmodel.step_seconds): tokens/s per (candidate, γ), with per-position acceptance.
4. Confirm the best three predictions by real runs, alternating with target-only prompt by prompt,
   and pick the fastest measured (speculation must beat target-only by 3%). Predictions are shown
   at the target-only speed of those runs: a shared machine's speed drifts by several % within minutes.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from . import models
from .compat import first_difference
from .costmodel import FALLBACK_P_MIN, step_seconds
from .planner import CostTracker, p_min_of
from .drafters import ModelDrafter, NGramDrafter, Proposal, one_hot
from .llama import QUANT_TYPES, Context, LlamaError, Model, quant_name
from .sampling import Dist, SamplingParams, distribution, greedy_token, top_probability
from .session import LoadOptions, Pair
from .session import make_sources as pair_sources
from .speculative import Finished, GenerationConfig, SpeculativeDecoder
from .stats import GenerationStats, pooled_verify

DERIVED_QUANTS = ("Q4_0", "Q3_K_S", "Q2_K")
PROMPTS_FILE = Path(__file__).with_name("calibration.jsonl")  # HumanEval/0..7 (MIT, OpenAI)
PROFILE_SUFFIX = ".tune.json"
PROFILE_VERSION = 1
# A speculative pick must measure this much faster than target-only: per-prompt timings on a shared
# VM vary by ±15%, a marginal "win" is often noise, and a pick that loses to plain decoding is worse
# than a missed 3%. (The cost model's CostTracker.min_gain, for the same reason.)
PICK_MIN_GAIN = 0.03
# Approximate bits per weight, only to order types: a draft is derived only to a smaller type
# (requantizing upward costs more and gains nothing).
BITS = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_1": 6.0, "Q5_K_M": 5.7,
        "Q5_K_S": 5.5, "Q5_0": 5.5, "Q4_1": 5.0, "Q4_K_M": 4.9, "Q4_K_S": 4.6, "Q4_0": 4.5,
        "IQ4_NL": 4.5, "IQ4_XS": 4.3, "Q3_K_L": 4.3, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q2_K": 3.0}


class TuneError(ValueError):
    """A user-facing tune problem; str() is one line naming the value and the fix."""


# --- candidates ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One way to guess: a draft model file (perhaps derived on first use), n-gram lookup, or none."""

    label: str
    kind: str                   # "model", "ngram", "hybrid" (both, γ auto) or "none" (target only)
    path: Path | None = None    # the draft file; for a derived draft, where it is (or will be) made
    quant: str = ""
    device: str = "cpu"         # where the draft runs
    source: Path | None = None  # a derived draft: the file it is converted from

    @property
    def ngl(self) -> int:
        """Draft layers offloaded to the GPU."""
        return 999 if self.device == "gpu" else 0


TARGET_ONLY = Candidate("target only", "none")
NGRAM = Candidate("ngram", "ngram")


def derived_path(src: Path, quant: str) -> Path:
    """Where a draft re-stored as quant is cached: the store, named as `models convert` names it."""
    return Path(os.path.abspath(models.store_dir() / f"{src.stem}-{quant.lower()}.gguf"))


def parse_quants(text: str) -> tuple[str, ...]:
    """'Q4_0,q2_k' -> ('Q4_0', 'Q2_K'); 'none' or '' -> (); unknown types are a one-line error."""
    quants = tuple(q.strip().upper() for q in text.split(",") if q.strip() and q.strip().lower() != "none")
    for q in quants:
        if q not in QUANT_TYPES:
            raise TuneError(f"Unknown quantization type {q!r} in --quants; choose from {', '.join(QUANT_TYPES)}, "
                            "or 'none' to derive nothing")
    return quants


def discover(target: Path, extra: Sequence[Path] = (), quants: Sequence[str] = DERIVED_QUANTS,
             devices: Sequence[str] = ("cpu",)) -> tuple[list[Candidate], list[str]]:
    """The candidates for target, and why each other file was left out.

    The n-gram drafter; every store file (and extra) that is a smaller model with the target's
    vocabulary; from each that is not itself derived, each quant in quants smaller than its own
    type (made on first use and cached in the store); each draft on every device. Target-only is
    the baseline and is not listed."""
    files = _unique([*models.installed(), *extra])
    derived = _derived_files(files)
    files.sort(key=lambda f: (derived.get(f, f.stem), f in derived, -BITS.get(f.stem.rpartition("-")[2].upper(), 0)))
    drafts, skipped = _usable_drafts(target, files)
    out = [NGRAM]
    for path, quant in drafts:
        out += [Candidate(path.stem, "model", path, quant, d) for d in devices]
        if path in derived:
            continue
        for q in quants:
            dst = derived_path(path, q)
            if BITS.get(q, 0) >= BITS.get(quant, 99) or dst in files:
                continue  # not smaller than its source, or a store file already (listed above)
            out += [Candidate(dst.stem, "model", dst, q, d, source=path) for d in devices]
    return out, skipped


def _unique(paths: Sequence[Path]) -> list[Path]:
    """Absolute paths, first occurrence kept."""
    seen: dict[Path, None] = {}
    for p in paths:
        seen.setdefault(Path(os.path.abspath(p)), None)
    return list(seen)


def _derived_files(files: Sequence[Path]) -> dict[Path, str]:
    """Files named as a conversion of another file in the list ('<other stem>-<quant>.gguf') -> that stem."""
    stems = {f.stem for f in files}
    out = {}
    for f in files:
        head, _, quant = f.stem.rpartition("-")
        if head in stems and quant.upper() in QUANT_TYPES:
            out[f] = head
    return out


def _usable_drafts(target: Path, files: Sequence[Path]) -> tuple[list[tuple[Path, str]], list[str]]:
    """(path, quant) of each file that can draft for target; a 'name: reason' line for each other."""
    usable, skipped = [], []
    size = target.stat().st_size
    t = Model(target, vocab_only=True)
    try:
        for path in files:
            if path.exists() and os.path.samefile(path, target):
                continue
            if path.stat().st_size >= size:
                skipped.append(f"{path.name}: not smaller than the target")
                continue
            try:
                d = Model(path, vocab_only=True)
            except LlamaError as e:
                skipped.append(f"{path.name}: {e}")
                continue
            try:
                problem, quant = first_difference(t, d), quant_name(d.meta("general.file_type"))
            finally:
                d.close()
            if problem:
                skipped.append(f"{path.name}: incompatible, {problem}")
            else:
                usable.append((path, quant))
    finally:
        t.close()
    return usable, skipped


def materialize(cand: Candidate, log: Callable[[str], None] = print) -> Candidate:
    """Make a derived draft if it is not in the store yet (cached there for the next tune)."""
    if cand.source is not None and not cand.path.exists():
        log(f"making {cand.path.name} ({cand.quant}) from {cand.source.name}")
        models.convert(cand.source, cand.path, cand.quant)
    return cand


def gpu_build() -> bool:
    """True when llama.cpp was built with a GPU backend: drafts are then tried on GPU and on CPU."""
    from . import llama

    return bool(llama.lc.llama_supports_gpu_offload())  # (llama.py has no wrapper for this yet)


# --- calibration --------------------------------------------------------------------------------

def load_prompts(path: Path | None = None, n: int = 8) -> list[str]:
    """The first n prompts of a JSONL file of {"prompt": ...} (default: 8 HumanEval prompts)."""
    path = path or PROMPTS_FILE
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise TuneError(f"Cannot read the prompts file {path} ({e}); "
                        "give a JSONL file of {\"prompt\": ...}") from None
    prompts = []
    for i, line in enumerate(lines[:n], 1):
        try:
            prompt = json.loads(line)["prompt"]
            assert isinstance(prompt, str) and prompt
        except (ValueError, KeyError, TypeError, AssertionError):
            raise TuneError(f"{path} line {i} is not a JSON object with a non-empty \"prompt\" string: "
                            f"{line[:60]!r}") from None
        prompts.append(prompt)
    if not prompts:
        raise TuneError(f"{path} holds no prompts; give a JSONL file of {{\"prompt\": ...}}")
    return prompts


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: sample as the user will, how much to calibrate on, how long to take."""

    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0))
    p_min: float = FALLBACK_P_MIN  # fixed-γ candidates are replayed with a fixed p-min
    max_tokens: int = 64        # generated per calibration prompt
    gamma_max: int = 8
    budget_s: float | None = 600.0
    seed: int = 1
    chat: bool | None = None    # None: the chat template for instruct targets, as generate does
    load: LoadOptions = field(default_factory=LoadOptions)
    quants: tuple[str, ...] = DERIVED_QUANTS
    drafts: tuple[Path, ...] = ()  # drafts outside the store to try too
    confirm: int = 3            # real runs for this many of the best predictions
    devices: tuple[str, ...] | None = None  # None: cpu, and gpu too on a GPU build
    passes: int = 8             # replays per γ at T>0 (acceptance is random there)

    def validate(self) -> TuneOptions:
        """Return self, or raise TuneError naming the bad value."""
        self.sampling.validate()
        checks = [(self.max_tokens >= 2, f"--max-tokens must be >= 2 (got {self.max_tokens})"),
                  (1 <= self.gamma_max <= 64, f"--gamma-max must be in 1..64 (got {self.gamma_max})"),
                  (self.budget_s is None or self.budget_s > 0, f"--budget must be > 0 seconds (got {self.budget_s})"),
                  (self.confirm >= 0, f"confirm must be >= 0 (got {self.confirm})"),
                  (0 <= self.p_min < 1, f"--p-min must be in [0, 1) (got {self.p_min})")]
        for ok, message in checks:
            if not ok:
                raise TuneError(message)
        return self

    def config(self, gamma: int | None, seed: int) -> GenerationConfig:
        """The generation config of one real run at a fixed γ, with this p-min; None: auto γ with p-min
        auto, as generate runs by default."""
        return GenerationConfig(self.max_tokens, gamma, self.sampling, seed, gamma_max=self.gamma_max,
                                p_min=None if gamma is None else self.p_min)


@dataclass
class Run:
    """A calibration prompt and the target's own continuation of it, which every candidate is scored on."""

    prompt: list[int]
    known: list[int]      # the continuation; after a 'length' finish all but its last token (never drafted)
    generated: int
    stopped: bool         # ended by an end-of-generation token, at position `generated`
    target_p: list[Dist] = field(default_factory=list)  # T>0: the target's distribution at 0..len(known)


@dataclass
class Costs:
    """The target side of a step: verify time per batch size, and the controller's own time."""

    verify_s: dict[int, float]  # k -> seconds to decode k tokens with all logits
    step_s: float               # controller time of a plain step (one row judged, one token emitted)
    row_s: float                # each further row judged and token emitted
    draft_step_s: float | None = None  # controller time of a step that drafted (default: step_s)

    def controller(self, drafted: int, accepted: int) -> float:
        """The controller's own time in one step."""
        base = self.step_s if not drafted or self.draft_step_s is None else self.draft_step_s
        return base + accepted * self.row_s

    def step(self, drafted: int, accepted: int, draft_s: float) -> float:
        """Seconds of one step (the cost model's step_seconds; draft_s is the whole draft time)."""
        return step_seconds(drafted, 0.0, self.verify_s.__getitem__, self.controller(drafted, accepted)) + draft_s


# (start, asked, drafted, accepted, draft decodes) of one replayed step
Step = tuple[int, int, int, int, int]


def replay(run: Run, gamma: int, max_tokens: int, guess: Callable[[int, int], tuple[list[float], int]],
           rng: np.random.Generator) -> list[Step]:
    """The controller's steps at a fixed γ along one continuation (speculative.SpeculativeDecoder).

    guess(s, k) -> (acceptance chance of each draft it makes at position s.., draft decodes spent);
    a draft is accepted with its chance, once every draft before it was."""
    steps: list[Step] = []
    s, end = 0, run.generated
    while s < end or (run.stopped and s == end):
        k = min(gamma, max_tokens - s - 1)
        chances, decodes = guess(s, k) if k > 0 else ([], 0)
        a = 0
        while a < len(chances) and rng.random() < chances[a]:
            a += 1
        steps.append((s, k, len(chances), a, decodes))
        s += a + 1
    return steps


def model_guess(run: Run, beta: Sequence[float], conf: Sequence[float], p_min: float):
    """guess() of a draft model: β (acceptance chance) and confidence per position, from teacher
    forcing. It stops before a position whose confidence is below p_min (ModelDrafter): a full
    proposal of k costs k decodes, one stopped after i drafts i + 1."""
    def guess(s: int, k: int) -> tuple[list[float], int]:
        chances = []
        for t in range(s, s + k):
            if p_min > 0 and (conf[t] if t < len(conf) else 0.0) < p_min:
                return chances, len(chances) + 1
            chances.append(beta[t] if t < len(beta) else 0.0)
        return chances, k
    return guess


def ngram_guess(run: Run, greedy: bool, is_eog: Callable[[int], bool]):
    """guess() of the n-gram drafter: its proposal at each step, scored against the continuation."""
    ngram = NGramDrafter()
    ngram.prefill(run.prompt)

    def chance(t: int, token: int) -> float:
        if not greedy:
            return run.target_p[t].prob_of(token) if t < len(run.target_p) else 0.0
        if t < len(run.known):
            return float(run.known[t] == token)
        return float(run.stopped and t == run.generated and is_eog(token))

    def guess(s: int, k: int) -> tuple[list[float], int]:
        ids, _ = ngram.propose(run.prompt + run.known[:s], k)
        return [chance(s + i, t) for i, t in enumerate(ids)], 0
    return guess


def overlap(p: Dist, q: Dist) -> float:
    """Σ_x min(p(x), q(x)): the chance that the p/q rule accepts a draft sampled from q."""
    _, ip, iq = np.intersect1d(p.ids, q.ids, assume_unique=True, return_indices=True)
    return float(np.minimum(p.probs[ip], q.probs[iq]).sum())


# --- results ------------------------------------------------------------------------------------

@dataclass
class Row:
    """What tune learned about one candidate."""

    candidate: Candidate
    steps: dict[int, list[list[list[Step]]]] = field(default_factory=dict)  # γ -> [run][pass] -> steps
    tokens: list[int] = field(default_factory=list)  # tokens generated per run
    draft_s: float = 0.0          # seconds per draft decode (model drafts)
    costs: Costs | None = None
    measured: list[GenerationStats] = field(default_factory=list)  # real runs, one per prompt
    note: str = ""

    def predicted(self, gamma: int, n_runs: int | None = None) -> float:
        """Predicted tokens/s at γ over the first n_runs prompts (all by default)."""
        seconds = sum(self.seconds(gamma, n_runs).values())
        return sum(self.tokens[:n_runs]) / seconds if seconds else 0.0

    def seconds(self, gamma: int, n_runs: int | None = None) -> dict[str, float]:
        """Predicted time at γ over the first n_runs prompts, split as GenerationStats splits it."""
        c = self.costs
        out = {"draft": 0.0, "verify": 0.0, "controller": 0.0}
        for passes in self.steps[gamma][:n_runs]:
            for steps in passes:
                for _, _, d, a, n in steps:
                    out["draft"] += n * self.draft_s / len(passes)
                    out["verify"] += c.verify_s[d + 1] / len(passes)
                    out["controller"] += c.controller(d, a) / len(passes)
        return out

    @property
    def gamma(self) -> int | None:
        """The draft length with the best prediction (ties go to the shorter); None: auto (hybrid)."""
        if self.candidate.kind == "hybrid":
            return None
        return max(self.steps, key=lambda g: (round(self.predicted(g), 6), -g)) if self.steps else 0

    def _flat(self, gamma: int | None) -> list[Step]:
        """Every replayed step at γ (default: the best γ)."""
        runs = self.steps.get(self.gamma if gamma is None else gamma, [])
        return [step for passes in runs for steps in passes for step in steps]

    def alpha(self, gamma: int | None = None) -> float | None:
        """Fraction of drafts accepted in the replay at γ (default: the best γ)."""
        flat = self._flat(gamma)
        drafted = sum(d for _, _, d, _, _ in flat)
        return sum(a for _, _, _, a, _ in flat) / drafted if drafted else None

    def alpha_at(self, gamma: int | None = None) -> list[float]:
        """Per-position conditional acceptance in the replay: costmodel's a_i."""
        flat = self._flat(gamma)
        width = max((d for _, _, d, _, _ in flat), default=0)
        judged, accepted = [0] * width, [0] * width
        for _, _, d, a, _ in flat:
            for i in range(min(d, a + 1)):  # the positions the target judged
                judged[i] += 1
                accepted[i] += i < a
        return [acc / n for n, acc in zip(judged, accepted) if n]

    def measured_tps(self) -> float | None:
        """Tokens/s over the real runs, as scripts/bench.py counts them."""
        seconds = sum(s.total_s for s in self.measured)
        return sum(s.generated for s in self.measured) / seconds if seconds else None


@dataclass
class TuneResult:
    """The rows, the pick, and what was left out."""

    target: Path
    options: TuneOptions
    rows: list[Row]
    pick: Row
    confirmed: bool          # the pick was measured, not only predicted
    skipped: list[str]
    wall_s: float

    @property
    def baseline(self) -> Row:
        return next(r for r in self.rows if r.candidate.kind == "none")

    @property
    def drift(self) -> float:
        """Target-only speed measured in the last real runs / as predicted from the costs measured at
        the start: how much the machine's speed moved meanwhile (several % over minutes on a shared VM)."""
        base = self.baseline
        measured, predicted = base.measured_tps(), base.predicted(0, len(base.measured) or None)
        return measured / predicted if measured and predicted else 1.0

    def predicted_tps(self, row: Row, gamma: int | None = None) -> float | None:
        """Predicted tokens/s at γ (default: the row's best) over the prompts the real runs covered,
        at the machine's speed of those runs (× drift). None for a row not measured."""
        if not row.steps:
            return None
        n = len(row.measured) or len(self.baseline.measured) or None
        return row.predicted(row.gamma if gamma is None else gamma, n) * self.drift

    def ratio(self, row: Row) -> tuple[float | None, bool]:
        """(speed / target-only, measured?) — measured where both ran, else predicted."""
        m, base = row.measured_tps(), self.baseline.measured_tps()
        if m and base:
            return m / base, True
        p = self.predicted_tps(row)
        return (p / base if p and base else None), False

    def table(self) -> str:
        """A markdown table: one row per candidate; ~ marks a ratio that is only predicted."""
        lines = ["| candidate | quant | device | best γ | α | predicted tok/s | measured tok/s | vs target-only |",
                 "|---|---|---|---|---|---|---|---|"]
        fmt = lambda v, spec: "" if v is None else format(v, spec)  # noqa: E731
        for r in self.rows:
            c = r.candidate
            label, device = c.label + (" ← pick" if r is self.pick else ""), c.device if c.path else ""
            if not r.steps and not r.measured:
                lines.append(f"| {label} | {c.quant} | {device} | | | | | {r.note} |")
                continue
            alpha = r.alpha() if r.steps else _alpha(r.measured)
            ratio, real = self.ratio(r)
            lines.append(f"| {label} | {c.quant} | {device} | {'auto' if r.gamma is None else r.gamma} | "
                         f"{fmt(alpha, '.2f')} | {fmt(self.predicted_tps(r), '.1f')} | "
                         f"{fmt(r.measured_tps(), '.1f')} | {'' if real else '~'}{fmt(ratio, '.2f')}x |")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the pick, its speed and how it was found."""
        r, (ratio, real) = self.pick, self.ratio(self.pick)
        tps = r.measured_tps() if self.confirmed else self.predicted_tps(r)
        how = "measured" if self.confirmed else "predicted only (the budget left no time to confirm)"
        drift = f"; predictions x{self.drift:.2f}, the machine's drift since calibration" if self.confirmed else ""
        return (f"pick: {describe(self.choice())}: {tps:.1f} tok/s {how}, {ratio or 1:.2f}x target-only; "
                f"{len(self.rows) - 1} candidates in {self.wall_s:.0f} s{drift}")

    def choice(self) -> Choice:
        """The pick as the settings a profile applies."""
        c, r = self.pick.candidate, self.pick
        base = self.baseline.measured_tps()
        tps = r.measured_tps() if self.confirmed else self.predicted_tps(r)
        return Choice(drafter=c.kind, draft=c.path if c.kind in ("model", "hybrid") else None, gamma=r.gamma,
                      ngl_draft=c.ngl, temperature=self.options.sampling.temperature,
                      p_min=None if r.gamma is None else self.options.p_min,
                      tokens_per_s=tps, target_only_tokens_per_s=base, confirmed=self.confirmed)

    def plot(self, path: Path) -> Path:
        """A PNG of predicted speedup over target-only vs γ per candidate; measured points as dots."""
        plt = _pyplot()
        base_pred, base_meas = self.baseline.predicted(0), self.baseline.measured_tps()
        fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
        for r in self.rows:
            if r.candidate.kind == "hybrid" and r.measured and base_meas:
                ax.axhline(r.measured_tps() / base_meas, color="black", lw=0.8, ls=":",
                           label=f"{r.candidate.label} (measured)")
            if r.candidate.kind == "none" or not r.steps:
                continue
            gammas = sorted(r.steps)
            line, = ax.plot([0, *gammas], [1.0, *(r.predicted(g) / base_pred for g in gammas)],
                            marker=".", label=f"{r.candidate.label} ({r.candidate.device})"
                            if r.candidate.kind == "model" else r.candidate.label)
            if r.measured and base_meas:
                ax.plot([r.gamma], [r.measured_tps() / base_meas], "o", ms=9, mfc="none", color=line.get_color())
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xlabel("draft length γ")
        ax.set_ylabel("speedup over target-only")
        t = self.options.sampling.temperature
        ax.set_title(f"{self.target.name}, T={t:g}: predicted (lines), measured (circles)", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        try:
            fig.savefig(path)
        except OSError as e:
            raise TuneError(f"Cannot write the plot {path} ({e.strerror or e}); "
                            "choose a writable --plot path") from None
        finally:
            plt.close(fig)
        return path


def _pyplot():
    """matplotlib.pyplot with a file-only backend, or a one-line error saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise TuneError("--plot needs matplotlib: pip install 'localspec[plot]' (or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot() -> None:
    """Raise TuneError now, not after the whole tune, when --plot cannot work."""
    _pyplot()


# --- the tuner ----------------------------------------------------------------------------------

class Tuner:
    """Calibrate, measure every candidate, predict, confirm: see the module docstring."""

    def __init__(self, target: Path, options: TuneOptions, prompts: Sequence[str], log: Callable[[str], None] = print,
                 progress: bool = False, clock: Callable[[], float] = time.monotonic):
        self.target, self.options, self.prompts = Path(target), options.validate(), list(prompts)
        self.log, self.progress, self.clock = log, progress, clock
        self.started = clock()
        self.deadline = self.started + options.budget_s if options.budget_s else float("inf")
        self.pair = Pair(self.target, None, options.load)
        self.runs: list[Run] = []
        self.costs: Costs | None = None
        self.prompt_s = 0.0  # one calibration prompt's target-only run
        self.model_s = self.derive_s = 0.0  # the longest a draft measurement / a derivation has taken

    def close(self) -> None:
        self.pair.close()

    # -- phase 1
    def calibrate(self) -> Row:
        """Target-only runs over the prompts (baseline and continuations), then the verify-cost curve."""
        t0 = self.clock()
        prompts = prompt_tokens(self.pair, self.prompts, self.options.chat)
        self._check_room(prompts)
        self._generate(prompts[0], 0, [], -1, max_tokens=8)  # warm-up, not timed
        row = Row(TARGET_ONLY)
        for i, prompt in enumerate(prompts):
            stats = self._generate(prompt, 0, [], i)
            known = self.pair.target_ctx.tokens[len(prompt):]
            self.runs.append(Run(prompt, known, stats.generated, stats.finish_reason == "stop"))
            row.measured.append(stats)
        self.prompt_s = (self.clock() - t0) / len(prompts)  # one prompt's target-only run, prefill included
        if not self.options.sampling.greedy:
            for run in self.runs:
                run.target_p = teacher_rows(self.pair.target_ctx, run,
                                            lambda logits, t: distribution(logits, self.options.sampling))
        self.costs = self._measure_costs(row.measured)
        row.costs = self.costs
        row.steps = {0: [[[(s, 0, 0, 0, 0) for s in range(run.generated + run.stopped)]] for run in self.runs]}
        row.tokens = [run.generated for run in self.runs]
        return row

    def _check_room(self, prompts: list[list[int]]) -> None:
        n_ctx, need = self.pair.target_ctx.n_ctx, self.options.max_tokens + self.options.gamma_max + 1
        for i, p in enumerate(prompts, 1):
            if len(p) + need > n_ctx:
                raise TuneError(f"calibration prompt {i} has {len(p)} tokens; with --max-tokens "
                                f"{self.options.max_tokens} and --gamma-max {self.options.gamma_max} it needs "
                                f"--ctx {len(p) + need} or more (have {n_ctx})")

    def _measure_costs(self, plain: Sequence[GenerationStats], rounds: int = 3) -> Costs:
        """The target's verify time per batch size k and the controller's time per step, timed inside
        the real loop (timed alone, back to back, a decode ran up to 18% faster): short plain runs give
        k = 1, runs with a probe drafter proposing k - 1 tokens the others. Every k is timed in each
        round, minutes apart from nothing else: this VM's speed drifts by 10-30% over minutes, and a
        curve pieced together from different minutes has the wrong shape (it once had k = 1 from the
        slow calibration runs and k > 1 from faster ones). The median of the rounds is kept."""
        probe = ProbeDrafter(self.pair.target_model.n_vocab - 1)
        probes, samples = [], {}  # samples: k -> the mean verify of k in each probe run (median taken)
        for r in range(rounds):
            run = self.runs[r % len(self.runs)]
            for k in range(1, self.options.gamma_max + 2):
                stats = self._generate(run.prompt, k - 1, probe if k > 1 else [], r, max_tokens=k + 3)
                n, seconds = stats.verify_at[k]
                samples.setdefault(k, []).append(seconds / n)
                if k > 1:
                    probes.append(stats)
        verify = {k: float(np.median(v)) for k, v in samples.items()}
        per_step = lambda runs: sum(s.controller_s for s in runs) / max(sum(s.steps for s in runs), 1)  # noqa: E731
        return Costs(verify, per_step(plain), self._row_seconds(), per_step(probes))

    def _row_seconds(self) -> float:
        """What judging one more verify row costs: the argmax (T=0) or the filtered distribution (T>0)."""
        ctx, params = self.pair.target_ctx, self.options.sampling
        ctx.decode([ctx.tokens[-1]], logits="last")  # any row will do
        logits = np.array(ctx.logits(-1))
        t0 = time.perf_counter()
        for _ in range(20):
            greedy_token(logits) if params.greedy else distribution(logits, params)
        return (time.perf_counter() - t0) / 20

    # -- phase 2 and 3
    def measure(self, cand: Candidate) -> Row:
        """Replay the candidate at every γ along the continuations; time its drafts."""
        row = Row(cand, costs=self.costs, tokens=[run.generated for run in self.runs])
        gammas = range(1, self.options.gamma_max + 1)
        passes = 1 if self.options.sampling.greedy else self.options.passes
        if cand.kind == "ngram":
            guesses = [ngram_guess(r, self.options.sampling.greedy, self.pair.target_model.is_eog) for r in self.runs]
            row.steps = self._replay_all(guesses, gammas, passes)
            return row
        cand = self._materialize(cand)
        t0 = self.clock()
        model, ctx = load_draft(cand, self.options.load)
        try:
            guesses = [self._model_guess(ctx, run) for run in self.runs]
            row.steps = self._replay_all(guesses, gammas, passes)
            row.draft_s = self._time_drafts(ctx)
        finally:
            ctx.close()
            model.close()
        self.model_s = max(self.model_s, self.clock() - t0)
        return row

    def _replay_all(self, guesses, gammas, passes: int) -> dict[int, list[list[list[Step]]]]:
        rng = np.random.default_rng(self.options.seed)
        return {g: [[replay(run, g, self.options.max_tokens, guess, rng) for _ in range(passes)]
                    for run, guess in zip(self.runs, guesses)] for g in gammas}

    def _model_guess(self, ctx: Context, run: Run):
        """Teacher forcing: the draft's acceptance chance and confidence at every position of run."""
        params, is_eog = self.options.sampling, self.pair.target_model.is_eog

        def score(logits: np.ndarray, t: int) -> tuple[float, float]:
            conf = top_probability(logits) if self.options.p_min > 0 else 1.0
            if not params.greedy:
                return overlap(run.target_p[t], distribution(logits, params)), conf
            token = greedy_token(logits)
            if t < len(run.known):
                return float(token == run.known[t]), conf
            return float(run.stopped and is_eog(token)), conf

        rows = teacher_rows(ctx, run, score)
        return model_guess(run, [b for b, _ in rows], [c for _, c in rows], self.options.p_min)

    def _time_drafts(self, ctx: Context, n_runs: int = 2, max_tokens: int = 24) -> float:
        """Seconds per draft decode, timed in short real runs (the target verifying in between, as it
        will), at the machine's speed of the calibration: the target's verifies in the same runs say
        how much faster or slower the machine is now (speed_scale) and the draft time is scaled back."""
        timed = TimedDrafter(ModelDrafter(ctx, self.options.sampling))
        runs = [self._generate(run.prompt, min(4, self.options.gamma_max), timed, i,
                               max_tokens=min(max_tokens, self.options.max_tokens))
                for i, run in enumerate(self.runs[:n_runs])]
        if not timed.decodes:
            return 0.0
        return timed.seconds / timed.decodes / speed_scale(runs, self.costs.verify_s)

    def _materialize(self, cand: Candidate) -> Candidate:
        t0 = self.clock()
        materialize(cand, self.say)
        self.derive_s = max(self.derive_s, self.clock() - t0)
        return cand

    # -- phase 4
    def confirm(self, rows: list[Row]) -> bool:
        """Real runs of the best predictions, of target-only, and of what a user gets without a
        profile with the best draft (hybrid, γ auto: not predicted, only measured), alternating
        prompt by prompt; False when the budget left no time for any. Appends the hybrid row."""
        ranked = sorted((r for r in rows if r.steps and r.candidate.kind != "none"),
                        key=lambda r: -r.predicted(r.gamma))[: self.options.confirm]
        if not ranked or self.clock() >= self.deadline:
            return False
        best_draft = max((r for r in rows if r.steps and r.candidate.kind == "model"),
                         key=lambda r: r.predicted(r.gamma), default=None)
        if best_draft is not None:
            c = best_draft.candidate
            rows.append(Row(replace(c, label=f"hybrid auto, {c.label}", kind="hybrid", source=None),
                            tokens=best_draft.tokens))
        base = next(r for r in rows if r.candidate.kind == "none")
        chosen = [base, *ranked] + ([rows[-1]] if best_draft is not None else [])
        loaded = {id(r): load_draft(r.candidate, self.options.load) for r in chosen if r.candidate.path}
        try:
            self._generate(self.runs[0].prompt, 0, [], -1, max_tokens=8)  # warm-up after the drafts ran
            base.measured, state = [], {}
            for i, run in enumerate(self.runs):
                if i and self.clock() >= self.deadline:
                    self.say(f"--budget: confirmed on {i} of {len(self.runs)} prompts")
                    break
                for r in chosen:
                    sources = make_sources(r.candidate.kind, loaded.get(id(r), (None, None))[1], self.options,
                                           state.setdefault(id(r), {}))
                    r.measured.append(self._generate(run.prompt, r.gamma, sources, i))
        finally:
            for model, ctx in loaded.values():
                ctx.close()
                model.close()
        return True

    def _generate(self, prompt: list[int], gamma: int | None, sources, i: int,
                  max_tokens: int | None = None) -> GenerationStats:
        """One real generation, as generate runs it; i < 0 for a warm-up. sources: a drafter, or
        make_sources()'s list."""
        config = self.options.config(gamma, self.options.seed + max(i, 0))
        if sources is not None and not isinstance(sources, list):
            sources = [(sources, CostTracker())]
        return generate_once(self.pair.target_ctx, prompt, replace(config, max_tokens=max_tokens or config.max_tokens),
                             sources or [])

    # -- the whole run
    def run(self) -> TuneResult:
        """All four phases within the budget; the pick is the fastest measured configuration (choose)."""
        self.say(f"calibrating {self.target.name} on {len(self.prompts)} prompts x {self.options.max_tokens} tokens")
        rows = [self.calibrate()]
        devices = self.options.devices or (("cpu", "gpu") if gpu_build() else ("cpu",))
        candidates, skipped = discover(self.target, self.options.drafts, self.options.quants, devices)
        for cand in self._progress(candidates):
            rows.append(self._measure_or_skip(cand))
        confirmed = self.confirm(rows)
        pick = choose(rows, confirmed)
        return TuneResult(self.target, self.options, rows, pick, confirmed and bool(pick.measured), skipped,
                          self.clock() - self.started)

    def _measure_or_skip(self, cand: Candidate) -> Row:
        estimate = self.model_s + (self.derive_s if cand.source and not cand.path.exists() else 0.0)
        # Measuring every candidate comes first; then the real runs, on at least two prompts.
        reserve = (self.options.confirm + 1) * 2 * self.prompt_s * 1.25
        if cand.kind == "model" and self.clock() + estimate + reserve > self.deadline:
            return Row(cand, note="skipped: --budget")
        try:
            return self.measure(cand)
        except (LlamaError, models.ModelError) as e:
            self.say(f"{cand.label}: {e}")
            return Row(cand, note="failed: " + str(e).split(";")[0][:60])

    def _progress(self, candidates: list[Candidate]):
        if not self.progress:
            return candidates
        from tqdm.auto import tqdm

        self.bar = tqdm(candidates, desc="candidates", unit="", file=sys.stderr, leave=False)
        return self.bar

    def say(self, text: str) -> None:
        """A line of progress news (above the progress bar, when there is one)."""
        bar = getattr(self, "bar", None)
        if bar is not None and not bar.disable and bar.n < bar.total:
            bar.write(text, file=sys.stderr)
        else:
            self.log(text)


def choose(rows: Sequence[Row], confirmed: bool) -> Row:
    """The pick: the fastest measured configuration, where speculation must beat target-only by
    PICK_MIN_GAIN; the best prediction when nothing speculative was measured."""
    measured = [r for r in rows if r.measured]
    if confirmed and any(r.candidate.kind != "none" for r in measured):
        base = next(r for r in measured if r.candidate.kind == "none")
        best = max(measured, key=lambda r: r.measured_tps() or 0.0)
        won = (best.measured_tps() or 0.0) >= (1 + PICK_MIN_GAIN) * (base.measured_tps() or 0.0)
        return best if won else base
    return max((r for r in rows if r.steps), key=lambda r: r.predicted(r.gamma))


def load_draft(cand: Candidate, load: LoadOptions) -> tuple[Model, Context]:
    """A draft model and its context, on the candidate's device."""
    model = Model(cand.path, n_gpu_layers=cand.ngl)
    try:
        return model, Context(model, load.n_ctx, load.threads)
    except LlamaError:
        model.close()
        raise


def prompt_tokens(pair: Pair, prompts: Sequence[str], chat: bool | None) -> list[list[int]]:
    """The prompts as target tokens; chat None: the chat template for instruct targets, as generate does."""
    chat = pair.is_instruct() if chat is None else chat
    return [pair.prompt_tokens(p, chat) for p in prompts]


def make_sources(kind: str, draft_ctx: Context | None, options: TuneOptions, state: dict | None = None) -> list:
    """The controller's (drafter, cost tracker) sources for a kind, set up as Pair.decoder sets them up:
    'model', 'ngram', 'hybrid' (n-gram, then the model) or 'none'. state, one dict per configuration,
    keeps the n-gram index and the hybrid's cost trackers from one generation to the next, as a Pair does."""
    state = {} if state is None else state
    if kind == "hybrid":  # γ auto, with the caps and the p-min generate takes
        auto = options.config(None, options.seed)
        return pair_sources(("ngram", "model"), draft_ctx, auto, state, state.setdefault("ngram", NGramDrafter()))
    if kind == "ngram":
        return [(NGramDrafter(), CostTracker())]
    if kind == "model":
        return [(ModelDrafter(draft_ctx, options.sampling), CostTracker())]
    return []


def generate_once(target_ctx: Context, prompt: list[int], config: GenerationConfig, sources=()) -> GenerationStats:
    """One real generation through the controller; its stats."""
    sources = list(sources) if config.gamma != 0 else []
    for item in SpeculativeDecoder(target_ctx, sources).generate(prompt, config):
        if isinstance(item, Finished):
            return item.stats
    raise AssertionError("a generation always ends with Finished")


def speed_scale(runs: Sequence[GenerationStats], verify_s: dict[int, float]) -> float:
    """How long the target's verifies in these runs took against the calibrated curve: > 1 when the
    machine is slower now than during calibration (1.0 when nothing comparable was verified)."""
    pooled = [(n, seconds, verify_s[k]) for k, (n, seconds) in pooled_verify(runs).items() if k in verify_s]
    measured, expected = sum(seconds for _, seconds, _ in pooled), sum(n * v for n, _, v in pooled)
    return measured / expected if measured > 0 and expected > 0 else 1.0


class ProbeDrafter:
    """Proposes k copies of one token (q one-hot: exact like any drafter). The rule rejects them
    nearly always, so every step verifies k + 1 tokens: a way to time verifies in the real loop."""

    name = "probe"

    def __init__(self, token: int):
        self.token = token

    def propose(self, context: Sequence[int], k: int, rng=None, stop=None) -> Proposal:
        return Proposal([self.token] * k, [one_hot(self.token)] * k)

    def observe(self, n_accepted: int) -> None:
        pass

    def prefill(self, prompt: Sequence[int]) -> None:
        pass

    def offer(self, context: Sequence[int], k: int) -> int:
        return k


class TimedDrafter:
    """A drafter that also counts the seconds and the draft decodes its proposals take: a proposal
    of k costs k decodes, one stopped early (p-min) after i drafts i + 1 (see ModelDrafter)."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.seconds, self.decodes = 0.0, 0

    def propose(self, context: Sequence[int], k: int, rng=None, stop=None) -> Proposal:
        t0 = time.perf_counter()
        proposal = self.inner.propose(context, k, rng, stop)
        self.seconds += time.perf_counter() - t0
        n = len(proposal.ids)
        self.decodes += k if n == k else n + 1
        return proposal

    def observe(self, n_accepted: int) -> None:
        self.inner.observe(n_accepted)

    def prefill(self, prompt: Sequence[int]) -> None:
        self.inner.prefill(prompt)

    def offer(self, context: Sequence[int], k: int) -> int:
        return self.inner.offer(context, k)


def hold(ctx: Context, tokens: Sequence[int]) -> None:
    """Make ctx hold exactly tokens, keeping the prefix it shares with them."""
    n = ctx.reuse_prefix(tokens)
    if n < len(tokens):
        ctx.decode(list(tokens[n:]), logits="none")


def teacher_rows(ctx: Context, run: Run, score: Callable[[np.ndarray, int], object], chunk: int = 64) -> list:
    """score(logits, t) for positions t = 0..len(known): ctx reads prompt + continuation in batches
    (teacher forcing), each row being its prediction for position t."""
    hold(ctx, run.prompt[:-1])
    seq = [run.prompt[-1], *run.known]
    out = []
    for start in range(0, len(seq), chunk):
        part = seq[start : start + chunk]
        ctx.decode(part, logits="all")
        out += [score(ctx.logits(i), start + i) for i in range(len(part))]
    return out


def tune(target: Path, options: TuneOptions, prompts: Sequence[str], log: Callable[[str], None] = print,
         progress: bool = False, clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Run the whole tune for target; see Tuner."""
    tuner = Tuner(target, options, prompts, log, progress, clock)
    try:
        return tuner.run()
    finally:
        tuner.close()


# --- the profile --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Choice:
    """What a profile sets for its target: drafter, draft file, γ and draft layers on the GPU."""

    drafter: str               # "model", "ngram", "hybrid" or "none" (target only)
    draft: Path | None
    gamma: int | None          # None: auto
    ngl_draft: int = 0
    temperature: float = 0.0
    p_min: float | None = GenerationConfig.p_min  # None: auto
    tokens_per_s: float | None = None
    target_only_tokens_per_s: float | None = None
    confirmed: bool = True
    tuned_at: str = ""
    path: Path | None = None   # the profile file it came from

    def flags(self) -> dict:
        """The CLI values it stands for (names as click passes them)."""
        if self.drafter == "none":
            return {"draft": "none", "gamma": 0}
        flags = {"draft": str(self.draft) if self.draft else "none", "drafter": self.drafter, "gamma": self.gamma}
        if self.draft is not None:
            flags.update(ngl_draft=self.ngl_draft, p_min=self.p_min)
        return flags


def describe(choice: Choice) -> str:
    """'drafter model, draft x.gguf, gamma 3' / 'target only'."""
    if choice.drafter == "none":
        return "target only"
    draft = f", draft {choice.draft.name}" if choice.draft else ""
    return f"drafter {choice.drafter}{draft}, gamma {'auto' if choice.gamma is None else choice.gamma}"


def _optional_float(value) -> float | None:
    return None if value is None else float(value)


def profile_path(target: Path) -> Path:
    """A target's profile: beside it, '<target file name>.tune.json'."""
    return Path(target).with_name(Path(target).name + PROFILE_SUFFIX)


def mode_of(temperature: float) -> str:
    """Profiles keep greedy and sampled decoding apart: acceptance differs between them."""
    return "greedy" if temperature == 0 else "sampled"


def save_profile(target: Path, choice: Choice, rows: Sequence[dict] = (), costs: dict | None = None) -> Path:
    """Write choice into target's profile (the other mode's entry is kept), atomically."""
    path = profile_path(target)
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
        modes = data.get("modes") if isinstance(data.get("modes"), dict) else {}
    except (OSError, ValueError):
        modes = {}  # unreadable: replaced by this tune
    draft = None
    if choice.draft is not None:
        beside = choice.draft.parent.resolve() == path.parent.resolve()
        draft = choice.draft.name if beside else str(choice.draft.resolve())
    modes[mode_of(choice.temperature)] = {
        "drafter": choice.drafter, "draft": draft, "gamma": choice.gamma, "ngl_draft": choice.ngl_draft,
        "temperature": choice.temperature, "p_min": choice.p_min, "tokens_per_s": choice.tokens_per_s,
        "target_only_tokens_per_s": choice.target_only_tokens_per_s, "confirmed": choice.confirmed,
        "tuned_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "costs": costs or {},
        "candidates": list(rows)}
    data = {"localspec_profile": PROFILE_VERSION, "target": Path(target).name,
            "target_size": Path(target).stat().st_size, "modes": modes}
    _write_atomically(path, json.dumps(data, indent=2) + "\n")
    return path


def _write_atomically(path: Path, text: str) -> None:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as e:
        raise TuneError(f"Cannot save the profile beside the target in {path.parent} ({e.strerror}); "
                        "put the target in a writable model store (LOCALSPEC_MODELS)") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # readable like any other file in the store
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def load_profile(target: Path, temperature: float) -> Choice | None:
    """The saved choice for target at this temperature's mode; None when there is none.

    Raises TuneError for a profile that cannot be used: unreadable, made for another file of the
    same name, or naming a draft that is gone."""
    path = profile_path(target)
    if not path.is_file():
        return None
    again = "run `localspec tune` again, or delete it"
    try:
        data = json.loads(path.read_text())
        entry = data["modes"].get(mode_of(temperature))
        if entry is None:
            return None
        draft = (path.parent / entry["draft"]) if entry["draft"] else None
        gamma = None if entry["gamma"] is None else int(entry["gamma"])
        choice = Choice(entry["drafter"], draft, gamma, int(entry.get("ngl_draft", 0)),
                        float(entry["temperature"]), _optional_float(entry.get("p_min")),
                        entry.get("tokens_per_s"), entry.get("target_only_tokens_per_s"),
                        bool(entry.get("confirmed", True)), entry.get("tuned_at", ""), path)
        size = data["target_size"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise TuneError(f"Cannot read the tune profile {path} ({type(e).__name__}: {e}); {again}") from None
    if size != Path(target).stat().st_size:
        raise TuneError(f"The tune profile {path} was made for another file named {Path(target).name}; {again}")
    needs_draft = choice.drafter in ("model", "hybrid")
    if choice.drafter not in ("model", "ngram", "hybrid", "none") or needs_draft != (draft is not None):
        raise TuneError(f"The tune profile {path} has an unknown drafter {choice.drafter!r}; {again}")
    if draft is not None and not draft.is_file():
        raise TuneError(f"The tune profile {path} names a draft that is gone ({draft}); {again}")
    return choice


def merge_profile(choice: Choice, given: dict, explicit: set[str]) -> tuple[dict, str]:
    """(flag values to set, a 'profile: ...' line for --stats): the profile fills the flags the user did
    not give, and stands aside when the user's --draft or --drafter differs from its own."""
    mine = choice.flags()
    where = f"{choice.path}" if choice.path else "the profile"
    if "draft" in explicit and not _same_draft(given.get("draft"), choice.draft):
        return {}, f"profile: not used, --draft differs from its {describe(choice)} ({where})"
    if "drafter" in explicit and given.get("drafter") != choice.drafter:
        return {}, f"profile: not used, --drafter differs from its {describe(choice)} ({where})"
    if choice.drafter == "none" and "gamma" in explicit and given.get("gamma") != 0:
        return {}, f"profile: not used, --gamma asks for drafting but it chose target only ({where})"
    updates = {k: v for k, v in mine.items() if k in given and k not in explicit}
    kept = sorted(k for k in mine if k in explicit)
    speed = ""
    if choice.tokens_per_s and choice.target_only_tokens_per_s:
        ratio = choice.tokens_per_s / choice.target_only_tokens_per_s
        speed = f": {choice.tokens_per_s:.1f} tok/s, {ratio:.2f}x target-only"
    note = f"profile: {describe(choice)} (tuned at T={choice.temperature:g}{speed}; {where})"
    if kept:
        note += "; your " + ", ".join("--" + k.replace("_", "-") for k in kept) + " kept"
    return updates, note


def _same_draft(given: str | None, draft: Path | None) -> bool:
    """Whether the user's --draft value names the profile's draft file ('none' matches no draft)."""
    if given is None or str(given).lower() == "none":
        return draft is None
    if draft is None:
        return False
    try:
        return os.path.samefile(models.resolve_model(str(given), pull_missing=False), draft)
    except (models.ModelError, OSError):
        return False


def costs_dict(costs: Costs) -> dict:
    """The measured target costs in milliseconds (saved in the profile, printed by --json)."""
    return {"verify_ms": {k: 1000 * v for k, v in sorted(costs.verify_s.items())},
            "plain_step_controller_ms": 1000 * costs.step_s, "row_ms": 1000 * costs.row_s,
            "draft_step_controller_ms": None if costs.draft_step_s is None else 1000 * costs.draft_step_s}


def result_rows(result: TuneResult) -> list[dict]:
    """The table as JSON-ready dicts (saved in the profile, printed by --json)."""
    out = []
    for r in result.rows:
        c, (ratio, real) = r.candidate, result.ratio(r)
        out.append({"candidate": c.label, "kind": c.kind, "quant": c.quant, "device": c.device,
                    "path": str(c.path) if c.path else None, "note": r.note,
                    "gamma": r.gamma if r.steps else None, "alpha": r.alpha() if r.steps else _alpha(r.measured),
                    "alpha_per_position": r.alpha_at() if r.steps else [],
                    "predicted_tokens_per_s": result.predicted_tps(r),  # at the confirmation's speed
                    "predicted_by_gamma": {g: r.predicted(g) for g in sorted(r.steps)},  # at calibration's
                    "measured_tokens_per_s": r.measured_tps() if r.measured else None,
                    "measured_alpha": _alpha(r.measured), "measured_verify_ms": _verify_ms(r.measured),
                    "ratio": ratio, "ratio_measured": real, "draft_s": r.draft_s,
                    "pick": r is result.pick})
    return out


def _alpha(runs: Sequence[GenerationStats]) -> float | None:
    drafted = sum(s.drafted for s in runs)
    return sum(s.accepted for s in runs) / drafted if drafted else None


def _verify_ms(runs: Sequence[GenerationStats]) -> dict[int, float]:
    """Mean verify milliseconds per batch size over real runs."""
    return {k: 1000 * seconds / n for k, (n, seconds) in pooled_verify(runs).items() if n}
