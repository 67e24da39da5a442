"""The web chat's server side in-process, on fakes: the page and its assets at / (public, offline),
and the `localspec` field of streamed chunks that the page colours the draft's tokens from.
tests/test_web.py drives the page itself in a headless browser."""

from __future__ import annotations

import json
import re

import pytest
from fakes import fake_pair

from localspec.config import GenerationConfig
from localspec.server import create_app
from localspec.server.web import WEB

openai = pytest.importorskip("openai")
from fastapi.testclient import TestClient  # noqa: E402  (after the skip: needs httpx)

KEY = "web-key-19c2"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
DEFAULTS = GenerationConfig(gamma=4, drafter="model", p_min=0.0)


@pytest.fixture
def http(tmp_path):
    """A TestClient over an app with an API key, sending no key unless a test gives one."""
    paths = tmp_path / "fake-instruct.gguf", tmp_path / "fake-draft.gguf"
    for path in paths:
        path.write_bytes(b"GGUF")
    app = create_app(fake_pair(n_ctx=1024, target_path=paths[0], draft_path=paths[1]), DEFAULTS, api_key=KEY)
    with TestClient(app) as client:
        yield client


def test_the_page_and_its_assets_are_served_without_the_key(http):
    page = http.get("/")
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.text == (WEB / "index.html").read_text()
    assets = re.findall(r'(?:src|href)="(/web/[^"]+)"', page.text)
    assert sorted(assets) == ["/web/app.js", "/web/style.css"]
    for path, kind in (("/web/app.js", "text/javascript"), ("/web/style.css", "text/css")):
        r = http.get(path)
        assert r.status_code == 200 and r.headers["content-type"] == f"{kind}; charset=utf-8"
        assert r.content == (WEB / path.removeprefix("/web/")).read_bytes()
        assert r.headers["x-localspec-draft"] == "fake-draft.gguf"
    assert http.head("/").status_code == 200
    # Only the page is public: the API still wants the key, and unknown files are 404s.
    assert http.get("/v1/models").status_code == 401
    assert http.get("/web/secrets.txt", headers={"Authorization": f"Bearer {KEY}"}).status_code == 404
    assert http.post("/", headers={"Authorization": f"Bearer {KEY}"}).status_code == 405


def test_the_page_works_offline():
    """No CDN, no remote fonts: every URL the files name is on this server."""
    for name in ("index.html", "app.js", "style.css"):
        text = (WEB / name).read_text()
        assert not re.search(r"https?://|//cdn|@import", text), name


def stream_chunks(http, path: str, body: dict) -> list[dict]:
    """The JSON events of a streamed request, [DONE] left out."""
    with http.stream("POST", path, json=body | {"stream": True}, headers={"Authorization": f"Bearer {KEY}"}) as r:
        assert r.status_code == 200
        lines = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_stream_chunks_say_which_text_the_draft_guessed(http):
    chunks = stream_chunks(http, "/v1/chat/completions", {"messages": QUESTION, "max_tokens": 48, "temperature": 0})
    for chunk in chunks:  # every chunk's pieces spell its content
        pieces = chunk["localspec"]["pieces"]
        assert "".join(p["text"] for p in pieces) == (chunk["choices"][0]["delta"].get("content") or "")
    pieces = [p for c in chunks for p in c["localspec"]["pieces"]]
    assert {p["draft"] for p in pieces} == {True, False}  # the draft guessed some tokens, the target others
    last, spec = chunks[-1], chunks[-1]["speculative"]
    live = last["localspec"]
    assert live["tokens"] == last["usage"]["completion_tokens"] == 48
    assert live["draft_tokens"] + live["target_tokens"] == 48
    # An accepted draft cut off by max_tokens is counted by `accepted` but never emitted.
    assert 0 < live["draft_tokens"] <= spec["accepted"]
    assert live["drafter"] == "model" and live["gamma"] == "4" and live["tokens_per_s"] > 0
    # The official client parses these chunks and keeps the field among its extras.
    client = openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http, max_retries=0)
    streamed = list(client.chat.completions.create(model="fake-instruct", messages=QUESTION, max_tokens=48,
                                                   temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in streamed)
    assert text == "".join(p["text"] for p in pieces)
    assert [c.model_extra["localspec"]["pieces"] for c in streamed] == [c["localspec"]["pieces"] for c in chunks]


def test_completion_stream_chunks_carry_the_field_too(http):
    body = {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 24, "temperature": 0, "gamma": "auto", "drafter": "ngram"}
    chunks = stream_chunks(http, "/v1/completions", body)
    assert "".join(c["choices"][0]["text"] for c in chunks) == \
        "".join(p["text"] for c in chunks for p in c["localspec"]["pieces"])
    assert chunks[-1]["localspec"]["gamma"] == "auto" and chunks[-1]["localspec"]["drafter"] == "ngram"
    assert chunks[-1]["localspec"]["tokens"] == 24
