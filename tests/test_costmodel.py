"""The cost model's choice of γ on synthetic costs and acceptance (pure, no models)."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.acceptance import (TEXT_LEAST, TEXT_PRIOR_ROWS, TEXTS_KEPT, PositionAcceptance, TextAcceptance, logit,
                                  shifted)
from localspec.costmodel import (best_gamma, broken_upto, covering, expected_seconds_upto, expected_tokens,
                                 expected_tokens_upto, fastest, step_seconds)
from localspec.draftstop import FALLBACK_P_MIN, LOOKS_LEAST, DraftStop, DraftStops, FirstLooks, FixedStop
from localspec.timings import Ema
from localspec.tracker import CostTracker

from plannersim import EPYC_TILED, curve, rejected_first_probes

# Target verify time for a batch of k tokens on a 2-core CPU (a Python probe), in ms.
CPU_VERIFY_MS = {1: 27.6, 2: 45.0, 4: 73.5, 5: 92.8, 8: 135.0, 16: 157.0}


def cpu_verify(k: int) -> float:
    """Piecewise-linear through the measured CPU points, in seconds."""
    ks = sorted(CPU_VERIFY_MS)
    lo = max(n for n in ks if n <= k)
    hi = min(n for n in ks if n >= k)
    if lo == hi:
        return CPU_VERIFY_MS[lo] / 1000
    t = CPU_VERIFY_MS[lo] + (CPU_VERIFY_MS[hi] - CPU_VERIFY_MS[lo]) * (k - lo) / (hi - lo)
    return t / 1000


def test_expected_tokens_is_the_papers_formula_for_constant_alpha():
    # Leviathan et al.: (1 - a^(g+1)) / (1 - a)
    for alpha in (0.3, 0.8, 0.95):
        for gamma in range(0, 9):
            assert expected_tokens([alpha] * gamma or [alpha], gamma) == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha))


def test_cpu_light_pair_chooses_plain_decoding():
    # Draft at 0.62x the target per token, CPU verify curve, even with 92% acceptance: nothing pays.
    draft_s = 0.62 * CPU_VERIFY_MS[1] / 1000
    gamma, tps = best_gamma([0.92] * 8, draft_s, cpu_verify, 0.0, 8)
    assert gamma == 0
    assert tps == pytest.approx(1000 / CPU_VERIFY_MS[1])


def test_cheap_draft_and_flat_verify_chooses_long_drafts():
    # c = 0.05 and a verify that costs the same for any batch (memory-bound GPU): draft a lot.
    gamma, tps = best_gamma([0.8] * 8, 0.05, lambda k: 1.0, 0.0, 8)
    assert gamma >= 6
    assert tps > 2.5


def test_low_acceptance_turns_speculation_off_even_with_cheap_draft():
    gamma, _ = best_gamma([0.05] * 8, 0.05, lambda k: 1.0 + 0.2 * (k - 1), 0.0, 8)
    assert gamma == 0


def test_heavy_target_chooses_a_middle_gamma():
    # F16 target: 85 ms per token, batches nearly free (pp4 34 tok/s, pp8 49.6 tok/s); draft 17 ms.
    verify = {1: 0.085, 4: 4 / 34.1, 8: 8 / 49.6}
    f = lambda k: verify[1] + (verify[4] - verify[1]) * (k - 1) / 3 if k <= 4 else verify[4] + (verify[8] - verify[4]) * (k - 4) / 4  # noqa: E731
    gamma, tps = best_gamma([0.9] * 8, 0.017, f, 0.0, 8)
    assert 3 <= gamma <= 8
    assert tps > 1.4 / verify[1]


def test_tracker_rules_drafting_out_where_costs_alone_do():
    # The CPU light pair: even at near-perfect acceptance, drafting at 0.62x with this verify curve loses.
    t = CostTracker()
    assert t.could_pay(8) and t.plan(8)[0] == 0       # nothing measured: no known choice, all to learn
    t.record(0, 0, 0.0, 0.0276, 0.001)
    t.record(3, 3, draft_s=3 * 0.017, verify_s=0.0735, overhead_s=0.001)
    t.record(8, 8, draft_s=8 * 0.017, verify_s=0.135, overhead_s=0.001)
    # two steps' draft cost: one stalled step could have set it, so it may be a third of that
    assert t.could_pay(8) and t.plan(8)[0] == 0
    t.record(8, 8, draft_s=8 * 0.017, verify_s=0.135, overhead_s=0.001)
    assert not t.could_pay(8) and t.plan(8)[0] == 0    # a third agrees: ruled out


def test_tracker_keeps_hope_where_cheap_drafts_have_been_unlucky():
    # A cheap draft and flat verify could pay, but this draft has been rejected twice: no known
    # choice, yet the optimistic estimate still sees a win (the planner may explore it, on budget).
    t = CostTracker()
    t.record(0, 0, 0.0, 0.010, 0.0)
    t.record(3, 0, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    t.record(3, 0, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    assert t.plan(8)[0] == 0 and t.could_pay(8)
    assert CostTracker().plan(0)[0] == 0


def unlucky_on_f16() -> CostTracker:
    """Three plain steps of the F16 target measured, then a draft model's first two probes rejected
    (plannersim.rejected_first_probes)."""
    t = CostTracker()
    for _ in range(3):
        t.record(0, 0, 0.0, 0.0784, 0.0)
    return rejected_first_probes(t)


def test_a_draft_whose_first_probes_were_all_rejected_is_hoped_for_again_as_steps_pass():
    # Its optimistic estimate cannot beat plain decoding now; nothing judges its guesses while it does
    # not draft, so counted by its own judged guesses alone its bonus would never grow, and the planner
    # would never probe it again (as in 2-3 of 40 simulated F16 prose sets). UCB1 counts every round.
    t = unlucky_on_f16()
    assert not t.could_pay(8)
    for _ in range(10):
        t.record(0, 0, 0.0, 0.0784, 0.0)
    assert not t.could_pay(8)  # ever more rarely: not at once
    hoped = t.optimistic_acceptance()[0]
    for _ in range(200):
        t.record(0, 0, 0.0, 0.0784, 0.0)
    assert t.optimistic_acceptance()[0] > hoped and t.could_pay(8)
    assert t.acceptance()[0] == pytest.approx(unlucky_on_f16().acceptance()[0])  # the point estimate: as it was


def test_tracker_switches_on_when_drafting_pays():
    t = CostTracker()
    t.record(3, 3, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    t.record(0, 0, draft_s=0.0, verify_s=0.010, overhead_s=0.0)
    for _ in range(20):
        t.record(3, 3, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    assert t.plan(8)[0] >= 3


def test_a_cold_first_draft_does_not_price_drafting_out():
    # A first step can be slow (a model's first decodes may still be faulting its weights in): here
    # the first step's draft took 1.5 s a token, the next ones 10 ms. A mean of the first samples
    # would price the draft at ~0.5 s for ten steps and turn drafting off, with nothing left to
    # measure it again; the median keeps the typical cost.
    t = CostTracker()
    t.record(0, 0, 0.0, 0.050, 0.0)
    for draft_s in (1.5, 0.010, 0.010):
        t.record(3, 3, draft_s=3 * draft_s, verify_s=0.060, overhead_s=0.0)
    assert t.draft_s.value == pytest.approx(0.010)
    assert t.plan(8)[0] > 0


def test_first_samples_take_their_median_then_an_exponential_average():
    e = Ema()
    for x in (9.0, 1.0, 2.0):
        e.add(x)
    assert e.value == 2.0
    for x in (2.0,) * 7:
        e.add(x)
    e.add(5.0)  # the eleventh: a weight of 1/10 from the median of the first ten
    assert e.value == pytest.approx(2.3)
    loaded = Ema()
    loaded.load(4.0, 25)  # a saved average weighs as one sample
    loaded.add(2.0)
    assert loaded.value == 3.0 and loaded.n == 2


def test_acceptance_is_conditional_per_position():
    t = CostTracker(prior_weight=0.0)
    t.record(4, 1, 0.0, 0.0, 0.0)   # position 0 accepted, position 1 rejected, 2 and 3 never judged
    t.record(4, 4, 0.0, 0.0, 0.0)
    assert t.acceptance() == [1.0, 0.5, 1.0, 1.0]


def test_verify_interpolation_and_extrapolation():
    t = CostTracker()
    t.record(0, 0, 0.0, 0.010, 0.0)
    assert t.verify_seconds(4) == pytest.approx(0.040)      # one point: assume cost grows with k
    t.record(3, 0, 0.003, 0.016, 0.0)
    assert t.verify_seconds(2) == pytest.approx(0.012)      # between 1 and 4
    assert t.verify_seconds(7) == pytest.approx(0.022)      # the last slope continued


def test_marginal_wins_are_not_taken():
    # gamma 1 predicts 1.8% over plain decoding: inside the model's error, so plain decoding stays.
    args = ([0.12] * 8, 0.001, lambda k: 0.010, 0.0, 1)
    assert best_gamma(*args)[0] == 1
    gamma, tps = best_gamma(*args, min_gain=0.03)
    assert gamma == 0 and tps == pytest.approx(100.0)


def drafts_until_stop(stop, confidences) -> int:
    """How many of these drafts a stop rule lets through (it is asked before each)."""
    n = 0
    for i, c in enumerate(confidences):
        if not stop.keep(i, c):
            break
        n += 1
    return n


def test_draft_stop_keeps_doubtful_drafts_when_drafting_is_cheap():
    # Heavy target: a verify costs about the same for any batch and a draft token 10% of it. At the
    # loop's 2 x plain rate, a 40%-sure guess still pays: 0.4 tokens for 0.025 s against 8 tok/s.
    stop = DraftStop(lambda c: c, rate=8.0, draft_s=0.025, verify_s=lambda k: 0.25)
    assert drafts_until_stop(stop, [0.9, 0.4, 0.9, 0.9]) == 4


def test_draft_stop_cuts_early_when_drafting_is_dear():
    # The light pair on the CPU: a draft token is 0.62 of a target token and a verify grows with the
    # batch: at plain decoding's rate not even a sure guess pays (as best_gamma finds: γ = 0).
    # (The first draft is the planner's call, and best_gamma says γ = 0 there: no step drafts at all.)
    dear = DraftStop(lambda c: c, rate=1 / 0.0276, draft_s=0.62 * 0.0276, verify_s=cpu_verify)
    assert drafts_until_stop(dear, [0.99, 0.99, 0.99]) == 1
    # A draft at 0.18 of a target token, verify +5 ms a token, at 40 tok/s: a guess must bring 0.4 tokens.
    middle = DraftStop(lambda c: c, rate=40.0, draft_s=0.005, verify_s=lambda k: 0.0276 + 0.005 * (k - 1))
    assert drafts_until_stop(middle, [0.99, 0.99, 0.3, 0.99]) == 2
    # Until the costs are trusted (decline_first off) the first draft of a step is made however
    # doubtful: the planner chose to speculate (test_a_step_the_planner_chose_always_drafts_once).
    assert drafts_until_stop(middle, [0.05, 0.99]) == 1
    # ... and reach counts: after several merely-likely drafts even a fairly sure one no longer pays.
    cheap = DraftStop(lambda c: c, rate=8.0, draft_s=0.025, verify_s=lambda k: 0.25)
    assert drafts_until_stop(cheap, [0.6] * 8) == 3  # a 4th adds 0.6^4 = 0.13 tokens < 8 x 0.025


def test_tracker_learns_what_a_confidence_is_worth():
    t = CostTracker()
    assert t.accept_at(0.6) == pytest.approx(0.8)  # unmeasured: optimistic, so that it gets measured
    for _ in range(50):  # drafts 90% sure, accepted a third of the time; the third one never judged
        t.record(3, 0, 0.03, 0.1, 0.0, confidences=[0.92, 0.93, 0.91])
        t.record(3, 1, 0.03, 0.1, 0.0, confidences=[0.92, 0.93, 0.91])
    assert t.conf_judged[9] == 150
    assert t.accept_at(0.95) == pytest.approx((50 + 2 * 0.975) / (150 + 2))
    assert t.accept_at(0.5) == pytest.approx(0.75)  # other confidences are untouched


def test_tracker_stop_rule_is_fixed_until_measured_then_from_costs():
    t = CostTracker()
    first = t.draft_stop()
    assert isinstance(first, FixedStop) and first.p_min == FALLBACK_P_MIN
    t.record(0, 0, 0.0, 0.25, 0.0)                    # plain step: verify(1) = 0.25 s
    t.record(4, 4, 0.1, 0.26, 0.0, [0.9] * 4)         # 25 ms per draft, 5 tokens in 0.36 s
    stop = t.draft_stop()
    assert isinstance(stop, DraftStop)
    assert stop.rate == pytest.approx(5 / 0.36) and stop.draft_s == pytest.approx(0.025)
    # rate is never below plain decoding, whatever the drafting steps achieved
    t2 = CostTracker()
    t2.record(0, 0, 0.0, 0.25, 0.0)
    t2.record(4, 0, 0.4, 0.26, 0.0, [0.9] * 4)
    assert t2.draft_stop().rate == pytest.approx(4.0)


def test_a_step_the_planner_chose_always_drafts_once():
    # Only plain steps and one 1-token draft measured, verify(2) twice verify(1): no further draft
    # seems to pay. Refusing the first draft too would leave every chosen step paying the
    # draft's sync for nothing, and nothing new measured (seen on the code-editing prompts).
    t = CostTracker()
    assert t.draft_stop().keep(0, 0.01)  # the fallback p-min lets a probe measure the draft
    t.record(0, 0, 0.0, 0.1, 0.0)
    t.record(1, 1, 0.05, 0.2, 0.0, [0.9])
    stop = t.draft_stop()
    assert isinstance(stop, DraftStop) and stop.keep(0, 0.01) and not stop.keep(1, 0.99)


def test_a_first_guess_the_draft_is_unsure_of_is_declined_where_the_costs_are_trusted():
    # A draft at 0.18 of a target token, verify +5 ms a token, at 40 tok/s: a first guess must bring
    # 0.2 tokens for its verify row (its own decode came before the rule), more for each draft after it.
    make = lambda: DraftStop(lambda c: c, rate=40.0, draft_s=0.005,  # noqa: E731
                             verify_s=lambda k: 0.0276 + 0.005 * (k - 1), horizon=4, decline_first=True)
    assert drafts_until_stop(make(), [0.05, 0.99, 0.99]) == 0  # 0.05 + 0.05 x 0.99 + ... < 0.2 + ...
    assert drafts_until_stop(make(), [0.15, 0.99, 0.99]) == 0
    assert drafts_until_stop(make(), [0.3, 0.99, 0.99]) == 1   # 0.3 > 0.2: worth its row, not the drafts after
    assert drafts_until_stop(make(), [0.6, 0.99, 0.99]) == 3
    # where a verify row costs nothing, even a doubtful first guess pays (the next, a decode, does not)
    cheap = DraftStop(lambda c: c, rate=8.0, draft_s=0.025, verify_s=lambda k: 0.25, horizon=4, decline_first=True)
    assert drafts_until_stop(cheap, [0.05, 0.9]) == 1


def test_the_tracker_lets_its_stop_rule_decline_a_first_guess_once_two_rows_are_measured():
    t = CostTracker()
    t.record(0, 0, 0.0, 0.1, 0.0)
    t.record(1, 0, 0.05, 0.2, 0.0, [0.9])  # a 2-row verify costs two plain steps: no doubtful guess pays
    assert t.draft_stop(4).keep(0, 0.01)  # measured once: the first guess is drafted (it must measure)
    for _ in range(2):
        t.record(1, 0, 0.05, 0.2, 0.0, [0.9])
    assert not t.draft_stop(4).keep(0, 0.01)  # trusted: a doubtful first guess is declined
    assert t.draft_stop(4, probe=True).keep(0, 0.01)  # ... but not by a probe, which must measure


def test_draft_stop_looks_past_a_dear_batch_to_a_cheaper_one():
    # Measured on the 2-core CPU: the light target verifies 4 tokens faster than 3. One token ahead,
    # drafting a 2nd token (batch 2 -> 3) does not pay; a 2nd and a 3rd together (batch 2 -> 4) do.
    curve = {1: 0.096, 2: 0.159, 3: 0.210, 4: 0.175, 5: 0.212}
    make = lambda horizon: DraftStop(lambda c: 0.95, rate=11.0, draft_s=0.040,  # noqa: E731
                                     verify_s=curve.__getitem__, horizon=horizon)
    assert drafts_until_stop(make(None), [0.95] * 3) == 1
    assert drafts_until_stop(make(3), [0.95] * 3) == 3
    # ... and not past the step's γ: with γ 2 the cheap batch of 4 is out of reach
    assert drafts_until_stop(make(2), [0.95] * 2) == 1


def test_an_exploratory_stop_rule_reaches_the_next_unmeasured_width():
    # Plain steps and 1-token drafts (90% sure, 3 of 4 accepted) measured; a 2-row verify costs 1.6
    # plain steps. By the point estimate a 3-row verify costs 2.3 (the 1-to-2 slope), and no second
    # token pays; a probe reads verify(3) as no dearer than verify(2), drafts a second token, and
    # stops before a fourth row, which it reads no cheaper a row than verify(2).
    t = CostTracker()
    for _ in range(3):
        t.record(0, 0, 0.0, 0.074, 0.0)
    for accepted in (1, 1, 1, 0):
        t.record(1, accepted, 0.024, 0.121, 0.0, [0.9])
    assert t.verify.next_width(3) == pytest.approx(0.121) and t.verify.next_width(4) == pytest.approx(0.242)
    assert t.verify.next_width(2) == t.verify_seconds(2)
    assert drafts_until_stop(t.draft_stop(8), [0.9] * 8) == 1
    assert drafts_until_stop(t.draft_stop(8, probe=True), [0.9] * 8) == 2


def test_verify_curve_extrapolates_with_one_rule_both_ways():
    from localspec.timings import VerifyCurve

    curve = VerifyCurve({2: 0.020, 4: 0.030, 5: 0.025})       # noise bends the last segment down
    assert curve.seconds(3) == pytest.approx(0.025)          # between measured sizes: linear
    assert curve.seconds(8) == pytest.approx(0.025 + 3 * (0.025 - 0.020) / 3)  # first-to-last slope
    assert curve.seconds(1) == pytest.approx(0.015)          # below: along the first segment
    assert VerifyCurve({4: 0.04}).seconds(8) == pytest.approx(0.08)  # one point: grows with k
    assert VerifyCurve().seconds(3) == 0.0
    falling = VerifyCurve({1: 0.05, 9: 0.01})
    assert falling.seconds(12) == pytest.approx(0.01)        # never a negative slope beyond the range


def test_a_size_measured_fewer_than_three_times_is_read_within_what_trusted_sizes_allow():
    from localspec.timings import TRUSTED_SAMPLES, VerifyCurve

    curve = VerifyCurve()
    for _ in range(TRUSTED_SAMPLES):
        curve.add(32, 0.470)
        curve.add(46, 0.670)
    curve.add(48, 0.626)  # one fast sample: 48 rows read no cheaper than 46
    curve.add(40, 0.700)  # one slow one inside the trusted range: read no dearer than 46
    assert curve.seconds(48) == pytest.approx(0.670) and curve.seconds(40) == pytest.approx(0.670)
    assert curve.known()[1] == (40, pytest.approx(0.700))  # what was measured is kept as it came
    # hoped no dearer per row than the widest trusted, beyond it only; within, the estimate
    assert curve.optimistic(40) == curve.seconds(40)
    assert curve.next_width(48) == pytest.approx(0.670)
    curve.add(64, 0.950)
    # hoped no dearer per row than 48 as read (0.670 over 48 rows), and no dearer than the widest
    assert curve.seconds(64) == pytest.approx(0.950) and curve.next_width(64) == pytest.approx(0.670 * 64 / 48)
    assert curve.optimistic(80) == pytest.approx(0.670 * 64 / 48)
    for _ in range(TRUSTED_SAMPLES - 1):
        curve.add(48, 0.626)
    assert curve.seconds(48) == pytest.approx(0.626)  # measured three times: read as measured
    assert VerifyCurve({4: 0.04, 2: 0.05}).seconds(4) == 0.04  # nothing trusted: every size as measured


def test_one_slow_sample_at_the_widest_copy_width_does_not_cap_the_hope_for_wider_copies():
    # An n-gram lookup's copy widths, each measured once, about 8 ms a row, and the widest (81 rows)
    # once at 9 ms a row: read as it came it capped every wider width's hope at its own cost, so an
    # 88-row copy could not look faster than the 53-row one known. Hoped no dearer a row than 53
    # rows, 81 rows may cost 657 ms, and 88 rows no more than that; the point estimate keeps 734 ms.
    from localspec.timings import TRUSTED_SAMPLES, VerifyCurve

    curve = VerifyCurve()
    for _ in range(TRUSTED_SAMPLES):
        curve.add(1, 0.025)
    for k, ms in ((21, 249), (33, 300), (49, 411), (53, 430), (54, 442), (81, 734)):
        curve.add(k, ms / 1e3)
    assert curve.seconds(81) == pytest.approx(0.734)
    assert curve.optimistic(81) == pytest.approx(0.430 * 81 / 53)
    assert curve.optimistic(88) == pytest.approx(0.430 * 81 / 53)
    assert 88 / curve.optimistic(88) > 1.03 * 53 / curve.seconds(53)  # worth a probe at min_gain
    assert curve.optimistic(33) == pytest.approx(0.300)  # a size as measured where it is no dearer a row


def test_position_acceptance_pools_runs_position_by_position():
    from localspec.acceptance import PositionAcceptance

    a, b = PositionAcceptance(), PositionAcceptance()
    a.record(2, 1)   # position 0 accepted, 1 rejected
    b.record(4, 4)   # all four accepted
    pooled = PositionAcceptance.pooled([a, b])
    assert pooled.drafted == [2, 2, 1, 1] and pooled.judged == [2, 2, 1, 1] and pooled.accepted == [2, 1, 1, 1]
    assert pooled.rates() == [1.0, 0.5, 1.0, 1.0]
    assert a.drafted == [1, 1]  # the inputs are left as they were


def test_a_draft_priced_to_its_cap_is_the_papers_step():
    accept = [0.9, 0.7, 0.5]
    tokens = expected_tokens_upto(accept, 6)
    seconds = expected_seconds_upto(6, 0.004, cpu_verify, 0.001)
    for gamma in range(7):
        assert tokens[gamma] == pytest.approx(expected_tokens(accept, gamma))
        assert seconds[gamma] == pytest.approx(step_seconds(gamma, 0.004, cpu_verify, 0.001))


def test_a_draft_a_stop_rule_may_end_is_priced_over_where_it_ends():
    # Where going on does not depend on the target's verdicts (g = u), a step capped at γ is a mix of
    # fixed-length steps: length n < γ with P(N ≥ n)(1 − u_n), γ with P(N ≥ γ). Enumerated directly.
    accept, on, draft_s, overhead = [0.8, 0.9, 0.6, 0.95], [0.5, 0.7, 0.2, 0.9, 0.4], 0.006, 0.0005
    tokens = expected_tokens_upto(accept, 6, on)
    seconds = expected_seconds_upto(6, draft_s, cpu_verify, overhead, on)
    for gamma in range(1, 7):
        at_least = [1.0] + list(np.cumprod(on[: gamma - 1]))  # P(N ≥ n), n = 1..γ
        p = [at_least[n - 1] * ((1 - on[n - 1]) if n < gamma else 1.0) for n in range(1, gamma + 1)]
        assert sum(p) == pytest.approx(1.0)
        assert tokens[gamma] == pytest.approx(sum(pn * expected_tokens(accept, n) for n, pn in enumerate(p, 1)))
        assert seconds[gamma] == pytest.approx(
            sum(pn * step_seconds(n, draft_s, cpu_verify, overhead) for n, pn in enumerate(p, 1)))


@pytest.mark.parametrize("first_on", [1.0, 0.7])
def test_the_chance_a_step_leaves_a_guess_rejected_is_taken_over_where_its_draft_ends(first_on):
    # As above, a step capped at γ is a mix of drafts of n guesses; one of n is broken unless all n
    # are accepted, and a step that drafts none (1 − first_on) has no verify wider than one row.
    accept, on = [0.8, 0.9, 0.6, 0.95], [0.5, 0.7, 0.2, 0.9, 0.4]
    broken = broken_upto(accept, 6, on, first_on)
    assert broken[0] == 0.0
    for gamma in range(1, 7):
        at_least = [1.0] + list(np.cumprod(on[: gamma - 1]))
        p = [at_least[n - 1] * ((1 - on[n - 1]) if n < gamma else 1.0) for n in range(1, gamma + 1)]
        whole = [float(np.prod([accept[min(i, 3)] for i in range(n)])) for n in range(1, gamma + 1)]
        assert broken[gamma] == pytest.approx(first_on * sum(pn * (1 - w) for pn, w in zip(p, whole)))
    # without a stop rule every draft runs to its cap: broken unless all γ guesses are taken
    assert broken_upto([0.5], 3) == pytest.approx([0.0, 0.5, 0.75, 0.875])


def test_draft_stops_count_where_the_rule_ended_a_draft_not_where_the_cap_did():
    stops = DraftStops()
    stops.record(2, 2, cap=5)  # went on past token 1, stopped after 2 with room for 3 more
    stops.record(4, 0, cap=4)  # went on past 1, 2, 3; the cap ended it at 4: nothing said of position 4
    stops.record(1, 1, cap=1)  # a one-token cap tells nothing
    assert (stops.could, stops.went) == ([2, 2, 1], [2, 1, 1])
    # over steps whose first i guesses were accepted: the second step's first guess was rejected
    assert (stops.could_ok, stops.went_ok) == ([1, 1, 0], [1, 0, 0])
    g, u = stops.rates(weight=2.0)
    assert u == [pytest.approx(4 / 4), pytest.approx(3 / 4), pytest.approx(3 / 3)]  # towards 1: to the cap
    assert g == [pytest.approx(3 / 3), pytest.approx((0 + 2 * 3 / 4) / 3), pytest.approx(3 / 3)]  # ... towards u
    assert DraftStops.from_rows(stops.to_rows()).to_rows() == stops.to_rows()


def test_measured_stops_predict_what_steps_a_stop_rule_ends_bring():
    # A draft that sees, before each guess, whether it will be sure of it (sure 60% of the time,
    # accepted 95% then, 30% otherwise) and goes on only where sure; it drafts its first guess always.
    # Steps of cap 6: what the counters measure predicts their mean tokens and seconds.
    rng, cap, draft_s = np.random.default_rng(7), 6, 0.01
    acceptance, stops = PositionAcceptance(), DraftStops()
    tokens, seconds = [], []
    for _ in range(20_000):
        sure = rng.random(cap) < 0.6
        n = 1 + int(np.argmin(sure[1:])) if not sure[1:].all() else cap
        accepted = rng.random(n) < np.where(sure[:n], 0.95, 0.3)
        k = int(np.argmin(accepted)) if not accepted.all() else n
        acceptance.record(n, k)
        stops.record(n, k, cap)
        tokens.append(k + 1)
        seconds.append(step_seconds(n, draft_s, cpu_verify, 0.0))
    g, u = stops.rates(weight=0.0)
    predicted_tokens = expected_tokens_upto(acceptance.rates(), cap, g)[cap]
    predicted_seconds = expected_seconds_upto(cap, draft_s, cpu_verify, 0.0, u)[cap]
    assert predicted_tokens == pytest.approx(np.mean(tokens), rel=0.01)
    assert predicted_seconds == pytest.approx(np.mean(seconds), rel=0.01)
    # priced as if every draft ran to its cap, the same steps look much dearer than they are
    assert step_seconds(cap, draft_s, cpu_verify, 0.0) > 1.5 * np.mean(seconds)


def test_a_value_measured_over_several_tokens_weighs_as_that_many_samples():
    once, each = Ema(), Ema()
    for x, times in ((0.02, 1), (0.01, 3), (0.05, 1)) * 5:
        once.add(x, times)
        for _ in range(times):
            each.add(x)
    assert once.value == each.value and once.n == each.n == 25


def _counts(per_position: list[tuple[int, int]]) -> PositionAcceptance:
    """A counter whose position i was judged j and accepted a times, (j, a) = per_position[i]."""
    c = PositionAcceptance()
    c.judged = [j for j, _ in per_position]
    c.accepted = [a for _, a in per_position]
    c.drafted = list(c.judged)
    return c


def test_the_spread_between_positions_is_what_chance_does_not_explain():
    rng = np.random.default_rng(0)
    same = _counts([(200, int(rng.binomial(200, 0.9))) for _ in range(12)])  # one rate everywhere
    p = sum(same.accepted) / sum(same.judged)
    assert same.spread(p) < 0.001
    apart = _counts([(200, 190)] * 6 + [(200, 100)] * 6)  # 0.95 and 0.5: variance 0.05 between them
    assert apart.spread(0.725) == pytest.approx(0.0506, abs=0.005)
    assert _counts([(50, 49)]).spread(0.98) is None  # one position: nothing to compare


def test_a_bucket_s_positions_take_its_rate_where_they_differ_by_chance_only():
    t = CostTracker()
    rng = np.random.default_rng(1)
    for _ in range(60):  # copies accepted 98% of the time, some drafted 120 tokens
        n = 120 if rng.random() < 0.2 else 30
        accepted = next((i for i in range(n) if rng.random() > 0.98), n)
        t.record(n, accepted, 0.0, 0.1, 0.0, bucket=7)
    deep = t.acceptance(7)[40:]
    rate = sum(t.buckets[7].accepted) / sum(t.buckets[7].judged)
    assert max(deep) < rate + 0.005  # no deep position looks better for its few lucky drafts
    # A draft model's acceptance that falls with depth keeps its shape.
    m = CostTracker()
    for _ in range(200):
        accepted = next((i for i in range(6) if rng.random() > (0.9 if i < 3 else 0.4)), 6)
        m.record(6, accepted, 0.0, 0.1, 0.0, bucket=0)
    rates = m.acceptance(0)
    assert min(rates[:3]) > 0.85 and max(rates[3:]) < 0.55


def _one_width(k: int, known: list[tuple[int, float]]) -> float:
    """VerifyCurve's point estimate for one width, read from its definition (class docstring)."""
    if not known:
        return 0.0
    measured = dict(known)
    if k in measured:
        return measured[k]
    if len(known) == 1:
        n, t = known[0]
        return t * k / n
    (k0, t0), (kn, tn) = known[0], known[-1]
    if k > kn:
        return tn + max(0.0, (tn - t0) / (kn - k0)) * (k - kn)
    below = [p for p in known if p[0] < k]
    (ka, ta), (kb, tb) = (known[0], known[1]) if not below else (below[-1], known[len(below)])
    return max(ta + (tb - ta) / (kb - ka) * (k - ka), t0 * 0.5)


def test_a_curve_read_in_one_pass_gives_each_width_as_read_alone():
    # The planner reads every width up to a cap each step; the curve fills them in one pass
    # (timings._estimates), which must give each width exactly what its definition gives.
    from localspec.timings import _estimates

    rng = np.random.default_rng(3)
    for _ in range(3000):
        ks = sorted(rng.choice(np.arange(1, 140), size=rng.integers(0, 8), replace=False).tolist())
        known = [(k, float(rng.uniform(0.001, 0.5))) for k in ks]
        lo = int(rng.integers(0, 60))
        hi = lo + int(rng.integers(0, 150))
        assert _estimates(known, lo, hi) == [_one_width(k, known) for k in range(lo, hi + 1)], (known, lo, hi)


def _tokens_one_by_one(accept, gamma_max, tokens_on=(), first_on=1.0):
    """E(γ) for γ = 0..gamma_max as the module docstring writes it, position by position."""
    totals, reach, total = [1.0], first_on, 1.0
    for i in range(gamma_max):
        a = accept[min(i, len(accept) - 1)] * (tokens_on[i - 1] if 0 < i <= len(tokens_on) else 1.0)
        reach *= a
        total += reach
        totals.append(total)
    return totals


def _seconds_one_by_one(gamma_max, draft_s, verify_s, overhead_s, draft_on=(), first_s=0.0, first_on=1.0):
    """S(γ) for γ = 0..gamma_max as the module docstring writes it, width by width."""
    total, reach, last = step_seconds(0, draft_s, verify_s, overhead_s), first_on, verify_s(1)
    totals = [total]
    total += first_s
    for n in range(1, gamma_max + 1):
        if 1 < n <= len(draft_on) + 1:
            reach *= draft_on[n - 2]
        cost = n * draft_s + verify_s(n + 1)
        total += reach * (cost - last)
        totals.append(total)
        last = cost
    return totals


def test_every_draft_length_priced_at_once_is_each_priced_one_by_one():
    # expected_tokens_upto and expected_seconds_upto price every γ up to a cap in one pass (127 widths
    # for copies), the latter reading the verify's seconds as one table (Widths.upto) or width by
    # width (any callable); each value must be the formula's, exactly: the same products and sums
    # in the same order.
    from localspec.timings import VerifyCurve, Widths

    rng = np.random.default_rng(11)
    for _ in range(2000):
        gamma_max = int(rng.choice([0, 1, 2, 3, 8, 16, 40, 127]))
        accept = rng.uniform(0, 1, int(rng.integers(1, 20))).tolist()
        on = [rng.uniform(0, 1, int(rng.integers(0, 20))).tolist() for _ in range(2)]
        first_on = float(rng.choice([1.0, rng.uniform(0, 1)]))
        assert expected_tokens_upto(accept, gamma_max, on[0], first_on) == \
            _tokens_one_by_one(accept, gamma_max, on[0], first_on)
        curve = VerifyCurve()
        for k in rng.choice(np.arange(1, 60), size=int(rng.integers(1, 6)), replace=False).tolist():
            curve.add(k, float(rng.uniform(0.001, 0.2)))
        verify = Widths(curve, int(rng.integers(0, 3)), float(rng.choice([0.0, rng.uniform(0, 0.01)])))
        args = (gamma_max, float(rng.uniform(0, 0.05)), verify, float(rng.uniform(0, 0.001)), on[1],
                float(rng.uniform(0, 0.05)), first_on)
        assert expected_seconds_upto(*args) == _seconds_one_by_one(*args)
        assert expected_seconds_upto(*args) == expected_seconds_upto(args[0], args[1], lambda k: verify(k), *args[3:])


def test_acceptance_is_recomputed_after_every_record():
    from localspec.tracker import CostTracker

    t = CostTracker()
    first = t.acceptance(3)
    t.record_acceptance(4, 4, bucket=3)
    second = t.acceptance(3)
    t.record_acceptance(4, 0, bucket=3)
    fresh = CostTracker()
    fresh.record_acceptance(4, 4, bucket=3)
    fresh.record_acceptance(4, 0, bucket=3)
    assert second != first and t.acceptance(3) != second and t.acceptance(3) == fresh.acceptance(3)


def test_a_stall_moves_an_average_as_a_few_times_its_value_and_a_lasting_rise_still_gets_through():
    # A plain step of 130 ms, then one stalled for 2.4 s (seen on a shared 2-core machine): taken
    # whole it moved the average by 224 ms; held to STALL_FACTOR times the average it moves it by 26.
    from localspec.timings import STALL_FACTOR

    e = Ema()
    for _ in range(10):
        e.add(0.130)
    e.add(2.4)
    assert e.value == pytest.approx(0.130 + 0.1 * (STALL_FACTOR - 1) * 0.130)
    rising = Ema()
    for _ in range(10):
        rising.add(0.1)
    for _ in range(15):  # the machine is now five times slower, for good
        rising.add(0.5)
    unheld = 0.5 - 0.4 * 0.9 ** 15  # the same average taking every sample whole
    assert 0.95 * unheld < rising.value < unheld


def test_a_decode_far_cheaper_than_its_average_starts_the_average_over():
    # A draft row measured at 1.34 s in a stalled stretch (22 ms unloaded): a stall only ever adds
    # time, so the first decode measured again at a third of the average or less replaces it, where
    # an Ema would hold the stretch's median for ten samples and take thirty more to come down.
    from localspec.timings import STALL_FACTOR, Seconds

    stalled, held = Seconds(), Ema()
    for e in (stalled, held):
        e.add(1.336, 6)
        e.add(0.022, 2)
    assert stalled.value == pytest.approx(0.022) and stalled.n == 2
    assert held.value == pytest.approx(1.336)
    noisy = Seconds()  # noise does not start it over: only a sample below a STALL_FACTOR-th does
    for x in (0.030, 0.020, 0.025, 0.011):
        noisy.add(x)
    assert noisy.n == 4 and noisy.value == pytest.approx(0.0225)
    noisy.add(0.0225 / STALL_FACTOR * 0.99)
    assert noisy.n == 1


def texts_of(*counts: tuple[int, int]) -> TextAcceptance:
    """Acceptance per text with these texts (judged, accepted) kept, none at hand."""
    t = TextAcceptance()
    for judged, accepted in counts:
        t.record(judged, accepted)
        t.begin()
    return t


def test_a_text_counts_among_the_texts_once_enough_of_it_was_judged():
    t = texts_of((TEXT_LEAST - 1, 3))
    assert t.texts == [] and t.judged == 0      # too little judged: not a text, and not carried on
    t = texts_of(*[(10, k % 10) for k in range(TEXTS_KEPT + 4)])
    assert len(t.texts) == TEXTS_KEPT and t.texts[0] == (10, 4) and t.texts[-1] == (10, 9)


def test_a_text_leans_on_the_mean_by_how_much_texts_differ():
    # Texts that differ no more than chance makes them: the text at hand is the mean's, however its
    # few drafts went; as they did in one process on prose, every text at 0.6.
    alike = texts_of((50, 30), (50, 30), (50, 30))
    alike.record(10, 10)
    assert alike.variance(alike.mean()) == 0.0 and alike.shift() == 0.0
    # Prose and code in turn: the text at hand's own counts weigh nearly as much as the mean.
    apart = texts_of((50, 25), (50, 45), (50, 22), (50, 44))
    apart.record(10, 9)
    mean = 145 / 210
    variance = apart.variance(mean)
    weight = mean * (1 - mean) / variance
    assert 1 < weight < 10
    assert apart.shift() == pytest.approx(logit((9 + weight * mean) / (10 + weight)) - logit(mean))
    assert apart.shift() > 0.5
    low = texts_of((50, 25), (50, 45), (50, 22), (50, 44))
    low.record(10, 2)
    assert low.shift() < -0.5
    # One text kept: how much texts differ is unknown, and the text at hand leans on the mean with
    # TEXT_PRIOR_ROWS pseudo-drafts.
    one = texts_of((20, 12))
    one.record(8, 8)
    assert one.variance(20 / 28) is None
    assert one.shift() == pytest.approx(logit((8 + TEXT_PRIOR_ROWS * 20 / 28) / (8 + TEXT_PRIOR_ROWS)) - logit(20 / 28))
    assert texts_of((50, 25), (50, 45)).shift() == 0.0  # none of the text at hand judged yet


def test_a_texts_shift_follows_its_counts_as_they_change():
    # shift() is asked at every step and kept until the counts change: a record or a new text
    # moves it at once.
    t = texts_of((50, 25), (50, 45), (50, 22), (50, 44))
    t.record(10, 9)
    high = t.shift()
    t.record(10, 0)
    fresh = texts_of((50, 25), (50, 45), (50, 22), (50, 44))
    fresh.record(20, 9)
    assert t.shift() == fresh.shift() < high
    t.begin()
    assert t.shift() == 0.0


def test_a_new_texts_outlook_spans_the_spread_between_texts():
    assert texts_of((50, 25)).outlook() is None        # one text: how far the next lies is unknown
    alike = texts_of((50, 30), (50, 30))
    assert [s for _, s in alike.outlook()] == [0.0, 0.0, 0.0]
    apart = texts_of((50, 25), (50, 45), (50, 22), (50, 44))
    points = apart.outlook()
    mean = 136 / 200
    sd = np.sqrt(apart.variance(mean)) / (mean * (1 - mean))
    assert [w for w, _ in points] == pytest.approx([1 / 6, 2 / 3, 1 / 6])
    assert [s for _, s in points] == pytest.approx([-np.sqrt(3) * sd, 0.0, np.sqrt(3) * sd])


def test_rates_shifted_in_log_odds_keep_0_and_1():
    assert shifted([0.0, 0.5, 0.8, 1.0], 0.0) == [0.0, 0.5, 0.8, 1.0]
    assert shifted([0.0, 0.5, 0.8, 1.0], np.log(3)) == pytest.approx([0.0, 0.75, 12 / 13, 1.0])
    assert shifted([0.5], -np.log(3)) == pytest.approx([0.25])


def test_the_texts_kept_and_the_one_at_hand_survive_a_save():
    t = texts_of((50, 25), (40, 36))
    t.record(TEXT_LEAST, 2)
    back = TextAcceptance.from_rows(t.to_rows())
    assert back.texts == [(50, 25), (40, 36), (TEXT_LEAST, 2)] and back.judged == 0
    short = texts_of((50, 25))
    short.record(TEXT_LEAST - 1, 2)
    assert TextAcceptance.from_rows(short.to_rows()).texts == [(50, 25)]


def test_a_curve_is_refitted_only_once_a_trusted_size_moves_past_the_tolerance(monkeypatch):
    # Every plain step adds a one-token verify; a curve refitted at each add made every pricing
    # after it rebuild its tables, about twice the time a pricing took otherwise. A trusted size
    # whose average moves less than MEMO_TOLERANCE keeps the fits (and reads as measured itself);
    # a larger move, a size not yet trusted, or a new size refits.
    from localspec import timings
    from localspec.timings import MEMO_TOLERANCE, TRUSTED_SAMPLES, VerifyCurve

    fits = []
    estimates = timings._estimates
    monkeypatch.setattr(timings, "_estimates", lambda *a: fits.append(a) or estimates(*a))
    curve = VerifyCurve()
    for k, seconds in ((1, 0.02), (4, 0.03), (16, 0.06)):
        for _ in range(TRUSTED_SAMPLES):
            curve.add(k, seconds)

    def price() -> float:  # what a pricing reads: every width up to a copy's cap
        return sum(curve.seconds(k) + curve.optimistic(k) + curve.next_width(k) for k in range(1, 100))

    price()
    built = len(fits)
    for step in range(20):  # plain steps a quarter of the tolerance apart, each followed by a pricing
        curve.add(1, 0.02 * (1 + MEMO_TOLERANCE / 4 * (step % 2)))
        price()
        assert curve.seconds(1) == curve.points[1].value  # the trusted size as measured
    assert len(fits) == built  # no refit: at 5fc7ec9, one per table at every pricing
    curve.add(1, 0.03)  # the plain step moved past the tolerance: refitted at the next pricing
    price()
    assert len(fits) > built and curve.seconds(2) == _one_width(2, curve.known())
    built = len(fits)
    curve.add(8, 0.04)  # a new size
    price()
    assert len(fits) > built and curve.seconds(8) == 0.04 and curve.seconds(6) == _one_width(6, curve.known())


def test_every_width_read_at_once_is_what_each_width_read_alone_gives():
    # Pricing reads every width up to a cap (127 for copies) in one list (Widths.upto); each value
    # must be what the same curve read width by width gives, in every mode, with a switch cost on
    # widths above one.
    from localspec.timings import TRUSTED_SAMPLES, VerifyCurve, Widths

    rng = np.random.default_rng(5)
    for _ in range(300):
        adds = [(k, float(rng.uniform(0.001, 0.2)))
                for k in sorted(rng.choice(np.arange(1, 60), size=rng.integers(1, 6), replace=False).tolist())
                for _ in range(int(rng.integers(1, TRUSTED_SAMPLES + 2)))]
        at_once, alone = VerifyCurve(), VerifyCurve()
        for k, seconds in adds:
            at_once.add(k, seconds)
            alone.add(k, seconds)
        for mode in (0, 1, 2):
            extra, k = float(rng.choice([0.0, rng.uniform(0.0, 0.01)])), int(rng.integers(1, 140))
            table = Widths(at_once, mode, extra).upto(k)
            each = Widths(alone, mode, extra)
            assert len(table) > k and table[1 : k + 1] == [each(w) for w in range(1, k + 1)]


def test_a_trusted_size_reads_as_measured_wherever_the_table_reaches_it():
    # A trusted size whose average moves within MEMO_TOLERANCE keeps the curve's fits (they are not
    # rebuilt at every plain step), yet reads as its new average, also where the table was filled
    # only after the move (from fits made before it).
    from localspec.timings import MEMO_TOLERANCE, TRUSTED_SAMPLES, VerifyCurve, Widths

    curve = VerifyCurve()
    for k, seconds in ((1, 0.02), (4, 0.03), (64, 0.09)):
        for _ in range(4 * TRUSTED_SAMPLES):  # past the first samples' median (Ema)
            curve.add(k, seconds)
    assert len(Widths(curve, 0).upto(8)) < 64  # fits made, the table short of 64
    curve.add(64, 0.09 * (1 + MEMO_TOLERANCE / 2))
    assert curve.points[64].value != 0.09
    assert Widths(curve, 0).upto(100)[64] == curve.points[64].value == curve.seconds(64)


def test_an_untrusted_size_far_above_what_the_others_put_it_is_hoped_at_their_value():
    # A copy's first wide verify stalled (79 ms where the H200's curve puts 70 rows at about 14):
    # the point estimate and a probe's loss (next_width, the budget's bound) keep it as measured;
    # the hope reads it as the other sizes put it, so that a probe may measure it again. A size
    # within OUTLIER_FACTOR of what they put it at is hoped as before.
    from localspec.timings import OUTLIER_FACTOR, TRUSTED_SAMPLES, VerifyCurve

    curve = VerifyCurve()
    for _ in range(TRUSTED_SAMPLES):
        curve.add(1, 0.00181)
        curve.add(6, 0.00555)
    for k, seconds in ((2, 0.0050), (3, 0.00525), (4, 0.0055), (5, 0.00553), (70, 0.0794)):
        curve.add(k, seconds)
    put = _one_width(70, [(k, t) for k, t in curve.known() if k != 70])  # along 1 -> 6 rows' slope
    assert 0.0794 > OUTLIER_FACTOR * put
    assert curve.optimistic(70) == pytest.approx(put) and curve.optimistic(90) == pytest.approx(put)
    assert curve.seconds(70) == pytest.approx(0.0794)
    assert curve.next_width(70) == pytest.approx(0.00555 * 70 / 6)  # no dearer a row than 6 rows, as before
    curve.add(70, 0.0136)
    curve.add(70, 0.0136)  # measured again: its median is trusted, and read as measured
    assert curve.seconds(70) == pytest.approx(0.0136) and curve.optimistic(70) == pytest.approx(0.0136)
    mild = VerifyCurve({1: 0.00181, 6: 0.00555})
    for _ in range(TRUSTED_SAMPLES - 1):
        mild.add(1, 0.00181)
        mild.add(6, 0.00555)
    mild.add(70, 1.1 * _one_width(70, mild.known()))  # not far above: hoped as measured, per row no dearer than 6 rows
    assert mild.optimistic(70) == pytest.approx(min(mild.seconds(70), 0.00555 * 70 / 6))


def test_a_draft_models_row_for_the_emitted_token_is_paid_by_every_drafting_step_once():
    # first_s: what a drafting step pays once besides its draft tokens (a draft model's decode of the
    # token the last verify emitted); plain decoding pays none of it.
    accept, on, draft_s, first_s = [0.8, 0.9, 0.6], [0.5, 0.7], 0.006, 0.009
    plain = expected_seconds_upto(5, draft_s, cpu_verify, 0.001, on)
    seconds = expected_seconds_upto(5, draft_s, cpu_verify, 0.001, on, first_s)
    assert seconds[0] == plain[0] == step_seconds(0, draft_s, cpu_verify, 0.001, first_s)
    for gamma in range(1, 6):
        assert seconds[gamma] == pytest.approx(plain[gamma] + first_s)
    assert step_seconds(3, draft_s, cpu_verify, 0.0, first_s) == pytest.approx(3 * draft_s + first_s + cpu_verify(4))
    # A one-token draft that pays at one decode's cost does not at two: the choice moves to plain.
    flat = lambda k: 0.1 + 0.01 * (k - 1)  # noqa: E731 (a verify whose width costs little)
    cheap = best_gamma([0.5] * 4, 0.02, flat, 0.0, 4)
    priced = best_gamma([0.5] * 4, 0.02, flat, 0.0, 4, first_s=0.02)
    assert cheap[0] >= 1 and priced[0] == 0


def test_a_step_whose_rule_may_decline_its_first_guess_is_priced_as_a_mix_with_a_plain_step():
    # first_on (u_0): a fixed p-min declines a first guess below it, after the draft's decode that made
    # it (first_s, paid either way); the step then verifies one row, as a plain step, and emits one.
    accept, draft_s, first_s, overhead, u0 = [0.8, 0.7, 0.9], 0.006, 0.005, 0.001, 0.4
    tokens = expected_tokens_upto(accept, 5, (), u0)
    seconds = expected_seconds_upto(5, draft_s, cpu_verify, overhead, (), first_s, u0)
    assert tokens[0] == 1.0 and seconds[0] == pytest.approx(cpu_verify(1) + overhead)
    for gamma in range(1, 6):
        assert tokens[gamma] == pytest.approx((1 - u0) * 1 + u0 * expected_tokens(accept, gamma))
        declined = cpu_verify(1) + overhead + first_s
        assert seconds[gamma] == pytest.approx(
            (1 - u0) * declined + u0 * step_seconds(gamma, draft_s, cpu_verify, overhead, first_s))


def test_first_looks_give_the_share_of_first_guesses_a_rule_keeps_and_their_acceptance():
    looks = FirstLooks()
    for c in [0.35] * 6 + [0.95] * 3 + [0.75]:
        looks.record(c)
    keep_sure = lambda c: c >= 0.7  # noqa: E731
    share, accept = looks.kept(keep_sure, lambda c: c)
    assert share == pytest.approx(0.4) and accept == pytest.approx((3 * 0.95 + 0.75) / 4)
    assert looks.kept(lambda c: False, lambda c: c) == (0.0, 0.0)
    few = FirstLooks()
    for _ in range(LOOKS_LEAST - 1):
        few.record(0.95)
    assert few.kept(keep_sure, lambda c: c) is None  # too few looks to tell a share
    with pytest.raises(ValueError):
        FirstLooks([1, 2])


def sure_and_unsure() -> CostTracker:
    """A draft at 0.13 of an F16 step a row: half its first guesses sure (0.95, taken 95%), half unsure
    (0.35, taken 30%), every one drafted (as a probe drafts it), and its 2-row verify measured enough
    to trust the stop rule."""
    t = CostTracker()
    for _ in range(3):
        t.record(0, 0, 0.0, 0.074, 0.0)
    rng = np.random.default_rng(1)
    for i in range(200):
        c = 0.95 if i % 2 else 0.35
        ok = rng.random() < (0.95 if i % 2 else 0.30)
        t.record(1, int(ok), 0.02, 0.121, 0.0, [c], rows=2, first_look=c)
    return t


def test_a_trusted_rule_prices_a_first_guess_by_the_looks_it_would_draft():
    # Pooled over every first guess drafted, a first guess is taken 62% of the time, and a one-guess
    # step (2 rows at 0.0096 s, a 0.121 s verify) loses to plain decoding (0.074 s a token). The
    # rule declines the unsure half: those steps are plain steps with a look, and the sure half's
    # guesses are taken 95% of the time.
    t = sure_and_unsure()
    pooled = t.acceptance()[0]
    assert pooled == pytest.approx(0.62, abs=0.06)
    est = t.estimate()
    assert est.first_on == pytest.approx(0.5) and est.accept[0] == pytest.approx(0.95, abs=0.03)
    assert t.estimate(probe=True).accept[0] == pytest.approx(pooled)  # a probe drafts every first guess
    assert t.estimate(optimistic=True).first_on != pytest.approx(0.5)
    # not yet trusted (a 2-row verify measured twice): every first guess is drafted, pooled
    fresh = CostTracker()
    fresh.record(0, 0, 0.0, 0.074, 0.0)
    for c in (0.95, 0.35):
        fresh.record(1, 1, 0.02, 0.121, 0.0, [c], rows=2, first_look=c)
    assert fresh.estimate().accept[0] == pytest.approx(fresh.acceptance()[0])


def tiled_step(accept: float, n: int) -> tuple[list[float], list[float]]:
    """(E(γ), S(γ)) for γ in 0..n: each guess taken at `accept`, a verify of γ + 1 rows on the light
    target's tiled curve on the 2-core EPYC (plannersim.EPYC_TILED)."""
    verify = curve(EPYC_TILED)
    return expected_tokens_upto([accept], n), [verify(g + 1) for g in range(n + 1)]


def test_a_copys_end_is_drafted_whole_where_a_step_alone_would_leave_a_stub():
    # The copy set's replies end inside a copy (160 tokens): 86 guesses left, each taken at 0.995.
    # Priced a step alone, 63 guesses (64 rows) verify cheapest a token, and the 22 left after them
    # then pay a verify of their own (23 rows at half the first's time): drafting the 86 whole is
    # the faster way to the end.
    tokens, seconds = tiled_step(0.995, 86)
    gamma, _ = fastest(tokens, seconds)
    assert gamma == 63 and covering(tokens, seconds, gamma) == 86
    go_on = tokens[gamma + 1] - tokens[gamma]  # the chance the first step's guesses and the next are taken
    rest_t, rest_s = tiled_step(0.995, 86 - gamma - 1)
    split = (tokens[gamma] + go_on * rest_t[-1]) / (seconds[gamma] + go_on * rest_s[-1])
    assert tokens[86] / seconds[86] > split


def test_a_copy_that_breaks_early_keeps_the_fastest_step_at_its_end():
    # Guesses taken at 0.9: a draft seldom reaches its 20th guess, and the fastest step stands (as it
    # does where it already drafts the whole offer, or nothing)
    tokens, seconds = tiled_step(0.9, 86)
    gamma, _ = fastest(tokens, seconds)
    assert 0 < gamma < 86 and covering(tokens, seconds, gamma) == gamma
    assert covering(tokens, seconds, 0) == 0 and covering(tokens[:40], seconds[:40], 39) == 39
