"""An OpenAI-compatible HTTP server over one loaded pair: the only module that imports FastAPI/uvicorn.

Endpoints: POST /v1/chat/completions and /v1/completions (server-sent events when "stream" is set),
GET /v1/models and /health. One generation runs at a time, in a worker thread; up to --max-queue
requests wait their turn and the next gets 503 with Retry-After. Each response carries a
`speculative` object beside `usage`; every response names the pair in x-localspec-* headers.
A streaming client that disconnects stops its generation within a step. Errors have OpenAI's shape:
{"error": {"message", "type", "param", "code"}}.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Callable, Iterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import __version__
from .llama import LlamaError
from .sampling import SamplingParams
from .session import Pair, Reply, check_messages
from .speculative import GenerationConfig, GenerationError, Piece

DONE = object()      # end of a job's items
POLL_S = 0.25        # how often a waiting request checks that its client is still there
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


# --- requests ------------------------------------------------------------------------------------
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


# --- one generation at a time --------------------------------------------------------------------
class Job:
    """One request's generation: items cross from the worker thread to the request's coroutine."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.cancel = threading.Event()

    def put(self, item) -> None:
        """From the worker thread: hand an item (a Piece, the Reply, an exception or DONE) over."""
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def items(self, request: Request):
        """The generation's items as they come; stops, cancelling the generation, if the client leaves."""
        try:
            while True:
                try:
                    item = await asyncio.wait_for(self.queue.get(), POLL_S)
                except asyncio.TimeoutError:
                    item = None
                if await request.is_disconnected() or item is DONE:
                    return
                if isinstance(item, Exception):
                    raise ApiError(500, f"the generation failed: {item}") from item
                if item is not None:
                    yield item
        finally:
            self.cancel.set()  # a no-op once the generation is over


class Worker:
    """Runs one generation at a time on the pair; up to max_queue more requests wait their turn."""

    def __init__(self, max_queue: int):
        self.max_queue = max_queue
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="localspec-generate")
        self.jobs: set[Job] = set()  # running and waiting; changed on the event loop only
        self.served = self.cancelled = 0

    def submit(self, work: Callable[[threading.Event], Iterator]) -> Job:
        """Queue work(cancel) -> items; ApiError 503 when max_queue requests already wait."""
        waiting = len(self.jobs) - 1
        if waiting >= self.max_queue:
            raise ApiError(503, f"the server is busy: one generation runs and {waiting} wait (--max-queue "
                           f"{self.max_queue}); retry shortly", code="queue_full",
                           headers={"Retry-After": str(max(1, waiting))})
        job = Job(asyncio.get_running_loop())
        self.jobs.add(job)
        future = job.loop.run_in_executor(self.executor, self._run, job, work)
        future.add_done_callback(lambda _: self.jobs.discard(job))
        return job

    def _run(self, job: Job, work: Callable[[threading.Event], Iterator]) -> None:
        """In the worker thread: feed the job its items, then DONE; skip a job whose client left."""
        try:
            if job.cancel.is_set():
                self.cancelled += 1
                return
            for item in work(job.cancel):
                if isinstance(item, Reply):
                    self.served += 1
                    self.cancelled += item.finish_reason == "cancelled"
                job.put(item)
        except Exception as e:  # noqa: BLE001 - handed to the request, which answers it
            job.put(e)
        finally:
            job.put(DONE)

    def status(self) -> dict:
        return {"busy": bool(self.jobs), "queued": max(0, len(self.jobs) - 1), "max_queue": self.max_queue,
                "served": self.served, "cancelled": self.cancelled}

    def cancel_all(self) -> None:
        """Stop the running generation and drop the waiting ones (their streams end at once)."""
        for job in list(self.jobs):
            job.cancel.set()

    def shutdown(self) -> None:
        self.cancel_all()
        self.executor.shutdown(wait=True, cancel_futures=True)


# --- responses -----------------------------------------------------------------------------------
def speculative_info(reply: Reply) -> dict:
    """The `speculative` object: what was drafted and accepted, and what the caches reused."""
    s = reply.stats
    return {"drafted": s.drafted, "accepted": s.accepted, "alpha": s.alpha,
            "mean_accepted_length": s.mean_accepted_length, "steps": s.steps, "drafter": s.drafter,
            "gamma": s.gamma_mode, "by_drafter": {k: {"drafted": d, "accepted": a} for k, (d, a) in s.by_drafter.items()},
            "reused_target_tokens": reply.reused_target, "reused_draft_tokens": reply.reused_draft,
            "tokens_per_s": s.tokens_per_s}


def usage_info(reply: Reply) -> dict:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated,
            "total_tokens": s.prompt_tokens + s.generated,
            "prompt_tokens_details": {"cached_tokens": reply.reused_target}}


class Shape:
    """The JSON of one endpoint's answers: chat (message/delta) or text completion (text)."""

    def __init__(self, chat: bool, model: str):
        self.chat, self.model = chat, model
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def envelope(self, choice: dict, stream: bool, reply: Reply | None = None) -> dict:
        kind = ("chat.completion.chunk" if stream else "chat.completion") if self.chat else "text_completion"
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}
        if reply is not None:
            body.update(usage=usage_info(reply), speculative=speculative_info(reply))
        return body

    def choice(self, text: str | None, finish: str | None, stream: bool, role: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if not stream:
            return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                    "finish_reason": finish}
        delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def whole(self, text: str, reply: Reply) -> dict:
        return self.envelope(self.choice(text, reply.finish_reason, stream=False), False, reply)

    async def events(self, job: Job, request: Request):
        """Server-sent events: the role (chat), a chunk per piece, the finish with stats, [DONE]."""
        if self.chat:
            yield sse(self.envelope(self.choice("", None, True, role=True), True))
        try:
            async for item in job.items(request):
                if isinstance(item, Piece):
                    yield sse(self.envelope(self.choice(item.text, None, True), True))
                else:
                    yield sse(self.envelope(self.choice(None if self.chat else "", item.finish_reason, True), True, item))
        except ApiError as e:  # the response has begun: the error becomes the last event
            yield sse(json.loads(e.response().body))
        yield "data: [DONE]\n\n"


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def collect(job: Job, request: Request) -> tuple[str, Reply]:
    """Wait for a whole generation: its text and its Reply."""
    parts, reply = [], None
    async for item in job.items(request):
        if isinstance(item, Piece):
            parts.append(item.text)
        else:
            reply = item
    if reply is None:
        raise ApiError(499, "the client closed the request")
    return "".join(parts), reply


# --- the app -------------------------------------------------------------------------------------
class Server:
    """The pair, the defaults for fields a request leaves out, and the worker that runs generations."""

    def __init__(self, pair: Pair, defaults: GenerationConfig, max_queue: int):
        self.pair, self.defaults = pair, defaults
        self.worker = Worker(max_queue)
        self.model_id = pair.target_model.path.name.removesuffix(".gguf")

    def check_model(self, name: str | None) -> None:
        if name not in (None, "", self.model_id, self.pair.target_model.path.name):
            raise ApiError(404, f"The model {name!r} does not exist; this server serves {self.model_id!r} "
                           "(see /v1/models)", "model", "model_not_found")

    def start(self, req: Options, prompt: Callable[[], list[int]], param: str, chat: bool):
        """Validate a request, tokenize its prompt and queue its generation; return the response."""
        self.check_model(req.model)
        config = request_config(req, self.defaults)
        try:
            self.pair.drafter_kind(config)
        except GenerationError:
            raise ApiError(400, f"drafter {config.drafter!r} needs a draft model and this server has none; "
                           "use drafter 'ngram', or restart the server with --draft", "drafter") from None
        try:
            tokens = prompt()
            self.pair.check_prompt(tokens)
        except (GenerationError, LlamaError) as e:
            code = "context_length_exceeded" if "context holds" in str(e) else None
            raise ApiError(400, str(e), param, code) from None
        job = self.worker.submit(lambda cancel: self.pair.stream(tokens, config, cancel))
        return Shape(chat, self.model_id), job

    def headers(self) -> list[tuple[bytes, bytes]]:
        """x-localspec-* headers naming the pair."""
        draft = self.pair.draft_model.path.name if self.pair.draft_model else "none"
        return [(b"x-localspec-target", self.pair.target_model.path.name.encode()),
                (b"x-localspec-draft", draft.encode()), (b"x-localspec-version", __version__.encode())]


async def respond(server: Server, req: Options, request: Request, prompt: Callable[[], list[int]], param: str,
                  chat: bool):
    shape, job = server.start(req, prompt, param, chat)
    if req.stream:
        return StreamingResponse(shape.events(job, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    text, reply = await collect(job, request)
    return shape.whole(text, reply)


def create_app(pair: Pair, defaults: GenerationConfig = GenerationConfig(), api_key: str | None = None,
               max_queue: int = 8) -> FastAPI:
    """The FastAPI app over a loaded pair."""
    server = Server(pair, defaults, max_queue)

    @asynccontextmanager
    async def lifespan(app):
        yield
        server.worker.shutdown()

    app = FastAPI(title="localspec", version=__version__, lifespan=lifespan)
    app.state.server = server
    app.add_middleware(Guard, headers=server.headers(), api_key=api_key)
    add_error_handlers(app)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request):
        messages = message_dicts(req.messages)
        return await respond(server, req, request, lambda: pair.chat_tokens(check_messages(messages)), "messages", True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        texts = [req.prompt] if isinstance(req.prompt, str) else req.prompt
        if len(texts) != 1:
            raise ApiError(400, f"prompt must be one string (got a list of {len(texts)})", "prompt")
        return await respond(server, req, request, lambda: pair.prompt_tokens(texts[0], chat=False), "prompt", False)

    @app.get("/v1/models")
    async def list_models():
        path = pair.target_model.path
        card = {"id": server.model_id, "object": "model", "created": int(path.stat().st_mtime),
                "owned_by": "localspec", "target": path.name, "n_ctx": pair.target_ctx.n_ctx,
                "draft": pair.draft_model.path.name if pair.draft_model else None}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": server.model_id, **server.worker.status()}

    return app


def add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: ours, request validation (400) and routing (404, 405)."""

    @app.exception_handler(ApiError)
    async def api_error(request, e: ApiError):
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        err = e.errors()[0]
        loc = [str(p) for p in err.get("loc", ()) if p != "body"]
        if err.get("type") == "json_invalid":
            detail = err.get("ctx", {}).get("error", "")
            return ApiError(400, f"the request body is not valid JSON ({detail}); send a JSON object").response()
        param = ".".join(loc) or None
        what = f"{param} is required" if err.get("type") == "missing" else f"{param or 'body'}: {err.get('msg')}"
        return ApiError(400, what, param, err.get("type")).response()

    @app.exception_handler(Exception)
    async def crashed(request, e: Exception):
        return ApiError(500, f"internal error: {type(e).__name__}: {e}").response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, e: StarletteHTTPException):
        return ApiError(e.status_code, f"{e.detail}: {request.method} {request.url.path}").response()


class Guard:
    """ASGI middleware: checks the API key on every request and adds the x-localspec-* headers.
    (Plain ASGI rather than BaseHTTPMiddleware, which would get in the way of streaming.)"""

    def __init__(self, app, headers: list[tuple[bytes, bytes]], api_key: str | None):
        self.app, self.extra, self.api_key = app, headers, api_key

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *self.extra]}
            await send(message)

        if self.api_key and not self.authorized(dict(scope["headers"]).get(b"authorization", b"")):
            error = ApiError(401, "invalid or missing API key; send 'Authorization: Bearer KEY' with the key "
                             "given to `localspec serve --api-key`", code="invalid_api_key")
            return await error.response()(scope, receive, send_with_headers)
        await self.app(scope, receive, send_with_headers)

    def authorized(self, header: bytes) -> bool:
        scheme, _, key = header.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), self.api_key.encode())


def serve(pair: Pair, defaults: GenerationConfig, host: str = "127.0.0.1", port: int = 8080,
          api_key: str | None = None, max_queue: int = 8, log: Callable[[str], None] = print) -> None:
    """Serve until interrupted (Ctrl-C)."""
    app = create_app(pair, defaults, api_key, max_queue)
    draft = pair.draft_model.path.name if pair.draft_model else "no draft"
    log(f"localspec: serving {app.state.server.model_id} (draft: {draft}) at http://{host}:{port}/v1"
        + ("" if api_key else "  [no API key]"))
    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=10)
    Uvicorn(config, app.state.server.worker).run()


class Uvicorn(uvicorn.Server):
    """uvicorn's server, which on Ctrl-C first stops the generations, so that open streams end at once."""

    def __init__(self, config: uvicorn.Config, worker: Worker):
        super().__init__(config)
        self.worker = worker

    async def shutdown(self, sockets=None) -> None:
        self.worker.cancel_all()
        await super().shutdown(sockets)
