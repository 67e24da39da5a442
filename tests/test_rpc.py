"""Devices, placement and llama.cpp's RPC backend: a loopback `localspec rpc-server` subprocess holds
the target; the draft stays in this process. A server that dies is tested in a subprocess client,
since ggml-rpc aborts the process that loses its server (see localspec/devices.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from scipy.stats import chisquare

from localspec import devices
from localspec.config import GenerationConfig
from localspec.context import Context
from localspec.llama import LlamaError, Model, threads_of
from localspec.placement import placement
from localspec.sampling import SamplingParams, distribution
from localspec.session import LoadOptions, Pair

ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """The environment of a process a test starts, read when it starts: the test's own empty model
    store (conftest.isolated_store), not the one os.environ held when this module was imported, where
    a plan saved by an earlier run started the next run warm, its draft not loaded."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


needs_rpc = pytest.mark.skipif(not devices.supports_rpc(), reason="llama-cpp-python built without GGML_RPC")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    """`localspec rpc-server` on a loopback port, once it answers HELLO (at most 30 s)."""
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "rpc-server", "--port", str(port), "-t", "1"],
                            env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            devices.probe_server(f"127.0.0.1:{port}", timeout_s=2)
            proc.endpoint = f"127.0.0.1:{port}"
            return proc
        except LlamaError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"rpc-server did not start: {proc.communicate(timeout=5)[1].decode()}")


def stop(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server():
    """A loopback rpc-server for this module's tests; its endpoint."""
    proc = start_server(free_port())
    yield proc.endpoint
    stop(proc)


@pytest.fixture(scope="module")
def server2():
    """A second loopback rpc-server, for a target split across two."""
    proc = start_server(free_port())
    yield proc.endpoint
    stop(proc)


def run_cli(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localspec", *map(str, args)], env=child_env(), capture_output=True,
                          text=True, timeout=timeout)


# --- fast: listing, flags, refusals -----------------------------------------------------------------
def test_devices_lists_the_cpu_with_its_memory():
    listed = json.loads(invoke("devices", "--json").output)["devices"]
    cpu = [d for d in listed if d["type"] == "CPU"]
    assert cpu and cpu[0]["name"] == "CPU" and 0 < cpu[0]["free_bytes"] <= cpu[0]["total_bytes"]
    assert "CPU" in invoke("devices").output


@pytest.mark.parametrize("rpc", [",", " "])
def test_an_rpc_list_naming_no_server_lists_the_local_devices(rpc):
    # as generate --rpc "," runs locally; it was a TypeError traceback
    result = invoke("devices", "--json", "--rpc", rpc)
    assert result.exit_code == 0, result.output
    assert any(d["type"] == "CPU" for d in json.loads(result.output)["devices"])


def test_unknown_device_is_one_line_naming_the_choices(fake_cli):
    result = invoke("generate", "hi", "-m", fake_cli.target, "-d", "none", "--device-target", "CUDA7")
    assert_one_line_error(result, "unknown device 'CUDA7'", "available: CPU")


def test_a_device_named_twice_is_one_line_before_any_load(monkeypatch):
    # --device-target GPU0,gpu0 gave llama.cpp the device twice, to hold layers as if it were two.
    gpu = devices.Device(1, "GPU0", "GPU", "a test device", 8 << 30, 8 << 30)
    monkeypatch.setattr(devices, "list_devices", lambda: [gpu])
    assert devices.find_devices(["GPU0"]) == [gpu]
    with pytest.raises(LlamaError, match="device GPU0, gpu0 is named twice.*name each device once"):
        devices.find_devices(["GPU0", "gpu0"])


def test_placement_flags_reach_the_load_options(fake_cli):
    result = invoke("generate", "hi", "-m", fake_cli.target, "-d", fake_cli.draft, "-dev", "CPU",
                    "-devd", "none", "-n", "3")
    assert result.exit_code == 0, result.output
    options = fake_cli.loaded[-1].options
    assert options.device_target == ("CPU",) and options.device_draft == ("none",) and options.rpc is None


def test_stats_and_json_name_where_each_model_runs(fake_cli):
    result = invoke("generate", "hi", "-m", fake_cli.target, "-d", fake_cli.draft, "-n", "3", "--json", "--stats")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["placement"] == {"target": "CPU", "draft": "CPU"}
    assert "runs on: target CPU, draft CPU" in result.stderr


@needs_rpc
@pytest.mark.parametrize("value, fragment", [("localhost", "malformed RPC server 'localhost'"),
                                             ("127.0.0.1:http", "give HOST:PORT")])
def test_malformed_rpc_address_is_one_line(fake_cli, value, fragment):
    assert_one_line_error(invoke("generate", "hi", "-m", fake_cli.target, "--rpc", value), fragment)


@needs_rpc
def test_unreachable_server_is_one_line_within_seconds(fake_cli):
    port = free_port()  # nothing listens there
    start = time.monotonic()
    result = invoke("generate", "hi", "-m", fake_cli.target, "--rpc", f"127.0.0.1:{port}")
    unreachable = f"RPC server 127.0.0.1:{port} is unreachable (Connection refused); start `localspec rpc-server " \
                  f"--port {port}` there, or fix"
    assert_one_line_error(result, f"Error: {unreachable} --rpc")
    assert time.monotonic() - start < 10
    # a library caller sets the Pair's LoadOptions (was "fix --rpc")
    with pytest.raises(LlamaError) as e:
        devices.probe_server(f"127.0.0.1:{port}")
    assert str(e.value) == f"{unreachable} rpc in the Pair's LoadOptions"


def test_a_model_larger_than_its_devices_free_memory_is_refused(tmp_path):
    gguf = tmp_path / "big.gguf"
    gguf.write_bytes(b"GGUF" + bytes(3 << 20))
    small = devices.Device(1, "CUDA0", "GPU", "test", free=2 << 20, total=8 << 20)
    with pytest.raises(LlamaError) as e:
        placement(gguf, [small], 999, "ngl_target")
    # named as the Pair's LoadOptions and the library name them (was --ngl-target and `localspec devices`),
    # and as the CLI names them
    full = "big.gguf (3 MiB) does not fit in the free memory of CUDA0 (2 MiB); lower"
    assert str(e.value) == (f"{full} ngl_target in the Pair's LoadOptions or choose another device "
                            "(localspec.devices.list_devices())")
    from localspec.cli.errors import said
    assert said(e.value) == f"{full} --ngl-target or choose another device (`localspec devices`)"
    assert placement(gguf, [small], 10, "ngl_target").where == "CUDA0 (10 layers, the rest on the CPU)"
    assert placement(gguf, [], 999, "ngl_target").where == "CPU"


def test_a_build_without_rpc_names_the_cmake_flag(fake_cli, monkeypatch):
    monkeypatch.setattr(devices, "supports_rpc", lambda: False)
    result = invoke("generate", "hi", "-m", fake_cli.target, "--rpc", "127.0.0.1:50052")
    assert_one_line_error(result, "without the RPC backend", 'CMAKE_ARGS="-DGGML_RPC=ON"', "scripts/setup.sh")
    assert_one_line_error(invoke("rpc-server"), 'CMAKE_ARGS="-DGGML_RPC=ON"')


def test_rpc_server_refuses_a_public_address_without_the_flag():
    result = invoke("rpc-server", "--host", "0.0.0.0")
    assert_one_line_error(result, "--allow-remote", "no authentication")


def test_rpc_server_says_when_the_port_is_taken():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert_one_line_error(invoke("rpc-server", "--port", s.getsockname()[1]), "choose another --port")


@pytest.mark.parametrize("flags, fragments", [
    (["--host", "::1"], ["--host ::1 is not an IPv4 address", "127.0.0.1"]),
    (["--host", "192.0.2.1", "--allow-remote"], ["cannot listen on 192.0.2.1", "an address of this machine as --host"]),
    (["--cache", "/proc/no/such"], ["--cache /proc/no/such", "writable folder"]),
    (["--device", "CPU,CPU"], ["--device CPU,CPU names a device twice"]),
])
def test_rpc_server_names_the_flag_at_fault(flags, fragments):
    # a host problem was told to "choose another --port"; --cache's was a bare errno line
    assert_one_line_error(invoke("rpc-server", "--port", free_port(), *flags), *fragments)


def test_rpc_server_takes_threads_as_every_command_does(monkeypatch):
    # -t 0 and -t -1 (llama.cpp's "the default", as generate takes them) were refused: "not in the range x>=1"
    import localspec.cli.devices_cmd as command

    started = []
    monkeypatch.setattr(devices, "supports_rpc", lambda: True)
    monkeypatch.setattr(command, "serve_forever", lambda host, port, threads, *rest: started.append(threads))
    default = threads_of(None)  # all cores, at most 8
    for flags, threads in (([], default), (["-t", "0"], default), (["-t", "-1"], default), (["--threads", "3"], 3)):
        result = invoke("rpc-server", "--port", free_port(), *flags)
        assert result.exit_code == 0 and started[-1] == threads, result.output
    assert_one_line_error(invoke("rpc-server", "-t", "-2"), "-2 is not in the range x>=-1")


def test_an_rpc_server_named_twice_is_refused(fake_cli):
    # it was accepted, and placed as RPC0[...],RPC0[...]
    result = invoke("generate", "hi", "-m", fake_cli.target, "-d", "none", "--rpc", "127.0.0.1:50052,127.0.0.1:50052")
    twice = ("names 127.0.0.1:50052 twice: one server's devices would hold the target's layers as if they were two; "
             "name each server once")
    assert_one_line_error(result, f"Error: --rpc {twice}")
    # a library caller is told of the Pair's LoadOptions field (was "--rpc names ...")
    with pytest.raises(LlamaError) as e:
        devices.add_rpc_servers(["127.0.0.1:50052", "127.0.0.1:50052"])
    assert str(e.value) == f"rpc {twice}"


def test_an_rpc_endpoint_where_another_service_answers_is_named_as_such():
    # an HTTP server's reply was read as "speaks protocol 32.52": install the same version, it said
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]

        def answer():
            conn, _ = listener.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" + bytes(64))

        threading.Thread(target=answer, daemon=True).start()
        with pytest.raises(LlamaError) as e:
            devices.probe_server(f"127.0.0.1:{port}", timeout_s=5)
    # the library's LoadOptions field (was "as --rpc"), the CLI's flag
    from localspec.cli.errors import said
    answered = f"127.0.0.1:{port} answered, but not as a ggml RPC server (another service listens there); " \
               "give the HOST:PORT of `localspec rpc-server` as"
    assert (str(e.value), said(e.value)) == (f"{answered} rpc in the Pair's LoadOptions", f"{answered} --rpc")


def test_rpc_server_listens_on_a_names_address():
    # ggml's server takes numbers only: --host localhost printed its banner, then failed
    from localspec.cli.devices_cmd import numeric_host
    assert numeric_host("localhost") == "127.0.0.1" and numeric_host("127.0.0.2") == "127.0.0.2"


# --- slow: the tiny model over a loopback server --------------------------------------------------------
@needs_rpc
def test_greedy_over_rpc_is_token_identical_to_local(server, server2, smol_f16):
    # F16: on a quantized target the batched verify's logits part from single-token ones at near-ties,
    # and auto γ batches by live timings (tests/test_realpair.py), so only F16 compares run to run.
    args = ["generate", "The capital of France is", "--raw", "-m", smol_f16, "-d", smol_f16, "-n", 24,
            "--temperature", 0, "-t", 1, "--json"]
    runs = [run_cli(*args), run_cli(*args, "--rpc", server), run_cli(*args, "--rpc", f"{server},{server2}", "-ts", "3,1")]
    assert [r.returncode for r in runs] == [0, 0, 0], runs[-1].stderr
    local, remote, split = (json.loads(r.stdout) for r in runs)
    assert remote["text"] == split["text"] == local["text"] and remote["stats"]["generated_tokens"] == 24
    assert local["placement"] == {"target": "CPU", "draft": "CPU"}
    assert remote["placement"] == {"target": f"RPC0[{server}]", "draft": "CPU"}  # the draft stays here
    assert split["placement"] == {"target": f"RPC0[{server}],RPC1[{server2}]", "draft": "CPU"}


N_SAMPLES = 200
T1 = SamplingParams(temperature=1.0, top_k=20, top_p=1.0, min_p=0.0)
PROMPT = "My favourite animal is the"


def fit_pvalue(counts: Counter, p: np.ndarray, n: int) -> float:
    """Chi-square goodness of fit of first-token counts to p; tokens expected fewer than 5 times lumped."""
    expected = p * n
    cells = np.flatnonzero(expected >= 5)
    observed = [counts[int(t)] for t in cells]
    exp = list(expected[cells])
    rest_observed, rest_expected = n - sum(observed), n - sum(exp)
    if rest_expected > 1e-6:
        observed.append(rest_observed)
        exp.append(rest_expected)
    elif rest_observed:  # tokens the distribution gives no mass
        return 0.0
    return chisquare(observed, np.array(exp) * sum(observed) / sum(exp)).pvalue


@needs_rpc
def test_t1_first_tokens_over_rpc_follow_the_target(server, smol_path, smol_q4_0):
    """Speculative decoding with the target over RPC: the first emitted token is distributed as the
    target's filtered distribution computed locally (the p/q rule stays exact across the link)."""
    target = Model(smol_path)
    ctx = Context(target, 256, 1)
    prompt = target.tokenize(PROMPT)
    ctx.decode(prompt)
    p = distribution(ctx.logits(), T1)  # the exact target distribution, local
    p_dense = np.zeros(target.n_vocab)
    p_dense[p.ids] = p.probs
    ctx.close(), target.close()
    pair = Pair(smol_path, smol_q4_0, LoadOptions(n_ctx=256, threads=1, rpc=(server,), warm_start=False))
    try:
        counts, drafted, accepted = Counter(), 0, 0
        for seed in range(N_SAMPLES):
            config = GenerationConfig(max_tokens=2, gamma=3, sampling=T1, seed=seed, p_min=0.0)
            items = list(pair.stream(prompt, config))
            counts[items[0].token] += 1
            drafted, accepted = drafted + items[-1].stats.drafted, accepted + items[-1].stats.accepted
        assert pair.placement["target"].startswith("RPC0")
        assert 0 < accepted < drafted  # the p/q rule ran: drafts were accepted and rejected
    finally:
        pair.close()
    assert fit_pvalue(counts, p_dense, N_SAMPLES) > 1e-3
    # power: the same samples reject the target's distribution flattened to T=2.5 (200 samples over the
    # link cannot tell T=1.6 apart reliably: one run gave p = 0.22)
    hotter = distribution(np.log(np.maximum(p_dense, 1e-30)).astype(np.float32), SamplingParams(2.5, 20, 1.0, 0.0))
    wrong = np.zeros_like(p_dense)
    wrong[hotter.ids] = hotter.probs
    assert fit_pvalue(counts, wrong, N_SAMPLES) < 1e-3


def lose_server_mid_generation(smol_path, lose, env=None) -> tuple[str, list[str], int]:
    """A CLI generation over a loopback rpc-server, and lose(server) once it is generating; the
    endpoint, the client's non-empty stderr lines and its exit status. The client must end within 10 s."""
    proc = start_server(free_port())
    endpoint, client = proc.endpoint, None
    try:
        client = subprocess.Popen([sys.executable, "-m", "localspec", "generate", "Once upon a time", "--raw",
                                   "-m", str(smol_path), "-d", "none", "--target-only", "-n", "2000", "-c", "2048",
                                   "-t", "1", "--temperature", "0", "--rpc", endpoint],
                                  env={**child_env(), **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert client.stdout.read(40)  # it is generating
        lose(proc)
        lost = time.monotonic()
        _, err = client.communicate(timeout=30)
        assert time.monotonic() - lost < 10
    finally:
        proc.send_signal(signal.SIGCONT)
        stop(proc)
        if client is not None and client.poll() is None:
            client.kill()
    return endpoint, [line for line in err.splitlines() if line.strip()], client.returncode


@needs_rpc
def test_server_killed_mid_generation_is_one_line_within_seconds(smol_path):
    endpoint, lines, status = lose_server_mid_generation(smol_path, stop)
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("Error: the RPC server") and endpoint in lines[0] and "rpc-server" in lines[0]


def get(url: str, body: dict | None = None, timeout: float = 30) -> tuple[int, str]:
    """(status, body) of a GET, or of a POST of body as JSON."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except OSError:
            pass
        time.sleep(0.3)
    return False


@needs_rpc
def test_serve_answers_503_while_its_rpc_server_is_lost_and_comes_back(smol_path):
    rpc_port, http_port = free_port(), free_port()
    rpc = start_server(rpc_port)
    url = f"http://127.0.0.1:{http_port}"
    serve = subprocess.Popen([sys.executable, "-m", "localspec", "serve", "-m", str(smol_path), "-d", "none", "-t", "1",
                              "-c", "2048", "--port", str(http_port), "--rpc", rpc.endpoint],
                             env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: get(f"{url}/health")[0] == 200, 60)
        long = {"prompt": "Once upon a time", "max_tokens": 1900, "temperature": 0}
        answer = {}
        request = threading.Thread(target=lambda: answer.update(r=get(f"{url}/v1/completions", long, 60)))
        request.start()
        time.sleep(1.5)  # generating
        stop(rpc)
        request.join(15)
        assert not request.is_alive() and answer["r"][0] == 503 and "rpc_server_lost" in answer["r"][1]
        status, body = get(f"{url}/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 503 and rpc.endpoint in body
        rpc = start_server(rpc_port)  # back: serve reloads the models on it
        assert wait_until(lambda: get(f"{url}/health")[0] == 200, 60)
        status, body = get(f"{url}/v1/completions", {"prompt": "The capital of France is", "max_tokens": 3,
                                                     "temperature": 0})
        assert status == 200 and json.loads(body)["choices"][0]["text"]
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=15)
        except subprocess.TimeoutExpired:
            serve.kill()
        stop(rpc)


@needs_rpc
def test_a_dead_registered_server_does_not_abort_later_loads(smol_path):
    """llama.cpp's default placement takes every registered device and asks each for its memory; asking
    a dead RPC server aborts the process. Loads that name no device must stay local instead."""
    rpc = start_server(free_port())
    script = f"""
import subprocess
from localspec import devices
from localspec.llama import model_info
from localspec.session import LoadOptions, Pair
pair = Pair({str(smol_path)!r}, None, LoadOptions(n_ctx=256, threads=1, rpc=({rpc.endpoint!r},), warm_start=False))
print(pair.placement["target"]); pair.close()
subprocess.run(["kill", "-9", "{rpc.pid}"]); subprocess.run(["sleep", "0.5"])
model_info({str(smol_path)!r})
again = Pair({str(smol_path)!r}, {str(smol_path)!r}, LoadOptions(n_ctx=256, threads=1, warm_start=False))
print(again.placement, [d.name for d in devices.list_devices()])
"""
    try:
        done = subprocess.run([sys.executable, "-c", script], env=child_env(), capture_output=True, text=True, timeout=120)
    finally:
        stop(rpc)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"RPC0[{rpc.endpoint}]", "{'target': 'CPU', 'draft': 'CPU'} ['CPU', 'RPC0']"]


def test_keep_alive_arms_the_connection_and_opens_no_descriptor():
    # It runs after every load with --rpc: a descriptor left open per call (a dup of each non-socket
    # fd) doubled the process's descriptors at each load until "Too many open files".
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client, open(__file__, "rb"):
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(3):
                assert devices.keep_alive(f"127.0.0.1:{port}") == 1
            assert len(os.listdir("/proc/self/fd")) == before
            assert client.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1


def test_watchdog_shuts_a_silent_connection_down_past_its_deadline(monkeypatch):
    # A server that accepts and never answers (as a stopped rpc-server's kernel does): the decode's
    # recv would block for ever; past the deadline the watchdog shuts the connection down.
    with socket.create_server(("127.0.0.1", 0)) as server:
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"
        monkeypatch.setattr(devices, "_added", {endpoint: []})
        dog = devices.Watchdog(floor_s=0.3, first_s=0.3)
        with socket.create_connection(server.getsockname()) as client:
            dog.disarm(dog.arm(1), 1)  # a decode in time: nothing happens
            client.settimeout(0.5)
            with pytest.raises(socket.timeout):
                client.recv(1)  # still open
            assert dog.fired is None and dog.per_token > 0
            client.settimeout(5)
            started = time.monotonic()
            dog.arm(1)
            assert client.recv(1) == b""  # shut down: ggml's recv fails the same way
            assert 0.25 < time.monotonic() - started < 3 and dog.fired == pytest.approx(0.3)


@needs_rpc
def test_server_that_hangs_mid_generation_is_one_line_within_seconds(smol_path):
    # SIGSTOP: the process hangs, its kernel still acknowledges (keepalive cannot tell)
    endpoint, lines, status = lose_server_mid_generation(smol_path, lambda proc: proc.send_signal(signal.SIGSTOP),
                                                         {"LOCALSPEC_RPC_TIMEOUT": "2"})
    assert status == 1 and len(lines) == 1, lines
    assert lines[0].startswith("Error: the RPC server") and endpoint in lines[0] and "did not answer" in lines[0]


def test_rows_are_judged_by_the_backend_chain_only_on_a_local_gpu():
    from localspec.placement import Placement
    from localspec.session import rows_on_gpu

    gpu = devices.Device(1, "CUDA0", "GPU", "H100", 0, 0)
    rpc = devices.Device(2, "RPC0", "RPC", "127.0.0.1:50052", 0, 0)
    assert rows_on_gpu(Placement((gpu,), "CUDA0"), 999, 28)                # every layer and the output layer there
    assert not rows_on_gpu(Placement((gpu,), "CUDA0"), 28, 28)             # the output layer stays on the CPU
    assert not rows_on_gpu(Placement(None, "CPU"), 999, 28)
    assert not rows_on_gpu(Placement((rpc,), "RPC0[127.0.0.1:50052]"), 999, 28)  # measured slower over RPC
    assert not rows_on_gpu(Placement((gpu, rpc), "CUDA0,RPC0[127.0.0.1:50052]"), 999, 28)  # the last layers there
