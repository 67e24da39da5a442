"""What a model name stands for: the one resolver of every command (resolve_model: a name or a path ->
a file, pulling a catalog model if missing); the one file a name picks among the models found on the
machine (discovery.py), in the order lookup tries them; the names `models list` shows, each with why it
does not pick its file (listing); and the known models an unknown name's error lists (known_models)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from . import models
from .config import ModelError
from .discovery import (PLAIN, Found, file_key, find_models, folder_files, guarded, hf_cache_dir, hf_cache_files,
                        is_gguf, search_tiers, source_folders, store_models, unique_files, unusable_ollama_models)
from .llama import unreadable

LISTED_IN_ERRORS = 8  # at most this many other apps' models named in an unknown-model error


def resolve_model(name_or_path: str, *, pull_missing: bool = True) -> Path:
    """A model name or a file path -> an existing GGUF path, the one resolver of every command.

    In turn: an existing file; a catalog name (pulled if missing, unless pull_missing is False); a
    store model by its name, file name or stem (subfolders included); a model in another app's
    folder by the name `find_models(all_sources=True)` lists (see lookup)."""
    path = Path(name_or_path).expanduser()
    try:
        if path.is_file():
            return path
        is_dir = path.is_dir()
    except OSError as e:  # a folder on the way that this user may not read
        raise ModelError(unreadable(path, e)) from None
    if is_dir and _explicit_path(name_or_path):
        raise ModelError(f"{path} is a directory, not a model file; give the path of a .gguf file in it")
    catalog = models.load_catalog()
    if name_or_path in catalog.models:
        target = models.model_path(name_or_path)
        if target.is_file():
            return target
        if not pull_missing:
            raise ModelError(f"{name_or_path} is not installed; run `localspec models pull {name_or_path}`")
        return models.pull(name_or_path)
    if not _explicit_path(name_or_path):
        found = lookup(name_or_path)
        if found is not None:
            return found
    known, pull_it = known_models(catalog), "`localspec models pull NAME` installs a known model"
    if "/" in name_or_path or os.sep in name_or_path or name_or_path.lower().endswith(".gguf"):
        raise ModelError(f"Model file not found: {path}; check the path, or use a model name ({known}; {pull_it})")
    raise ModelError(f"Unknown model '{name_or_path}'. {known}; {pull_it}; or give a path to a .gguf file")


def _explicit_path(text: str) -> bool:
    """Whether text can only mean a path (absolute, ~, ./ or ../), never a model's name."""
    return os.path.isabs(os.path.expanduser(text)) or text.startswith(("./", "../"))


def pair_files(target: str | None, draft: str | None) -> tuple[Path, Path | None]:
    """--target/--draft (names, paths or 'none'; None: the catalog's choice) -> file paths, pulling
    catalog models if missing."""
    target, default_draft = models.pair_names(target)
    draft = default_draft if draft is None else draft
    target_path = resolve_model(target)
    if draft is None or models.names_no_draft(draft):
        return target_path, None
    return target_path, resolve_model(draft)


def installed_target(target: str | None) -> Path | None:
    """The target file a command would load, if it is installed (None: not, or not pulled yet)."""
    try:
        return resolve_model(models.pair_names(target)[0], pull_missing=False)
    except ModelError:
        return None


def listing(all_sources: bool = False) -> list[tuple[Found, str | None]]:
    """find_models(all_sources), each model with why its name does not give it, and the fix (None
    where it does): another file of the same name comes first (the store's), or several files share
    the name (one file name in two folders, LM Studio's and the hub cache's copies of one repo)."""
    tiers = list(search_tiers(all_sources))
    return [(f, _name_misses(f, tiers)) for f in unique_files(f for tier in tiers for f in tier)]


def _name_misses(f: Found, tiers: Sequence[Sequence[Found]]) -> str | None:
    """Why f's name does not give f to lookup, and the fix; None where it does."""
    try:
        path = _pick(f.name, tiers)
    except ModelError:
        return "this name is shared by several files; give this path instead"
    if file_key(path) != file_key(f.path):  # path: never None, f's name is one of its own
        return f"this name picks {path}; give this path instead"
    return None

def lookup(name: str) -> Path | None:
    """The file a model name stands for, or None when nothing has that name.

    Tried in turn, the first that matches wins: store models by their listed name (with or without
    .gguf), store models by file name or stem, other apps' models by their listed name (an Ollama
    name without a tag means :latest), then by file name or stem. ModelError when the first that
    matches matches several files. Last, an Ollama name in another case ('Llama3.2:1B'), as Ollama
    matches names itself."""
    path = _pick(name, search_tiers())
    if path is not None:
        return path
    problem = _why_unlisted(name)
    if problem:
        raise ModelError(problem)
    return None


def _pick(name: str, tiers: Iterable[Sequence[Found]]) -> Path | None:
    """The file name picks in lookup's order, tiers (search_tiers) taken in turn; None where none matches."""
    found: Sequence[Found] = ()
    for found in tiers:
        for forms in (_name_forms, _file_forms):
            path = _one(name, found, lambda f, forms=forms: name in forms(f))
            if path is not None:
                return path
    folded = name.casefold()  # found: the last tier, the other apps' models
    return _one(name, found, lambda f: f.source == "ollama" and folded in {n.casefold() for n in _name_forms(f)})


def _one(name: str, found: Sequence[Found], named: Callable[[Found], bool]) -> Path | None:
    """The file of found that named picks (None: none); ModelError where it picks several."""
    hits = list({file_key(f.path): f for f in found if named(f)}.values())  # files, not names
    if len(hits) > 1:
        raise ModelError(_ambiguous(name, hits))
    return hits[0].path if hits else None


def _why_unlisted(name: str) -> str | None:
    """Why a model file or Ollama model called name is on the machine but not listed, and the fix (a
    failed download saved as a web page, an empty or unreadable file, a deleted blob, a broken Ollama
    manifest); None when nothing has that name."""
    def named(f: Found) -> bool:
        return name in _name_forms(f) | _file_forms(f)

    plain = [(folder, source) for folder, source in source_folders() if source in PLAIN]
    for folder, source in plain:
        for fname, path in folder_files(folder):
            if named(Found(fname, path, source, 0)) and not is_gguf(path):
                return f"Model '{name}' is {path}, which {_file_problem(path)}"
    for oname, why in unusable_ollama_models():
        if named(Found(oname, Path(), "ollama", 0)):  # by its name: an Ollama model's path names nothing
            return f"Ollama's model {oname} cannot be used: {why}"
    for hname, path in guarded(hf_cache_files, hf_cache_dir()):
        if named(Found(hname, path, "hf-cache", 0)) and not is_gguf(path):
            org, repo, inside = hname.split("/", 2)
            download = f"`hf download {org}/{repo} {inside}`"
            return f"Model '{name}' is {path} in the Hugging Face cache, which {_file_problem(path, download)}"
    return None


def _file_problem(path: Path, download: str = "") -> str:
    """What is wrong with a .gguf file that is no GGUF model, and the fix: 'is empty (...); ...'."""
    again = f"download it again{f' ({download})' if download else ''}"
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:
        return f"is a link to a file that was deleted; {again}"
    except OSError as e:
        return f"cannot be read ({e.strerror or e}); check its permissions, or run as a user who can read it"
    if not head:
        return f"is empty (0 bytes: an interrupted download?); {again}, or delete it"
    if head.lstrip()[:1] == b"<":
        return f"is a web page, not a GGUF model (a failed download?); {again}, or delete it"
    return f"is not a GGUF model (it starts with {head[:4]!r}, not b'GGUF'); {again}, or delete it"


def _ambiguous(name: str, hits: list[Found]) -> str:
    """The error for a name that matches several files: their names, or, where two files share a name
    (the same file name in two of $LOCALSPEC_MODEL_DIRS, or in both LM Studio folders), their paths."""
    if len({f.name for f in hits}) == len(hits):
        matches = ", ".join(f"{f.name} ({f.source})" for f in hits)
        return f"Model name '{name}' is ambiguous: it matches {matches}; give one of these names, or a path"
    matches = ", ".join(f"{f.path} ({f.source})" for f in hits)
    return f"Model name '{name}' is ambiguous: it matches {matches}; give the path of the one you mean"


def _name_forms(f: Found) -> set[str]:
    """What names f when given whole: its name, without .gguf, and name for an Ollama name:latest."""
    forms = {f.name, f.name[:-5] if f.name.lower().endswith(".gguf") else f.name}
    if f.source == "ollama" and f.name.endswith(":latest"):
        forms.add(f.name.removesuffix(":latest"))
    return forms


def _file_forms(f: Found) -> set[str]:
    """What names f by its file alone: the last part of its name, with and without .gguf (not for
    Ollama, whose files are blobs)."""
    if f.source == "ollama":
        return set()
    last = PurePosixPath(f.name).name
    return {last, last[:-5] if last.lower().endswith(".gguf") else last}


def known_models(catalog: models.Catalog) -> str:
    """'Known models: a (installed), b, c-f16 (converted from a on pull); also installed: ...; in other
    apps: ...' — for an error about a name that is none of them: what is installed, and what a pull
    would download or convert."""
    items = []
    for name, entry in catalog.models.items():
        if models.installed_already(name):
            items.append(f"{name} (installed)")
        elif entry.derived_from:
            items.append(f"{name} (converted from {entry.derived_from} on pull)")
        else:
            items.append(name)
    text = "Known models: " + ", ".join(items)
    catalog_files = {file_key(models.store_dir() / e.file) for e in catalog.models.values()}
    others = [f.name for f in store_models() if file_key(f.path) not in catalog_files]
    if others:
        text += "; also installed: " + ", ".join(others)
    elsewhere = [f"{f.name} ({f.source})" for f in find_models(all_sources=True) if f.source != "store"]
    if elsewhere:
        more = len(elsewhere) - LISTED_IN_ERRORS
        text += "; in other apps' folders: " + ", ".join(elsewhere[:LISTED_IN_ERRORS]) + (
            f" and {more} more" if more > 0 else "")
    return text
