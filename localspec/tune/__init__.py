"""`localspec tune`: which drafter, draft quantization, draft length and device is fastest for one
target on this machine; the answer is saved beside the target as its profile (localspec.profile).

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
4. Confirm the best three predictions by real runs, with the hybrid at γ auto over each of the two
   best predicted drafts (not predicted: auto's stop rule is learnt live), alternating with
   target-only prompt by prompt, and pick the fastest measured (speculation must beat target-only
   by PICK_MIN_GAIN). Predictions are shown at the target-only speed of those runs: a shared
   machine's speed drifts within minutes.

Modules: options (TuneOptions), candidates (discovery, derived drafts), replay (the prediction),
measure (real runs and timings), report (rows, table, plot, profile), tuner (the four phases).
`run_tune` is the entry point; scripts/tune_grid.py measures configurations through `RealRuns`.
"""

from .candidates import NGRAM, TARGET_ONLY, Candidate, discover, hybrid_of, materialize
from .measure import RealRuns, prompt_tokens
from .options import DERIVED_QUANTS, TuneError, TuneOptions, parse_quants
from .report import Row, TuneResult, check_plot
from .tuner import run_tune

__all__ = ["DERIVED_QUANTS", "NGRAM", "TARGET_ONLY", "Candidate", "RealRuns", "Row", "TuneError", "TuneOptions",
           "TuneResult", "check_plot", "discover", "hybrid_of", "materialize", "parse_quants", "prompt_tokens",
           "run_tune"]
