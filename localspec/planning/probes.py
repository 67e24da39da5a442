"""Pricing a probe, and resting what lost: the planner's exploratory choice of a step (Planner._probe:
the γ with the most optimistic tokens/s that the budget allows) and the rests of the sources that
lost to the best known choice at their last pricing, which are then not priced again until that
could change (Planner._rests). Methods of Planner (planner.py), which keeps their state."""

from __future__ import annotations

import math
import statistics
from typing import Callable, NamedTuple, Sequence

from ..acceptance import TEXT_LEAST
from ..timings import STALL_FACTOR
from ..tracker import CostTracker
from .budget import EXPLORE_FRACTION, pace
from .plans import Choice, cap_of
from .record import SHADOW_DEPTH

# Pricing a drafter (its point and optimistic estimates) takes time of its own, which where a step
# takes a few milliseconds may be more than the budget lets exploration lose. One that lost to plain
# decoding is priced again once this fraction of the generation's seconds since covers what pricing it
# takes, or at once where the budget has grown to fit a probe it denied (Planner._rests): so a losing
# source's pricing costs at most ε/4 of the time while it rests, on top of the ε its exploring may
# lose. What starts a rest over is not bounded so: a generation's first look at each match bucket
# (rests live with the generation's planner), any draft, a longer offer. One whose optimistic
# estimate came within its min_gain of the best known choice may win at the plain step's next
# measurements: ε for those, unless the budget denied its probe (it is priced again as soon as the
# allowance fits that probe).
PRICE_FRACTION = EXPLORE_FRACTION / 4
PRICINGS_KEPT = 5  # what a source's pricing takes: the lower median of its latest pricings (Planner._rest)
REST_BACKOFF_MAX = 8  # a choice that keeps losing rests up to this many times as long (Planner._rest)
PROBE_GROWTH = 2  # an n-gram probe drafts at most this many times the most guesses one draft had accepted (_probe_cap)
QUIET_STEPS = 16  # the most steps a resting draft model's rest is taken on its clock alone (Planner._quiet)


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


class Probes:
    """Planner's probe pricing and rests (see the module docstring); its state is Planner's:
    _resting, _lost, _calm, _calm_steps."""

    def _rests(self, offer: Choice, plain_s: float | None = None) -> bool:
        """Whether offer's source is left unpriced this step: it lost at its last pricing in offer's
        bucket (each bucket's rest is kept: an n-gram lookup's matches alternate between buckets, and
        one rest would end at each change); its offer is no better than it was then (no more tokens,
        no more room, and so a draft model's catch-up no shorter, spread over no longer a horizon); no
        step has drafted since (a draft measures verify widths and acceptance, which move every
        estimate); a fraction of the generation's seconds since do not yet cover what that pricing
        took (PRICE_FRACTION; ε where its optimistic estimate came within min_gain of the best
        choice); and the budget has not grown to fit a probe it denied then (its allowance grows with
        the generation's seconds; plain_s, the plain step's seconds, read here where not given).
        Its estimates have then moved only by the plain steps' measurements, and a choice that lost
        to plain decoding stays lost until enough of those add up."""
        rest = self._resting.get((offer.source, offer.bucket))
        return (rest is not None and offer.gamma <= rest.limit
                and self._room <= rest.room and (rest.horizon == math.inf or self._horizon() <= rest.horizon)
                and self._on_clock(rest, offer.source) and (rest.need == math.inf or self.budget.allowance(
                    self.sources[0][1].plain_seconds() if plain_s is None else plain_s,
                    self.sources[offer.source][1].out_s) < rest.need))

    def _quiet(self) -> bool:
        """Whether the draft model rests this step whatever it offers, so that the planner need not
        ask it: its offer is the room left in its one bucket, no more than its rest's limit while the
        room is no larger (_rests checks that, with its offer taken at that limit). An n-gram lookup's
        offer changes with every token: it is asked at every step, and where it offers nothing the
        step is plain at once. A rest found holding in full is then taken on its clock alone
        (_on_clock) for up to QUIET_STEPS steps while the room is no larger: what else _rests reads
        moves only as plain steps move an average, or in a hybrid with the gap since the lookup's last
        run (the horizon: a rest that depends on it is checked in full every step). Where a step takes
        milliseconds, a full check at every step is a share of its time (scripts/results/HISTORY.md,
        "The planner's work on a plain step cut again")."""
        rest = self._resting.get((self._model, 0))
        if rest is None:
            return False
        calm = rest is self._calm and self._calm_steps > 0
        if calm and self._room <= rest.room and self._on_clock(rest, self._model):
            self._calm_steps -= 1
            return True
        quiet = self._rests(Choice(self._model, rest.limit, rest.bucket, 0.0))
        self._calm = rest if quiet and rest.horizon == math.inf else None
        self._calm_steps = QUIET_STEPS
        return quiet

    def _on_clock(self, rest: Resting, source: int) -> bool:
        """Whether source's rest still holds by the clock: a fraction of the generation's seconds
        since its pricing does not yet cover that pricing, and the allowance past its grace
        (ExploreBudget) does not yet fit a probe the budget denied it (_rests)."""
        elapsed, sat_out = self.budget.elapsed, self.sources[source][1].out_s
        return (rest.fraction * (elapsed - rest.since) < rest.cost
                and (rest.need == math.inf or self.budget.fraction * max(elapsed, sat_out) < rest.need))

    def _rest(self, priced: Sequence[Choice], chosen: int | None, seconds: dict[int, float],
              best_rate: float) -> None:
        """Keep which priced sources lost this step (see _rests) to the best known choice's best_rate
        tokens/s; the chosen one is not resting. What a pricing takes is the lower median of the
        source's last PRICINGS_KEPT pricings on this machine (its tracker keeps them across
        generations and processes), once there are two: a pause of the process (a garbage collection,
        a page fault) only ever adds time, and one held-up pricing taken alone would rest its source
        1/PRICE_FRACTION times the delay; the least, with warm caches short steps seldom leave,
        understates it. A choice that loses pricing after pricing rests twice as long after each, up
        to REST_BACKOFF_MAX times: priced again with nothing drafted, nothing judged in its favour
        (_settle) and its offer no better, it loses again. Winning, any draft, or a followed run of its
        guesses all taken starts it over; one that came close (resting at ε) is priced at ε's pace."""
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

    def _probe(self, offer: Choice, known: Choice, plain_s: float) -> Choice:
        """The γ ≤ offer's limit with the most optimistic tokens/s (_hope), if that beats the best
        known choice (known; its rate r_best) by the tracker's min_gain and its predicted loss
        (_probe_loss) fits the budget (rate 0 where none does); one token while the drafter's cost
        is unmeasured, so that a draft dearer than predicted can cost at most one token's drafting
        more than the budget allowed; where none that could win fits, a narrower probe may measure
        what keeps them out (_narrow_probe). It is priced only for the γ that could be taken: a
        drafter that cannot beat the known choice even optimistically, as on text it does not draft
        well, costs the step one estimate, not three."""
        tracker, r_best = self.sources[offer.source][1], known.rate
        followed = known.source is None  # the step would be plain
        rates, width = self._hope(offer, known.source != self._ngram)
        floor = r_best * (1 + tracker.min_gain)
        best = Choice(offer.source, 0, offer.bucket, 0.0)
        hope_best = max(rates[1 : offer.gamma + 1], default=0.0)
        # a wider offer of the same bucket loses too where no width beyond this one beats the best known choice
        covers = width if max(rates[offer.gamma + 1 :], default=0.0) <= r_best else offer.gamma
        # (kept before any return: a source another's probe beats rests by it, _rest)
        self._lost[offer.source] = Lost(math.inf, hope_best >= r_best * (1 - tracker.min_gain), covers)
        if followed and self._text_owed(offer.source):  # this text measured as part of the intake
            return best._replace(gamma=1, rate=max(rates[1], floor))
        if hope_best <= floor:
            remeasure = self._remeasure(offer, known, plain_s)
            return best._replace(gamma=1, rate=max(rates[1], 1e-300)) if remeasure else best
        loss = self._probe_loss(offer, r_best)
        if tracker.draft_s.value is None:  # ranked by what it may bring, run as one token
            affordable = self._affords(offer.source, loss(1), plain_s) or (followed and self._entry_paid(offer.source))
            return best._replace(gamma=1, rate=max(rates[1:])) if affordable else best
        for gamma in range(1, self._probe_cap(offer) + 1):
            if rates[gamma] > max(best.rate, floor) and self._affords(offer.source, loss(gamma), plain_s):
                best = Choice(offer.source, gamma, offer.bucket, rates[gamma])
        if best.gamma:
            return best
        gamma = self._narrow_probe(offer, rates, known, loss, plain_s)
        return best._replace(gamma=gamma, rate=hope_best) if gamma else best

    def _beyond_known(self, probe: Choice | None, best: Choice) -> Choice | None:
        """probe, or where the best known choice drafts from the same source up to its whole offer
        (_stop_decides), that offer's draft with the probe's stop rule where the probe's own γ would
        reach a verify size not yet measured (which the known step's rule, reading the measured
        slope, may never draft to), else none: a probe no wider than that drafts less than the known
        step does."""
        if probe is None or probe.source != best.source or not self._stop_decides(best.source):
            return probe
        widest = max(self.sources[best.source][1].verify.points, default=0)
        return probe._replace(gamma=best.gamma) if probe.gamma + 1 > widest else None

    def _probe_cap(self, offer: Choice) -> int:
        """The most an n-gram probe may draft: PROBE_GROWTH times the most guesses of one draft its
        tracker has had accepted (1 before any). A copy breaks where the reply leaves its source, and
        a probe that meets the break early pays its whole verify for a token or two: where a verify
        row costs a good share of a plain step (a CPU), a wide one loses many plain steps, past what
        the budget allows (ExploreBudget bounds what a probe is predicted to lose, not its worst case).
        Grown by doubling, a probe risks at most twice what copies have shown they reach, and a copy
        that pays costs a verify or two more on its way to its full width (README, "n-gram probes
        grown by doubling"). A draft model's probes keep their offer: its γ is capped and its stop
        rule ends them."""
        if offer.source != self._ngram:
            return offer.gamma
        reached = self.sources[offer.source][1].positions.longest_accepted()
        return min(offer.gamma, max(1, PROBE_GROWTH * reached))

    def _hope(self, offer: Choice, followed: bool) -> tuple[list[float], int]:
        """The optimistic tokens/s of each γ up to the widest offer the pricing covers (_widest), and
        that width. Where the step would otherwise be plain or the draft model's (followed), the
        lookup's guesses in a bucket already judged are followed along it for free (_shadow_step),
        so the hope for its first SHADOW_DEPTH guesses is their point estimate: only what other
        steps cannot measure, the verify's cost and deeper guesses, is worth a probe."""
        tracker, switch = self.sources[offer.source][1], self._switches(offer.source)
        # where the step would not be the lookup's, its guesses are followed along it (_shadow_step)
        shadowed = followed and offer.source == self._ngram and tracker.judged(offer.bucket)
        hope = tracker.estimate(offer.bucket, True, switch, followed=SHADOW_DEPTH if shadowed else 0)
        width = self._widest(offer)
        hope_tokens, hope_s = hope.tokens(width), hope.seconds(width)
        return [hope_tokens[g] / max(hope_s[g], 1e-300) for g in range(width + 1)], width

    def _probe_loss(self, offer: Choice, r_best: float, draft_s: float | None = None,
                    paced: float = 1.0) -> Callable[[int], float]:
        """A probe's predicted loss at each γ ≤ offer's (ExploreBudget): its catch-up and its seconds
        less its tokens at r_best. Priced by the point estimate, its tokens by the cautious
        acceptance, with the first width past the widest measured no dearer than the widest, as the
        step's stop rule drafts (CostTracker.draft_stop): along the measured slope, where two rows
        cost two plain steps, no probe past one token would ever fit the budget's grace; and wider
        ones no cheaper a row than the widest measured (VerifyCurve.next_width), so that the loss the
        budget admits bounds what the probe may lose. draft_s: the draft's cost instead of the
        tracker's; paced: what its catch-up's measured seconds are read at (a re-measure's, _remeasure)."""
        tracker, switch = self.sources[offer.source][1], self._switches(offer.source)
        point = tracker.estimate(offer.bucket, switch=switch, probe=True)
        point = point if draft_s is None else point._replace(draft_s=draft_s)
        point_tokens = point.tokens(offer.gamma, tracker.cautious_acceptance(offer.bucket))
        point_s = point.seconds(offer.gamma)
        catch_up = paced * self._catch_up_s(offer.source)
        return lambda gamma: catch_up + point_s[gamma] - point_tokens[gamma] / r_best

    def _narrow_probe(self, offer: Choice, rates: Sequence[float], known: Choice,
                      loss: Callable[[int], float], plain_s: float) -> int:
        """The γ of a probe where the budget fits none that could win (0: none) against the best known
        choice. The first size past the widest measured is probed alone (_stepping_stone) unless the
        best known choice already drafts as wide. A draft cost that rests on too few steps to be
        trusted (CostTracker.optimistic_draft_s) is measured again by a one-token probe, its loss
        priced at the cost a stall may have hidden in it: priced at the cost as measured, a wider
        probe may never fit a generation's budget, nor, where a step decodes a row beyond its
        guesses, this one, and a cost a stall inflated would then stand for good. What it may lose
        beyond the budget is its rows at the cost as measured, and it is taken only until the cost
        is trusted (TRUSTED_SAMPLES drafting steps over the tracker's life). An n-gram match bucket
        never judged gets a one-token probe the budget does not decide (_first_look)."""
        tracker = self.sources[offer.source][1]
        step = self._stepping_stone(tracker, offer, rates, known.rate * (1 + tracker.min_gain))
        if known.gamma < step <= self._probe_cap(offer) and self._affords(offer.source, loss(step), plain_s):
            return step
        if not tracker.cost_trusted() and self._affords(
                offer.source, self._probe_loss(offer, known.rate, tracker.optimistic_draft_s())(1), plain_s):
            return 1  # measures the draft's cost again
        return 1 if self._first_look(offer) or self._remeasure(offer, known, plain_s) else 0

    def _remeasure(self, offer: Choice, known: Choice, plain_s: float) -> bool:
        """Whether offer's source, a draft model whose measured cost keeps it out, is measured again by
        a one-token probe (a re-measure): where the step would be plain and a draft row measured no
        cheaper than a plain step of the target, or the draft's costs measured where the target's
        one-row decode took more than STALL_FACTOR times what it takes now (budget.pace). No draft
        that pays costs the first: a stall set it (a stretch of stalled decodes in a process's first
        drafting steps fills the first samples' median, and every probe that would measure it again
        is then priced by it, out of the budget, for good), or the draft runs where the target does
        not. The second is a stretch that stalled the target too, and set the verifies measured with
        the draft: a row cheaper than a plain step, but a 2-row verify that, untrusted beside the
        plain step alone, the hope reads at two plain steps, so that no probe could win. Priced at
        the machine's pace now (budget.pace: a row and a catch-up as measured, times the plain
        step's seconds now over its seconds then, where that is less), and a row no dearer than a
        plain step. Measured again, a decode far cheaper than its average starts that over
        (timings.Seconds). The budget funds it as any probe, with the seconds the drafter sat out
        (ExploreBudget), at no less than the last re-measure lost: a draft that really costs that
        much is measured again at ε of the time it sits out."""
        tracker = self.sources[offer.source][1]
        draft = tracker.draft_s.value
        if offer.source != self._model or known.source is not None or draft is None:
            return False
        plain, paced = tracker.plain_seconds(), pace(tracker)
        if draft < plain and paced * STALL_FACTOR >= 1.0:
            return False
        price = self._probe_loss(offer, known.rate, min(draft * paced, plain), paced)(1)
        if not self._affords(offer.source, max(price, tracker.remeasure_loss), plain_s):
            return False
        self._remeasures.add(offer.source)
        return True

    @staticmethod
    def _stepping_stone(tracker: CostTracker, offer: Choice, rates: Sequence[float], floor: float) -> int:
        """The γ whose verify is the first size past the widest measured, where a wider γ of the offer
        hopes to beat floor and this one does not, in a bucket already judged (a bucket never judged has
        its first look, _first_look); 0 where there is none. A probe that only measures the next size:
        beyond the widest measured size a probe's loss is priced no cheaper a row than that size
        (VerifyCurve.next_width), so where that size came out slow (a stall), every wider γ that could
        win is priced out of the budget, and the next size, cheap to try but unable to win alone, would
        never be tried. Measured, it prices the wider ones by its own cost a row
        (scripts/results/HISTORY.md, "A probe that only measures the next verify size")."""
        gamma = max(tracker.verify.points, default=0)
        if not 0 < gamma < offer.gamma or rates[gamma] > floor or not tracker.judged(offer.bucket):
            return 0
        return gamma if max(rates[gamma + 1 : offer.gamma + 1], default=0.0) > floor else 0

    def _widest(self, offer: Choice) -> int:
        """The widest offer the n-gram lookup may make in offer's bucket for the rest of the generation
        (its cap, within the room; a draft model's offer is the room, which only shrinks): how wide
        _probe prices its hope, so that a rest it earns holds while later matches in the bucket
        reach further (_rests). The lookup's offer is where its match's occurrence continues, up to
        the context's end, so one bucket's offers grow along a reply, and each wider one would
        otherwise be priced again to lose again."""
        if offer.source != self._ngram:
            return offer.gamma
        return max(offer.gamma, min(cap_of("ngram", self.config), self._room))

    def _first_look(self, offer: Choice) -> bool:
        """Whether offer is the n-gram lookup's first at a match bucket no step has judged (here or in
        the plans loaded), and this generation has had no such look from it yet: a one-token probe is
        then taken whatever the budget says, its loss charged as any probe's. A bucket is a kind of
        match (a copy reaching back 16 tokens, a phrase that merely recurs), and what the lookup learnt
        of one says little of another: a long copy met after short phrases had spent the budget would
        otherwise never be tried. So beyond ε a source may lose at most one such probe a generation
        (one verify row beyond a plain step), and at most one per bucket over a tracker's life."""
        return (offer.source == self._ngram and not self._looked
                and not self.sources[offer.source][1].judged(offer.bucket))

    def _affords(self, source: int, loss: float, plain_s: float) -> bool:
        """Whether source's budget fits a probe predicted to lose `loss`; where not, keep the least
        allowance a denied probe of its pricing needs (_rests)."""
        if self.budget.allows(source, loss, plain_s, self.sources[source][1].out_s):
            return True
        lost, need = self._lost[source], self.budget.needs(source, loss)
        if need < lost.need:
            self._lost[source] = lost._replace(need=need)
        return False

    def _entry_paid(self, source: int) -> bool:
        """Whether source is a draft model made ready for this generation (loaded, the prompt taken
        in) whose cost is still unmeasured. Its one-token probe is then taken whatever the budget says,
        where the step would otherwise be plain (_probe), and not charged to it: the entry was paid to
        learn that cost, and the probe is what learns it. Denied, the draft would stay unmeasured and
        every later process of the setup would pay the entry again (warm start only leaves out a
        draft measured not to pay); charged, where a 2-row verify costs more than the budget's grace,
        it would leave no room for the next probe, and the draft would stay at one token for the
        generation. Where the best known choice drafts (a hybrid's lookup copying), the probe would
        displace that step's tokens, a loss the entry did not pay for: it waits for a plain step, or
        is taken where the budget fits it."""
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
