"""bench_verify_curves.py: several targets' verify curves, each width measured on every target in turn."""

from __future__ import annotations

import subprocess
import sys

import pytest
from scripttools import SCRIPTS, load_script


def load():
    return load_script("bench_verify_curves")


def test_each_width_is_decoded_on_every_target_in_turn_after_a_one_row_decode():
    # The machine's pace drifts over minutes; measured target by target, a curve taken in a slow
    # stretch would look dearer than another taken in a quick one. Here the pace doubles halfway
    # through: both targets see it alike, and their ratios to one row stay theirs.
    vc = load()
    calls = []

    def decode(ctx, w):
        calls.append((ctx, w))
        pace = 1.0 if len(calls) <= 24 else 2.0
        return pace * {"a": 0.10, "b": 0.08}[ctx] * (1 + 0.5 * (w - 1) if ctx == "a" else 1 + 0.2 * (w - 1))

    seen = vc.measure({"A": "a", "B": "b"}, [1, 2, 4], reps=4, decode=decode)
    assert calls[:8] == [("a", 1), ("a", 1), ("b", 1), ("b", 1), ("a", 1), ("a", 2), ("b", 1), ("b", 2)]
    assert len(calls) == 4 * 3 * 2 * 2 and all(len(v) == 4 for v in seen.values())
    table = vc.report(seen, ["A", "B"], [1, 2, 4])
    assert "| 2 | 225.0 | 144.0 | 1.50 | 1.20 |" in table  # medians over both paces; ratios as made
    assert "| 4 | 375.0 | 192.0 | 2.50 | 1.60 |" in table
    assert "a second row adds: A 75.0 ms (50% of one row), B 24.0 ms (20% of one row)" in table


@pytest.mark.parametrize("argv, says", [(["--widths", "1,x"], "--widths '1,x'"), (["--widths", "0,2"], "start at 1"),
                                        (["--widths", "2,600"], "at most 512 rows"), ([], "give --targets")])
def test_a_bad_argument_is_one_line_naming_it(argv, says):
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench_verify_curves.py"), *argv],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr


def test_the_context_holds_every_decode_of_the_run():
    # Each timed decode keeps one token (bench_rpc_costs.timed): 70 repetitions of 8 widths filled
    # the 1,024-token context it once had, and the run died in llama.cpp's "context full".
    vc = load()
    for widths, reps in (([1, 2, 3, 4, 5, 6, 7, 8], 70), ([1, 512], 3), ([1, 2], 1)):
        held = {"a": len(vc.PROMPT)}

        def decode(ctx, w):
            assert held[ctx] + w <= vc.context_size(widths, reps)
            held[ctx] += 1
            return 0.01

        vc.measure({"A": "a"}, widths, reps, decode=decode)
        assert held["a"] == len(vc.PROMPT) + 2 * reps * len(widths)


@pytest.mark.slow  # loads SmolLM2 and its Q4_0 copy through llama.cpp
def test_quick_measures_both_targets_through_llama_cpp():
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench_verify_curves.py"), "--quick", "--widths", "1,2,4"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2", "| 4"]
    assert all(float(x) > 0 for row in rows for x in row.strip("| ").split(" | ")[1:])
    assert "a second row adds:" in run.stdout and "smol-q4_0" in run.stdout


def test_a_file_llama_cpp_cannot_load_is_one_line_naming_it(tmp_path):
    bad = tmp_path / "saved-web-page.gguf"
    bad.write_text("<html>not a model</html>")
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench_verify_curves.py"), "--targets", f"{bad},{bad}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "saved-web-page.gguf" in run.stderr and "Traceback" not in run.stderr
