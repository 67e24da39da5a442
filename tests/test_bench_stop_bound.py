"""bench_stop_bound.py: what a draft model's chain could give at T=0, from its guesses along a reply
and the measured costs: the oracle's stops, threshold rules, and the grid's best of them."""

from __future__ import annotations

import numpy as np
import pytest
from scripttools import load_script, segmentations


def load():
    return load_script("bench_stop_bound")


def guesses(sb, correct, confidence=None, second=None, before=None):
    n = len(correct)
    return sb.Guesses(np.array(correct, dtype=bool), np.array(confidence if confidence is not None else [1.0] * n),
                      np.array(second if second is not None else [False] * n, dtype=bool),
                      np.array(before if before is not None else [1.0] * n))


def costs(sb, rows, draft):
    """A verify of k rows costs rows[k - 1] seconds."""
    return sb.Costs(lambda k: float(rows[k - 1]), draft)


def test_a_threshold_step_drafts_while_confident_and_is_taken_up_to_its_first_wrong_guess():
    sb = load()
    c = costs(sb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4], 0.25)
    # confident at 0 and 1, unsure at 2: two guesses drafted, both taken, and the target's token after
    # them; three draft rows (the look before each guess, and the one that read the unsure confidence)
    g = guesses(sb, [True, True, False, True, True, True], [0.9, 0.9, 0.1, 0.9, 0.9, 0.9])
    emitted, seconds = sb.rule_step(g, c, sb.Rule(0.5, 0.5, 8, 0.0), 0)
    assert emitted == 3 and seconds == pytest.approx(3 * 0.25 + 1.8)
    # confident at 2 as well: three drafted, the third wrong (a fourth look ends the draft)
    g = g._replace(confidence=np.array([0.9, 0.9, 0.9, 0.1, 0.9, 0.9]))
    assert sb.rule_step(g, c, sb.Rule(0.5, 0.5, 8, 0.0), 0) == (3, pytest.approx(4 * 0.25 + 2.0))
    # not confident enough for the first guess: a plain step, its look paid
    assert sb.rule_step(g, c, sb.Rule(0.95, 0.5, 8, 0.0), 0) == (1, pytest.approx(0.25 + 1.0))
    # plain decoding runs no draft
    assert sb.rule_step(g, c, sb.Rule(float("inf"), 0.5, 8, 0.0), 0) == (1, pytest.approx(1.0))


def test_a_first_guess_is_declined_where_the_target_was_unsure_at_the_token_before():
    sb = load()
    c = costs(sb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4], 0.25)
    g = guesses(sb, [True] * 6, [0.9] * 6, before=[1.0, 1.0, 0.4, 1.0, 1.0, 1.0])
    # at position 2 the target's confidence before is 0.4: below 0.5, a plain step (its look paid)
    assert sb.rule_step(g, c, sb.Rule(0.5, 0.5, 2, 0.0, 0.5), 2) == (1, pytest.approx(0.25 + 1.0))
    assert sb.rule_step(g, c, sb.Rule(0.5, 0.5, 2, 0.0, 0.3), 2) == (3, pytest.approx(3 * 0.25 + 1.8))
    # only a step's first guess reads it: a draft from position 1 runs on through position 2
    assert sb.rule_step(g, c, sb.Rule(0.5, 0.5, 2, 0.0, 0.5), 1) == (3, pytest.approx(3 * 0.25 + 1.8))


def test_separation_is_the_chance_a_correct_guess_scores_above_a_wrong_one():
    sb = load()
    correct = np.array([True, True, False, False])
    assert sb.separation(np.array([0.9, 0.8, 0.2, 0.1]), correct) == pytest.approx(1.0)
    assert sb.separation(np.array([0.1, 0.2, 0.8, 0.9]), correct) == pytest.approx(0.0)
    assert sb.separation(np.array([0.5, 0.5, 0.5, 0.5]), correct) == pytest.approx(0.5)
    # one pair of four out of order (0.6 below 0.7)
    assert sb.separation(np.array([0.9, 0.6, 0.7, 0.1]), correct) == pytest.approx(0.75)
    assert np.isnan(sb.separation(np.array([0.9, 0.8]), np.array([True, True])))


def test_a_draft_that_reaches_its_cap_taken_whole_pays_its_last_guess_row_at_the_next_step():
    sb = load()
    c = costs(sb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4], 0.25)
    g = guesses(sb, [True] * 6)
    # cap 2: rows for the look before guess 1, guess 1 (to draft guess 2), and guess 2 decoded later
    assert sb.rule_step(g, c, sb.Rule(0.0, 0.0, 2, 0.0), 0) == (3, pytest.approx(3 * 0.25 + 1.8))
    g = guesses(sb, [True, False, True, True, True, True])
    assert sb.rule_step(g, c, sb.Rule(0.0, 0.0, 2, 0.0), 0) == (2, pytest.approx(2 * 0.25 + 1.8))


def test_a_second_guess_beside_an_unsure_one_is_a_verify_row_and_a_token_where_it_is_the_targets():
    sb = load()
    c = costs(sb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4], 0.25)
    g = guesses(sb, [True, False, True, True, True, True], [0.9, 0.6, 0.1, 0.9, 0.9, 0.9],
                [False, True, False, False, False, False])
    # guesses 0 and 1 drafted; the second guess beside guess 1 (confidence 0.6 < 0.7): 4 rows
    emitted, seconds = sb.rule_step(g, c, sb.Rule(0.5, 0.5, 8, 0.7), 0)
    assert emitted == 3 and seconds == pytest.approx(3 * 0.25 + 2.0)
    # the sibling wrong: the step emits the first guess and the target's token
    g2 = g._replace(second=np.zeros(6, dtype=bool))
    assert sb.rule_step(g2, c, sb.Rule(0.5, 0.5, 8, 0.7), 0)[0] == 2


def test_the_oracle_is_the_least_time_over_every_way_to_draft_only_correct_guesses():
    sb = load()
    rng = np.random.default_rng(3)
    for _ in range(20):
        n, cap = int(rng.integers(2, 8)), int(rng.integers(1, 5))
        g = guesses(sb, rng.random(n) < 0.7)
        rows = np.cumsum(rng.uniform(0.1, 1.0, size=n + 1))
        c = costs(sb, rows, float(rng.uniform(0.05, 0.5)))
        best = np.inf
        for widths in segmentations(n):
            i, seconds = 0, 0.0
            for w in widths:
                k = w - 1  # drafted, each correct, within the cap, never the reply's last token
                if k > cap or not g.correct[i : i + k].all() or (k and i + k > n - 1):
                    seconds = np.inf
                    break
                seconds += c.verify(1) if k == 0 else (k + 1) * c.draft + c.verify(k + 1)
                i += w
            best = min(best, seconds)
        assert sb.oracle_seconds(g, c, cap) == pytest.approx(best)


def test_no_threshold_rule_beats_the_oracles_stops():
    sb = load()
    rng = np.random.default_rng(4)
    for _ in range(30):
        n = int(rng.integers(3, 40))
        g = guesses(sb, rng.random(n) < 0.7, rng.random(n))
        c = costs(sb, np.cumsum(rng.uniform(0.05, 1.0, size=12)), float(rng.uniform(0.02, 0.5)))
        rule = sb.Rule(float(rng.choice([0.0, 0.3, 0.6, np.inf])), float(rng.choice([0.0, 0.3, 0.6])),
                       int(rng.integers(1, 8)), 0.0)
        assert sb.oracle_seconds(g, c, 8) <= sb.rule_seconds(g, c, rule) + 1e-12
        assert sb.rule_seconds(g, c, rule) > 0


def test_the_grid_finds_plain_decoding_where_no_draft_pays_and_drafting_where_it_does():
    sb = load()
    good = guesses(sb, [True] * 40, [0.9] * 40)
    cheap = costs(sb, [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8], 0.05)
    rule, seconds = sb.best_rule(sb.grid_seconds([(good, cheap)], range(1, 9), (0.0,)))
    assert rule.first <= 0.9 and rule.cap == 8 and seconds < 40 * 1.0 / 3
    dear = costs(sb, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0], 0.5)  # a row costs a step
    rule, seconds = sb.best_rule(sb.grid_seconds([(good, dear)], range(1, 9), (0.0,)))
    assert rule.first == np.inf and seconds == pytest.approx(40.0)


def test_localspec_is_compared_by_tokens_per_second_where_its_reply_parts_from_target_only():
    sb = load()
    c = costs(sb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4], 0.25)
    g = guesses(sb, [True, False, True, True])
    # target-only's reply: 4 tokens in 4 s; the model's parted at a near tie and ran on to 8 tokens,
    # in 4 steps of 3 rows (1.8 s by the curve) and 1 s of drafting: 8 / 8.2 tokens a second by the
    # curve, 8 / 6 measured, against 1 a second
    record = {"prompt": 0, "costs": c, "target-only": ([1] * 4, 4.0, [1] * 4, 0.0),
              "model": ([1] * 8, 6.0, [3] * 4, 1.0)}
    args = type("Args", (), {"cap": 2})()
    b = sb.bounds(args, [record], {0: g})
    assert b["model_curve"] == pytest.approx(8 / 8.2) and b["model_measured"] == pytest.approx(8 / 6)


def test_the_replayed_stop_rule_drafts_sure_guesses_and_declines_unsure_first_ones():
    sb = load()
    # an F16-like curve (a second row half a plain step, a row after it a tenth) and a cheap draft
    c = costs(sb, [1.0, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0, 2.1, 2.2], 0.1)
    sure, unsure = [True] * 4, [False, False]
    confidence = ([0.97] * 4 + [0.3] * 2) * 20
    g = guesses(sb, (sure + unsure) * 20, confidence)
    stop = sb.DraftStop(lambda conf: conf, 1.5, 0.1, c.verify, 8, decline_first=True)
    assert sb.stop_step(g, c, stop, 8, 4) == (1, pytest.approx(0.1 + 1.0))  # an unsure first guess: plain
    stop = sb.DraftStop(lambda conf: conf, 1.5, 0.1, c.verify, 8, decline_first=True)
    emitted, seconds = sb.stop_step(g, c, stop, 8, 0)
    assert emitted == 5 and seconds == pytest.approx(5 * 0.1 + 1.8)  # 4 sure guesses, the 5th look ends it
    plain = sum(len(g.correct) * c.verify(1) for g, c in [(g, c)])
    # over the reply it beats drafting every first guess, and plain decoding
    assert plain / sb.replayed([(g, c)], 8) > plain / sb.rule_seconds(g, c, sb.Rule(0.0, 0.5, 8, 0.0)) > 1.0


def test_each_width_is_decoded_in_turn_each_round_at_the_prompts_depth_in_both_contexts():
    from types import SimpleNamespace

    from fakes import FakeModel, RecordingContext

    sb = load()
    target, draft = RecordingContext(FakeModel(), n_ctx=512), RecordingContext(FakeModel(), n_ctx=512)
    prompt, filler = [5, 6, 9, 10, 11], [20, 21]
    median = sb.decode_medians(SimpleNamespace(target_ctx=target, draft_ctx=draft), prompt, filler, (1, 2, 5), (1, 3))
    assert sorted(median) == [(0, 1), (0, 2), (0, 5), (1, 1), (1, 3)] and all(v >= 0 for v in median.values())
    timed = [[len(c[2]) for c in ctx.calls if c[0] == "decode" and c[3] == "all"] for ctx in (target, draft)]
    assert timed == [[1, 2, 5] * sb.REPEATS, [1, 3] * sb.REPEATS]  # every width in turn, each round
    batches = [c for ctx in (target, draft) for c in ctx.calls if c[0] == "decode" and c[3] == "all"]
    for _, start, tokens, _ in batches:  # the prompt's last token, then the reply's, repeated where short
        assert start == len(prompt) - 1 and tokens == [prompt[-1], 20, 21, 20, 21][: len(tokens)]
    assert target.tokens == draft.tokens == prompt[:-1]  # each cache left as the prompt's
