"""How the commands turn their flags (flags.py) into a GenerationConfig, TuneOptions, LoadOptions and a
loaded Pair; the target's tune profile filling the flags not given; the JSON line --json prints."""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from .. import devices, models, naming
from ..config import GenerationConfig, GenerationError, seed_from
from ..placement import ALL_LAYERS, check_names, split_names
from ..sampling import SamplingParams
from ..session import LoadOptions, Pair, Reply
from .errors import USER_ERRORS, said
from .flags import GENERATION_FLAGS, MODEL_FLAGS, PLACEMENT_FLAGS, SAMPLING, TUNE_FLAGS, EnvvarOption, shared

UNTIL_FULL = 2**31 - 1  # a max_tokens no context reaches: the answer runs until it ends or fills the context


def settings(config: GenerationConfig) -> dict:
    """The settings a generation ran with, as --json echoes them (gamma 'auto' or N; drafter as --drafter
    names it, 'none' for the target alone; max_tokens null: until the answer ends or fills the context)."""
    return {**dataclasses.asdict(config.sampling), "gamma": "auto" if config.gamma is None else config.gamma,
            "drafter": "none" if config.gamma == 0 else config.drafter,
            "p_min": "auto" if config.p_min is None else config.p_min,
            "max_tokens": None if config.max_tokens == UNTIL_FULL else config.max_tokens, "seed": config.seed,
            "stop": list(config.stop)}


def answer_json(pair: Pair, reply: Reply, config: GenerationConfig) -> str:
    """The JSON line --json prints for one answer, the same for generate and for each of chat's: the
    text, why it ended, the target and draft, why that draft, where they run, the settings and the stats."""
    return json.dumps({"text": reply.text, "finish_reason": reply.finish_reason,
                       "target": str(pair.target_model.path),
                       "draft": str(pair.draft_path) if pair.draft_path else None,
                       "draft_reason": pair.draft_reason, "placement": pair.placement_now(),
                       "settings": settings(config), "stats": reply.stats.to_dict()})


def model_options(fn):
    """Which models to load and how, and whether the target's tune profile fills what is not given."""
    fn = click.option("--profile/--no-profile", "use_profile", default=True, show_default=True, cls=EnvvarOption,
                      envvar="LOCALSPEC_PROFILE", show_envvar=True, help="Take --draft/--drafter/--gamma you do "
                      "not give from the target's `localspec tune` profile.")(fn)
    return tuned_defaults(shared(*MODEL_FLAGS)(fn))


def generation_config(options: dict, **fields) -> GenerationConfig:
    """The GenerationConfig the shared flags in `options` (a command's click kwargs) describe;
    `fields` sets what the command decides itself (gamma 0 for --target-only)."""
    sampling = SamplingParams(**{name: options[name] for name in SAMPLING})
    given = {name: options[name] for name in ("gamma", "drafter", "p_min")}
    given.update(max_tokens=answer_length(options), seed=seed_from(options["seed"]))
    return GenerationConfig(**{**given, "sampling": sampling, "stop": tuple(options["stop"]), **fields}).validate()


def tune_options(options: dict):
    """The TuneOptions tune's flags in `options` describe, checked (TuneError naming the bad field and
    value, which said words with its flag): no draft resolved and no device or server reached (tune adds
    those); --seed -1 drawn here."""
    from ..draftstop import FALLBACK_P_MIN
    from ..tune import TuneOptions, parse_quants

    p_min, seed = options["p_min"], seed_from(options["seed"])  # -1: a random seed, as generate takes it
    tune = TuneOptions(
        sampling=SamplingParams(*(options[name] for name in ("temperature", "top_k", "top_p", "min_p"))),
        max_tokens=options["max_tokens"], p_min=FALLBACK_P_MIN if p_min is None else p_min,  # auto: a fixed γ's
        gamma_max=options["gamma_max"], budget_s=options["budget"], chat=options["chat"],
        seed=secrets.randbits(32) if seed is None else seed, quants=parse_quants(options["quants"]))
    return tune.validate()


def check_before_load(options: dict) -> None:
    """Raise what a command whose flags are `options` refuses before it loads anything: generate,
    chat and serve their generation settings (generation_config), tune its options (tune_options).
    The one place config show and the config file's values (settings_file) are checked."""
    if set(GENERATION_FLAGS) <= options.keys():
        generation_config(options)
    elif set(TUNE_FLAGS) <= options.keys():
        tune_options(options)


def load_options(options: dict, **fields) -> LoadOptions:
    """The LoadOptions the shared model flags in `options` describe (those a command has)."""
    given = {name: options[name] for name in ("threads", "ngl_target", "ngl_draft") if name in options}
    given.update({name: split_names(options[name]) for name in PLACEMENT_FLAGS if name in options})
    if options.get("tensor_split"):
        given["tensor_split"] = options["tensor_split"]
    return LoadOptions(**{"n_ctx": options["ctx"], **given, **fields})


def load_pair(options: dict, with_draft: bool = True, on_server_lost=devices.exit_with_error) -> Pair:
    """Load the pair that the model flags name (the target alone unless with_draft). With no --draft
    (flag, environment or profile), the draft is pairing.choose_draft's, named once on stderr; its
    reason is left in pair.draft_reason for --stats/--json. With --rpc, on_server_lost(line) is
    called where ggml-rpc would abort the process (devices.on_rpc_abort). Pair is looked up on the
    localspec.cli package at call time, so tests can put fakes there."""
    from . import Pair as load  # noqa: F401

    if options.get("drafter") == "ngram" and options["draft"] is None:
        with_draft = False  # nothing would use a chosen draft model
    given_by = options.pop("draft_from", "--draft")  # "the tune profile" where the profile set --draft
    profile_none = given_by != "--draft" and options["draft"] == "none"  # its target-only pick: its reason stands
    target_path, draft_path, reason = draft_for(options["target"], options["draft"] if with_draft else "none",
                                                given_by)
    if not with_draft and not profile_none:
        draft_path, reason = None, "none (target only)" if options.get("drafter") != "ngram" else \
            "none (the ngram drafter needs no draft model)"
    load_with = load_options(options)
    check_names(load_with.device_target, load_with.device_draft, load_with.rpc)  # before minutes of loading
    if load_with.rpc:
        devices.on_rpc_abort(on_server_lost)
    if sys.stderr.isatty():
        click.echo(loading_line(target_path, draft_path, load_with), err=True)
    pair = load(target_path, draft_path, load_with)
    pair.draft_reason = reason
    if options["draft"] is None and with_draft:
        draft_name = draft_path.name if draft_path else "none"
        click.echo(f"localspec: draft {draft_name}: {reason}", err=True)
    return pair


def where(pair: Pair) -> str:
    """'runs on: target RPC0[10.0.0.2:50052], draft CPU', for --stats, from Pair.placement_now (--json's
    and the server's words): a draft left unloaded (saved measurements say it does not pay here:
    Pair.draft_deferred) is said to be not loaded, as the speculation line of the stats says it."""
    return "runs on: " + ", ".join(f"{role} {place}" for role, place in pair.placement_now().items())


def loading_line(target: Path, draft: Path | None, load: LoadOptions) -> str:
    """'loading target a.gguf (940 MiB, GPU) + draft b.gguf (380 MiB, GPU)': what loads, where. Layers
    go to the devices named, else (the target with --rpc) the RPC servers, else this machine's GPUs,
    as placement.place_pair places them: with none, the CPU, whatever -ngl says."""
    def one(role: str, path: Path, ngl: int, names: tuple[str, ...] | None) -> str:
        offload = devices.find_devices(names) if names else devices.local_devices()
        where = "CPU" if ngl == 0 or not offload else "GPU" if ngl >= ALL_LAYERS else f"{ngl} layers on the GPU"
        if role == "target" and load.rpc and ngl and not names:
            where = f"RPC {','.join(load.rpc)}"
        return f"{role} {path.name} ({path.stat().st_size / 2**20:,.0f} MiB, {where})"
    draft_part = f" + {one('draft', draft, load.ngl_draft, load.device_draft)}" if draft else ""
    return f"localspec: loading {one('target', target, load.ngl_target, load.device_target)}{draft_part}"


def draft_for(target: str | None, draft: str | None, given_by: str = "--draft") -> tuple[Path, Path | None, str]:
    """The target file, the draft file (None: none) and why that draft; given_by: what gave draft."""
    from .. import pairing

    if draft is not None:
        target_path, draft_path = naming.pair_files(target, draft)
        if given_by != "--draft":
            return target_path, draft_path, f"{'none: ' if draft_path is None else ''}chosen by {given_by}"
        return target_path, draft_path, "--draft none" if draft_path is None else "given with --draft"
    name, paired = models.pair_names(target)
    if paired is not None:  # a catalog pair by name: both pulled if missing, as `models pull` would
        target_path, draft_path = naming.pair_files(target, None)
        return target_path, draft_path, f"the catalog pairs {paired} with {name}"
    target_path = naming.resolve_model(name)
    try:
        choice = pairing.choose_draft(target_path)
    except USER_ERRORS as e:
        return target_path, None, f"no draft model: could not check the installed models ({said(e)})"
    return target_path, choice.path, choice.reason


def answer_length(options: dict) -> int:
    """-n as given; -1 (llama.cpp's "until the end"), or no -n in chat and serve: until the answer
    ends or fills the context (the context's length is the model's own with --ctx 0, known only
    once it is loaded)."""
    n = options["max_tokens"]
    if n is None or n == -1:
        return UNTIL_FULL
    if n < 1:
        raise GenerationError.about("max_tokens", f"must be >= 1, or -1 to run until the answer ends (got {n})")
    return n


PROFILE_FLAGS = ("draft", "drafter", "gamma", "ngl_draft", "p_min")


def tuned_defaults(fn):
    """Wrap a command so the chosen target's tune profile fills the speculation flags the user left out."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if uses_profile(kwargs):
            apply_profile(click.get_current_context(), kwargs)
        kwargs.pop("use_profile", None)
        return fn(*args, **kwargs)
    return wrapper


def uses_profile(kwargs: dict) -> bool:
    """Whether the tune profile fills what kwargs leave out: not with --no-profile or --target-only."""
    return kwargs.get("use_profile", False) and not kwargs.get("target_only")


def apply_profile(ctx: click.Context, kwargs: dict) -> set[str]:
    """Update kwargs from the profile beside the target (flags given on the command line or in the
    environment win); with --stats, say on stderr what was applied. The names it set."""
    from .. import profile

    # a flag, an environment variable or the config file (DEFAULT_MAP) wins over the profile
    explicit = {n for n in PROFILE_FLAGS if n in kwargs and ctx.get_parameter_source(n) != ParameterSource.DEFAULT}
    try:
        target = naming.installed_target(kwargs.get("target"))
        choice = target and profile.load_profile(target, kwargs.get("temperature", SAMPLING["temperature"]))
    except USER_ERRORS as e:
        click.echo(f"warning: {said(e)}", err=True)
        return set()
    if not choice:
        return set()
    updates, note = profile.merge_profile(choice, kwargs, explicit)
    if "draft" in updates:  # a draft file as --draft gives it; no draft: --draft none
        updates["draft"] = "none" if updates["draft"] is None else str(updates["draft"])
        updates["draft_from"] = "the tune profile"  # load_pair's reason for it
    kwargs.update(updates)
    if kwargs.get("show_stats"):
        click.echo(note, err=True)
    return set(updates)
