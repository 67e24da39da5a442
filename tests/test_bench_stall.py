"""scripts/bench_stall.py: its run on the fake pair, the ratio it prints, its arguments (no llama.cpp)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from scripttools import load_script

ROOT = Path(__file__).resolve().parent.parent


def load():
    return load_script("bench_stall")


def run_args(**changes) -> SimpleNamespace:
    """bench_stall's arguments for a short run on the fake pair: two prompts, one round, no hogs."""
    return SimpleNamespace(**{**dict(prompts=ROOT / "scripts/prompts/prose.jsonl", n_prompts=2, prompt_set="humaneval",
                                     rounds=1, max_tokens=12, stalled=1, stalled_tokens=6, hogs=0, hog_model=None,
                                     stall_factor=1.0, draft_stall_factor=None, next_process=False), **changes})


def test_auto_is_compared_by_tokens_per_second_beside_target_only():
    bs = load()
    records = [{"auto": {"tokens": 10, "seconds": 1.0}, "target-only": {"tokens": 10, "seconds": 2.0}},
               {"auto": {"tokens": 30, "seconds": 1.0}, "target-only": {"tokens": 30, "seconds": 2.0}}]
    assert bs.ratio_of(records) == pytest.approx((40 / 2.0) / (40 / 4.0))


def test_the_stalled_replies_run_beside_spinning_processes_that_are_gone_after_them(monkeypatch):
    from fakes import fake_pair

    bs, started = load(), []

    class Recorded(subprocess.Popen):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            started.append(self)

    monkeypatch.setattr(bs.subprocess, "Popen", Recorded)
    monkeypatch.setattr(bs.time, "sleep", lambda s: None)
    with fake_pair() as pair:
        text = bs.run(run_args(hogs=2), pair)
    assert len(started) == 2 and all(p.poll() is not None for p in started)
    assert text.count("stalled replies (2 spinning processes beside, every decode 1 times as long): ") == 1
    assert "reply 0 (prompt 0): auto" in text and "reply 1 (prompt 1): auto" in text
    assert "later replies: auto" in text and "at the end: auto: draft" in text


def test_a_next_process_starts_from_the_stalled_ones_plan_beside_it_loaded_as_an_older_file(monkeypatch):
    from fakes import fake_pair

    from localspec.tracker import CostTracker

    bs = load()
    stalled = CostTracker()
    stalled.record(0, 0, 0.0, 3.0, 0.0)
    stalled.record(2, 1, 4.0, 4.0, 0.0, rows=2)
    stalled.record(0, 0, 0.0, 0.2, 0.0)
    stalled.out_s, stalled.remeasure_loss = 9.0, 0.5
    warm = bs.next_process({("model", True): stalled})
    assert list(warm) == ["target-only", "auto", "auto-unpaced"] and warm["target-only"] == {}
    paced, unpaced = warm["auto"][("model", True)], warm["auto-unpaced"][("model", True)]
    assert paced.loaded and unpaced.loaded and 1 not in paced.verify  # a new process measures its plain step
    assert (paced.draft_pace, paced.out_s, paced.remeasure_loss) == (3.0, 9.0, 0.5)
    assert (unpaced.draft_pace, unpaced.out_s, unpaced.remeasure_loss) == (0.2, 0.0, 0.0)  # the saved plain step
    assert paced.saved_draft_s.value == unpaced.saved_draft_s.value == 2.0

    monkeypatch.setattr(bs.time, "sleep", lambda s: None)
    held, streamed = [], bs.streamed

    def recorded(pair, prompt, cfg):  # what the draft's cache held as each reply began
        held.append(len(pair.draft_ctx.tokens))
        return streamed(pair, prompt, cfg)
    monkeypatch.setattr(bs, "streamed", recorded)
    with fake_pair() as pair:
        text = bs.run(run_args(next_process=True), pair)
    assert held == [0] * (1 + 2 * 3)  # the stalled reply, and 2 prompts x 3 scenarios: each takes its prompt anew
    assert "the later replies are a next process's" in text
    assert "reply 1 (prompt 1): auto " in text and "x target-only" in text.split("reply 1")[1]
    assert "later replies: auto-unpaced" in text and "at the end: auto-unpaced: " in text


def test_a_stall_factor_makes_every_decode_that_many_times_as_long_inside_only(monkeypatch):
    from fakes import fake_pair

    bs, sleeps, ticks = load(), [], iter(range(1000))
    # a clock on which each decode takes one second, and sleeps recorded instead of slept
    monkeypatch.setattr(bs.time, "perf_counter", lambda: float(next(ticks)))
    monkeypatch.setattr(bs.time, "sleep", sleeps.append)
    with fake_pair() as pair:
        ctx = pair.target_ctx
        kind = type(ctx)
        original = kind.decode
        ctx.decode([1, 2, 3])
        assert sleeps == []
        ctx.truncate(0)
        with bs.slowed(50.0, kind):
            ctx.decode([1, 2, 3])
        ctx.truncate(0)
        ctx.decode([1, 2, 3])
        assert kind.decode is original and sleeps == [49.0]  # the 1-second decode made 50 seconds long, once
        draft = pair.draft_ctx
        assert type(draft) is kind
        ctx.truncate(0)
        with bs.slowed(6.0, kind, draft_factor=48.0, draft=draft):
            ctx.decode([1, 2, 3])
            draft.decode([1, 2, 3])
    assert sleeps == [49.0, 5.0, 47.0]  # the target's decode 6 times as long, the draft's 48


@pytest.mark.parametrize("argv, says", [(["--quick", "--stalled", "0"], "--stalled 0"),
                                        (["--quick", "--stalled-tokens", "0"], "--stalled-tokens 0"),
                                        (["--quick", "--hogs", "-1"], "--hogs -1"),
                                        (["--quick", "--stall-factor", "0.5"], "--stall-factor 0.5"),
                                        (["--quick", "--draft-stall-factor", "0"], "--draft-stall-factor 0"),
                                        (["--quick", "--hog-model", "/no.gguf"], "--hog-model /no.gguf")])
def test_a_bad_argument_is_one_line_naming_it(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        load().parse_args(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err
