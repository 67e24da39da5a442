"""How to tune (TuneOptions) and tune's one-line errors (TuneError)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config import GenerationConfig, UserError, check_types, instance, literal, optional, several
from ..draftstop import FALLBACK_P_MIN
from ..llama import QUANT_TYPES
from ..planner import p_min_of
from ..sampling import SamplingParams, is_real, is_whole
from ..session import LoadOptions

DERIVED_QUANTS = ("Q4_0", "Q3_K_S", "Q2_K")


class TuneError(UserError):
    """A user-facing tune problem; str() is one line naming the value and the fix. One about a
    TuneOptions field names the field, as GenerationConfig's errors do (`seed must be >= 0 (got -3)`);
    the CLI names the flag instead (`--seed must be >= 0 (got -3)`: UserError.worded)."""


def parse_quants(text: str) -> tuple[str, ...]:
    """'Q4_0,q2_k' -> ('Q4_0', 'Q2_K'); 'none' or '' -> (); unknown types are a one-line error naming
    where the text came from as TuneOptions names it (quants), or a shell (tune's --quants)."""
    quants = tuple(q.strip().upper() for q in text.split(",") if q.strip() and q.strip().lower() != "none")
    for q in quants:
        if q not in QUANT_TYPES:
            raise TuneError.naming(f"Unknown quantization type {literal(repr(q))} in {{quants}}; choose from "
                                   f"{', '.join(QUANT_TYPES)}, or 'none' to derive nothing", "quants")
    return quants


@dataclass(frozen=True)
class TuneOptions:
    """How to tune: sample as the user will, how much to calibrate on, how long to take."""

    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.0))
    p_min: float = FALLBACK_P_MIN  # fixed-γ candidates are replayed with a fixed p-min
    max_tokens: int = 64        # generated per calibration prompt
    gamma_max: int = 8
    budget_s: float | None = 600.0
    seed: int = 1
    chat: bool | None = None    # None: the chat template when the target has one, as generate
    load: LoadOptions = field(default_factory=LoadOptions)
    quants: tuple[str, ...] = DERIVED_QUANTS
    drafts: tuple[Path, ...] = ()  # drafts outside the store to try too
    confirm: int = 3            # real runs for this many of the best predictions
    devices: tuple[str, ...] | None = None  # None: cpu, and gpu too on a GPU build
    passes: int = 8             # replays per γ at T>0 (acceptance is random there)

    def validate(self) -> TuneOptions:
        """Return self, or raise TuneError naming the bad field, its value and the fix."""
        self._check_types()
        bad = self.sampling.problem()
        if bad is not None:
            raise TuneError.about(*bad)
        budget_ok = self.budget_s is None or self.budget_s > 0
        checks = [("max_tokens", self.max_tokens >= 2, "must be >= 2", ""),  # (field, ok, rule, the library's fix)
                  ("gamma_max", 1 <= self.gamma_max <= 64, "must be in 1..64", ""),
                  ("budget_s", budget_ok, "must be > 0 seconds", "; None for no limit"),
                  ("confirm", self.confirm >= 0, "must be >= 0", ""),
                  ("passes", self.passes >= 1, "must be >= 1", ""),
                  ("seed", self.seed >= 0, "must be >= 0", ""),
                  ("p_min", 0 <= self.p_min < 1, "must be in [0, 1)", "; use 0 to never stop a draft early")]
        for name, ok, rule, fix in checks:
            if not ok:
                raise TuneError.about(name, f"{rule} (got {getattr(self, name)})", fix)
        return self

    def _check_types(self) -> None:
        """TuneError for a field of the wrong type, as config.check_types words it for GenerationConfig
        too (the library's callers; the CLI converts its flags)."""
        check_types(self, (
            ("max_tokens", is_whole, "a whole number >= 2", ""),
            ("gamma_max", is_whole, "a whole number in 1..64", ""),
            ("seed", is_whole, "a whole number >= 0", ""),
            ("confirm", is_whole, "a whole number >= 0", ""),
            ("passes", is_whole, "a whole number >= 1", ""),
            ("budget_s", optional(is_real), "a number of seconds > 0, or None for no limit", ""),
            ("p_min", is_real, "a number in [0, 1)", ""),
            ("chat", optional(instance(bool)), "True, False, or None for the target's own choice", ""),
            ("sampling", instance(SamplingParams), "a SamplingParams", "; e.g. SamplingParams(temperature=0)"),
            ("load", instance(LoadOptions), "a LoadOptions", "; e.g. LoadOptions(n_ctx=4096)"),
            ("quants", several(str), "a tuple of quantization types", "; e.g. quants=('Q4_0',)"),
            ("devices", optional(several(str)), "a tuple of 'cpu' and 'gpu', or None for each this machine has",
             "; e.g. devices=('gpu',)"),
            ("drafts", several((str, Path)), "a tuple of paths", "; e.g. drafts=(Path('d.gguf'),)")), TuneError)

    def config(self, gamma: int | None, seed: int) -> GenerationConfig:
        """The generation config of one real run at a fixed γ, with this p-min; None: auto γ with p-min
        auto, as generate runs by default."""
        return GenerationConfig(self.max_tokens, gamma, self.sampling, seed, gamma_max=self.gamma_max,
                                p_min=None if gamma is None else self.p_min)

    @property
    def fixed_p_min(self) -> float:
        """The p-min a fixed-γ candidate drafts with: generate's rule (p_min_of) for its config."""
        return p_min_of(self.config(1, self.seed))
