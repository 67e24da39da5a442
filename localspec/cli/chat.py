"""`localspec chat`: a conversation in the terminal."""

from __future__ import annotations

import functools
import json
import signal
import sys

import click

from ..config import ModelError
from ..chat import Chat
from ..speculative import Piece
from . import cli
from .errors import CLI_NAMES, USER_ERRORS, JsonErrors, said, user_errors
from .flags import GREEN, PLAIN, SHOW_DRAFTS, Escaped, answer_options, use_colour
from .options import answer_json, generation_config, load_pair, model_options, where


CHAT_HELP = "commands: /stats  /reset  /save FILE  /load FILE  /exit   (Ctrl-C stops an answer, Ctrl-D quits)"
# What chat's errors name, as chat says it: the CLI's flags, but a prompt sent as is (without the chat
# template) by generate's --raw, as chat has no --raw.
CHAT_NAMES = {**CLI_NAMES, "raw": "`localspec generate --raw`"}
said_in_chat = functools.partial(said, names=CHAT_NAMES)


@cli.command(cls=JsonErrors)
@model_options
@answer_options
@click.option("--system", type=Escaped(), help="System prompt.")
@SHOW_DRAFTS
@click.option("--stats", "show_stats", is_flag=True, help="Print the speculation stats after every answer.")
@click.option("--json", "as_json", is_flag=True, help="Print each answer as one JSON line, as generate --json "
              "prints its answer (text, target and draft, settings, stats), instead of streaming it.")
@functools.partial(user_errors, names=CHAT_NAMES)
def chat(system, show_drafts, show_stats, as_json, **options):
    """Chat in the terminal, with the model's own chat template; answers stream as they come.

    Each turn reuses what both KV caches already hold of the conversation. Without -n, an answer runs
    until it ends or fills the context. Commands: /stats, /reset, /save FILE, /load FILE, /exit (or Ctrl-D).
    Ctrl-C stops the answer being written.

    Example: localspec chat --system "You are a terse Python expert" --temperature 0.3
    """
    config = generation_config(options)
    pair = load_pair(options, with_draft=config.gamma != 0)  # --gamma 0 drafts nothing, as in generate
    try:
        session = Chat(pair, config, system)
        session.prompt([{"role": "user", "content": "hi"}])  # no chat template: a one-line error, now
        colour = use_colour(show_drafts)
        draft_name = pair.draft_path.name if pair.draft_path else "no draft"
        click.echo(f"localspec chat: {pair.target_model.path.name} + {draft_name}. {CHAT_HELP}", err=True)
        if colour:
            click.echo(f"{GREEN}green{PLAIN}: tokens the draft guessed and the target accepted", err=True)
        chat_loop(session, colour and not as_json, show_stats, as_json)
    finally:
        pair.close()


def chat_loop(session, colour: bool, show_stats: bool, as_json: bool = False) -> None:
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
                if not chat_command(session, line, as_json):
                    return
            except USER_ERRORS as e:
                click.echo(f"Error: {said_in_chat(e)}", err=True)
        elif line:
            chat_answer(session, line, colour, show_stats, as_json)


def chat_command(session, line: str, as_json: bool = False) -> bool:
    """Run one /command; False means leave. as_json: /stats as one JSON line."""
    cmd, _, arg = line.partition(" ")
    say = functools.partial(click.echo, err=as_json)  # with --json, stdout holds JSON lines only
    if cmd in ("/exit", "/quit"):
        return False
    if cmd == "/stats":
        n_ctx = session.pair.target_ctx.n_ctx
        used = len(session.prompt()) if session.messages else 0  # some templates reject an empty chat
        if as_json:  # stdout stays one JSON object a line
            last = session.replies[-1].stats.to_dict() if session.replies else None
            click.echo(json.dumps({"stats": last, "messages": len(session.messages), "tokens": used, "n_ctx": n_ctx}))
            return True
        say(session.replies[-1].summary() if session.replies else "no answers yet")
        say(f"conversation: {len(session.messages)} messages, {used} of {n_ctx} tokens")
    elif cmd == "/reset":
        session.reset()
        say("conversation cleared")
    elif cmd == "/save" and arg.strip():
        try:
            say(f"saved {len(session.messages)} messages to {session.save(arg.strip())}")
        except OSError as e:
            click.echo(f"Error: could not save to {arg.strip()}: {e.strerror}", err=True)
        except ModelError as e:  # the folder cannot be written (models.staging)
            click.echo(f"Error: {said_in_chat(e)}", err=True)
    elif cmd == "/save":
        say("usage: /save FILE")
    elif cmd == "/load" and arg.strip():
        say(f"loaded {session.load(arg.strip())} messages from {arg.strip()}")
    elif cmd == "/load":
        say("usage: /load FILE (a conversation /save wrote)")
    else:
        say(CHAT_HELP if cmd == "/help" else f"unknown command {cmd}; {CHAT_HELP}")
    return True


def refused(error: Exception, as_json: bool) -> None:
    """A message the chat could not answer: one line on stderr, or with --json one JSON line on stdout
    as generate --json prints an error, so that every message sent has its line there."""
    if not as_json:
        click.echo(f"Error: {said_in_chat(error)}", err=True)
    else:
        click.echo(json.dumps({"error": {"message": said_in_chat(error), "type": type(error).__name__}}))


def chat_answer(session, text: str, colour: bool, show_stats: bool, as_json: bool = False) -> None:
    """Stream the answer to one message (with as_json, one JSON line once it is done, as generate --json
    prints). Ctrl-C stops it; an error is one line (refused) and the chat goes on."""
    stopped = []  # Ctrl-C pressed: print nothing more of this answer

    def on_interrupt(*_):
        stopped.append(True)
        session.stop()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    reply = None
    try:
        for item in session.send(text):
            if isinstance(item, Piece) and (stopped or as_json):
                continue
            if isinstance(item, Piece):
                sys.stdout.write(f"{GREEN}{item.text}{PLAIN}" if colour and item.from_draft else item.text)
                sys.stdout.flush()
            else:
                reply = item
    except USER_ERRORS as e:
        refused(e, as_json)
        return
    finally:
        signal.signal(signal.SIGINT, previous)
    click.echo(answer_json(session.pair, reply, session.config) if as_json else "")
    if reply.finish_reason == "cancelled":
        click.echo("[stopped]", err=True)
    elif reply.context_full:
        click.echo(f"[context full: the conversation fills all {reply.n_ctx} tokens; nothing was dropped. "
                   "/save FILE, then /reset, or restart with a larger --ctx]", err=True)
    elif reply.finish_reason == "length":
        click.echo(f"[cut at --max-tokens {reply.stats.generated}]", err=True)
    if show_stats:
        click.echo(f"{reply.summary()}\n{where(session.pair)}", err=True)
