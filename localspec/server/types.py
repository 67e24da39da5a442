"""The requests the server accepts and the errors it answers: pydantic models, and the
GenerationConfig a request asks for over the server's defaults."""

from __future__ import annotations

import dataclasses
import json

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from ..sampling import SamplingParams
from ..config import GenerationConfig, GenerationError, seed_from
from ..chat import ROLES

# The request's fields that are GenerationConfig's too: a GenerationError's field is the 400's param.
FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "p_min", "gamma", "drafter", "seed", "stop",
          "logprobs")
MAX_STOP = 4  # OpenAI's limit on stop strings
# What the library's errors name, as the server's clients are told it (config.Worded): the server's
# --ctx for the Pair's n_ctx, and --draft for the draft model it was started without; a request's fields
# by the names GenerationConfig gives them, a drafter as the request's `drafter` value; a prompt sent as
# is, without the chat template, by the endpoint that takes one; less memory by the flags of a restart.
SERVER_NAMES = {"n_ctx": "--ctx", "model_drafter": "drafter 'model'", "hybrid_drafter": "drafter 'hybrid'",
                "no_draft": "this server was started without one: use drafter 'ngram', or restart it with --draft",
                "raw": "/v1/completions",
                "lower_memory": "restart the server with a lower --ctx, --ngl-target or --ngl-draft"}


def asks_for_format(v) -> bool:
    """Whether response_format asks for anything but plain text (a string such as "json" asks too)."""
    return v is not None and not (isinstance(v, dict) and v.get("type", "text") == "text")


# Fields OpenAI clients send that this server cannot honour: each is refused with a 400 naming it
# when a request asks for it (a value other than "off"), never silently ignored.
UNSUPPORTED = {
    "response_format": (asks_for_format, "structured output (json_object, json_schema) is not supported; "
                        "ask for JSON in the prompt, or leave response_format out"),
    "tools": (bool, "tool calling is not supported; leave tools and tool_choice out"),
    "tool_choice": (lambda v: v not in (None, "none"), "tool calling is not supported; leave tool_choice out"),
    "functions": (bool, "function calling is not supported; leave functions out"),
    "function_call": (lambda v: v not in (None, "none"), "function calling is not supported; leave function_call out"),
    "modalities": (lambda v: v is not None and (not isinstance(v, list) or any(m != "text" for m in v)),
                   "output other than text (audio) is not supported; leave modalities out or send [\"text\"]"),
    "audio": (bool, "audio output is not supported; leave audio out"),
    "logit_bias": (bool, "logit_bias is not supported; leave it out"),
    "echo": (bool, "echo is not supported; prepend the prompt yourself"),
    "suffix": (bool, "suffix (fill-in-the-middle) is not supported; leave it out"),
    "best_of": (lambda v: v not in (None, 1), "best_of must be 1; ask again for another completion"),
    "frequency_penalty": (bool, "frequency_penalty is not supported (it would change the target's "
                          "distribution); leave it out or send 0"),
    "presence_penalty": (bool, "presence_penalty is not supported (it would change the target's "
                         "distribution); leave it out or send 0"),
}


# What a field of several JSON types takes, as its type error names them (pydantic's names only the first)
EITHER = {
    "stop": f"a string or a list of at most {MAX_STOP} strings",
    "prompt": "a string, or a list of token ids (whole numbers)",
    "content": 'a string or a list of text parts ({"type": "text", "text": ...})',
    "gamma": 'a whole number >= 0 or "auto"',
    "p_min": 'a number in [0, 1) or "auto"',
}

# An assistant message's calls: refused as tools and functions are (the chat template would drop them)
MESSAGE_CALLS = ("tool_calls", "function_call")


class ApiError(Exception):
    """An error answered in OpenAI's shape; message names the bad value and the fix."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers

    def response(self) -> JSONResponse:
        kind = ("authentication_error" if self.status == 401 else
                "invalid_request_error" if self.status < 500 else "server_error")
        body = {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)



class StreamOptions(BaseModel):
    """stream_options: include_usage (a boolean, as OpenAI's); other fields accepted and ignored."""

    model_config = ConfigDict(extra="allow", strict=True)
    include_usage: bool | None = None


class Options(BaseModel):
    """Fields both endpoints accept; fields in UNSUPPORTED are refused when they ask for something,
    other OpenAI fields (user, store, metadata, ...) are accepted and ignored. Types are strict, as
    OpenAI's are: true is no number and "yes" no boolean (an integer is a number where one is asked
    for); null is accepted wherever OpenAI accepts it and means the default."""

    model_config = ConfigDict(extra="allow", strict=True)
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n: int | None = None
    gamma: int | str | None = None    # localspec: draft length, or "auto"
    drafter: str | None = None        # localspec: auto | model | ngram | hybrid
    p_min: float | str | None = None  # localspec: the draft model stops below this confidence, or "auto"
    # in UNSUPPORTED, and typed: a value of the wrong type ("0") is told so, not that it asks for too much
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    best_of: int | None = None
    echo: bool | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    role: str
    content: str | list[dict] | None = None


class ChatRequest(Options):
    messages: list[Message]
    logprobs: bool | None = None
    top_logprobs: int | None = None

    def n_logprobs(self) -> int | None:
        """How many alternatives to report per token; None: no logprobs."""
        if self.top_logprobs is not None and not self.logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", "top_logprobs")
        return (self.top_logprobs or 0) if self.logprobs else None


class CompletionRequest(Options):
    prompt: str | list[str] | list[int] | list[list[int]]  # text, or token ids (OpenAI takes both)
    logprobs: int | None = None

    def n_logprobs(self) -> int | None:
        return self.logprobs


def check_supported(req: Options) -> None:
    """ApiError 400 naming the first field that asks for what this server does not do."""
    for name, (asks, why) in UNSUPPORTED.items():
        if asks(getattr(req, name, None)):  # a declared field, or one of the extras pydantic keeps
            raise ApiError(400, why, name, "unsupported_parameter")


def request_config(req: Options, defaults: GenerationConfig) -> GenerationConfig:
    """The request's fields over the server's defaults; ApiError 400 naming any bad value."""
    field, max_tokens = next(((f, v) for f, v in (("max_completion_tokens", req.max_completion_tokens),
                                                  ("max_tokens", req.max_tokens)) if v is not None),
                             ("max_tokens", defaults.max_tokens))  # the newer name first, as OpenAI reads them
    if max_tokens < 1:
        raise ApiError(400, f"{field} must be >= 1 (got {max_tokens})", field)
    s = defaults.sampling
    temperature = s.temperature if req.temperature is None else req.temperature
    if req.temperature is not None and not 0 <= temperature <= 2:  # OpenAI's range: the server's own default
        raise ApiError(400, f"temperature must be between 0 and 2 (got {temperature}); 0 is greedy", "temperature")
    if req.n not in (None, 1):
        raise ApiError(400, f"n must be 1 (got {req.n}); ask again for another choice", "n")
    gamma = defaults.gamma if req.gamma is None else auto_or(req.gamma, "gamma", "a whole number >= 0")
    p_min = defaults.p_min if req.p_min is None else auto_or(req.p_min, "p_min", "a number in [0, 1)")
    stop = (req.stop,) if isinstance(req.stop, str) else defaults.stop if req.stop is None else tuple(req.stop)
    if req.stop is not None and len(stop) > MAX_STOP:
        raise ApiError(400, f"stop holds {len(stop)} strings; send at most {MAX_STOP}", "stop")
    try:
        seed = seed_from(req.seed)
    except GenerationError as e:
        raise ApiError(400, str(e), "seed") from None
    n_logprobs = req.n_logprobs()
    if n_logprobs is not None and not 0 <= n_logprobs <= 20:
        raise ApiError(400, f"{'top_logprobs' if isinstance(req, ChatRequest) else 'logprobs'} must be between "
                       f"0 and 20 (got {n_logprobs})", "top_logprobs" if isinstance(req, ChatRequest) else "logprobs")
    sampling = SamplingParams(temperature, pick(req.top_k, s.top_k), pick(req.top_p, s.top_p), pick(req.min_p, s.min_p))
    config = dataclasses.replace(defaults, max_tokens=max_tokens, gamma=gamma, sampling=sampling, stop=stop,
                                 seed=pick(seed, defaults.seed), drafter=pick(req.drafter, defaults.drafter),
                                 p_min=p_min, logprobs=n_logprobs)
    try:
        return config.validate()
    except GenerationError as e:
        raise ApiError(400, str(e), e.field if e.field in FIELDS else None) from None


def auto_or(value, field: str, what: str):
    """A request's value of a field that takes a number or "auto" (None: decided from measured costs)."""
    if not isinstance(value, str):
        return value
    if value.lower() != "auto":
        raise ApiError(400, f"{field} must be {what} or \"auto\" (got {json.dumps(value)})", field)
    return None


def pick(value, default):
    return default if value is None else value


def message_dicts(messages: list[Message]) -> list[dict]:
    """OpenAI messages -> {role, content} with text content; an unknown role, content parts other than
    text and an assistant's tool or function calls are refused, and the `developer` role (OpenAI's newer
    name for system) becomes system."""
    if not messages:
        raise ApiError(400, "messages must hold at least one message", "messages")
    out = []
    for i, m in enumerate(messages):
        if m.role not in ROLES + ("developer",):
            raise ApiError(400, f"messages[{i}].role must be one of {', '.join(ROLES)} or developer (got "
                           f"{json.dumps(m.role)})", f"messages[{i}].role", "invalid_value")
        for name in MESSAGE_CALLS:
            if (m.model_extra or {}).get(name):
                raise ApiError(400, f"messages[{i}].{name}: tool and function calling are not supported, and the "
                               "prompt would leave the calls out; send the conversation without them",
                               f"messages[{i}].{name}", "unsupported_parameter")
        if m.content is None and m.role != "assistant":  # an assistant's may be null (OpenAI: beside tool calls)
            raise ApiError(400, f"messages[{i}].content is required for role {m.role!r}: give its text",
                           f"messages[{i}].content", "missing")
        content = m.content or ""
        if isinstance(content, list):
            bad = next((j for j, part in enumerate(content) if part.get("type") != "text"), None)
            if bad is not None:
                kind = content[bad].get("type")
                what = "has no \"type\"" if kind is None else f"is a non-text part (type {json.dumps(kind):.60})"
                raise ApiError(400, f"messages[{i}].content[{bad}] {what}; this server takes text only: send the "
                               "text as a string or as {\"type\": \"text\", \"text\": ...} parts",
                               f"messages[{i}].content")
            if not all(isinstance(part.get("text"), str) for part in content):
                raise ApiError(400, f"messages[{i}] has a text part without a string \"text\"; give each part "
                               "as {\"type\": \"text\", \"text\": ...}", f"messages[{i}].content", "invalid_value")
            content = "".join(part["text"] for part in content)
        check_text(content, f"messages[{i}].content")
        out.append({"role": "system" if m.role == "developer" else m.role, "content": content})
    return out


def check_text(text: str, param: str) -> None:
    """ApiError 400 when text cannot be UTF-8: a lone surrogate (an unpaired \\ud800-\\udfff escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"{param} holds a lone surrogate ({text[e.start]!r} at character {e.start}); "
                       "send text as valid UTF-8, with \\ud800-\\udfff escapes only in high-low pairs", param,
                       "invalid_text") from None

