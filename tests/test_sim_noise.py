"""scripts/sim_noise.py: the planner simulator with noisy verifies."""

from __future__ import annotations

import sys
from scripttools import load_script


def load():
    return load_script("sim_noise")


def rows(output: str) -> dict[str, list[float]]:
    """The printed table: name -> mean, 10th percentile, least."""
    out = {}
    for line in output.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[1][:1].isdigit():
            out[cells[0]] = [float(c) for c in cells[1:4]]
    return out


def test_without_noise_two_runs_of_one_planner_agree_and_with_it_they_do_not(monkeypatch, capsys):
    sim = load()
    monkeypatch.setattr(sys, "argv", ["sim_noise.py", "--seeds", "2", "--replies", "2", "--sd", "0", "--stall-p", "0"])
    sim.main()
    quiet = rows(capsys.readouterr().out)
    assert quiet["lookup A / lookup B (noise alone)"] == [1.0, 1.0, 1.0]  # the planner decides alike
    assert quiet["lookup A vs plain"][0] > 1.1  # copies pay
    monkeypatch.setattr(sys, "argv", ["sim_noise.py", "--seeds", "2", "--replies", "2"])
    sim.main()
    noisy = rows(capsys.readouterr().out)
    assert noisy["lookup A / lookup B (noise alone)"][2] != 1.0


def test_the_hybrid_can_be_set_beside_its_draft_model(monkeypatch, capsys):
    # F16 prose with a cheap draft: the model pays, and the table names it where it named the lookup
    monkeypatch.setattr(sys, "argv", ["sim_noise.py", "--curve", "f16", "--set", "sure-prose", "--draft-ratio", "0.13",
                                      "--part", "model", "--seeds", "2", "--replies", "3", "--sd", "0", "--stall-p", "0"])
    load().main()
    table = rows(capsys.readouterr().out)
    assert table["model A / model B (noise alone)"] == [1.0, 1.0, 1.0]
    assert table["model A vs plain"][0] > 1.1 and "lookup A vs plain" not in table


def test_the_hybrid_is_set_beside_both_runs_of_its_part(monkeypatch, capsys):
    # per seed over the geometric mean of the part's two runs: a lucky run A alone does not pass for
    # the hybrid's cost, and the interval narrows as the seeds agree
    import numpy as np
    sim = load()
    a, b = np.array([1.2, 1.0, 1.5]), np.array([1.0, 1.0, 1.4])
    mean, lo, hi = sim.beside_both(a, a, b)
    assert 1.0 < mean < 1.05 and lo < 1.0 < hi  # the hybrid even with A, whose noise was luckier than B's
    mean, lo, hi = sim.beside_both(1.1 * np.sqrt(a * b), a, b)
    assert abs(mean - 1.1) < 1e-12 and abs(lo - 1.1) < 1e-12 and abs(hi - 1.1) < 1e-12
    monkeypatch.setattr(sys, "argv", ["sim_noise.py", "--seeds", "2", "--replies", "2", "--sd", "0", "--stall-p", "0"])
    sim.main()
    line = [s for s in capsys.readouterr().out.splitlines() if s.startswith("hybrid / lookup over both")]
    assert len(line) == 1 and "90% interval" in line[0]


def test_a_copy_taken_whole_every_time_pays_more_than_one_taken_at_98_percent(monkeypatch, capsys):
    # exact-copy is the copy set with its copy's guesses always taken, as the real copy set's replies
    # take theirs: with the noise off, the lookup gains more there than on the copy set
    sim, gains = load(), {}
    for name in ("copy", "exact-copy"):
        monkeypatch.setattr(sys, "argv", ["sim_noise.py", "--set", name, "--seeds", "2", "--replies", "2",
                                          "--sd", "0", "--stall-p", "0"])
        sim.main()
        gains[name] = rows(capsys.readouterr().out)["lookup A vs plain"][0]
    assert gains["exact-copy"] > gains["copy"] > 1.1
