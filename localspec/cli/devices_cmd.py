"""`localspec devices` (where layers can go) and `localspec rpc-server` (lend this machine's devices to
another localspec over ggml's RPC protocol)."""

from __future__ import annotations

import ipaddress
import json
import signal
import socket
import threading
from pathlib import Path

import click

from .. import devices as dv
from ..placement import describe, split_names
from . import cli
from .errors import JsonErrors, user_errors
from .flags import Port, shared

LOOPBACK_HINT = "the RPC protocol has no authentication: anyone who can reach the port can use this machine's devices and their memory"


@cli.command("devices", cls=JsonErrors)
@click.option("--rpc", help="Also list the devices of these `localspec rpc-server`s (HOST:PORT[,...]).")
@click.option("--json", "as_json", is_flag=True, help="Print the devices as one JSON list.")
@user_errors
def devices_command(rpc, as_json):
    """List the devices llama.cpp can place layers on: name, type, description, free/total memory.

    Give these names to --device-target / --device-draft. Example: localspec devices --rpc 10.0.0.2:50052
    """
    servers = split_names(rpc)  # "," names none, as for generate
    if servers:
        dv.add_rpc_servers(servers)
    found = dv.list_devices()
    if as_json:
        click.echo(json.dumps({"devices": [d.to_dict() for d in found], "rpc": dv.supports_rpc()}))
        return
    click.echo("\n".join(describe(found)))
    if not dv.supports_rpc():
        click.echo(f"(no RPC backend: {dv.RPC_BUILD_FIX})", err=True)


@cli.command("rpc-server")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=Port(), default=50052, show_default=True)
@shared("threads")  # as generate's: -1 or 0 the default, as in llama.cpp
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False), default=None,
              help="Folder where the server keeps tensors it received, so a reload sends only their hashes.")
@click.option("--device", "device_names", default=None,
              help="Devices to serve, comma-separated (default: this machine's GPUs, else the CPU).")
@click.option("--allow-remote", is_flag=True, help=f"Listen on a non-loopback --host ({LOOPBACK_HINT}).")
@user_errors
def rpc_server(host, port, threads, cache_dir, device_names, allow_remote):
    """Run llama.cpp's RPC server from this install, so another machine's localspec can put the target here
    with --rpc HOST:PORT. Use it only on a trusted network. Ctrl-C stops it.

    Example: localspec rpc-server --port 50052, then elsewhere: localspec generate "Hi" --rpc HOST:50052
    """
    from ..llama import threads_of

    if not dv.supports_rpc():
        raise dv.LlamaError(dv.RPC_BUILD_FIX)
    host = numeric_host(host)  # ggml's server takes an IPv4 address, not a name
    remote = check_host(host, allow_remote)
    names = split_names(device_names)
    if names and dv.repeated(names, dv.device_key):
        raise click.ClickException(f"--device {device_names} names a device twice; name each once")
    served = dv.server_devices(names)
    if cache_dir:
        try:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)  # ggml writes its files there, it makes no folder
        except OSError as e:
            raise click.ClickException(f"--cache {cache_dir}: cannot make that folder ({e.strerror or e}); "
                                       "choose a writable folder") from None
    check_port_free(host, port)
    if remote:
        click.echo(f"WARNING: listening on {host}: {LOOPBACK_HINT}. Use it only on a trusted network.", err=True)
    serve_forever(host, port, threads_of(threads), cache_dir, served)


def numeric_host(host: str) -> str:
    """host as the IPv4 address ggml's RPC server listens on ('localhost' -> '127.0.0.1')."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError) as e:
        raise click.ClickException(f"--host {host} is not an IPv4 address or a name of one "
                                   f"({getattr(e, 'strerror', None) or e}); give one such as 127.0.0.1") from None


def check_host(host: str, allow_remote: bool) -> bool:
    """Whether host is not loopback (it then needs --allow-remote, and a warning once it listens)."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback  # numeric: resolved by numeric_host
    except ValueError:
        loopback = False
    if loopback:
        return False
    if not allow_remote:
        raise click.ClickException(f"--host {host} is not loopback and {LOOPBACK_HINT}; add --allow-remote "
                                   "to listen there anyway (only on a trusted network)")
    return True


def check_port_free(host: str, port: int) -> None:
    """One line for a port in use (ggml's own message is 'Failed to create server socket')."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ggml binds
        try:
            s.bind((host, port))
        except OSError as e:
            raise click.ClickException(dv.cannot_listen(host, port, e)) from None


def serve_forever(host: str, port: int, threads: int, cache_dir: str | None, served: list) -> None:
    """ggml's server loop blocks inside C, where Python's signal handlers cannot run: it runs on a daemon
    thread, and the main thread waits, so Ctrl-C and SIGTERM end the process at once."""
    server = threading.Thread(target=dv.start_rpc_server, args=(host, port, threads, cache_dir, served),
                              daemon=True, name="ggml-rpc-server")
    signal.signal(signal.SIGTERM, interrupt)
    server.start()
    try:
        while server.is_alive():
            server.join(0.5)
    except KeyboardInterrupt:
        click.echo("localspec rpc-server: stopped", err=True)
        return
    raise click.ClickException(f"the RPC server on {host}:{port} stopped; see the lines above")


def interrupt(signum, frame):
    """SIGTERM as Ctrl-C: the main thread's wait ends and the process exits with status 0."""
    raise KeyboardInterrupt
