"""bench_copy_bound.py: the most a lookup could give, from a reply's copyable runs and a verify curve."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scripttools import load_script


def load():
    return load_script("bench_copy_bound")


def test_a_run_is_the_longest_copy_of_earlier_text_from_each_position():
    cb = load()
    # from the prompt: "2 3" then the reply turns away; "1 2" runs to the reply's end
    assert cb.copyable_runs([1, 2, 3, 4], [2, 3, 9, 1, 2]) == [2, 1, 0, 2, 1]
    # a repeat copies from the reply itself, its source overlapping what it copies
    assert cb.copyable_runs([5], [7, 7, 7, 7]) == [0, 3, 2, 1]


def brute_force(runs, verify, cap):
    """The least seconds over every sequence of step widths, each within its position's run."""
    n, best = len(runs), float("inf")
    for widths in itertools.product(range(1, n + 1), repeat=n):
        i, seconds = 0, 0.0
        for w in widths:
            if i == n:
                break
            if w - 1 > min(runs[i], cap) or i + w > n:
                seconds = float("inf")
                break
            seconds, i = seconds + verify(w), i + w
        if i == n:
            best = min(best, seconds)
    return best


def test_the_bound_is_the_least_time_over_every_way_to_step_through_the_reply():
    cb = load()
    rng = np.random.default_rng(1)
    for _ in range(12):
        n = int(rng.integers(2, 7))
        runs = [int(x) for x in rng.integers(0, n, size=n)]
        costs = np.cumsum(rng.uniform(0.2, 1.0, size=n + 1))  # rising with rows, not in proportion
        verify = lambda k, c=costs: float(c[k - 1])  # noqa: E731
        cap = int(rng.integers(1, n + 1))
        seconds, steps = cb.bound(runs, verify, cap)
        assert seconds == pytest.approx(brute_force(runs, verify, cap))
        assert sum(steps) == n and sum(verify(w) for w in steps) == pytest.approx(seconds)
        i = 0
        for w in steps:  # each step drafts within its position's run and the cap
            assert w - 1 <= min(runs[i], cap)
            i += w


def test_drafting_pays_only_where_a_verify_row_costs_less_than_a_step():
    cb = load()
    seconds, steps = cb.bound([9] * 10, lambda k: 0.031 * k - 0.001, 127)  # a row dearer than a step
    assert steps == [1] * 10 and seconds == pytest.approx(0.3)
    flat_s, flat_steps = cb.bound([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], lambda k: 0.03, 127)
    assert flat_steps == [10] and flat_s == pytest.approx(0.03)  # one verify copies the whole reply
    assert cb.bound([9, 8, 7, 6, 5, 4, 3, 2, 1, 0], lambda k: 0.03, 4)[1] == [5, 5]  # within the cap


def test_the_curve_is_linear_between_measured_widths():
    cb = load()
    verify = cb.curve_of({1: 0.03, 4: 0.09, 16: 0.21})
    assert verify(1) == pytest.approx(0.03) and verify(2) == pytest.approx(0.05)
    assert verify(10) == pytest.approx(0.15) and verify(40) == pytest.approx(0.21)


def test_an_unknown_drafter_is_named_with_the_choices(capsys):
    with pytest.raises(SystemExit):
        load().parse_args(["--quick", "--drafters", "ngram,lookup"])
    assert "--drafters: unknown drafter 'lookup'; choose from ngram, hybrid" in capsys.readouterr().err


def test_each_width_is_verified_after_the_whole_prompt_with_every_rows_logits():
    from types import SimpleNamespace

    from fakes import FakeModel, RecordingContext

    cb = load()
    ctx = RecordingContext(FakeModel(), n_ctx=512)
    ctx.decode([5, 6, 7, 8], logits="none")  # another prompt's cache, sharing its first two tokens
    prompt, filler = [5, 6, 9, 10, 11], [20, 21, 22]
    points = cb.measure_curve(SimpleNamespace(target_ctx=ctx), prompt, filler)
    assert sorted(points) == list(cb.CURVE_WIDTHS)
    timed = [c for c in ctx.calls if c[0] == "decode" and c[3] == "all"]
    assert len(timed) == len(cb.CURVE_WIDTHS) * cb.CURVE_REPEATS
    for _, start, tokens, _ in timed:  # at the prompt's depth, its last token first, then the reply's
        assert start == len(prompt) - 1 and tokens[0] == prompt[-1] and tokens[1:4] == filler[: len(tokens) - 1]
    assert ctx.tokens == prompt[:-1]  # the cache left as the prompt's, each batch dropped after it
