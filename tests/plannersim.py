"""A simulator of the decode loop for the real Planner: no models, no clocks.

A scenario is a list of regions of a reply (a copy of earlier text, prose): in each, what the n-gram
lookup offers (how many tokens and how far its match reaches back) and how likely each drafter's
guesses are to be accepted. A step's seconds come from a synthetic verify curve and a draft cost per
token; acceptance is drawn from a seeded generator, one draw per position of the reply (common random
numbers: planners that decide differently face the same reply), a step's guesses accepted up to the
first rejection. Plain decoding of the same tokens costs verify(1) per token: the simulated ratio is
(plain seconds) / (simulated seconds) for the same number of tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Sequence

import numpy as np

from localspec.config import GenerationConfig
from localspec.drafters import NO_PROPOSAL, Proposal, one_hot
from localspec.planner import Planner
from localspec.planning.budget import ExploreBudget
from localspec.tracker import CostTracker
from localspec.sampling import SamplingParams

GREEDY = GenerationConfig(max_tokens=10_000, sampling=SamplingParams(temperature=0))


def curve(points: dict[int, float], scale: float = 1.0) -> Callable[[int], float]:
    """Seconds to verify k tokens: piecewise linear through points (k -> seconds), beyond the last
    along the last segment; every value times scale."""
    ks = sorted(points)

    def seconds(k: int) -> float:
        hi = next((i for i, n in enumerate(ks) if n >= k), len(ks) - 1)
        lo = max(hi - 1, 0)
        (k0, k1) = ks[lo], ks[hi]
        t0, t1 = points[k0], points[k1]
        return scale * (t1 if k0 == k1 else t0 + (t1 - t0) * (k - k0) / (k1 - k0))
    return seconds


# The light pair on the 2-core CPU, from llama-bench: pp4 50 tok/s, pp8 45, pp16 81 and 28 tok/s plain;
# 2 and 32 in between. Not monotone: 16 tokens verify in about the time of 8.
CPU_LIGHT = {1: 1 / 28, 2: 0.050, 4: 4 / 50, 8: 8 / 45, 16: 16 / 81, 32: 0.36, 64: 0.70}
GPU_FLAT = {1: 0.010, 8: 0.0105, 16: 0.011, 64: 0.016}
# The F16 1.5B target on the 2-core EPYC (README), its plain step at the fast end of what a process
# measures: a 2-row verify costs 1.6 plain steps, 5 rows 2.0. With the 0.5B draft at 0.32 of a plain
# step a token, a 1-token draft never pays where a 4-token one does.
CPU_F16 = {1: 0.074, 2: 0.121, 3: 0.135, 4: 0.142, 5: 0.150, 6: 0.166, 7: 0.182, 8: 0.198, 9: 0.213, 16: 0.33}
# The light target on the 2-core Xeon (AVX-512 VNNI, no AMX), as bench.py measured it on chat prose:
# a 2-row verify costs 1.6 plain steps, 4 rows less than 3; 16 rows about 5.
XEON_LIGHT = {k: ms / 1e3 for k, ms in {1: 77, 2: 121, 3: 163, 4: 145, 5: 193, 6: 238, 8: 306, 16: 374,
                                        20: 500}.items()}
# The F16 target on the 2-core Xeon as a bench.py run measured it on chat prose (a hybrid's verifies):
# a plain step dearer than a 2-row verify (one row takes another kernel), so the slope from the
# narrowest size to a 9-row verify is nearly flat, where 36 rows cost three times 9.
XEON_F16 = {k: ms / 1e3 for k, ms in {1: 299, 2: 216, 3: 239, 4: 248, 5: 296, 6: 282, 7: 344, 9: 370,
                                      36: 1144}.items()}

# The light target on the 2-core EPYC, measured with Context.decode (README): the cost steps with
# llama.cpp's tiles (12 and 16 rows cost the same, one row past 16 costs 18% more) and a row keeps
# getting cheaper up to about 128 rows.
EPYC_TILED = {k: ms / 1e3 for k, ms in {1: 31, 2: 58, 3: 84, 4: 102, 5: 123, 8: 225, 9: 242, 12: 278, 16: 277,
                                        17: 326, 24: 418, 32: 477, 40: 616, 48: 666, 49: 706, 56: 795, 64: 798,
                                        65: 871, 80: 993, 96: 1153, 97: 1218, 112: 1318, 128: 1494}.items()}

# The light target on the H200, every layer on the GPU, as bench.py measured it on prose and copies
# (scripts/results/HISTORY.md, "The H200 again"): a 2-row verify costs 2.8 plain steps, and a row beyond costs little.
H200_LIGHT = {k: ms / 1e3 for k, ms in {1: 1.81, 2: 5.0, 4: 5.5, 8: 5.6, 16: 8.0, 40: 9.4, 80: 15.6, 112: 19.8}.items()}
# The same on the H200 a week later, with the output buffer sized at load (bench_rpc_costs.py --local:
# each width's decode alternating with one-row decodes, as verifies come between plain steps), and
# the seconds the first and second one-row decodes after a wider one took beyond a steady one there
# (about 2.2 ms together: bench.py's one-row decodes, scripts/results/HISTORY.md, "The H200 a third time").
H200_ALTERNATING = {k: ms / 1e3 for k, ms in {1: 1.78, 2: 3.5, 3: 4.7, 4: 3.9, 6: 4.0, 8: 6.6, 12: 5.7, 16: 6.1,
                                              24: 6.9, 32: 7.5, 40: 8.3}.items()}
H200_AFTER_WIDE = (1.2e-3, 1.0e-3)


def rejected_first_probes(t: CostTracker) -> CostTracker:
    """t after a draft model's first two probes on the F16 target's costs (a second verify row costs
    half a plain step, a draft row an eighth: only several guesses in a row pay), one-guess drafts
    both rejected, and a lookup's probe that measured a 3-row verify."""
    for verify_s in (0.122, 0.117):
        t.record(1, 0, draft_s=0.0096, verify_s=verify_s, overhead_s=0.0, confidences=(0.5,), cap=8, rows=1,
                 first_look=0.5)
    t.record_width(3, 0.1441)
    return t


class Region(NamedTuple):
    """A stretch of the reply. ngram_every: the lookup has a match at one position in this many (0:
    never); match: how far the match reaches back at the region's start (a copy: it grows by one per
    token); ngram_accept and model_accept: each guess's chance of acceptance; sure: the share of its
    positions where the draft model is sure instead (SURE: its confidence and chance of acceptance
    there), in runs of SURE_RUN positions on average, as a phrase the draft knows runs on (which
    positions: drawn per position of the reply, as acceptance is)."""

    length: int
    ngram_every: int
    match: int
    copy: bool
    ngram_accept: float
    model_accept: float
    sure: float = 0.0


SURE = 0.97
SURE_RUN = 5.0

COPY = [Region(12, 0, 0, False, 0.0, 0.6), Region(148, 1, 2, True, 0.98, 0.85)]
PROSE = [Region(128, 4, 2, False, 0.3, 0.6)]
# An edit: new text, the source copied with changes in between (copies of 40 and 50 tokens)
EDIT = [Region(30, 4, 2, False, 0.3, 0.6), Region(40, 1, 2, True, 0.95, 0.85), Region(20, 4, 2, False, 0.3, 0.6),
        Region(50, 1, 2, True, 0.95, 0.85), Region(20, 4, 2, False, 0.3, 0.6)]
# Prose, then text whose long matches are wrong: it recurs in shape, not in words
FALSE_COPY = [Region(40, 0, 0, False, 0.0, 0.6), Region(88, 1, 2, True, 0.05, 0.6)]


@dataclass
class World:
    """Where the simulated reply is; what the drafters can offer there."""

    regions: Sequence[Region]
    pos: int = 0
    sure_at: list[bool] = field(default_factory=list)  # per position of the reply: the draft model sure (Region.sure)

    def draw_sure(self, draws: np.ndarray) -> None:
        """Where the draft model is sure, from one draw per position: a run of either kind ends at
        each position with the chance that gives sure runs SURE_RUN positions on average and the
        region's share of sure positions."""
        sure = False
        for p, u in enumerate(draws):
            share = self.region(p)[0].sure
            if not share:
                sure = False
            elif sure:
                sure = u >= 1 / SURE_RUN
            else:
                sure = u < share / (SURE_RUN * (1 - share)) if share < 1 else True
            self.sure_at.append(sure)

    def model_accept(self, pos: int) -> float:
        """The draft model's confidence at pos, and its guess's chance of acceptance there."""
        sure = pos < len(self.sure_at) and self.sure_at[pos]
        return SURE if sure else self.region(pos)[0].model_accept

    def region(self, pos: int | None = None) -> tuple[Region, int]:
        """The region at pos (by default the current position) and the position within it."""
        pos, start = self.pos if pos is None else pos, 0
        for r in self.regions:
            if pos < start + r.length:
                return r, pos - start
            start += r.length
        return self.regions[-1], pos - start

    def ngram_offer(self) -> tuple[int, int]:
        """(tokens the lookup offers, how far its match reaches back)."""
        r, at = self.region()
        if not r.ngram_every or (not r.copy and self.pos % r.ngram_every):
            return 0, 0
        if r.copy:
            return r.length - at, min(r.match + at, 64)
        return 6, r.match


@dataclass
class SimDrafter:
    """A drafter whose offers and acceptance come from the World; its guesses are dummies."""

    name: str
    world: World
    draft_s: float  # seconds per row a draft model decodes (per guess for the lookup)
    last_match: int = 0
    last_at: int = 0  # every match lies in the prompt: the scenarios say how far it reaches only
    accept: list[bool] = field(default_factory=list)
    owed: int = 0  # a draft model's row of its last guess, owed where that draft reached γ and was accepted whole
    full: bool = False  # whether the last proposal reached its γ

    def offer(self, context, k: int) -> int:
        if self.name == "model":
            return k
        n, self.last_match = self.world.ngram_offer()
        self.last_ids = [0] * min(n, k)  # the lookup's guesses: token 0 stands for each
        return min(n, k)

    def propose(self, context, k, rng: np.random.Generator, stop=None, branch=None, handoff=None) -> Proposal:
        """Guesses up to the offer, ended where the stop rule declines one. A draft model decodes rows
        as ModelDrafter does: the emitted token's before its first guess (paid where the rule then
        declines it), and each guess's but the last one a full γ leaves undecoded, decoded where it
        was accepted at this step's start (a 2-token batch, charged here as two rows)."""
        r, _ = self.world.region()
        ids, conf, most = [], [], min(k, self.offer(context, k))
        for i in range(most):
            a = self.world.model_accept(self.world.pos + i) if self.name == "model" else r.ngram_accept
            if stop is not None:
                if not stop.keep(i, a):
                    break
                conf.append(a)
            ids.append(0)
        self.full = bool(most) and len(ids) == most
        rows = (1 + len(ids) - self.full + self.owed) if self.name == "model" and most else 0
        self.owed = 0 if rows else self.owed
        return Proposal(ids, [one_hot(0)] * len(ids), tuple(conf), rows=rows) if ids or rows else NO_PROPOSAL

    def observe(self, n_accepted: int) -> None:
        pass

    def prefill(self, prompt) -> None:
        pass


class Result(NamedTuple):
    tokens: int
    seconds: float
    plain_seconds: float
    gammas: list[int]
    explored: int
    spent: float        # the budget's net measured loss of exploratory steps, all sources
    worst_over: float   # the most that a source's spent ever exceeded ε × max(elapsed, W × plain step)
    explored_by: dict[str, int] = {}  # exploratory steps by drafter kind

    @property
    def ratio(self) -> float:
        return self.plain_seconds / self.seconds


def generate(regions: Sequence[Region], kinds: Sequence[str], trackers: dict, verify: Callable[[int], float],
             draft_ratio: float, seed: int, config: GenerationConfig = GREEDY,
             stall: tuple[int, float] = (1, 1.0), slow_plain: tuple[int, float] = (0, 1.0),
             after_wide: Sequence[float] = (), intake_wide: bool = False,
             stretch: tuple[int, float, float] = (0, 1.0, 1.0)) -> Result:
    """One simulated generation of the whole scenario by the real Planner over drafters `kinds`
    (trackers: kept across generations, by kind, as a Pair keeps them). stall: (n, f): the
    generation's n-th drafting step takes f times its drafting seconds (the machine stalled);
    slow_plain: (n, f): its first n plain steps take f times their verify seconds; after_wide: the
    seconds the first, second, ... plain step after a drafting step takes beyond verify(1) (a GPU's
    one-row decodes after a verify, timings.ReturnCost); intake_wide: the first of those follow the
    prompt's intake too (a wide decode before the reply's first step); stretch: (n, f, g): its first n
    drafting steps take f times their drafting seconds and g times their verify's (a stalled stretch,
    as where a draft model's weights are paged in beside another process)."""
    world, rng = World(regions), np.random.default_rng(seed)
    n_tokens = sum(r.length for r in regions)
    luck = rng.random(n_tokens + 64)  # drafts may reach past the reply's end
    world.draw_sure(np.random.default_rng(seed + 10**6).random(n_tokens + 64))  # (luck's draws kept as they were)
    sources = [(SimDrafter(k, world, draft_ratio * verify(1) if k == "model" else 0.0),
                trackers.setdefault(k, CostTracker())) for k in kinds]
    planner = Planner(sources, config, ExploreBudget())
    planner.clock = lambda: 0.0  # no clocks: pricing takes no simulated time (Planner._rests)
    if intake_wide:
        planner.note_intake(40)  # (as SpeculativeDecoder._prefill tells it: a prompt of 41 tokens)
    seconds, gammas, worst, drafting, plain, since_wide = 0.0, [], -np.inf, 0, 0, 0 if intake_wide else len(after_wide)
    by: dict[str, int] = {}
    while world.pos < n_tokens:
        plan = planner.plan([], n_tokens - world.pos - 1)
        drafter = sources[plan.source][0] if plan.source is not None else None
        if planner.exploring is not None:
            by[kinds[planner.exploring]] = by.get(kinds[planner.exploring], 0) + 1
        proposal = drafter.propose([], plan.gamma, rng, plan.stop) if drafter else NO_PROPOSAL
        n_accepted = _accepted(len(proposal.ids), drafter, world, luck)
        if drafter is not None and drafter.name == "model":
            drafter.owed = int(drafter.full and n_accepted == len(proposal.ids))
        draft_s = (proposal.rows or len(proposal.ids)) * drafter.draft_s if drafter else 0.0
        if draft_s:
            drafting += 1
            draft_s *= stall[1] if drafting == stall[0] else 1.0
        stalled = bool(draft_s) and drafting <= stretch[0]
        draft_s *= stretch[1] if stalled else 1.0
        verify_s = verify(len(proposal.ids) + 1) * (stretch[2] if stalled else 1.0)
        if not proposal.ids:
            plain += 1
            verify_s *= slow_plain[1] if plain <= slow_plain[0] else 1.0
            verify_s += after_wide[since_wide] if since_wide < len(after_wide) else 0.0
            since_wide += 1
        else:
            since_wide = 0
        planner.record(plan, proposal, n_accepted, draft_s, verify_s, 0.0, emitted=_emitted(world, luck, n_accepted + 1))
        b = planner.budget
        worst = max([worst] + [spent - b.allowance(verify(1)) for spent in b.spent.values()])
        seconds += draft_s + verify_s
        gammas.append(len(proposal.ids))
        world.pos += n_accepted + 1
    spent = sum(planner.budget.spent.values())
    plain_s = world.pos * verify(1) + (sum(after_wide) if intake_wide else 0.0)  # (plain pays the intake's too)
    return Result(world.pos, seconds, plain_s, gammas, planner.explored, spent, worst, by)


def _emitted(world: World, luck: np.ndarray, n: int) -> list[int]:
    """The n tokens a step emits from the world's position: token 0, the lookup's guess, where a
    draft of it would be accepted there (by the position's own draw), else token 1."""
    return [int(luck[p] >= world.region(p)[0].ngram_accept) for p in range(world.pos, world.pos + n)]


def _accepted(n: int, drafter: SimDrafter | None, world: World, luck: np.ndarray) -> int:
    """Drafts accepted up to the first rejection. The draws belong to the reply's positions, not to
    the steps (common random numbers): planners that decide differently still face the same reply."""
    if not n:
        return 0
    r, _ = world.region()
    span = range(world.pos, world.pos + n)
    a = [world.model_accept(p) for p in span] if drafter.name == "model" else r.ngram_accept
    draws = luck[world.pos: world.pos + n] < np.asarray(a)
    return int(np.argmin(draws)) if not draws.all() else n


def run_set(regions: Sequence[Region], kinds: Sequence[str], verify: Callable[[int], float],
            draft_ratio: float = 0.5, n: int = 4, seed: int = 0, **kwargs) -> list[Result]:
    """n generations in a row with the same trackers (a prompt set in one process); kwargs:
    generate's."""
    trackers: dict = {}
    return [generate(regions, kinds, trackers, verify, draft_ratio, seed + i, **kwargs) for i in range(n)]


def set_ratio(results: Sequence[Result]) -> float:
    """Plain seconds over simulated seconds for the whole set."""
    return sum(r.plain_seconds for r in results) / sum(r.seconds for r in results)
