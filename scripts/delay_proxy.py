#!/usr/bin/env python3
"""A TCP proxy on loopback that adds a fixed round-trip time, for benchmarks of the RPC backend.

Linux's `tc ... netem` adds latency in the kernel; where it is missing (some VM kernels answer
"Specified qdisc kind is unknown"), this stands in: every chunk read from one side is written to the
other side half the round-trip time later, in order, in both directions. Bandwidth is not limited:
only latency is added, as a network link of that RTT would (loopback bandwidth otherwise).

    python scripts/delay_proxy.py --listen 50053 --upstream 127.0.0.1:50052 --rtt-ms 10

Use as a library: `async with DelayProxy(listen_port, host, port, rtt_s): ...`, or `start_in_thread`.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time

from script_args import Parser  # scripts/, beside this file

CHUNK = 1 << 16


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy reader to writer, each chunk delay_s after it arrived, order kept."""
    queue: asyncio.Queue = asyncio.Queue()

    async def read() -> None:
        while data := await reader.read(CHUNK):
            queue.put_nowait((time.monotonic() + delay_s, data))
        queue.put_nowait((time.monotonic() + delay_s, b""))

    reading = asyncio.ensure_future(read())
    try:
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    finally:
        reading.cancel()
        writer.close()


def _no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class DelayProxy:
    """Listens on 127.0.0.1:listen_port and forwards to host:port with rtt_s added per round trip."""

    def __init__(self, listen_port: int, host: str, port: int, rtt_s: float):
        self.listen_port, self.host, self.port, self.delay_s = listen_port, host, port, rtt_s / 2
        self.server: asyncio.AbstractServer | None = None

    async def _handle(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            u_reader, u_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            c_writer.close()
            return
        _no_delay(c_writer), _no_delay(u_writer)
        await asyncio.gather(_pump(c_reader, u_writer, self.delay_s), _pump(u_reader, c_writer, self.delay_s),
                             return_exceptions=True)

    async def __aenter__(self) -> DelayProxy:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()


def start_in_thread(listen_port: int, host: str, port: int, rtt_s: float) -> threading.Event:
    """Run a DelayProxy in a daemon thread until the returned event is set; returns once listening."""
    stop, ready = threading.Event(), threading.Event()

    async def main() -> None:
        async with DelayProxy(listen_port, host, port, rtt_s):
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    if not ready.wait(10):
        raise RuntimeError(f"the delay proxy could not listen on 127.0.0.1:{listen_port}")
    return stop


def main() -> None:
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--listen", type=int, required=True, help="loopback port to listen on")
    ap.add_argument("--upstream", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--rtt-ms", type=float, required=True, help="round-trip time to add, in milliseconds")
    args = ap.parse_args()
    host, _, port = args.upstream.rpartition(":")

    async def serve() -> None:
        async with DelayProxy(args.listen, host, int(port), args.rtt_ms / 1000):
            await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
