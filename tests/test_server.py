"""`localspec serve` as a real process on a free loopback port, driven by the official `openai` client
(and by raw httpx where a client would never send such a request).

The target is SmolLM2 re-stored as F16 (batch and single-token logits agree, so greedy answers can be
compared with `localspec generate`), the draft its Q4_0 copy. The server runs with --gamma 4
--drafter model --p-min 0 so that every request drafts (p-min auto finds that drafting does not pay
between two models this small and equally fast), and with --max-queue 1 so that a third request finds
the queue full.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

httpx = pytest.importorskip("httpx")
openai = pytest.importorskip("openai")

KEY = "test-key-7f3a"
MODEL = "smol-f16"
COUNT = "1, 2, 3, 4, 5, 6, 7, 8,"  # SmolLM2 goes on counting: a long answer on demand
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what: str, seconds: float = 60, proc=None):
    """Poll condition() until true; fail after `seconds` (or when proc has exited)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the server exited with code {proc.returncode} while waiting for {what}")
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"timed out after {seconds} s waiting for {what}")


class Served:
    """A running server: its base URL and authenticated helpers."""

    def __init__(self, base: str, proc: subprocess.Popen):
        self.base, self.proc = base, proc
        self.auth = {"Authorization": f"Bearer {KEY}"}

    def health(self) -> dict:
        return httpx.get(f"{self.base}/health", headers=self.auth, timeout=10).json()

    def post(self, path: str, headers=None, **kwargs) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", headers=self.auth if headers is None else headers, timeout=120, **kwargs)


@pytest.fixture(scope="module")
def server(smol_f16, smol_q4_0, tmp_path_factory):
    home = tmp_path_factory.mktemp("serve")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LOCALSPEC_TARGET", "LOCALSPEC_DRAFT", "LOCALSPEC_API_KEY")}
    env.update(LOCALSPEC_MODELS=str(home / "models"), HF_HUB_OFFLINE="1")
    args = [sys.executable, "-m", "localspec", "serve", "--target", str(smol_f16), "--draft", str(smol_q4_0),
            "--ctx", "1024", "--threads", "1", "--port", str(port), "--api-key", KEY, "--max-queue", "1",
            "--gamma", "4", "--drafter", "model", "--p-min", "0"]
    log = open(home / "server.log", "w+")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    served = Served(f"http://127.0.0.1:{port}", proc)
    try:
        wait_for(lambda: served.health()["status"] == "ok", "the server to start", 180, proc)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.seek(0)
        print(log.read()[-3000:])  # shown when a test failed
        log.close()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.base}/v1", api_key=KEY, max_retries=0, timeout=120)


def speculative(obj) -> dict:
    """The `speculative` object the openai client keeps among a response's extra fields."""
    return obj.model_extra["speculative"]


@pytest.mark.slow
def test_models_health_and_headers(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    assert raw.headers["x-localspec-target"] == f"{MODEL}.gguf"
    assert raw.headers["x-localspec-draft"] == "smol-q4_0.gguf"
    health = server.health()
    assert health["status"] == "ok" and health["model"] == MODEL and not health["busy"]


@pytest.mark.slow
def test_chat_completion_streaming_and_not(client):
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=32, temperature=0)
    text = resp.choices[0].message.content
    assert "Paris" in text and resp.choices[0].finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens > 0 and resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    spec = speculative(resp)
    assert spec["drafted"] > 0 and 0 <= spec["accepted"] <= spec["drafted"]
    assert spec["alpha"] == pytest.approx(spec["accepted"] / spec["drafted"])
    assert spec["mean_accepted_length"] == pytest.approx(1 + spec["accepted"] / spec["steps"])

    chunks = list(client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=32, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    last = chunks[-1]
    assert last.choices[0].finish_reason == resp.choices[0].finish_reason
    assert last.usage.completion_tokens == resp.usage.completion_tokens and speculative(last)["drafted"] > 0
    # The same prompt again: the target found it in its cache.
    assert last.usage.prompt_tokens_details.cached_tokens == resp.usage.prompt_tokens - 1


@pytest.mark.slow
def test_greedy_answer_equals_localspec_generate(client, smol_f16, smol_q4_0):
    from click.testing import CliRunner

    from localspec.cli import cli

    prompt = "Write a haiku about the sea."
    result = CliRunner().invoke(cli, ["generate", prompt, "--chat", "--target", str(smol_f16), "--draft",
                                      str(smol_q4_0), "--ctx", "1024", "--threads", "1", "--temperature", "0",
                                      "--gamma", "4", "--drafter", "model", "-n", "40", "--json"])
    assert result.exit_code == 0, result.output
    expected = json.loads(result.output)
    resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}],
                                          max_tokens=40, temperature=0)
    assert resp.choices[0].message.content == expected["text"]
    assert resp.usage.completion_tokens == expected["stats"]["generated_tokens"]


@pytest.mark.slow
def test_full_queue_gets_503_and_a_dropped_stream_frees_the_pair(server, client):
    request = {"model": MODEL, "prompt": COUNT, "max_tokens": 900, "temperature": 0, "stream": True}
    later = {"model": MODEL, "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    cancelled = server.health()["cancelled"]
    with httpx.Client(timeout=120) as http, ThreadPoolExecutor(1) as pool:
        first = http.send(http.build_request("POST", f"{server.base}/v1/completions", json=request,
                                             headers=server.auth), stream=True)
        assert first.status_code == 200
        lines = first.iter_lines()
        next(line for line in lines if '"text": "' in line and '"text": ""' not in line)  # it is generating
        waiting = pool.submit(client.completions.create, **later)  # waits its turn
        wait_for(lambda: server.health()["queued"] == 1, "the second request to queue")

        full = server.post("/v1/completions", json=later)
        assert full.status_code == 503 and int(full.headers["Retry-After"]) >= 1
        assert full.json()["error"]["code"] == "queue_full"

        first.close()  # the client drops its stream midway
        answer = waiting.result(timeout=120)
    assert answer.choices[0].text and answer.choices[0].finish_reason == "length"
    wait_for(lambda: not server.health()["busy"], "the server to go idle")
    assert server.health()["cancelled"] == cancelled + 1  # the dropped stream stopped before its 900 tokens
    again = client.completions.create(**later)
    assert again.choices[0].text == answer.choices[0].text


class FakePair:
    """Just enough of a Pair for requests that end before generating: tokenizing raises `error`."""

    def __init__(self, tmp_path, error: Exception | None, n_tokens: int = 3):
        self.target_model = type("M", (), {"path": tmp_path / f"{MODEL}.gguf"})()
        self.draft_path = None
        self.target_ctx = type("C", (), {"n_ctx": 8})()
        self.error, self.n_tokens = error, n_tokens

    def drafter_kind(self, config):
        return "ngram"

    def tokens(self, *args, **kwargs) -> list[int]:
        if self.error is not None:
            raise self.error
        return list(range(self.n_tokens))

    chat_tokens = prompt_tokens = tokens


def post_in_process(pair, path: str, body: dict) -> dict:
    from fastapi.testclient import TestClient

    from localspec.server import create_app

    r = TestClient(create_app(pair)).post(path, json=body)
    assert r.status_code == 400, r.text
    return r.json()["error"]


@pytest.mark.parametrize("path, body, param", [
    ("/v1/chat/completions", {"messages": QUESTION}, "messages"),
    ("/v1/completions", {"prompt": "hi"}, "prompt"),
])
def test_context_full_is_mapped_by_type(tmp_path, path, body, param):
    from localspec.config import ContextFull
    from localspec.config import GenerationError

    # A ContextFull whatever its words: 400, OpenAI's code, the field as this endpoint names it.
    error = post_in_process(FakePair(tmp_path, ContextFull("no room left", 9, 8)), path, body)
    assert (error["code"], error["param"], error["message"]) == ("context_length_exceeded", param, "no room left")
    # The server's own check of the tokenized prompt raises it too (9 tokens, a context of 8).
    error = post_in_process(FakePair(tmp_path, None, n_tokens=9), path, body)
    assert (error["code"], error["param"]) == ("context_length_exceeded", param) and "context holds 8" in error["message"]
    # Another error that merely mentions the context is not a full context.
    error = post_in_process(FakePair(tmp_path, GenerationError("the context holds a bad token")), path, body)
    assert (error["code"], error["param"]) == (None, param)


def test_a_port_in_use_is_reported_before_the_models_load(tmp_path):
    """A one-line error and exit 1 at once: the target is not even a model, and is never opened."""
    target = tmp_path / "not-a-model.gguf"
    target.write_bytes(b"GGUF")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "localspec", "serve", "--target", str(target), "--port", str(port),
                               "--threads", "1"], capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - t0
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and "--port" in lines[0], lines
    assert elapsed < 15, elapsed  # the interpreter's start and imports; no model is loaded


def sse_events(response) -> list:
    """The data of a stream's server-sent events, as JSON ("[DONE]" kept as is)."""
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:])
            for line in response.iter_lines() if line.startswith("data: ")]


@pytest.mark.slow
def test_sigterm_answers_the_queue_503_and_ends_the_running_stream(smol_path, tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LOCALSPEC_TARGET", "LOCALSPEC_DRAFT", "LOCALSPEC_API_KEY")}
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "-m", "localspec", "serve", "--target", str(smol_path), "--ctx", "1024",
                             "--threads", "1", "--port", str(port), "--max-queue", "2", "--gamma", "0"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    served = Served(f"http://127.0.0.1:{port}", proc)
    base = f"{served.base}/v1/completions"
    try:
        wait_for(lambda: served.health()["status"] == "ok", "the server to start", 120, proc)
        with httpx.Client(timeout=60) as http, ThreadPoolExecutor(2) as pool:
            # greedy, so that it goes on counting: sampled, it ended on its own now and then before the SIGTERM
            running = http.send(http.build_request("POST", base, json={"prompt": COUNT, "max_tokens": 900, "temperature": 0,
                                                                       "stream": True}), stream=True)
            queued_stream = pool.submit(lambda: httpx.post(base, timeout=60, json={"prompt": COUNT, "stream": True}))
            wait_for(lambda: served.health()["queued"] == 1, "a stream to queue", 30, proc)
            queued = pool.submit(lambda: httpx.post(base, timeout=60, json={"prompt": COUNT, "max_tokens": 4}))
            wait_for(lambda: served.health()["queued"] == 2, "a second request to queue", 30, proc)
            proc.terminate()  # SIGTERM
            events = sse_events(running)
            answer, stream = queued.result(timeout=30), queued_stream.result(timeout=30)
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once it has shut down
    finally:
        if proc.poll() is None:
            proc.kill()
        log.seek(0)
        print(log.read()[-3000:])
        log.close()
    finish = events[-2]["choices"][0]
    assert events[-1] == "[DONE]" and finish["finish_reason"] == "stop" and finish["localspec_finish_reason"] == "cancelled"
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "server_shutting_down"
    assert "shutting down" in answer.json()["error"]["message"]
    events = [line[6:] for line in stream.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == "server_shutting_down"
