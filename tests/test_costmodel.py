"""The cost model's choice of γ on synthetic costs and acceptance (pure, no models)."""

from __future__ import annotations

import pytest

from localspec.costmodel import CostTracker, best_gamma, expected_tokens

# Target verify time for a batch of k tokens on the 2-core CPU (ANCHORS.md, Python probe), in ms.
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


def plain_steps(t: CostTracker, n: int, verify_s: float) -> list[int]:
    """Record n plain-decoding steps; the choice of gamma after each."""
    choices = []
    for _ in range(n):
        t.record(0, 0, draft_s=0.0, verify_s=verify_s, overhead_s=0.001)
        choices.append(t.choose(8))
    return choices


def test_tracker_stops_probing_where_costs_rule_speculation_out():
    # The CPU light pair: even at 95% acceptance, drafting at 0.62x with this verify curve loses.
    t = CostTracker(gamma_max=8, probe_gamma=3, probe_every=5)
    assert t.choose(8) == 3                          # nothing measured: probe
    t.record(3, 3, draft_s=3 * 0.017, verify_s=0.0735, overhead_s=0.001)
    assert t.choose(8) == 0                          # verify of 1 not measured yet: measure it
    assert plain_steps(t, 200, 0.0276) == [0] * 200  # never probes again: no acceptance could pay
    assert not t.could_pay()


def test_tracker_backs_off_when_low_acceptance_is_the_reason():
    # A cheap draft and flat verify could pay, but this draft is never accepted: re-probe, ever more rarely.
    t = CostTracker(gamma_max=8, probe_gamma=3, probe_every=5, prior_weight=0.5)
    for _ in range(10):
        t.record(3, 0, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.001)
    assert plain_steps(t, 5, 0.010) == [0, 0, 0, 0, 3]        # after 5 plain steps, look again
    assert t.could_pay()
    t.record(3, 0, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.001)
    assert plain_steps(t, 10, 0.010) == [0] * 9 + [3]         # nothing changed: the wait doubles
    assert CostTracker(probe_gamma=3).choose(2) == 2           # a probe never drafts beyond the cap
    assert CostTracker().choose(0) == 0


def test_tracker_switches_on_when_drafting_pays():
    t = CostTracker(gamma_max=8)
    t.record(3, 3, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    t.record(0, 0, draft_s=0.0, verify_s=0.010, overhead_s=0.0)
    for _ in range(20):
        t.record(3, 3, draft_s=3 * 0.001, verify_s=0.0105, overhead_s=0.0)
    assert t.choose(8) >= 3


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
