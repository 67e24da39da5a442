"""The command line: `localspec generate|chat|serve|tune|models ...`. The only package that imports click.

The group is here; each command lives in its own module, the flags they share in options.py.
`Pair` is looked up here when a command loads models, so tests can replace it with fakes."""

from __future__ import annotations

import click

from ..session import Pair  # noqa: F401  (options.load_pair loads through this name)


@click.group()
@click.version_option(package_name="localspec")
def cli():
    """Exact speculative decoding for local GGUF models.

    A small draft model guesses, the target verifies every guess in one batch, and the p/q rule
    keeps the output exactly the target's. Example:

        localspec generate "Write a Python function that reverses a string" --stats
    """


from . import chat, generate, models_cmd, serve, tune  # noqa: E402,F401  (each registers its commands)
from .options import generation_config, load_options  # noqa: E402,F401


def main():
    cli(prog_name="localspec")
