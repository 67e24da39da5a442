"""The FastAPI app: routes, the API-key and header middleware, OpenAI-shaped error handlers, and
`serve`, which runs it under uvicorn."""

from __future__ import annotations

import hmac
from contextlib import asynccontextmanager
from typing import Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..config import ContextFull, check_fits
from ..llama import LlamaError
from ..session import Pair, check_messages
from ..config import GenerationConfig, GenerationError
from .responses import Shape, collect
from .types import ApiError, ChatRequest, CompletionRequest, Options, message_dicts, request_config
from .web import Live, add_web_routes, is_public
from .worker import Worker


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
            drafter = self.pair.drafter_kind(config)
        except GenerationError:
            raise ApiError(400, f"drafter {config.drafter!r} needs a draft model and this server has none; "
                           "use drafter 'ngram', or restart the server with --draft", "drafter") from None
        try:
            tokens = prompt()
            check_fits(len(tokens), self.pair.target_ctx.n_ctx)
        except ContextFull as e:  # the param as this client sent it: messages (chat) or prompt
            raise ApiError(400, str(e), param, e.code) from None
        except (GenerationError, LlamaError) as e:
            raise ApiError(400, str(e), param) from None
        job = self.worker.submit(lambda cancel: self.pair.stream(tokens, config, cancel))
        return Shape(chat, self.model_id, Live(drafter, "auto" if config.gamma is None else str(config.gamma))), job

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
    add_web_routes(app)

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

        key = dict(scope["headers"]).get(b"authorization", b"")
        if self.api_key and not is_public(scope) and not self.authorized(key):
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
    log(f"localspec: serving {app.state.server.model_id} (draft: {draft}) at http://{host}:{port}/v1, "
        f"web chat at http://{host}:{port}/" + ("" if api_key else "  [no API key]"))
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
