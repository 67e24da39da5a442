"""The planner: the ONLY place that decides, before each step, who drafts, how many tokens (γ), and
where a model draft may stop within them (the stop rule: a fixed p-min, or p-min auto from costs).

It reads live measurements (CostTracker, tracker.py: verify cost per batch size, draft cost,
acceptance per position, per n-gram match length and per draft confidence) and the pure formulas of
costmodel.py. The controller asks it once per step and reports back what the step measured. What it
does not know yet it explores, within a stated budget (ExploreBudget): at most EXPLORE_FRACTION of a
generation's time per drafter, counting a generation as at least GRACE_STEPS plain steps long.
The n-gram lookup's acceptance is also learnt along plain steps, at no cost (Planner._shadow_step).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import NamedTuple, Sequence

from .config import GenerationConfig
from .acceptance import SURE_SHIFT, TEXT_LEAST
from .costmodel import Prediction, expected_tokens_upto, match_bucket, step_seconds
from .draftstop import FALLBACK_P_MIN, FixedStop
from .drafters import STEP_DECODE, Drafter, NGramDrafter, Proposal, StopRule
from .tracker import CostTracker, LookupRuns
from .treeplan import BranchRule, branch_rule, tree_outcome

EXPLORE_FRACTION = 0.01  # ε: exploration may cost at most this fraction of a generation's time ...
GRACE_STEPS = 128         # ... counting a generation as at least this many plain steps long
# Plain steps that measure the baseline before any drafting. Every choice is priced against the plain
# step, and while drafting pays nothing measures it again: a process's first target decode can cost
# several times the next ones (its weights still faulting in), and the median of three drops it.
PLAIN_SAMPLES = 3
# Pricing a drafter (its point and optimistic estimates) takes the controller tens of microseconds a
# step: a fraction of a per cent of a CPU's step, but where a step takes a few milliseconds (a GPU)
# several per cent, more than the budget lets exploration lose. One that lost to plain decoding is
# priced again once this fraction of the generation's seconds since covers what pricing it takes, or
# at once where the budget has grown to fit a probe it denied (Planner._rests): so a losing source's
# pricing costs at most ε/4 of the time, on top of the ε its exploring may lose. One whose optimistic
# estimate came within its min_gain of the best known choice (a draft that pays by a few per cent,
# priced on a noisy step) may win again at the plain step's next measurements: ε for those, unless
# the budget denied its probe (it is priced again as soon as the allowance fits that probe).
PRICE_FRACTION = EXPLORE_FRACTION / 4
PRICINGS_KEPT = 5  # what a source's pricing takes: the lower median of its latest pricings (Planner._rest)
REST_BACKOFF_MAX = 8  # a choice that keeps losing rests up to this many times as long (Planner._rest)
QUIET_STEPS = 16  # the most steps a resting draft model's rest is taken on its clock alone (Planner._quiet)
SHADOW_DEPTH = 8  # the most guesses of the lookup followed at once (Planner._shadow_step)
PLAIN_AGE = 32  # drafting steps after which plain decoding is measured again, as a probe (Planner._plain_again)
SOURCES = {"model": ("model",), "ngram": ("ngram",), "hybrid": ("ngram", "model")}  # tried in this order


def source_names(kind: str | None) -> tuple[str, ...]:
    """The drafters a drafter kind runs (none for plain decoding)."""
    return SOURCES.get(kind, ()) if kind else ()


def worth_preparing(tracker: CostTracker, cap: int, fraction: float = EXPLORE_FRACTION) -> bool:
    """Whether a drafter should be made ready before it is asked (its model loaded, the prompt taken
    in): where its measurements leave it a chance to pay (CostTracker.may_pay), and where not,
    again once a retry is due (retry_due)."""
    return tracker.may_pay(cap) or retry_due(tracker, fraction)


def retry_due(tracker: CostTracker, fraction: float = EXPLORE_FRACTION, cost: float | None = None) -> bool:
    """Whether ε of the generation seconds spent without the drafter cover what making it ready
    costs: cost seconds, by default what it cost last time (entry_s: a load and a prompt's intake).
    So a draft that did not pay on one kind of text is tried on whatever comes later, at a cost of at
    most ε of the time between tries (the try itself then explores under the budget)."""
    entry = tracker.entry_s() if cost is None else cost
    return entry is not None and fraction * tracker.idle_s >= entry


def catch_up_decode_s(tracker: CostTracker, behind: int) -> float:
    """What a draft model behind by `behind` tokens pays to decode them beyond a step's own decodes
    (none up to STEP_DECODE, which any step decodes): a catch-up's price."""
    return tracker.catchup_seconds(behind) if behind > STEP_DECODE else 0.0


def ngram_bucket(reach: int, at: int, prompt_len: int) -> int:
    """The acceptance bucket of an n-gram match that reaches back `reach` tokens to an occurrence
    ending at position `at`, in a generation whose output begins at position prompt_len."""
    return match_bucket(reach, in_output=at >= prompt_len)


def cap_of(drafter_name: str, config: GenerationConfig) -> int:
    """The most that auto γ may draft from this drafter."""
    return config.ngram_gamma_max if drafter_name == "ngram" else config.gamma_max


def p_min_of(config: GenerationConfig) -> float | None:
    """The draft model's p-min; None is p-min auto. Auto goes with auto γ at T=0 only: a fixed γ takes
    llama.cpp's FALLBACK_P_MIN, so `--gamma N` drafts what it says and a seed repeats a sampled run
    token for token (auto follows live timings); sampled decoding keeps it too, since the draft's
    top-token confidence says little about a token it sampled."""
    if config.p_min is None and (config.gamma is not None or not config.sampling.greedy):
        return FALLBACK_P_MIN
    return config.p_min


class Plan(NamedTuple):
    """One step's decision: which source drafts (None: a plain step), γ, the stop rule the drafter
    follows within γ (None: draft all γ), and the acceptance bucket its proposal is counted in."""

    source: int | None
    gamma: int
    stop: StopRule | None = None
    bucket: int = 0
    branch: BranchRule | None = None  # where the draft adds next-best guesses (a tree); None: a chain
    handoff: Handoff | None = None    # where a model draft may hand over to the n-gram lookup (a hybrid)


PLAIN = Plan(None, 0)  # a plain step


class Choice(NamedTuple):
    """A candidate step: source (None: plain), γ, bucket, and its predicted tokens/s."""

    source: int | None
    gamma: int
    bucket: int
    rate: float


class Lost(NamedTuple):
    """What Planner._probe found of a source at this step's pricing: the least allowance at which a
    probe the budget denied would fit (ExploreBudget.needs; inf where none was denied), whether its
    optimistic estimate came within min_gain of the best known choice, and the widest offer the
    pricing covers (Planner._widest). Planner._rest keeps it in the source's Resting."""

    need: float
    close: bool
    widest: int


class Resting(NamedTuple):
    """A drafter that lost at its last pricing: its offer then (bucket, γ limit: the widest offer that
    pricing covers, Planner._widest), the step's room,
    the horizon its catch-up was spread over where that is not the room's (Planner._spread; inf
    where none), the generation's seconds at that step (ExploreBudget.elapsed), the seconds pricing
    it took times its backoff (_rest), the allowance at which a probe the budget denied then would
    fit (ExploreBudget.needs; inf where none was denied), the fraction of the seconds since that
    must cover that (PRICE_FRACTION, or ε where its optimistic estimate came close to the best
    choice), and the pricings it lost in a row, this one included (0 once its followed guesses were
    all taken since, _settle)."""

    bucket: int
    limit: int
    room: int
    horizon: float
    since: float
    cost: float
    need: float
    fraction: float
    losses: int


class Shadow(NamedTuple):
    """The n-gram lookup's guesses at a plain step, followed along the plain steps after it
    (Planner._follow): ids[i] guesses the i-th token from the step's on; judged of them matched."""

    ids: list[int]
    bucket: int
    judged: int = 0


class Exploration(NamedTuple):
    """An exploratory step: its source, the best known choice's predicted tokens/s, and where that
    choice drafts from the same source, its γ and stop rule (the step it would have run instead)."""

    source: int
    r_best: float
    known: tuple[int, StopRule | None] | None = None


class Handoff:
    """Where a hybrid's model draft hands over to the n-gram lookup, within one step.

    After each token the draft model drafts, the lookup is asked what continues the context and the
    draft so far (NGramDrafter.continuation). Where it has a match, and an n-gram step in the
    match's bucket, priced as the planner prices one by the point estimate, would run faster than
    the model's step was predicted to, the model stops and the draft goes on with that step's γ of
    the lookup's tokens: one verify takes both. So a copy that begins inside a model draft is drafted
    from where it begins, not after the model's γ (the n-gram step's γ is chosen for a verify of its
    own width: the combined one is wider by the model's tokens, an approximation). The choice depends
    on the draft only, never on the target, so the rule stays exact."""

    def __init__(self, ngram: NGramDrafter, tracker: CostTracker, cap: int, room: int, model_rate: float,
                 prompt_len: int):
        self.ngram, self.tracker, self.cap, self.room, self.model_rate = ngram, tracker, cap, room, model_rate
        self.prompt_len = prompt_len  # where the generation's output begins (see ngram_bucket)
        self.bucket = 0  # the acceptance bucket of the continuation handed over to
        self.branch_bucket = 0  # ... and of a copy verified as a branch (branch())
        self._offered: tuple[list[int], int] = ([], 0)   # the last lookup's tokens and bucket ...
        self._previous: tuple[list[int], int] = ([], 0)  # ... and the one before: what it offered in place of the last token

    def after(self, context: Sequence[int], draft: Sequence[int]) -> list[int]:
        """The lookup's tokens that continue context + draft, where they pay more than the model; []."""
        ids, bucket = self._lookup(context, draft)
        if not ids:
            return []
        gamma, rate = self.tracker.plan(len(ids), bucket, switch=True)
        if not gamma or rate <= self.model_rate:
            return []
        self.bucket = bucket
        return ids[:gamma]

    def look(self, context: Sequence[int]) -> None:
        """Look up what continues the context (before a draft's first token: see branch())."""
        self._lookup(context, [])

    def _lookup(self, context: Sequence[int], draft: Sequence[int]) -> tuple[list[int], int]:
        """The lookup's tokens that continue context + draft and their bucket, kept (see branch())."""
        limit = min(self.cap, self.room - len(draft))
        ids, reach, at = self.ngram.continuation(context, draft, limit) if limit > 0 else ([], 0, 0)
        bucket = ngram_bucket(reach, at, self.prompt_len) if ids else 0
        self._previous, self._offered = self._offered, (ids, bucket)
        return ids, bucket

    def branch(self, here: Sequence[int], rule: BranchRule) -> list[int]:
        """The copy the lookup offered in place of the model's latest token (the lookup before the
        last after(), or look()'s), as a branch beside the guesses `here` at that depth, where its
        first token is none of them and the branch pays (BranchRule.copy, by the copy's acceptance
        in its bucket, point estimate); []. The tree stays within the step's room."""
        ids, bucket = self._previous
        ids = ids[: max(self.room + 1 - rule.width, 0)]
        if not ids or ids[0] in here:
            return []
        gains = [total - 1.0 for total in expected_tokens_upto(self.tracker.acceptance(bucket), len(ids))]
        n = rule.copy(gains)
        self.branch_bucket = bucket
        return ids[:n]


class ExploreBudget:
    """The ledger of the exploration rule over one generation (an explicit budget).

    A step is exploratory when the planner takes it for what it may teach rather than for its point
    estimate. Its loss is counted against the best known choice at that step, whose predicted rate is
    r_best (never below plain decoding): loss = seconds − tokens / r_best, the time the step took
    beyond what the best known choice would have needed for the same tokens (negative when the step
    did better: a probe that pays funds the next one). Where the best known choice drafts from the
    same source, the step is compared with the step that choice would have run on this very draft
    (Planner._loss): a probe whose draft ended where the known γ would have ended it ran the known
    step and lost nothing, so chance does not drain the budget. An exploratory step is taken only when

        spent[source] + its predicted loss ≤ ε × max(elapsed, W × plain step seconds),

    its loss predicted cautiously (acceptance one standard error below the point estimate, see
    CostTracker.cautious_acceptance), and afterwards its measured loss is added to spent[source]. In
    a hybrid an n-gram step also costs the draft model's catch-up over its tokens, which its price
    counts (the switch cost) and which comes due when the model next drafts: an exploratory step's
    share is added to spent[source] then (Planner._charge_switches). So each source's exploration in
    a generation costs at most ε of its time (ε of W plain steps' time, for a shorter one) plus what
    its last exploratory step lost beyond the cautious prediction, and in a hybrid the n-gram probes'
    shares of a catch-up still to come: ε for a single drafter, 2ε for the hybrid. One step is outside
    it: the first probe of a draft model made ready for the generation and not yet measured
    (Planner._entry_paid), one token, once per tracker, is part of making it ready, as its load and
    prefill are. Another is the n-gram lookup's first look at a match bucket never judged
    (Planner._first_look): one token, at most once a generation, its loss charged. The budget is per
    source so that one drafter's learning never starves the other's: the hybrid learns each part as
    the part alone would. Every term is in seconds of the machine at hand, so the rule
    compares ratios only."""

    def __init__(self, fraction: float = EXPLORE_FRACTION, grace_steps: int = GRACE_STEPS):
        self.fraction, self.grace_steps = fraction, grace_steps
        self.spent: dict[int, float] = {}  # net measured loss of each source's exploratory steps so far
        self.elapsed = 0.0                 # seconds of every step so far

    def allowance(self, plain_s: float) -> float:
        """What each source may have spent by now: ε × max(elapsed, W plain steps)."""
        return self.fraction * max(self.elapsed, self.grace_steps * plain_s)

    def allows(self, source: int, loss: float, plain_s: float) -> bool:
        """Whether an exploratory step of source predicted to lose `loss` seconds fits its budget."""
        return self.needs(source, loss) <= self.allowance(plain_s)

    def needs(self, source: int, loss: float) -> float:
        """The allowance at which an exploratory step of source predicted to lose `loss` fits."""
        return self.spent.get(source, 0.0) + max(loss, 0.0)

    def charge(self, seconds: float, explored: tuple[int, float] | None = None) -> None:
        """Account one step; explored is (source, its loss) for an exploratory step."""
        self.elapsed += seconds
        if explored is not None:
            source, loss = explored
            self.spent[source] = self.spent.get(source, 0.0) + loss


class Planner:
    """Decides every step of one generation over its sources (drafter, tracker), tried in order.

    Auto γ, per step: each source offers what it could draft now (an n-gram drafter: its match, whose
    length picks the acceptance bucket). The best known choice is the (source, γ), plain decoding
    included, with the most tokens/s by the trackers' point estimates. The exploratory choice is the
    one with the most tokens/s by their optimistic estimates among those the budget allows (see
    ExploreBudget; ε = EXPLORE_FRACTION, W = GRACE_STEPS); it is taken when it beats the best known
    choice by the trackers' min_gain. Each step measures what it ran: the verify seconds of its width
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
        self._shadow: Shadow | None = None  # the lookup's guesses followed along plain steps (_shadow_step)
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
        tokens its cache lacks of the prompt, over the first step's horizon; _catch_up_rate). Before
        this process has measured and confirmed the draft, yes: its first probe is what its entry
        pays for (_entry_paid). Measured on one text, once, where the intake would be repaid on a
        text every guess fits: one text's acceptance says nothing of how far the next may lie from it
        (TextAcceptance), and the second text is measured as part of the entry (_text_owed). One
        prose reply measured at 0.6 otherwise kept the draft out of every code reply after it. Then
        a new text's acceptance may lie anywhere the spread between the texts measured allows
        (TextAcceptance.outlook): the intake is taken where the time it is expected to save over that
        spread is positive, each text that would not repay it costing the intake (the planner then
        does not draft on it). Where the texts differ no more than chance makes them, or fewer than
        two were measured, that is whether the cautious estimate's step repays the intake.
        Otherwise the intake explores: it is taken once ε of the seconds since the draft was last
        made ready cover it (retry_due), so that such intakes cost at most ε of the time, as its
        probes do. A few early steps may all measure the draft's tokens dearer than later ones do (a
        stall, the first decodes' page faults), and the probes that measure it again need the draft
        ready; on prose, a model alone whose drafts did not pay took in every prompt where its
        optimistic estimate left it a chance."""
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

    def note_load(self, i: int) -> float:
        """Keep what loading source i's model took, if it was just loaded (by a prefill or a first
        propose); return those seconds (0.0 if it was not)."""
        drafter, tracker = self.sources[i]
        take = getattr(drafter, "take_load_s", None)  # a drafter with a model to load
        seconds = take() if take is not None else 0.0
        if seconds:
            tracker.load_s.add(seconds)
        return seconds

    def note_prefill(self, i: int) -> None:
        """Keep what source i's prefill took and, apart, a load it made (a drafter that has no model
        to load reports neither)."""
        drafter, tracker = self.sources[i]
        self.note_load(i)
        if hasattr(drafter, "prefill_s"):
            tracker.prefill_s.add(drafter.prefill_s)
            if drafter.prefill_tokens > STEP_DECODE:  # a batch like a catch-up's, without the last row's logits
                tracker.add_catchup(drafter.prefill_tokens, drafter.prefill_s)

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

    def _shadow_step(self, plan: Plan, offers: Sequence[Choice]) -> None:
        """Follow what the n-gram lookup offers at a plain step along the plain steps that come after
        it: the lookup's acceptance, learnt without a verify. A plain step emits a token drawn from
        the target's distribution p (its argmax at T=0), and the lookup's guess x is one-hot, so the
        step emits x exactly as often as the p/q rule would accept x as a draft, min(1, p(x)/1):
        matching the target's tokens against the guesses one by one, up to the first that differs, is
        a draft of the lookup judged by the rule, in distribution. Only one is followed at a time,
        and only over plain steps (a drafting step ends it first, with what it judged so far: the
        drafts of a step are judged by their own verify, and counted once). So a match bucket whose
        guesses the target seldom takes is known as such without a probe, and one it takes is found
        by the plain steps that pass through it. Planning reads only what was emitted before the
        step, so the output's distribution is untouched."""
        if plan.source is not None:
            if self._shadow is not None:  # what it judged so far, every one taken
                self._settle(self._shadow.judged, self._shadow.judged)
        elif self._shadow is None and self._ngram is not None:
            offer = next((c for c in offers if c.source == self._ngram), None)
            ids = self.sources[self._ngram][0].last_ids[:SHADOW_DEPTH] if offer is not None else []
            if ids:
                self._shadow = Shadow(ids, offer.bucket)

    def _follow(self, token: int | None) -> None:
        """Judge the followed guesses (_shadow_step) by the token a plain step emitted."""
        shadow = self._shadow
        if shadow is None or token is None:
            return
        i = shadow.judged
        if token != shadow.ids[i]:
            self._settle(i + 1, i)
        elif i + 1 == len(shadow.ids):
            self._settle(i + 1, i + 1)
        else:
            self._shadow = shadow._replace(judged=i + 1)

    def _settle(self, judged: int, accepted: int) -> None:
        """Count the followed guesses in the lookup's tracker, judged of them judged and the first
        accepted taken; follow none. All of them taken, its bucket's rests start over (_rest)."""
        bucket = self._shadow.bucket
        self.sources[self._ngram][1].record_acceptance(judged, accepted, bucket)
        rest = self._resting.get((self._ngram, bucket))
        if rest is not None and accepted == judged == len(self._shadow.ids):
            self._resting[self._ngram, bucket] = rest._replace(losses=0)
        self._shadow = None

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
        if not offers or self.sources[0][1].verify.samples(1) < PLAIN_SAMPLES:
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
        probes = []
        for c in live:
            t0 = self.clock()
            probes.append(self._probe(c, best.rate, plain_s, followed=best.source is None, known=best.gamma))
            priced[c.source] += self.clock() - t0
        probe = max(probes, key=lambda c: c.rate, default=None)
        # the probe beat the known choice by min_gain (_probe)
        chosen = probe if probe is not None and probe.rate and probe[:2] != best[:2] else best
        self._rest(live, chosen.source, priced, best.rate)
        if chosen is probe:
            drafter, tracker = self.sources[probe.source]
            known = (best.gamma, self._stop(drafter, tracker, best.gamma)) if best.source == probe.source else None
            self._explored = Exploration(probe.source, best.rate, known)
            self.explored += 1
        elif best.source is not None and self._plain_again(best, plain_s):
            return plain
        return chosen

    def _plain_again(self, best: Choice, plain_s: float) -> bool:
        """Whether a plain step is taken in place of best, the drafting choice the point estimate
        puts ahead of plain decoding (plain_s a step), to measure plain decoding again. A choice
        that wins stops plain steps, and nothing else measures them: a process whose first plain
        steps ran at twice their time (a stall, the machine's pace at its start) drafted every step
        at 0.6x plain decoding for good, its one-row verify read at 73 ms against 62 ms for two
        rows (README, "Plain decoding measured again"). So plain is taken where the latest plain
        step came out faster than best by best's min_gain: the freshest measurement says plain
        wins, and the next one tells again (a step the estimate lags, not a probe); and where none
        has been measured for PLAIN_AGE drafting steps, as best's source's probe, under its budget
        (predicted to lose plain_s against best's rate; record charges what it lost). Where drafting
        pays, that is a step in PLAIN_AGE at most, and the budget's ε over all."""
        tracker = self.sources[0][1]
        last = tracker.plain_last
        if last is not None and 1.0 / max(last, 1e-300) > best.rate * (1 + self.sources[best.source][1].min_gain):
            return True
        if tracker.plain_age < PLAIN_AGE or not self.budget.allows(best.source, plain_s - 1.0 / best.rate, plain_s):
            return False
        self._explored = Exploration(best.source, best.rate, None)
        self.explored += 1
        return True

    def _rests(self, offer: Choice, plain_s: float | None = None) -> bool:
        """Whether offer's source is left unpriced this step: it lost at its last pricing in offer's
        bucket (each bucket's rest is kept: an n-gram lookup's matches alternate between buckets, and
        each change of bucket had it priced again, most of its pricings on text at a GPU's costs); its
        offer is no better than it was then (no more tokens, no more room, and so a draft model's
        catch-up no shorter, spread over no longer a horizon); no step has drafted since
        (a draft measures verify widths and acceptance, which move every estimate); a fraction of the
        generation's seconds since do not yet cover what that pricing took (PRICE_FRACTION; ε where
        its optimistic estimate came within min_gain of the best choice); and the budget has not grown
        to fit a probe it denied then (its allowance grows with the generation's seconds; plain_s,
        the plain step's seconds, read here where not given).
        Its estimates have then moved only by the plain steps' measurements, and a choice that lost
        to plain decoding stays lost until enough of those add up."""
        rest = self._resting.get((offer.source, offer.bucket))
        return (rest is not None and offer.gamma <= rest.limit
                and self._room <= rest.room and (rest.horizon == math.inf or self._horizon() <= rest.horizon)
                and self._on_clock(rest) and (rest.need == math.inf or self.budget.allowance(
                    self.sources[0][1].plain_seconds() if plain_s is None else plain_s) < rest.need))

    def _quiet(self) -> bool:
        """Whether the draft model rests this step whatever it offers, so that the planner need not
        ask it: its offer is the room left in its one bucket, which is no more than its rest's limit
        while the room is no larger (_rests checks that, with its offer taken at that limit). An
        n-gram lookup's offer changes with every token: it is asked at every step, and where it
        offers nothing the step is plain at once. Where a step takes milliseconds, asking each source
        and checking its rest at every step cost auto about a point against plain decoding (README,
        the fast regime). A rest found holding in full is then taken on its clock alone for up to
        QUIET_STEPS steps, while the room is no larger: the generation's seconds since its pricing
        against that pricing's cost, and the allowance against the probe it was denied, as _rests
        reads them. What else _rests reads moves only as plain steps move an average (the plain
        step's seconds, which the allowance's grace reads) or, in a hybrid, with the gap since the
        lookup's last run (the horizon: a rest that depends on it is checked in full every step).
        Where a step takes 1.8 ms, a full check at every step was a share of what a model alone lost
        to plain decoding on prose (README, "The planner's work on a plain step cut again")."""
        rest = self._resting.get((self._model, 0))
        if rest is None:
            return False
        if rest is self._calm and self._calm_steps > 0 and self._room <= rest.room and self._on_clock(rest):
            self._calm_steps -= 1
            return True
        quiet = self._rests(Choice(self._model, rest.limit, rest.bucket, 0.0))
        self._calm = rest if quiet and rest.horizon == math.inf else None
        self._calm_steps = QUIET_STEPS
        return quiet

    def _on_clock(self, rest: Resting) -> bool:
        """Whether rest still holds by the clock: a fraction of the generation's seconds since its
        pricing does not yet cover that pricing, and the allowance past its grace (ExploreBudget)
        does not yet fit a probe the budget denied it (_rests)."""
        elapsed = self.budget.elapsed
        return (rest.fraction * (elapsed - rest.since) < rest.cost
                and (rest.need == math.inf or self.budget.fraction * elapsed < rest.need))

    def _rest(self, priced: Sequence[Choice], chosen: int | None, seconds: dict[int, float],
              best_rate: float) -> None:
        """Keep which priced sources lost this step (see _rests) to the best known choice's best_rate
        tokens/s; the chosen one is not resting. What a pricing takes is the lower median of the
        source's last PRICINGS_KEPT pricings on this machine (its tracker keeps them across
        generations and saves them for the next process: else each reply priced every choice twice
        before any could rest), once there are two: a pause of the process (a garbage
        collection, a page fault) only ever adds time, and one pricing held up by 50 ms would leave
        its source unpriced for the next 5 s. The least is a pricing with warm caches, which steps
        of a few milliseconds seldom leave: at a GPU's costs (bench_fast_regime) it was a third of
        the mean, and pricing took about three times the PRICE_FRACTION meant for it.
        A choice that loses pricing after pricing rests twice as long after each, up to
        REST_BACKOFF_MAX times: priced again with nothing drafted, nothing judged in its favour
        (_settle) and its offer no better, it loses again, as a draft model on prose or each bucket
        a lookup's matches move between does; each such choice took PRICE_FRACTION of a GPU's
        steps, five of them a hybrid's 1.25%. Winning, any draft, or a followed run of its guesses
        all taken starts it over; one that came close (resting at ε) is priced at ε's pace."""
        for offer in priced:
            key = offer.source, offer.bucket
            latest = self.sources[offer.source][1].pricings
            latest.append(seconds[offer.source])
            del latest[:-PRICINGS_KEPT]
            n = len(latest)
            if offer.source == chosen or n < 2:
                self._resting.pop(key, None)
            else:
                lost = self._lost[offer.source]  # _probe priced it this step
                # one the budget denied is priced again once the allowance fits it (_rests)
                fraction = EXPLORE_FRACTION if lost.close and lost.need == math.inf else PRICE_FRACTION
                prior = self._resting.get(key)
                losses = (prior.losses if prior is not None else 0) + 1
                backoff = min(2 ** (losses - 1), REST_BACKOFF_MAX) if fraction == PRICE_FRACTION else 1
                self._resting[key] = Resting(
                    offer.bucket, lost.widest, self._room, self._spread(offer, best_rate), self.budget.elapsed,
                    backoff * statistics.median_low(latest), lost.need, fraction, losses)

    def _known(self, source: int, limit: int, bucket: int) -> tuple[int, float]:
        """(γ, tokens/s) of source's best step: by the point estimate, or where a draft model is
        behind (after plain or n-gram steps) and first decodes what it has not seen, at the price of
        that catch-up (_catch_up_rate)."""
        catch_up = self._catch_up_s(source)
        if not catch_up:
            return self.sources[source][1].plan(limit, bucket, self._switches(source))
        return self._catch_up_rate(source, limit, bucket, catch_up, self._horizon())

    def _catch_up_rate(self, source: int, limit: int, bucket: int, catch_up: float,
                       horizon: float, hopeful: bool = False) -> tuple[int, float]:
        """(γ, tokens/s) of source's best step after a catch-up of catch_up seconds. That is paid
        once, and the steps after it draft at their own rate, so it is spread over the tokens the
        model may draft before it falls behind again (horizon): a rate over that horizon. Charged to
        one step, it would grow with every plain step and keep the model out for good. The rate is
        the cautious acceptance's (CostTracker.plan): a catch-up is paid before the drafts it buys,
        and on a noisy estimate that barely paid, a marginal draft on prose caught up on 70-100
        tokens mid-reply to draft a few tokens and go back to plain steps; hopeful: the optimistic
        estimate's (_intake_pays)."""
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
        what _known prices at): no horizon makes it win then. Re-priced each time the horizon grew by
        a token, such a model cost a hybrid a pricing at nearly every step, more than the lookup it
        rested beside where a step takes milliseconds (README, the H200 run)."""
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

    def _probe(self, offer: Choice, r_best: float, plain_s: float, followed: bool = False,
               known: int = 0) -> Choice:
        """The γ ≤ offer's limit with the most optimistic tokens/s, if that beats r_best by the
        tracker's min_gain and its predicted loss fits the budget (rate 0 where none does); one token
        while the drafter's cost is unmeasured, so that a draft dearer than predicted can cost at most
        one token's drafting more than the budget allowed. The loss is priced by the point estimate
        with the first width past the widest measured no dearer than the widest, as the step's stop
        rule drafts (CostTracker.draft_stop): along the measured slope, where two rows cost two plain
        steps, no probe past one token would ever fit the budget's grace; and wider ones no cheaper
        a row than the widest measured (VerifyCurve.next_width), so that the loss the budget admits
        bounds what the probe may lose; where none that could win fits, the first size past the
        widest measured is probed alone (_stepping_stone) unless the known choice (known: its γ)
        already drafts as wide. It is priced only for the γ that could be taken: a drafter
        that cannot beat the known choice even optimistically, as on text it does not draft well,
        costs the step one estimate, not three. A draft cost that rests
        on too few steps to be trusted (CostTracker.optimistic_draft_s) is measured again by a
        one-token probe where the budget fits no wider one that could win: priced at the cost as
        measured, a wider probe may never fit a generation's budget, and a cost a stall inflated
        would then stand for good. An n-gram match bucket never judged gets a one-token probe the
        budget does not decide (_first_look). Where the step would otherwise be plain (followed),
        the lookup's guesses in a bucket already judged are followed along it for free
        (_shadow_step), so the hope for its first SHADOW_DEPTH guesses is their point estimate: only
        what plain steps cannot measure, the verify's cost and deeper guesses, is worth a probe.
        Hoped for at the optimistic estimate, a short phrase's few judged deep positions kept the
        lookup probing it 2-3 tokens wide in every reply on prose, about 1% of each."""
        tracker, switch = self.sources[offer.source][1], self._switches(offer.source)
        # where the step would be plain, the lookup's guesses are followed along it (_shadow_step)
        shadowed = followed and offer.source == self._ngram and tracker.judged(offer.bucket)
        hope = tracker.estimate(offer.bucket, True, switch, followed=SHADOW_DEPTH if shadowed else 0)
        width = self._widest(offer)
        hope_tokens, hope_s = hope.tokens(width), hope.seconds(width)
        rates = [hope_tokens[g] / max(hope_s[g], 1e-300) for g in range(width + 1)]
        floor = r_best * (1 + tracker.min_gain)
        best = Choice(offer.source, 0, offer.bucket, 0.0)
        if followed and self._text_owed(offer.source):  # this text measured as part of the intake
            return best._replace(gamma=1, rate=max(rates[1], floor))
        hope_best = max(rates[1 : offer.gamma + 1], default=0.0)
        # a wider offer of the same bucket loses too where no width beyond this one beats the best known choice
        covers = width if max(rates[offer.gamma + 1 :], default=0.0) <= r_best else offer.gamma
        self._lost[offer.source] = Lost(math.inf, hope_best >= r_best * (1 - tracker.min_gain), covers)
        if hope_best <= floor:
            return best
        point = tracker.estimate(offer.bucket, switch=switch, probe=True)
        point_tokens = point.tokens(offer.gamma, tracker.cautious_acceptance(offer.bucket))
        point_s = point.seconds(offer.gamma)
        catch_up = self._catch_up_s(offer.source)
        loss = lambda gamma: catch_up + point_s[gamma] - point_tokens[gamma] / r_best  # noqa: E731
        if tracker.draft_s.value is None:  # ranked by what it may bring, run as one token
            affordable = self._affords(offer.source, loss(1), plain_s) or self._entry_paid(offer.source)
            return best._replace(gamma=1, rate=max(rates[1:])) if affordable else best
        for gamma in range(1, offer.gamma + 1):
            if rates[gamma] > max(best.rate, floor) and self._affords(offer.source, loss(gamma), plain_s):
                best = Choice(offer.source, gamma, offer.bucket, rates[gamma])
        step = self._stepping_stone(tracker, offer, rates, floor)
        if not best.gamma and step > known and self._affords(offer.source, loss(step), plain_s):
            return best._replace(gamma=step, rate=hope_best)
        if not best.gamma and not tracker.cost_trusted() and self._affords(offer.source, loss(1), plain_s):
            return best._replace(gamma=1, rate=hope_best)  # measures the draft's cost again (below)
        if not best.gamma and self._first_look(offer):
            return best._replace(gamma=1, rate=hope_best)
        return best

    @staticmethod
    def _stepping_stone(tracker: CostTracker, offer: Choice, rates: Sequence[float], floor: float) -> int:
        """The γ whose verify is the first size past the widest measured, where a wider γ of the offer
        hopes to beat floor and this one does not, in a bucket already judged; 0 where there is none (a
        bucket never judged has its first look, _first_look). A probe that only measures the next size.
        Beyond the widest measured size a probe's loss is priced no cheaper a row than that size
        (VerifyCurve.next_width), so where that size came out slow (a stall), every wider γ that could
        win was priced out of the budget, and the first size past it, cheap to try, was never tried
        because on its own it could not win: at the H200's costs (a 2-row verify 2.8 plain steps, a row
        beyond little), one slow 3-row sample held a hybrid at plain decoding for every reply of a
        simulated copy set (tests/plannersim.py). Measured, the next size prices the wider ones by its
        own cost a row."""
        gamma = max(tracker.verify.points, default=0)
        if not 0 < gamma < offer.gamma or rates[gamma] > floor or not tracker.judged(offer.bucket):
            return 0
        return gamma if max(rates[gamma + 1 : offer.gamma + 1], default=0.0) > floor else 0

    def _widest(self, offer: Choice) -> int:
        """The widest offer the n-gram lookup may make in offer's bucket for the rest of the generation
        (its cap, within the room; a draft model's offer is the room, which only shrinks): how wide
        _probe prices its hope, so that a rest it earns holds while later matches in the bucket
        reach further (_rests). The lookup's offer is where its match's occurrence continues, up to
        the context's end, so one bucket's offers grow along a reply, and each wider one, priced
        again, lost again (README, "The planner's work on a plain step cut again")."""
        if offer.source != self._ngram:
            return offer.gamma
        return max(offer.gamma, min(cap_of("ngram", self.config), self._room))

    def _first_look(self, offer: Choice) -> bool:
        """Whether offer is the n-gram lookup's first at a match bucket no step has judged (here or
        in the plans loaded), and this generation has had no such look from it yet: a one-token probe
        is then taken whatever the budget says, its loss charged as any probe's. A bucket is a kind
        of match, a copy reaching back 16 tokens or a phrase that merely recurs, and what the lookup
        learnt of one says little of another: a long copy met after short recurring phrases had spent
        the generation's budget was otherwise never tried, and decoded plain. So beyond ε a source
        may lose at most one such probe a generation (one verify row beyond a plain step), and at
        most one per bucket over a tracker's life."""
        return (offer.source == self._ngram and not self._looked
                and not self.sources[offer.source][1].judged(offer.bucket))

    def _affords(self, source: int, loss: float, plain_s: float) -> bool:
        """Whether source's budget fits a probe predicted to lose `loss`; where not, keep the least
        allowance a denied probe of its pricing needs (_rests)."""
        if self.budget.allows(source, loss, plain_s):
            return True
        lost, need = self._lost[source], self.budget.needs(source, loss)
        if need < lost.need:
            self._lost[source] = lost._replace(need=need)
        return False

    def _entry_paid(self, source: int) -> bool:
        """Whether source is a draft model made ready for this generation (loaded, the prompt taken
        in) whose cost is still unmeasured. Its one-token probe is then taken whatever the budget
        says: the entry was paid to learn that cost, and it is the probe that learns it. Denied, the
        draft would stay unmeasured, and every later process of the setup would pay the entry again
        (warm start only leaves out a draft measured not to pay). So the probe is part of the entry,
        and its loss is not charged to the budget: where a 2-row verify costs more than the budget's
        grace, a charged probe left no room for the next one, which one accepted guess cannot yet
        price above one token, and the draft stayed at one token for the generation."""
        return source == self._model and source in self._prefilled and self.sources[source][1].draft_s.value is None

    def _text_owed(self, source: int) -> bool:
        """Whether source is a draft model taken in for this generation as its second text
        (_intake_pays) and not yet measured on it (TextAcceptance: TEXT_LEAST judged drafts). Its
        one-token probes are then taken where the step would otherwise be plain, whatever the budget
        says, and not charged to it: the intake was taken to learn whether this text differs from
        the last, and it is the probes that learn it. So beyond ε a process may lose this once, on
        its second text: TEXT_LEAST one-token probes, each losing at most a draft token and a verify
        row less the guesses accepted."""
        return source == self._model and self._owed and self.sources[source][1].texts.judged < TEXT_LEAST

    def predict(self, source: int, n_drafted: int, tokens: float, bucket: int = 0) -> Prediction:
        """A candidate step from source that drafts n_drafted tokens, verified in one batch of
        n_drafted + 1, and is expected to emit `tokens`: its seconds by the measured costs. The seam
        for plans other than a chain: a token tree's expected tokens come from its branches'
        acceptance (CostTracker.acceptance, accept_at), its seconds from its width, as a chain's."""
        est = self.sources[source][1].estimate(bucket)
        return Prediction(tokens, step_seconds(n_drafted, est.draft_s, est.verify_s, est.overhead_s))

    def _switches(self, source: int) -> bool:
        """Whether a drafting step from source is priced with what it makes the hybrid's draft model
        catch up later (its switch cost): where the model's own step, which keeps it in step, beats
        plain decoding this step (_choose). Against a plain step it is no cost: the tokens a step
        emits leave the model behind whichever step emits them, the catch-up of a plain step's token
        costs as much as one of an n-gram step's, and per token the two compare as without it.
        Priced as a cost beyond the plain step, it held the hybrid's lookup on prose to fewer drafts
        than the lookup alone made."""
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

    def record(self, plan: Plan, proposal: Proposal, n_accepted: int, draft_s: float, verify_s: float,
               overhead_s: float, path: Sequence[int] = (), token: int | None = None) -> None:
        """Teach the trackers what the step measured: every source the verify seconds of its width
        (a plain step also the overhead), the drafting source its costs and acceptance; and charge
        an exploratory step's loss to the budget. A tree (path: its accepted nodes) teaches its
        chain's acceptance, its siblings' and the cost of its full width. token: what a plain step
        emitted, which judges the lookup's guesses being followed (_shadow_step)."""
        if plan.source is None:  # a plain step: the target's one-token verify, the same for every source
            if self._shadow is not None:
                self._follow(token)
            self._runs.note(0, 1)
            seconds, explored = draft_s + verify_s + overhead_s, self._explored
            # plain decoding measured again in place of a drafting choice (_plain_again) is its source's probe
            loss = None if explored is None else (explored.source, seconds - 1.0 / explored.r_best)
            self.budget.charge(seconds, loss)
            for _, tracker in self.sources:
                tracker.record_verify(1, verify_s, overhead_s)
            return
        self.sources[0][1].plain_age += 1
        chain = proposal.parents is None  # not a tree: once a handoff's copy is set apart, the source's own guesses
        width, emitted = len(proposal.ids) + 1, (n_accepted if chain else len(path)) + 1
        self._runs.note(self._copied(plan, proposal, n_accepted, path), emitted)
        if not chain:
            proposal, n_accepted = self._record_tree(plan, proposal, path)
        copied = proposal.tail
        if copied:
            proposal, n_accepted = self._record_tail(plan, proposal, n_accepted)
        n = len(proposal.ids)
        # the most the stop rule let the draft reach: its γ, or where it handed over to a copy
        cap = None if plan.stop is None else n if copied else plan.gamma
        load_s = self.note_load(plan.source) if plan.source is not None else 0.0
        # the tokens a catch-up before this step's draft decoded, and its seconds beyond the step's first decode
        caught_up, extra_s = 0, 0.0
        if n:
            behind = self._behind(plan.source)
            caught_up = behind if proposal.catchup_s > 0 and behind > STEP_DECODE else 0
            extra_s = self._beyond_first_decode(plan.source, proposal, caught_up)
            self._seen[plan.source] = self._length + n_accepted
            self._charge_switches(plan.source, extra_s, caught_up, emitted)
            if copied:  # the model catches up on a handoff's copy as on an n-gram step's tokens
                self._since_model[self._ngram] = [emitted - n_accepted]
        own_s = draft_s - load_s - extra_s  # drafting this step's tokens
        if n:
            self._resting.clear()  # what the step measured moves every source's estimates
        seconds, charged = draft_s + verify_s + overhead_s, None
        if n and plan.source == self._ngram and not self.sources[plan.source][1].judged(plan.bucket):
            self._looked = True  # its first look at the bucket (_first_look), whatever chose it
        if self._explored is not None:
            probe_s, probe_verify_s, probe_emitted = seconds, verify_s, emitted
            if copied:  # a probe is judged by the model's own draft: the copy's tokens are the lookup's gain
                probe_verify_s = self.sources[plan.source][1].verify_seconds(n + 1)
                probe_s, probe_emitted = seconds - verify_s + probe_verify_s, n_accepted + 1
            loss = self._loss(probe_s, probe_emitted, proposal, n_accepted, probe_verify_s, own_s, chain)
            source = self._explored.source
            # an entry's probe is the entry's (asked before the trackers below record its draft cost)
            charged = (source, 0.0 if self._entry_paid(source) or self._text_owed(source) else loss)
        self.budget.charge(seconds, charged)
        for i, (_, tracker) in enumerate(self.sources):
            if i == plan.source or not n:
                # A load, and a catch-up over tokens generated while not drafting, are one-offs, not
                # the draft's per-token cost.
                tracker.record(n, n_accepted, _bounded_by_batch(own_s, proposal), verify_s, overhead_s,
                               proposal.confidences, plan.bucket, width=width, emitted=emitted, cap=cap)
            else:
                tracker.verify.add(width, verify_s)
        if caught_up:  # after the step's own draft cost is in: a catch-up is priced beyond it
            batch = caught_up - int(proposal.first_apart)  # the tokens its batch decoded
            self.sources[plan.source][1].add_catchup(batch, proposal.catchup_s)

    def _copied(self, plan: Plan, proposal: Proposal, n_accepted: int, path: Sequence[int]) -> int:
        """How many of a step's accepted tokens came from the n-gram lookup: an n-gram step's, or the
        copy a model draft handed over to (a tail, or a branch of a tree: path, its accepted nodes)."""
        if plan.source == self._ngram:
            return n_accepted
        if proposal.parents is not None:
            return proposal.copies_taken(path) if proposal.copies else 0
        return max(n_accepted - (len(proposal.ids) - proposal.tail), 0)

    def _beyond_first_decode(self, source: int, proposal: Proposal, k: int) -> float:
        """What a catch-up over k tokens took beyond the decode every model step begins with. A step's
        first draft decode takes in what the last verify emitted; after a catch-up that decode is the
        catch-up's batch, whose last row gives the first guess. So of the batch's seconds, a one-token
        decode is the step's own drafting, and only the rest is the catch-up's. Counted whole, a
        catch-up step's draft would look a decode cheaper than it is: nearly free for a one-token
        probe. The drafter's first catch-up times that decode apart (Proposal.first_apart): then the
        batch is all catch-up. Later ones price the one-token decode by the draft cost measured; only
        a tracker that has none (another sampling mode's, in a process whose drafter has timed its
        decode already) falls back on the batch's measured cost per further token, or its mean per
        token."""
        catchup_s = proposal.catchup_s
        if catchup_s <= 0 or proposal.first_apart:
            return max(catchup_s, 0.0)
        tracker = self.sources[source][1]
        one = tracker.draft_s.value
        if one is None:
            more = tracker.catchup_s.value
            one = catchup_s - (k - 1) * more if more is not None and k > 1 else catchup_s / max(k, 1)
        return min(max(catchup_s - one, 0.0), catchup_s)

    def _loss(self, seconds: float, emitted: int, proposal: Proposal, n_accepted: int, verify_s: float,
              own_s: float, chain: bool) -> float:
        """The exploratory step's loss (ExploreBudget): its seconds less what its tokens take at the
        best known rate. Where the best known choice drafts from the same source and the step is a
        chain, at the rate of the step that choice would have run on the same draft: it drafts the
        first m of these tokens, m where the known γ and stop rule end it (replayed on the draft's
        confidences; a wider γ only lets the stop rule draft on longer), and emits min(accepted, m)
        + 1 tokens in this step's seconds less the drafting beyond m and with the verify of m + 1 as
        the tracker prices it. Where the draft ended by m, the step was the known one and lost
        nothing: only what the probe did beyond the known step is counted, not the luck of the step
        both would have run. A model draft that handed over to a copy (Handoff) is judged as its own
        draft alone, verified at its own width (record): the copy is the lookup's, which an n-gram step
        would have drafted as well. Counted whole, a copy of 80 accepted tokens credited the model's
        budget with seconds it spent on one-token probes behind catch-ups of 80 tokens, each dearer
        than the budget allows."""
        explored = self._explored
        if explored.known is None or not chain:
            return seconds - emitted / explored.r_best
        n, (gamma, stop), confidences = len(proposal.ids), explored.known, proposal.confidences
        m = min(n, gamma)
        if stop is not None:
            m = next((i for i in range(m) if i >= len(confidences) or not stop.keep(i, confidences[i])), m)
        if m >= n:
            return 0.0
        known_s = seconds - own_s * (n - m) / n - verify_s + self.sources[explored.source][1].verify_seconds(m + 1)
        return seconds - emitted * known_s / (min(n_accepted, m) + 1)

    def _charge_switches(self, source: int, catchup_s: float, caught_up: int, emitted: int) -> None:
        """A hybrid's model draft that had to catch up on the tokens generated since it last drafted
        (caught_up of them, in catchup_s beyond its first decode) charges each step of another source
        since then its tokens' share (emitted: what the step emitted): that step cost that much more
        than its verify. The tokens plain steps emitted in between bear their share too, charged to no
        one: plain decoding leaves the model as far behind. Shared per step, a catch-up after 50 plain
        steps and one n-gram step was all the n-gram step's, and on prose the hybrid's lookup priced
        its steps dearer and drafted less than the lookup alone. An exploratory step's share is part
        of what it lost (ExploreBudget), charged to its source's budget now: priced, a probe's loss
        includes it (CostTracker.estimate's switch), and left out of the ledger, a hybrid's n-gram
        probes on prose cost it their own loss and as much again in the model's catch-ups after them."""
        if source != self._model:
            self._since_model.setdefault(source, []).append(emitted)
            if self._explored is not None:
                self._probes_since_model[source] = self._probes_since_model.get(source, 0) + emitted
            return
        steps = self._since_model
        if steps and catchup_s > 0:
            per_token = catchup_s / max(caught_up, sum(map(sum, steps.values())))
            for i, tokens in steps.items():
                for k in tokens:
                    self.sources[i][1].switch_s.add(per_token * k)
            for i, tokens in self._probes_since_model.items():
                self.budget.charge(0.0, (i, per_token * tokens))
        self._since_model.clear()
        self._probes_since_model.clear()

    def _record_tail(self, plan: Plan, proposal: Proposal, n_accepted: int) -> tuple[Proposal, int]:
        """Teach the n-gram tracker how much of a handoff's copy was accepted, where the target got to
        judge it; return the model's own part as the proposal and how much of it was accepted."""
        own = len(proposal.ids) - proposal.tail
        if n_accepted >= own:
            self.sources[self._ngram][1].record_acceptance(proposal.tail, n_accepted - own, plan.handoff.bucket)
        confidences = proposal.confidences[:own]
        return Proposal(proposal.ids[:own], proposal.q[:own], confidences, proposal.catchup_s,
                        first_apart=proposal.first_apart), min(n_accepted, own)

    def _record_copy(self, plan: Plan, proposal: Proposal, own: int, chain: Sequence[int], n_chain: int,
                     path: Sequence[int]) -> None:
        """Teach the n-gram tracker how much of a copy verified as a branch (nodes own..) the target
        took, where it judged the copy: the chain reached the copy's fork and the target took no
        other guess beside the copy (the chain's token, or a sibling, tried before it)."""
        fork = proposal.parents[own]
        depth = 0 if fork < 0 else chain.index(fork) + 1
        if n_chain != depth or (len(path) > depth and path[depth] < own):
            return
        taken = proposal.copies_taken(path)
        self.sources[self._ngram][1].record_acceptance(proposal.copies, taken, plan.handoff.branch_bucket)

    def _record_tree(self, plan: Plan, proposal: Proposal, path: Sequence[int]) -> tuple[Proposal, int]:
        """Record the siblings the target judged, and a copy verified as a branch where it was judged;
        return the tree's chain as a proposal and how many of the chain's tokens were accepted."""
        own = len(proposal.ids) - proposal.copies  # the model's nodes; the copy's are listed after them
        chain, n_chain, judged = tree_outcome(proposal.parents[:own], [node for node in path if node < own])
        siblings = self.sources[plan.source][1].siblings
        for node, accepted in judged:
            siblings.record(proposal.confidences[node], accepted)
        if proposal.copies:
            self._record_copy(plan, proposal, own, chain, n_chain, path)
        confidences = tuple(proposal.confidences[i] for i in chain) if proposal.confidences else ()
        return Proposal([proposal.ids[i] for i in chain], [proposal.q[i] for i in chain], confidences,
                        proposal.catchup_s, first_apart=proposal.first_apart), n_chain


def _bounded_by_batch(own_s: float, proposal: Proposal) -> float:
    """A step's drafting seconds as its tracker keeps them. Where the catch-up's last token was decoded
    apart (Proposal.first_apart), the batch before it decoded two tokens or more, which costs at least
    what one costs alone: a step whose decodes took longer each than that whole batch was held up by
    something else (a page fault, another process), and that one sample, the first of the draft's
    cost, would keep the draft out for the rest of the process. It is counted at the batch's seconds
    a token."""
    if proposal.first_apart and proposal.catchup_s > 0:
        return min(own_s, len(proposal.ids) * proposal.catchup_s)
    return own_s

