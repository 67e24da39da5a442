"""The command line: `localspec generate|chat|serve|tune|models ...`. The only package that imports click.

The group is here; each command lives in its own module, the flags they share in flags.py (how a
mistake is said: errors.py; how flags become a config and a loaded pair: options.py).
`Pair` is looked up here when a command loads models, so tests can replace it with fakes."""

from __future__ import annotations

import os
import signal

import click

from ..session import Pair  # noqa: F401  (options.load_pair loads through this name)
from .errors import OneLineGroup
from .flags import EnvvarOption


@click.group(cls=OneLineGroup)
@click.version_option(package_name="localspec")
@click.option("--verbose", is_flag=True, envvar="LOCALSPEC_VERBOSE", show_envvar=True, cls=EnvvarOption,
              help="Show llama.cpp's own log on stderr (model loading, backends).")
def cli(verbose):
    """Exact speculative decoding for local GGUF models.

    A small draft model guesses, the target verifies every guess in one batch, and the p/q rule
    keeps the output exactly the target's. Example:

        localspec generate "Write a Python function that reverses a string" --stats

    Defaults for any flag can live in ~/.config/localspec/config.toml ($LOCALSPEC_CONFIG): a
    [defaults] table and one per command; `localspec config show` says where each setting comes from.
    Precedence: flag > environment variable > config file > tune profile > built-in default.
    """
    if verbose:
        os.environ["LOCALSPEC_VERBOSE"] = "1"  # read by llama.py when it loads a model


from . import chat, config_cmd, devices_cmd, generate, models_cmd, serve, tune  # noqa: E402,F401  (each registers its commands)
from .options import generation_config, load_options  # noqa: E402,F401


def main():
    # SIGTERM (timeout, kill, systemd, docker) as Ctrl-C: a command stops the same way and cleans up
    # what it was writing (a conversion's partial file); serve and rpc-server install their own
    signal.signal(signal.SIGTERM, terminate)
    cli(prog_name="localspec")


def terminate(signum, frame):
    raise KeyboardInterrupt
