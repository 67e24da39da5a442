"""Measuring the plain step again (Planner's baseline part): every choice is priced against the plain
step, and while drafting wins nothing else measures it (Planner._plain_again), nor where the first
plain steps of a process were its slowest (Planner._plain_doubted)."""

from __future__ import annotations

from .budget import Exploration
from .plans import Choice

# Plain steps that measure the baseline before any drafting. Every choice is priced against the plain
# step, and while drafting pays nothing measures it again: a process's first target decode can cost
# several times the next ones (its weights still faulting in), and the median of three drops it.
PLAIN_SAMPLES = 3
FALLING = 0.9  # a plain step this far under the plain estimate's first samples measures again (_plain_doubted)
DOUBT_STEPS = 2  # drafting steps before a doubted plain estimate is measured again (_plain_doubted)
PLAIN_AGE = 32  # drafting steps after which plain decoding is measured again, as a probe (Planner._plain_again)


class Baseline:
    """Planner's measuring of the plain step again; its state is Planner's: sources, budget,
    _explored, explored."""

    def _plain_doubted(self) -> bool:
        """Whether a plain step is taken to measure plain decoding again, before anything is priced,
        where a wider verify was measured cheaper than the plain step (a decode of more rows seldom
        costs less) while the plain step's estimate is still the median of its first samples
        (timings.Ema): after DOUBT_STEPS drafting steps, and again after each plain step that came
        in under FALLING times the estimate (the cost still falling), until one does not (the
        estimate holds). A process's first decodes may all be slow (a GPU's first decodes of a
        shape run without its captured graph): their median made a plain step look dearer than a
        draft model's, whose probes, priced against it, funded each other, and the model drafted
        most of a reply at half of plain decoding's speed. Where a plain step truly costs more than
        a wider verify (the F16 target on the Xeon), this costs a process one plain step."""
        tracker = self.sources[0][1]
        points = tracker.verify.points
        one = points[1]  # (measured: _choose asks after PLAIN_SAMPLES)
        if not one.first() or not any(k > 1 and e.value < one.value for k, e in points.items()):
            return False
        falling = tracker.plain_last is not None and tracker.plain_last < FALLING * one.value
        if tracker.plain_age == 0:  # the latest step was plain
            return falling
        return (one.n == PLAIN_SAMPLES or falling) and tracker.plain_age >= DOUBT_STEPS

    def _plain_again(self, best: Choice, plain_s: float) -> bool:
        """Whether a plain step is taken in place of best, the drafting choice the point estimate puts
        ahead of plain decoding (plain_s a step), to measure plain decoding again: a winning choice
        stops plain steps and nothing else measures them, so a slow plain measurement (a stall, the
        machine's pace at its start) would leave drafting chosen for good (scripts/results/HISTORY.md,
        "Plain decoding measured again"). Plain is taken where the latest plain step beat best by best's
        min_gain (a step the estimate lags, not a probe), and where none was measured for PLAIN_AGE
        drafting steps, as best's source's probe under its budget (predicted to lose plain_s against
        best's rate; record charges what it lost): where drafting pays, a step in PLAIN_AGE at most."""
        tracker = self.sources[0][1]
        last = tracker.plain_last
        if last is not None and 1.0 / max(last, 1e-300) > best.rate * (1 + self.sources[best.source][1].min_gain):
            return True
        if tracker.plain_age < PLAIN_AGE or not self.budget.allows(best.source, plain_s - 1.0 / best.rate, plain_s):
            return False
        self._explored = Exploration(best.source, best.rate, None)
        self.explored += 1
        return True
