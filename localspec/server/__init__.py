"""An OpenAI-compatible HTTP server over one loaded pair: the only module that imports FastAPI/uvicorn.

Endpoints: POST /v1/chat/completions and /v1/completions (server-sent events when "stream" is set),
GET /v1/models and /health, and a web chat at GET / (server/web/; public, the API calls carry the key).
One generation runs at a time, in a worker thread; up to --max-queue requests wait their turn and the
next gets 503 with Retry-After. Each response carries a `speculative` object beside `usage` (and each
streamed chunk a `localspec` field: see server/web.py); every response names the pair in
x-localspec-* headers.
A streaming client that disconnects stops its generation within a step. Errors have OpenAI's shape:
{"error": {"message", "type", "param", "code"}}.
"""

from .app import create_app, serve

__all__ = ["create_app", "serve"]
