"""What the planner learns from a step: record() teaches the trackers what the step measured (its
verify, the drafting source's costs and acceptance, a tree's siblings, a handoff's copy, a hybrid's
catch-ups) and charges an exploratory step's loss to the budget; the n-gram lookup's guesses are
followed along the steps it does not draft, at no cost (Planner._shadow_step); loads and prefills
are kept (note_load, note_prefill). Methods of Planner (planner.py), which keeps their state."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from ..drafters import STEP_DECODE, Proposal
from ..timings import RETURN_ROWS
from ..treeplan import tree_outcome
from .plans import Choice, Plan

SHADOW_DEPTH = 8  # the most guesses of the lookup followed at once (Planner._shadow_step)


class Shadow(NamedTuple):
    """The n-gram lookup's guesses at a step it did not draft, followed along the tokens emitted from
    there on (Planner._follow): ids[i] guesses the i-th token from the step's on; judged of them
    matched. offset: where they continue a draft of the lookup's that was accepted whole (its
    guesses beyond the draft, from its verify's last token on), the draft's length; else 0."""

    ids: list[int]
    bucket: int
    judged: int = 0
    offset: int = 0


class Recording:
    """Planner's learning from what each step measured (see the module docstring); its state is
    Planner's: sources, budget, _explored, _shadow, _resting, _seen, _since_model, _runs and the rest."""

    def note_load(self, i: int) -> float:
        """Keep what loading source i's model took, if it was just loaded (by a prefill or a first
        propose); return those seconds (0.0 if it was not)."""
        drafter, tracker = self.sources[i]
        take = getattr(drafter, "take_load_s", None)  # a drafter with a model to load
        seconds = take() if take is not None else 0.0
        if seconds:
            tracker.load_s.add(seconds)
        return seconds

    def note_intake(self, rows: int) -> None:
        """The target took in `rows` of the prompt in one decode before the first step: where wider
        than one row, the one-row decodes right after it are the return from it, not steady ones
        (timings.ReturnCost.intake)."""
        if rows > 1:
            for _, tracker in self.sources:
                tracker.after_wide.intake()

    def note_prefill(self, i: int) -> None:
        """Keep what source i's prefill took and, apart, a load it made (a drafter that has no model
        to load reports neither)."""
        drafter, tracker = self.sources[i]
        self.note_load(i)
        if hasattr(drafter, "prefill_s"):
            tracker.prefill_s.add(drafter.prefill_s)
            if drafter.prefill_tokens > STEP_DECODE:  # a batch like a catch-up's, without the last row's logits
                tracker.add_catchup(drafter.prefill_tokens, drafter.prefill_s)

    def _shadow_step(self, plan: Plan, offers: Sequence[Choice]) -> None:
        """Follow what the n-gram lookup offers at a step it does not draft (a plain step, or the
        draft model's) along the tokens emitted from there on: the lookup's acceptance, learnt
        without a verify. Every step emits tokens distributed as the target's own decoding (a plain
        step draws from p, its argmax at T=0; a draft's, by the p/q rule), and the lookup's guess x
        is one-hot, so the step emits x exactly as often as the p/q rule would accept x as a draft,
        min(1, p(x)/1): matching the emitted tokens against the guesses one by one, up to the first
        that differs, is a draft of the lookup judged by the rule, in distribution. Only one is
        followed at a time, and a lookup's own step ends it first, with what it judged so far (the
        drafts of that step are judged by their own verify, and counted once). So a match bucket
        whose guesses the target seldom takes is known as such without a probe, in a hybrid while
        its draft model drafts too, and one it takes is found by the steps that pass through it.
        The lookup's own step keeps its guesses beyond its γ (_beyond): where its draft is
        accepted whole they are followed on (_continue). Planning reads only what was emitted
        before the step, so the output's distribution is untouched."""
        if plan.source is not None and plan.source == self._ngram:
            if self._shadow is not None and not self._shadow.offset:  # what it judged so far, every one taken
                self._settle(self._shadow.judged, self._shadow.judged)
            depth = max(SHADOW_DEPTH, plan.gamma + 1)
            self._beyond = self.sources[self._ngram][0].last_ids[plan.gamma:plan.gamma + depth]
        elif self._shadow is None and self._ngram is not None:
            offer = next((c for c in offers if c.source == self._ngram), None)
            ids = self.sources[self._ngram][0].last_ids[:SHADOW_DEPTH] if offer is not None else []
            if ids:
                self._shadow = Shadow(ids, offer.bucket)

    def _continue(self, plan: Plan, proposal: Proposal, n_accepted: int, emitted: Sequence[int]) -> None:
        """Follow on the guesses the lookup offered beyond the draft of its step (_beyond) where the
        target took that draft whole. They are the rest of a longer draft of the same guesses whose
        first len(draft) were accepted, and the tokens emitted from the step's last one on judge them
        as that draft's verify would have, by the argument of _shadow_step. Counted at their positions
        beyond the draft (CostTracker.record_acceptance's offset), they measure the widths a copy
        taken whole would pay at without a probe, where the budget may have no room for a probe that
        could meet the copy's break. A later step of the lookup's own does not end them: its drafts
        count from position 1 in their own proposal, these from the draft's length in the earlier
        one. One set of guesses is followed at a time."""
        beyond, self._beyond = self._beyond, None
        if (beyond and self._shadow is None and proposal.parents is None
                and n_accepted == len(proposal.ids) == plan.gamma and len(emitted) > n_accepted):
            self._shadow = Shadow(beyond, plan.bucket, offset=n_accepted)
            self._follow(emitted[n_accepted:])

    def _follow(self, emitted: Sequence[int]) -> None:
        """Judge the followed guesses (_shadow_step) by the tokens a step emitted, in order."""
        for token in emitted:
            shadow = self._shadow
            if shadow is None:
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
        self.sources[self._ngram][1].record_acceptance(judged, accepted, bucket, self._shadow.offset)
        rest = self._resting.get((self._ngram, bucket))
        if rest is not None and accepted == judged == len(self._shadow.ids):
            self._resting[self._ngram, bucket] = rest._replace(losses=0)
        self._shadow = None

    def record(self, plan: Plan, proposal: Proposal, n_accepted: int, draft_s: float, verify_s: float,
               overhead_s: float, path: Sequence[int] = (), emitted: Sequence[int] = ()) -> None:
        """Teach the trackers what the step measured: every source the verify seconds of its width
        (a plain step also the overhead), the drafting source its costs and acceptance; and charge
        an exploratory step's loss to the budget. A tree (path: its accepted nodes) teaches its
        chain's acceptance, its siblings' and the cost of its full width. emitted: the tokens the step
        emitted, which judge the lookup's guesses being followed (_shadow_step)."""
        if self._shadow is not None and (plan.source != self._ngram or self._shadow.offset):
            self._follow(emitted)
        if plan.source is not None and plan.source == self._ngram:
            self._continue(plan, proposal, n_accepted, emitted)
        if plan.source is None:
            self._record_plain(draft_s, verify_s, overhead_s)
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
        decoded = n or proposal.rows  # (a draft model decodes before its stop rule may decline a token)
        caught_up, extra_s = (self._record_catch_up(plan, proposal, n_accepted, emitted, copied) if decoded
                              else (0, 0.0))
        own_s = draft_s - load_s - extra_s  # drafting this step's tokens
        if n:
            self._resting.clear()  # what the step measured moves every source's estimates
        seconds, charged = draft_s + verify_s + overhead_s, None
        if n and plan.source == self._ngram and not self.sources[plan.source][1].judged(plan.bucket):
            self._looked = True  # its first look at the bucket (_first_look), whatever chose it
        if self._explored is not None:  # (asked before the trackers below record its draft cost)
            charged = self._charged(plan, proposal, n_accepted, (seconds, verify_s, own_s), emitted, chain, copied)
        self.budget.charge(seconds, charged)
        self._sat_out(plan.source if decoded else None, seconds)
        self._probe_wide = self._explored.source if self._explored is not None and n else None
        self._record_costs(plan, proposal, n_accepted, (own_s, verify_s, overhead_s), width, emitted, cap)
        if caught_up:  # after the step's own draft cost is in: a catch-up is priced beyond it
            batch = caught_up - int(proposal.first_apart)  # the tokens its batch decoded
            self.sources[plan.source][1].add_catchup(batch, proposal.catchup_s)

    def _record_plain(self, draft_s: float, verify_s: float, overhead_s: float) -> None:
        """Record a plain step: the target's one-token verify, the same for every source."""
        self._runs.note(0, 1)
        seconds, explored = draft_s + verify_s + overhead_s, self._explored
        # plain decoding measured again in place of a drafting choice (_plain_again) is its source's probe
        loss = None if explored is None else (explored.source, seconds - 1.0 / explored.r_best)
        self.budget.charge(seconds, loss)
        self._sat_out(None, seconds)
        self._returned(verify_s)
        for _, tracker in self.sources:
            tracker.record_verify(1, verify_s, overhead_s)

    def _sat_out(self, drafted: int | None, seconds: float) -> None:
        """Count a step's seconds as sat out by every source but the one whose draft it decoded
        (drafted; None: no draft decoded), whose count starts over (CostTracker.out_s)."""
        for i, (_, tracker) in enumerate(self.sources):
            tracker.out_s = 0.0 if i == drafted else tracker.out_s + seconds

    def _returned(self, verify_s: float) -> None:
        """Charge an exploratory drafting step's source what its verify cost the one-row decodes
        after it (timings.ReturnCost), as each is measured: verify_s beyond the steady one-row cost.
        A probe that drafted on into a copy leaves none behind, and is charged none."""
        if self._probe_wide is None:
            return
        tracker = self.sources[0][1]  # (its after_wide counts the one-row decodes since the probe's verify)
        if tracker.after_wide.age >= RETURN_ROWS:
            self._probe_wide = None
        elif 1 in tracker.verify:
            self.budget.charge(0.0, (self._probe_wide, verify_s - tracker.verify.seconds(1)))

    def _record_catch_up(self, plan: Plan, proposal: Proposal, n_accepted: int, emitted: int,
                         copied: int) -> tuple[int, float]:
        """(tokens, seconds) of the catch-up a drafting step's draft began with: the tokens it decoded
        (0 for none), and its seconds beyond the step's first decode (_beyond_first_decode). Keeps
        where the source now stands, and shares the catch-up among the steps it made up for
        (_charge_switches)."""
        behind = self._behind(plan.source)
        caught_up = behind if proposal.catchup_s > 0 and behind > STEP_DECODE else 0
        extra_s = self._beyond_first_decode(plan.source, proposal, caught_up)
        self._seen[plan.source] = self._length + n_accepted
        self._charge_switches(plan.source, extra_s, caught_up, emitted)
        if copied:  # the model catches up on a handoff's copy as on an n-gram step's tokens
            self._since_model[self._ngram] = [emitted - n_accepted]
        return caught_up, extra_s

    def _record_costs(self, plan: Plan, proposal: Proposal, n_accepted: int, measured: tuple[float, float, float],
                      width: int, emitted: int, cap: int | None) -> None:
        """Teach every source the verify of the step's width, and the drafting source the step's
        costs and acceptance (a step that drafted nothing is a plain step's verify and overhead to
        the others); measured: the seconds of the step's own drafting, of its verify and its overhead."""
        own_s, verify_s, overhead_s = measured
        n = len(proposal.ids)
        for i, (_, tracker) in enumerate(self.sources):
            if i == plan.source:
                # A load, and a catch-up over tokens generated while not drafting, are one-offs, not
                # the draft's per-token cost.
                tracker.record(n, n_accepted, _bounded_by_batch(own_s, proposal), verify_s, overhead_s,
                               proposal.confidences, plan.bucket, width=width, emitted=emitted, cap=cap,
                               rows=proposal.rows, first_look=getattr(plan.stop, "first", None))
            elif not n:  # a step its stop rule let draft nothing: a plain step's verify for the others
                tracker.record_verify(1, verify_s, overhead_s)
            else:
                tracker.record_width(width, verify_s, own=False)

    def _charged(self, plan: Plan, proposal: Proposal, n_accepted: int, timed: tuple[float, float, float],
                 emitted: int, chain: bool, copied: int) -> tuple[int, float]:
        """What an exploratory step charges its source's budget: (source, its loss, _loss); timed: the
        step's seconds, its verify's and its own drafting's. An entry's probe is the entry's
        (_entry_paid, _text_owed): it charges nothing."""
        seconds, verify_s, own_s = timed
        probe_s, probe_verify_s, probe_emitted = seconds, verify_s, emitted
        if copied:  # a probe is judged by the model's own draft: the copy's tokens are the lookup's gain
            probe_verify_s = self.sources[plan.source][1].verify_seconds(len(proposal.ids) + 1)
            probe_s, probe_emitted = seconds - verify_s + probe_verify_s, n_accepted + 1
        loss = self._loss(probe_s, probe_emitted, proposal, n_accepted, probe_verify_s, own_s, chain)
        source = self._explored.source
        if self._explored.remeasure:  # what the next re-measure's sat-out seconds must cover (_remeasure)
            self.sources[source][1].remeasure_loss = loss
        return source, 0.0 if self._entry_paid(source) or self._text_owed(source) else loss

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
        + 1 tokens in this step's seconds less the drafting beyond m, with the verify of m + 1 as the
        tracker prices it. Where the draft ended by m, the step was the known one and lost nothing:
        only what the probe did beyond the known step is counted, not the luck of the step both would
        have run. A model draft that handed over to a copy (Handoff) is judged as its own draft alone,
        verified at its own width (record): the copy is the lookup's, which an n-gram step would have
        drafted as well."""
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
        since then its tokens' share (emitted: what the step emitted), shared by tokens, not by steps:
        that step cost that much more than its verify. The tokens plain steps emitted in between bear
        their share too, charged to no one: plain decoding leaves the model as far behind. An
        exploratory step's share is part of what it lost (ExploreBudget), charged to its source's
        budget now, as its price counted it (CostTracker.estimate's switch)."""
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
                        first_apart=proposal.first_apart, rows=proposal.rows), min(n_accepted, own)

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
                        proposal.catchup_s, first_apart=proposal.first_apart, rows=proposal.rows), n_chain


def _bounded_by_batch(own_s: float, proposal: Proposal) -> float:
    """A step's drafting seconds as its tracker keeps them. Where the catch-up's last token was decoded
    apart (Proposal.first_apart), the batch before it decoded two tokens or more, which costs at least
    what one costs alone: a step whose decodes took longer each than that whole batch was held up by
    something else (a page fault, another process), and that one sample, the first of the draft's
    cost, would keep the draft out for the rest of the process. It is counted at the batch's seconds
    a token."""
    if proposal.first_apart and proposal.catchup_s > 0:
        return min(own_s, (proposal.rows or len(proposal.ids)) * proposal.catchup_s)
    return own_s
