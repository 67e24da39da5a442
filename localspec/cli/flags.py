"""The flags generate, chat, serve and tune share, declared once each (the FLAGS table), the click
types that parse them, and the decorators that put them on a command (shared)."""

from __future__ import annotations

import dataclasses
import os
import re
import sys

import click
from click.core import ParameterSource

from ..config import DRAFTERS, GenerationConfig
from ..placement import ALL_LAYERS
from ..sampling import SamplingParams
from ..session import LoadOptions


def use_colour(show_drafts: bool | None) -> bool:
    """--show-drafts as given, else on when stdout is a colour terminal (no NO_COLOR, TERM not dumb)."""
    colour_terminal = os.environ.get("TERM", "") != "dumb" and "NO_COLOR" not in os.environ
    return sys.stdout.isatty() and (colour_terminal if show_drafts is None else show_drafts)


SHOW_DRAFTS = click.option("--show-drafts/--no-show-drafts", default=None, help="Print accepted draft tokens in green "
                           "(default: on when stdout is a colour terminal).")
GREEN, PLAIN = "\x1b[32m", "\x1b[0m"

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

# The sampling, speculation and length flags of generate, chat, serve; chat and serve answer until the
# answer ends or fills the context unless -n is given (options.answer_length).
sampling_options = shared(*GENERATION_FLAGS)
UNTIL_THE_END = {"default": None, "help": "Tokens per answer (default, or -1: until it ends or the context is full)."}
answer_options = shared(*GENERATION_FLAGS, max_tokens=UNTIL_THE_END)

TUNE_FLAGS = ("temperature", "top_k", "top_p", "min_p", "p_min", "max_tokens", "gamma_max", "budget", "seed",
              "chat", "quants")


def long_flag(name: str) -> str:
    """A FLAGS entry's first long flag: --max-tokens for max_tokens."""
    return next(decl for decl in FLAGS[name][0] if decl.startswith("--"))
