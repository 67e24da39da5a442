"""An OpenAI-compatible HTTP server over one loaded pair: the only package that imports FastAPI/uvicorn.

Endpoints: POST /v1/chat/completions and /v1/completions (server-sent events when "stream" is set),
GET /v1/models, /v1/models/{id}, /health, /metrics (Prometheus text), and a web chat at GET /
(server/web/; public, the API calls carry the key; each streamed chunk has a `localspec` field).
One generation runs at a time, in a worker thread; up to --max-queue requests wait their turn and the next gets 503 with
Retry-After; at shutdown the waiting ones get 503. Tokenizing runs in a thread, off the event loop.
Each response carries a `speculative` object beside `usage`; every response names the pair in
x-localspec-* headers. A streaming client that disconnects stops its generation within a step.
Errors have OpenAI's shape: {"error": {"message", "type", "param", "code"}}, param as the client
named the field. Modules: app (routes, errors, CORS, serve), middleware (key, body limit), types
(requests), responses (answers), logprobs, metrics (log line, counters), worker (the queue), web
(the chat page).
"""

from .app import bind, create_app, serve
from .outage import Outage

__all__ = ["Outage", "bind", "create_app", "serve"]
