"""Finding the models people already have, and choosing a draft for a target. Other apps' folders are
built in tmp dirs exactly as each app lays them out, with tiny files that start with the GGUF magic;
HOME and the variables are the test's own (conftest's isolated_store), so nothing real is read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from localspec import discovery, models, naming, pairing
from localspec.config import ModelError

QWEN_15B, QWEN_05B = "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"
QWEN_05B_Q4_0 = "qwen2.5-coder-0.5b-instruct-q4_0"  # the heavy pair's draft
QWEN_F16 = "qwen2.5-coder-1.5b-instruct-f16"


def gguf(path: Path, payload: bytes = b"", size: int | None = None) -> Path:
    """A tiny file that starts with the GGUF magic (sparse up to size, when given)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"GGUF" + payload)
        if size is not None:
            f.truncate(size)
    return path


def ollama_model(root: Path, name: str, tag: str, payload: bytes, host: str = "registry.ollama.ai",
                 namespace: str = "library") -> Path:
    """An Ollama model as `ollama pull` leaves it: a manifest naming a config and a model layer, blobs
    named by their sha256."""
    blob_bytes = b"GGUF" + payload
    digest = hashlib.sha256(blob_bytes).hexdigest()
    config = b'{"model_format":"gguf"}'
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(blob_bytes)
    (root / "blobs" / f"sha256-{hashlib.sha256(config).hexdigest()}").write_bytes(config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                           "digest": f"sha256:{hashlib.sha256(config).hexdigest()}", "size": len(config)},
                "layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}",
                            "size": len(blob_bytes)},
                           {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64,
                            "size": 10}]}
    path = root / "manifests" / host / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest))
    return root / "blobs" / f"sha256-{digest}"


def hf_cached(cache: Path, repo_id: str, filename: str, payload: bytes, revision: str = "a" * 40,
              ref: str | None = "main", repo_type: str = "models") -> Path:
    """A file as hf_hub_download caches it: <type>--org--repo/snapshots/<rev>/<file> a relative symlink
    to blobs/<sha256>, refs/<ref> holding the revision."""
    repo = cache / f"{repo_type}--{repo_id.replace('/', '--')}"
    content = b"GGUF" + payload
    blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(content)
    link = repo / "snapshots" / revision / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    if ref:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(revision)
    return link


def named(found) -> list[tuple[str, str]]:
    return [(f.name, f.source) for f in found]


def write_catalog(tmp_path, monkeypatch, size: int = 10) -> None:
    """A catalog of one downloadable model 'fake' (fake.gguf, `size` bytes) and its derived F16 copy."""
    catalog = {"default_pair": "p",
               "models": {"fake": {"file": "fake.gguf", "hf_repo": "x/y", "hf_file": "fake.gguf", "size": size},
                          "fake-f16": {"file": "fake-f16.gguf", "derived_from": "fake", "quant": "F16"}},
               "pairs": {"p": {"target": "fake-f16", "draft": "fake"}}}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(catalog))
    monkeypatch.setenv("LOCALSPEC_CATALOG", str(path))


def test_the_store_is_searched_with_its_subfolders(isolated_store):
    top = gguf(isolated_store / "x.gguf", b"x")
    nested = gguf(isolated_store / "lmstudio-community" / "Repo-GGUF" / "Model-Q4_K_M.gguf", b"nested")
    gguf(isolated_store / ".hub-abc" / "downloading.gguf")  # a download under way: hidden
    (isolated_store / "notes.gguf").write_text("not a model")
    gguf(isolated_store / "mmproj-model-f16.gguf")  # LM Studio's vision projector beside a model
    gguf(isolated_store / "big-00002-of-00002.gguf")  # the second part of a split model
    assert named(discovery.find_models()) == [("lmstudio-community/Repo-GGUF/Model-Q4_K_M.gguf", "store"),
                                              ("x.gguf", "store")]
    assert discovery.find_models()[1].size == 5
    for name in ("Model-Q4_K_M", "Model-Q4_K_M.gguf", "lmstudio-community/Repo-GGUF/Model-Q4_K_M",
                 "lmstudio-community/Repo-GGUF/Model-Q4_K_M.gguf"):
        assert naming.resolve_model(name) == nested, name
    assert naming.resolve_model("x") == top
    # installed() lists every .gguf in the store, subfolders too, for tune to judge (and report)
    assert [p.relative_to(isolated_store).as_posix() for p in discovery.installed()] == [
        "big-00002-of-00002.gguf", "lmstudio-community/Repo-GGUF/Model-Q4_K_M.gguf", "mmproj-model-f16.gguf",
        "notes.gguf", "x.gguf"]


def test_an_ambiguous_stem_lists_the_matches(isolated_store):
    gguf(isolated_store / "a" / "model.gguf")
    b = gguf(isolated_store / "b" / "model.gguf")
    with pytest.raises(ModelError) as e:
        naming.resolve_model("model")
    assert str(e.value) == ("Model name 'model' is ambiguous: it matches a/model.gguf (store), b/model.gguf (store); "
                            "give one of these names, or a path")
    assert naming.resolve_model("b/model") == b


def test_one_file_name_in_two_folders_is_told_apart_by_path(monkeypatch, tmp_path):
    # both were listed as dup.gguf, and the error said "give one of these names": the one name both have
    a, b = gguf(tmp_path / "a" / "dup.gguf"), gguf(tmp_path / "b" / "dup.gguf")
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", os.pathsep.join([str(a.parent), str(b.parent)]))
    for name in ("dup", "dup.gguf"):
        with pytest.raises(ModelError) as e:
            naming.resolve_model(name)
        assert str(e.value) == (f"Model name '{name}' is ambiguous: it matches {a} (extra), {b} (extra); "
                                "give the path of the one you mean")
    assert naming.resolve_model(str(b)) == b


def test_a_file_hard_linked_into_two_folders_is_one_model(isolated_store, monkeypatch, tmp_path):
    # a hard link (as LM Studio's `lms import` can make) was two models of one name, and the name
    # "ambiguous" between two paths of one file
    home = Path(os.environ["HOME"])
    theirs = gguf(home / ".lmstudio/models/pub/repo/b.gguf", b"b")
    mine = tmp_path / "mine" / "pub/repo/b.gguf"
    mine.parent.mkdir(parents=True)
    os.link(theirs, mine)
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", str(tmp_path / "mine"))
    assert named(discovery.find_models(all_sources=True)) == [("pub/repo/b.gguf", "lmstudio")]
    assert naming.resolve_model("pub/repo/b.gguf") == theirs


def test_files_that_share_a_name_are_told_apart_in_the_listing(isolated_store, monkeypatch, tmp_path):
    # each pair was listed under one name with nothing to say what the name gives: the store's x.gguf
    # (the store comes first), and for LM Studio's and the hub cache's copies of one repo, an error
    home = Path(os.environ["HOME"])
    store_x = gguf(isolated_store / "x.gguf", b"1")
    extra_x = gguf(tmp_path / "extra" / "x.gguf", b"2")
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", str(extra_x.parent))
    lm = gguf(home / ".lmstudio/models/org/repo/c.gguf", b"3")
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hf = hf_cached(cache, "org/repo", "c.gguf", b"4")
    shared = "this name is shared by several files; give this path instead"
    assert [(f.path, why) for f, why in naming.listing(all_sources=True)] == [
        (store_x, None), (lm, shared), (hf, shared), (extra_x, f"this name picks {store_x}; give this path instead")]
    assert naming.resolve_model("x.gguf") == store_x
    with pytest.raises(ModelError) as e:
        naming.resolve_model("org/repo/c.gguf")
    assert str(e.value) == (f"Model name 'org/repo/c.gguf' is ambiguous: it matches {lm} (lmstudio), {hf} "
                            "(hf-cache); give the path of the one you mean")
    assert naming.resolve_model(str(extra_x)) == extra_x


def test_lm_studio_folders(isolated_store, monkeypatch, tmp_path):
    home = Path(os.environ["HOME"])
    new = gguf(home / ".lmstudio/models/lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf")
    old = gguf(home / ".cache/lm-studio/models/TheBloke/Llama-GGUF/llama.Q4_0.gguf")
    gguf(home / ".lmstudio/models/lmstudio-community/Qwen-GGUF/mmproj-Qwen-f16.gguf")
    (home / ".lmstudio/models/lmstudio-community/Qwen-GGUF/README.md").write_text("# Qwen")
    assert discovery.find_models() == []  # other apps only when asked
    assert named(discovery.find_models(all_sources=True)) == [
        ("lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf", "lmstudio"), ("TheBloke/Llama-GGUF/llama.Q4_0.gguf", "lmstudio")]
    assert naming.resolve_model("lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf") == new
    assert naming.resolve_model("llama.Q4_0") == old  # by its file alone, when only one file has that name
    shadow = gguf(isolated_store / "lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf")
    assert naming.resolve_model("lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M") == shadow  # the store comes first


def test_a_split_model_is_listed_once_at_the_size_of_all_its_parts(isolated_store):
    # llama.cpp loads the parts beside the first; the list gave the first part's size (54 MiB of 94)
    home = Path(os.environ["HOME"])
    folder = home / ".lmstudio/models/pub/Big-GGUF"
    first = gguf(folder / "big-Q4_K_M-00001-of-00003.gguf", size=100)
    gguf(folder / "big-Q4_K_M-00002-of-00003.gguf", size=30)
    gguf(folder / "big-Q4_K_M-00003-of-00003.gguf", size=20)
    found = discovery.find_models(all_sources=True)
    assert [(f.name, f.size) for f in found] == [("pub/Big-GGUF/big-Q4_K_M-00001-of-00003.gguf", 150)]
    assert naming.resolve_model("big-Q4_K_M-00001-of-00003") == first
    assert discovery.split_parts(first)[1:] == [folder / "big-Q4_K_M-00002-of-00003.gguf",
                                                folder / "big-Q4_K_M-00003-of-00003.gguf"]
    assert discovery.model_size(gguf(isolated_store / "one.gguf", size=7)) == 7


def test_a_models_size_stats_each_of_its_files_once(isolated_store, monkeypatch):
    # the first part was stat'ed three times and each other part twice (is_file, then stat); each stat is
    # a round trip where the models lie on a network folder
    first = gguf(isolated_store / "big-00001-of-00003.gguf", size=100)
    second = gguf(isolated_store / "big-00002-of-00003.gguf", size=30)  # part 3 not downloaded
    stats, real_stat = [], os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: stats.append(Path(p).name) or real_stat(p, *a, **k))
    assert discovery.model_size(first) == 130
    assert sorted(stats) == sorted([first.name, second.name, "big-00003-of-00003.gguf"])
    stats.clear()
    assert discovery.model_size(second) == 130  # given by a later part: the same files
    assert sorted(stats) == sorted([first.name, second.name, "big-00003-of-00003.gguf"])
    os.mkfifo(isolated_store / "big-00003-of-00003.gguf")  # a part that is no file counts nothing
    assert discovery.model_size(first) == 130
    with pytest.raises(OSError):
        discovery.model_size(isolated_store / "gone-00001-of-00002.gguf")


def test_a_split_model_missing_a_part_or_given_by_a_later_part_says_which_and_the_fix(tmp_path):
    # llama.cpp loads a split model from its first part and opens the rest beside it; either mistake
    # read "the file is truncated or corrupt ... download it again", naming neither the part nor the fix
    from localspec.llama import LlamaError, Model

    first = gguf(tmp_path / "big-Q4_K_M-00001-of-00003.gguf", b"\x03\x00\x00\x00")
    second = gguf(tmp_path / "big-Q4_K_M-00002-of-00003.gguf", b"\x03\x00\x00\x00")
    with pytest.raises(LlamaError) as e:
        Model(first, vocab_only=True)
    assert str(e.value) == (f"llama.cpp could not load {first}: it is the first of 3 parts of a split model, and "
                            "big-Q4_K_M-00003-of-00003.gguf is missing beside it; download every part")
    with pytest.raises(LlamaError) as e:
        Model(second, vocab_only=True)
    assert str(e.value) == (f"llama.cpp could not load {second}: it is part 2 of a model split in 3 files; "
                            f"give its first part, {first}")


def test_ollama_store_by_name_and_tag(monkeypatch, tmp_path):
    root = Path(os.environ["HOME"]) / ".ollama" / "models"
    one_b = ollama_model(root, "llama3.2", "1b", b"one")
    latest = ollama_model(root, "llama3.2", "latest", b"latest")
    mine = ollama_model(root, "coder", "7b", b"user", namespace="someone")
    (root / "manifests/registry.ollama.ai/library/broken").mkdir(parents=True)
    (root / "manifests/registry.ollama.ai/library/broken/latest").write_text("{not json")
    gone = root / "manifests/registry.ollama.ai/library/gone/1b"
    gone.parent.mkdir(parents=True)
    gone.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                            "digest": "sha256:" + "1" * 64}]}))  # its blob was deleted
    evil = root / "manifests/registry.ollama.ai/library/evil/1b"
    evil.parent.mkdir(parents=True)
    evil.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                            "digest": "sha256:../../../etc/passwd"}]}))
    found = discovery.find_models(all_sources=True)
    assert named(found) == [("llama3.2:1b", "ollama"), ("llama3.2:latest", "ollama"), ("someone/coder:7b", "ollama")]
    assert found[0].path == one_b and found[0].size == 7
    assert naming.resolve_model("llama3.2:1b") == one_b
    assert naming.resolve_model("llama3.2") == latest  # as in Ollama, no tag means :latest
    assert naming.resolve_model("someone/coder:7b") == mine
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "elsewhere"))  # OLLAMA_MODELS replaces ~/.ollama/models
    other = ollama_model(tmp_path / "elsewhere", "qwen2.5-coder", "0.5b", b"q", host="hf.co", namespace="Qwen")
    assert named(discovery.find_models(all_sources=True)) == [("hf.co/Qwen/qwen2.5-coder:0.5b", "ollama")]
    assert naming.resolve_model("hf.co/Qwen/qwen2.5-coder:0.5b") == other


def test_ollama_tags_of_one_blob_are_each_listed_and_resolved():
    # llama3.2:latest and llama3.2:3b (or a model copied with `ollama cp`) share one blob; only the
    # first name was kept, and `ollama list`'s other names were "Unknown model"
    root = Path(os.environ["HOME"]) / ".ollama" / "models"
    blob = ollama_model(root, "smol", "latest", b"same")
    assert ollama_model(root, "smol", "135m", b"same") == blob
    assert ollama_model(root, "coder", "v1", b"same", namespace="someone") == blob
    assert named(discovery.find_models(all_sources=True)) == [
        ("smol:135m", "ollama"), ("smol:latest", "ollama"), ("someone/coder:v1", "ollama")]
    for name in ("smol", "smol:latest", "smol:135m", "someone/coder:v1"):
        assert naming.resolve_model(name) == blob


def test_an_ollama_name_in_another_case_resolves_as_ollama_takes_it():
    # `ollama run Llama3.2:1B` runs llama3.2:1b; here it was "Unknown model"
    root = Path(os.environ["HOME"]) / ".ollama" / "models"
    one_b = ollama_model(root, "llama3.2", "1b", b"one")
    latest = ollama_model(root, "llama3.2", "latest", b"latest")
    mine = ollama_model(root, "coder", "q4_K_M", b"user", namespace="someone")
    assert naming.resolve_model("Llama3.2:1B") == one_b
    assert naming.resolve_model("LLAMA3.2") == latest
    assert naming.resolve_model("Someone/Coder:q4_k_m") == mine
    with pytest.raises(ModelError, match="Unknown model"):
        naming.resolve_model("Llama3.3:1B")


def test_hugging_face_hub_cache(monkeypatch, tmp_path):
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # read now, not when huggingface_hub was imported
    main = hf_cached(cache, "bartowski/Qwen-GGUF", "Qwen-Q4_K_M.gguf", b"new", revision="b" * 40)
    hf_cached(cache, "bartowski/Qwen-GGUF", "Qwen-Q4_K_M.gguf", b"old", revision="a" * 40, ref=None)
    nested = hf_cached(cache, "unsloth/Big-GGUF", "Q4_K_M/Big-Q4_K_M-00001-of-00002.gguf", b"part1")
    hf_cached(cache, "unsloth/Big-GGUF", "Q4_K_M/Big-Q4_K_M-00002-of-00002.gguf", b"part2")
    hf_cached(cache, "someone/data", "corpus.gguf", b"d", repo_type="datasets")  # datasets are not models
    config = cache / "models--bartowski--Qwen-GGUF/snapshots" / ("b" * 40) / "config.json"
    config.write_text("{}")
    (cache / "not-a-repo").mkdir()  # huggingface_hub reports it as a warning; skipped
    found = discovery.find_models(all_sources=True)
    assert named(found) == [("bartowski/Qwen-GGUF/Qwen-Q4_K_M.gguf", "hf-cache"),
                            ("unsloth/Big-GGUF/Q4_K_M/Big-Q4_K_M-00001-of-00002.gguf", "hf-cache")]
    assert found[0].path == main and found[0].path.read_bytes() == b"GGUFnew"  # main's revision, not the older one
    assert naming.resolve_model("bartowski/Qwen-GGUF/Qwen-Q4_K_M.gguf") == main
    assert naming.resolve_model("Big-Q4_K_M-00001-of-00002") == nested
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))  # HF_HUB_CACHE wins over HF_HOME
    assert discovery.find_models(all_sources=True) == []


def test_a_deleted_blob_hides_only_its_own_file(monkeypatch, tmp_path):
    # huggingface_hub's scan_cache_dir drops a whole repo for one broken link: every model in it was
    # "Unknown model" after one of its blobs was deleted
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    kept = hf_cached(cache, "org/Smol-GGUF", "smol-Q4_K_M.gguf", b"kept")
    hf_cached(cache, "org/Smol-GGUF", "smol-Q8_0.gguf", b"deleted").resolve().unlink()
    older = hf_cached(cache, "org/Smol-GGUF", "smol-F16.gguf", b"older", revision="c" * 40, ref="v1")
    hf_cached(cache, "org/Smol-GGUF", "smol-F16.gguf", b"newer").resolve().unlink()  # main's copy deleted
    assert named(discovery.find_models(all_sources=True)) == [("org/Smol-GGUF/smol-F16.gguf", "hf-cache"),
                                                              ("org/Smol-GGUF/smol-Q4_K_M.gguf", "hf-cache")]
    assert naming.resolve_model("org/Smol-GGUF/smol-Q4_K_M.gguf") == kept
    assert naming.resolve_model("smol-F16") == older  # the copy still on disk


def test_extra_folders_and_unreadable_entries(monkeypatch, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = gguf(a / "one.gguf")
    gguf(b / "sub" / "two.gguf")
    (b / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")
    (b / "loop").symlink_to(b)  # a folder that contains itself
    (b / "wrong-magic.gguf").write_bytes(b"GGML")
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", os.pathsep.join([str(a), str(b), str(tmp_path / "missing"), str(a)]))
    assert named(discovery.find_models(all_sources=True)) == [("one.gguf", "extra"), ("sub/two.gguf", "extra")]
    assert naming.resolve_model("one") == first
    home = Path(os.environ["HOME"])
    (home / ".cache").mkdir(parents=True)
    (home / ".ollama").write_text("a file where a folder should be")
    (home / ".cache/huggingface").write_text("a file, not the cache")
    assert len(discovery.find_models(all_sources=True)) == 2  # never a crash


def test_other_apps_folders_named_in_model_dirs_keep_their_apps_names(isolated_store, monkeypatch, tmp_path):
    # discovery.source_folders' order decides which source names a file reachable twice: the app's folder
    # comes before $LOCALSPEC_MODEL_DIRS. A guard of that order (it passed before and after
    # naming._why_unlisted came to read the folders from source_folders too), and of LM Studio's broken file told.
    home = Path(os.environ["HOME"])
    lm = home / ".lmstudio/models"
    gguf(lm / "pub/repo/a.gguf")
    (lm / "pub/repo/page.gguf").write_text("<html>Not Found</html>")
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hf_cached(cache, "org/repo", "c.gguf", b"c")
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", os.pathsep.join([str(cache), str(lm)]))
    assert named(discovery.find_models(all_sources=True)) == [("pub/repo/a.gguf", "lmstudio"),
                                                              ("org/repo/c.gguf", "hf-cache")]
    with pytest.raises(ModelError, match="which is a web page"):
        naming.resolve_model("pub/repo/page.gguf")


def test_a_model_on_the_machine_that_cannot_be_used_says_why_and_the_fix(isolated_store, monkeypatch, tmp_path):
    # each was left out of the list, and its name read "Unknown model", naming neither file nor fix
    extra = tmp_path / "downloads"
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", str(extra))
    page = extra / "Qwen-Q4_K_M.gguf"
    page.parent.mkdir(parents=True)
    page.write_text("<!DOCTYPE html><html>Not Found</html>")  # what a failed download saved
    empty = isolated_store / "sub" / "empty.gguf"
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")
    other = extra / "other.gguf"
    other.write_bytes(b"GGML old")
    root = Path(os.environ["HOME"]) / ".ollama" / "models"
    ollama_model(root, "llama3.2", "1b", b"x").unlink()  # its blob deleted
    (root / "manifests/registry.ollama.ai/library/broken").mkdir(parents=True)
    (root / "manifests/registry.ollama.ai/library/broken/latest").write_text("{not json")
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    hf_cached(cache, "org/Smol-GGUF", "smol-Q8_0.gguf", b"x").resolve().unlink()
    blobs, manifests = root / "blobs", root / "manifests/registry.ollama.ai/library"
    link = cache / "models--org--Smol-GGUF/snapshots" / ("a" * 40) / "smol-Q8_0.gguf"
    expected = {
        "Qwen-Q4_K_M": f"Model 'Qwen-Q4_K_M' is {page}, which is a web page, not a GGUF model (a failed download?); "
                       "download it again, or delete it",
        "sub/empty": f"Model 'sub/empty' is {empty}, which is empty (0 bytes: an interrupted download?); "
                     "download it again, or delete it",
        "other.gguf": f"Model 'other.gguf' is {other}, which is not a GGUF model (it starts with b'GGML', not "
                      "b'GGUF'); download it again, or delete it",
        "llama3.2:1b": f"Ollama's model llama3.2:1b cannot be used: its model file, blob sha256-"
                       f"{hashlib.sha256(b'GGUFx').hexdigest()}, is missing from {blobs}; "
                       "run `ollama pull llama3.2:1b`",
        "broken": f"Ollama's model broken:latest cannot be used: its manifest {manifests}/broken/latest is not a "
                  "manifest Ollama writes (not JSON, or no layers); run `ollama pull broken:latest`",
        "smol-Q8_0": f"Model 'smol-Q8_0' is {link} in the Hugging Face cache, which is a link to a file that was "
                     "deleted; download it again (`hf download org/Smol-GGUF smol-Q8_0.gguf`)",
    }
    for name, message in expected.items():
        with pytest.raises(ModelError) as e:
            naming.resolve_model(name)
        assert str(e.value) == message, name
    assert discovery.find_models(all_sources=True) == []
    with pytest.raises(ModelError, match="^Unknown model 'nothing'"):
        naming.resolve_model("nothing")


def test_unknown_name_says_what_is_installed_and_what_can_be_pulled(isolated_store, tmp_path, monkeypatch):
    write_catalog(tmp_path, monkeypatch)
    gguf(isolated_store / "fake.gguf", size=10)
    gguf(isolated_store / "sub" / "mine.gguf")
    ollama_model(Path(os.environ["HOME"]) / ".ollama/models", "llama3.2", "1b", b"x")
    with pytest.raises(ModelError) as e:
        naming.resolve_model("llama9")
    assert str(e.value) == (
        "Unknown model 'llama9'. Known models: fake (installed), fake-f16 (converted from fake on pull); "
        "also installed: sub/mine.gguf; in other apps' folders: llama3.2:1b (ollama); "
        "`localspec models pull NAME` installs a known model; or give a path to a .gguf file")
    with pytest.raises(ModelError, match=r"^Model file not found: .*/nope\.gguf; check the path, or use a "
                                                r"model name \(Known models: fake \(installed\), fake-f16 \(converted"):
        naming.resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelError, match=r"Known models: fake, fake-f16 \(converted from fake on pull\); or"):
        models.pull("llama9")  # pull's own list: the F16 copy is made, not downloaded


def test_installed_already_tells_whether_pull_would_fetch(isolated_store, tmp_path, monkeypatch):
    write_catalog(tmp_path, monkeypatch, size=10)
    assert models.installed_already("fake") is None
    gguf(isolated_store / "fake.gguf", size=9)  # a partial file is not installed
    assert models.installed_already("fake") is None
    path = gguf(isolated_store / "fake.gguf", size=10)
    assert models.installed_already("fake") == path == models.pull("fake", log=pytest.fail)


def test_the_catalog_draft_follows_the_target_by_name_or_by_path(isolated_store, monkeypatch, tmp_path):
    monkeypatch.delenv("LOCALSPEC_CATALOG", raising=False)  # the shipped catalog's pair names
    catalog = models.load_catalog()
    target = gguf(isolated_store / catalog.models[QWEN_15B].file, size=catalog.models[QWEN_15B].size)
    f16 = gguf(isolated_store / catalog.models[QWEN_F16].file)
    draft_file = isolated_store / catalog.models[QWEN_05B].file
    profile_draft = gguf(tmp_path / "tuned-draft.gguf")
    monkeypatch.setattr(pairing, "compatible_drafts", lambda target: [])  # no vocabulary to read in these files
    # the pair's draft is not installed: the profile's, then none, each saying why
    choice = pairing.choose_draft(naming.resolve_model(QWEN_15B), profile_draft)
    assert choice == pairing.DraftChoice(profile_draft, "the draft of the target's tune profile")
    choice = pairing.choose_draft(target)
    assert choice.path is None and choice.reason.startswith(
        f"no draft model: its catalog draft {QWEN_05B} is not installed (`localspec models pull {QWEN_05B}`); "
        f"no installed model smaller than {target.name} shares its vocabulary")
    gguf(draft_file, size=catalog.models[QWEN_05B].size)
    for given in (naming.resolve_model(QWEN_15B), target):  # by catalog name, and by the file's path
        expected = pairing.DraftChoice(draft_file, f"the catalog pairs {QWEN_05B} with {QWEN_15B}")
        assert pairing.choose_draft(given, profile_draft) == expected
    elsewhere = gguf(tmp_path / "downloads" / target.name, size=target.stat().st_size)  # the same file, copied
    assert pairing.choose_draft(elsewhere).path == draft_file
    heavy_draft = gguf(isolated_store / catalog.models[QWEN_05B_Q4_0].file)
    assert pairing.choose_draft(f16) == pairing.DraftChoice(heavy_draft, f"the catalog pairs {QWEN_05B_Q4_0} with {QWEN_F16}")


def renamed_token(src: Path, dst: Path) -> Path:
    """A copy of src with token 1001's text changed (same length): it loads, but cannot draft for src."""
    import shutil

    import gguf as gguf_lib
    import numpy as np

    shutil.copy(src, dst)
    reader = gguf_lib.GGUFReader(dst, "r+")
    tokens = reader.fields["tokenizer.ggml.tokens"]
    text = tokens.parts[tokens.data[1001]]
    text[:] = np.frombuffer(b"Q" * len(text), dtype=np.uint8)
    reader.data.flush()
    del reader
    return dst


def test_a_smaller_model_with_the_same_vocabulary_is_the_draft(smol_path, smol_q4_0, isolated_store):
    isolated_store.mkdir()
    (isolated_store / "smol-q4_0.gguf").symlink_to(smol_q4_0)  # SmolLM2 again, smaller: same vocabulary
    renamed_token(smol_q4_0, isolated_store / "a-smol.gguf")  # as small, and first by name: but incompatible
    gguf(isolated_store / "broken.gguf", b"\x03\x00\x00\x00 not really")  # llama.cpp cannot load it: left out
    assert pairing.compatible_drafts(smol_path) == [isolated_store / "smol-q4_0.gguf"]
    choice = pairing.choose_draft(smol_path)
    assert choice == pairing.DraftChoice(isolated_store / "smol-q4_0.gguf",
                                         "the smallest installed model with the target's vocabulary")
    (isolated_store / "smol-q4_0.gguf").unlink()
    (isolated_store / "smol.gguf").symlink_to(smol_path)  # larger than the target: never its draft
    choice = pairing.choose_draft(smol_q4_0)
    assert choice.path is None and choice.reason.startswith(
        "no draft model: no installed model smaller than smol-q4_0.gguf shares its vocabulary")


def without_chat_template(src: Path, dst: Path) -> Path:
    """A copy of src whose chat template llama.cpp cannot find (its key renamed, same length): a base model."""
    import shutil

    import gguf as gguf_lib

    shutil.copy(src, dst)
    reader = gguf_lib.GGUFReader(dst, "r+")
    key = reader.fields["tokenizer.chat_template"].parts[1]
    key[-1] = ord("X")  # tokenizer.chat_templatX
    reader.data.flush()
    del reader
    return dst


def test_a_gguf_with_a_chat_template_is_chatted_with_whatever_its_name(smol_path, tmp_path):
    # The name said whether to chat: an Ollama blob is named by its hash, a renamed file (or gemma-3-1b-it,
    # Qwen3-0.6B) says neither "instruct" nor "chat", and each ran raw (an SmolLM2-Instruct answered
    # "-look-at-the-world" to "hi"). llama-cli, Ollama and LM Studio apply any template a model ships.
    from localspec.session import LoadOptions, Pair

    blob = tmp_path / ("sha256-" + "ab" * 32)
    renamed = tmp_path / "tiny.gguf"  # general.name says "Smollm2 135M ...": no name to go by
    for link in (blob, renamed):
        link.symlink_to(smol_path)
    base = without_chat_template(smol_path, tmp_path / "smol-instruct-no-template.gguf")
    kinds = {}
    for path in (blob, renamed, base):
        pair = Pair(path, None, LoadOptions(n_ctx=128, threads=1))
        kinds[path.name] = pair.chats_by_default()
        pair.close()
    # a GGUF without a template has nothing to format a prompt with: raw, though its name says instruct
    assert kinds == {blob.name: True, "tiny.gguf": True, base.name: False}


def test_a_model_chats_by_default_when_it_has_a_template_and_only_then(monkeypatch):
    # Ollama before 0.1.x named its blobs sha256:<hex>; neither blob name nor "tiny" says instruct
    from fakes import FakeModel, fake_pair

    monkeypatch.setattr(FakeModel, "meta", lambda self, key: None)  # no general.name to go by
    names = ("sha256-" + "ab" * 32, "sha256:" + "cd" * 32, "tiny.gguf")
    kinds = {name: fake_pair(draft=False, target_path=name).chats_by_default() for name in names}
    assert kinds == {names[0]: True, names[1]: True, "tiny.gguf": True}
    # a GGUF without a template (a base model) has nothing to format the prompt with: it runs raw,
    # its name ("instruct" here) notwithstanding
    monkeypatch.setattr(FakeModel, "chat_template", lambda self: None)
    assert not fake_pair(draft=False, target_path="fake-instruct.gguf").chats_by_default()
