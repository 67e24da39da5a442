"""Which draft model goes with a target, chosen the same way for every command and said why: the
catalog pair's draft, else the tune profile's, else the smallest installed model that shares the
target's vocabulary."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import discovery, models
from .compat import check_compatible
from .llama import LlamaError, Model


@dataclass(frozen=True)
class DraftChoice:
    """The draft for a target (None: no draft model fits) and why, as a phrase to show the user."""

    path: Path | None
    reason: str


def choose_draft(target: Path, profile_draft: Path | None = None) -> DraftChoice:
    """The draft for target, first that applies:

    1. the draft the catalog pairs with target, if installed — target known by catalog name or by its
       file (the store's file for a catalog model, or a file of that name and the catalog's size);
    2. profile_draft (the target's tune profile's draft), if it still exists;
    3. the smallest installed model smaller than target with its vocabulary (compatible_drafts).
    DraftChoice(None, why) when none does; a reason names any earlier step that was skipped."""
    target, skipped = Path(target), []
    name = catalog_name(target)
    paired = models.pair_names(name)[1] if name else None
    if paired:
        path = models.installed_already(paired)
        if path is None:
            skipped.append(f"its catalog draft {paired} is not installed (`localspec models pull {paired}`)")
        elif not _same_file(path, target):
            return DraftChoice(path, f"the catalog pairs {paired} with {name}")
    if profile_draft is not None:
        if Path(profile_draft).is_file():
            return DraftChoice(Path(profile_draft), "the draft of the target's tune profile")
        skipped.append(f"the tune profile's draft {profile_draft} is gone (`localspec tune` again)")
    drafts = compatible_drafts(target)
    if drafts:
        why = "the smallest installed model with the target's vocabulary"
        return DraftChoice(drafts[0], why + (f" ({'; '.join(skipped)})" if skipped else ""))
    skipped.append(f"no installed model smaller than {target.name} shares its vocabulary; put a smaller model "
                   f"of its family in {models.store_dir()} to draft with it")
    return DraftChoice(None, "no draft model: " + "; ".join(skipped))


def compatible_drafts(target: Path, all_sources: bool = False) -> list[Path]:
    """The installed models (with all_sources, other apps' too) that can draft for target: smaller
    files with its vocabulary (compat.check_compatible on vocabulary-only loads), smallest first.
    Files llama.cpp cannot load are left out; a target it cannot load raises LlamaError."""
    target = Path(target)
    size = discovery.model_size(target)
    found = [f for f in discovery.find_models(all_sources) if f.size < size and not _same_file(f.path, target)]
    if not found:
        return []
    t = Model(target, vocab_only=True)
    out = []
    try:
        for f in sorted(found, key=lambda f: (f.size, f.name)):
            try:
                d = Model(f.path, vocab_only=True)
            except LlamaError:
                continue
            try:
                check_compatible(t, d)
                out.append(f.path)
            except LlamaError:
                pass
            finally:
                d.close()
    finally:
        t.close()
    return out


def catalog_name(path: Path) -> str | None:
    """The catalog model a file is: the store's file for it, or elsewhere a file of the catalog's file
    name and size; None for any other file."""
    path = Path(path)
    for name, entry in models.load_catalog().models.items():
        if _same_file(models.store_dir() / entry.file, path):
            return name
        try:
            if path.name == entry.file and (entry.size is None or path.stat().st_size == entry.size):
                return name
        except OSError:
            continue
    return None


def _same_file(a: Path, b: Path) -> bool:
    """Whether a and b are the same existing file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
