"""serve with --rpc when the target's RPC server goes away.

ggml-rpc cannot fail a request: a broken socket ends in GGML_ABORT on its dispatcher thread (see
localspec/devices.py). serve keeps the process: the abort callback never returns, which parks that
thread (ggml calls abort() only after the callback returns), and the generation thread waiting on it
stays blocked for good. So the running request ends with a 503 naming the server, every request
after it is answered 503 with Retry-After, /health says so, and once the server answers again the
process re-executes itself on the same listening socket, loading the models afresh.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
import time
from typing import Callable

from .. import devices
from .types import ApiError
from .worker import DONE, Worker

LISTEN_FD = "LOCALSPEC_LISTEN_FD"  # the listening socket handed to the re-executed serve
RETRY_AFTER_S = 5


class Outage:
    """The lost-server state of one serve process; on_lost is the ggml abort handler."""

    def __init__(self, endpoints: list[str], log: Callable[[str], None] = print, poll_s: float = 1.0):
        self.endpoints, self.log, self.poll_s = endpoints, log, poll_s
        self.message: str | None = None  # set once a server is lost
        self.worker: Worker | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sock: socket.socket | None = None

    def attach(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.worker, self.loop = worker, loop

    def exit_stuck(self) -> None:
        """Shutting down during an outage: end the process now (Python would wait forever at exit for
        the generation thread parked inside ggml)."""
        self.log("localspec: stopped (the RPC server was lost)")
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(0)

    def error(self) -> ApiError:
        return ApiError(503, f"{self.message}; this server reloads the models once it answers again, retry "
                        "then", code="rpc_server_lost", headers={"Retry-After": str(RETRY_AFTER_S)})

    def check(self) -> None:
        """Raise the 503 while a server is lost."""
        if self.message is not None:
            raise self.error()

    def on_lost(self, line: str) -> None:
        """On ggml's dispatcher thread: answer the requests, start the restart watch, then park for good."""
        self.message = line
        self.log(f"localspec: {line}")
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.fail_jobs)
        threading.Thread(target=self.restart_when_back, daemon=True, name="localspec-rpc-watch").start()
        threading.Event().wait()  # never set: returning would let ggml abort the process

    def fail_jobs(self) -> None:
        """On the event loop: the running and the waiting requests end with the 503."""
        for job in list(self.worker.jobs if self.worker else ()):
            job.refusal = self.error()
            job.cancel.set()
            job.put(self.error())
            job.put(DONE)

    def restart_when_back(self) -> None:
        """Wait until every server answers HELLO, then re-execute this serve on the same socket."""
        while True:
            try:
                for endpoint in self.endpoints:
                    devices.probe_server(endpoint)
                break
            except devices.LlamaError:
                time.sleep(self.poll_s)
        self.log("localspec: the RPC server is back; reloading the models")
        time.sleep(self.poll_s)  # let the 503s that are on their way out leave
        reexec(self.sock)


def reexec(sock: socket.socket | None) -> None:
    """Replace this process by the same serve command, handing it the listening socket (and no other
    descriptor: ggml's dead connections and the parked threads go with the old image)."""
    keep = sock.fileno() if sock is not None else -1
    env = dict(os.environ)
    if keep >= 0:
        os.set_inheritable(keep, True)
        env[LISTEN_FD] = str(keep)
    sys.stdout.flush(), sys.stderr.flush()
    for fd in range(3, max(3, _max_fd())):
        if fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.execve(sys.executable, [sys.executable, "-m", "localspec", *sys.argv[1:]], env)


def _max_fd() -> int:
    try:
        return max(map(int, os.listdir("/proc/self/fd"))) + 1
    except OSError:
        return 1024


def inherited_socket() -> socket.socket | None:
    """The listening socket a re-executed serve was handed, if any. serve sets LISTEN_FD only for
    itself (reexec); a value that is not a listening socket's descriptor (set by hand, or left in an
    environment) raises OSError naming the variable and its value."""
    value = os.environ.pop(LISTEN_FD, None)
    if not value:
        return None
    try:
        fd = int(value)
    except ValueError:
        raise OSError(_not_listening(value, "not a whole number")) from None
    try:
        sock = socket.socket(fileno=fd)
    except (ValueError, OSError) as e:  # a negative number; nothing open there (EBADF); not a socket (ENOTSOCK)
        raise OSError(_not_listening(value, (getattr(e, "strerror", None) or str(e)).lower())) from None
    if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
        sock.detach()  # the descriptor is left as it was found
        raise OSError(_not_listening(value, "a socket that does not listen"))
    return sock


def _not_listening(value: str, why: str) -> str:
    return (f"{LISTEN_FD}={value} is not a listening socket ({why}); unset it: serve sets it only to hand "
            "its socket to the serve it restarts once a lost RPC server answers again")
