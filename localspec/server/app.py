"""The FastAPI app: routes, the OpenAI-shaped error handlers, CORS, and `serve`, which binds the
port (before the models load: see `bind`) and runs the app under uvicorn."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import socket
import threading
from contextlib import asynccontextmanager
from typing import Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..chat import check_messages
from ..config import ContextFull, GenerationConfig, GenerationError, check_fits, worded
from ..devices import cannot_listen
from ..llama import LlamaError
from ..session import Pair
from .logprobs import Logprobs
from .metrics import Metrics
from .middleware import MAX_BODY, Cors, Guard
from .outage import Outage, inherited_socket
from .responses import Shape, collect
from .types import EITHER, SERVER_NAMES, ApiError, ChatRequest, CompletionRequest, Options, check_supported, \
    check_text, message_dicts, request_config
from .web import Live, add_web_routes
from .worker import Worker

# --cors-origin's default: pages served from this machine (any port), as a browser on it sends them.
# A page elsewhere on the network cannot call the server from a browser unless named with --cors-origin.
LOCAL_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"
FALLBACK_TOKEN_BYTES = 1024  # for a model whose vocabulary cannot be read: no real token is longer


class Server:
    """The pair, the defaults for fields a request leaves out, the worker that runs generations, and
    the counters."""

    def __init__(self, pair: Pair, defaults: GenerationConfig, max_queue: int, outage: Outage | None = None):
        self.pair, self.defaults, self.outage = pair, defaults, outage  # outage: with --rpc
        self.metrics = Metrics(lambda: self.worker.status())
        self.worker = Worker(max_queue, lambda job, reply: self.metrics.record(job.name, reply))
        self.model_id = pair.target_model.path.name.removesuffix(".gguf")
        self.token_bytes = max_token_bytes(pair.target_model)

    def check_model(self, name: str | None) -> None:
        if name not in (None, "", self.model_id, self.pair.target_model.path.name):
            raise ApiError(404, f"The model {name!r} does not exist; this server serves {self.model_id!r} "
                           "(see /v1/models)", "model", "model_not_found")

    def check_length(self, n_bytes: int, param: str) -> None:
        """Refuse, without tokenizing, text that cannot fit: no token covers more than token_bytes
        bytes of text, so n_bytes of text are at least n_bytes / token_bytes tokens (a template only adds)."""
        n_ctx = self.pair.target_ctx.n_ctx
        least = -(-n_bytes // self.token_bytes)
        if least >= n_ctx:
            raise ApiError(400, f"the {param} holds {n_bytes} bytes of text, at least {least} tokens (no token "
                           f"covers more than {self.token_bytes} bytes) but the context holds {n_ctx}; shorten it "
                           "or restart the server with a larger --ctx", param, ContextFull.code)

    async def start(self, req: Options, prompt: Callable[[], list[int]], param: str, chat: bool):
        """Validate a request, tokenize its prompt (in a thread) and queue its generation."""
        if self.outage is not None:
            self.outage.check()  # 503 while the target's RPC server is lost
        self.check_model(req.model)
        check_supported(req)
        config = request_config(req, self.defaults)
        try:
            drafter = self.pair.drafter_kind(config)
        except GenerationError as e:
            raise ApiError(400, e.worded(SERVER_NAMES), e.field) from None
        try:
            tokens = await run_in_threadpool(prompt)
            check_fits(len(tokens), self.pair.target_ctx.n_ctx)
        except ContextFull as e:  # the param as this client sent it: messages (chat) or prompt
            raise ApiError(400, e.worded(SERVER_NAMES), param, e.code) from None
        except (GenerationError, LlamaError) as e:
            raise ApiError(400, worded(e, SERVER_NAMES), param) from None
        include_usage = bool(req.stream and req.stream_options and req.stream_options.include_usage)
        shape = Shape(chat, self.model_id, None if config.logprobs is None else Logprobs(self.pair.target_model, chat),
                      include_usage,
                      Live(drafter, "auto" if config.gamma is None else str(config.gamma)))
        return shape, self.worker.submit(lambda cancel: self.pair.stream(tokens, config, cancel), shape.id)

    def model_card(self) -> dict:
        path, pair = self.pair.target_model.path, self.pair
        return {"id": self.model_id, "object": "model", "created": int(path.stat().st_mtime),
                "owned_by": "localspec", "target": path.name, "n_ctx": pair.target_ctx.n_ctx,
                "draft": pair.draft_path.name if pair.draft_path else None, "placement": pair.placement_now()}

    def headers(self) -> list[tuple[bytes, bytes]]:
        """x-localspec-* headers naming the pair."""
        draft = self.pair.draft_path.name if self.pair.draft_path else "none"
        return [(b"x-localspec-target", self.pair.target_model.path.name.encode()),
                (b"x-localspec-draft", draft.encode()), (b"x-localspec-version", __version__.encode())]


def max_token_bytes(model) -> int:
    """The most bytes of text one token of the model's vocabulary stands for (as printed or as written)."""
    try:
        return max(max(len(model.piece(t)), len(model.token_text(t))) for t in range(model.n_vocab))
    except (AttributeError, LlamaError, ValueError):
        return FALLBACK_TOKEN_BYTES


async def respond(server: Server, req: Options, request: Request, prompt: Callable[[], list[int]], param: str,
                  chat: bool):
    shape, job = await server.start(req, prompt, param, chat)
    if req.stream:
        return StreamingResponse(shape.events(job, request), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})
    pieces, reply = await collect(job, request)
    return shape.whole(pieces, reply)


def create_app(pair: Pair, defaults: GenerationConfig = GenerationConfig(), api_key: str | None = None,
               max_queue: int = 8, max_body: int = MAX_BODY, cors_origins: tuple[str, ...] = (),
               outage: Outage | None = None) -> FastAPI:
    """The FastAPI app over a loaded pair. cors_origins: the origins a browser may call it from
    ("*": any); none given: pages on this machine (LOCAL_ORIGINS). outage: the lost-RPC-server state."""
    server = Server(pair, defaults, max_queue, outage)

    @asynccontextmanager
    async def lifespan(app):
        if outage is not None:
            outage.attach(server.worker, asyncio.get_running_loop())
        yield
        if outage is not None and outage.message is not None:
            outage.exit_stuck()  # the generation thread is parked inside ggml: it cannot be joined
        server.worker.shutdown()

    app = FastAPI(title="localspec", version=__version__, lifespan=lifespan)
    app.state.server = server
    app.add_middleware(Guard, headers=server.headers(), api_key=api_key, max_body=max_body)
    # Outermost: answers preflights (which carry no key) and adds Access-Control-* to every answer.
    app.add_middleware(Cors, allow_origins=list(cors_origins),
                       allow_origin_regex=None if cors_origins else LOCAL_ORIGINS, allow_methods=["GET", "POST"],
                       allow_headers=["*"], expose_headers=["x-localspec-target", "x-localspec-draft",
                                                            "x-localspec-version", "Retry-After"], max_age=600)
    add_error_handlers(app)
    add_routes(app, server)
    add_web_routes(app)  # after the API's: a 404 names the routes in the order they were added
    return app


def add_routes(app: FastAPI, server: Server) -> None:
    pair = server.pair

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest, request: Request):
        messages = message_dicts(req.messages)
        server.check_length(sum(len(m["content"].encode()) for m in messages), "messages")
        return await respond(server, req, request, lambda: pair.chat_tokens(check_messages(messages)), "messages", True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        one = isinstance(req.prompt, str) or (req.prompt and isinstance(req.prompt[0], int))  # text, or [ids]
        texts = [req.prompt] if one else req.prompt
        if len(texts) != 1:
            raise ApiError(400, f"prompt must be one string or one list of token ids (got a list of {len(texts)})",
                           "prompt")
        if isinstance(texts[0], list):  # token ids: [ids] or [[ids]]
            ids = prompt_ids(texts[0], pair.target_model.n_vocab)
            return await respond(server, req, request, lambda: ids, "prompt", False)
        if not texts[0]:
            raise ApiError(400, "prompt is empty; give some text to continue", "prompt")
        check_text(texts[0], "prompt")
        server.check_length(len(texts[0].encode()), "prompt")
        return await respond(server, req, request, lambda: pair.prompt_tokens(texts[0], chat=False), "prompt", False)

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [server.model_card()]}

    @app.get("/v1/models/{model:path}")
    async def get_model(model: str):
        server.check_model(model)
        return server.model_card()

    @app.get("/health")
    async def health():
        if server.outage is not None and server.outage.message is not None:
            return server.outage.error().response()
        return {"status": "ok", "model": server.model_id, **server.worker.status()}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")


def prompt_ids(ids: list[int], n_vocab: int) -> list[int]:
    """A prompt given as token ids, taken as they are (no BOS added); ApiError 400 for an empty one or
    an id outside the target's vocabulary."""
    if not ids:
        raise ApiError(400, "prompt is empty; give some token ids to continue", "prompt")
    bad = next((t for t in ids if not 0 <= t < n_vocab), None)
    if bad is not None:
        raise ApiError(400, f"prompt holds token id {bad}, outside the target's vocabulary of {n_vocab}; "
                       "send ids from its tokenizer", "prompt", "invalid_value")
    return list(ids)


def client_param(loc) -> str | None:
    """A validator location as the client wrote the field: ("body", "messages", 0, "content", "str")
    -> "messages[0].content" (pydantic's union-member tags such as "str" dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part != "body" and not is_type_tag(part):
            out += f".{part}" if out else part
    return out or None


TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "bytes"}


def is_type_tag(part: str) -> bool:
    """Whether a location's part is pydantic's tag of a union member ("str", "list[str]"), not a field."""
    return part in TYPE_TAGS or not re.fullmatch(r"[A-Za-z_]\w*", part)


def union_error(errors: list[dict]) -> ApiError | None:
    """The 400 for a field of several JSON types (types.EITHER) given none of them, naming them all:
    pydantic's first error names the first only ("stop: Input should be a valid string" for ["a", 3])."""
    loc = tuple(errors[0].get("loc", ()))
    at = next((i for i, part in enumerate(loc) if isinstance(part, str) and is_type_tag(part)), None)
    if at is None or loc[at - 1] not in EITHER:
        return None
    value = next((e.get("input") for e in errors if len(e["loc"]) == at + 1 and tuple(e["loc"][:at]) == loc[:at]),
                 errors[0].get("input"))  # a member's error at the field itself holds the whole value
    param = client_param(loc[:at])
    return ApiError(400, f"{param} must be {EITHER[loc[at - 1]]} (got {as_json(value)})", param, "invalid_value")


def validation_error(errors: list[dict]) -> ApiError:
    """pydantic's first error as the client can act on it."""
    err = errors[0]
    if err.get("type") == "json_invalid":
        detail = err.get("ctx", {}).get("error", "")
        return ApiError(400, f"the request body is not valid JSON ({detail}); send a JSON object")
    param = client_param(err.get("loc", ()))
    if param is None and isinstance(err.get("input"), bytes):  # a body FastAPI did not parse: not sent as JSON
        return ApiError(400, "the request body was not sent as JSON; send a JSON object with the header "
                        "Content-Type: application/json (curl: -H 'Content-Type: application/json')",
                        None, "invalid_body")
    if param is None:
        got = "nothing" if err.get("type") == "missing" else as_json(err.get("input"))
        return ApiError(400, "the request body must be a JSON object with the request's fields (messages for "
                        f"chat, prompt for completions); got {got}", None, "invalid_body")
    if err.get("type") == "missing":
        return ApiError(400, f"{param} is required", param, "missing")
    return union_error(errors) or ApiError(400, f"{param}: {err.get('msg')} (got {as_json(err.get('input'))})", param,
                                           "invalid_value")


def as_json(value, limit: int = 60) -> str:
    """A value of the request as the client wrote it (true, 3, "0"), cut to limit characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def unreadable_body(cause: BaseException | None) -> ApiError:
    """The 400 for a JSON body FastAPI could not parse, from what its parser raised (the error's cause)."""
    if isinstance(cause, UnicodeDecodeError):
        why, fix = "it is not valid UTF-8 text", "send a JSON object encoded as UTF-8"
    elif isinstance(cause, RecursionError):
        why, fix = "it is nested too deeply for the parser", "send a JSON object nested a few hundred levels at most"
    else:
        why, fix = f"{type(cause).__name__}: {cause}" if cause else "no reason given", "send a JSON object"
    return ApiError(400, f"the request body could not be parsed as JSON ({why}); {fix}", None, "invalid_body")


def routes_named(app: FastAPI) -> str:
    """The routes a 404 names, as the app registered them: 'POST /v1/completions, GET /v1/models/{model}, ...'.

    Only the routes this app added (APIRoute) are named. FastAPI's own pages (/docs, /redoc,
    /openapi.json: plain Starlette routes, answered behind the API key as FastAPI sets them up) are
    not: they describe the server rather than serve the API a client calls (OpenAI's), /docs loads its
    script from a CDN an offline machine cannot reach, and a browser cannot open them under --api-key.
    HEAD, which the web chat's routes take beside GET, goes without saying."""
    named = []
    for route in app.routes:
        if isinstance(route, APIRoute):
            methods = sorted(route.methods - {"HEAD"}) or ["HEAD"]
            named += [f"{method} {route.path_format}" for method in methods]
    return ", ".join(named)


def add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: ours, request validation (400) and routing (404, 405, 413)."""

    @app.exception_handler(ApiError)
    async def api_error(request, e: ApiError):
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        return validation_error(e.errors()).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, e: StarletteHTTPException):
        if e.status_code == 413:  # raised by Guard's body limit
            return ApiError(413, e.detail, None, "request_too_large").response()
        if e.status_code == 400 and str(e.detail).startswith("There was an error parsing the body"):
            return unreadable_body(e.__cause__).response()
        where = f"{e.detail}: {request.method} {request.url.path}"
        if e.status_code == 405:  # Starlette names the route's methods in Allow, which the answer keeps
            allow = (e.headers or {}).get("Allow", "")
            return ApiError(405, f"{where}; this route takes {allow.replace(', ', ' or ')}", None,
                            None, e.headers).response()
        if e.status_code == 404:
            return ApiError(404, f"{where}; this server answers {routes_named(request.app)}").response()
        return ApiError(e.status_code, where, None, None, e.headers).response()


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now, so that a port in use is reported before the models load
    (or the one a serve that lost its RPC server handed to its re-execution). Raises OSError with a
    one-line message."""
    inherited = inherited_socket()
    if inherited is not None:
        return inherited
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, UnicodeError) as e:  # UnicodeError: a host name no resolver can encode
        sock.close()
        raise OSError(cannot_listen(host, port, e)) from None
    sock.listen(2048)
    return sock


def serve(pair: Pair, defaults: GenerationConfig, host: str = "127.0.0.1", port: int = 8080,
          api_key: str | None = None, max_queue: int = 8, log: Callable[[str], None] = print,
          max_body: int = MAX_BODY, cors_origins: tuple[str, ...] = (), sock: socket.socket | None = None,
          outage: Outage | None = None) -> None:
    """Serve until interrupted (Ctrl-C or SIGTERM) on sock (bound by `bind`), or on host:port."""
    app = create_app(pair, defaults, api_key, max_queue, max_body, cors_origins, outage)
    draft = pair.draft_path.name if pair.draft_path else "no draft"
    log(f"localspec: serving {app.state.server.model_id} (draft: {draft}) at http://{host}:{port}/v1, "
        f"web chat at http://{host}:{port}/" + ("" if api_key else "  [no API key]"))
    logger = logging.getLogger("localspec")  # the request lines (localspec.server.metrics), as uvicorn's look
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    config = uvicorn.Config(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=10)
    sock = sock or bind(host, port)
    if outage is not None:
        outage.sock = sock  # handed to the re-executed serve
    # uvicorn captures Ctrl-C and SIGTERM while it serves, then raises them again to the handlers it
    # found: SIGTERM's default ends the process as a terminated one, not the CLI's KeyboardInterrupt
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    Uvicorn(config, app.state.server.worker).run(sockets=[sock])


class Uvicorn(uvicorn.Server):
    """uvicorn's server, which on Ctrl-C or SIGTERM first stops the generations: the running one ends
    as cancelled and the waiting ones are answered 503, so that open streams end at once."""

    def __init__(self, config: uvicorn.Config, worker: Worker):
        super().__init__(config)
        self.worker = worker

    async def shutdown(self, sockets=None) -> None:
        self.worker.cancel_all()
        await super().shutdown(sockets)
