"""The JSON of the answers: OpenAI's chat and text completion shapes, whole or as server-sent
events, with a `speculative` object beside `usage`."""

from __future__ import annotations

import json
import time
import uuid

from fastapi import Request

from ..session import Reply
from ..speculative import Piece
from .types import ApiError
from .worker import Job


def speculative_info(reply: Reply) -> dict:
    """The `speculative` object: what was drafted and accepted, and what the caches reused."""
    s = reply.stats
    return {"drafted": s.drafted, "accepted": s.accepted, "alpha": s.alpha,
            "mean_accepted_length": s.mean_accepted_length, "steps": s.steps, "drafter": s.drafter_flag,
            "sources": [n for n in s.drafter.split("+") if n != "none"], "gamma": s.gamma_value, "by_drafter": {k: {"drafted": d, "accepted": a} for k, (d, a) in s.by_drafter.items()},
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

