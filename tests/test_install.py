"""localspec installed (`pip install .`, `pipx install .`): a wheel holds the packages and package data
pyproject.toml lists and nothing else of the checkout, so the catalog must ship inside the package and
the model store must be a per-user folder, not one inside site-packages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from localspec import models
from localspec.config import ModelError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def package_files(package: str) -> set[Path]:
    """The files of one package that a wheel built from pyproject.toml holds: its modules and the
    files its package-data globs match (setuptools' "*" key applies to every package)."""
    folder = ROOT / package.replace(".", "/")
    data = SETUPTOOLS.get("package-data", {})
    patterns = ["*.py", *data.get("*", []), *data.get(package, [])]
    return {f for pattern in patterns for f in folder.glob(pattern) if f.is_file()}


def lay_out_installed_copy(site: Path) -> Path:
    """site-packages as the wheel would fill it: only what pyproject.toml lists."""
    for package in SETUPTOOLS["packages"]:
        for f in package_files(package):
            dst = site / f.relative_to(ROOT)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)
    return site


def run_installed(site: Path, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`python -m localspec ARGS` on the installed copy, with the user's variables env. It runs in a
    folder outside the checkout, and PYTHONPATH comes before the editable install's finder, so the
    checkout's package is not the one imported."""
    base = {k: v for k, v in os.environ.items() if k not in ("LOCALSPEC_MODELS", "LOCALSPEC_CATALOG", "XDG_DATA_HOME")}
    return subprocess.run([sys.executable, "-m", "localspec", *args], cwd=cwd, capture_output=True, text=True,
                          env={**base, "PYTHONPATH": str(site), **env}, timeout=120)


def test_every_package_and_data_file_is_listed_for_the_wheel():
    # a file the package reads but pyproject.toml leaves out is missing from every install
    listed = {f for package in SETUPTOOLS["packages"] for f in package_files(package)}
    source = {f for f in (ROOT / "localspec").rglob("*")
              if f.is_file() and "__pycache__" not in f.parts and f.suffix not in (".pyc", ".pyo")}
    assert sorted(map(str, source - listed)) == []
    assert (ROOT / "localspec" / "catalog.json") in listed


def test_an_installed_copy_reads_its_catalog_and_keeps_models_in_the_user_folder(tmp_path):
    # installed, every command failed on site-packages/models/catalog.json, and `models list` made
    # site-packages/models the store
    site = lay_out_installed_copy(tmp_path / "site")
    home = tmp_path / "home"
    user_store = home / ".local" / "share" / "localspec" / "models"
    listed = run_installed(site, tmp_path, "models", "list", HOME=str(home))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == f"No models in {user_store}; run `localspec models pull`."
    assert user_store.is_dir() and not (site / "models").exists()
    # generate reads the catalog before it looks at the model file: now the file is the one problem
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"not gguf")
    generated = run_installed(site, tmp_path, "generate", "hi", "-m", str(bad), "--draft", "none", "-n", "2",
                              HOME=str(home))
    assert generated.returncode != 0 and "catalog" not in generated.stderr, generated.stderr
    (line,) = [line for line in generated.stderr.splitlines() if line.strip()]
    assert line.startswith("Error:") and str(bad) in line, generated.stderr
    assert not (site / "models").exists()


def test_an_installed_copy_follows_xdg_data_home(tmp_path):
    site = lay_out_installed_copy(tmp_path / "site")
    data = tmp_path / "data"
    listed = run_installed(site, tmp_path, "models", "list", HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(data))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == f"No models in {data / 'localspec' / 'models'}; run `localspec models pull`."


def test_a_checkout_keeps_its_models_folder_as_the_store(monkeypatch, tmp_path):
    monkeypatch.delenv("LOCALSPEC_MODELS")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert models.checkout_store() == ROOT / "models"
    assert models.store_dir() == ROOT / "models"  # what ./scripts/demo.sh pulls into
    assert not (tmp_path / "data").exists()


def test_a_checkout_is_told_by_its_pyproject_and_models_folder(tmp_path):
    package = tmp_path / "repo" / "localspec"
    package.mkdir(parents=True)
    assert models.checkout_store(package) is None  # no pyproject.toml: site-packages
    (tmp_path / "repo" / "pyproject.toml").write_text('[project]\nname = "localspec"\n')
    assert models.checkout_store(package) is None  # no models/ folder
    (tmp_path / "repo" / "models").mkdir()
    assert models.checkout_store(package) == tmp_path / "repo" / "models"
    (tmp_path / "repo" / "pyproject.toml").write_text('[project]\nname = "other"\n')
    assert models.checkout_store(package) is None  # another project's models/ beside a copy of ours
    (tmp_path / "repo" / "pyproject.toml").write_text("not = [toml")
    assert models.checkout_store(package) is None


def test_the_checkouts_pyproject_is_parsed_once_per_version_not_per_request(monkeypatch, tmp_path):
    # store_dir() read and parsed pyproject.toml on each call (0.2 ms), and the server calls it on
    # every request (warmstart.save); a changed file is still read again
    package = tmp_path / "repo" / "localspec"
    package.mkdir(parents=True)
    (tmp_path / "repo" / "models").mkdir()
    pyproject = tmp_path / "repo" / "pyproject.toml"
    pyproject.write_text('[project]\nname = "localspec"\n')
    parsed = []
    real = models.tomllib.loads
    monkeypatch.setattr(models.tomllib, "loads", lambda text: parsed.append(text) or real(text))
    assert [models.checkout_store(package) for _ in range(3)] == [tmp_path / "repo" / "models"] * 3
    assert len(parsed) == 1
    pyproject.write_text('[project]\nname = "something-else"\n')
    assert models.checkout_store(package) is None and len(parsed) == 2


def test_installed_the_store_is_per_user(monkeypatch, tmp_path):
    monkeypatch.delenv("LOCALSPEC_MODELS")
    monkeypatch.setattr(models, "checkout_store", lambda: None)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert models.store_dir() == Path(os.environ["HOME"]) / ".local" / "share" / "localspec" / "models"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert models.store_dir() == tmp_path / "data" / "localspec" / "models"
    monkeypatch.setenv("LOCALSPEC_MODELS", str(tmp_path / "mine"))  # the variable still wins
    assert models.store_dir() == tmp_path / "mine"


def test_installed_without_a_home_folder_the_store_error_names_the_fix(monkeypatch):
    monkeypatch.delenv("LOCALSPEC_MODELS")
    monkeypatch.setattr(models, "checkout_store", lambda: None)

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    with pytest.raises(ModelError, match=r"^Cannot find the home folder .*set LOCALSPEC_MODELS"):
        models.store_dir()


@pytest.mark.parametrize("where, fix", [
    ("override", "or unset LOCALSPEC_CATALOG to use the shipped one"),
    ("checkout", "`git checkout localspec/catalog.json`"),
    ("installed", "reinstall localspec"),  # no git there
])
def test_an_unreadable_catalog_names_the_fix_that_applies(tmp_path, monkeypatch, where, fix):
    broken = tmp_path / "catalog.json"
    broken.write_text("{not json")
    if where == "override":
        monkeypatch.setenv("LOCALSPEC_CATALOG", str(broken))
    else:
        monkeypatch.delenv("LOCALSPEC_CATALOG", raising=False)
        monkeypatch.setattr(models, "SHIPPED_CATALOG", broken)
    if where == "installed":
        monkeypatch.setattr(models, "checkout_store", lambda: None)
    with pytest.raises(ModelError) as e:
        models.load_catalog()
    assert str(broken) in str(e.value) and fix in str(e.value) and "\n" not in str(e.value)
