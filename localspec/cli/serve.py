"""`localspec serve`: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import re

import click

from .. import devices
from ..placement import split_names
from ..session import Reply
from . import cli
from .errors import user_errors
from .flags import EnvvarOption, Port, WholeNumber, answer_options
from .options import generation_config, load_pair, model_options


@cli.command()
@model_options
@answer_options
@click.option("--host", default="127.0.0.1", show_default=True, envvar="LOCALSPEC_HOST", show_envvar=True,
              cls=EnvvarOption, help="Address to listen on; 0.0.0.0 opens the server to your network.")
@click.option("--port", type=Port(), default=8080, show_default=True, envvar="LOCALSPEC_PORT",
              show_envvar=True, cls=EnvvarOption)
@click.option("--api-key", envvar="LOCALSPEC_API_KEY", show_envvar=True, cls=EnvvarOption,
              help="Require 'Authorization: Bearer KEY' on every request.")
@click.option("--max-queue", type=WholeNumber(0), default=8, show_default=True,
              help="Requests that may wait while one generates; more are answered 503.")
@click.option("--max-body", type=WholeNumber(1), default=4 << 20, show_default=True,
              help="Largest request body (bytes); larger ones are answered 413.")
@click.option("--cors-origin", "cors_origins", multiple=True, callback=lambda ctx, param, values: check_origins(values),
              help="Browser origin allowed to call the API (repeatable); '*': any. Default: this machine's pages.")
@click.option("--stats", "show_stats", is_flag=True, help="Print each request's speculation stats on stderr.")
@user_errors
def serve(host, port, api_key, max_queue, max_body, cors_origins, show_stats, **options):
    """Serve the pair over an OpenAI-compatible HTTP API (FastAPI + uvicorn).

    /v1/chat/completions and /v1/completions (streamed as server-sent events with "stream": true),
    /v1/models, /health, /metrics, and a web chat at /. The sampling flags are the defaults for fields a request leaves out;
    without -n, a request without max_tokens runs until it ends or fills the context.

    Example: localspec serve --port 8080, then point a client at http://127.0.0.1:8080/v1
    """
    from ..server import Outage, bind, serve as run_server

    sock, log = bind(host, port), lambda s: click.echo(s, err=True)  # a port in use: said before the models load
    defaults = generation_config(options)
    # a lost RPC server: 503s until it is back, then a reload (server/outage.py), not an exit
    servers = split_names(options.get("rpc"))  # "," names none, as for generate
    outage = Outage(list(servers), log) if servers else None
    pair = load_pair(options, on_server_lost=outage.on_lost if outage else devices.exit_with_error)
    if show_stats:
        pair.stream = logging_replies(pair.stream)
    try:
        run_server(pair, defaults, host, port, api_key, max_queue, log, max_body, cors_origins, sock, outage)
    finally:
        pair.close()


def logging_replies(stream):
    """pair.stream that also prints each finished request's stats on stderr (serve --stats)."""
    def logged(*args, **kwargs):
        for item in stream(*args, **kwargs):
            if isinstance(item, Reply):
                click.echo(item.summary(), err=True)
            yield item
    return logged


def check_origins(origins: tuple[str, ...]) -> tuple[str, ...]:
    """--cors-origin's values: '*' or an origin as browsers send it, scheme://host[:port] with no path."""
    for origin in origins:
        if origin != "*" and not re.fullmatch(r"https?://(\[[0-9A-Fa-f:.]+\]|[^/\s:\[\]]+)(:\d+)?", origin):
            raise click.BadParameter(f"{origin!r} is not an origin; give one as a browser sends it, e.g. "
                                     "http://localhost:3000 (scheme, host, port; no path), or '*'")
    return origins
