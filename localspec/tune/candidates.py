"""The candidates a tune measures: n-gram lookup, each compatible smaller draft in the store (or
given), and smaller types derived from those drafts, on each device."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .. import models
from ..compat import first_difference
from ..context import Context
from ..devices import local_devices
from ..discovery import installed, model_size
from ..llama import QUANT_TYPES, LlamaError, Model, quant_name
from ..placement import draft_placement
from ..session import LoadOptions
from .options import DERIVED_QUANTS

# Approximate bits per weight, only to order types: a draft is derived only to a smaller type
# (requantizing upward costs more and gains nothing).
BITS = {"F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q6_K": 6.6, "Q5_1": 6.0, "Q5_K_M": 5.7,
        "Q5_K_S": 5.5, "Q5_0": 5.5, "Q4_1": 5.0, "Q4_K_M": 4.9, "Q4_K_S": 4.6, "Q4_0": 4.5,
        "IQ4_NL": 4.5, "IQ4_XS": 4.3, "Q3_K_L": 4.3, "Q3_K_M": 3.9, "Q3_K_S": 3.5, "Q2_K": 3.0}


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


def hybrid_of(cand: Candidate) -> Candidate:
    """Hybrid with γ auto over a draft candidate: what generate does without a profile."""
    return Candidate(f"hybrid auto, {cand.label}", "hybrid", cand.path, cand.quant, cand.device)


def default_devices() -> tuple[str, ...]:
    """Where drafts are tried: on the CPU, and on this machine's GPU too where it has one (a draft
    stays local: RPC servers are for the target; an RPC-enabled build reports GPU offload without one)."""
    return ("cpu", "gpu") if local_devices() else ("cpu",)


def derived_path(src: Path, quant: str) -> Path:
    """Where a draft re-stored as quant is cached: the store, named as `models convert` names it."""
    return Path(os.path.abspath(models.store_dir() / f"{src.stem}-{quant.lower()}.gguf"))


def discover(target: Path, extra: Sequence[Path] = (), quants: Sequence[str] = DERIVED_QUANTS,
             devices: Sequence[str] = ("cpu",)) -> tuple[list[Candidate], list[str]]:
    """The candidates for target, and why each other file was left out.

    The n-gram drafter; every store file (and extra) that is a smaller model with the target's
    vocabulary; from each that is not itself derived, each quant in quants smaller than its own
    type (made on first use and cached in the store); each draft on every device. Target-only is
    the baseline and is not listed."""
    files = _unique([*installed(), *extra])
    derived = _derived_files(files)
    files.sort(key=lambda f: (derived.get(f, f.stem), f in derived, -BITS.get(f.stem.rpartition("-")[2].upper(), 0)))
    drafts, skipped = _usable_drafts(target, files, given=_unique(extra))
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


def _usable_drafts(target: Path, files: Sequence[Path],
                   given: Sequence[Path] = ()) -> tuple[list[tuple[Path, str]], list[str]]:
    """(path, quant) of each file that can draft for target; a 'name: reason' line for each other
    (the target's own file only where given names it as a draft: in the store it is no news)."""
    usable, skipped = [], []
    size = model_size(target)
    t = Model(target, vocab_only=True)
    try:
        for path in files:
            if path.exists() and os.path.samefile(path, target):
                if path in given:
                    skipped.append(f"{path.name}: it is the target itself; give a smaller model of the same vocabulary")
                continue
            if model_size(path) >= size:
                skipped.append(f"{path.name}: not smaller than the target")
                continue
            problem, quant = _judge_draft(t, path)
            if problem:
                skipped.append(f"{path.name}: {problem}")
            else:
                usable.append((path, quant))
    finally:
        t.close()
    return usable, skipped


def _judge_draft(target: Model, path: Path) -> tuple[str | None, str]:
    """(why path cannot draft for target or None, its quantization type), from a vocabulary-only load."""
    try:
        d = Model(path, vocab_only=True)
    except LlamaError as e:
        return str(e), ""
    try:
        problem, quant = first_difference(target, d), quant_name(d.meta("general.file_type"))
    finally:
        d.close()
    return (f"incompatible, {problem}" if problem else None), quant


def materialize(cand: Candidate, log: Callable[[str], None] = print) -> Candidate:
    """Make a derived draft if it is not in the store yet (cached there for the next tune)."""
    if cand.source is not None and not cand.path.exists():
        log(f"making {cand.path.name} ({cand.quant}) from {cand.source.name}")
        models.convert(cand.source, cand.path, cand.quant)
    return cand


def load_draft(cand: Candidate, load: LoadOptions) -> tuple[Model, Context]:
    """A draft model and its context, on the candidate's device."""
    where = draft_placement(cand.path, cand.ngl, load.device_draft, bool(load.rpc))  # local beside an RPC target
    model = Model(cand.path, n_gpu_layers=cand.ngl, devices=where.handles)
    try:
        return model, Context(model, load.n_ctx, load.threads)
    except LlamaError:
        model.close()
        raise
