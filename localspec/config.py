"""What to generate, how a user error is worded, the errors a request or a model file or name can raise,
and the one list of drafter kinds."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .sampling import SamplingParams, is_real, is_whole

DRAFTERS = ("auto", "model", "ngram", "hybrid")  # auto: hybrid with a draft model, else ngram


class Worded(Exception):
    """An error in one line naming the value and the fix, worded for whoever reads it. str() is worded
    for a library caller, by the names it sets (`seed must be >= 0 (got -3)`); worded(names) by a
    shell's own names for them (cli.errors.said: `--seed must be >= 0 (got -3)`). One about a field
    keeps the `field`, the `rule` it broke and `lower`: other fields whose lowering would do too. One
    whose words name what a shell names its own way (a setting, a method, a command) keeps its
    `template`: the message with each such name a key of LIBRARY_NAMES (Worded.naming). UserError,
    the bindings layer's LlamaError and ModelError (the model store's) are Worded."""

    def __init__(self, message: str | None, field: str | None = None, rule: str | None = None,
                 lower: tuple[str, ...] = (), template: str | None = None):
        """message: the library caller's line; None where a template gives it, its keys filled as
        LIBRARY_NAMES names them (the one place a template becomes the library's words)."""
        super().__init__(template.format_map(LIBRARY_NAMES) if message is None else message)
        self.field, self.rule, self.lower, self.template = field, rule, lower, template

    @classmethod
    def about(cls, field: str, rule: str, fix: str = "", lower: tuple[str, ...] = ()) -> Worded:
        """The error about a field: `{field} {rule}{fix}; or lower {lower}`; fix is what only a library
        caller is told (Python's values: `; None gives a random seed`), which a shell leaves out."""
        return cls(f"{field} {rule}{fix}{or_lower(lower)}", field, rule, lower)

    @classmethod
    def naming(cls, template: str, field: str | None = None) -> Worded:
        """The error worded by template, a message whose {keys} are LIBRARY_NAMES' keys (literal text in
        it escaped by `literal`): str() fills them as a library caller names them, worded(names) as a
        shell does. field: the setting it is about, where there is one (the server's 400 names it)."""
        return cls(None, field, template=template)

    def worded(self, names: dict[str, str]) -> str:
        """This error with what it names named as names does: a template's keys (else as LIBRARY_NAMES
        names them), or the field and the fields to lower without the library's fix (str() where names
        lacks one of them); str() where it names nothing."""
        if self.template is not None:
            return self.template.format_map({**LIBRARY_NAMES, **names})
        if self.rule is None or not {self.field, *self.lower} <= names.keys():
            return str(self)
        return f"{names[self.field]} {self.rule}{or_lower(names[name] for name in self.lower)}"


class UserError(Worded, ValueError):
    """A mistake its caller can fix (a ValueError), worded as Worded says."""


def worded(error: Exception, names: dict[str, str]) -> str:
    """Any error's one line as a shell says it, naming what it names as names does (Worded.worded)."""
    return error.worded(names) if isinstance(error, Worded) else str(error)


def literal(text: str) -> str:
    """text as it reads inside a template (Worded.naming): its braces doubled."""
    return text.replace("{", "{{").replace("}", "}}")


def or_lower(names) -> str:
    """'; or lower a or b', or '' for no names."""
    listed = " or ".join(names)
    return f"; or lower {listed}" if listed else ""


class GenerationError(UserError):
    """A request that cannot be generated; str() names the value and the fix."""


class ModelError(Worded):
    """A user-facing problem with a model file or name (the store, the catalog, a pull, a conversion:
    models.py, download.py, discovery.py); str() is one line naming the value and the fix, worded for a
    library caller (a shell words it with its own names: Worded)."""


# What a user error's template names (Worded.naming), as a library caller names it; a shell has its own
# names (the CLI's flags and chat's commands: cli.errors.CLI_NAMES; the server's: server.types.SERVER_NAMES).
# n_ctx, save, reset: a full context's fix (ContextFull); restart: how a conversation goes on with more room,
# where chat's user restarts it with a larger --ctx. model_drafter, hybrid_drafter: the drafters that need a
# draft model, as a setting; no_draft: the fix where a pair without one is asked for them (Pair.drafter_kind).
# raw: what sends a prompt as is, without the chat template (Pair.chat_tokens). ngl_target, ngl_draft, rpc:
# LoadOptions too; devices: where the devices to choose from are listed; lower_memory: what asks llama.cpp for
# less memory when a decode fails. quants: the text of TuneOptions' quants (tune.parse_quants); plot,
# plot_path: a tune's plot (TuneResult.plot) and its path; out: where models.convert writes.
LIBRARY_NAMES = {"n_ctx": "n_ctx in the Pair's LoadOptions", "save": "Chat.save(path)", "reset": "Chat.reset()",
                 "restart": "raise n_ctx in the Pair's LoadOptions",
                 **{name: f"{name} in the Pair's LoadOptions" for name in ("ngl_target", "ngl_draft", "rpc")},
                 "devices": "localspec.devices.list_devices()",
                 "lower_memory": "lower n_ctx, ngl_target or ngl_draft in the Pair's LoadOptions",
                 "quants": "quants", "plot": "the plot", "plot_path": "path", "out": "dst",
                 "model_drafter": "drafter='model'", "hybrid_drafter": "drafter='hybrid'",
                 "no_draft": "give the Pair a draft model, or use drafter='ngram'",
                 "raw": "Pair.prompt_tokens(text, chat=False)"}


class ContextFull(GenerationError):
    """The prompt leaves no room to generate. Shells map it by type: `param` names the request field
    (the server sets it as the client sent it), `code` is OpenAI's. After what is full comes the fix,
    a template of LIBRARY_NAMES' keys (Worded.naming)."""

    code = "context_length_exceeded"

    def __init__(self, full: str, n_tokens: int, n_ctx: int, param: str = "prompt", fix: str = ""):
        super().__init__(None, template=f"{literal(full)}; {fix}" if fix else literal(full))
        self.n_tokens, self.n_ctx, self.param = n_tokens, n_ctx, param


def seed_from(seed: int | None) -> int | None:
    """A seed as a user gives it, as GenerationConfig takes it: -1 is a random seed (None), as
    llama.cpp's tools and llama-server take it; GenerationError for another negative one."""
    if seed == -1:
        return None
    if seed is not None and seed < 0:
        raise GenerationError.about("seed", f"must be >= 0, or -1 for a random seed (got {seed})")
    return seed


def check_fits(n_tokens: int, n_ctx: int, what: str = "the prompt",
               fix: str = "raise {n_ctx} or shorten the prompt") -> None:
    """Raise ContextFull unless a prompt of n_tokens leaves room for at least one generated token. fix:
    what to do, a template of LIBRARY_NAMES' keys (default: a larger context or a shorter prompt)."""
    if n_tokens >= n_ctx:
        holds = (f"but the context holds {n_ctx}" if n_tokens > n_ctx else
                 f"and the context holds {n_ctx}, none left to generate")  # "3001 ... holds 3001" read as if it fit
        raise ContextFull(f"{what} has {n_tokens} tokens {holds}", n_tokens, n_ctx, fix=fix)


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate: length, sampling, draft length, seed and stop strings."""

    max_tokens: int = 256
    gamma: int | None = None  # None: chosen before each step by the planner ("auto")
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    trace: bool = False  # record each verify batch in the stats (tests replay them)
    gamma_max: int = 8   # the most that auto may draft from a draft model
    # ... and from n-gram lookup: its drafts cost nothing to make, only verify width, so a long copied
    # span is worth proposing whole where the target verifies wide batches cheaply. A CPU's verify
    # costs less per row as the batch widens well past llama.cpp's ngram-simple cap of 48,
    # a GPU's more so; the planner measures each width before relying on it, and this only bounds
    # what it prices: a verify of 128 rows, which context.SAMPLED_ROWS_MAX lets arrive sampled.
    ngram_gamma_max: int = 127
    drafter: str = "auto"  # one of DRAFTERS
    p_min: float | None = None  # the draft model stops below this confidence; None: where it stops paying
    logprobs: int | None = None  # give each Piece its log-probability under the target and this many alternatives
    trees: bool = True  # token trees where the planner finds they pay; False: chains only (benchmarks compare)

    def validate(self) -> GenerationConfig:
        """Return self, or raise GenerationError naming the bad field, its value and the fix."""
        self._check_types()
        if self.gamma is not None and self.gamma < 0:
            raise GenerationError.about("gamma", f"must be >= 0 or auto (got {self.gamma}); use 0 for plain decoding")
        if self.drafter not in DRAFTERS:
            raise GenerationError(f"unknown drafter {self.drafter!r}; choose one of {', '.join(DRAFTERS)}", "drafter")
        if self.seed is not None and self.seed < 0:  # a user's -1 is None by now (seed_from)
            raise GenerationError.about("seed", f"must be >= 0 (got {self.seed})", "; None gives a random seed")
        for name in ("gamma_max", "ngram_gamma_max"):
            if getattr(self, name) < 0:
                raise GenerationError.about(name, f"must be >= 0 (got {getattr(self, name)})")
        if self.p_min is not None and not 0 <= self.p_min < 1:
            raise GenerationError.about("p_min", f"must be in [0, 1) (got {self.p_min}); "
                                        "use 0 to never stop a draft early, or auto")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise GenerationError.about("logprobs", f"must be between 0 and 20 (got {self.logprobs})")
        if self.max_tokens < 1:
            raise GenerationError.about("max_tokens", f"must be >= 1 (got {self.max_tokens})")
        bad = self.sampling.problem()
        if bad is not None:
            raise GenerationError.about(*bad)
        return self

    def _check_types(self) -> None:
        """GenerationError for a field of the wrong type (the library's callers; the CLI and the server
        convert theirs), as check_types words it."""
        check_types(self, (
            ("max_tokens", is_whole, "a whole number >= 1", ""),
            ("gamma", optional(is_whole), "a whole number >= 0, or None for auto", ""),
            ("seed", optional(is_whole), "a whole number >= 0, or None for a random one", ""),
            ("gamma_max", is_whole, "a whole number >= 0", ""),
            ("ngram_gamma_max", is_whole, "a whole number >= 0", ""),
            ("logprobs", optional(is_whole), "a whole number 0..20, or None", ""),
            ("p_min", optional(is_real), "a number in [0, 1), or None for auto", ""),
            ("sampling", instance(SamplingParams), "a SamplingParams", "; e.g. SamplingParams(temperature=0)"),
            ("stop", several(str), "a tuple of strings", "; e.g. stop=('\\n\\n',)")),
            GenerationError)


def check_types(obj, checks, error: type[UserError]) -> None:
    """The one rule for a library caller's field of the wrong type, GenerationConfig's and TuneOptions':
    a comparison would raise a TypeError naming neither the field nor the fix, and a string for a tuple
    would be read letter by letter. checks: (field, test(value) -> bool, what it must be, an example);
    the first that fails raises error.about the field: "{field} must be {what} (got {value!r:.60}){example}"."""
    for field, test, what, example in checks:
        value = getattr(obj, field)
        if not test(value):
            raise error.about(field, f"must be {what} (got {value!r:.60})", example)


def optional(test):
    """test, or None."""
    return lambda value: value is None or test(value)


def instance(kind):
    """An instance of kind."""
    return lambda value: isinstance(value, kind)


def several(kind):
    """A tuple (or list) of kind: not one string, which would be read letter by letter."""
    return lambda values: isinstance(values, (tuple, list)) and all(isinstance(v, kind) for v in values)


def rows_on_backend(ctx, config: GenerationConfig | None = None, greedy: bool = False) -> bool:
    """The one switch between the two ways of judging a context's rows: True when llama.cpp's backend
    sampler chain reduces each decoded row to a short candidate list inside the decode; False when
    numpy reads the full logits rows. The backend path is for rows made on a GPU (a whole vocabulary
    of floats a row to bring back, session.rows_on_gpu): on the CPU and over RPC numpy reading the row
    is faster (scripts/bench_controller.py --real). On a GPU it is the default for greedy rows only
    (config's sampling, or `greedy` for a drafter's own), only because the chain's speed at T > 0 is
    not measured there yet. Logprobs need the raw rows; LOCALSPEC_BACKEND_SAMPLING=1 or 0 forces the
    path on or off (tests, benchmarks)."""
    if config is not None:
        if config.logprobs is not None:
            return False
        greedy = config.sampling.greedy
    forced = os.environ.get("LOCALSPEC_BACKEND_SAMPLING")
    if forced in ("0", "1"):
        return forced == "1"
    return greedy and bool(getattr(ctx, "rows_offloaded", False))


# The environment variables read deep in the code (the backend chain, warm start, the AMX guard, the RPC
# watchdog): each is checked once, where a command starts, so a typo is one line instead of being ignored.
SWITCHES = {"LOCALSPEC_BACKEND_SAMPLING": "0 or 1 (unset: decided by where the rows are made)",
            "LOCALSPEC_WARM_START": "0 or 1 (unset: 1)",
            "LOCALSPEC_ALLOW_AMX": "0 or 1 (unset: 0, the AMX guard on; 1 turns it off)"}


def check_environment(environ=os.environ) -> None:
    """GenerationError naming the first of localspec's environment variables set to a value it cannot take."""
    for name, takes in SWITCHES.items():
        if environ.get(name, "") not in ("", "0", "1"):
            raise GenerationError(f"{name}={environ[name]}: give {takes}")
    timeout = environ.get("LOCALSPEC_RPC_TIMEOUT", "")
    try:
        ok = not timeout or float(timeout) > 0
    except ValueError:
        ok = False
    if not ok:
        raise GenerationError(f"LOCALSPEC_RPC_TIMEOUT={timeout}: give the seconds a stalled RPC call may take, "
                              "a number > 0 (unset: 10)")

