"""`localspec tune`: find the fastest configuration for a target and save it as its profile."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from .. import devices, models, naming
from ..placement import check_names, split_names
from ..session import LoadOptions
from . import cli
from .errors import JsonErrors, user_errors
from .flags import FLAGS, shared, WholeNumber
from .options import tune_options


@cli.command(cls=JsonErrors)
@shared("target")
@click.option(*FLAGS["draft"][0], "drafts", multiple=True,  # the shared flag's names: -md/--model-draft too
              help="Also try this draft from outside the store (repeatable; 'none' adds none).")
@click.option("--quants", default="Q4_0,Q3_K_S,Q2_K", show_default=True,
              help="Types to derive from each draft and try (cached in the store); 'none' for none.")
@shared("temperature", "top_k", "top_p", "min_p", "p_min", temperature={"help": "Tune for this temperature (0: greedy)."},
        p_min={"help": "Draft confidence stop of the fixed-γ candidates, auto: what a fixed --gamma takes (hybrid "
               "auto runs with p-min auto)."})
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False, path_type=Path),
              help='Calibration prompts: a JSONL file of {"prompt": ...} (default: 8 HumanEval prompts).')
@click.option("--n-prompts", type=WholeNumber(1), default=8, show_default=True)
@shared("max_tokens", max_tokens={"default": 64, "help": "Tokens generated per prompt."})
@click.option("--gamma-max", type=int, default=8, show_default=True, help="The longest draft tried.")
@click.option("--budget", type=float, default=600, show_default=True, help="Seconds the whole run may take.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG of speedup vs gamma per candidate.")
@click.option("--chat/--raw", default=None, help="Calibrate through the chat template (default if the model has one).")
@shared("ngl_target", "device_target", "device_draft", "rpc", "threads", "ctx", "seed",
        seed={"default": 1, "help": "Seed of the calibration runs' sampling: every candidate is judged on the same "
              "draws (-1: a random one, reported)."})
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@user_errors
def tune(target, drafts, quants, temperature, top_k, top_p, min_p, p_min, prompts_file, n_prompts, max_tokens,
         gamma_max, budget, plot, chat, ngl_target, device_target, device_draft, rpc, threads, ctx, seed, as_json):
    """Find the fastest exact configuration for a target on this machine; save it as its profile.

    Tries every compatible draft in the store, types derived from them, n-gram lookup and plain
    decoding; predicts tokens/s at each draft length from measured acceptance and costs, confirms
    the best three and the hybrid at γ auto over the two best drafts by real runs, and saves the
    pick beside the target. Later generate, chat and serve runs with that target use it for the
    flags they are not given. Example:

        localspec tune --temperature 0 --plot tune.png
    """
    from .. import prompts as prompt_sets, tune as tuning

    if plot:
        tuning.check_plot(plot)
    options = dataclasses.replace(  # the flags by name: tune_options reads its own
        tune_options(locals()), load=tune_load(ctx, threads, ngl_target, device_target, device_draft, rpc),
        drafts=tuple(given_draft(name) for name in drafts if not models.names_no_draft(name)))  # as --draft none
    if seed == -1:  # as generate reports a seed it drew, so that the run can be repeated
        click.echo(f"localspec tune: seed {options.seed} (drawn for --seed -1; --seed {options.seed} repeats it)",
                   err=True)
    prompts = prompt_sets.load_prompts(prompts_file, n_prompts)
    target_path, _ = naming.pair_files(target, "none")
    result = tuning.run_tune(target_path, options, prompts, log=lambda s: click.echo(s, err=True), progress=True)
    saved, kept = result.save()
    if plot:
        result.plot(plot)
    if kept:
        click.echo(f"localspec tune: {kept}", err=True)
    if as_json:
        click.echo(json.dumps({**result.to_dict(saved), "profile_kept": bool(kept)}, indent=2))
        return
    for line in result.skipped:
        click.echo(f"left out: {line}", err=True)
    click.echo(result.table())
    click.echo(result.summary())
    click.echo(f"profile: {saved}" + (f"\nplot: {plot}" if plot else ""))


def given_draft(name: str) -> Path:
    """A draft named with -d: a GGUF file, or a one-line error (one found in the store that is not
    GGUF is left out of the candidates with a note; one the user names is a mistake)."""
    from ..llama import check_gguf_file

    path = naming.resolve_model(name)
    check_gguf_file(path)
    return path


def tune_load(ctx, threads, ngl_target, device_target, device_draft, rpc) -> LoadOptions:
    """Where tune loads: the target as given; drafts on the CPU unless --device-draft names devices."""
    load = LoadOptions(ctx, threads, ngl_target, 0, split_names(device_target), split_names(device_draft),
                       split_names(rpc))
    check_names(load.device_target, load.device_draft, load.rpc)
    if load.rpc:
        devices.on_rpc_abort(devices.exit_with_error)
    return load
