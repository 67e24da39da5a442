"""`localspec config show`: the settings a command would run with, and where each came from."""

from __future__ import annotations

import click
from click.core import ParameterSource

from . import cli
from .errors import user_errors
from .flags import AutoOr
from .options import apply_profile, check_before_load, uses_profile
from .settings_file import COMMANDS, config_path

SOURCES = {ParameterSource.COMMANDLINE: "flag", ParameterSource.ENVIRONMENT: "env",
           ParameterSource.DEFAULT_MAP: "config", ParameterSource.DEFAULT: "default"}


@cli.group("config")
def config_group():
    """The config file (~/.config/localspec/config.toml, or $LOCALSPEC_CONFIG)."""


@config_group.command("show", context_settings={"ignore_unknown_options": True})
@click.argument("command", type=click.Choice(COMMANDS), default="generate")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@user_errors
def config_show(command, args):
    """Print COMMAND's effective settings (default: generate) and where each came from: flag, env,
    config, profile or default. Flags after COMMAND are taken as that command would take them.

    Example: localspec config show chat --temp 0.3
    """
    path = config_path()
    cmd = cli.commands[command]
    parent = click.get_current_context().find_root()  # the file is read as cmd's flags are (read_config_file)
    ctx = cmd.make_context(command, list(args), parent=parent)  # a value the command would refuse: an error
    values = dict(ctx.params)
    sources = {name: SOURCES.get(ctx.get_parameter_source(name), "default") for name in values}
    if uses_profile(values):
        with ctx:
            sources.update({name: "profile" for name in apply_profile(ctx, values) if name in sources})
    check_before_load(values)
    if command == "generate":  # flags that exclude each other, as generate refuses them
        from .generate import check_conflicts

        check_conflicts(ctx, values["target_only"], values["chat"], values["system"])
    click.echo(f"config file: {path}" + ("" if path.exists() else " (none)"))
    types = {param.name: param.type for param in cmd.params}
    for name, source in sources.items():
        click.echo(f"{name} = {as_written(types.get(name), values[name])!r}  ({source})")


def as_written(kind: click.ParamType | None, value):
    """A value as a user would give it: 'auto' for the None that --gamma auto and --p-min auto become."""
    return "auto" if isinstance(kind, AutoOr) and value is None else value
