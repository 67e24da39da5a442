"""The HTTP API in-process (Starlette's TestClient, driven by the official `openai` client and raw
requests) over a Pair of fakes: shapes, streaming, errors and keys in milliseconds. tests/test_server.py
runs `localspec serve` once as a real process on SmolLM2 (concurrency, a dropped stream, the queue)."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from fakes import fake_contexts, fake_pair

from localspec.sampling import SamplingParams
from localspec.server import create_app
from localspec.config import GenerationConfig

openai = pytest.importorskip("openai")
from fastapi.testclient import TestClient  # noqa: E402  (after the skip: needs httpx)

KEY = "test-key-7f3a"
MODEL = "fake-instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
COUNT = "1, 2, 3, 4, 5, 6, 7, 8,"
# As tests/test_server.py serves: every request drafts 4 tokens from the draft model.
DEFAULTS = GenerationConfig(gamma=4, drafter="model", p_min=0.0)


def model_files(folder):
    """Files for the fakes' paths: /v1/models reports the target file's time."""
    paths = folder / f"{MODEL}.gguf", folder / "fake-draft.gguf"
    for path in paths:
        path.write_bytes(b"GGUF")
    return paths


@pytest.fixture
def http(tmp_path):
    """A TestClient over the app, with a fake pair (and a draft) behind it."""
    target, draft = model_files(tmp_path)
    app = create_app(fake_pair(n_ctx=1024, target_path=target, draft_path=draft), DEFAULTS, api_key=KEY, max_queue=1)
    with TestClient(app, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture
def client(http):
    return openai.OpenAI(base_url="http://testserver/v1", api_key=KEY, http_client=http, max_retries=0)


def speculative(obj) -> dict:
    """The `speculative` object the openai client keeps among a response's extra fields."""
    return obj.model_extra["speculative"]


def test_models_health_and_headers(http, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=QUESTION, max_tokens=8, temperature=0)
    assert raw.headers["x-localspec-target"] == f"{MODEL}.gguf" and raw.headers["x-localspec-draft"] == "fake-draft.gguf"
    # The answer reaches the client before the worker's job is marked finished: poll briefly.
    for _ in range(200):
        health = http.get("/health").json()
        if not health["busy"]:
            break
        time.sleep(0.01)
    assert health["status"] == "ok" and health["model"] == MODEL and not health["busy"] and health["served"] == 1


def test_chat_completion_streaming_and_not(client):
    resp = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=32, temperature=0)
    text = resp.choices[0].message.content
    assert text and resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 32
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens
    spec = speculative(resp)
    assert spec["drafted"] > 0 and 0 <= spec["accepted"] <= spec["drafted"] and spec["drafter"] == "model"
    assert spec["alpha"] == pytest.approx(spec["accepted"] / spec["drafted"])
    assert spec["mean_accepted_length"] == pytest.approx(1 + spec["accepted"] / spec["steps"])

    chunks = list(client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=32, temperature=0,
                                                 stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
    last = chunks[-1]
    assert last.choices[0].finish_reason == "length" and last.usage.completion_tokens == 32
    # The same prompt again: the target found it in its cache.
    assert last.usage.prompt_tokens_details.cached_tokens == resp.usage.prompt_tokens - 1


def test_completion_streaming_and_not_equal_the_target_alone(client):
    resp = client.completions.create(model=MODEL, prompt=COUNT, max_tokens=24, temperature=0)
    text = resp.choices[0].text
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 24
    assert speculative(resp)["drafted"] > 0
    chunks = list(client.completions.create(model=MODEL, prompt=COUNT, max_tokens=24, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length" and "speculative" in chunks[-1].model_extra
    # Exact: what a fresh target alone generates from the same tokens.
    alone = fake_pair(draft=False)
    items = list(alone.stream(alone.prompt_tokens(COUNT, chat=False),
                              GenerationConfig(24, 0, SamplingParams(temperature=0))))
    assert "".join(p.text for p in items[:-1]) == text


def test_stop_strings(client):
    full = client.completions.create(model=MODEL, prompt=COUNT, max_tokens=24, temperature=0).choices[0].text
    stop = full[10:13]
    cut = client.completions.create(model=MODEL, prompt=COUNT, max_tokens=24, temperature=0, stop=[stop, "zz"])
    assert cut.choices[0].text == full[: full.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model=MODEL, prompt=COUNT, max_tokens=24, temperature=0, stop=stop,
                                         stream=True)
    assert "".join(c.choices[0].text for c in streamed) == cut.choices[0].text


def test_seed_reproducibility(client):
    def sample(seed):
        return client.chat.completions.create(model=MODEL, max_tokens=24, temperature=1.0, seed=seed,
                                              messages=[{"role": "user", "content": "Tell me a story."}]
                                              ).choices[0].message.content
    assert sample(11) == sample(11)
    assert len({sample(s) for s in (1, 2, 3)}) > 1  # and the seed matters


@pytest.mark.parametrize("body, status, param, fragment", [
    (b'{"model": "fake-instruct", "messages": [', 400, None, "not valid JSON"),
    ({"model": MODEL}, 400, "messages", "messages is required"),
    ({"model": MODEL, "messages": []}, 400, "messages", "at least one message"),
    ({"model": MODEL, "messages": QUESTION, "max_tokens": -5}, 400, "max_tokens", "got -5"),
    ({"model": MODEL, "messages": QUESTION, "temperature": 3.5}, 400, "temperature", "between 0 and 2"),
    ({"model": MODEL, "messages": QUESTION, "top_p": 1.5}, 400, "top_p", "[0, 1]"),
    ({"model": MODEL, "messages": QUESTION, "gamma": -1}, 400, "gamma", "gamma"),
    ({"model": MODEL, "messages": QUESTION, "gamma": "lots"}, 400, "gamma", '"lots"'),
    ({"model": MODEL, "messages": QUESTION, "drafter": "oracle"}, 400, "drafter", "oracle"),
    ({"model": MODEL, "messages": QUESTION, "n": 2}, 400, "n", "n must be 1"),
    ({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role", '(got "wizard")'),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "messages[0].content", 'content[0] is a non-text part (type "image_url"); this server takes text only: send'),
    # it was called "a non-text content part" too, though it holds text: its "type" is missing
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]},
     400, "messages[0].content", 'content[1] has no "type"'),
    ({"model": "gpt-4o", "messages": QUESTION}, 404, "model", "gpt-4o"),
])
def test_bad_requests_get_openai_style_errors(http, body, status, param, fragment):
    kwargs = {"content": body, "headers": {"Content-Type": "application/json"}} if isinstance(body, bytes) \
        else {"json": body}
    r = http.post("/v1/chat/completions", **kwargs)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and fragment in error["message"]


@pytest.mark.parametrize("field, value, message", [
    ("gamma", -1, "gamma must be >= 0 or auto (got -1); use 0 for plain decoding"),
    ("top_p", 1.5, "top_p must be in [0, 1] (got 1.5); use 1.0 to disable top-p"),
    ("min_p", -0.1, "min_p must be in [0, 1] (got -0.1); use 0.0 to disable min-p"),
    ("p_min", 1.5, "p_min must be in [0, 1) (got 1.5); use 0 to never stop a draft early, or auto"),
    ("seed", -5, "seed must be >= 0, or -1 for a random seed (got -5)"),
    ("drafter", "oracle", "unknown drafter 'oracle'; choose one of auto, model, ngram, hybrid"),
])
def test_a_value_the_config_refuses_is_named_as_the_request_names_it(http, field, value, message):
    # GenerationConfig's words, whose fields are the request's (not the CLI's --top-p); the param is the
    # error's field, where it was found by searching the message for a field's name
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, field: value})
    error = r.json()["error"]
    assert (r.status_code, error["param"], error["message"]) == (400, field, message)


@pytest.mark.parametrize("field, value", [
    ("max_tokens", True), ("temperature", True), ("top_k", False), ("seed", True), ("gamma", True),
    ("n", True), ("stream", "yes"), ("max_tokens", "5"), ("temperature", "0.5"),
])
def test_a_field_of_the_wrong_json_type_is_refused_as_openai_refuses_it(http, field, value):
    # pydantic's lax mode took true for 1 (max_tokens: true ran one token) and "yes" for a boolean
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field and r.json()["error"]["code"] == "invalid_value"


@pytest.mark.parametrize("options", [{"include_usage": "yes"}, {"include_usage": 1}, "usage"])
def test_stream_options_of_the_wrong_type_are_refused(http, options):
    # "yes" was taken for true, though every other field is strict
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": QUESTION, "stream": True,
                                                "stream_options": options})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"].startswith("stream_options")


@pytest.mark.parametrize("body, param, fragment", [
    ({"model": MODEL, "messages": [{"role": "user", "content": None}]}, "messages[0].content", "is required"),
    ({"model": MODEL, "messages": [{"role": "user"}]}, "messages[0].content", "is required"),
    ({"model": MODEL, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content",
     "without a string \"text\""),
    ({"model": MODEL, "messages": QUESTION, "response_format": "json"}, "response_format", "not supported"),
])
def test_a_message_without_text_or_a_format_that_is_no_object_is_refused(http, body, param, fragment):
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param and fragment in r.json()["error"]["message"]


def test_nulls_openai_accepts_mean_the_default(http):
    body = {"model": MODEL, "messages": QUESTION, "max_tokens": 3, "n": None, "logprobs": None, "stream": None,
            "top_logprobs": None, "temperature": None}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 3 and r.json()["choices"][0].get("logprobs") is None
    r = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [
        {"role": "assistant", "content": None}, *QUESTION], "max_tokens": 2})  # an assistant's may be null
    assert r.status_code == 200, r.text


def test_the_servers_own_default_temperature_is_not_held_to_a_requests_range(tmp_path):
    # `serve --temp 3` started, and every request that left temperature out was refused with a 400
    # blaming its (absent) temperature: OpenAI's 0-2 bounds what a request asks, not the server's default.
    target, draft = model_files(tmp_path)
    hot = dataclasses.replace(DEFAULTS, sampling=SamplingParams(temperature=3.0))
    with TestClient(create_app(fake_pair(n_ctx=1024, target_path=target, draft_path=draft), hot)) as http:
        for temperature in ({}, {"temperature": None}):
            r = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2, **temperature})
            assert r.status_code == 200, r.text
        r = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2, "temperature": 2.5})
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"


def test_a_body_not_sent_as_json_or_not_utf8_says_how_to_send_it(http):
    r = http.post("/v1/completions", content=b'{"prompt": "hi", "max_tokens": 2}',
                  headers={"Content-Type": "application/x-www-form-urlencoded"})  # what curl -d sends
    assert r.status_code == 400 and "Content-Type: application/json" in r.json()["error"]["message"], r.text
    r = http.post("/v1/completions", content=b'{"prompt": "\xff\xfe", "max_tokens": 2}',
                  headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_body" and "UTF-8" in r.json()["error"]["message"]


def test_a_body_nested_too_deeply_is_told_so_not_called_bad_utf8(http):
    deep = "[" * 50_000 + "]" * 50_000  # valid UTF-8 and valid JSON, deeper than Python's parser recurses
    r = http.post("/v1/chat/completions", content=f'{{"messages": {json.dumps(QUESTION)}, "x": {deep}}}'.encode(),
                  headers={"Content-Type": "application/json"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "invalid_body" and error["param"] is None, r.text
    assert "nested too deeply" in error["message"] and "UTF-8" not in error["message"]


def test_unknown_routes_and_methods_get_openai_style_errors(http):
    # Each named the request and no fix ("Method Not Allowed: GET /v1/chat/completions"), and a 405
    # came without the Allow header Starlette had set
    for method, path, status, fix in (("GET", "/v1/nothing", 404, "POST /v1/chat/completions, POST /v1/completions"),
                                      ("POST", "/v1/embeddings", 404, "GET /v1/models"),
                                      ("GET", "/v1/chat/completions", 405, "this route takes POST"),
                                      ("POST", "/v1/models", 405, "this route takes GET")):
        r = http.request(method, path)
        message = r.json()["error"]["message"]
        assert r.status_code == status and f"{method} {path};" in message and fix in message, r.text
    r = http.request("DELETE", "/v1/chat/completions")
    assert r.headers["allow"] == "POST" and r.json()["error"]["message"].endswith("this route takes POST")


def test_a_404_names_every_route_the_app_serves_and_no_other(http):
    # The 404 named a hand-written list, which had left out GET /v1/models/{model} and the web chat's
    # files. FastAPI's own pages are left out on purpose (app.routes_named says why).
    app = http.app
    fastapi_pages = {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}
    served = [f"{method} {route.path_format}" for route in app.routes if route.path not in fastapi_pages
              for method in sorted(route.methods - {"HEAD"})]  # HEAD goes without saying beside GET
    message = http.get("/v1/nothing").json()["error"]["message"]
    named = message.split("; this server answers ", 1)[1].split(", ")
    assert sorted(named) == sorted(served), message
    for method, path in (item.split(" ", 1) for item in named):
        r = http.request(method, path.replace("{model}", MODEL))
        assert r.status_code != 404, (method, path, r.text)


def test_bad_requests_through_the_openai_client(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=QUESTION)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=MODEL, messages=QUESTION, temperature=-1)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="word " * 300, max_tokens=4)
    assert e.value.code == "context_length_exceeded" and "context holds 1024" in e.value.message
    assert e.value.message.endswith("; raise --ctx or shorten the prompt")  # the server's flag, not LoadOptions
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "word " * 300}])
    assert e.value.code == "context_length_exceeded" and e.value.param == "messages"


def test_api_key_is_checked_on_every_request(http):
    bad = openai.OpenAI(base_url="http://testserver/v1", api_key="wrong", http_client=http, max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.chat.completions.create(model=MODEL, messages=QUESTION)
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    for path in ("/health", "/v1/models"):
        r = http.get(path, headers={"Authorization": ""})
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert r.headers["x-localspec-target"] == f"{MODEL}.gguf"


def test_a_server_without_a_draft_refuses_the_model_drafter(tmp_path):
    target, _ = model_files(tmp_path)
    app = create_app(fake_pair(draft=False, target_path=target), GenerationConfig(), api_key=None)
    with TestClient(app) as http:
        r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 4, "drafter": "model"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "drafter"
        # the server's words: a request's drafter and the server's own --draft, not the library's Pair
        assert r.json()["error"]["message"] == ("drafter 'model' needs a draft model; this server was started "
                                                "without one: use drafter 'ngram', or restart it with --draft")
        r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 4})  # no key needed
        assert r.status_code == 200 and r.headers["x-localspec-draft"] == "none"
        assert r.json()["speculative"]["drafter"] == "ngram" and r.json()["speculative"]["reused_draft_tokens"] is None


@pytest.mark.parametrize("template, error, tail", [
    (None, "fake-instruct.gguf has no chat template", " to send the prompt as is"),
    ("{{ raise_exception('roles must alternate') }}",
     "the chat template of fake-instruct.gguf failed (roles must alternate)", "")])
def test_a_chat_template_error_names_the_completions_endpoint(tmp_path, template, error, tail):
    # was "use --raw", a flag of the CLI: a client sends a prompt as is to /v1/completions
    target, _ = model_files(tmp_path)
    pair = fake_pair(draft=False, target_path=target)
    pair.target_model.template = template
    with TestClient(create_app(pair, GenerationConfig(), api_key=None)) as http:
        r = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    assert r.json()["error"]["message"] == f"{error}; use /v1/completions{tail}"


@pytest.mark.parametrize("failure, said", [
    # a draft left unloaded loads in a generation
    ("create", "llama.cpp could not create a context of 512 tokens; lower --ctx"),
    # was "lower --ctx or --ngl": the server has no --ngl, and a client lowers nothing but by a restart
    ("decode", "llama_decode failed with code 1 at position 7; restart the server with a lower --ctx, "
               "--ngl-target or --ngl-draft")])
def test_a_generation_that_fails_is_said_with_the_servers_names(tmp_path, monkeypatch, failure, said):
    # the library's words would tell a client of the Pair's LoadOptions
    from fakes import failed_decode

    from localspec.llama import LlamaError

    target, _ = model_files(tmp_path)
    pair = fake_pair(draft=False, target_path=target)
    error = LlamaError.naming("llama.cpp could not create a context of 512 tokens; lower {n_ctx}", "n_ctx") \
        if failure == "create" else failed_decode(monkeypatch)

    def failing(*args):
        raise error
        yield

    pair.stream = failing
    with TestClient(create_app(pair, GenerationConfig(), api_key=None)) as http:
        r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 4})
    assert r.status_code == 500 and r.json()["error"]["message"] == f"the generation failed: {said}"


def test_invalid_logits_are_a_500_naming_no_flag(tmp_path, monkeypatch):
    # it said "lower --ngl", a flag of no command
    import numpy as np
    from fakes import FakeModel

    target, _ = model_files(tmp_path)
    pair = fake_pair(draft=False, target_path=target)
    monkeypatch.setattr(FakeModel, "logits_at", lambda self, context: np.full(self.n_vocab, np.nan, np.float32))
    with TestClient(create_app(pair, GenerationConfig(), api_key=None)) as http:
        r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 4})
    assert r.status_code == 500 and r.json()["error"]["message"] == (
        "the generation failed: logits contain NaN/inf at token 0 (nan); the model produced invalid numbers — "
        "check the GGUF file, or put fewer of its layers on the GPU")


def test_the_speculative_object_counts_each_drafters_tokens_and_exploratory_steps():
    # The same per-drafter counts as `--json` gives (GenerationStats.to_dict): a client can tell
    # what each drafter brought and how many of its steps were the planner exploring.
    app = create_app(fake_pair(), GenerationConfig(), api_key=None)
    with TestClient(app) as http:
        r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 24, "temperature": 0})
    spec = r.json()["speculative"]
    assert r.status_code == 200 and spec["drafted"] > 0
    assert sum(d["drafted"] for d in spec["by_drafter"].values()) == spec["drafted"]
    assert sum(d["accepted"] for d in spec["by_drafter"].values()) == spec["accepted"]
    assert set(spec["probe_steps"]) <= set(spec["sources"]) and sum(spec["probe_steps"].values()) <= spec["steps"]


def test_the_speculative_object_says_whether_the_plan_started_warm(tmp_path):
    # A restarted server plans from what the last one measured and says so, as `--json` does: the
    # object is the generation's stats (GenerationStats.to_dict) less what `usage` carries.
    target, draft = model_files(tmp_path)

    def answer() -> dict:
        app = create_app(fake_pair(n_ctx=1024, target_path=target, draft_path=draft), DEFAULTS, api_key=None)
        with TestClient(app) as http:
            r = http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 16, "temperature": 0})
        assert r.status_code == 200
        return r.json()["speculative"]

    first, second = answer(), answer()
    assert first["warm_start"] is False and second["warm_start"] is True
    for spec in (first, second):
        assert spec["draft_loaded"] is True and 0 <= spec["tree_steps"] <= spec["steps"]
        assert spec["time_s"]["decode"] > 0 and len(spec["alpha_per_position"]) <= 4
        assert not {"prompt_tokens", "generated_tokens", "reused_tokens", "finish_reason"} & set(spec)


def test_a_host_that_is_no_address_of_this_machine_is_named_with_the_fix():
    from localspec.server.app import bind

    for host in ("999.1.1.1", "no-such-host.invalid"):
        with pytest.raises(OSError, match=rf"cannot listen on {host}:\d+: .*; give an address of this machine as --host"):
            bind(host, 18732)


def test_a_completion_prompt_of_token_ids_continues_as_its_text_does(tmp_path):
    # OpenAI and llama-server take token ids as the prompt; this server answered "Input should be a valid string"
    target, draft = model_files(tmp_path)
    pair = fake_pair(n_ctx=1024, target_path=target, draft_path=draft)
    ids = pair.prompt_tokens(COUNT, chat=False)
    with TestClient(create_app(pair, DEFAULTS)) as http:
        def complete(prompt):
            return http.post("/v1/completions", json={"model": MODEL, "prompt": prompt, "max_tokens": 8,
                                                      "temperature": 0})
        by_text, by_ids, nested = complete(COUNT), complete(ids), complete([ids])
        assert by_text.status_code == by_ids.status_code == nested.status_code == 200, by_ids.text
        text = by_text.json()["choices"][0]["text"]
        assert text and by_ids.json()["choices"][0]["text"] == nested.json()["choices"][0]["text"] == text
        assert by_ids.json()["usage"]["prompt_tokens"] == len(ids)
        for bad, fragment in (([5, 10**9], "token id 1000000000, outside the target's vocabulary"),
                              ([[1, 2], [3]], "one list of token ids"), ([[]], "prompt is empty")):
            r = complete(bad)
            assert r.status_code == 400 and fragment in r.json()["error"]["message"], r.text


def test_p_min_takes_auto_as_gamma_does(http):
    # was: "p_min": "auto" refused as "Input should be a valid number", though the error for p_min 2 offered auto
    from localspec.server.types import ChatRequest, request_config

    def config(**fields):
        return request_config(ChatRequest(messages=QUESTION, **fields), DEFAULTS)

    assert config(p_min="auto").p_min is None and config(p_min="AUTO", gamma="auto").gamma is None
    assert config(p_min=0.5).p_min == 0.5 and config().p_min == DEFAULTS.p_min
    r = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4, "p_min": "auto"})
    assert r.status_code == 200
    r = http.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4, "p_min": "sometimes"})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "p_min"
    assert error["message"] == 'p_min must be a number in [0, 1) or "auto" (got "sometimes")'


def test_models_say_a_draft_left_unloaded_is_not_loaded(tmp_path, monkeypatch):
    # was: "placement": {"target": "CPU", "draft": "CPU"} for a draft that saved measurements had left
    # unloaded, while `serve --stats` said "draft model not loaded"
    from localspec.context import LazyContext
    from localspec.session import LoadOptions, Pair

    monkeypatch.setattr(Pair, "draft_deferred", lambda self: True)
    target_path, draft_path = model_files(tmp_path)
    target, draft = fake_contexts(n_ctx=1024, target_path=target_path, draft_path=draft_path)
    pair = Pair.from_contexts(target, LazyContext(lambda: draft, 1024, draft_path), LoadOptions(n_ctx=1024))
    with TestClient(create_app(pair, DEFAULTS, api_key=None)) as http:
        card = http.get("/v1/models").json()["data"][0]
        assert card["draft"] == "fake-draft.gguf"
        assert card["placement"] == {"target": "CPU", "draft": "not loaded (CPU if it is)"}
        assert http.post("/v1/completions", json={"prompt": COUNT, "max_tokens": 4}).status_code == 200
        # the model drafter asked for it: loaded, and named where it runs
        assert http.get("/v1/models").json()["data"][0]["placement"] == {"target": "CPU", "draft": "CPU"}
