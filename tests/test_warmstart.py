"""Warm start: the planner's measurements outlive the process, keyed by what they depend on."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fakes import fake_contexts
from localspec import warmstart
from localspec.config import GenerationConfig
from localspec.drafters import NGramDrafter, Proposal
from localspec.planner import PLAIN_SAMPLES, Planner
from localspec.tracker import CostTracker
from localspec.sampling import SamplingParams
from localspec.session import LoadOptions, Pair, Reply
from localspec.trackerfile import CONFIRM_STEPS
from plannersim import CPU_F16

GREEDY = SamplingParams(temperature=0)


def measured() -> CostTracker:
    t = CostTracker()
    t.record(0, 0, 0.0, 0.10, 0.001)
    for _ in range(300):  # drafts a stop rule ended at 4 of 6
        t.record(4, 2, 0.04, 0.15, 0.001, [0.95, 0.9, 0.4, 0.3], cap=6)
    return t


def test_a_tracker_round_trips_with_its_counts_capped():
    t = measured()
    back = CostTracker.from_dict(json.loads(json.dumps(t.to_dict())), max_count=64)
    assert 1 not in back.verify and back.plan(8) == (0, 0.0)  # the plain step is measured afresh first
    back.record(0, 0, 0.0, 0.10, 0.001)
    for k in range(1, 10):
        assert back.verify_seconds(k) == pytest.approx(t.verify_seconds(k))
    assert back.draft_s.value == pytest.approx(t.draft_s.value) and back.rate() == pytest.approx(t.rate())
    assert back.draft_s.n == 1  # a saved average weighs as one sample: this run's own soon replace it
    assert back.acceptance() == pytest.approx(t.acceptance(), abs=0.03)  # the rates survive the scaling
    assert max(back.positions.drafted) == 64 < max(t.positions.drafted)  # ... the weight does not
    (g1, tps1), (g2, tps2) = back.plan(8), t.plan(8)
    assert g1 == g2 and tps1 == pytest.approx(tps2, rel=0.03)  # the prior weighs a little more
    assert sum(back.conf_judged) <= 64 * 10
    for mine, theirs in zip(back.stops.rates(2.0), t.stops.rates(2.0)):  # where the drafts stopped
        assert mine == pytest.approx(theirs, abs=0.03)
    assert max(back.stops.could) == 64


def test_the_steps_a_tracker_has_seen_are_saved_scaled_as_its_counts_are():
    # The optimistic estimate's rounds (CostTracker.steps) keep their ratio to the guesses judged: a
    # draft whose two probes were rejected keeps every step it has seen, so its hope grows across
    # processes as within one; a well-measured one loads them scaled down with its counts.
    few = CostTracker()
    few.record(1, 0, 0.01, 0.12, 0.0)
    few.record(1, 0, 0.01, 0.12, 0.0)
    for _ in range(500):
        few.record(0, 0, 0.0, 0.08, 0.0)
    back = CostTracker.from_dict(json.loads(json.dumps(few.to_dict())))
    assert few.steps == 502 and back.steps == 502
    assert back.optimistic_acceptance() == pytest.approx(few.optimistic_acceptance())
    many = measured()
    back = CostTracker.from_dict(json.loads(json.dumps(many.to_dict())), max_count=64)
    assert back.steps == round(many.steps * 64 / max(many.positions.drafted))
    data = many.to_dict()
    del data["steps"]  # files from before: none kept
    assert CostTracker.from_dict(data).steps == 0


def test_a_draft_models_cost_per_row_is_saved_as_such_and_older_files_load_per_token():
    # A draft model's cost is kept per row it decoded, and its steps priced a row more (Estimate.first_s);
    # a file from before holds a mean per token, that row in: read as a row, a step would pay it twice.
    t = CostTracker()
    t.record(0, 0, 0.0, 0.10, 0.001)
    for _ in range(CONFIRM_STEPS + 1):
        t.record(4, 2, 0.05, 0.15, 0.001, rows=5)
    data = json.loads(json.dumps(t.to_dict()))
    back = CostTracker.from_dict(data)
    back.record(0, 0, 0.0, 0.10, 0.001)
    assert back.first_row and back.estimate().first_s == pytest.approx(0.01) == back.draft_s.value
    old = CostTracker.from_dict({k: v for k, v in data.items() if k != "first_row"})
    old.record(0, 0, 0.0, 0.10, 0.001)
    assert not old.first_row and old.estimate().first_s == 0.0


def test_first_guesses_a_stop_rule_declined_are_saved_and_older_files_load_with_none():
    t = measured()
    for _ in range(100):
        t.record(0, 0, 0.02, 0.10, 0.001, cap=6, rows=1)
    data = json.loads(json.dumps(t.to_dict()))
    back = CostTracker.from_dict(data, max_count=64)
    assert (back.stops.asked, back.stops.declined) == (64, 16)  # 400 judged, 100 declined, scaled
    assert back.stops.first_on(2.0) == pytest.approx(t.stops.first_on(2.0), abs=0.01)
    old = CostTracker.from_dict({k: v for k, v in data.items() if k != "first_stops"})
    assert old.stops.asked == old.stops.declined == 0 and old.stops.first_on(2.0) == 1.0
    with pytest.raises(ValueError):
        CostTracker.from_dict(dict(data, first_stops=[3, 5]))


def test_first_looks_are_saved_and_older_files_load_with_none():
    t = measured()
    for c in [0.95] * 90 + [0.35] * 30:
        t.record(0, 0, 0.02, 0.10, 0.001, cap=6, rows=1, first_look=c)
    data = json.loads(json.dumps(t.to_dict()))
    back = CostTracker.from_dict(data, max_count=64)
    assert back.looks.counts[9] == 64 and back.looks.counts[3] == 21  # 90 and 30, scaled together
    old = CostTracker.from_dict({k: v for k, v in data.items() if k != "first_looks"})
    assert sum(old.looks.counts) == 0
    with pytest.raises(ValueError):
        CostTracker.from_dict(dict(data, first_looks=[1, 2, 3]))


def reply(pair: Pair) -> Reply:
    prompt = pair.target_model.tokenize("red, blue, green, red, blue, green, red,", True)
    *_, last = pair.stream(prompt, GenerationConfig(24, None, GREEDY))
    return last


def fresh_pair(**options) -> Pair:
    """A new Pair over the same (fake) files, as a new process would load them."""
    target, draft = fake_contexts(reply_len=None)
    return Pair.from_contexts(target, draft, LoadOptions(**options))


def test_the_next_process_plans_from_the_saved_measurements():
    first = fresh_pair(threads=2)
    assert not first.warm and reply(first).stats.warm_start is False
    second = fresh_pair(threads=2)
    assert second.warm
    for key, tracker in first.trackers.items():
        # a drafter judged by fewer proposals is learnt afresh (test_a_draft_judged_by_one_guess_...);
        # how many the fake reply drafts follows live timings (a saved draft cost's round trip:
        # test_a_tracker_round_trips_with_its_counts_capped)
        carried = tracker.draft_s.value if tracker.proposals >= CONFIRM_STEPS else None
        assert second.trackers[key].draft_s.value == pytest.approx(carried)
        saved = {k: v for k, v in tracker.verify.known() if k != 1}  # the plain step: measured afresh
        assert dict(second.trackers[key].verify.known()) == pytest.approx(saved)
    stats = reply(second).stats
    assert stats.warm_start is True and stats.to_dict()["warm_start"] is True
    assert "warm start" in stats.summary()


def test_foreign_or_broken_plans_are_ignored(monkeypatch):
    reply(fresh_pair(threads=2))
    assert not fresh_pair(threads=1).warm            # other threads: another key
    path = warmstart.plan_path(fresh_pair(threads=2).plan_key)
    path.write_text("{not json")
    broken = fresh_pair(threads=2)
    assert not broken.warm
    reply(broken)                                    # the next save replaces it
    assert fresh_pair(threads=2).warm
    data = json.loads(path.read_text())
    data["key"]["build"] = "another llama.cpp"       # a file that claims another build
    path.write_text(json.dumps(data))
    assert not fresh_pair(threads=2).warm


@pytest.mark.parametrize("field, value", [("draft_s", [float("nan"), 1]), ("draft_s", [float("inf"), 1]),
                                          ("draft_s", [-1.0, 1]), ("overhead_s", [-0.5, 3]), ("idle_s", float("nan")),
                                          ("positions", [[3, 3], [3, -2], [1, 1]]), ("verify", {"0": [0.1, 2]}),
                                          ("steps", -1), ("out_s", -3.0), ("draft_pace", float("nan"))])
def test_a_plan_holding_values_no_measurement_can_have_is_ignored_and_replaced(field, value):
    # A NaN draft cost kept the draft model out of every later process and was written back each time;
    # negative costs were planned from.
    reply(fresh_pair(threads=2))
    path = warmstart.plan_path(fresh_pair(threads=2).plan_key)
    data = json.loads(path.read_text())
    for saved in data["trackers"].values():
        saved[field] = value
    path.write_text(json.dumps(data))
    damaged = fresh_pair(threads=2)
    assert not damaged.warm
    reply(damaged)  # the next save replaces it
    assert fresh_pair(threads=2).warm
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()


def test_warm_start_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("LOCALSPEC_WARM_START", "0")
    pair = fresh_pair()
    reply(pair)
    assert pair.plan_key is None and not fresh_pair().warm
    monkeypatch.delenv("LOCALSPEC_WARM_START")
    assert not fresh_pair(warm_start=False).warm and fresh_pair(warm_start=False).plan_key is None


def test_files_from_before_match_length_buckets_load_and_broken_buckets_are_ignored(monkeypatch):
    t = measured()
    t.record(6, 6, 0.0, 0.2, 0.001, bucket=5)
    data = t.to_dict()
    assert CostTracker.from_dict(data).buckets[5].accepted == [1] * 6     # round trip
    old = {k: v for k, v in data.items() if k != "buckets"}               # a file saved before buckets
    back = CostTracker.from_dict(old)
    assert back.buckets == {} and back.plan(8) == CostTracker.from_dict(data).plan(8)
    key = fresh_pair(threads=2).plan_key
    warmstart.save(key, {("ngram", True): t})
    path = warmstart.plan_path(key)
    saved = json.loads(path.read_text())
    saved["trackers"]["ngram/greedy"]["buckets"] = {"5": [[1, 2], [1]]}   # rows of unequal length
    path.write_text(json.dumps(saved))
    assert warmstart.load(key) == {}
    saved["trackers"]["ngram/greedy"]["buckets"] = "nonsense"
    path.write_text(json.dumps(saved))
    assert warmstart.load(key) == {}


def test_the_acceptance_per_text_is_saved_and_older_files_load_without_it():
    # How much texts differ (prose and code in turn, or prose alone) is what the next process's
    # intakes and estimates lean on: it is kept with the counts; files from before it load with none.
    t = measured()
    t.texts.begin()
    t.record(4, 4, 0.04, 0.15, 0.001, [0.95] * 4, cap=6)
    t.record(4, 4, 0.04, 0.15, 0.001, [0.95] * 4, cap=6)
    data = json.loads(json.dumps(t.to_dict()))
    back = CostTracker.from_dict(data)
    assert back.texts.texts == [(900, 600), (8, 8)] and back.texts.judged == 0
    old = {k: v for k, v in data.items() if k != "texts"}
    assert CostTracker.from_dict(old).texts.texts == []
    broken = dict(data, texts=[[900, 8], [600]])
    with pytest.raises(ValueError):
        CostTracker.from_dict(broken)


def test_stale_saved_costs_are_explored_under_the_budget_not_exploited():
    # Saved: a cheap draft that pays. Now the draft costs ten times more and never pays. Taken as
    # known, the saved numbers would draft; loaded, drafting on them is exploration (under the
    # budget) until this process's own steps confirm them, and after at most two expensive steps
    # the planner decodes plain.
    tokens = list(range(100, 140)) * 3

    def planner_over(tracker):
        planner = Planner([(NGramDrafter(), tracker)], GenerationConfig(max_tokens=500))
        for _ in range(PLAIN_SAMPLES):
            plain = planner.plan(tokens, 400)
            assert plain.source is None                   # the plain step is measured afresh first
            planner.record(plain, Proposal([], []), 0, 0.0, 0.10, 0.001)
        return planner

    saved = json.loads(json.dumps(measured().to_dict()))
    trusted = CostTracker.from_dict(saved)
    trusted.loaded = False
    assert planner_over(trusted).plan(tokens, 400).source == 0   # as known: it would draft
    loaded = CostTracker.from_dict(saved)
    planner, steps = planner_over(loaded), 0
    while (plan := planner.plan(tokens, 400)).source is not None and steps < 20:
        assert not loaded.confirmed() and planner._explored is not None  # drafting here is exploring
        planner.record(plan, Proposal([0] * plan.gamma, []), plan.gamma, 0.1 * plan.gamma, 0.15, 0.001)
        steps += 1
    assert steps <= 2 and planner.plan(tokens, 400).source is None


# --- a draft that the saved measurements say does not pay is not loaded -------------------------

def not_paying() -> CostTracker:
    """Measurements of a draft that costs most of a target step and is seldom accepted."""
    t = CostTracker()
    t.record(0, 0, 0.0, 0.10, 0.001)
    for _ in range(50):
        t.record(4, 0, 4 * 0.08, 0.16, 0.001, [0.9, 0.8, 0.7, 0.6])
    return t


class CountingLoads:
    """A draft held as Pair holds it (context.LazyContext), counting its loads."""

    def __init__(self):
        self.loads = 0

    def lazy(self):
        from fakes import FakeContext, FakeModel

        from localspec.context import LazyContext

        def load():
            self.loads += 1
            return FakeContext(FakeModel("fake-draft.gguf", noise=0.3), 512)
        return LazyContext(load, 512, FakeModel("fake-draft.gguf").path)


def lazy_pair(draft: CountingLoads) -> Pair:
    target, _ = fake_contexts(reply_len=None, draft=False)
    return Pair.from_contexts(target, draft.lazy(), LoadOptions(threads=2))


def test_saved_measurements_judge_whether_a_draft_is_worth_loading():
    def saved(t):
        return CostTracker.from_dict(json.loads(json.dumps(t.to_dict())))
    assert CostTracker().may_pay(8)                 # nothing known: load it, as llama.cpp does
    assert saved(measured()).may_pay(8)             # saved, and it pays
    assert not saved(not_paying()).may_pay(8)       # saved, and it does not: before any step here
    assert not_paying().could_pay(8) is False and not_paying().may_pay(8) is False


def test_a_saved_draft_that_pays_is_judged_by_the_acceptance_the_planner_prices_it_by():
    # The F16 target and 0.5B draft as measured on a 2-core EPYC (README): a verify of 2 rows costs 1.6
    # plain steps, of 7 rows 2.5; a draft token a third of a plain step. Drafts of 1 to 6 tokens, 95%
    # of each position accepted: the planner's point estimate gives well over 1.3x plain. Saved, the
    # counts are capped at 8 a position; pooled and smoothed towards acceptance 0 they read 0.76, and
    # no γ pays by them: a next process judged by them would not load a draft that pays.
    verify = CPU_F16
    t = CostTracker()
    for _ in range(3):
        t.record(0, 0, 0.0, verify[1], 0.0003)
    rng = np.random.default_rng(0)
    for i in range(120):
        n, draws = 1 + i % 6, rng.random(6) < 0.95
        accepted = n if draws[:n].all() else int(np.argmin(draws[:n]))
        t.record(n, accepted, n * 0.024, verify[n + 1], 0.0003, [0.97] * n)
    assert t.plan(8, 0)[0] > 0 and t.plan(8, 0)[1] * t.plain_seconds() > 1.3
    saved = CostTracker.from_dict(json.loads(json.dumps(t.to_dict())))
    assert saved.estimate(None, curve=saved.saved_verify).best(8, saved.min_gain)[0] == 0  # the pooled reading
    assert saved.may_pay(8)


def test_a_draft_judged_by_one_guess_is_learnt_afresh_by_the_next_process():
    # The F16 target's costs on the EPYC at its fast plain step: a 1-token draft never pays here. One
    # drafting step, its one guess rejected: by that guess no draft of any length looks worth a try
    # (position 1 at most 0.63 accepted). Saved so, the draft would stay out of every later process.
    def saved(t):
        return CostTracker.from_dict(json.loads(json.dumps(t.to_dict())))
    t = CostTracker()
    for _ in range(PLAIN_SAMPLES):
        t.record(0, 0, 0.0, CPU_F16[1], 0.0)
    t.record(1, 0, 0.024, CPU_F16[2], 0.0, [0.9])
    hope = t.estimate(optimistic=True)  # (its draft cost as measured: one step's may be a stall's)
    assert not hope._replace(draft_s=t.draft_s.value).best(8, t.min_gain)[0]
    nxt = saved(t)
    assert nxt.may_pay(8) and nxt.optimistic_acceptance() == [1.0]   # the draft learnt afresh ...
    assert nxt.draft_s.value is None and 2 in nxt.verify              # ... the target's costs kept
    older = t.to_dict()
    del older["proposals"]                                            # a file from before the count
    assert not CostTracker.from_dict(older).may_pay(8)
    # The next process's one guess is rejected too: two proposals over two processes keep it out.
    for _ in range(PLAIN_SAMPLES):
        nxt.record(0, 0, 0.0, CPU_F16[1], 0.0)
    nxt.record(1, 0, 0.024, CPU_F16[2], 0.0, [0.9])
    third = saved(nxt)
    assert third.proposals == 2 and third.positions.judged == [1] and not third.may_pay(8)


def test_a_draft_whose_cost_alone_rules_it_out_is_not_loaded_again_after_one_guess():
    # The light pair on the 2-core EPYC, traced: a plain step of 31 ms, a 2-row verify of 54, a draft
    # token of 27. Its one guess accepted, it is learnt afresh (above), yet at that cost no acceptance
    # could make it pay: every process loaded and prefilled it again (about 0.9 s) for a second look.
    def saved(t):
        return CostTracker.from_dict(json.loads(json.dumps(t.to_dict())))

    def one_guess(draft_s: float) -> CostTracker:
        t = CostTracker()
        for _ in range(PLAIN_SAMPLES):
            t.record(0, 0, 0.0, 0.031, 0.0)
        t.record(1, 1, draft_s, 0.054, 0.0, [0.9])
        return t
    dear = saved(one_guess(0.027))
    assert dear.draft_s.value is None and dear.optimistic_acceptance() == [1.0]  # learnt afresh ...
    assert not dear.may_pay(8)                                                 # ... but not loaded
    for _ in range(PLAIN_SAMPLES):  # a process that did not load it decodes plain ...
        dear.record(0, 0, 0.0, 0.032, 0.0)
    assert not saved(dear).may_pay(8)  # ... and saves the draft's cost as it found it
    assert saved(one_guess(0.004)).may_pay(8)  # a cheap draft could pay: loaded for its second look
    cold = CountingLoads()
    first = lazy_pair(cold)
    warmstart.save(first.plan_key, {("model", True): one_guess(0.027)})
    warm = CountingLoads()
    assert lazy_pair(warm).draft_model is None and warm.loads == 0


def test_a_draft_that_does_not_pay_here_is_never_loaded_by_the_next_process():
    cold = CountingLoads()
    first = lazy_pair(cold)
    assert cold.loads == 1 and not first.warm                 # nothing saved: loaded at once
    warmstart.save(first.plan_key, {("model", True): not_paying()})
    warm = CountingLoads()
    second = lazy_pair(warm)
    assert second.warm and warm.loads == 0 and second.draft_model is None
    assert second.draft_path.name == "fake-draft.gguf" and second.placement["draft"] == "CPU"
    out = reply(second)
    assert warm.loads == 0 and out.stats.draft_loaded is False and out.reused_draft == 0
    assert "draft model not loaded" in out.stats.summary() and out.stats.to_dict()["draft_loaded"] is False
    target_only, _ = fake_contexts(reply_len=None, draft=False)
    assert out.text == reply(Pair.from_contexts(target_only, None, LoadOptions(threads=2))).text
    warmstart.save(first.plan_key, {("model", True): measured()})  # saved as paying: loaded at once
    paying = CountingLoads()
    lazy_pair(paying)
    assert paying.loads == 1


def test_a_deferred_draft_loads_when_first_asked_and_its_load_is_priced_not_counted_as_drafting():
    import time

    from fakes import FakeContext, FakeModel

    from localspec.context import LazyContext
    from localspec.drafters import ModelDrafter

    def slow_load():
        time.sleep(0.2)
        return FakeContext(FakeModel("fake-draft.gguf", noise=0.3), 512)
    lazy = LazyContext(slow_load, 512)
    assert not lazy.loaded and lazy.tokens == [] and lazy.n_ctx == 512 and not lazy.rows_offloaded
    lazy_tracker = CostTracker()
    lazy_tracker.load_s.add(0.2)
    drafter = ModelDrafter(lazy, GREEDY)
    planner = Planner([(drafter, lazy_tracker)], GenerationConfig(max_tokens=64, gamma=None))
    context = [5, 6, 7, 8]
    planner.plan(context, 8)
    assert planner._catch_up_s(0) >= 0.2  # a first step pays the load
    proposal = drafter.propose(context, 2, None)
    assert lazy.loaded and lazy.load_s >= 0.2 and len(proposal.ids) == 2
    planner.record(planner._plan(planner._offers(context, 2)[0]), proposal, 1, 0.25, 0.01, 0.0)
    assert lazy_tracker.draft_s.value < 0.05 and lazy_tracker.load_s.n == 2  # the load is not a draft cost
    assert planner._catch_up_s(0) < 0.2             # loaded: no load to price
    lazy.close()
    prefilled, tracker = ModelDrafter(LazyContext(slow_load, 512), GREEDY), CostTracker()
    prefilled.prefill(context)   # a load made by a prefill: kept apart from the prefill's seconds
    Planner([(prefilled, tracker)], GenerationConfig(max_tokens=64)).note_prefill(0)
    assert tracker.load_s.value >= 0.2 and tracker.prefill_s.value < 0.05
    assert tracker.entry_s() == pytest.approx(tracker.load_s.value + tracker.prefill_s.value)


def test_a_deferred_draft_is_tried_again_once_the_time_spent_without_it_pays_for_the_try():
    from localspec.planning.budget import EXPLORE_FRACTION, worth_preparing

    poor = not_paying()
    poor.load_s.add(0.3)
    poor.prefill_s.add(0.2)
    assert poor.entry_s() == pytest.approx(0.5) and not worth_preparing(poor, 8)
    poor.idle_s = 0.99 * 0.5 / EXPLORE_FRACTION
    assert not worth_preparing(poor, 8)
    poor.idle_s = 0.5 / EXPLORE_FRACTION
    assert worth_preparing(poor, 8)        # ε of the idle time covers a load and a prefill

    first = lazy_pair(CountingLoads())
    poor.idle_s = 0.0
    warmstart.save(first.plan_key, {("model", True): poor})
    draft = CountingLoads()
    deferred = lazy_pair(draft)
    out = reply(deferred)
    assert draft.loads == 0 and out.stats.draft_loaded is False
    spent = out.stats.prefill_s + out.stats.total_s
    assert deferred.trackers[("model", True)].idle_s == pytest.approx(spent)  # saved with the plan
    assert warmstart.load(first.plan_key)[("model", True)].idle_s == pytest.approx(spent)
    poor.idle_s = 0.5 / EXPLORE_FRACTION
    warmstart.save(first.plan_key, {("model", True): poor})
    again = CountingLoads()
    retried = lazy_pair(again)
    assert again.loads == 1                 # tried again: loaded, and the prompt taken in
    reply(retried)
    assert retried.trackers[("model", True)].idle_s == 0.0


def test_what_pricing_takes_is_saved_so_a_new_processs_first_losing_pricing_rests_at_once():
    # What pricing a drafter takes is the controller's own cost on this machine: saved with the
    # rest, a new process rests a choice at its first losing pricing instead of pricing it twice
    # first, which at a GPU's pace is a share of a short process. Older files load without it.
    from test_planner import Named, PricingClock, measured as never_pays, run_plain
    from localspec.planning.probes import PRICE_FRACTION
    tracker, counts = never_pays(0.5, 0.2), []
    for _ in range(2):  # two processes: the second starts from what the first saved
        planner = Planner([(Named("model"), tracker)], GenerationConfig(gamma=None, sampling=GREEDY))
        planner.clock = PricingClock(100 * PRICE_FRACTION * 0.2)  # rests of about 100 plain steps
        run_plain(planner, 30)
        counts.append(planner.clock.reads // 4)
        data = json.loads(json.dumps(tracker.to_dict()))
        tracker = CostTracker.from_dict(data)
    assert counts == [2, 1] and len(data["pricings"]) == 3
    assert CostTracker.from_dict({k: v for k, v in data.items() if k != "pricings"}).pricings == []
    with pytest.raises(ValueError):
        CostTracker.from_dict(dict(data, pricings=[0.001, -1.0]))


def stalled() -> CostTracker:
    """A draft measured once in a stretch that stalled the whole machine (a draft row at 3.2 s beside a
    plain step at 3.2 s, its prompt's intake at 2.4 s), the stretch then over (plain steps at 0.2 s)
    and 30 s spent without the draft since (test_planner has the stretch this was seen in)."""
    t = CostTracker()
    for _ in range(10):
        t.record(0, 0, 0.0, 3.2, 0.0)
    t.load_s.add(0.5)
    t.prefill_s.add(2.4)
    t.record(1, 0, draft_s=6.4, verify_s=6.4, overhead_s=0.0, confidences=(0.5,), cap=8, rows=2, first_look=0.5)
    for _ in range(40):
        t.record(0, 0, 0.0, 0.2, 0.0)
    t.idle_s, t.out_s, t.remeasure_loss = 30.0, 30.0, 0.4
    return t


def test_a_draft_a_stalled_stretch_measured_is_made_ready_again_by_the_next_process_at_the_pace_now():
    # A process whose draft was measured in a stretch that stalled every decode ended before it drafted
    # again: it saved a draft row 16 times a plain step. The next process's plain step is not measured
    # before it decides whether to load the draft; read at the pace the saved plain step shows against
    # the one when the draft was measured, the retry ε of the 30 s covers is due at once, as it would
    # have been in the first process. Saved without that pace (older files: read beside the plain step
    # saved, from after the stretch), the retry waits for ten times as many seconds.
    from localspec.planning.budget import pace, worth_preparing
    data = json.loads(json.dumps(stalled().to_dict()))
    back = CostTracker.from_dict(data)
    assert (back.draft_pace, back.out_s, back.remeasure_loss) == (pytest.approx(3.2), 30.0, 0.4)
    assert 1 not in back.verify and pace(back) < 0.1 and worth_preparing(back, 8)
    # an older file: its draft read as measured beside the plain step saved with it, here the stretch's end
    old = CostTracker.from_dict({k: v for k, v in data.items() if k not in ("draft_pace", "out_s", "remeasure_loss")})
    assert (old.draft_pace, old.out_s, old.remeasure_loss) == (old.saved_verify.seconds(1), 0.0, 0.0)
    assert pace(old) == 1.0 and not worth_preparing(old, 8)

    first = lazy_pair(CountingLoads())
    warmstart.save(first.plan_key, {("model", True): stalled()})
    path = warmstart.plan_path(first.plan_key)
    for older in (False, True):
        if older:
            plan = json.loads(path.read_text())
            del plan["trackers"]["model/greedy"]["draft_pace"]
            path.write_text(json.dumps(plan))
        draft = CountingLoads()
        lazy_pair(draft)
        assert draft.loads == (0 if older else 1)
