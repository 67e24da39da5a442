"""The timed fakes of scripts/bench_fast_regime.py: a verify curve as measured on a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripttools import load_script

from localspec import models

ROOT = Path(__file__).resolve().parent.parent


def fakes():
    return load_script("bench_fakes")


def test_a_curve_is_read_in_rows_and_seconds_sorted():
    assert fakes().parse_curve("36:10.3,1:1.9,2:5.4") == [(1, 0.0019), (2, 0.0054), (36, 0.0103)]


@pytest.mark.parametrize("text, says", [("1:1.9,2", "ROWS:MS pairs"), ("1:x", "ROWS:MS pairs"),
                                        ("2:5.4,8:7", "a point at 1 row"), ("1:1.9,1:2", "one point per row count"),
                                        ("1:0,2:3", "more than 0 ms")])
def test_a_bad_curve_is_named_with_the_fix(text, says):
    with pytest.raises(ValueError, match=says) as e:
        fakes().parse_curve(text)
    assert repr(text) in str(e.value)


def test_a_curve_is_linear_between_points_and_along_the_last_segment_beyond():
    f = fakes()
    points = f.parse_curve("1:2,2:5,6:6,36:12")
    seconds = [f.curve_seconds(points, rows) for rows in (1, 2, 4, 6, 21, 36, 66)]
    assert seconds == pytest.approx([0.002, 0.005, 0.0055, 0.006, 0.009, 0.012, 0.018])
    assert f.curve_seconds(f.parse_curve("1:2"), 40) == pytest.approx(0.002)  # one point: flat


@pytest.mark.parametrize("args, says", [
    (["--curve", "2:5"], "argument --curve: bad curve '2:5': it needs a point at 1 row"),
    (["--after-wide-ms", "1,x"], "argument --after-wide-ms: '1,x': give milliseconds not below 0"),
    (["--after-wide-ms", "-1"], "argument --after-wide-ms: '-1': give milliseconds not below 0"),
    (["--after-wide-ms", "inf"], "argument --after-wide-ms: 'inf': give milliseconds not below 0"),
    (["--draft-ms", "1.2,fast"], "argument --draft-ms: '1.2,fast': give milliseconds not below 0"),
    (["--first-ms", "5,3"], "argument --first-ms: '5,3': give one value in milliseconds, not below 0"),
    (["--first-ms", "nan"], "argument --first-ms: 'nan': give one value in milliseconds, not below 0"),
])
def test_the_bench_refuses_a_bad_value_in_one_line(args, says):
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_fast_regime.py"), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert says in out.stderr
    assert "Traceback" not in out.stderr


def test_the_timed_fake_slows_the_one_token_decodes_after_a_wider_one():
    # as a GPU's one-row decodes run after a verify (timings.ReturnCost)
    vocab = SimpleNamespace(n_vocab=64)  # (all the fake reads of a model, given a script)
    ctx = fakes().TimedRows(vocab, 0, 0.001, script=list(range(40)), after_wide=[0.004, 0.002])
    # what each decode is made to last (a busy wait for it only ever overruns, by the machine's luck)
    assert [ctx.lasts(tokens, "last") for tokens in ([5, 6, 7], [8], [9], [10])] == \
        pytest.approx([0.001, 0.005, 0.003, 0.001])
    before = ctx.decode_s
    ctx.decode([11, 12], logits="last")
    ctx.decode([13], logits="last")  # the first one-token decode after a wider one lasts its 4 ms more
    assert ctx.decode_s - before >= 0.001 + 0.005


def test_the_timed_fake_slows_the_first_decode_of_each_width_until_warmed_up():
    # as a GPU's first decode of a batch width loads its kernels (Context.warm_up)
    vocab = SimpleNamespace(n_vocab=64)
    ctx = fakes().TimedRows(vocab, 0, 0.001, script=list(range(60)), first_s=0.005)
    assert [ctx.lasts(tokens, "all") for tokens in ([1, 2], [3, 4], [5], [6, 7, 8], [9])] == \
        pytest.approx([0.006, 0.001, 0.006, 0.006, 0.001])
    warmed = fakes().TimedRows(vocab, 0, 0.001, script=list(range(60)), first_s=0.005)
    warmed.warm_up()
    assert warmed.tokens == [] and all(warmed.lasts([0] * n, "all") == pytest.approx(0.001) for n in (1, 2, 5, 40, 128))


def test_the_bench_counts_the_planners_calls_and_pricings(real_pair, real_store):
    # --calls and --pricings count what the controller does, the same on every machine: plain
    # decoding prices nothing, and a lookup that has text to look through calls more a token.
    env = dict(os.environ, LOCALSPEC_TEST_MODELS=str(real_store))
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_fast_regime.py"), "--calls", "--pricings", "--tokens", "60",
                          "--rounds", "2", "--draft-ms", "1.0", "--scenarios", "plain,ngram",
                          "--text", str(ROOT / "README.md")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    rows = {cells[2].strip(): cells for cells in (line.split("|") for line in out.stdout.splitlines())
            if len(cells) == 10 and cells[2].strip() in ("plain", "ngram")}
    calls = {kind: float(cells[7]) for kind, cells in rows.items()}
    pricings = {kind: float(cells[8]) for kind, cells in rows.items()}
    assert pricings["plain"] == 0 and pricings["ngram"] > 0
    assert calls["ngram"] > calls["plain"] > 10


def test_the_bench_times_where_the_controllers_time_goes(real_pair, real_store):
    # --parts: choosing a step (pricing and offers within it) and recording it, µs a token. Plain
    # decoding prices nothing and asks no drafter; a lookup asks at every step and prices some.
    env = dict(os.environ, LOCALSPEC_TEST_MODELS=str(real_store))
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_fast_regime.py"), "--parts", "--tokens", "60",
                          "--rounds", "2", "--draft-ms", "1.0", "--scenarios", "plain,ngram",
                          "--text", str(ROOT / "README.md")], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if line.startswith("| draft ms"))
    assert header.endswith("| plan µs / token | pricing µs / token | offers µs / token | record µs / token |")
    rows = {cells[2].strip(): [float(c) for c in cells[7:11]] for cells in (line.split("|") for line in out.stdout.splitlines())
            if len(cells) == 12 and cells[2].strip() in ("plain", "ngram")}
    (plan, pricing, offers, record), lookup = rows["plain"], rows["ngram"]
    assert pricing == 0 and 0 < plan < lookup[0] and record > 0
    assert lookup[1] > 0 and lookup[2] > offers and lookup[0] >= lookup[1] + lookup[2]  # (within plan)


def test_the_replay_reports_each_part_where_it_was_timed():
    report = load_script("bench_replay").report
    # (seconds, controller µs a token, drafted, then plan, pricing, offers and record µs a token)
    rows = {"plain": [(1.0, 60.0, 0, 2.0, 0.0, 1.0, 2.0)] * 2,
            "ngram": [(0.98, 100.0, 3, 26.0, 12.0, 11.0, 10.0), (0.96, 104.0, 1, 28.0, 14.0, 11.0, 12.0)]}
    table = report(rows, parts=True)
    assert table.splitlines()[0] == ("| scenario | vs plain, every reply | controller µs / token | plan | pricing | offers |"
                                     " record | drafted / reply | each reply |")
    assert table.splitlines()[3] == "| ngram | 1.031x | 102 | 27 | 13 | 11 | 11 | 2 | 1.02 1.04 |"
    assert "plan" not in report({"plain": [(1.0, 60.0, 0)]})  # timed without --parts: no such columns


def put_light_pair(folder: Path) -> list[Path]:
    """Placeholder files named as the catalog names the light pair's (resolve_model needs only a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    catalog = models.load_catalog()
    files = [folder / catalog.entry(name).file for name in catalog.pairs["qwen2.5-coder"]]
    for f in files:
        f.write_bytes(b"GGUF")
    return files


def test_the_light_pair_is_the_tests_copy_else_the_stores(tmp_path, monkeypatch, isolated_store):
    # bench_controller.py and bench_fast_regime.py read Qwen's vocabulary from the tests' folder only:
    # a user who had run ./scripts/demo.sh (the pair in the store) got a traceback, "Model file not
    # found: ~/.cache/localspec/test-models/...; ... run `localspec models pull`", which pulled into
    # the store they never looked in
    monkeypatch.setenv("LOCALSPEC_TEST_MODELS", str(tmp_path / "no-test-models"))
    stored = put_light_pair(isolated_store)
    assert fakes().light_models("target", "draft") == stored
    assert fakes().light_models("target") == stored[:1]
    tests = put_light_pair(tmp_path / "test-models")
    monkeypatch.setenv("LOCALSPEC_TEST_MODELS", str(tmp_path / "test-models"))
    assert fakes().light_models("target", "draft") == tests


def test_a_light_pair_that_cannot_be_had_is_one_line(tmp_path, monkeypatch):
    from localspec import models
    from localspec.config import ModelError

    def offline(name, **kwargs):
        raise ModelError(f"Cannot download {name}; check the network")

    monkeypatch.setenv("LOCALSPEC_TEST_MODELS", str(tmp_path / "no-test-models"))
    monkeypatch.setattr(models, "pull", offline)
    monkeypatch.setattr(sys, "argv", ["bench_fast_regime.py"])
    with pytest.raises(SystemExit) as e:
        fakes().light_models("target")
    assert str(e.value) == "bench_fast_regime.py: Cannot download qwen2.5-coder-1.5b-instruct-q4_k_m; check the network"


@pytest.mark.parametrize("args, says", [
    (["--curve", "1:2", "--scenarios", "ngram,hybrid"], "--scenarios ngram,hybrid: give plain and any of"),
    (["--curve", "1:2", "--scenarios", "plain,tree"], "--scenarios plain,tree: give plain and any of"),
    (["--curve", "1:2", "--first-ms", "-1"], "argument --first-ms: '-1': give one value in milliseconds"),
])
def test_the_replay_refuses_a_bad_value_in_one_line(args, says):
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_replay.py"), "--quick", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_the_replay_answers_each_prompt_then_replays_it_for_each_scenario(tmp_path):
    # the tiny pair's greedy replies to two prompts, replayed at a GPU's curve: plain is the yardstick,
    # the lookup drafts from the prompt's text, and each reply has a ratio of its own
    env = dict(os.environ, LOCALSPEC_MODELS=str(tmp_path / "store"), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(ROOT / "scripts/bench_replay.py"), "--quick", "--prompt-set", "copy",
                          "--curve", "1:1.8,2:3.9,8:5.5", "--draft-ms", "1.2", "--first-ms", "2", "--warm-up"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    rows = {cells[1].strip(): cells for cells in (line.split("|") for line in out.stdout.splitlines())
            if len(cells) > 5 and cells[1].strip() in ("plain", "ngram", "hybrid")}
    assert set(rows) == {"plain", "ngram", "hybrid"}
    assert rows["plain"][2].strip() == "1.000x" and rows["plain"][4].strip() == "0"
    assert all(len(r[5].split()) == 2 for r in rows.values())  # 2 prompts x 1 round: a ratio each
    assert float(rows["ngram"][4]) > 0  # a copy prompt's reply repeats its text: the lookup drafts
    assert "a width's first decode +2 ms; every verify width decoded once first" in out.stdout
