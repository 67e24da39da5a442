"""The bindings layer's second half: ggml's backend devices and its RPC backend, over ctypes.

llama-cpp-python binds llama.h only; the device registry (ggml-backend.h) and the RPC backend
(ggml-rpc.h) live in the ggml libraries it ships beside libllama. This module and llama.py are the
only ones that import llama_cpp. Devices are named as llama.cpp's `-dev` names them: CPU, CUDA0,
Vulkan0, Metal, RPC0 (RPC devices are numbered in the order their servers were added).

What ggml-rpc does when a server goes away (vendored ggml 0.25.3, ggml/src/ggml-rpc/):
- connecting or the HELLO handshake failing, inside ggml_backend_rpc_add_server, is GGML_ABORT
  (ggml-rpc.cpp rpc_dispatcher::start): the whole process ends. So servers are probed here first.
- a closed socket mid-generation (the server process died) fails the dispatcher thread's send or
  recv, and RPC_STATUS_ASSERT calls GGML_ABORT (rpc_dispatcher::work). ggml_abort calls the abort
  callback (ggml_set_abort_callback) and then abort(); on_rpc_abort turns that into one line.
- the sockets have no receive timeout or keepalive (transport.cpp socket_t::connect): a server
  host that vanishes without closing the connection leaves recv blocked; keep_alive() arms TCP
  keepalive on the connections so the kernel closes them, which ends in the abort above.
- a server process that hangs (stopped, deadlocked) while its kernel still acknowledges is not seen
  by keepalive; the Watchdog bounds each decode and shuts the connections down past its deadline,
  which ends in the same abort.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import llama_cpp as lc  # before numpy: see localspec/__init__.py

from . import llama
from .config import literal
from .llama import LlamaError, init_backend

TYPES = {0: "CPU", 1: "GPU", 2: "iGPU", 3: "ACCEL", 4: "META"}
RPC_BUILD_FIX = ('this llama-cpp-python was built without the RPC backend; rebuild it with '
                 'CMAKE_ARGS="-DGGML_RPC=ON" (scripts/setup.sh does)')
PROBE_TIMEOUT_S = 3.0
HELLO = 14  # RPC_CMD_HELLO
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE
RPC_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the vendored ggml-rpc.h


def _lib(name: str) -> ctypes.CDLL:
    """The copy of a ggml library that libllama itself loaded. The wheel ships libggml.so, .so.0 and
    .so.0.25.3 as separate files, not links: opening another name would load a second ggml with its
    own device registry and abort callback. The bare soname finds the copy already in the process."""
    lib_dir = Path(lc.__file__).parent / "lib"
    for candidate in (f"lib{name}.so.0", f"lib{name}.0.dylib", lib_dir / f"lib{name}.so", lib_dir / f"lib{name}.dylib"):
        try:
            return ctypes.CDLL(str(candidate), mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
    raise LlamaError(f"cannot find lib{name} beside {lib_dir}; reinstall llama-cpp-python (scripts/setup.sh)")


def _bind(lib: ctypes.CDLL, name: str, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


_ggml = _lib("ggml")
_base = _lib("ggml-base")
VP, CP, SZ = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
dev_count = _bind(_ggml, "ggml_backend_dev_count", SZ)
dev_get = _bind(_ggml, "ggml_backend_dev_get", VP, SZ)
dev_name = _bind(_ggml, "ggml_backend_dev_name", CP, VP)
dev_description = _bind(_ggml, "ggml_backend_dev_description", CP, VP)
dev_memory = _bind(_ggml, "ggml_backend_dev_memory", None, VP, ctypes.POINTER(SZ), ctypes.POINTER(SZ))
dev_type = _bind(_ggml, "ggml_backend_dev_type", ctypes.c_int, VP)
reg_by_name = _bind(_ggml, "ggml_backend_reg_by_name", VP, CP)
reg_proc = _bind(_ggml, "ggml_backend_reg_get_proc_address", VP, VP, CP)
register = _bind(_ggml, "ggml_backend_register", None, VP)
ABORT_CALLBACK = ctypes.CFUNCTYPE(None, CP)
set_abort_callback = _bind(_base, "ggml_set_abort_callback", VP, ABORT_CALLBACK)
ADD_SERVER = ctypes.CFUNCTYPE(VP, CP)
START_SERVER = ctypes.CFUNCTYPE(None, CP, CP, SZ, SZ, ctypes.POINTER(VP))


@dataclass(frozen=True)
class Device:
    """One ggml backend device: its handle, llama.cpp's name for it, and its memory in bytes."""

    ptr: int
    name: str
    type: str
    description: str
    free: int
    total: int

    @property
    def is_rpc(self) -> bool:
        return self.name.startswith("RPC")

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "description": self.description,
                "free_bytes": self.free, "total_bytes": self.total}


def _device(ptr: int) -> Device:
    name, description = dev_name(ptr).decode(), (dev_description(ptr) or b"").decode(errors="replace")
    free, total = SZ(0), SZ(0)
    if not name.startswith("RPC") or listening(description):  # asking a dead server aborts the process
        dev_memory(ptr, ctypes.byref(free), ctypes.byref(total))
    return Device(ptr, name, TYPES.get(dev_type(ptr), "?"), description, free.value, total.value)


def listening(endpoint: str, timeout_s: float = 1.0) -> bool:
    """True when something accepts TCP connections at endpoint (a server busy with another client
    does too: the kernel queues the connection)."""
    try:
        with socket.create_connection(parse_endpoint(endpoint), timeout=timeout_s):
            return True
    except (OSError, LlamaError):
        return False


def list_devices() -> list[Device]:
    """Every device llama.cpp can place layers on, the CPU included, RPC servers once added."""
    init_backend()
    return [_device(dev_get(i)) for i in range(dev_count())]


def cannot_listen(host: str, port: int, error: Exception) -> str:
    """One line for a listening socket that could not be bound, and its fix (serve, rpc-server)."""
    code = getattr(error, "errno", None)
    fix = ("stop what uses the port or choose another --port" if code in (errno.EADDRINUSE, errno.EACCES)
           else "give an address of this machine as --host, e.g. 127.0.0.1 or 0.0.0.0"
           if code == errno.EADDRNOTAVAIL or isinstance(error, (socket.gaierror, UnicodeError))
           else "check --host and --port")
    return f"cannot listen on {host}:{port}: {getattr(error, 'strerror', None) or error}; {fix}"


def repeated(names: Sequence[str], key: Callable[[str], str] = str) -> list[str]:
    """The names given more than once (compared by key), sorted: a device or server named twice
    would hold layers as if it were two."""
    keys = [key(n) for n in names]
    return sorted({n for n, k in zip(names, keys) if keys.count(k) > 1})


def device_key(name: str) -> str:
    """How device names compare: case-insensitive, as find_devices looks them up."""
    return name.strip().lower()


def find_devices(names: Sequence[str]) -> list[Device]:
    """Devices by name (case-insensitive); 'CPU' or 'none' alone: no offload device (an empty list)."""
    if [n.lower() for n in names] in (["cpu"], ["none"]):
        return []
    twice = repeated(names, device_key)
    if twice:
        raise LlamaError(f"device {', '.join(twice)} is named twice: it would hold layers as if it were two; "
                         "name each device once")
    known = {device_key(d.name): d for d in list_devices()}
    found = []
    for name in names:
        dev = known.get(device_key(name))
        if dev is None or dev.type == "CPU":
            raise LlamaError(f"unknown device {name!r}; available: {', '.join(d.name for d in known.values())}"
                             " (CPU alone means no offload; see `localspec devices`)")
        found.append(dev)
    return found


def local_devices() -> list[Device]:
    """The offload devices on this machine: every non-CPU device that is not an RPC server's."""
    return [d for d in list_devices() if d.type not in ("CPU", "ACCEL") and not d.is_rpc]


def supports_rpc() -> bool:
    return bool(lc.llama_supports_rpc()) and bool(reg_by_name(b"RPC"))


def _rpc_proc(name: str, prototype):
    if not supports_rpc():
        raise LlamaError(RPC_BUILD_FIX)
    address = reg_proc(reg_by_name(b"RPC"), name.encode())
    if not address:
        raise LlamaError(f"the RPC backend of this build lacks {name}; {RPC_BUILD_FIX}")
    return prototype(address)


def parse_endpoint(text: str) -> tuple[str, int]:
    """'host:port' -> (host, port), or a one-line LlamaError naming the value."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LlamaError(f"malformed RPC server {text!r}; give HOST:PORT, e.g. 127.0.0.1:50052")
    return host, int(port)


def probe_server(endpoint: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise LlamaError unless a ggml RPC server of our protocol answers HELLO at endpoint."""
    host, port = parse_endpoint(endpoint)
    request = bytes([HELLO]) + struct.pack("<Q", CAPS_SIZE) + bytes(CAPS_SIZE)
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(request)
            reply = _recv_exactly(s, 8 + 4 + CAPS_SIZE)
    except socket.timeout:
        raise LlamaError(f"RPC server {endpoint} did not answer within {timeout_s:g} s: it is busy with "
                         "another client, or it is not `localspec rpc-server`") from None
    except OSError as e:
        raise LlamaError.naming(f"RPC server {literal(endpoint)} is unreachable ({literal(str(e.strerror or e))}); "
                                f"start `localspec rpc-server --port {port}` there, or fix {{rpc}}", "rpc") from None
    major, minor = reply[8], reply[9]
    if reply[:8] != struct.pack("<Q", 4 + CAPS_SIZE):  # not the size of a HELLO reply: another service
        raise LlamaError.naming(f"{literal(endpoint)} answered, but not as a ggml RPC server (another service "
                                "listens there); give the HOST:PORT of `localspec rpc-server` as {rpc}", "rpc")
    if major != RPC_MAJOR:
        raise LlamaError(f"RPC server {endpoint} speaks protocol {major}.{minor}, this build {RPC_MAJOR}.x; "
                         "install the same localspec/llama-cpp-python version on both machines")


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(104, "the server closed the connection")
        data += chunk
    return data


_added: dict[str, list[Device]] = {}


def add_rpc_servers(endpoints: Sequence[str]) -> list[Device]:
    """Register each server's devices with llama.cpp (probed first: a failed connect inside ggml aborts
    the process); return them in order. Adding a server twice returns its devices again."""
    add = _rpc_proc("ggml_backend_rpc_add_server", ADD_SERVER)
    for endpoint in endpoints:
        parse_endpoint(endpoint)
    twice = repeated(endpoints)
    if twice:
        raise LlamaError.about("rpc", f"names {', '.join(twice)} twice: one server's devices would hold the "
                               "target's layers as if they were two; name each server once")
    found = []
    for endpoint in endpoints:
        if endpoint in _added:  # this process may hold its one client connection: HELLO would wait
            if not listening(endpoint):
                raise LlamaError(f"RPC server {endpoint} is unreachable; restart `localspec rpc-server` there")
        else:
            probe_server(endpoint)
            before = {d.ptr for d in list_devices()}
            reg = add(endpoint.encode())
            if not reg:
                raise LlamaError(f"RPC server {endpoint} offers no devices; check its `localspec rpc-server` log")
            register(reg)
            _added[endpoint] = [d for d in list_devices() if d.ptr not in before]
            llama.default_devices = lambda: [d.ptr for d in local_devices()]  # unplaced models stay here
        found += _added[endpoint]
    return found


def rpc_endpoints() -> list[str]:
    """The servers added in this process."""
    return list(_added)


def _each_connection(endpoint: str, act: Callable[[socket.socket], None]) -> int:
    """act(view) on each of this process's TCP connections to endpoint (ggml's own, which Python does
    not hold: each view is detached afterwards, never closing the fd); how many were acted on."""
    host, port = parse_endpoint(endpoint)
    try:
        address = socket.gethostbyname(host)
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return 0
    done = 0
    for fd in map(int, fds):
        try:
            s = socket.socket(fileno=fd)
        except OSError:  # not a socket (or already closed)
            continue
        try:
            if s.type == socket.SOCK_STREAM and s.getpeername()[:2] == (address, port):
                act(s)
                done += 1
        except OSError:  # not a connected socket
            continue
        finally:
            s.detach()
    return done


def keep_alive(endpoint: str, idle_s: int = 5, interval_s: int = 2, probes: int = 3) -> int:
    """Arm TCP keepalive on this process's connections to endpoint (ggml sets none), so that a server
    host that vanishes closes them within idle_s + interval_s * probes; TCP_USER_TIMEOUT bounds the
    same way the time sent data may stay unacknowledged (keepalive does not run while it does).
    Return how many connections were armed."""
    def arm(s: socket.socket) -> None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        limit_ms = (idle_s + interval_s * probes) * 1000
        for option, value in (("TCP_KEEPIDLE", idle_s), ("TCP_KEEPINTVL", interval_s), ("TCP_KEEPCNT", probes),
                              ("TCP_USER_TIMEOUT", limit_ms)):
            if hasattr(socket, option):
                s.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)

    return _each_connection(endpoint, arm)


class Watchdog:
    """Bounds each decode while RPC servers are in use. A decode of n tokens may take FACTOR times n
    times the slowest seconds per token seen so far, and at least floor_s (the first decode, before
    anything is timed, first_s): past that the servers are taken to hang, their connections are shut
    down, ggml-rpc's recv fails, and on_rpc_abort's handler reports it. One thread for the process;
    arming and disarming a decode is a lock and a notify."""

    FACTOR = 20.0

    def __init__(self, floor_s: float, first_s: float = 300.0):
        self.floor_s, self.first_s = floor_s, first_s
        self.per_token = 0.0       # the slowest seconds per token of a decode so far
        self.fired: float | None = None  # the deadline that expired, once one has
        self._until: float | None = None
        self._limit = 0.0
        self._cond = threading.Condition()
        threading.Thread(target=self._watch, name="localspec-rpc-watchdog", daemon=True).start()

    def deadline(self, n_tokens: int) -> float:
        if not self.per_token:
            return max(self.first_s, self.floor_s)
        return max(self.floor_s, self.FACTOR * n_tokens * self.per_token)

    def arm(self, n_tokens: int) -> float:
        """Start timing a decode of n_tokens; returns the time it started."""
        now = time.monotonic()
        with self._cond:
            self._limit = self.deadline(n_tokens)
            self._until = now + self._limit
            self._cond.notify()
        return now

    def disarm(self, started: float, n_tokens: int) -> None:
        seconds = time.monotonic() - started
        with self._cond:
            self._until = None
            self.per_token = max(self.per_token, seconds / max(n_tokens, 1))

    def _watch(self) -> None:
        with self._cond:
            while True:
                if self._until is None:
                    self._cond.wait()
                elif time.monotonic() < self._until:
                    self._cond.wait(self._until - time.monotonic())
                else:
                    self.fired, self._until = self._limit, None
                    for endpoint in rpc_endpoints():
                        _each_connection(endpoint, lambda s: s.shutdown(socket.SHUT_RDWR))


_watchdog: Watchdog | None = None


def watchdog() -> Watchdog | None:
    """The process's watchdog once an RPC server was added (None before: local decodes need none).
    LOCALSPEC_RPC_TIMEOUT sets its floor in seconds (default 10)."""
    global _watchdog
    if _watchdog is None and _added:
        _watchdog = Watchdog(float(os.environ.get("LOCALSPEC_RPC_TIMEOUT") or 10.0))
    return _watchdog


_abort_handler = None  # the ctypes callback must outlive its registration


def on_rpc_abort(handler: Callable[[str], None]) -> None:
    """Call handler(one line) where ggml-rpc would abort the process because a server went away.
    The handler runs on ggml's dispatcher thread and must not return (os._exit, or block it): when it
    returns, ggml calls abort(). Other ggml aborts print their message and abort as before."""
    global _abort_handler

    def callback(message: bytes) -> None:
        text = message.decode(errors="replace")
        if "RPC" not in text:
            os.write(2, (text + "\n").encode())
            return
        servers = ", ".join(rpc_endpoints()) or "?"
        if _watchdog is not None and _watchdog.fired is not None:
            handler(f"the RPC server {servers} did not answer within {_watchdog.fired:.0f} s (it hangs); "
                    "restart `localspec rpc-server` there (or raise LOCALSPEC_RPC_TIMEOUT) and run again")
        else:
            handler(f"the RPC server {servers} went away mid-generation ({text.split(': ', 1)[-1].strip()}); "
                    "restart `localspec rpc-server` there and run again")

    _abort_handler = ABORT_CALLBACK(callback)
    set_abort_callback(_abort_handler)


def exit_with_error(line: str) -> None:
    """An on_rpc_abort handler for one-shot commands: 'Error: line' on stderr, exit status 1."""
    sys.stdout.flush()
    os.write(2, f"Error: {line}\n".encode())
    os._exit(1)


def start_rpc_server(host: str, port: int, threads: int, cache_dir: str | None, devices: Sequence[Device]) -> None:
    """Serve devices to RPC clients at host:port; blocks for the life of the process (ggml's loop)."""
    start = _rpc_proc("ggml_backend_rpc_start_server", START_SERVER)
    handles = (VP * len(devices))(*[d.ptr for d in devices])
    start(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), handles)


def server_devices(names: Sequence[str] | None) -> list[Device]:
    """The devices an RPC server offers: those named, else this machine's GPUs, else the CPU."""
    if names:
        every = {d.name.lower(): d for d in list_devices() if not d.is_rpc}
        missing = [n for n in names if n.lower() not in every]
        if missing:
            raise LlamaError(f"unknown device {missing[0]!r}; available: {', '.join(d.name for d in every.values())}")
        return [every[n.lower()] for n in names]
    return local_devices() or [d for d in list_devices() if d.type == "CPU"][:1]
