"""The flags generate, chat, serve and tune share (one FLAGS table), their converters, and how the
commands turn them into a GenerationConfig, LoadOptions and a loaded Pair."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import secrets
import sys
from pathlib import Path
from typing import Sequence

import click
from click.core import ParameterSource

from .. import devices, models
from ..config import DRAFTERS, GenerationConfig, GenerationError, check_environment, seed_from, worded
from ..llama import LlamaError
from ..placement import ALL_LAYERS, check_names, split_names
from ..sampling import SamplingParams
from ..session import LoadOptions, Pair, Reply

USER_ERRORS = (models.ModelError, LlamaError, GenerationError, ValueError, OSError)


def user_errors(fn):
    """Turn localspec's one-line errors into click errors: a message and exit code 1, no traceback.
    A closed stdout (`| head`) is no mistake: click ends it with exit code 1 and nothing printed."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise
        except USER_ERRORS as e:
            error = click.ClickException(said(e))
            error.kind = type(e).__name__
            raise error from None
    return wrapper


def said(error: Exception) -> str:
    """A user error's one line as the CLI says it: naming the flags (CLI_NAMES), not the fields and
    the LoadOptions a library caller is told of."""
    return worded(error, CLI_NAMES)


class JsonError(click.ClickException):
    """An error as --json prints it, on stdout: {"error": {"message": ..., "type": ...}}; exit code 1."""

    def __init__(self, error: click.ClickException):
        super().__init__(error.format_message())
        self.kind = getattr(error, "kind", "UsageError" if isinstance(error, click.UsageError) else "Error")

    def show(self, file=None) -> None:
        click.echo(json.dumps({"error": {"message": self.message, "type": self.kind}}))


def one_line(error: click.UsageError, ctx: click.Context) -> click.ClickException:
    """A usage mistake (an unknown flag or command, a missing or extra argument) as one line and exit
    code 1, like every other mistake (click's own is three lines of usage and exit code 2)."""
    one = click.ClickException(f"{error.format_message().rstrip('.')}; see `{ctx.command_path} --help`")
    one.kind = "UsageError"  # as --json names it (JsonError)
    return one


class OneLineUsage(click.Command):
    """A command whose usage mistakes are one line (one_line), which reads the config file as it
    parses its flags (read_config_file) and checks localspec's environment switches as it starts
    (config.check_environment): with --json, either's error is a JSON error."""

    def invoke(self, ctx):
        if not isinstance(self, click.Group):  # the command run, not the groups on the way to it
            try:
                check_environment()
            except GenerationError as e:
                raise click.ClickException(str(e)) from None
        return super().invoke(ctx)

    def parse_args(self, ctx, args):
        try:
            read_config_file(ctx, args)
            return super().parse_args(ctx, args)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as e:
            raise one_line(e, ctx) from None


def read_config_file(ctx: click.Context, args: Sequence[str] = ()) -> None:
    """ctx.default_map from the config file, for a command it sets defaults of (generate, chat, serve,
    tune: settings_file.COMMANDS), unless one is given (config show's). Read as the command parses its
    flags (args), so that a bad file is the command's error, as a bad flag is: JSON with --json. With
    --help, a bad file is passed over: the help shows the built-in defaults, and the next run says
    what is wrong with the file."""
    from .settings_file import COMMANDS, config_path, default_map  # settings_file imports this module

    name = ctx.command.name
    if name in COMMANDS and ctx.parent is not None and ctx.default_map is None and not ctx.resilient_parsing:
        try:
            ctx.default_map = default_map(ctx.find_root().command, config_path(), name)
        except click.ClickException:
            if not set(args) & set(ctx.help_option_names):
                raise


class OneLineGroup(OneLineUsage, click.Group):
    """A group whose usage mistakes are one line (one_line), as are its commands' and subgroups'."""

    command_class = OneLineUsage
    group_class = type  # its subgroups are OneLineGroups too

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            raise one_line(e, ctx) from None


class JsonErrors(OneLineUsage):
    """A command with --json: its errors, bad flags included, are JSON too."""

    def parse_args(self, ctx, args):
        given = "--json" in args  # before parsing, which takes args apart
        try:
            return super().parse_args(ctx, args)
        except click.ClickException as e:  # --json given, or set in the config file read (json = true)
            wants_json = given or bool((ctx.default_map or {}).get("as_json"))
            raise (JsonError(e) if wants_json else e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.ClickException as e:
            raise (JsonError(e) if ctx.params.get("as_json") else e) from None


def use_colour(show_drafts: bool | None) -> bool:
    """--show-drafts as given, else on when stdout is a colour terminal (no NO_COLOR, TERM not dumb)."""
    colour_terminal = os.environ.get("TERM", "") != "dumb" and "NO_COLOR" not in os.environ
    return sys.stdout.isatty() and (colour_terminal if show_drafts is None else show_drafts)


SHOW_DRAFTS = click.option("--show-drafts/--no-show-drafts", default=None, help="Print accepted draft tokens in green "
                           "(default: on when stdout is a colour terminal).")
GREEN, PLAIN = "\x1b[32m", "\x1b[0m"


UNTIL_FULL = 2**31 - 1  # a max_tokens no context reaches: the answer runs until it ends or fills the context


def settings(config: GenerationConfig) -> dict:
    """The settings a generation ran with, as --json echoes them (gamma 'auto' or N; drafter as --drafter
    names it, 'none' for the target alone; max_tokens null: until the answer ends or fills the context)."""
    return {**dataclasses.asdict(config.sampling), "gamma": "auto" if config.gamma is None else config.gamma,
            "drafter": "none" if config.gamma == 0 else config.drafter,
            "p_min": "auto" if config.p_min is None else config.p_min,
            "max_tokens": None if config.max_tokens == UNTIL_FULL else config.max_tokens, "seed": config.seed,
            "stop": list(config.stop)}


def answer_json(pair: Pair, reply: Reply, config: GenerationConfig) -> str:
    """The JSON line --json prints for one answer, the same for generate and for each of chat's: the
    text, why it ended, the target and draft, why that draft, where they run, the settings and the stats."""
    return json.dumps({"text": reply.text, "finish_reason": reply.finish_reason,
                       "target": str(pair.target_model.path),
                       "draft": str(pair.draft_path) if pair.draft_path else None,
                       "draft_reason": pair.draft_reason, "placement": pair.placement_now(),
                       "settings": settings(config), "stats": reply.stats.to_dict()})


class AutoOr(click.ParamType):
    """'auto' (None: decided each step from measured costs) or a number: --gamma N, --p-min P."""

    def __init__(self, number: type, name: str, what: str):
        self.number, self.name, self.what = number, name, what

    def convert(self, value, param, ctx):
        if value is None or str(value).lower() == "auto":
            return None
        try:
            return self.number(value)
        except ValueError:
            self.fail(f"{value!r} is not 'auto' or {self.what}", param, ctx)


class Switch(click.types.BoolParamType):
    """An on/off flag's value as its environment variable gives it (LOCALSPEC_PROFILE=0), read as
    click reads it; a bad one lists the values taken without click's empty first entry
    ("Recognized values: , 0, 1, f, ..."). click takes an empty variable as unset, so only a blank one
    ("  ") reaches here; click read it as off, the opposite of unset for --profile, so it is refused."""

    def convert(self, value, param, ctx):
        if not (isinstance(value, str) and not value.strip()):
            try:
                return super().convert(value, param, ctx)
            except click.BadParameter:
                pass
        self.fail(f"{value!r} is not on or off: give 1, true, yes or on (y, t), or 0, false, no or off (n, f); "
                  "empty is as if unset", param, ctx)


class EnvvarOption(click.Option):
    """An option with an environment variable, whose bad value names where it came from: the flag
    (`Invalid value for '--port'`), or the variable when the value is the environment's
    (`Invalid value for 'LOCALSPEC_PORT' (the environment variable for '--port')`). click names the
    variable beside the flag whatever gave the value, a typo on the command line too. An on/off
    flag's variable takes its values as a Switch."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.is_bool_flag:
            self.type = Switch()

    def get_error_hint(self, ctx: click.Context | None) -> str:
        flag = click.Parameter.get_error_hint(self, ctx)  # the flag's names, without click's env var
        if not self.envvar or ctx is None or ctx.get_parameter_source(self.name) != ParameterSource.ENVIRONMENT:
            return flag
        names = [self.envvar] if isinstance(self.envvar, str) else list(self.envvar)
        given = next((name for name in names if os.environ.get(name)), names[0])
        return f"'{given}' (the environment variable for {flag})"


def whole_number(kind: click.ParamType, value, param, ctx, wanted: str) -> int:
    """value as an int, the one place the integer flags parse one; a value that is not a whole number
    fails as `{value!r} is not {wanted}` (wanted: what to give instead)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        kind.fail(f"{value!r} is not {wanted}", param, ctx)


class Port(click.ParamType):
    """A TCP port to listen on, 1-65535; a bad one is said to be not a port number, not (click's
    IntRange) "not a valid integer range"."""
    name = "port"
    WANTED = "a port number: give a whole number from 1 to 65535"

    def convert(self, value, param, ctx):
        port = whole_number(self, value, param, ctx, self.WANTED)
        if not 1 <= port <= 65535:
            self.fail(f"{port} is not {self.WANTED}", param, ctx)
        return port


class WholeNumber(click.IntRange):
    """A whole number >= minimum (--ctx, --threads, --max-queue, ...); one that is not a number says
    what is wanted, not (click's IntRange, by its type's name) "not a valid integer range". One below
    the minimum keeps click's "-3 is not in the range x>=0"; --help shows INTEGER and [x>=0]."""
    name = "integer"

    def __init__(self, minimum: int):
        super().__init__(min=minimum)

    def convert(self, value, param, ctx):
        return super().convert(whole_number(self, value, param, ctx, f"a whole number: give one >= {self.min}"),
                               param, ctx)


class GpuLayers(click.ParamType):
    """Layers on the GPU: N >= 0, or -1 for every layer (llama.cpp's -ngl -1), read as ALL_LAYERS."""
    name = "N"
    WANTED = f"give 0 or more, or -1 (or {ALL_LAYERS}) for every layer"

    def convert(self, value, param, ctx):
        layers = whole_number(self, value, param, ctx, f"a whole number: {self.WANTED}")
        if layers < -1:
            self.fail(f"{value} layers: {self.WANTED}", param, ctx)
        return ALL_LAYERS if layers == -1 else layers


class TensorSplit(click.ParamType):
    """'3,1' -> (3.0, 1.0): non-negative shares, not all zero."""
    name = "shares"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            shares = tuple(float(part) for part in str(value).split(","))
        except ValueError:
            self.fail(f"{value!r} is not a comma list of numbers, e.g. 3,1", param, ctx)
        if any(s < 0 for s in shares) or not any(shares):
            self.fail(f"{value!r}: the shares must be >= 0 and not all 0", param, ctx)
        return shares


ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}


def unescape(text: str | None) -> str | None:
    r"""Turn \n, \t and \\ into a newline, a tab and a backslash, as llama-cli does for its prompt
    and --stop; other backslashes stay as they are."""
    if text is None:
        return None
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m[1], m[0]), text)


class Escaped(click.ParamType):
    r"""A string from the command line with \n, \t and \\ escapes understood."""
    name = "text"

    def convert(self, value, param, ctx):
        return unescape(value)


# The flags take their defaults from the field defaults of the objects they build.
SAMPLING, LOAD, GENERATION = ({f.name: f.default for f in dataclasses.fields(cls)}
                              for cls in (SamplingParams, LoadOptions, GenerationConfig))


def flag(*decls: str, **settings) -> tuple[tuple[str, ...], dict]:
    """One FLAGS entry: click.option's declarations and settings."""
    return decls, settings


# The flags commands share, declared once each (names, type, default) so that a flag parses the same
# on every command that has it; keyed by the parameter name the command receives.
FLAGS = {
    "target": flag("-m", "--target", "--model", envvar="LOCALSPEC_TARGET",
                   help="Target: a model name (`models list --all`) or .gguf path (default: the default pair's)."),
    "draft": flag("-d", "--draft", "-md", "--model-draft", envvar="LOCALSPEC_DRAFT",
                  help="Draft: a model name, .gguf path, or 'none' (default: chosen for the target, named on stderr)."),
    "ngl_target": flag("-ngl", "--ngl-target", "--n-gpu-layers", type=GpuLayers(), default=LOAD["ngl_target"],
                       help="Target layers on the GPU (-1 or 999: all)."),
    "ngl_draft": flag("-ngld", "--ngl-draft", "--n-gpu-layers-draft", type=GpuLayers(), default=LOAD["ngl_draft"],
                      help="Draft layers on the GPU (-1 or 999: all)."),
    "device_target": flag("-dev", "--device-target", "--device", envvar="LOCALSPEC_DEVICE_TARGET",
                          help="Devices for the target's layers, comma-separated (`localspec devices`; CPU: none)."),
    "device_draft": flag("-devd", "--device-draft", envvar="LOCALSPEC_DEVICE_DRAFT",
                         help="Devices for the draft's layers, comma-separated (with --rpc: this machine's)."),
    "rpc": flag("--rpc", envvar="LOCALSPEC_RPC", help="`localspec rpc-server`s as HOST:PORT[,HOST:PORT...]: the "
                "target's layers go there (split across them); the draft stays here."),
    "tensor_split": flag("-ts", "--tensor-split", type=TensorSplit(),
                         help="The target's share of layers per device, in --device-target order, e.g. 3,1 "
                         "(default: by free memory)."),
    "threads": flag("-t", "--threads", type=WholeNumber(-1), default=LOAD["threads"],
                    help="CPU threads (default, or -1 or 0: all cores, at most 8)."),
    "ctx": flag("-c", "--ctx", "--ctx-size", type=WholeNumber(0), default=LOAD["n_ctx"],
                help="Context size in tokens (0: the length the model was trained for, as llama.cpp takes it)."),
    "gamma": flag("-g", "--gamma", "--draft-max", type=AutoOr(int, "auto|N", "a whole number"), default="auto",
                  help="Draft tokens per step: auto (cost model), or N (0: no speculation)."),
    "temperature": flag("--temperature", "--temp", type=float, default=SAMPLING["temperature"], help="0 means greedy."),
    "top_k": flag("--top-k", type=int, default=SAMPLING["top_k"], help="0 disables."),
    "top_p": flag("--top-p", type=float, default=SAMPLING["top_p"], help="1.0 disables."),
    "min_p": flag("--min-p", type=float, default=SAMPLING["min_p"], help="0 disables."),
    "seed": flag("-s", "--seed", type=int, default=GENERATION["seed"],
                 help="Seed for reproducible sampling (-1: a random one, as llama.cpp takes it)."),
    "max_tokens": flag("-n", "--max-tokens", "--n-predict", "--predict", type=int, default=GENERATION["max_tokens"],
                       help="Tokens to generate (-1: until the answer ends or fills the context)."),
    "stop": flag("--stop", type=Escaped(), multiple=True, help=r"Stop string (repeatable); \n, \t and \\ are escapes."),
    "drafter": flag("--drafter", type=click.Choice(DRAFTERS), default=GENERATION["drafter"],
                    help="Who guesses: the draft model, n-gram lookup in the context, hybrid (each step the cheaper "
                    "likely guess), or auto (hybrid with a draft, else n-gram)."),
    "p_min": flag("--p-min", "--draft-p-min", type=AutoOr(float, "auto|P", "a number in [0, 1)"), default="auto",
                  help="The draft model stops guessing where its confidence falls below this (0: never); "
                  "auto: where one more guess stops paying, from measured acceptance and costs."),
}
MODEL_FLAGS = ("target", "draft", "ngl_target", "ngl_draft", "device_target", "device_draft", "rpc", "tensor_split",
               "threads", "ctx")
PLACEMENT_FLAGS = ("device_target", "device_draft", "rpc")
GENERATION_FLAGS = ("gamma", "temperature", "top_k", "top_p", "min_p", "seed", "max_tokens", "stop", "drafter", "p_min")


def shared(*names: str, **changes: dict):
    """Decorate a command with the shared flags `names`, as FLAGS declares them. `changes` replaces a
    flag's default or help where the command means something narrower (tune: -n per prompt)."""
    def decorate(fn):
        for name in reversed(names):
            decls, settings = FLAGS[name]
            settings = {**settings, **changes.get(name, {})}
            shown = settings.get("default") is not None  # show defaults, where there is one to show
            settings.setdefault("show_envvar", "envvar" in settings)
            if "envvar" in settings:
                settings.setdefault("cls", EnvvarOption)
            fn = click.option(*decls, name, show_default=shown, **settings)(fn)
        return fn
    return decorate


def model_options(fn):
    """Which models to load and how, and whether the target's tune profile fills what is not given."""
    fn = click.option("--profile/--no-profile", "use_profile", default=True, show_default=True, cls=EnvvarOption,
                      envvar="LOCALSPEC_PROFILE", show_envvar=True, help="Take --draft/--drafter/--gamma you do "
                      "not give from the target's `localspec tune` profile.")(fn)
    return tuned_defaults(shared(*MODEL_FLAGS)(fn))


# The sampling, speculation and length flags of generate, chat, serve; chat and serve answer until the
# answer ends or fills the context unless -n is given (answer_length).
sampling_options = shared(*GENERATION_FLAGS)
UNTIL_THE_END = {"default": None, "help": "Tokens per answer (default, or -1: until it ends or the context is full)."}
answer_options = shared(*GENERATION_FLAGS, max_tokens=UNTIL_THE_END)


def generation_config(options: dict, **fields) -> GenerationConfig:
    """The GenerationConfig the shared flags in `options` (a command's click kwargs) describe;
    `fields` sets what the command decides itself (gamma 0 for --target-only)."""
    sampling = SamplingParams(**{name: options[name] for name in SAMPLING})
    given = {name: options[name] for name in ("gamma", "drafter", "p_min")}
    given.update(max_tokens=answer_length(options), seed=seed_from(options["seed"]))
    return GenerationConfig(**{**given, "sampling": sampling, "stop": tuple(options["stop"]), **fields}).validate()


TUNE_FLAGS = ("temperature", "top_k", "top_p", "min_p", "p_min", "max_tokens", "gamma_max", "budget", "seed",
              "chat", "quants")


def long_flag(name: str) -> str:
    """A FLAGS entry's first long flag: --max-tokens for max_tokens."""
    return next(decl for decl in FLAGS[name][0] if decl.startswith("--"))


# What the library's errors name, as the CLI names it (said): GenerationConfig's and TuneOptions' fields
# by their flags, the Pair's LoadOptions by theirs, Chat's save(), reset() and restart (config.LIBRARY_NAMES)
# by chat's commands, a drafter and a missing draft model by --drafter and --draft, a prompt sent as is
# by generate's --raw, the list of devices by `localspec devices`, tune's quants and plot by its flags, and
# where models convert writes by its --out.
CLI_NAMES = {**{name: long_flag(name) for name in GENERATION_FLAGS}, "gamma_max": "--gamma-max",
             "budget_s": "--budget", "n_ctx": long_flag("ctx"), "load.n_ctx": long_flag("ctx"),
             **{name: long_flag(name) for name in ("threads", "tensor_split", "rpc", "ngl_target", "ngl_draft")},
             "devices": "`localspec devices`", "quants": "--quants", "plot": "--plot", "plot_path": "--plot path",
             "out": "--out",
             "lower_memory": f"lower {long_flag('ctx')}, {long_flag('ngl_target')} or {long_flag('ngl_draft')}",
             "save": "/save FILE", "reset": "/reset", "restart": f"restart with a larger {long_flag('ctx')}",
             **{f"drafter={kind}": f"{long_flag('drafter')} {kind}" for kind in DRAFTERS},
             "no_draft": f"; give {long_flag('draft')}, or use {long_flag('drafter')} ngram", "raw": "--raw"}


def tune_options(options: dict):
    """The TuneOptions tune's flags in `options` describe, checked (TuneError naming the bad field and
    value, which said words with its flag): no draft resolved and no device or server reached (tune adds
    those); --seed -1 drawn here."""
    from ..draftstop import FALLBACK_P_MIN
    from ..tune import TuneOptions, parse_quants

    p_min, seed = options["p_min"], seed_from(options["seed"])  # -1: a random seed, as generate takes it
    tune = TuneOptions(
        sampling=SamplingParams(*(options[name] for name in ("temperature", "top_k", "top_p", "min_p"))),
        max_tokens=options["max_tokens"], p_min=FALLBACK_P_MIN if p_min is None else p_min,  # auto: a fixed γ's
        gamma_max=options["gamma_max"], budget_s=options["budget"], chat=options["chat"],
        seed=secrets.randbits(32) if seed is None else seed, quants=parse_quants(options["quants"]))
    return tune.validate()


def check_before_load(options: dict) -> None:
    """Raise what a command whose flags are `options` refuses before it loads anything: generate,
    chat and serve their generation settings (generation_config), tune its options (tune_options).
    The one place config show and the config file's values (settings_file) are checked."""
    if set(GENERATION_FLAGS) <= options.keys():
        generation_config(options)
    elif set(TUNE_FLAGS) <= options.keys():
        tune_options(options)


def load_options(options: dict, **fields) -> LoadOptions:
    """The LoadOptions the shared model flags in `options` describe (those a command has)."""
    given = {name: options[name] for name in ("threads", "ngl_target", "ngl_draft") if name in options}
    given.update({name: split_names(options[name]) for name in PLACEMENT_FLAGS if name in options})
    if options.get("tensor_split"):
        given["tensor_split"] = options["tensor_split"]
    return LoadOptions(**{"n_ctx": options["ctx"], **given, **fields})


def load_pair(options: dict, with_draft: bool = True, on_server_lost=devices.exit_with_error) -> Pair:
    """Load the pair that the model flags name (the target alone unless with_draft). With no --draft
    (flag, environment or profile), the draft is pairing.choose_draft's, named once on stderr; its
    reason is left in pair.draft_reason for --stats/--json. With --rpc, on_server_lost(line) is
    called where ggml-rpc would abort the process (devices.on_rpc_abort). Pair is looked up on the
    localspec.cli package at call time, so tests can put fakes there."""
    from . import Pair as load  # noqa: F401

    if options.get("drafter") == "ngram" and options["draft"] is None:
        with_draft = False  # nothing would use a chosen draft model
    given_by = options.pop("draft_from", "--draft")  # "the tune profile" where the profile set --draft
    profile_none = given_by != "--draft" and options["draft"] == "none"  # its target-only pick: its reason stands
    target_path, draft_path, reason = draft_for(options["target"], options["draft"] if with_draft else "none",
                                                given_by)
    if not with_draft and not profile_none:
        draft_path, reason = None, "none (target only)" if options.get("drafter") != "ngram" else \
            "none (the ngram drafter needs no draft model)"
    load_with = load_options(options)
    check_names(load_with.device_target, load_with.device_draft, load_with.rpc)  # before minutes of loading
    if load_with.rpc:
        devices.on_rpc_abort(on_server_lost)
    if sys.stderr.isatty():
        click.echo(loading_line(target_path, draft_path, load_with), err=True)
    pair = load(target_path, draft_path, load_with)
    pair.draft_reason = reason
    if options["draft"] is None and with_draft:
        draft_name = draft_path.name if draft_path else "none"
        click.echo(f"localspec: draft {draft_name}: {reason}", err=True)
    return pair


def where(pair: Pair) -> str:
    """'runs on: target RPC0[10.0.0.2:50052], draft CPU', for --stats, from Pair.placement_now (--json's
    and the server's words): a draft left unloaded (saved measurements say it does not pay here:
    Pair.draft_deferred) is said to be not loaded, as the speculation line of the stats says it."""
    return "runs on: " + ", ".join(f"{role} {place}" for role, place in pair.placement_now().items())


def loading_line(target: Path, draft: Path | None, load: LoadOptions) -> str:
    """'loading target a.gguf (940 MiB, GPU) + draft b.gguf (380 MiB, GPU)': what loads, where. Layers
    go to the devices named, else (the target with --rpc) the RPC servers, else this machine's GPUs,
    as placement.place_pair places them: with none, the CPU, whatever -ngl says."""
    def one(role: str, path: Path, ngl: int, names: tuple[str, ...] | None) -> str:
        offload = devices.find_devices(names) if names else devices.local_devices()
        where = "CPU" if ngl == 0 or not offload else "GPU" if ngl >= ALL_LAYERS else f"{ngl} layers on the GPU"
        if role == "target" and load.rpc and ngl and not names:
            where = f"RPC {','.join(load.rpc)}"
        return f"{role} {path.name} ({path.stat().st_size / 2**20:,.0f} MiB, {where})"
    draft_part = f" + {one('draft', draft, load.ngl_draft, load.device_draft)}" if draft else ""
    return f"localspec: loading {one('target', target, load.ngl_target, load.device_target)}{draft_part}"


def draft_for(target: str | None, draft: str | None, given_by: str = "--draft") -> tuple[Path, Path | None, str]:
    """The target file, the draft file (None: none) and why that draft; given_by: what gave draft."""
    from .. import pairing

    if draft is not None:
        target_path, draft_path = models.pair_files(target, draft)
        if given_by != "--draft":
            return target_path, draft_path, f"{'none: ' if draft_path is None else ''}chosen by {given_by}"
        return target_path, draft_path, "--draft none" if draft_path is None else "given with --draft"
    name, paired = models.pair_names(target)
    if paired is not None:  # a catalog pair by name: both pulled if missing, as `models pull` would
        target_path, draft_path = models.pair_files(target, None)
        return target_path, draft_path, f"the catalog pairs {paired} with {name}"
    target_path = models.resolve_model(name)
    try:
        choice = pairing.choose_draft(target_path)
    except USER_ERRORS as e:
        return target_path, None, f"no draft model: could not check the installed models ({e})"
    return target_path, choice.path, choice.reason


def answer_length(options: dict) -> int:
    """-n as given; -1 (llama.cpp's "until the end"), or no -n in chat and serve: until the answer
    ends or fills the context (the context's length is the model's own with --ctx 0, known only
    once it is loaded)."""
    n = options["max_tokens"]
    if n is None or n == -1:
        return UNTIL_FULL
    if n < 1:
        raise GenerationError.about("max_tokens", f"must be >= 1, or -1 to run until the answer ends (got {n})")
    return n


PROFILE_FLAGS = ("draft", "drafter", "gamma", "ngl_draft", "p_min")


def tuned_defaults(fn):
    """Wrap a command so the chosen target's tune profile fills the speculation flags the user left out."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if uses_profile(kwargs):
            apply_profile(click.get_current_context(), kwargs)
        kwargs.pop("use_profile", None)
        return fn(*args, **kwargs)
    return wrapper


def uses_profile(kwargs: dict) -> bool:
    """Whether the tune profile fills what kwargs leave out: not with --no-profile or --target-only."""
    return kwargs.get("use_profile", False) and not kwargs.get("target_only")


def apply_profile(ctx: click.Context, kwargs: dict) -> set[str]:
    """Update kwargs from the profile beside the target (flags given on the command line or in the
    environment win); with --stats, say on stderr what was applied. The names it set."""
    from .. import profile

    # a flag, an environment variable or the config file (DEFAULT_MAP) wins over the profile
    explicit = {n for n in PROFILE_FLAGS if n in kwargs and ctx.get_parameter_source(n) != ParameterSource.DEFAULT}
    try:
        target = models.installed_target(kwargs.get("target"))
        choice = target and profile.load_profile(target, kwargs.get("temperature", SAMPLING["temperature"]))
    except USER_ERRORS as e:
        click.echo(f"warning: {e}", err=True)
        return set()
    if not choice:
        return set()
    updates, note = profile.merge_profile(choice, kwargs, explicit)
    if "draft" in updates:  # a draft file as --draft gives it; no draft: --draft none
        updates["draft"] = "none" if updates["draft"] is None else str(updates["draft"])
        updates["draft_from"] = "the tune profile"  # load_pair's reason for it
    kwargs.update(updates)
    if kwargs.get("show_stats"):
        click.echo(note, err=True)
    return set(updates)
