"""bench_forecast.py: the planner's forecast of each step beside what the step measured."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from fakes import fake_pair
from scripttools import SCRIPTS, load_script

from localspec.planner import PLAIN_SAMPLES, Planner


def load():
    return load_script("bench_forecast")


def test_measured_over_forecast_weighs_each_forecast_by_its_steps_seconds():
    bf = load()
    Step = bf.Step
    steps = [
        # two known model steps forecast at 20 tok/s: 0.1 s each, so 2 + 2 tokens expected; 3 + 1 emitted
        Step("known", "model", 20.0, 3, 0.1, 4), Step("known", "model", 20.0, 1, 0.1, 4),
        # known at 10 tok/s for 0.2 s (2 expected) and at 30 for 0.1 s (3 expected): 4 emitted of 5
        Step("known", "ngram", 10.0, 2, 0.2, 3), Step("known", "ngram", 30.0, 2, 0.1, 3),
        Step("plain, unpriced", "plain", 0.0, 1, 0.05, 0),
        Step("probe", "model", 50.0, 2, 0.1, 8),
    ]
    rows = {(r["kind"], r["drafter"]): r for r in bf.summary(steps)}
    assert [(r["kind"], r["drafter"]) for r in bf.summary(steps)] == [
        ("known", "model"), ("known", "ngram"), ("probe", "model"), ("plain, unpriced", "plain")]
    model = rows["known", "model"]
    assert model["ratio"] == pytest.approx(1.0) and model["forecast"] == pytest.approx(20.0)
    assert model["rate"] == pytest.approx(20.0) and model["tokens_per_step"] == 2 and model["drafted"] == 8
    ngram = rows["known", "ngram"]
    assert ngram["ratio"] == pytest.approx(4 / 5)                     # the forecast was optimistic
    assert ngram["forecast"] == pytest.approx(5 / 0.3)                 # weighted by seconds, not a mean of rates
    assert ngram["ms_per_step"] == pytest.approx(150.0)
    unpriced = rows["plain, unpriced", "plain"]
    assert unpriced["forecast"] is None and unpriced["ratio"] is None and unpriced["rate"] == pytest.approx(20.0)
    assert rows["probe", "model"]["ratio"] == pytest.approx(2 / 5)
    table = bf.report(bf.summary(steps), "title")
    assert "| known | ngram | 2 | 6 | 2.00 | 150.0 | 13.3 | 16.7 | 0.800 |" in table
    assert "| plain, unpriced | plain | 1 | 0 | 1.00 | 50.0 | 20.0 | — | — |" in table


def test_every_step_of_a_run_is_recorded_with_its_kind_and_the_planner_is_left_as_it_was(tmp_path):
    bf = load()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"def f{i}(x):\n    return x + {i}\n"}) + "\n" for i in range(2)))
    args = SimpleNamespace(prompts=prompts, n_prompts=2, prompt_set="humaneval", chat=False, rounds=2, max_tokens=40,
                           seed=1, drafter="hybrid", temperature=0.0, top_k=40)
    pair = fake_pair(n_ctx=512, noise=0.3)
    steps, stats = bf.run(args, pair)
    assert len(stats) == 4
    assert "record" not in Planner.__dict__ and "plan" in Planner.__dict__  # Recording's record, Planner's plan again
    assert Planner.plan.__name__ == "plan" and Planner._choose.__name__ == "_choose"
    assert {s.kind for s in steps} <= set(bf.KINDS)
    # a process's first steps are plain, before anything is priced: the plain step is measured first
    assert [s.kind for s in steps[:PLAIN_SAMPLES]] == ["plain, unpriced"] * PLAIN_SAMPLES
    drafting = [s for s in steps if s.drafted]
    assert drafting and all(s.kind in ("known", "known, catching up", "probe") for s in drafting)
    assert all(s.forecast > 0 for s in steps if s.kind != "plain, unpriced")
    assert all(s.tokens >= 1 and s.seconds > 0 for s in steps)
    assert len(steps) == sum(s.steps for s in stats) and all(s.generated for s in stats)  # every step, once
    assert sum(r["steps"] for r in bf.summary(steps)) == len(steps)


@pytest.mark.slow
def test_quick_prints_the_table_through_llama_cpp():
    out = subprocess.run([sys.executable, str(SCRIPTS / "bench_forecast.py"), "--quick"], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "| plain, unpriced | plain |" in out.stdout and "measured / forecast" in out.stdout
    assert "model auto, T=0.0, 2 prompts x 16 tokens x 1 rounds" in out.stdout
