"""What a tune learned: a Row per candidate (replayed steps, measured runs), and the TuneResult with
its pick, table, summary, plot, JSON and profile."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..config import literal
from ..acceptance import PositionAcceptance
from ..profile import Choice, ProfileError, describe, load_profile, save_profile
from ..stats import GenerationStats, pooled_verify
from .candidates import Candidate
from .options import TuneError, TuneOptions
from .replay import Costs, Step


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
        counts = PositionAcceptance()
        for _, _, d, a, _ in self._flat(gamma):
            counts.record(d, a)
        return [a / j for j, a in zip(counts.judged, counts.accepted) if j]  # positions never judged left out

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
        the start: how much the machine's speed moved meanwhile."""
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
        return "\n".join(lines + [self._table_line(r) for r in self.rows])

    def _table_line(self, r: Row) -> str:
        c = r.candidate
        label, device = c.label + (" ← pick" if r is self.pick else ""), c.device if c.path else ""
        if not r.steps and not r.measured:
            return f"| {label} | {c.quant} | {device} | | | | | {r.note} |"
        fmt = lambda v, spec: "" if v is None else format(v, spec)  # noqa: E731
        alpha = r.alpha() if r.steps else measured_alpha(r.measured)
        ratio, real = self.ratio(r)
        return (f"| {label} | {c.quant} | {device} | {'auto' if r.gamma is None else r.gamma} | "
                f"{fmt(alpha, '.2f')} | {fmt(self.predicted_tps(r), '.1f')} | "
                f"{fmt(r.measured_tps(), '.1f')} | {'' if real else '~'}{fmt(ratio, '.2f')}x |")

    def summary(self) -> str:
        """One line: the pick, its speed and how it was found."""
        r, (ratio, _) = self.pick, self.ratio(self.pick)
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

    def row_dicts(self) -> list[dict]:
        """The table as JSON-ready dicts (saved in the profile, printed by --json)."""
        return [self._row_dict(r) for r in self.rows]

    def _row_dict(self, r: Row) -> dict:
        c, (ratio, real) = r.candidate, self.ratio(r)
        return {"candidate": c.label, "kind": c.kind, "quant": c.quant, "device": c.device,
                "path": str(c.path) if c.path else None, "note": r.note,
                "gamma": r.gamma if r.steps else None,
                "alpha": r.alpha() if r.steps else measured_alpha(r.measured),
                "alpha_per_position": r.alpha_at() if r.steps else [],
                "predicted_tokens_per_s": self.predicted_tps(r),  # at the confirmation's speed
                "predicted_by_gamma": {g: r.predicted(g) for g in sorted(r.steps)},  # at calibration's
                "measured_tokens_per_s": r.measured_tps() if r.measured else None,
                "measured_alpha": measured_alpha(r.measured), "measured_verify_ms": measured_verify_ms(r.measured),
                "ratio": ratio, "ratio_measured": real, "draft_s": r.draft_s,
                "pick": r is self.pick}

    def save(self) -> tuple[Path, str]:
        """Save the pick as the target's profile, with the table and the measured target costs; return
        where, and a note where a profile was kept instead: a pick only predicted (the budget left no
        time to confirm it) does not replace one a run confirmed, for the same decoding mode."""
        choice = self.choice()
        if not choice.confirmed:
            try:
                saved = load_profile(self.target, choice.temperature)
            except ProfileError:
                saved = None  # unusable: replaced
            if saved is not None and saved.confirmed:
                return saved.path, (f"kept the confirmed profile of {saved.tuned_at} ({describe(saved)}): "
                                    "this pick is only predicted; give a larger --budget to replace it")
        return save_profile(self.target, choice, self.row_dicts(), self.baseline.costs.to_dict()), ""

    def to_dict(self, profile: Path | None = None) -> dict:
        """The result as JSON-ready data (what `tune --json` prints); profile: where it was saved."""
        return {"target": str(self.target), "pick": self.summary(), "profile": str(profile) if profile else None,
                "skipped": self.skipped, "wall_s": self.wall_s, "seed": self.options.seed, "rows": self.row_dicts(),
                "costs": self.baseline.costs.to_dict()}

    def plot(self, path: Path) -> Path:
        """A PNG of predicted speedup over target-only vs γ per candidate; measured points as dots."""
        plt = _pyplot()
        fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
        self._draw(ax)
        fig.tight_layout()
        try:
            fig.savefig(path)
        except OSError as e:
            raise TuneError.naming(f"Cannot write the plot {literal(str(path))} ({literal(str(e.strerror or e))}); "
                                   "choose a writable {plot_path}") from None
        finally:
            plt.close(fig)
        return path

    def _draw(self, ax) -> None:
        base_pred, base_meas = self.baseline.predicted(0), self.baseline.measured_tps()
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


def _pyplot():
    """matplotlib.pyplot with a file-only backend, or a one-line error saying how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise TuneError.naming("{plot} needs matplotlib: pip install 'localspec[plot]' "
                               "(or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def check_plot(path: Path) -> None:
    """Raise TuneError now, not after the whole tune, when a plot cannot be written to path: no
    matplotlib, a format it cannot write (by the file's extension; none is PNG), or a folder that is not
    there or not writable. Named as a library caller names the plot, or as a shell does (tune's --plot)."""
    _pyplot()
    from matplotlib.backend_bases import FigureCanvasBase

    kind, formats = path.suffix[1:].lower(), FigureCanvasBase.get_supported_filetypes()  # what savefig writes
    if kind and kind not in formats:
        raise TuneError.naming(f"{{plot}} {literal(str(path))}: matplotlib cannot write .{literal(kind)} files; "
                               f"use one of {', '.join('.' + k for k in sorted(formats))} (e.g. .png)")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise TuneError.naming(f"Cannot write the plot {literal(str(path))} (the folder {literal(str(folder))} is "
                               "not there or not writable); choose a writable {plot_path}")


def measured_alpha(runs: Sequence[GenerationStats]) -> float | None:
    """Accepted / drafted over real runs; None when nothing was drafted."""
    drafted = sum(s.drafted for s in runs)
    return sum(s.accepted for s in runs) / drafted if drafted else None


def measured_verify_ms(runs: Sequence[GenerationStats]) -> dict[int, float]:
    """Mean verify milliseconds per batch size over real runs."""
    return {k: 1000 * seconds / n for k, (n, seconds) in pooled_verify(runs).items() if n}
