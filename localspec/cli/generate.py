"""`localspec generate`: one prompt, streamed to stdout."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from ..config import GenerationConfig
from ..session import Pair, Reply
from . import cli
from .errors import JsonErrors, user_errors
from .flags import GREEN, PLAIN, SHOW_DRAFTS, Escaped, sampling_options, unescape, use_colour
from .options import answer_json, generation_config, load_pair, model_options, where


@cli.command(cls=JsonErrors)
@click.argument("prompt", required=False)
@model_options
@sampling_options
@click.option("--target-only", is_flag=True, help="Plain decoding with the target alone (same code path, gamma 0).")
@click.option("--chat/--raw", default=None, help="Apply the GGUF's chat template (default if the model has one).")
@click.option("--system", type=Escaped(), help="System prompt (with --chat).")
@SHOW_DRAFTS
@click.option("--stats", "show_stats", is_flag=True, help="Print a summary of speculation and timing on stderr.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with the text and the stats.")
@click.option("-p", "--prompt", "prompt_flag", help="The prompt, as llama-cli's -p takes it (or give it as PROMPT).")
@click.option("-f", "--file", "prompt_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Read the prompt from this file, as llama-cli's -f (taken as it is, no escapes).")
@user_errors
def generate(prompt, target_only, chat, system, show_drafts, show_stats, as_json, prompt_flag, prompt_file, **options):
    r"""Generate a continuation of PROMPT (or of stdin) and stream it to stdout. In PROMPT, --system
    and --stop, \n, \t and \\ are a newline, a tab and a backslash (as in llama-cli).

    Example: localspec generate "def fib(n):" --raw --temperature 0 --stats
    """
    ctx = click.get_current_context()
    check_conflicts(ctx, target_only, chat, system)  # before waiting on stdin
    prompt = read_prompt(*command_line_prompt(ctx, prompt, prompt_flag, prompt_file))
    config = generation_config(options, gamma=0) if target_only else generation_config(options)
    pair = load_pair(options, with_draft=not target_only and config.gamma != 0)  # --gamma 0 drafts nothing
    try:
        use_chat = pair.chats_by_default() if chat is None else chat
        tokens = pair.prompt_tokens(prompt, use_chat, system)
        reply = stream_reply(pair.stream(tokens, config), echo=not as_json, colour=use_colour(show_drafts))
        if not use_chat and reply.stats.generated == 0 and reply.finish_reason == "stop" \
                and pair.target_model.chat_template() is not None:  # its end-of-turn token came first
            click.echo("localspec: the model ended its reply at once; an instruct or chat model may need --chat "
                       "(its chat template around the prompt)", err=True)
        report(pair, reply, config if as_json else None, show_stats)
    finally:
        pair.close()


def check_conflicts(ctx: click.Context, target_only: bool, chat: bool | None, system: str | None) -> None:
    """A one-line error where the command line asks for two things that exclude each other (a value
    the config file or the environment sets is a default, which the other flag overrides)."""
    given = lambda name: ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE  # noqa: E731
    if target_only:
        drafting = [f"--{n.replace('_', '-')}" for n in ("gamma", "drafter", "p_min") if given(n)]
        if drafting:
            raise click.ClickException(f"--target-only decodes with the target alone; leave out "
                                       f"{' and '.join(drafting)}, or --target-only")
    if chat is False and system is not None and given("system"):
        raise click.ClickException("--system needs the chat template, which --raw turns off; leave out one of them")


def command_line_prompt(ctx: click.Context, argument: str | None, flag: str | None,
                        file: Path | None) -> tuple[str | None, str | None, Path | None]:
    """PROMPT, -p and -f as read_prompt takes them: where the command line gives one, a prompt or file
    the config file sets is a default it replaces (flag > config file), not a second prompt."""
    values = {"prompt": argument, "prompt_flag": flag, "prompt_file": file}
    from_config = {name for name in values if ctx.get_parameter_source(name) == ParameterSource.DEFAULT_MAP}
    if any(values[name] is not None for name in values.keys() - from_config):
        values.update(dict.fromkeys(from_config))
    return tuple(values.values())


def read_prompt(argument: str | None, flag: str | None, file: Path | None) -> str:
    """The prompt: PROMPT or -p (escapes understood), the file -f names, or stdin (PROMPT "-" or none
    given); a one-line error where two are given, where it is empty, or where it is not UTF-8 text."""
    given = [name for name, v in (("PROMPT", argument), ("-p", flag), ("-f", file)) if v is not None]
    if len(given) > 1:
        raise click.ClickException(f"give the prompt once: {' and '.join(given)} were both given")
    text = argument if argument is not None else flag
    if file is not None:
        try:
            prompt = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise click.ClickException(f"cannot read the prompt file {file}: {getattr(e, 'strerror', None) or e}; "
                                       "give a UTF-8 text file") from None
    elif text is None or text == "-":
        if sys.stdin.isatty():
            click.echo("localspec: reading the prompt from stdin; end it with Ctrl-D", err=True)
        prompt = sys.stdin.read()
    else:
        prompt = unescape(text)
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes the terminal or stdin could not decode (held as surrogates)
        raise click.ClickException(f"the prompt is not UTF-8 text (an undecodable byte at character {e.start}); "
                                   "give it as UTF-8") from None
    if not prompt:
        raise click.ClickException("the prompt is empty; give some text as PROMPT, with -p or -f, or on stdin")
    return prompt


def stream_reply(items, echo: bool, colour: bool = False) -> Reply:
    """Print the pieces as they come (when echo; accepted draft tokens green when colour); return the
    Reply that ends the stream."""
    for item in items:
        if isinstance(item, Reply):
            sys.stdout.write("\n" if echo else "")
            return item
        if echo:
            sys.stdout.write(f"{GREEN}{item.text}{PLAIN}" if colour and item.from_draft else item.text)
            sys.stdout.flush()


def report(pair: Pair, reply: Reply, as_json: GenerationConfig | None, show_stats: bool) -> None:
    """--json (as_json: the config whose settings it echoes) and --stats output."""
    if as_json is not None:
        click.echo(answer_json(pair, reply, as_json))
    if show_stats:
        reason = pair.draft_reason  # without a draft it may say "none (target only)" itself
        draft = (f"{pair.draft_path.name} ({reason})" if pair.draft_path else
                 reason if reason.startswith("none") else f"none ({reason})")
        click.echo(f"{reply.stats.summary()}\ndraft: {draft}\n{where(pair)}", err=True)
