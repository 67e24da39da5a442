"""The n-gram (prompt lookup) drafter on hand-made token sequences, and through the controller."""

from __future__ import annotations

import numpy as np

from localspec.drafters import NGramDrafter


def test_longest_match_wins():
    d = NGramDrafter(n_min=1, n_max=3)
    #          0  1  2  3  4  5  6  7  8  9 10
    context = [7, 1, 2, 3, 4, 9, 2, 3, 8, 1, 2, 3]
    ids, q, *_ = d.propose(context, 3)
    # "1 2 3" (n=3) was followed by 4 at position 4; the shorter "2 3" last ended at 7, followed by 8.
    assert ids == [4, 9, 2] and d.last_n == 3
    assert all(len(x.ids) == 1 and x.probs[0] == 1.0 and x.ids[0] == t for x, t in zip(q, ids))  # one-hot q


def test_no_match_proposes_nothing():
    d = NGramDrafter(n_min=2, n_max=3)
    assert d.propose([1, 2, 3, 4, 5], 4).ids == []
    assert d.last_n == 0


def test_match_running_into_the_end_of_the_context():
    d = NGramDrafter(n_min=1, n_max=2)
    # "5 6" last ended at 2 and was followed by 5, 6 only: the proposal stops at the end.
    assert d.propose([9, 5, 6, 5, 6], 8)[0] == [5, 6]


def test_a_copy_stops_before_the_first_end_of_generation_token_it_would_copy():
    # A prompt whose last line the reply repeats, then a turn's end (99) and the next turn's header:
    # the copy stops before the end token, which it does not guess (where the reply ends there, the
    # target's token after the draft is the end token anyway).
    ends = {99}.__contains__
    prompt = [5, 1, 2, 3, 4, 99, 7, 8, 1, 2]
    assert NGramDrafter(n_min=2, n_max=2, ends=ends).propose(prompt, 8).ids == [3, 4]
    assert NGramDrafter(n_min=2, n_max=2).propose(prompt, 8).ids == [3, 4, 99, 7, 8, 1, 2]
    # an end token before the match's occurrence does not cut it; one generated later is indexed too
    d = NGramDrafter(n_min=1, n_max=1, ends=ends)
    assert d.propose([99, 6, 1, 2, 3, 1], 2).ids == [2, 3]
    assert d.propose([99, 6, 1, 2, 3, 99, 4, 1], 8).ids == [2, 3]
    # ... and a continuation after a draft is cut as a proposal is
    assert d.continuation([99, 6, 1, 2, 3, 99, 4], [1], 8)[0] == [2, 3]
    # a match whose next token is the end offers nothing (a plain step draws the end, if it comes)
    assert d.propose([99, 6, 1, 2, 3, 99, 4, 3], 8).ids == []
    assert d.offer([99, 6, 1, 2, 3, 99, 4, 3], 8) == 0
    d.prefill([4, 5, 6, 4])  # a new prompt: the old end positions are gone with the old index
    assert d.propose([4, 5, 6, 4], 8).ids == [5, 6, 4]


def test_most_recent_occurrence_is_used():
    d = NGramDrafter(n_min=1, n_max=1)
    assert d.propose([4, 1, 4, 2, 4], 1)[0] == [2]


def test_context_change_rebuilds_the_index():
    d = NGramDrafter(n_min=1, n_max=2)
    assert d.propose([1, 2, 3, 1, 2], 1)[0] == [3]
    d.prefill([5, 6, 1, 2])                         # a new prompt, not an extension
    assert d.propose([5, 6, 1, 2], 1).ids == []


def test_lookup_cost_does_not_grow_with_the_context():
    # Count dict probes per proposal, not time: the same for 100 and 100,000 context tokens.
    rng = np.random.default_rng(0)
    probes = []
    for length in (100, 100_000):
        d = NGramDrafter(n_min=1, n_max=4)
        context = rng.integers(0, 50_000, size=length).tolist()
        d.prefill(context)
        before = d.probes
        for extra in range(20):
            context.append(int(rng.integers(0, 50_000)))
            d.propose(context, 4)
        probes.append(d.probes - before)
    # at most one probe per n (4..1), plus the n_min-gram's look first, whatever the length
    assert max(probes) <= 20 * (4 + 1)


def test_text_that_does_not_repeat_costs_one_probe_a_lookup():
    # No n-gram of the context recurs: the n_min-gram tail is not indexed, so no longer one is probed.
    d = NGramDrafter(n_min=2, n_max=8)
    context = list(range(1000))
    d.prefill(context)
    before = d.probes
    for t in range(1000, 1020):
        context.append(t)
        assert d.propose(context, 4).ids == []
    assert d.probes - before == 20
    # ... and the index grew by one n-gram a token, the longer ones left until a lookup needs them
    assert len(d.index) == len(context) - 2
    # ... and a recurring one is still found at its longest n: "3 4 5 6" recurs, 7 followed it
    context += [3, 4, 5, 6]
    assert d.propose(context, 3).ids == [7, 8, 9] and d.last_n == 4


def agreeing(tokens: list[int], at: int, cap: int) -> int:
    """How many tokens ending at position `at` agree with the end of tokens, at most cap."""
    n = 0
    while n < cap and at - n >= 0 and tokens[at - n] == tokens[len(tokens) - 1 - n]:
        n += 1
    return n


def latest_longest_match(context: list[int], n_min: int, n_max: int, k: int, draft: list[int] = (),
                         followed: int | None = None, cap: int = 64) -> tuple[list[int], int | None]:
    """The lookup by brute force: up to k tokens of the context after the latest earlier occurrence
    in it of the longest n-gram (n_min..n_max) ending context + draft, or after `followed` (where the
    last match's copy goes on) if that agrees with their end at least as far back; and where the
    tokens came from (None: no match)."""
    tokens = context + list(draft)
    for n in range(min(n_max, len(tokens) - 1), n_min - 1, -1):
        tail = tokens[len(tokens) - n:]
        for end in range(len(context) - 2, n - 2, -1):  # an occurrence ending at `end` has a next token
            if tokens[end - n + 1: end + 1] == tail:
                if (followed is not None and followed != end and 0 <= followed < len(context) - 1
                        and agreeing(tokens, followed, cap) >= max(agreeing(tokens, end, cap), n_min)):
                    end = followed
                return context[end + 1: end + 1 + k], end
    return [], None


def test_the_lookup_matches_a_brute_force_search_token_by_token():
    # Text over a small vocabulary repeats at every n-gram size: each step's proposal and each
    # continuation into a draft agree with the brute-force search, however the index caught up,
    # the copy the last proposal began followed where it agrees as far back as the latest occurrence.
    rng = np.random.default_rng(1)
    phrases = [rng.integers(0, 6, size=int(rng.integers(3, 12))).tolist() for _ in range(5)]
    text = [t for _ in range(40) for t in (phrases[int(rng.integers(0, 5))] if rng.random() < 0.6
                                           else rng.integers(0, 30, size=3).tolist())]
    d = NGramDrafter(n_min=2, n_max=6, match_cap=16)
    d.prefill(text[:10])
    last, followed_used = (None, 0), 0  # (where the last proposal's occurrence ended, the context's length then)
    # where the last proposal's copy goes on after `length` tokens of context and draft
    followed = lambda length: None if last[0] is None else last[0] + length - last[1]  # noqa: E731
    for i in range(10, len(text)):
        context = text[:i]
        if i % 3:
            ids, at = latest_longest_match(context, 2, 6, 5, followed=followed(i), cap=16)
            assert d.propose(context, 5).ids == ids, i
            followed_used += at is not None and at == followed(i) and at != latest_longest_match(context, 2, 6, 5)[1]
            last = (at, i)
        draft = text[i: i + 2]
        ids, _ = latest_longest_match(context, 2, 6, 4, draft, followed(i + 2), cap=16)
        assert d.continuation(context, draft, 4)[0] == ids, i
    assert followed_used > 0  # the text made the followed copy and the latest occurrence differ


def test_a_copy_is_followed_past_a_line_that_recurs():
    # The reply copies a source whose line L (longer than n_max) recurs, followed by 30 the first
    # time and by 8 the second. Inside the second instance the latest occurrence of the last n_max
    # tokens is the reply's own copy of the first, which goes on with 30; the source, which the copy
    # was following, goes on with 8 and agrees much further back.
    line = [1, 2, 3, 4, 5, 6]
    source = [20, *line, 30, 21, 22, *line, 8, 9]
    prompt = [0, *source, 99]
    context = prompt + source[:10]  # the reply so far: up to the second instance of the line
    d = NGramDrafter(n_min=2, n_max=4, match_cap=16)
    d.prefill(context)
    assert d.propose(context, 4).ids == [1, 2, 3, 4]  # the second instance, from the source
    context += [1, 2, 3, 4]
    assert d.propose(context, 4).ids == [5, 6, 8, 9]  # the copy followed ...
    assert d.last_at == len([0, *source[:14]]) - 1 and d.last_match > 4
    # ... where the latest occurrence of the line, the reply's first instance, goes on with 30
    fresh = NGramDrafter(n_min=2, n_max=4, match_cap=16)
    fresh.prefill(context)
    assert fresh.propose(context, 4).ids == [5, 6, 30, 21] and fresh.last_at >= len(prompt)
    # ... and the copy is followed into a draft (the hybrid's handoff) as into the context
    assert d.continuation(context, [5], 3)[0] == [6, 8, 9]
    # where the reply broke off from the copy, the latest occurrence is taken again
    context += [5, 6, 30]
    assert d.propose(context, 2).ids == [21, 22] and d.last_at >= len(prompt)


class FakeModelDrafter(NGramDrafter):
    """Proposes like the n-gram drafter but is named as the draft model is: only the name differs."""

    name = "model"


def measured_cheap_wide_verify():
    """A tracker that has seen every draft accepted and a verify as cheap for 41 tokens (as wide as
    the copy below) as for 1."""
    from localspec.tracker import CostTracker

    costs = CostTracker()
    for _ in range(5):
        costs.record(40, 40, 0.0, 0.1, 0.0)
        costs.record(0, 0, 0.0, 0.1, 0.0)
    return costs


def test_auto_drafts_a_long_copy_whole_from_ngram_but_caps_model_drafts():
    from localspec.planner import Planner
    from localspec.config import GenerationConfig

    config = GenerationConfig(max_tokens=200)  # gamma_max 8, ngram_gamma_max 127
    tokens = list(range(100, 140)) * 2 + list(range(100, 110))  # a copy: the lookup offers 40 tokens
    for drafter, cap in ((NGramDrafter(), 40), (FakeModelDrafter(), 8)):
        planner = Planner([(drafter, measured_cheap_wide_verify())], config)
        assert drafter.offer(tokens, 100) == 40
        assert planner.plan(tokens, 100)[:2] == (0, cap)


def test_trackers_kept_across_generations_follow_each_config_s_caps():
    # A Pair keeps its trackers between generations; the caps come from each generation's config.
    from localspec.planner import Planner
    from localspec.config import GenerationConfig

    tokens = list(range(100, 140)) * 2 + list(range(100, 110))
    sources = [(NGramDrafter(), measured_cheap_wide_verify()), (FakeModelDrafter(), measured_cheap_wide_verify())]
    small = GenerationConfig(max_tokens=200, gamma_max=5, ngram_gamma_max=12)
    assert Planner(sources, small).plan(tokens, 100)[:2] == (0, 12)
    assert Planner(sources[1:], small).plan(tokens, 100)[:2] == (0, 5)
    default = GenerationConfig(max_tokens=200)
    assert Planner(sources, default).plan(tokens, 100)[:2] == (0, 40)   # all the lookup offers
    assert Planner(sources[1:], default).plan(tokens, 100)[:2] == (0, 8)


def test_a_match_measures_how_far_back_it_reaches():
    d = NGramDrafter(n_min=2, n_max=3, match_cap=10)
    line = [5, 6, 7, 8, 9, 10, 11]
    # a copy of the whole line so far: the match reaches back over all 5 tokens repeated
    assert d.propose([1] + line + [2] + line[:5], 4).ids == [10, 11, 2, 5] and d.last_match == 5
    assert d.last_at == 5  # the occurrence of "7 8 9" it continues ends at position 5
    # only "8 9" recurs (after different tokens): a short match, as a phrase that merely recurs
    assert d.propose([1] + line + [3, 8, 9], 2).ids == [10, 11] and d.last_n == 2 and d.last_match == 2
    # a long repeat is measured up to the cap only: O(match_cap) comparisons per lookup
    assert d.propose(list(range(30)) + list(range(20)), 1).ids == [20] and d.last_match == 10


def test_the_default_lookup_finds_the_longer_match_of_a_copy():
    # "a b c d" recurs twice; only the 6-gram locates the copy being repeated.
    base = [1, 2, 3, 4]
    context = [9, 8] + base + [50] + [7, 6] + base + [60] + [9, 8] + base
    assert NGramDrafter().propose(context, 1).ids == [50]            # n_max 8 finds "9 8 1 2 3 4"
    assert NGramDrafter(n_max=4).propose(context, 1).ids == [60]     # 4-grams take the latest "1 2 3 4"


def test_a_continuation_reads_into_a_draft_without_indexing_it():
    # The context ends just before a copy begins; a model's draft of [5, 6] starts it. The lookup of
    # context + draft finds the line, says how far it reaches (across the draft's boundary), and
    # leaves the index as it was: the target has not judged the draft yet.
    d = NGramDrafter(n_min=2, n_max=3, match_cap=10)
    line = [5, 6, 7, 8, 9, 10, 11]
    context = [1] + line + [2, 3, 4]
    assert d.propose(context, 4).ids == []                           # nothing matches "2 3 4"
    d._index_long()  # (the longer n-grams are indexed when a lookup first needs them)
    index = dict(d.index)
    assert d.continuation(context, [5, 6], 4) == ([7, 8, 9, 10], 2, 2)  # "5 6" recurs, after 1, ending at 2
    assert d.continuation(context, [6, 1], 4) == ([], 0, 0)         # "6 1" never occurred
    assert d.index == index and d.tokens == context
    # the target took 5: it is indexed now, and the match of "5 6 7" reaches over both parts
    assert d.continuation(context + [5], [6, 7], 3) == ([8, 9, 10], 3, 3)
    assert d.propose(context + [5], 2).ids == []                      # "4 5" never occurred


def test_a_pair_s_copies_end_before_its_target_s_end_of_generation_token():
    from fakes import EOS, IM_START, fake_pair

    pair = fake_pair(draft=False)
    prompt = [IM_START, 5, 6, 7, 8, EOS, IM_START, 9, 5, 6]  # a turn that ends, then one that repeats it
    assert pair.ngram.propose(prompt, 8).ids == [7, 8]  # up to the end token, not it
