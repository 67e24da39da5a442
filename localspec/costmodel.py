"""Pure cost formulas: expected tokens per step, step seconds and the best draft length, and the
Estimate they are read through. The measurements they read live beside them: the verify-cost curve
(timings.VerifyCurve), acceptance per draft position (acceptance.PositionAcceptance) and where a
stop rule ends drafts (draftstop.DraftStops), each written once.

Leviathan et al. (2022), §3.3: with acceptance rate α, a step that drafts γ tokens emits
(1 − α^(γ+1)) / (1 − α) tokens in expectation. Departure: we keep the acceptance of each draft
position separately (a_i = P(draft i accepted | drafts 1..i−1 accepted)), so
E(γ) = 1 + Σ_{i=1..γ} Π_{j≤i} a_j, which is the paper's formula when every a_i = α. A step costs
γ draft tokens + one target verify of γ+1 tokens (measured per batch size: it is not linear in γ, and
not even monotone on some CPUs) + the controller's own time. γ = 0 is plain decoding. A draft model
also decodes, once per drafting step, the token the last verify emitted before its first guess (now,
or with the last guess of a draft accepted whole): first_s, paid by every γ ≥ 1 and by γ = 0 never.

A step whose draft a stop rule (draftstop.DraftStop) may end early is priced by where it ends
(DraftStops): with
g_i = P(the draft goes on past token i | tokens 1..i drafted and accepted) and
u_i = P(the draft goes on past token i | tokens 1..i drafted), measured, a step capped at γ emits
E(γ) = 1 + Σ_{i=1..γ} Π_{j<i} g_j · Π_{j≤i} a_j tokens (g_0 = u_0: the chance the rule lets the step
draft its first token, which a fixed p-min may decline, first_on; 1 for p-min auto) and
costs S(γ) = verify(1) + first_s + Σ_{n=1..γ} P(N ≥ n) (c(n) − c(n−1)) + overhead for γ ≥ 1, with
P(N ≥ n) = Π_{j<n} u_j and c(n) = n draft tokens + verify(n+1) (first_s is paid whatever N: the draft's
first decode comes before its rule can decline a token): the expected cost over where the draft ends,
which telescopes to step_seconds(γ) when every draft runs to its cap. Departure from the papers, which price
a draft of fixed length: priced so, a draft stopped at its first token mostly, and accepted mostly
there, looks as dear as the γ it may reach.

A verify may also slow the one-row decodes after it (timings.ReturnCost: e_j seconds at the j-th,
after a share s_j of the drafter's verifies). The point estimate adds Σ_j e_j s_j to every verify
wider than one row; the optimistic one adds Σ_j e_j min(s_j, B(γ)), B(γ) the chance a step capped
at γ drafts and has a guess rejected (broken_upto): a draft taken whole is drafted on from.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Sequence


def rate_at(rates: Sequence[float], i: int) -> float:
    """Position i's rate in a per-position list whose last rate stands for every position past its end."""
    return rates[min(i, len(rates) - 1)]


def expected_tokens(accept: Sequence[float], gamma: int) -> float:
    """Tokens emitted per step with gamma drafts, given per-position conditional acceptance."""
    total, reach = 1.0, 1.0
    for i in range(gamma):
        reach *= rate_at(accept, i)
        total += reach
    return total


class Prediction(NamedTuple):
    """What one step is expected to bring: tokens emitted and seconds taken (Planner.predict)."""

    tokens: float
    seconds: float

    @property
    def rate(self) -> float:
        return self.tokens / max(self.seconds, 1e-300)


MATCH_LENGTH_BUCKETS = 6


def match_bucket(length: int, in_output: bool = False) -> int:
    """The acceptance bucket of an n-gram match of this many tokens: 1, 2-3, 4-7, 8-15, 16-31, 32+
    (buckets 1..6) where the earlier occurrence lies in the prompt, 7..12 where it lies in the
    generation's own output (bucket 0 is a drafter without match lengths). A reply that copies its
    input and a reply that repeats itself are different bets: a short match of "```" at a code
    block's end against the block's opening "```python" reaches back as far as a copy's first match
    does, and is wrong where the copy is right."""
    bucket = min(max(length, 1).bit_length(), MATCH_LENGTH_BUCKETS)
    return bucket + MATCH_LENGTH_BUCKETS if in_output else bucket


def ngram_bucket(reach: int, at: int, prompt_len: int) -> int:
    """The acceptance bucket of an n-gram match that reaches back `reach` tokens to an occurrence
    ending at position `at`, in a generation whose output begins at position prompt_len."""
    return match_bucket(reach, in_output=at >= prompt_len)


def _on(go_on: Sequence[float], i: int) -> float:
    """go_on[i - 1], the chance a draft goes on past token i (1.0 where unmeasured: to its cap)."""
    return go_on[i - 1] if 0 < i <= len(go_on) else 1.0


def expected_tokens_upto(accept: Sequence[float], gamma_max: int, tokens_on: Sequence[float] = (),
                         first_on: float = 1.0) -> list[float]:
    """E(γ) for every γ in 0..gamma_max, in one pass: expected_tokens(accept, γ) where every draft
    runs to its cap; with tokens_on (g_i, see the module docstring), where a stop rule may end it,
    and first_on (g_0) where it may decline the first token."""
    totals, reach, total = [1.0], first_on, 1.0
    n, last, n_on = len(accept), accept[-1], len(tokens_on)  # (_on and rate_at inlined: the planner's every step)
    for i in range(gamma_max):
        a = accept[i] if i < n else last
        if 0 < i <= n_on:
            a *= tokens_on[i - 1]
        reach *= a
        total += reach
        totals.append(total)
    return totals


def broken_upto(accept: Sequence[float], gamma_max: int, tokens_on: Sequence[float] = (),
                first_on: float = 1.0) -> list[float]:
    """For every γ in 0..gamma_max, the chance that a step capped at γ drafts and the target rejects
    one of its guesses: P(N ≥ 1) − P(N ≥ 1, every guess accepted), where the draft ends after n
    guesses all accepted with the chance reach_n (1 − g_n), or at its cap (the module docstring's
    terms; every a_i where no stop rule ends it). What a verify costs the one-row decodes after it
    follows such a step (a draft taken whole is drafted on from)."""
    broken, reach, whole = [0.0], first_on, 0.0
    n, last, n_on = len(accept), accept[-1], len(tokens_on)
    for i in range(gamma_max):
        a = accept[i] if i < n else last
        if 0 < i <= n_on:
            whole += reach * (1.0 - tokens_on[i - 1])  # drafts i guesses, all accepted, and stops
            a *= tokens_on[i - 1]
        reach *= a
        b = first_on - whole - reach
        broken.append(b if b > 0.0 else 0.0)  # (rounding may leave it a hair below nothing)
    return broken


def step_seconds(gamma: int, draft_s: float, verify_s: Callable[[int], float], overhead_s: float,
                 first_s: float = 0.0) -> float:
    """Wall time of one step: gamma draft tokens (and first_s where it drafts: the module docstring),
    a verify batch of gamma+1, controller overhead."""
    return gamma * draft_s + (first_s if gamma else 0.0) + verify_s(gamma + 1) + overhead_s


def expected_seconds_upto(gamma_max: int, draft_s: float, verify_s: Callable[[int], float], overhead_s: float,
                          draft_on: Sequence[float] = (), first_s: float = 0.0, first_on: float = 1.0) -> list[float]:
    """S(γ) for every γ in 0..gamma_max (the module docstring): step_seconds(γ) where every draft
    runs to its cap; with draft_on (u_i) and first_on (u_0), the expected seconds over where a stop
    rule ends it (first_s is paid by a step that drafts none: its decode came before the rule)."""
    upto = getattr(verify_s, "upto", None)  # every width's seconds at once (timings.Widths)
    verify = upto(gamma_max + 1) if upto is not None else [0.0, *map(verify_s, range(1, gamma_max + 2))]
    last, reach, n_on = verify[1], first_on, len(draft_on)
    total = last + overhead_s  # step_seconds(0, ...)
    totals = [total]
    total += first_s
    for n in range(1, gamma_max + 1):
        if 1 < n <= n_on + 1:
            reach *= draft_on[n - 2]  # P(N ≥ n): _on(draft_on, n - 1), inlined
        cost = n * draft_s + verify[n + 1]
        total += reach * (cost - last)
        totals.append(total)
        last = cost
    return totals


def best_gamma(accept: Sequence[float], draft_s: float, verify_s: Callable[[int], float],
               overhead_s: float, gamma_max: int, min_gain: float = 0.0,
               tokens_on: Sequence[float] = (), draft_on: Sequence[float] = (),
               first_s: float = 0.0, first_on: float = 1.0) -> tuple[int, float]:
    """(gamma, predicted tokens/s) maximising expected tokens per second; gamma 0 included. gamma is a
    cap where tokens_on and draft_on say how a stop rule ends drafts before it (DraftStops).

    Speculation must beat plain decoding by min_gain (a fraction) to be chosen: the prediction
    has errors, and losing to plain decoding is worse than missing a marginal win."""
    tokens = expected_tokens_upto(accept, gamma_max, tokens_on, first_on)
    seconds = expected_seconds_upto(gamma_max, draft_s, verify_s, overhead_s, draft_on, first_s, first_on)
    return fastest(tokens, seconds, min_gain)


SHORTER_TIE = 1.0001  # a longer draft must be this much faster a token: ties go to the shorter (less work, same speed)


def fastest(tokens: Sequence[float], seconds: Sequence[float], min_gain: float = 0.0) -> tuple[int, float]:
    """best_gamma's choice from every γ's expected tokens and seconds (γ 0 first)."""
    gamma_max = len(tokens) - 1
    plain = 1.0 / seconds[0]
    best = (0, plain * (1 + min_gain))
    for gamma in range(1, gamma_max + 1):
        tps = tokens[gamma] / seconds[gamma]
        if tps > best[1] * SHORTER_TIE:
            best = (gamma, tps)
    return best if best[0] else (0, plain)


COVER_GAIN = 0.01  # how much faster to the end a step other than the fastest alone must get there (covering)


def covering(tokens: Sequence[float], seconds: Sequence[float], gamma: int) -> int:
    """The first step's γ for an offer of n = len(tokens) − 1 guesses that reaches the generation's
    end (an n-gram copy of the n + 1 tokens still wanted), chosen to get there at the best rate over
    the steps; gamma: the fastest step's alone (fastest). Priced a step alone, a copy split where the
    verify curve reads a width marginally cheaper a token leaves a short rest that then pays a verify
    of its own.

    A step drafting γ goes on to a rest of n − γ − 1 guesses (after the target's own token) with the
    chance c_γ = E(γ + 1) − E(γ) that its γ guesses and the next are taken; broken, what follows is
    taken at a rate λ. Against λ, a rest of m ≥ 0 is worth V(m) = max E(g) − λS(g) + c_g V(m − g − 1)
    over g = m (the rest in one step), the fastest step capped at m, and a plain step (g = 0): the
    ways the next steps would take it; V(0) is the last token's plain step and V(−1) = 0, the end.
    The first step is the γ ≤ n of the most E(γ) − λS(γ) + c_γ V(n − γ − 1), λ first the fastest
    step's rate, then its cover's own (Dinkelbach's iteration for a ratio, twice). Every γ a step,
    O(n). The fastest step stands unless the other gets to the end faster by COVER_GAIN: a near tie
    is the estimate's noise."""
    n = len(tokens) - 1
    if not 0 < gamma < n:
        return gamma
    go_on = [tokens[g + 1] - tokens[g] for g in range(n)] + [0.0]
    fastest_upto, best = [0], 0  # the fastest step capped at each m
    for g in range(1, n + 1):
        best = g if tokens[g] * seconds[best] > tokens[best] * seconds[g] * SHORTER_TIE or not best else best
        fastest_upto.append(best)
    rate, first = tokens[gamma] / seconds[gamma], gamma
    for _ in range(2):
        gains = [t - rate * s for t, s in zip(tokens, seconds)]
        value, total_t, total_s = [0.0], [0.0], [0.0]  # by rest + 1 (a rest of −1: the end)
        for m in range(n):  # (the rests: n − 1 at most)
            pick = m
            for g in (fastest_upto[m], 0):
                if g < pick and gains[g] + go_on[g] * value[m - g] > gains[pick] + go_on[pick] * value[m - pick]:
                    pick = g
            value.append(gains[pick] + go_on[pick] * value[m - pick])
            total_t.append(tokens[pick] + go_on[pick] * total_t[m - pick])
            total_s.append(seconds[pick] + go_on[pick] * total_s[m - pick])
        first, top = gamma, gains[gamma] + go_on[gamma] * value[n - gamma]
        for g in range(1, n + 1):
            v = gains[g] + go_on[g] * value[n - g]
            if v > top:
                first, top = g, v
        rate, fastest_rate = (_cover_rate(tokens, seconds, go_on, total_t, total_s, g) for g in (first, gamma))
    return first if rate > fastest_rate * (1 + COVER_GAIN) else gamma


def _cover_rate(tokens: Sequence[float], seconds: Sequence[float], go_on: Sequence[float],
                total_t: Sequence[float], total_s: Sequence[float], gamma: int) -> float:
    """covering's rate over the offer for a first step of gamma, its rest covered as total_t/total_s say."""
    rest = len(tokens) - 1 - gamma
    return (tokens[gamma] + go_on[gamma] * total_t[rest]) / (seconds[gamma] + go_on[gamma] * total_s[rest])


class Estimate(NamedTuple):
    """A drafter's costs and per-position acceptance, point or optimistic, and where its stop rule
    ends drafts (tokens_on, draft_on: draftstop.DraftStops; empty: every draft runs to its γ): what
    predictions read. first_row: a drafting step also decodes one row more than its draft tokens
    (a draft model's cost is kept per row: first_s, the module docstring)."""

    accept: list[float]
    draft_s: float
    verify_s: Callable[[int], float]
    overhead_s: float
    tokens_on: Sequence[float] = ()
    draft_on: Sequence[float] = ()
    first_row: bool = False
    first_on: float = 1.0  # the chance a stop rule lets a step draft its first token (DraftStops.first_on)
    # (seconds, share) of the one-row decodes after a verify that a drafting step costs, each at most
    # at the chance its draft is broken (broken_upto; timings.ReturnCost.shares); none: counted in
    # verify_s at every width, or not at all
    returned: Sequence[tuple[float, float]] = ()

    @property
    def first_s(self) -> float:
        """What a drafting step pays once besides its draft tokens: a row, where first_row."""
        return self.draft_s if self.first_row else 0.0

    def best(self, gamma_max: int, min_gain: float = 0.0, finish: bool = False) -> tuple[int, float]:
        """(γ ≤ gamma_max, tokens/s) of the fastest step; γ 0 unless a draft beats it by min_gain.
        finish: gamma_max is a copy's offer that reaches the generation's end, its rest offered next:
        the step that covers it best (covering), priced at the fastest step's rate."""
        tokens, seconds = self.tokens(gamma_max), self.seconds(gamma_max)
        gamma, rate = fastest(tokens, seconds, min_gain)
        return (covering(tokens, seconds, gamma) if finish else gamma), rate

    def tokens(self, gamma_max: int, accept: Sequence[float] | None = None) -> list[float]:
        """Expected tokens of a step capped at each γ in 0..gamma_max (accept: other acceptance)."""
        return expected_tokens_upto(self.accept if accept is None else accept, gamma_max, self.tokens_on,
                                    self.first_on)

    def seconds(self, gamma_max: int) -> list[float]:
        """Expected seconds of a step capped at each γ in 0..gamma_max."""
        seconds = expected_seconds_upto(gamma_max, self.draft_s, self.verify_s, self.overhead_s, self.draft_on,
                                        self.first_s, self.first_on)
        if self.returned:
            broken = broken_upto(self.accept, gamma_max, self.tokens_on, self.first_on)
            for extra, share in self.returned:
                seconds = [s + extra * (b if b < share else share) for s, b in zip(seconds, broken)]
        return seconds
