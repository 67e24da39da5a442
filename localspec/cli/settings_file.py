"""The config file: defaults for any flag, in ~/.config/localspec/config.toml (or $LOCALSPEC_CONFIG).

    [defaults]          # every command that has the flag
    temperature = 0.2
    ctx-size = 8192     # a flag's long name (any of them) or its parameter name
    [generate]          # one command: generate, chat, serve, tune
    stop = ["\\n\\n"]      # a repeatable flag: a list, or one value (a list of one)
    raw = true          # an on/off flag's off name takes true only: --raw (chat = false alike)

click reads these as each command's default_map, so a flag or an environment variable wins over the
file, and the file wins over a tune profile (apply_profile counts DEFAULT_MAP as given) and the
built-in defaults."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click
from click.core import augment_usage_errors

from .errors import said
from .flags import GENERATION_FLAGS, TUNE_FLAGS
from .options import check_before_load

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

COMMANDS = ("generate", "chat", "serve", "tune")


def config_path() -> Path:
    """$LOCALSPEC_CONFIG, else $XDG_CONFIG_HOME/localspec/config.toml (~/.config by default)."""
    if os.environ.get("LOCALSPEC_CONFIG"):
        return Path(os.environ["LOCALSPEC_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "localspec" / "config.toml"


def read_config(path: Path) -> dict:
    """The file's tables ({} when there is no file); a bad file is a one-line error. Any file that is
    not a folder is read: an empty one, /dev/null too (git's GIT_CONFIG=/dev/null habit), sets nothing."""
    if path.is_dir():
        raise click.ClickException(f"the config file {path} is a directory; point LOCALSPEC_CONFIG at a .toml file")
    if not path.exists():
        if os.environ.get("LOCALSPEC_CONFIG"):  # named on purpose: a typo would be silently ignored
            raise click.ClickException(f"LOCALSPEC_CONFIG names {path}, which does not exist; "
                                       f"create it or unset LOCALSPEC_CONFIG")
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError) as e:
        raise click.ClickException(f"cannot read the config file {path}: {e}") from None
    unknown = [k for k in data if k not in ("defaults", *COMMANDS)]
    if unknown or not all(isinstance(v, dict) for v in data.values()):
        raise click.ClickException(f"{path}: only the tables [defaults] and [{'], ['.join(COMMANDS)}] may appear "
                                   f"(found {', '.join(unknown) or 'a value outside a table'})")
    return data


def default_map(group: click.Group, path: Path, name: str) -> dict:
    """{parameter name: value} for click's default_map of the command `name` run, from [defaults] and
    [name]; each value given as its flag's (_as_flag) and checked as the command would check it
    (_check). Every command's own table is checked on each run (its values are for that command
    alone), [defaults] for the command run only: a value may suit one command and not another
    (max-tokens = -1 runs generate to the end, tune takes 2 or more). A key no command takes is an error."""
    data = read_config(path)
    out = {}
    for command in COMMANDS:
        tables = ("defaults", command) if command == name else (command,)
        others = [group.commands[other] for other in COMMANDS if other != command]
        values = _values(group.commands[command], {table: data.get(table, {}) for table in tables}, path, others)
        if command == name:
            out = values
    defaults = data.get("defaults", {})  # every command's keys are gathered only where [defaults] is set
    known = {key for command in COMMANDS for key in _settings(group.commands[command])} if defaults else set()
    unused = [key for key in defaults if _as_key(key) not in known]
    if unused:
        raise click.ClickException(f"{path}: [defaults] has no setting {unused[0]!r} that any of "
                                   f"{', '.join(COMMANDS)} takes; see `localspec COMMAND --help`")
    return out


def _values(command: click.Command, tables: dict[str, dict], path: Path, others: list[click.Command] = ()) -> dict:
    """{parameter name: value} of command from tables ({table: its settings}, [defaults] first), each
    checked (_as_flag, _check). A key of [defaults] that command has no flag for is another command's,
    one its own table sets is not its value; an error in one names the fix: giving command its own,
    where one of the others would take the value, else correcting it."""
    if not any(tables.values()):  # nothing set for it: no checks to make (most runs, no file)
        return {}
    params, defaults, values = _settings(command), _checked_defaults(command), {}
    own = {params[_as_key(key)][0].name for key in tables.get(command.name, {}) if _as_key(key) in params}
    for table, settings in tables.items():
        for key, value in settings.items():
            param, off = params.get(_as_key(key), (None, False))
            if table == "defaults" and (param is None or param.name in own):
                continue
            if param is None:
                raise click.ClickException(f"{path}: [{table}] has no setting {key!r}; "
                                           f"see `localspec {table} --help`")
            where = f"{path}: [{table}] {key}"
            try:
                values[param.name] = _as_flag(param, value, where, key if off else None)
                _check(command, param, values[param.name], defaults, f"{where} = {_shown(value)}")
            except click.ClickException as e:
                if table != "defaults":
                    raise
                if not _suits_another(others, key, value):
                    raise click.ClickException(f"{e.message}; correct it in [defaults]: no command that takes "
                                               f"{key} takes this value") from None
                raise click.ClickException(f"{e.message}; or, to keep it for the other commands, give "
                                           f"{command.name} its own {key} in a [{command.name}] table") from None
    return values


def _suits_another(others: list[click.Command], key: str, value) -> bool:
    """Whether one of the other commands that has the setting key would take value from [defaults]."""
    for other in others:
        param, off = _settings(other).get(_as_key(key), (None, False))
        if param is None:
            continue
        try:
            _check(other, param, _as_flag(param, value, key, key if off else None), _checked_defaults(other), key)
        except click.ClickException:
            continue
        return True
    return False


def _settings(command: click.Command) -> dict[str, tuple[click.Parameter, bool]]:
    """{key: (parameter, off)} for each key the file may set of command's: every name of each flag
    and its parameter name, and an on/off flag's off names (--raw, --no-profile: off True)."""
    names = {}
    for param in command.params:
        names.update({_as_key(name): (param, False) for name in (*param.opts, param.name)})
        names.update({_as_key(name): (param, True) for name in param.secondary_opts})
    return names


def _as_key(name: str) -> str:
    """A flag's name or a key in the file as one spelling: '--ctx-size', 'ctx-size' -> 'ctx_size'."""
    return name.lstrip("-").replace("-", "_")


def _as_flag(param: click.Parameter, value, where: str, off: str | None = None):
    """value as the command line would give it: a string for each value (so that click converts it as
    it converts a flag's, `gamma = 1.5` refused as `--gamma 1.5` is, not cut to 1), a list of them
    for a repeatable flag (one value, `stop = "\\n\\n"`, as one flag gives it: a list of one), true
    or false for an on/off flag; an off name (`off`, e.g. raw) only true, the flag's false; else a
    one-line error naming where it came from."""
    def text(v) -> str:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            several = ", or a list of them" if param.multiple else ""
            raise click.ClickException(f"{where} = {_shown(value)}: give {param.type.name} as after its flag, "
                                       f"a quoted string or a number{several}")
        return str(v)

    if getattr(param, "is_bool_flag", False):
        if not isinstance(value, bool):
            raise click.ClickException(f"{where} = {_shown(value)}: give true or false")
        if off is not None:
            on = max(param.opts, key=len).lstrip("-")
            if not value:  # not a guess between the flag's on and its default (--chat/--raw: None, auto)
                raise click.ClickException(f"{where} = false: {off} only turns {on} off, so give true; "
                                           f"to turn it on, give {on} = true")
            return False
        return value
    if param.multiple:
        return [text(v) for v in (value if isinstance(value, list) else [value])]
    return text(value)


def _checked_defaults(command: click.Command) -> dict:
    """The built-in defaults of command's flags that check_before_load reads."""
    ctx = click.Context(command)
    return {p.name: p.process_value(ctx, p.get_default(ctx)) for p in command.params
            if p.name in GENERATION_FLAGS or p.name in TUNE_FLAGS}


def _check(command: click.Command, param: click.Parameter, value, defaults: dict, where: str) -> None:
    """A one-line error naming where, if command would refuse value (as _as_flag gives it) for param:
    by its flag's type and callback (--cors-origin's), and by what the command refuses before loading
    (check_before_load: temperature -1, -n 0, tune's --budget 0) with its other flags at their
    built-in defaults (_checked_defaults)."""
    ctx = click.Context(command)
    try:
        with augment_usage_errors(ctx, param=param):  # a callback's error names its flag, as when parsing
            given = param.process_value(ctx, value)
        check_before_load({**defaults, param.name: given})
    except click.ClickException as e:  # click's BadParameter; its full stop would end the line mid-way
        raise click.ClickException(f"{where}: {e.format_message().rstrip('.')}") from None
    except ValueError as e:  # generation_config's GenerationError, tune_options' TuneError
        raise click.ClickException(f"{where}: {said(e)}") from None


def _shown(value) -> str:
    """value much as it reads in the file (JSON writes TOML's strings, numbers, booleans and arrays alike)."""
    return json.dumps(value, ensure_ascii=False, default=str)
