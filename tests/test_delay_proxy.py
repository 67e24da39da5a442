"""The benchmarks' delaying proxy: bytes pass unchanged, in order, and each round trip takes at least its RTT."""

import socket
import socketserver
import threading
import time
from scripttools import load_script

delay_proxy = load_script("delay_proxy")


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while data := self.request.recv(65536):
            self.request.sendall(data)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_proxy_keeps_bytes_and_adds_the_round_trip_time():
    echo = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=echo.serve_forever, daemon=True).start()
    port = free_port()
    stop = delay_proxy.start_in_thread(port, "127.0.0.1", echo.server_address[1], rtt_s=0.05)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            payload = bytes(range(256)) * 1000  # several chunks
            for _ in range(3):
                t0 = time.monotonic()
                s.sendall(payload)
                got = b""
                while len(got) < len(payload):
                    got += s.recv(65536)
                assert got == payload
                assert time.monotonic() - t0 >= 0.05
    finally:
        stop.set()
        echo.shutdown()
