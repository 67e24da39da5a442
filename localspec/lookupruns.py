"""How far apart a hybrid's n-gram runs come (LookupRuns): what a draft model's catch-up is spread
over (Planner._horizon). Kept by the lookup's tracker across a process's generations."""

from __future__ import annotations

import math


class LookupRuns:
    """How far apart a hybrid's n-gram runs come. A run is a stretch of steps whose accepted tokens
    came from the lookup (its own steps, or a model draft's handoff to a copy); each leaves the draft
    model behind by its tokens. A catch-up's price is spread over the tokens the model may draft
    before the next run (Planner._horizon), not over the generation's rest, which would make a
    catch-up after every break in a copy look paid for. Kept across a process's generations
    (CostTracker.lookup_runs, not saved). The gap expected is the mean gap between runs so far, and
    at least the gap since the last: after a long stretch without one, the lookup is taken to stay
    away as long again."""

    def __init__(self):
        self.runs = 0        # runs so far
        self.outside = 0     # tokens emitted outside them ...
        self.since = 0       # ... and since the last
        self._in_run = False

    def begin(self) -> None:
        """A generation begins: its runs are to come. The mean gap of the process's earlier ones
        stands: on a copy set, each reply's copy begins a token or two after its start."""
        self.since, self._in_run = 0, False

    def note(self, copied: int, emitted: int) -> None:
        """A step that emitted `emitted` tokens, `copied` of them accepted from the lookup (after a
        model draft's own, where it handed over; the target's own token always comes last)."""
        self.outside += emitted - copied
        if copied:
            self.runs += not self._in_run
            self.since = 1
        else:
            self.since += emitted
        self._in_run = copied > 0

    def gap(self) -> float:
        """The tokens expected before the next run (inf before the first; at least 1 after it: the
        target's own token that ended it)."""
        return max(self.outside / self.runs, self.since) if self.runs else math.inf
