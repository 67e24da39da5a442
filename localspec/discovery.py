"""Finding GGUF models people already have: the store (subfolders too) and, on request, the folders
of LM Studio, Ollama and the Hugging Face hub cache, and $LOCALSPEC_MODEL_DIRS. Each model found has
a name (`find_models` lists them) that `resolve_model` accepts (naming.py picks the file a name stands
for); files are read only for their magic."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from . import models
from .llama import GGUF_MAGIC, SPLIT_TAIL, split_parts

SOURCES = ("store", "lmstudio", "ollama", "hf-cache", "extra")
PLAIN = ("store", "lmstudio", "extra")  # whose folders hold model files named by their path inside
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"
# A model's file in Ollama's blobs folder (a layer's digest names it too): sha256-<hex>, or
# sha256:<hex> as Ollama named blobs before 0.1.x (and a manifest's digest always reads).
OLLAMA_BLOB = re.compile(r"sha256[-:][0-9a-f]{64}")
# Where Linux's service install of Ollama keeps its models (the `ollama` user's home).
OLLAMA_SYSTEM_DIR = Path("/usr/share/ollama/.ollama/models")


@dataclass(frozen=True)
class Found:
    """One GGUF model on this machine."""

    name: str    # what resolve_model accepts: 'sub/x.gguf' (store, lmstudio, extra), 'llama3.2:1b'
                 # (ollama), 'org/repo/x.gguf' (hf-cache, the repo id and the file in it)
    path: Path
    source: str  # one of SOURCES
    size: int    # bytes (of every part, for a split model)


def find_models(all_sources: bool = False) -> list[Found]:
    """The GGUF models in the store; with all_sources also those in other apps' folders and in
    $LOCALSPEC_MODEL_DIRS. A file reachable twice is listed once (the first source wins); entries
    that cannot be read, or do not start with the GGUF magic, are left out."""
    return unique_files(f for tier in search_tiers(all_sources) for f in tier)


def search_tiers(all_sources: bool = True) -> Iterator[list[Found]]:
    """The models in the order a name is looked up in, each scanned only when reached: the store's,
    then (with all_sources) the other apps' and $LOCALSPEC_MODEL_DIRS'."""
    yield store_models()
    if all_sources:
        yield other_models()


def store_models() -> list[Found]:
    """The GGUF files in the store, subfolders included (LM Studio's publisher/repo/file layout)."""
    return _folder_models(models.store_dir(), "store")


def installed() -> list[Path]:
    """The .gguf files in the store, subfolders included (hidden entries, such as downloads under
    way, left out), sorted: GGUF or not, for tune to judge (store_models() keeps the models alone)."""
    return gguf_files(models.store_dir())


def other_models() -> list[Found]:
    """The GGUF models in LM Studio's, Ollama's and the Hugging Face hub cache's folders, then in
    $LOCALSPEC_MODEL_DIRS."""
    return unique_files(f for folder, source in source_folders() if source != "store"
                        for f in _models_in(folder, source))


def source_folders() -> list[tuple[Path, str]]:
    """(folder, source) of each folder models are looked for in, in the order that decides which
    source wins a file reachable twice (unique_files): the store, LM Studio's, Ollama's, the hub cache,
    then $LOCALSPEC_MODEL_DIRS (where one of them names the hub cache, its models keep their repo ids)."""
    return [(models.store_dir(), "store"), *((d, "lmstudio") for d in lmstudio_dirs()),
            *((d, "ollama") for d in ollama_dirs()), (hf_cache_dir(), "hf-cache"),
            *((d, "extra") for d in extra_dirs())]


def _models_in(folder: Path, source: str) -> list[Found]:
    """The models in one of source_folders(), read as its source lays them out."""
    if source in PLAIN:
        return _folder_models(folder, source)
    return guarded(_ollama_models if source == "ollama" else _hf_cache_models, folder)


def lmstudio_dirs() -> list[Path]:
    """LM Studio's models folders (current and older versions): publisher/repo/file.gguf inside."""
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def ollama_dirs() -> list[Path]:
    """Ollama's store: $OLLAMA_MODELS, else the user's ~/.ollama/models and the service install's."""
    if os.environ.get("OLLAMA_MODELS"):
        return [Path(os.environ["OLLAMA_MODELS"]).expanduser()]
    return [Path.home() / ".ollama" / "models", OLLAMA_SYSTEM_DIR]


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, found as huggingface_hub finds it, but read from the environment now
    (huggingface_hub reads it once, at import)."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expandvars(os.environ[var])).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


def kept_by_app(path: Path) -> bool:
    """Whether path (as given or with its links followed) lies in a folder another app manages:
    Ollama's store, the Hugging Face cache or LM Studio's models. localspec reads those apps' files
    and writes none of its own among them (profile.profile_path)."""
    roots = [r.absolute() for r in (*ollama_dirs(), hf_cache_dir(), *lmstudio_dirs())]
    roots += [r.resolve() for r in roots]
    given = Path(path).absolute()
    return any(p.is_relative_to(r) for p in (given, given.resolve()) for r in roots)


def extra_dirs() -> list[Path]:
    """The folders in $LOCALSPEC_MODEL_DIRS (separated by os.pathsep)."""
    return [Path(p).expanduser() for p in os.environ.get("LOCALSPEC_MODEL_DIRS", "").split(os.pathsep) if p.strip()]


def is_gguf(path: Path) -> bool:
    """Whether path is a readable file that starts with the GGUF magic."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def is_model_file(name: str) -> bool:
    """Whether a file name is a model to list: a .gguf that is not a vision projector (mmproj-*, which
    LM Studio keeps beside its model) nor a later part of a split model (llama.cpp loads part 1)."""
    split = SPLIT_TAIL.search(name)
    return (name.lower().endswith(".gguf") and not name.startswith(".") and not name.lower().startswith("mmproj")
            and not (split and split.group(1) != "00001"))


def model_size(path: Path) -> int:
    """The bytes of a model: of all the parts present for a split model (llama.cpp loads them
    together), not of its first file alone; each file is stat'ed once. OSError when path cannot be read."""
    path = Path(path)
    size = path.stat().st_size
    # the other parts (split_parts spells '-of-' in lower case: path's own part may differ in case alone)
    others = [p for p in split_parts(path) if p.name.lower() != path.name.lower()]
    return size + sum(_file_size(p) for p in others)


def _file_size(path: Path) -> int:
    """A regular file's bytes; 0 for a part that is missing, cannot be read, or is no file."""
    try:
        info = path.stat()
    except OSError:
        return 0
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


def gguf_files(folder: Path) -> list[Path]:
    """The .gguf files under folder, recursively (symlinked folders followed once; hidden entries,
    such as the store's temporary downloads, skipped), sorted."""
    out, seen = [], set()
    for root, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a symlink loop, or a folder reachable twice
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        out += [Path(root) / f for f in files if f.lower().endswith(".gguf") and not f.startswith(".")]
    return sorted(out)


def _folder_models(folder: Path, source: str) -> list[Found]:
    """The models under a plain folder, named by their path inside it."""
    return [f for name, path in folder_files(folder) if is_gguf(path) for f in _found(name, path, source)]


def folder_files(folder: Path) -> list[tuple[str, Path]]:
    """(name, path) of each file under folder named as a model, GGUF or not."""
    return [(path.relative_to(folder).as_posix(), path) for path in gguf_files(folder) if is_model_file(path.name)]


def _found(name: str, path: Path, source: str) -> list[Found]:
    """[Found] for a readable file, [] for one that vanished or cannot be read."""
    try:
        return [Found(name, path, source, model_size(path))]
    except OSError:
        return []


def guarded(scan: Callable[[Path], list], folder: Path) -> list:
    """scan(folder), or [] when the folder is missing or cannot be read."""
    try:
        return scan(folder) if folder.is_dir() else []
    except (OSError, ValueError):
        return []


def _ollama_models(root: Path) -> list[Found]:
    """Ollama's models: manifests/<registry>/<namespace>/<name>/<tag> is JSON whose layer of media type
    application/vnd.ollama.image.model is a GGUF blob, blobs/sha256-<hex>. Named as `ollama list`
    names them: name:tag (registry.ollama.ai/library), else namespace/name:tag, else host/ns/name:tag."""
    return [f for name, blob, problem in _ollama_manifests(root) if not problem for f in _found(name, blob, "ollama")]


def unusable_ollama_models() -> list[tuple[str, str]]:
    """(name, why it cannot be used and the fix) of each Ollama manifest whose model is not listed: its
    blob missing or not a GGUF file, or the manifest unreadable. `models list --all` shows them, and a
    name given as --target is told the same (naming.lookup)."""
    return [(name, f"{problem}; run `ollama pull {name}`") for root in ollama_dirs()
            for name, _, problem in guarded(_ollama_manifests, root) if problem]


def _ollama_manifests(root: Path) -> list[tuple[str, Path | None, str]]:
    """(name, model blob, problem) of each manifest: the blob is None, and problem says why, where the
    manifest cannot be read, is not JSON, has no model layer, or names a blob that is missing or is
    no GGUF file (one reading of each manifest and blob decides both listings: _ollama_models and
    unusable_ollama_models)."""
    manifests = root / "manifests"
    return [(_ollama_name(*m.relative_to(manifests).parts), *_ollama_blob(root, m))
            for m in sorted(manifests.glob("*/*/*/*")) if not m.is_dir()]


def _ollama_blob(root: Path, manifest: Path) -> tuple[Path | None, str]:
    """(the model layer's GGUF blob named by a manifest file, "") or (None, why not)."""
    try:
        layers = json.loads(manifest.read_text())["layers"]
        digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_LAYER)
    except OSError as e:
        return None, f"its manifest {manifest} cannot be read ({e.strerror or e})"
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, f"its manifest {manifest} is not a manifest Ollama writes (not JSON, or no layers)"
    except StopIteration:
        return None, f"its manifest {manifest} has no model layer ({OLLAMA_MODEL_LAYER})"
    if not isinstance(digest, str) or not OLLAMA_BLOB.fullmatch(digest):  # never a path built from something else
        return None, f"its manifest {manifest} names its model by {digest!r}, not a sha256 digest"
    for name in (f"sha256-{digest[7:]}", f"sha256:{digest[7:]}"):  # older Ollama versions used ':'
        blob = root / "blobs" / name
        if blob.is_file():
            return (blob, "") if is_gguf(blob) else (None, f"its model file {blob} is not a GGUF file")
    return None, f"its model file, blob sha256-{digest[7:]}, is missing from {root / 'blobs'}"


def _ollama_name(host: str, namespace: str, name: str, tag: str) -> str:
    """'llama3.2:1b' for the default registry's library; longer where Ollama's own names are longer."""
    if host != OLLAMA_REGISTRY:
        return f"{host}/{namespace}/{name}:{tag}"
    return f"{name}:{tag}" if namespace == "library" else f"{namespace}/{name}:{tag}"


def _hf_cache_models(cache: Path) -> list[Found]:
    """GGUF files in the hub cache's model repos (models--org--repo/snapshots/<rev>/...), named
    repo_id/path-in-repo; where several revisions hold a file, the one `main` points to (else the
    newest) is taken, unless its blob was deleted. Read here file by file: huggingface_hub's
    scan_cache_dir leaves out a whole repo when one of its links is broken."""
    return [f for name, path in hf_cache_files(cache) if is_gguf(path) for f in _found(name, path, "hf-cache")]


def hf_cache_files(cache: Path) -> list[tuple[str, Path]]:
    """(name, path) of each file in the hub cache named as a model, GGUF or not (_hf_cache_models), sorted."""
    chosen: dict[str, tuple[tuple[bool, bool, float], Path]] = {}
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name.removeprefix("models--").replace("--", "/")
        main = _read_ref(repo / "refs" / "main")
        for snapshot in sorted((repo / "snapshots").glob("*")):
            for path in gguf_files(snapshot):
                if not is_model_file(path.name):
                    continue
                name = f"{repo_id}/{path.relative_to(snapshot).as_posix()}"
                rank = (path.exists(), snapshot.name == main, _mtime(path))  # a broken link last
                if name not in chosen or rank > chosen[name][0]:
                    chosen[name] = (rank, path)
    return [(name, path) for name, (_, path) in sorted(chosen.items())]


def _read_ref(path: Path) -> str | None:
    """The revision a hub cache ref file holds, or None."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _mtime(path: Path) -> float:
    """When path's file (its blob) was written; 0 for a broken link."""
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def unique_files(found: Iterable[Found]) -> list[Found]:
    """found without a file already listed (file_key), order kept; but every Ollama name of a file
    is kept: Ollama's tags of one model (llama3.2:latest, llama3.2:3b, a copy made with `ollama cp`)
    share its blob, and each is a name `ollama list` shows and users give."""
    seen, out = set(), []
    for f in found:
        key = (file_key(f.path), f.name if f.source == "ollama" else None)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def file_key(path: Path) -> tuple[int, int] | str:
    """What one file is known by however it is reached: its device and inode, which a symbolic link
    leads to and a hard link shares (LM Studio's `lms import` can leave one in its folder); its real
    path where it cannot be stat'ed."""
    try:
        info = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return info.st_dev, info.st_ino
