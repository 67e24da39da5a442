"""ASGI middleware (plain ASGI rather than BaseHTTPMiddleware, which would get in the way of
streaming): the API key, the x-localspec-* headers, the request-body limit, and a 500 for a crash
that still passes through the CORS middleware outside it; and that CORS middleware, whose refusals
are in OpenAI's shape."""

from __future__ import annotations

import hmac
import logging

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from .types import ApiError
from .web import is_public

log = logging.getLogger("localspec.server")
PRIVATE_ASK = "access-control-request-private-network"  # a preflight's header, as ASGI spells it
MAX_BODY = 4 * 1024 * 1024  # --max-body's default: far above any prompt a context of 128k tokens holds


class Guard:
    """Checks the API key on every request (CORS preflights never reach it: the CORS middleware
    answers them), adds the x-localspec-* headers, refuses bodies over max_body bytes with 413, and
    answers an unexpected exception with a 500 in OpenAI's shape."""

    def __init__(self, app, headers: list[tuple[bytes, bytes]], api_key: str | None, max_body: int = MAX_BODY):
        self.app, self.extra, self.api_key, self.max_body = app, headers, api_key, max_body

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *self.extra]}
            await send(message)

        error = self.refusal(dict(scope["headers"]), public=is_public(scope))
        if error is not None:
            return await error.response()(scope, receive, send_with_headers)
        try:
            await self.app(scope, self.limited(receive), send_with_headers)
        except Exception as e:
            log.exception("internal error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            await ApiError(500, f"internal error: {type(e).__name__}: {e}").response()(scope, receive, send_with_headers)

    def refusal(self, headers: dict[bytes, bytes], public: bool = False) -> ApiError | None:
        """The error a request gets from its headers alone: a wrong key (except on the public web chat
        files), or a declared body too large."""
        if self.api_key and not public and not self.authorized(headers.get(b"authorization", b"")):
            return ApiError(401, "invalid or missing API key; send 'Authorization: Bearer KEY' with the key "
                            "given to `localspec serve --api-key`", code="invalid_api_key")
        length = headers.get(b"content-length", b"0")
        if length.isdigit() and int(length) > self.max_body:
            return self.too_large(int(length))
        return None

    def too_large(self, size: int | None) -> ApiError:
        held = f"holds {size} bytes, over" if size is not None else "is over"  # None: sent without Content-Length
        return ApiError(413, f"the request body {held} this server's limit of {self.max_body} bytes; "
                        "send a shorter prompt, or restart the server with a larger --max-body", None,
                        "request_too_large")

    def limited(self, receive):
        """receive, counting body bytes: a body sent without Content-Length is cut off at the limit too."""
        seen = 0

        async def receive_limited():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:  # FastAPI passes an HTTPException raised here on to its handler
                    raise HTTPException(413, self.too_large(None).message)
            return message
        return receive_limited

    def authorized(self, header: bytes) -> bool:
        scheme, _, key = header.decode("latin-1").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(key.strip().encode(), self.api_key.encode())


class Cors(CORSMiddleware):
    """Starlette's CORS middleware, which grants an allowed origin private network access too, and whose
    refused preflight (a plain-text 400, "Disallowed CORS origin") is answered in OpenAI's shape, naming
    what was refused and the fix."""

    def preflight_response(self, request_headers: Headers) -> Response:
        # Chrome's preflight from a page on a public origin to this loopback server asks for private
        # network access (Access-Control-Request-Private-Network: true). An origin allowed to call the
        # server is granted it (https://wicg.github.io/private-network-access/). Starlette refuses the ask
        # unless built with allow_private_network, which releases before 0.51 lack: it judges the rest.
        private = PRIVATE_ASK in request_headers
        rest = Headers(raw=[(k, v) for k, v in request_headers.raw if k != PRIVATE_ASK.encode()])
        response = super().preflight_response(rest)
        if response.status_code != 400:
            if private:
                response.headers["Access-Control-Allow-Private-Network"] = "true"
            return response
        origin, method = request_headers["origin"], request_headers["access-control-request-method"]
        why = []
        if not self.is_allowed_origin(origin=origin):
            why.append(f"the origin {origin} may not call this server; restart it with --cors-origin {origin} "
                       "(or --cors-origin '*' for any origin)")
        if method not in self.allow_methods:
            why.append(f"the method {method} is not one this API takes; send GET or POST")
        headers = {k: v for k, v in response.headers.items() if k not in ("content-length", "content-type")}
        return ApiError(400, "CORS preflight refused: " + "; ".join(why), None, "cors_refused", headers).response()
