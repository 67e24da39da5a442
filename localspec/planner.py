"""The planner: the ONLY place that decides, before each step, who drafts, how many tokens (γ), and
where a model draft may stop within them (the stop rule: a fixed p-min, or p-min auto from costs).

It reads live measurements (CostTracker, tracker.py: verify cost per batch size, draft cost,
acceptance per position, per n-gram match length and per draft confidence) and the pure formulas of
costmodel.py. The controller asks it once per step and reports back what the step measured. What it
does not know yet it explores, within a stated budget (ExploreBudget): at most EXPLORE_FRACTION of a
generation's time per drafter, counting a generation as at least GRACE_STEPS plain steps long.
The n-gram lookup's acceptance is also learnt along the steps it does not draft, at no cost
(Planner._shadow_step).

Planner is one class in several files: this one plans a step and prices the known choice; its parts
are in planning/ (plans: Plan and Choice; budget: ExploreBudget; probes: pricing a probe, and the
rests of the sources that lost; record: learning from what a step measured; handoff: the hybrid's
Handoff within a model draft; baseline: measuring the plain step again).
"""

from __future__ import annotations

import math
import time
from typing import Sequence

from .acceptance import SURE_SHIFT
from .config import GenerationConfig
from .costmodel import Prediction, ngram_bucket, step_seconds
from .draftstop import FALLBACK_P_MIN, FixedStop
from .drafters import STEP_DECODE, Drafter, StopRule
from .planning.baseline import PLAIN_SAMPLES, Baseline
from .planning.budget import GRACE_STEPS, Exploration, ExploreBudget, retry_due, worth_preparing
from .planning.handoff import Handoff
from .planning.plans import PLAIN, Choice, Plan, cap_of
from .planning.probes import Lost, Probes, Resting
from .planning.record import Recording, Shadow
from .lookupruns import LookupRuns
from .tracker import CostTracker
from .treeplan import BranchRule, branch_rule

SOURCES = {"model": ("model",), "ngram": ("ngram",), "hybrid": ("ngram", "model")}  # tried in this order


def source_names(kind: str | None) -> tuple[str, ...]:
    """The drafters a drafter kind runs (none for plain decoding)."""
    return SOURCES.get(kind, ()) if kind else ()


def catch_up_decode_s(tracker: CostTracker, behind: int) -> float:
    """What a draft model behind by `behind` tokens pays to decode them beyond a step's own decodes
    (none up to STEP_DECODE, which any step decodes): a catch-up's price."""
    return tracker.catchup_seconds(behind) if behind > STEP_DECODE else 0.0


def p_min_of(config: GenerationConfig) -> float | None:
    """The draft model's p-min; None is p-min auto. Auto goes with auto γ, greedy or sampled: a fixed γ
    takes llama.cpp's FALLBACK_P_MIN, so `--gamma N` drafts what it says and a seed repeats a sampled
    run token for token (auto follows live timings). At T > 0 the rule reads the draft's top-token
    confidence before it samples the guess, and the acceptance per confidence a sampled tracker
    learnt: the draft's distribution alone decides where a draft stops, which keeps the p/q rule exact."""
    if config.p_min is None and config.gamma is not None:
        return FALLBACK_P_MIN
    return config.p_min


class Planner(Recording, Probes, Baseline):
    """Decides every step of one generation over its sources (drafter, tracker), tried in order.

    Auto γ, per step: each source offers what it could draft now (an n-gram drafter: its match, whose
    length picks the acceptance bucket). The best known choice is the (source, γ), plain decoding
    included, with the most tokens/s by the trackers' point estimates (a draft model's under a
    trusted p-min auto drafts up to its whole offer, its rule deciding where it stops: _stop_decides).
    The exploratory choice is the one with the most tokens/s by their optimistic estimates among
    those the budget allows (see ExploreBudget; ε = EXPLORE_FRACTION, W = GRACE_STEPS); it is taken
    when it beats the best known choice by the trackers' min_gain. Each step measures what it ran: the verify seconds of its width
    (taught to every source: the target is the same), and the drafting source's cost, acceptance and
    where its stop rule ended the draft (a model step's γ is a cap: it is priced by where its drafts
    are likely to end within it, draftstop.DraftStops). An exploratory model step's stop rule lets
    the draft reach the first verify width not yet measured (CostTracker.draft_stop).
    So a width is only chosen once measured or while its measurement is worth its bounded cost, and
    as measurements come in the optimistic estimate falls to the point estimate and exploring stops.
    Pricing takes time too: a source that lost to plain decoding is priced again once PRICE_FRACTION
    of the seconds since covers it (twice as long after each loss in a row, up to REST_BACKOFF_MAX),
    unless its offer got better, a step drafted or the budget grew to fit a probe it denied (_rests).
    """

    clock = staticmethod(time.perf_counter)  # what times the planner's own pricing (_rests)

    def __init__(self, sources: Sequence[tuple[Drafter, CostTracker]], config: GenerationConfig,
                 budget: ExploreBudget | None = None, max_branches: int = 1):
        """max_branches: the branches one verify can hold (the target context's sequences; 1: chains)."""
        self.sources = list(sources)
        self.max_branches = max_branches
        self.config = config
        self.p_min = p_min_of(config)
        self.budget = budget if budget is not None else ExploreBudget()
        self.explored = 0                 # exploratory steps taken (stats and tests read it)
        self._explored: Exploration | None = None  # if the last step explored
        # the source of the last drafting step, where it explored (record's _returned)
        self._probe_wide: int | None = None
        self._seen: dict[int, int] = {}    # source -> context length it last drafted after (or was prefilled to)
        self._prefilled: set[int] = set()
        self._length = 0                   # the context length at the last plan
        self._prompt_len: int | None = None  # the context length at the first: where the output begins
        self._model = next((i for i, (d, _) in enumerate(self.sources) if d.name == "model"), None)
        self._ngram = next((i for i, (d, _) in enumerate(self.sources) if d.name == "ngram"), None)
        self._room = 0                     # the most the last plan could draft
        # other sources' drafting steps since the model last drafted: the tokens each emitted ...
        self._since_model: dict[int, list[int]] = {}
        self._probes_since_model: dict[int, int] = {}  # ... and those of the exploratory ones
        self._resting: dict[tuple[int, int], Resting] = {}  # (source, bucket) -> its loss at its last pricing (_rests)
        self._lost: dict[int, Lost] = {}  # source -> what its last pricing found (_probe)
        self._remeasures: set[int] = set()  # sources whose probe this step's pricing made a re-measure (_remeasure)
        self._shadow: Shadow | None = None  # the lookup's guesses followed along other steps (_shadow_step)
        self._beyond: list[int] | None = None  # its guesses beyond the draft of its own step (_continue)
        self._looked = False  # whether the n-gram lookup took its first look at a bucket this generation (_first_look)
        self._owed = False  # whether the draft model was taken in to be measured on a second text (_text_owed)
        self._contending = False  # whether the draft model's step beat plain decoding at the last pricing (_switches)
        # the draft model's rest found holding in full, and the steps it may still be taken on its clock alone (_quiet)
        self._calm: Resting | None = None
        self._calm_steps = 0
        # how far apart the lookup's runs come (a hybrid's catch-up horizon, _horizon), kept by its
        # tracker across the process's generations
        self._runs = self.sources[self._ngram][1].lookup_runs if self._ngram is not None else LookupRuns()
        self._runs.begin()
        if self._model is not None:  # a new text for the draft model's acceptance per text (_text)
            tracker = self.sources[self._model][1]
            tracker.texts.begin()
            tracker.text_shift = 0.0

    @property
    def exploring(self) -> int | None:
        """The source the last plan explored with (an exploratory step, ExploreBudget); None where it
        took the best known choice."""
        return self._explored.source if self._explored is not None else None

    def _text(self) -> None:
        """Move the draft model's acceptance estimates to the text at hand (acceptance.TextAcceptance:
        its own counts so far, shrunk towards the texts' mean by how much texts differ), under auto γ.
        So a model measured first on prose, where its guesses did not pay, drafts once a code reply
        shows them taken, and one measured on code drafts less once a reply's prose shows them not."""
        if self._model is not None and self.config.gamma is None:
            tracker = self.sources[self._model][1]
            tracker.text_shift = tracker.texts.shift()

    def wants_prefill(self, i: int, prompt: Sequence[int] | None = None) -> bool:
        """Whether source i should take in the prompt now: not where measured costs rule it out
        (worth_preparing; as llama.cpp does, the draft is prefilled with the prompt otherwise), nor,
        under auto γ, where taking in the prompt would cost a draft model this process has measured
        more than its drafts are expected to gain (_intake_pays): a draft that has a chance to pay
        only by its optimistic estimate takes in a prompt when a retry covers that intake
        (retry_due), so that its intakes, like its probes, cost at most a stated fraction of the
        time. A source not prefilled catches up when first asked, at a price the budget counts."""
        drafter, tracker = self.sources[i]
        cap = cap_of(drafter.name, self.config)
        wanted = self.config.gamma != 0 and bool(self.config.gamma or worth_preparing(tracker, cap))
        if wanted and self.config.gamma is None and prompt is not None and not retry_due(tracker):
            wanted = self._intake_pays(i, prompt)
        if wanted:
            self._prefilled.add(i)
        return wanted

    def _intake_pays(self, i: int, prompt: Sequence[int]) -> bool:
        """Whether taking in the prompt is worth it to a draft model, counted as the catch-up it is (the
        tokens its cache lacks of the prompt, over the first step's horizon; _catch_up_rate). Yes before
        the draft is measured and confirmed (its entry pays for its first probe, _entry_paid), and once
        after its first text where a text every guess fits (SURE_SHIFT) would repay it: one text says
        nothing of how far the next may lie, so the second is measured as part of the entry (_text_owed).
        Then yes where the time it is expected to save over the texts' spread is positive
        (TextAcceptance.outlook, _intake_saves; the cautious estimate's step where the texts differ no
        more than chance or fewer than two were measured). Otherwise the intake explores, at most ε of
        the time as probes do: taken where the optimistic estimate's step beats plain decoding, once ε
        of the seconds since the draft was last made ready cover it (retry_due); early steps may measure
        a draft dearer than later ones (a stall, page faults), and only a ready draft is measured again."""
        drafter, tracker = self.sources[i]
        if drafter.name != "model" or tracker.draft_s.value is None or not tracker.confirmed():
            return True
        catch_up = catch_up_decode_s(tracker, len(prompt) - self._held(i, prompt))
        plain_rate = 1.0 / tracker.plain_seconds()
        cap, horizon = cap_of(drafter.name, self.config), self._horizon(self.config.max_tokens)
        texts = tracker.texts
        outlook = texts.outlook() or [(1.0, 0.0)]
        if len(texts.texts) == 1 and not texts.second:
            texts.second = self._owed = self._intake_saves(i, cap, catch_up, horizon, plain_rate, SURE_SHIFT) > 0
            if texts.second:
                return True
        if sum(w * self._intake_saves(i, cap, catch_up, horizon, plain_rate, shift) for w, shift in outlook) > 0:
            return True
        if not retry_due(tracker, cost=catch_up):
            return False
        gamma, rate = self._catch_up_rate(i, cap, 0, catch_up, horizon, hopeful=True)
        return gamma > 0 and rate > plain_rate

    def _intake_saves(self, i: int, cap: int, catch_up: float, horizon: float, plain_rate: float,
                      shift: float) -> float:
        """The seconds an intake of catch_up seconds saves over horizon tokens on a text whose
        acceptance lies shift (log-odds) from the texts' mean, by the cautious estimate: -catch_up
        where drafting would not beat plain decoding on it (the planner would not draft)."""
        tracker = self.sources[i][1]
        tracker.text_shift, before = shift, tracker.text_shift
        try:
            gamma, rate = self._catch_up_rate(i, cap, 0, 0.0, horizon)
        finally:
            tracker.text_shift = before
        if not gamma or rate <= plain_rate:
            return -catch_up
        return max(horizon / plain_rate - horizon / rate - catch_up, -catch_up)

    def plan(self, tokens: Sequence[int], room: int) -> Plan:
        """The next step after tokens, drafting at most `room` tokens (what the context and the tokens
        still wanted allow). Fixed γ: the first source with a guess to offer. Auto: see the class."""
        self._explored = None
        self._length, self._room = len(tokens), room
        if self._prompt_len is None:  # the first step
            self._prompt_len = len(tokens)
            self._seen = {i: len(tokens) if i in self._prefilled else self._held(i, tokens)
                          for i in range(len(self.sources))}
        offers = self._offers(tokens, room, self._quiet())
        if not offers:
            return PLAIN
        if self.config.gamma is not None:
            return self._plan(offers[0])
        plan = self._plan(self._choose(offers))
        self._shadow_step(plan, offers)
        return plan

    def _offers(self, tokens: Sequence[int], room: int, quiet: bool = False) -> list[Choice]:
        """What each source could draft now: (source, most γ, bucket), none where it has nothing;
        quiet: none from the draft model, which rests whatever it offers (_quiet)."""
        offers = []
        for i, (drafter, _) in enumerate(self.sources if room > 0 else []):
            if quiet and i == self._model:
                continue
            fixed = self.config.gamma
            most = min(room, cap_of(drafter.name, self.config) if fixed is None else fixed)
            limit = drafter.offer(tokens, most) if most > 0 else 0
            if limit > 0:
                bucket = (ngram_bucket(drafter.last_match, drafter.last_at, self._prompt_len)
                          if drafter.name == "ngram" else 0)
                offers.append(Choice(i, limit, bucket, 0.0))
        return offers

    def _plan(self, choice: Choice) -> Plan:
        if choice.source is None:
            return Plan(None, 0)
        drafter, tracker = self.sources[choice.source]
        stop = self._stop(drafter, tracker, choice.gamma, explore=self._explored is not None)
        return Plan(choice.source, choice.gamma, stop, choice.bucket,
                    self._branch(drafter, tracker, choice.gamma), self._handoff(choice))

    def _handoff(self, choice: Choice) -> Handoff | None:
        """A hybrid's model step under auto γ may hand over to the n-gram lookup, once this process
        has measured n-gram steps (their point estimate decides; no exploring inside a step)."""
        ngram = self._ngram
        if self.config.gamma is not None or choice.source != self._model or ngram is None:
            return None
        drafter, tracker = self.sources[ngram]
        if not tracker.confirmed():
            return None
        return Handoff(drafter, tracker, cap_of(drafter.name, self.config), self._room, choice.rate,
                       self._prompt_len)

    def _branch(self, drafter: Drafter, tracker: CostTracker, gamma: int) -> BranchRule | None:
        """The tree's shape for a model draft under auto γ, once its costs are measured (treeplan.py)."""
        if self.config.gamma is not None or drafter.name != "model" or tracker.draft_s.value is None:
            return None
        return branch_rule(tracker.accept_at, tracker.siblings, tracker.rate(), tracker.verify_seconds, gamma,
                           self.max_branches)

    def _choose(self, offers: Sequence[Choice]) -> Choice:
        """The best known choice, or the exploratory one where it beats it and the budget allows."""
        if not offers or self.sources[0][1].verify.samples(1) < PLAIN_SAMPLES or self._plain_doubted():
            return Choice(None, 0, 0, 0.0)  # plain decoding measures a one-token verify first
        self._text()  # (read by pricing only: a step plain at once, or with every offer resting, has none)
        plain_s = self.sources[0][1].plain_seconds()
        best = plain = Choice(None, 0, 0, 1.0 / max(plain_s, 1e-300))
        live = [c for c in offers if not self._rests(c, plain_s)]
        if not live:
            return best
        priced = {}  # source -> seconds pricing it took
        self._contending = False
        # the draft model first: whether its step beats plain decoding decides the lookup's price (_switches)
        for i, limit, bucket, _ in sorted(live, key=lambda c: c.source != self._model):
            t0 = self.clock()
            if self.sources[i][1].confirmed():  # else not a known choice yet (CostTracker.confirmed)
                gamma, rate = self._known(i, limit, bucket)
                if gamma and rate > best.rate:
                    best = Choice(i, gamma, bucket, rate)
                    self._contending = self._contending or i == self._model
            priced[i] = self.clock() - t0
        probes, self._remeasures = [], set()
        for c in live:
            t0 = self.clock()
            probes.append(self._probe(c, best, plain_s))
            priced[c.source] += self.clock() - t0
        probe = self._beyond_known(max(probes, key=lambda c: c.rate, default=None), best)
        # the probe beat the known choice by min_gain (_probe)
        same = probe is not None and probe[:2] == best[:2] and not self._stop_decides(best.source)
        chosen = probe if probe is not None and probe.rate and not same else best
        self._rest(live, chosen.source, priced, best.rate)
        if chosen is probe:
            drafter, tracker = self.sources[probe.source]
            known = (best.gamma, self._stop(drafter, tracker, best.gamma)) if best.source == probe.source else None
            self._explored = Exploration(probe.source, best.rate, known, probe.source in self._remeasures)
            self.explored += 1
        elif best.source is not None and self._plain_again(best, plain_s):
            return plain
        return chosen

    def _known(self, source: int, limit: int, bucket: int) -> tuple[int, float]:
        """(γ, tokens/s) of source's best step: by the point estimate, or where a draft model is
        behind (after plain or n-gram steps) and first decodes what it has not seen, at the price of
        that catch-up (_catch_up_rate). A lookup's offer that reaches the generation's end (the
        room) is a copy whose rest it offers next and the last: its step is the one that covers the
        offer best (costmodel.covering), so that the copy's end is not left to a verify of its own."""
        catch_up = self._catch_up_s(source)
        if not catch_up:
            finish = source == self._ngram and limit >= self._room
            gamma, rate = self.sources[source][1].plan(limit, bucket, self._switches(source), finish=finish)
        else:
            gamma, rate = self._catch_up_rate(source, limit, bucket, catch_up, self._horizon())
        return (limit if gamma and self._stop_decides(source) else gamma), rate

    def _stop_decides(self, source: int) -> bool:
        """Whether a known step from source drafts up to its whole offer, the point estimate's γ
        deciding only whether it drafts and at what rate it is priced: a draft model under p-min auto
        whose costs are trusted (CostTracker.draft_stop: its DraftStop declines a first guess that
        does not pay). That rule weighs each next guess by its own confidence, looking ahead over the
        whole offer, where the estimate's γ rests on acceptance per position pooled over every
        confidence: capped by it, drafts of sure guesses were cut where they paid, and the probes
        that drafted on beat the known steps they were priced against (scripts/results/HISTORY.md:
        "The model's known step drafts up to its offer")."""
        drafter, tracker = self.sources[source]
        return drafter.name == "model" and self.p_min is None and self.config.gamma is None and tracker.stop_trusted()

    def _catch_up_rate(self, source: int, limit: int, bucket: int, catch_up: float,
                       horizon: float, hopeful: bool = False) -> tuple[int, float]:
        """(γ, tokens/s) of source's best step after a catch-up of catch_up seconds. That is paid
        once, and the steps after it draft at their own rate, so it is spread over the tokens the
        model may draft before it falls behind again (horizon): a rate over that horizon. Charged to
        one step, it would grow with every plain step and keep the model out for good. The rate is
        the cautious acceptance's (CostTracker.plan): a catch-up is paid before the drafts it buys,
        and on a noisy estimate that barely pays it would buy a few drafts before plain steps again;
        hopeful: the optimistic estimate's (_intake_pays)."""
        tracker, switch = self.sources[source][1], self._switches(source)
        if hopeful:
            gamma, rate = tracker.estimate(bucket, True, switch).best(limit, tracker.min_gain)
        else:
            gamma, rate = tracker.plan(limit, bucket, switch, cautious=True)
        if not gamma or not catch_up:
            return gamma, rate
        return gamma, horizon / (horizon / rate + catch_up)

    def _spread(self, offer: Choice, best_rate: float) -> float:
        """The horizon offer's price depends on beyond its room: a hybrid's draft model's (_horizon),
        which grows while the lookup stays away and spreads the model's catch-up thinner; inf for the
        rest (the lookup's price has none, and a model alone's is its room's), and for a model whose
        step loses to best_rate even with no catch-up to pay (by the point and the cautious estimate,
        what _known prices at): no horizon makes it win then, and a rest that ended each time the
        horizon grew by a token would have such a model priced at nearly every step."""
        if offer.source != self._model or self._ngram is None:
            return math.inf
        tracker = self.sources[offer.source][1]
        if not tracker.confirmed():  # priced by _probe alone, whose estimate has no horizon
            return math.inf
        steps = tracker.plan(offer.gamma, offer.bucket), tracker.plan(offer.gamma, offer.bucket, cautious=True)
        bound = max((rate for gamma, rate in steps if gamma), default=0.0)  # γ 0: its best step drafts nothing
        return self._horizon() if bound > best_rate else math.inf

    def _horizon(self, left: int | None = None) -> float:
        """The tokens a draft model that catches up now may draft before it falls behind again: what
        the generation may still take (left; by default the room's), at most W = GRACE_STEPS, and in
        a hybrid no more than the gap expected before the lookup's next run (LookupRuns)."""
        return min(self._room + 1 if left is None else left, GRACE_STEPS, self._runs.gap())

    def predict(self, source: int, n_drafted: int, tokens: float, bucket: int = 0) -> Prediction:
        """A candidate step from source that drafts n_drafted tokens, verified in one batch of
        n_drafted + 1, and is expected to emit `tokens`: its seconds by the measured costs. The seam
        for plans other than a chain: a token tree's expected tokens come from its branches'
        acceptance (CostTracker.acceptance, accept_at), its seconds from its width, as a chain's."""
        est = self.sources[source][1].estimate(bucket)
        return Prediction(tokens, step_seconds(n_drafted, est.draft_s, est.verify_s, est.overhead_s, est.first_s))

    def _switches(self, source: int) -> bool:
        """Whether a drafting step from source is priced with what it makes the hybrid's draft model
        catch up later (its switch cost): where the model's own step, which keeps it in step, beats
        plain decoding this step (_choose). Against a plain step it is no cost: the tokens a step
        emits leave the model behind whichever step emits them, the catch-up of a plain step's token
        costs as much as one of an n-gram step's, and per token the two compare as without it.
        Priced as a cost beyond the plain step, it would hold the hybrid's lookup to fewer drafts
        than the lookup alone makes."""
        return self._model is not None and source != self._model and self._contending

    def _catch_up_s(self, source: int) -> float:
        """What bringing source up to the context would cost beyond its step's own drafting: loading
        its model where that has not happened yet (as measured when it last did), and decoding the
        tokens generated since it last drafted in one batch, whose one-token decode is the step's
        first draft decode (CostTracker.catchup_seconds: the measured cost of each further token).
        Only a draft model catches up (an n-gram drafter's lookup is part of its drafting)."""
        if source != self._model:
            return 0.0
        behind = self._behind(source)
        drafter, tracker = self.sources[source]
        load = 0.0 if getattr(drafter, "ready", True) else tracker.load_s.value or 0.0
        return load + catch_up_decode_s(tracker, behind)

    def _held(self, source: int, tokens: Sequence[int]) -> int:
        """The tokens of the context source's cache holds before the generation (ModelDrafter.held:
        a chat's earlier turns); 0 for a drafter that keeps none."""
        held = getattr(self.sources[source][0], "held", None)
        return held(tokens) if held is not None else 0

    def _behind(self, source: int) -> int:
        """Tokens generated since source last drafted (or took in the prompt)."""
        return self._length - self._seen.get(source, 0)

    def _stop(self, drafter: Drafter, tracker: CostTracker, gamma: int, explore: bool = False) -> StopRule | None:
        """The draft model's stop rule: p-min auto from the tracker (explore: an exploratory step's,
        which lets the draft reach the next unmeasured verify size, CostTracker.draft_stop), a fixed
        p-min, or none. Under auto γ a draft whose cost is unmeasured always drafts its first token
        (as p-min auto's first probe does): a probe the fixed p-min declined would cost a catch-up
        and teach nothing."""
        if drafter.name != "model":
            return None
        if self.p_min is None:
            return tracker.draft_stop(gamma, probe=explore)
        probe = self.config.gamma is None and tracker.draft_s.value is None
        return FixedStop(self.p_min, first=probe) if self.p_min > 0 else None
