"""The config file: defaults for any flag, in ~/.config/localspec/config.toml (or $LOCALSPEC_CONFIG).

    [defaults]          # every command that has the flag
    temperature = 0.2
    ctx-size = 8192     # a flag's long name (any of them) or its parameter name
    [generate]          # one command: generate, chat, serve, tune
    stop = ["\\n\\n"]

click reads these as each command's default_map, so a flag or an environment variable wins over the
file, and the file wins over a tune profile (apply_profile counts DEFAULT_MAP as given) and the
built-in defaults."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

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
    """The file's tables ({} when there is no file); a bad file is a one-line error."""
    if not path.is_file():
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


def default_map(group: click.Group, path: Path) -> dict:
    """{command: {parameter name: value}} for click, from [defaults] and each command's own table."""
    data = read_config(path)
    out = {}
    for name in COMMANDS:
        command = group.commands[name]
        names = {opt.lstrip("-").replace("-", "_"): p.name for p in command.params for opt in (*p.opts, p.name)}
        values = {}
        for table in ("defaults", name):
            for key, value in data.get(table, {}).items():
                param = names.get(key.lstrip("-").replace("-", "_"))
                if param is not None:
                    values[param] = value
                elif table == name:
                    raise click.ClickException(f"{path}: [{name}] has no setting {key!r}; "
                                               f"see `localspec {name} --help`")
        out[name] = values
    return out
