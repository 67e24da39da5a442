"""The web chat at `/` (static files in server/web/, no build step) and the `localspec` field of
streamed chunks: which pieces the draft guessed, and live counters the page shows as it streams."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import Response

from ..speculative import Piece

WEB = Path(__file__).parent / "web"
# URL path -> (file in WEB, content type). The page is not secret: these answer without the API key.
PAGES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/web/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/web/style.css": ("style.css", "text/css; charset=utf-8"),
}


def is_public(scope) -> bool:
    """A GET or HEAD of the page or its assets: answered without the API key."""
    return scope.get("method") in ("GET", "HEAD") and scope.get("path") in PAGES


def add_web_routes(app: FastAPI) -> None:
    """GET / and the page's assets, read from the package on each request (a few KiB)."""

    def route(path: str, name: str, media_type: str):
        async def page() -> Response:
            return Response((WEB / name).read_bytes(), media_type=media_type, headers={"Cache-Control": "no-cache"})
        app.add_api_route(path, page, methods=["GET", "HEAD"], include_in_schema=False, name=f"web:{name}")

    for path, (name, media_type) in PAGES.items():
        route(path, name, media_type)


class Live:
    """The `localspec` field of each streamed chunk. pieces: the chunk's text split by who produced
    it (draft: guessed by a drafter and accepted by the target). Counters so far: tokens, draft_tokens
    (those accepted from the draft), target_tokens (the target's own: one per verify step, so
    tokens / target_tokens estimates the mean accepted length before the final `speculative` object
    gives it exactly), tokens_per_s since the first token, and the request's drafter and gamma."""

    def __init__(self, drafter: str | None, gamma: str):
        self.drafter, self.gamma = drafter or "none", gamma
        self.tokens = self.draft_tokens = 0
        self.first: float | None = None

    def field(self, piece: Piece | None = None) -> dict:
        """The field for a chunk carrying piece (None: a chunk without text)."""
        pieces = []
        if piece is not None:
            now = time.perf_counter()
            self.first = self.first if self.first is not None else now
            self.tokens += piece.n_tokens  # a piece covers every token since the last (Piece)
            self.draft_tokens += piece.drafted
            if piece.text:
                pieces.append({"text": piece.text, "draft": piece.from_draft})
        elapsed = time.perf_counter() - self.first if self.first is not None else 0.0
        return {"pieces": pieces, "tokens": self.tokens, "draft_tokens": self.draft_tokens,
                "target_tokens": self.tokens - self.draft_tokens,
                "tokens_per_s": (self.tokens - 1) / elapsed if elapsed > 0 and self.tokens > 1 else None,
                "drafter": self.drafter, "gamma": self.gamma}
