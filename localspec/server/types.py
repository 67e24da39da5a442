"""The requests the server accepts and the errors it answers: pydantic models, and the
GenerationConfig a request asks for over the server's defaults."""

from __future__ import annotations

import dataclasses

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict

from ..sampling import SamplingParams
from ..config import GenerationConfig, GenerationError

FIELDS = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "p_min", "gamma", "drafter", "seed", "stop")


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



class Options(BaseModel):
    """Fields both endpoints accept; other OpenAI fields (user, logprobs, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = 1
    gamma: int | str | None = None    # localspec: draft length, or "auto"
    drafter: str | None = None        # localspec: auto | model | ngram | hybrid
    p_min: float | None = None        # localspec: the draft model stops below this confidence


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict] | None = None


class ChatRequest(Options):
    messages: list[Message]


class CompletionRequest(Options):
    prompt: str | list[str]


def request_config(req: Options, defaults: GenerationConfig) -> GenerationConfig:
    """The request's fields over the server's defaults; ApiError 400 naming any bad value."""
    max_tokens = next((v for v in (req.max_completion_tokens, req.max_tokens) if v is not None), defaults.max_tokens)
    if max_tokens < 1:
        raise ApiError(400, f"max_tokens must be >= 1 (got {max_tokens})", "max_tokens")
    s = defaults.sampling
    temperature = s.temperature if req.temperature is None else req.temperature
    if not 0 <= temperature <= 2:
        raise ApiError(400, f"temperature must be between 0 and 2 (got {temperature}); 0 is greedy", "temperature")
    if req.n != 1:
        raise ApiError(400, f"n must be 1 (got {req.n}); ask again for another choice", "n")
    gamma = defaults.gamma if req.gamma is None else req.gamma
    if isinstance(gamma, str):
        if gamma.lower() != "auto":
            raise ApiError(400, f"gamma must be a whole number >= 0 or 'auto' (got {gamma!r})", "gamma")
        gamma = None
    stop = (req.stop,) if isinstance(req.stop, str) else defaults.stop if req.stop is None else tuple(req.stop)
    sampling = SamplingParams(temperature, pick(req.top_k, s.top_k), pick(req.top_p, s.top_p), pick(req.min_p, s.min_p))
    config = dataclasses.replace(defaults, max_tokens=max_tokens, gamma=gamma, sampling=sampling, stop=stop,
                                 seed=pick(req.seed, defaults.seed), drafter=pick(req.drafter, defaults.drafter),
                                 p_min=pick(req.p_min, defaults.p_min))
    try:
        return config.validate()
    except GenerationError as e:
        named = sorted((str(e).find(f), f) for f in FIELDS if f in str(e))  # the field the message names first
        raise ApiError(400, str(e), named[0][1] if named else None) from None


def pick(value, default):
    return default if value is None else value


def message_dicts(messages: list[Message]) -> list[dict]:
    """OpenAI messages -> {role, content} with text content; content parts other than text are refused."""
    if not messages:
        raise ApiError(400, "messages must hold at least one message", "messages")
    out = []
    for i, m in enumerate(messages):
        content = m.content or ""
        if isinstance(content, list):
            if any(part.get("type") != "text" for part in content):
                raise ApiError(400, f"messages[{i}] has a non-text content part; this server takes text only",
                               "messages")
            content = "".join(str(part.get("text", "")) for part in content)
        out.append({"role": m.role, "content": content})
    return out

