"""How the command line says a mistake: one line and exit code 1, no traceback (user_errors, the
one-line usage classes), as JSON with --json (JsonError), in the CLI's words (said, CLI_NAMES)."""

from __future__ import annotations

import functools
import json
from typing import Sequence

import click

from ..config import GenerationError, ModelError, check_environment, worded
from ..llama import LlamaError
from .flags import GENERATION_FLAGS, long_flag


USER_ERRORS = (ModelError, LlamaError, GenerationError, ValueError, OSError)


def user_errors(fn, names: dict[str, str] | None = None):
    """Turn localspec's one-line errors into click errors: a message in the CLI's words (said, by names
    where a command has its own) and exit code 1, no traceback. A closed stdout (`| head`) is no
    mistake: click ends it with exit code 1 and nothing printed."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except BrokenPipeError:
            raise
        except USER_ERRORS as e:
            error = click.ClickException(said(e, names))
            error.kind = type(e).__name__
            raise error from None
    return wrapper


def said(error: Exception, names: dict[str, str] | None = None) -> str:
    """A user error's one line as the CLI says it: naming the flags (CLI_NAMES, or a command's own names),
    not the fields and the LoadOptions a library caller is told of."""
    return worded(error, CLI_NAMES if names is None else names)


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
                raise click.ClickException(said(e)) from None
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
             **{f"{kind}_drafter": f"{long_flag('drafter')} {kind}" for kind in ("model", "hybrid")},
             "no_draft": f"give {long_flag('draft')}, or use {long_flag('drafter')} ngram", "raw": "--raw"}
