"""Real runs and what tune times in them: the target's verify cost per batch size, the controller's
time per step, a draft's time per decode, and the teacher-forced scores of a draft model."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Iterable, Sequence

import numpy as np

from ..config import GenerationConfig
from ..drafters import ModelDrafter, NGramDrafter, Proposal, StopRule, one_hot
from ..context import Context
from ..llama import Model
from ..planner import source_names
from ..tracker import CostTracker
from ..sampling import SamplingParams, distribution, greedy_token, top_probability
from ..session import Pair, make_sources
from ..speculative import Finished, SpeculativeDecoder
from ..stats import GenerationStats, pooled_verify
from ..treeplan import BranchRule
from .candidates import Candidate, load_draft
from .options import TuneOptions
from .replay import Costs, Run, overlap


class ProbeDrafter:
    """Proposes k copies of one token (q one-hot: exact like any drafter). The rule rejects them
    nearly always, so every step verifies k + 1 tokens: a way to time verifies in the real loop."""

    name = "probe"

    def __init__(self, token: int):
        self.token = token

    def propose(self, context: Sequence[int], k: int, rng=None, stop: StopRule | None = None,
                branch: BranchRule | None = None, handoff=None) -> Proposal:
        return Proposal([self.token] * k, [one_hot(self.token)] * k)

    def observe(self, n_accepted: int) -> None:
        pass

    def prefill(self, prompt: Sequence[int]) -> None:
        pass

    def offer(self, context: Sequence[int], k: int) -> int:
        return k


class TimedDrafter:
    """Forwards the drafter protocol to inner, and counts the seconds and the draft decodes its
    proposals take: a proposal of k costs k decodes, one stopped early (p-min) after i drafts i + 1
    (see ModelDrafter). The inner Proposal is returned as it is."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name
        self.seconds, self.decodes = 0.0, 0

    def propose(self, context: Sequence[int], k: int, rng=None, stop: StopRule | None = None,
                branch: BranchRule | None = None, handoff=None) -> Proposal:
        t0 = time.perf_counter()
        proposal = self.inner.propose(context, k, rng, stop, branch, handoff)
        self.seconds += time.perf_counter() - t0
        n = len(proposal.ids) - proposal.tail  # a handoff stops the draft after its last token, undecoded
        self.decodes += n if proposal.tail else k if n == k else n + 1
        return proposal

    def observe(self, n_accepted: int) -> None:
        self.inner.observe(n_accepted)

    def prefill(self, prompt: Sequence[int]) -> None:
        self.inner.prefill(prompt)

    def offer(self, context: Sequence[int], k: int) -> int:
        return self.inner.offer(context, k)


def generate_stats(target_ctx: Context, prompt: list[int], config: GenerationConfig, sources=()) -> GenerationStats:
    """One real generation through the controller; its stats (from the Finished that ends it)."""
    sources = list(sources) if config.gamma != 0 else []
    for item in SpeculativeDecoder(target_ctx, sources).generate(prompt, config):
        if isinstance(item, Finished):
            return item.stats
    raise AssertionError("a generation always ends with Finished")


def run_config(target_ctx: Context, prompt: list[int], kind: str, draft_ctx: Context | None, options: TuneOptions,
               gamma: int | None, i: int, state: dict | None = None, max_tokens: int | None = None) -> GenerationStats:
    """One real generation of a configuration, as generate runs it: drafter kind ('none', 'model',
    'ngram', 'hybrid') at γ (None: auto), seeded with options.seed + i (i < 0: a warm-up). state, one
    dict per configuration, keeps its n-gram index and cost trackers from one generation to the next,
    as a Pair keeps them; the sources are made by session.make_sources, as generate makes them."""
    config = options.config(gamma, options.seed + max(i, 0))
    config = replace(config, max_tokens=max_tokens or config.max_tokens)
    state = {} if state is None else state
    sources = make_sources(source_names(kind), draft_ctx, config, state.setdefault("trackers", {}),
                           state.setdefault("ngram", NGramDrafter(ends=target_ctx.model.is_eog)))
    return generate_stats(target_ctx, prompt, config, sources)


def run_drafter(target_ctx: Context, prompt: list[int], drafter, options: TuneOptions, gamma: int, i: int,
                max_tokens: int | None = None) -> GenerationStats:
    """One real generation at a fixed γ with a drafter of tune's own (a probe, a timed draft); γ 0: plain."""
    config = options.config(gamma, options.seed + max(i, 0))
    config = replace(config, max_tokens=max_tokens or config.max_tokens)
    return generate_stats(target_ctx, prompt, config, [(drafter, CostTracker())])


class RealRuns:
    """Real generations of configurations (a candidate at a γ) on one target context: each draft is
    loaded once, on its candidate's device, and each configuration keeps its n-gram index and cost
    trackers from one prompt to the next, as a Pair does. Tune's confirmation and scripts/tune_grid.py
    both measure through it."""

    def __init__(self, target_ctx: Context, options: TuneOptions):
        self.target_ctx, self.options = target_ctx, options
        self.drafts: dict[Candidate, tuple[Model, Context]] = {}
        self.states: dict[tuple[Candidate, int | None], dict] = {}

    def load(self, candidates: Iterable[Candidate]) -> None:
        """Load the drafts of these candidates (those not loaded yet)."""
        for cand in candidates:
            if cand.path is not None and cand not in self.drafts:
                self.drafts[cand] = load_draft(cand, self.options.load)

    def warm_up(self, prompt: list[int]) -> None:
        """A short target-only run, not timed: the first run after loading is slower."""
        run_config(self.target_ctx, prompt, "none", None, self.options, 0, -1, max_tokens=8)

    def run(self, cand: Candidate, gamma: int | None, prompt: list[int], i: int) -> GenerationStats:
        """One real generation of cand at γ on prompt i."""
        self.load([cand])
        draft_ctx = self.drafts[cand][1] if cand.path is not None else None
        state = self.states.setdefault((cand, gamma), {})
        return run_config(self.target_ctx, prompt, cand.kind, draft_ctx, self.options, gamma, i, state)

    def close(self) -> None:
        for model, ctx in self.drafts.values():
            ctx.close()
            model.close()
        self.drafts.clear()


def prompt_tokens(pair: Pair, prompts: Sequence[str], chat: bool | None) -> list[list[int]]:
    """The prompts as target tokens; chat None: through the chat template when the target has one, as
    generate does."""
    chat = pair.chats_by_default() if chat is None else chat
    return [pair.prompt_tokens(p, chat) for p in prompts]


def measure_costs(target_ctx: Context, runs: Sequence[Run], options: TuneOptions, plain: Sequence[GenerationStats],
                  n_vocab: int, rounds: int = 3) -> Costs:
    """The target's verify time per batch size k and the controller's time per step, timed inside
    the real loop (timed alone, back to back, a decode runs faster than inside it): short plain runs
    give k = 1, runs with a probe drafter proposing k - 1 tokens the others. Every k is timed in each
    round, so that a machine whose speed drifts over minutes still gives a curve of the right shape;
    the median of the rounds is kept."""
    probe = ProbeDrafter(n_vocab - 1)
    probes, samples = [], {}  # samples: k -> the mean verify of k in each probe run (median taken)
    for r in range(rounds):
        run = runs[r % len(runs)]
        for k in range(1, options.gamma_max + 2):
            stats = run_drafter(target_ctx, run.prompt, probe, options, k - 1, r, max_tokens=k + 3)  # k = 1: plain
            n, seconds = stats.verify_at[k]
            samples.setdefault(k, []).append(seconds / n)
            if k > 1:
                probes.append(stats)
    verify = {k: float(np.median(v)) for k, v in samples.items()}
    per_step = lambda runs: sum(s.controller_s for s in runs) / max(sum(s.steps for s in runs), 1)  # noqa: E731
    return Costs(verify, per_step(plain), row_seconds(target_ctx, options.sampling), per_step(probes))


def row_seconds(ctx: Context, params: SamplingParams) -> float:
    """What judging one more verify row costs: the argmax (T=0) or the filtered distribution (T>0)."""
    ctx.decode([ctx.tokens[-1]], logits="last")  # any row will do
    logits = np.array(ctx.logits(-1))
    t0 = time.perf_counter()
    for _ in range(20):
        greedy_token(logits) if params.greedy else distribution(logits, params)
    return (time.perf_counter() - t0) / 20


def hold(ctx: Context, tokens: Sequence[int]) -> None:
    """Make ctx hold exactly tokens, keeping the prefix it shares with them."""
    n = ctx.reuse_prefix(tokens)
    if n < len(tokens):
        ctx.decode(list(tokens[n:]), logits="none")


def teacher_rows(ctx: Context, run: Run, score: Callable[[np.ndarray, int], object], chunk: int = 64) -> list:
    """score(logits, t) for positions t = 0..len(known): ctx reads prompt + continuation in batches
    (teacher forcing), each row being its prediction for position t."""
    hold(ctx, run.prompt[:-1])
    seq = [run.prompt[-1], *run.known]
    out = []
    for start in range(0, len(seq), chunk):
        part = seq[start : start + chunk]
        ctx.decode(part, logits="all")
        out += [score(ctx.logits(i), start + i) for i in range(len(part))]
    return out


def draft_scores(ctx: Context, run: Run, params: SamplingParams, p_min: float,
                 is_eog: Callable[[int], bool]) -> tuple[list[float], list[float]]:
    """Teacher forcing: a draft model's acceptance chance and confidence at every position of run."""
    def score(logits: np.ndarray, t: int) -> tuple[float, float]:
        conf = top_probability(logits) if p_min > 0 else 1.0
        if not params.greedy:
            return overlap(run.target_p[t], distribution(logits, params)), conf
        token = greedy_token(logits)
        if t < len(run.known):
            return float(token == run.known[t]), conf
        return float(run.stopped and is_eog(token)), conf

    rows = teacher_rows(ctx, run, score)
    return [b for b, _ in rows], [c for _, c in rows]


def time_drafts(target_ctx: Context, draft_ctx: Context, runs: Sequence[Run], options: TuneOptions,
                verify_s: dict[int, float], n_runs: int = 2, max_tokens: int = 24) -> float:
    """Seconds per draft decode, timed in short real runs (the target verifying in between, as it
    will), at the machine's speed of the calibration: the target's verifies in the same runs say
    how much faster or slower the machine is now (speed_scale) and the draft time is scaled back."""
    timed = TimedDrafter(ModelDrafter(draft_ctx, options.sampling))  # its stop rule: the planner's, as generate
    stats = [run_drafter(target_ctx, run.prompt, timed, options, min(4, options.gamma_max), i,
                         max_tokens=min(max_tokens, options.max_tokens))
             for i, run in enumerate(runs[:n_runs])]
    if not timed.decodes:
        return 0.0
    return timed.seconds / timed.decodes / speed_scale(stats, verify_s)


def speed_scale(runs: Sequence[GenerationStats], verify_s: dict[int, float]) -> float:
    """How long the target's verifies in these runs took against the calibrated curve: > 1 when the
    machine is slower now than during calibration (1.0 when nothing comparable was verified)."""
    pooled = [(n, seconds, verify_s[k]) for k, (n, seconds) in pooled_verify(runs).items() if k in verify_s]
    measured, expected = sum(seconds for _, seconds, _ in pooled), sum(n * v for n, _, v in pooled)
    return measured / expected if measured > 0 and expected > 0 else 1.0
