"""The Tuner: calibrate, measure every candidate, predict, confirm (see the package docstring)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from ..config import ModelError
from ..llama import LlamaError
from ..sampling import distribution
from ..session import Pair
from .candidates import TARGET_ONLY, Candidate, default_devices, discover, hybrid_of, load_draft, materialize
from .measure import RealRuns, draft_scores, measure_costs, prompt_tokens, run_config, teacher_rows, time_drafts
from .options import TuneError, TuneOptions
from .replay import Run, model_guess, ngram_guess, replay_all
from .report import Row, TuneResult

# A speculative pick must measure this much faster than target-only: per-prompt timings on a shared
# machine are noisy, a marginal "win" is often noise, and a pick that loses to plain decoding is worse
# than a missed 3%. (The cost model's CostTracker.min_gain, for the same reason.)
PICK_MIN_GAIN = 0.03
# The real runs measure the hybrid with γ auto (what generate does without a profile) over each of
# this many drafts, the best predicted first. The predictions are of fixed γ, whose drafts stop at a
# fixed p-min; auto's stop rule learns where a draft's guesses hold, and a draft whose guesses hold
# beyond what its confidence says can rank low at fixed γ and run fastest at auto.
AUTO_DRAFTS = 2


def run_tune(target: Path, options: TuneOptions, prompts: Sequence[str], log: Callable[[str], None] = print,
             progress: bool = False, clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Tune target on these prompt texts: the rows measured, the pick and what was left out."""
    tuner = Tuner(target, options, prompts, log, progress, clock)
    try:
        return tuner.run()
    finally:
        tuner.close()


class Tuner:
    """One tune of one target: holds the target, the calibration runs and the measured costs."""

    def __init__(self, target: Path, options: TuneOptions, prompts: Sequence[str], log: Callable[[str], None] = print,
                 progress: bool = False, clock: Callable[[], float] = time.monotonic):
        self.target, self.options, self.prompts = Path(target), options.validate(), list(prompts)
        self.log, self.progress, self.clock = log, progress, clock
        self.started = clock()
        self.deadline = self.started + options.budget_s if options.budget_s else float("inf")
        self.pair = Pair(self.target, None, options.load)
        self.runs: list[Run] = []
        self.costs = None
        self.prompt_s = 0.0  # one calibration prompt's target-only run
        self.model_s = self.derive_s = 0.0  # the longest a draft measurement / a derivation has taken
        self.bar = None

    def close(self) -> None:
        self.pair.close()

    def run(self) -> TuneResult:
        """All four phases within the budget; the pick is the fastest measured configuration (choose)."""
        self.say(f"calibrating {self.target.name} on {len(self.prompts)} prompts x {self.options.max_tokens} tokens")
        rows = [self.calibrate()]
        candidates, skipped = discover(self.target, self.options.drafts, self.options.quants,
                                       self.options.devices or default_devices())
        for cand in self._progress(candidates):
            rows.append(self._measure_or_skip(cand))
        confirmed = self.confirm(rows)
        pick = choose(rows, confirmed)
        return TuneResult(self.target, self.options, rows, pick, confirmed and bool(pick.measured), skipped,
                          self.clock() - self.started)

    # -- phase 1
    def calibrate(self) -> Row:
        """Target-only runs over the prompts (baseline and continuations), then the verify-cost curve."""
        t0, ctx = self.clock(), self.pair.target_ctx
        prompts = prompt_tokens(self.pair, self.prompts, self.options.chat)
        self._check_room(prompts)
        run_config(ctx, prompts[0], "none", None, self.options, 0, -1, max_tokens=8)  # warm-up, not timed
        row = Row(TARGET_ONLY)
        for i, prompt in enumerate(prompts):
            stats = run_config(ctx, prompt, "none", None, self.options, 0, i)
            self.runs.append(Run(prompt, ctx.tokens[len(prompt):], stats.generated, stats.finish_reason == "stop"))
            row.measured.append(stats)
        self.prompt_s = (self.clock() - t0) / len(prompts)  # one prompt's target-only run, prefill included
        if not self.options.sampling.greedy:
            for run in self.runs:
                run.target_p = teacher_rows(ctx, run, lambda logits, t: distribution(logits, self.options.sampling))
        self.costs = measure_costs(ctx, self.runs, self.options, row.measured, self.pair.target_model.n_vocab)
        row.costs = self.costs
        row.steps = {0: [[[(s, 0, 0, 0, 0) for s in range(run.generated + run.stopped)]] for run in self.runs]}
        row.tokens = [run.generated for run in self.runs]
        return row

    def _check_room(self, prompts: list[list[int]]) -> None:
        """TuneError, naming the TuneOptions fields (the CLI names its flags: UserError.worded), unless
        each prompt leaves room for max_tokens and a last draft of gamma_max."""
        n_ctx, need = self.pair.target_ctx.n_ctx, self.options.max_tokens + self.options.gamma_max + 1
        for i, p in enumerate(prompts, 1):
            if len(p) + need > n_ctx:
                rule = (f"must be >= {len(p) + need} (got {n_ctx}): calibration prompt {i} has {len(p)} tokens, "
                        f"and {self.options.max_tokens} generated plus a draft of up to {self.options.gamma_max} "
                        f"need {need} more")
                raise TuneError.about("load.n_ctx", rule, lower=("max_tokens", "gamma_max"))

    # -- phases 2 and 3
    def measure(self, cand: Candidate) -> Row:
        """Replay the candidate at every γ along the continuations; time its drafts."""
        o = self.options
        row = Row(cand, costs=self.costs, tokens=[run.generated for run in self.runs])
        gammas, passes = range(1, o.gamma_max + 1), 1 if o.sampling.greedy else o.passes
        if cand.kind == "ngram":
            guesses = [ngram_guess(r, o.sampling.greedy, self.pair.target_model.is_eog) for r in self.runs]
            row.steps = replay_all(self.runs, guesses, gammas, o.max_tokens, passes, o.seed)
            return row
        self._materialize(cand)
        t0 = self.clock()
        model, ctx = load_draft(cand, o.load)
        try:
            guesses = [model_guess(run, *draft_scores(ctx, run, o.sampling, o.fixed_p_min,
                                                      self.pair.target_model.is_eog), o.fixed_p_min)
                       for run in self.runs]
            row.steps = replay_all(self.runs, guesses, gammas, o.max_tokens, passes, o.seed)
            row.draft_s = time_drafts(self.pair.target_ctx, ctx, self.runs, o, self.costs.verify_s)
        finally:
            ctx.close()
            model.close()
        self.model_s = max(self.model_s, self.clock() - t0)
        return row

    def _materialize(self, cand: Candidate) -> None:
        t0 = self.clock()
        materialize(cand, self.say)
        self.derive_s = max(self.derive_s, self.clock() - t0)

    def _measure_or_skip(self, cand: Candidate) -> Row:
        estimate = self.model_s + (self.derive_s if cand.source and not cand.path.exists() else 0.0)
        # Measuring every candidate comes first; then the real runs, on at least two prompts.
        reserve = (1 + self.options.confirm + AUTO_DRAFTS) * 2 * self.prompt_s * 1.25
        if cand.kind == "model" and self.clock() + estimate + reserve > self.deadline:
            return Row(cand, note="skipped: --budget")
        try:
            return self.measure(cand)
        except (LlamaError, ModelError) as e:
            self.say(f"{cand.label}: {e}")
            return Row(cand, note="failed: " + str(e).split(";")[0][:60])

    # -- phase 4
    def confirm(self, rows: list[Row]) -> bool:
        """Real runs of the best predictions, of target-only, and of what a user gets without a
        profile with each of the AUTO_DRAFTS best predicted drafts (hybrid, γ auto: not predicted,
        only measured), alternating prompt by prompt; False when the budget left no time for any.
        Appends the hybrid rows."""
        by_prediction = sorted((r for r in rows if r.steps), key=lambda r: -r.predicted(r.gamma))
        ranked = [r for r in by_prediction if r.candidate.kind != "none"][: self.options.confirm]
        if not ranked or self.clock() >= self.deadline:
            return False
        drafts = [r for r in by_prediction if r.candidate.kind == "model"][:AUTO_DRAFTS]
        hybrids = [Row(hybrid_of(d.candidate), tokens=d.tokens) for d in drafts]
        rows.extend(hybrids)
        base = next(r for r in rows if r.candidate.kind == "none")
        self._confirm_runs([base, *ranked, *hybrids])
        return True

    def _confirm_runs(self, chosen: list[Row]) -> None:
        """Each prompt in turn, a real run of each chosen row, until the budget runs out."""
        real = RealRuns(self.pair.target_ctx, self.options)
        try:
            real.load(r.candidate for r in chosen)
            real.warm_up(self.runs[0].prompt)  # after the drafts ran
            chosen[0].measured = []  # the baseline's calibration runs are replaced
            for i, run in enumerate(self.runs):
                if i and self.clock() >= self.deadline:
                    self.say(f"--budget: confirmed on {i} of {len(self.runs)} prompts")
                    break
                for r in chosen:
                    r.measured.append(real.run(r.candidate, r.gamma, run.prompt, i))
        finally:
            real.close()

    # -- progress
    def _progress(self, candidates: list[Candidate]):
        """The candidates, with progress shown on stderr: a bar redrawn in place on a terminal; else (a
        log file, a pipe) a line per candidate, since the bar's carriage returns would leave its states
        and the next message on one line there."""
        if not self.progress:
            return candidates
        if not sys.stderr.isatty():
            return self._progress_lines(candidates)
        from tqdm.auto import tqdm

        self.bar = tqdm(candidates, desc="candidates", unit="", file=sys.stderr, leave=False)
        return self.bar

    def _progress_lines(self, candidates: list[Candidate]):
        for i, cand in enumerate(candidates, 1):
            self.say(f"candidate {i}/{len(candidates)}: {cand.label}")
            yield cand

    def say(self, text: str) -> None:
        """A line of progress news (above the progress bar, when there is one)."""
        bar = self.bar
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
