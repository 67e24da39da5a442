"""bench_drafts.py: several drafts for one target, every scenario on each reply, each draft its own Pair."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
from scripttools import SCRIPTS, load_script

from localspec.stats import GenerationStats


def load():
    return load_script("bench_drafts")


class FakePair:
    """Records what each reply asked of it; replies of `seconds` for 10 tokens."""

    def __init__(self, name: str, seconds: float, calls: list):
        self.name, self.seconds, self.calls = name, seconds, calls

    def prompt_tokens(self, text, chat):
        return [len(text), int(chat)]

    def stream(self, tokens, cfg):
        self.calls.append((self.name, cfg.gamma, cfg.drafter, cfg.seed, tokens))
        stats = GenerationStats(generated=10, total_s=self.seconds if cfg.gamma is None else 2.0,
                                drafted=4 if cfg.gamma is None else 0, accepted=3 if cfg.gamma is None else 0,
                                draft_s=0.04 if cfg.gamma is None else 0.0)
        yield SimpleNamespace(stats=stats)


def test_every_reply_runs_every_scenario_plain_on_the_first_pair_each_draft_on_its_own():
    bd = load()
    calls = []
    pairs = {"a": FakePair("a", 1.0, calls), "b": FakePair("b", 4.0, calls)}
    args = SimpleNamespace(rounds=2, max_tokens=16, temperature=0.0, drafter="model", chat=True)
    seen = bd.run(pairs, ["xx", "yyy"], args)
    assert len(calls) == 2 * 2 * 3 and {k: len(v) for k, v in seen.items()} == {bd.PLAIN: 4, "a": 4, "b": 4}
    plain = [c for c in calls if c[1] == 0]
    assert {c[0] for c in plain} == {"a"}  # target-only decodes on the first pair's target
    assert {(c[0], c[2]) for c in calls if c[1] is None} == {("a", "model"), ("b", "model")}
    # the order moves from reply to reply (bench.reply_order), so no scenario always follows the same one
    firsts = [calls[3 * n][0] + str(calls[3 * n][1]) for n in range(4)]
    assert len(set(firsts)) > 1
    assert [c[3] for c in calls[:3]] == [0, 0, 0] and calls[3][3] == 1 and calls[6][3] == 1000  # seed per reply
    assert calls[0][4] == [2, 1]  # the chat template asked for


def test_the_report_sets_each_draft_beside_target_only():
    bd = load()

    def stats(seconds, drafted=0, accepted=0, draft_s=0.0):
        return GenerationStats(generated=10, total_s=seconds, drafted=drafted, accepted=accepted, draft_s=draft_s)

    seen = {bd.PLAIN: [stats(2.0)] * 3, "slow": [stats(2.5, 8, 4, 0.16)] * 3, "quick": [stats(1.6, 8, 6, 0.08)] * 3}
    table = bd.report(seen)
    assert "| target only | 5.0 | 1.000x |  | 0 |  |  |" in table
    assert "| slow | 4.0 | 0.800x | 0.80-0.80x | 24 | 0.500 | 20.0 |" in table
    assert "| quick | 6.2 | 1.250x | 1.25-1.25x | 24 | 0.750 | 10.0 |" in table


def run_script(argv, store):
    """bench_drafts.py in a process of its own, models resolved in an empty store, offline."""
    return subprocess.run([sys.executable, str(SCRIPTS / "bench_drafts.py"), *argv], capture_output=True, text=True,
                          timeout=120, env={"LOCALSPEC_MODELS": str(store), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin"})


@pytest.mark.parametrize("argv, says", [([], "give --target and --drafts"),
                                        (["--target", "SMOL", "--drafts", ","], "give each draft once"),
                                        (["--target", "SMOL", "--drafts", "SMOL,SMOL"], "give each draft once"),
                                        (["--target", "no-such-model", "--drafts", "x"], "no-such-model")])
def test_a_bad_argument_is_one_line_naming_it(argv, says, tmp_path):
    smol = str(load().bench.smol_path())  # a model that resolves, so the drafts are what is judged
    run = run_script([a.replace("SMOL", smol) for a in argv], tmp_path)
    assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_quick_runs_through_llama_cpp():
    run = subprocess.run([sys.executable, str(SCRIPTS / "bench_drafts.py"), "--quick"], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows[1:]] == ["| target only", "| smol-q4_0", "| smol-q4_0-output"]
    assert all(float(r.split(" | ")[1]) > 0 for r in rows[1:])
