"""bench_tree_bound.py: what a tree of the draft's ranked guesses could give over a chain of them, from
the draft's rank of each token of a target-only reply and the measured costs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from scripttools import load_script, segmentations

ROOT = Path(__file__).resolve().parent.parent


def load():
    return load_script("bench_tree_bound")


def costs(tb, rows, draft_rows):
    """A verify of k rows costs rows[k - 1] seconds, a draft decode of k rows draft_rows[k - 1]."""
    return tb.Costs(lambda k: float(rows[min(k, len(rows)) - 1]),
                    lambda k: float(draft_rows[min(k, len(draft_rows)) - 1]))


def test_a_rank_is_one_more_than_the_tokens_the_draft_found_likelier():
    tb = load()
    rows = [np.array([0.1, 0.5, 0.2]), np.array([3.0, 1.0, 2.0]), np.array([0.0, 0.0, 1.0])]
    assert tb.draft_ranks(rows, [1, 2, 2]).tolist() == [1, 2, 1]


def test_the_oracle_is_the_least_time_over_every_way_to_step_inside_the_drafts_guesses():
    tb = load()
    rng = np.random.default_rng(5)
    for _ in range(25):
        n, cap, max_rank = int(rng.integers(2, 8)), int(rng.integers(1, 5)), int(rng.integers(1, 4))
        ranks = rng.integers(1, 5, size=n)
        c = costs(tb, np.cumsum(rng.uniform(0.1, 1.0, size=4 * n + 2)), [float(rng.uniform(0.02, 0.4))])
        best = np.inf
        for widths in segmentations(n):
            i, seconds = 0, 0.0
            for w in widths:
                d = w - 1  # drafted: each within the ranks held and the cap, never the reply's last token
                if d > cap or (ranks[i : i + d] > max_rank).any() or (d and i + d > n - 1):
                    seconds = np.inf
                    break
                seconds += c.verify(1) if d == 0 else c.verify(1 + int(ranks[i : i + d].sum())) + (d + 1) * c.draft(1)
                i += w
            best = min(best, seconds)
        assert tb.oracle_seconds(ranks, c, cap, max_rank) == pytest.approx(best)


def test_a_fixed_tree_holds_the_paths_reached_most_often_with_their_parents_and_elder_siblings():
    tb = load()
    counts = Counter({(1,): 10, (1, 1): 8, (2,): 5, (2, 1): 4, (3,): 3})
    assert tb.fixed_shape(counts, 2) == {(1,), (1, 1)}
    assert tb.fixed_shape(counts, 3) == {(1,), (1, 1), (2,)}
    assert tb.fixed_shape(counts, 4) == {(1,), (1, 1), (2,), (2, 1)}
    # a third guess needs the second beside it: with one node left, (3,) does not fit
    assert tb.fixed_shape(Counter({(1,): 10, (3,): 9, (1, 1): 1}), 2) == {(1,), (1, 1)}
    assert tb.fixed_shape(Counter({(1,): 10, (3,): 9, (1, 1): 1}), 3) == {(1,), (2,), (3,)}


def test_paths_are_counted_from_every_step_start_up_to_the_first_guess_beyond_the_ranks_held():
    tb = load()
    counts = tb.path_counts([[1, 2, 9, 1]], depth=3, max_rank=4)
    # starts 0, 1, 2 (the last token is never drafted): (1,), (1, 2), (2,); rank 9 ends a path
    assert counts == Counter({(1,): 1, (1, 2): 1, (2,): 1})


def test_a_fixed_steps_draft_decodes_each_levels_parents_in_one_batch():
    tb = load()
    c = costs(tb, [1.0, 1.2, 1.4, 1.6, 1.8], [0.1, 0.15, 0.2])
    # a chain of 3: the root and two guesses decoded for the next guess, and the next step's root
    assert tb.shape_step_seconds(tb.chain_shape(3), c) == pytest.approx(4 * 0.1 + 1.6)
    # the first and second guess at depth 1, each with its first guess below: level 1 decodes 2 rows
    tree = frozenset({(1,), (2,), (1, 1), (2, 1)})
    assert tb.shape_step_seconds(tree, c) == pytest.approx(0.1 + 0.15 + 0.1 + 1.8)
    assert tb.shape_step_seconds(frozenset(), c) == pytest.approx(1.0)  # plain decoding: no draft


def test_a_fixed_step_goes_as_deep_as_the_replys_ranks_stay_inside_the_tree():
    tb = load()
    c = costs(tb, [1.0, 2.0, 3.0, 4.0, 5.0], [0.5])
    tree = frozenset({(1,), (2,), (1, 1)})
    # ranks 2 | 1 1 | 3 | 1: a step takes the second guess and the target's next token (2 tokens),
    # then two first guesses and the next (3 tokens: to position 5), then the last token alone
    seconds, steps = tb.shape_seconds([2, 1, 1, 1, 3, 1], tree, c)
    assert steps == 3 and seconds == pytest.approx(3 * tb.shape_step_seconds(tree, c))
    # the reply's last token is the target's, never drafted: three tokens in one step of two guesses
    assert tb.shape_seconds([1, 1, 1], tb.chain_shape(8), c)[1] == 1
    assert tb.shape_seconds([1, 1, 1], tb.chain_shape(1), c)[1] == 2


def test_no_fixed_tree_beats_the_oracle():
    tb = load()
    rng = np.random.default_rng(6)
    for _ in range(30):
        ranks = rng.choice([1, 1, 1, 2, 3, 7], size=int(rng.integers(3, 30)))
        c = costs(tb, np.cumsum(rng.uniform(0.05, 1.0, size=40)), np.cumsum(rng.uniform(0.01, 0.3, size=8)))
        counts = tb.path_counts([ranks], 6, 3)
        oracle = tb.oracle_seconds(ranks, c, 6, 3)
        for nodes in range(0, 10):
            assert oracle <= tb.shape_seconds(ranks, tb.fixed_shape(counts, nodes), c)[0] + 1e-12


def test_the_best_fixed_shape_is_plain_decoding_where_rows_are_dear_and_a_tree_where_second_guesses_pay():
    tb = load()
    ranks = np.array([1, 2, 1, 2, 1, 2] * 6)
    cheap = costs(tb, [1.0 + 0.05 * k for k in range(40)], [0.02] * 8)
    shapes = [tb.fixed_shape(tb.path_counts([ranks], 8, 4), k) for k in range(12)]
    tree, _ = tb.best_fixed([(ranks, cheap)], shapes)
    assert (2,) in tree and (1,) in tree
    dear = costs(tb, [float(k + 1) for k in range(40)], [0.5] * 8)  # a row costs a step
    assert tb.best_fixed([(ranks, dear)], shapes)[0] == frozenset()


def test_localspec_is_compared_by_tokens_per_second_beside_target_only():
    tb = load()
    c = costs(tb, [1.0, 1.5, 1.8, 2.0, 2.2, 2.4] + [2.5] * 60, [0.25] * 8)
    record = {"prompt": 0, "costs": c, "ranks": np.array([1, 1, 2, 1]),
              "target-only": ([1] * 4, 4.0), "trees": ([1] * 6, 3.0), "chain": ([1] * 5, 4.0)}
    args = type("Args", (), {"cap": 3, "nodes": 6})()
    b = tb.bounds(args, [record])
    assert b["trees_measured"] == pytest.approx(2.0) and b["chain_measured"] == pytest.approx(1.25)
    assert b["tree_oracle"] >= b["chain_oracle"] and b["tree_oracle"] >= b["tree"][0] >= b["chain"][0]
    assert b["rank_share"][:2] == [0.75, 0.25]
    text = tb.report(b)
    assert "localspec's trees / its chain 1.60x" in text and "| tree oracle" in text


def test_the_three_scenarios_answer_each_prompt_on_a_pair_and_the_ranks_follow_target_onlys_reply():
    from fakes import fake_pair

    tb = load()
    args = SimpleNamespace(prompts=ROOT / "scripts/prompts/prose.jsonl", n_prompts=2, prompt_set="humaneval",
                           rounds=1, max_tokens=12, temperature=1.0, top_k=40)
    with fake_pair(n_seq_max=4) as pair:
        records = tb.run(args, pair)
    assert len(records) == 2
    for r in records:
        assert set(tb.SCENARIOS) <= set(r) and all(len(r[name][0]) == 12 for name in tb.SCENARIOS)
        assert len(r["ranks"]) == 12 and (r["ranks"] >= 1).all()
        assert 0 < r["costs"].verify(1) <= r["costs"].verify(64) and r["costs"].draft(1) > 0


@pytest.mark.parametrize("argv, says", [(["--quick", "--cap", "0"], "--cap 0"),
                                        (["--quick", "--nodes", "0"], "--nodes 0"),
                                        (["--quick", "--temperature", "-1"], "--temperature -1")])
def test_a_bad_argument_is_one_line_naming_it(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        load().parse_args(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err
