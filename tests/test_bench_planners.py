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


def test_several_processes_are_each_one_draw_of_this_over_other():
    # Two processes of two replies: this twice as fast as the other in the first, half as fast in
    # the second. Each process is one ratio; their geometric mean is 1, its interval wide.
    bp = load()
    reply = lambda tokens, seconds: (tokens, seconds, seconds, 0)  # noqa: E731
    results = {"target-only": [reply(10, 1.0)] * 4,
               "other": [reply(10, 1.0), reply(10, 1.0), reply(10, 0.5), reply(10, 0.5)],
               "this": [reply(10, 0.5), reply(10, 0.5), reply(10, 1.0), reply(10, 1.0)]}
    lines = bp.process_lines(results, 2)
    assert lines[1] == "this / other in each process: 2.000x, 0.500x"
    # t(0.95, 1) = 6.314, the logs' deviation ln 2 × √2, over √2: e^±4.38
    assert lines[2] == "over the processes: 1.000x (90%: 0.01-79.55x)"
    assert bp.process_lines(results, 1) == []
    assert bp.report(results, 2).endswith(lines[2])


def test_processes_must_be_at_least_one(capsys):
    with pytest.raises(SystemExit):
        load().parse_args(["--other", str(ROOT), "--quick", "--processes", "0"])
    assert "--processes 0: give 1 or more" in capsys.readouterr().err


def test_one_process_needs_no_scipy(monkeypatch):
    # a GPU machine lent for minutes has numpy and no scipy: a run of one process reports without it
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.stats", None)
    bp = load()
    reply = (10, 1.0, 1.0, 0)
    table = bp.report({"target-only": [reply], "other": [reply], "this": [reply]}, 1)
    assert "| this / other | 1.000x" in table
