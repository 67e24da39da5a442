"""bench_planners.py: two checkouts' planners answer the same replies in one process."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from scripttools import load_script

ROOT = Path(__file__).resolve().parent.parent


def load():
    return load_script("bench_planners")


def test_another_checkout_must_hold_localspec(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load().parse_args(["--other", str(tmp_path), "--quick"])
    # the script's own check names its fix: argparse's "; see `bench_planners.py --help`" was put after it too
    assert capsys.readouterr().err.endswith(f"--other {tmp_path} holds no localspec/session.py; give a checkout "
                                            "of localspec\n")


@pytest.mark.slow
def test_each_checkouts_planner_runs_its_own_code_beside_target_only(tmp_path):
    # The other checkout's planner knows no drafter: it decodes as target-only does, in every reply,
    # while this checkout's drafts (its first reply's entry probe at least), on the same prompts.
    other = tmp_path / "other"
    shutil.copytree(ROOT / "localspec", other / "localspec", ignore=shutil.ignore_patterns("__pycache__"))
    planner = other / "localspec" / "planner.py"
    text = planner.read_text()
    assert 'SOURCES = {"model": ("model",)' in text
    planner.write_text(text.replace('SOURCES = {"model": ("model",)', 'SOURCES = {"none": ("model",)', 1))
    bp = load()
    results = bp.run(bp.parse_args(["--other", str(other), "--quick"]))
    assert set(results) == {"target-only", "other", "this"}
    assert all(len(rows) == 2 for rows in results.values())      # 2 prompts x 1 round
    assert [r[3] for r in results["other"]] == [0, 0] and [r[3] for r in results["target-only"]] == [0, 0]
    assert results["this"][0][3] > 0
    assert sys.modules["localspec_other.planner"].SOURCES.get("model") is None  # the copy's code ran
    table = bp.report(results)
    assert "| other |" in table and "| this |" in table and "| this / other |" in table
