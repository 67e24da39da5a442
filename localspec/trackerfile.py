"""CostTracker's file form: its measurements as JSON-ready data for warm start (warmstart.py keeps
one file per setup in the store), and a tracker loaded from them (CostTracker.to_dict, from_dict).

Saved counts weigh little in a new process (WARM_MAX_COUNT), and a loaded tracker's point estimate
is no known choice until CONFIRM_STEPS drafting steps here confirm it (CostTracker.confirmed). A
saved value that is not a measurement refuses the whole file (ValueError), as one that does not parse.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from .acceptance import PositionAcceptance, TextAcceptance
from .draftstop import CONFIDENCE_BINS, DraftStops, FirstLooks
from .timings import TRUSTED_SAMPLES, Ema, Seconds

if TYPE_CHECKING:
    from .tracker import CostTracker

CONFIRM_STEPS = 2   # own drafting steps before a loaded tracker's point estimate is a known choice
WARM_MAX_COUNT = 8   # saved acceptance counts weigh at most this many observations in a new process


def saved_data(t: CostTracker) -> dict:
    """t's measurements as JSON-ready data, for a warm start."""
    ema = lambda e: [e.value, e.n]  # noqa: E731
    draft_s = t.draft_s if t.draft_s.value is not None else t.saved_draft_s  # kept if not remeasured
    return {"draft_s": ema(draft_s), "overhead_s": ema(t.overhead_s), "load_s": ema(t.load_s),
            "prefill_s": ema(t.prefill_s), "catchup_s": ema(t.catchup_s), "idle_s": t.idle_s,
            "out_s": t.out_s, "remeasure_loss": t.remeasure_loss, "draft_pace": t.draft_pace,
            "step_tokens": ema(t.step_tokens), "step_s": ema(t.step_s),
            "verify": {str(k): ema(e) for k, e in t.verify.points.items()},
            "positions": t.positions.to_rows(),
            "buckets": {str(b): c.to_rows() for b, c in t.buckets.items()},
            "stops": t.stops.to_rows(), "first_stops": [t.stops.asked, t.stops.declined],
            "confidence": [t.conf_judged, t.conf_accepted], "first_looks": list(t.looks.counts),
            "texts": t.texts.to_rows(),
            "proposals": t.proposals, "steps": t.steps, "pricings": list(t.pricings), "first_row": t.first_row,
            # (an extra below nothing is priced as none: saved so, a measurement is never negative)
            "after_wide": {"extra": [[max(e.value, 0.0) if e.value is not None else None, e.n]
                                     for e in t.after_wide.extra], "followed": list(t.after_wide.followed),
                           "wide": t.after_wide.wide}}


def load_saved(t: CostTracker, data: dict, max_count: int = WARM_MAX_COUNT) -> CostTracker:
    """Start t (a new tracker, made with loaded=True) from saved measurements (files without buckets
    load with none). Counts are scaled down to at most max_count per position and per confidence
    bin, so that this run's own steps soon outweigh them. A drafter whose acceptance was counted
    over fewer than CONFIRM_STEPS proposals, over every process that saved it, is learnt afresh, as
    a new one is: only what its drafts do not measure is loaded (the verify curve, the overhead, its
    load and catch-up costs, the steps it has seen; its draft cost only as saved_draft_s, for
    may_pay), so that one rejected first guess cannot keep the draft out of every later process.
    Files from before the count was kept load as they did."""
    _load_ema(t.overhead_s, data["overhead_s"])
    _load_ema(t.load_s, data.get("load_s", [None, 0]))  # files from before lazy drafts: unmeasured
    _load_ema(t.prefill_s, data.get("prefill_s", [None, 0]))
    # files from before catch-ups were priced as batches hold a mean per token, first token included:
    # more than a further token costs (the safe side), and this run's own catch-ups soon replace it
    _load_ema(t.catchup_s, data.get("catchup_s", [None, 0]))
    t.idle_s = _measured(data.get("idle_s", 0.0))
    # what funds and prices the next re-measure (Probes._remeasure); older files: nothing sat out
    t.out_s, t.remeasure_loss = _measured(data.get("out_s", 0.0)), _measured(data.get("remeasure_loss", 0.0))
    t.pricings = [_measured(s) for s in data.get("pricings", [])]  # older files: none
    _load_after_wide(t, data.get("after_wide"))
    # The plain step is measured afresh by the first steps of each process: while drafting pays,
    # nothing else measures it, and a saved one from a busier moment would keep drafting paying.
    # Only the decision to load a draft at all reads it (saved_verify, may_pay).
    for k, e in data["verify"].items():
        if int(k) < 1:
            raise ValueError(f"a verify of {k} tokens")
        _load_ema(t.saved_verify.points.setdefault(int(k), Ema()), e)
        if int(k) != 1:
            _load_ema(t.verify.points.setdefault(int(k), Seconds(TRUSTED_SAMPLES)), e)
    _load_ema(t.saved_draft_s, data["draft_s"])
    # the plain step's seconds when the saved draft cost was measured: a stretch that stalled an earlier
    # process is read at the pace the plain step shows here (budget.pace); older files: the plain step
    # saved with the cost, as loaded above (a stretch the earlier process ended in is read so too)
    pace_s = data.get("draft_pace")
    if pace_s is None and 1 in t.saved_verify:
        pace_s = t.saved_verify.points[1].value
    t.draft_pace = None if pace_s is None else _measured(pace_s)
    # files from before a draft model's cost was kept per row hold a mean per token, first decode in
    t.first_row = bool(data.get("first_row", False))
    t.proposals = int(data.get("proposals", CONFIRM_STEPS))
    t.steps = _count(data.get("steps", 0))  # older files: none kept
    if t.proposals >= CONFIRM_STEPS:
        _load_counts(t, data, max_count)
    return t


def _load_after_wide(t: CostTracker, saved: dict | None) -> None:
    """Load what a wider decode cost the one-row decodes after it (timings.ReturnCost), its counts
    scaled down to weigh as one wider decode; older files, or another number of positions: none."""
    if not saved or len(saved["extra"]) != len(t.after_wide.extra):
        return
    wide = _count(saved["wide"])
    for e, value in zip(t.after_wide.extra, saved["extra"]):
        _load_ema(e, value)
    t.after_wide.followed = [min(_measured(n), wide) / max(wide, 1) for n in saved["followed"]]
    t.after_wide.wide = 1 if wide else 0


def _load_counts(t: CostTracker, data: dict, max_count: int) -> None:
    """Load what t's drafts measured: the draft's cost, the steps' tokens and seconds, and the acceptance
    counts, scaled down to at most max_count (load_saved)."""
    for name in ("draft_s", "step_tokens", "step_s"):
        _load_ema(getattr(t, name), data[name])
    t.positions = PositionAcceptance.from_rows(_scaled(data["positions"], max_count))
    # the steps seen, scaled as the counts are: the optimistic estimate's rounds keep their ratio to
    # the guesses judged
    t.steps = round(t.steps * _factor(data["positions"], max_count))
    t.buckets = {int(b): PositionAcceptance.from_rows(_scaled(rows, max_count))
                 for b, rows in data.get("buckets", {}).items()}
    t.stops = DraftStops.from_rows(_scaled(data.get("stops", [[]] * 4), max_count),  # older files: none
                                   *_scaled([data.get("first_stops", [0, 0])], max_count))
    t.conf_judged, t.conf_accepted = _scaled(data["confidence"], max_count)
    if len(t.conf_judged) != CONFIDENCE_BINS:
        raise ValueError(f"expected {CONFIDENCE_BINS} confidence bins")
    t.looks = FirstLooks(_scaled([data.get("first_looks", [0] * CONFIDENCE_BINS)], max_count)[0])  # older files: none
    t.texts = TextAcceptance.from_rows(data.get("texts", [[], []]))  # older files: none kept


def _load_ema(ema: Ema, saved: Sequence) -> None:
    """A saved average, weighing as one sample: this run's own measurements soon replace it."""
    value, n = saved
    if int(n) < 0:
        raise ValueError(f"a saved average over {n} samples")
    ema.load(None if value is None else _measured(value), int(n))


def _measured(value) -> float:
    """A saved measurement as a float. Every one is of seconds or tokens: one that is not finite or
    is negative (a file edited or damaged) is refused (ValueError), and the whole file with it, as a
    file that does not parse."""
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"a saved measurement must be finite and not negative (got {value})")
    return value


def _scaled(rows: Sequence[Sequence[int]], max_count: int) -> list[list[int]]:
    """Count rows (the first the denominators) scaled down together so no denominator exceeds max_count."""
    f = _factor(rows, max_count)
    return [[round(int(n) * f) for n in r] for r in rows]


def _factor(rows: Sequence[Sequence[int]], max_count: int) -> float:
    """What _scaled multiplies count rows by: at most 1, so that none exceeds max_count."""
    top = max((max((_count(n) for n in r), default=0) for r in rows), default=0)
    return min(1.0, max_count / top) if top else 1.0


def _count(n) -> int:
    """A saved count as an int; a negative one is refused (ValueError), and the whole file with it."""
    if int(n) < 0:
        raise ValueError("a saved count must not be negative")
    return int(n)
