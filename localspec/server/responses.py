"""The JSON of the answers: OpenAI's chat and text completion shapes, whole or as server-sent
events, with a `speculative` object beside `usage`.

finish_reason is one of OpenAI's ("stop", "length"); localspec_finish_reason, beside it, says what
localspec saw, including "cancelled" (stopped by the server, reported as "stop")."""

from __future__ import annotations

import json
import time
import uuid

from fastapi import Request

from ..session import Reply
from ..speculative import Piece
from .logprobs import Logprobs
from .types import ApiError
from .web import Live
from .worker import Job


# What `usage` and finish_reason already carry, left out of the `speculative` object
IN_USAGE = ("prompt_tokens", "generated_tokens", "reused_tokens", "finish_reason")


def speculative_info(reply: Reply) -> dict:
    """The `speculative` object: the generation's stats as `--json` gives them (GenerationStats.to_dict:
    what was drafted and accepted, by which drafter, whether the plan started warm, the trees, the
    time split) less what `usage` carries, and what the caches reused."""
    info = {k: v for k, v in reply.stats.to_dict().items() if k not in IN_USAGE}
    info.update(reused_target_tokens=reply.reused_target, reused_draft_tokens=reply.reused_draft)
    return info


def usage_info(reply: Reply) -> dict:
    s = reply.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated,
            "total_tokens": s.prompt_tokens + s.generated,
            "prompt_tokens_details": {"cached_tokens": reply.reused_target}}


class Shape:
    """The JSON of one endpoint's answers: chat (message/delta) or text completion (text)."""

    def __init__(self, chat: bool, model: str, logprobs: Logprobs | None = None, include_usage: bool = False,
                 live: Live | None = None):
        """logprobs: formats each choice's logprobs (None: not asked for); include_usage: a stream ends
        with a separate usage chunk whose choices are [] (stream_options.include_usage); live: the
        `localspec` field of each streamed chunk."""
        self.chat, self.model, self.logprobs, self.include_usage = chat, model, logprobs, include_usage
        self.live = live or Live(None, "")
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())

    def envelope(self, choice: dict, stream: bool, reply: Reply | None = None) -> dict:
        kind = ("chat.completion.chunk" if stream else "chat.completion") if self.chat else "text_completion"
        body = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}
        if reply is not None:
            body.update(usage=usage_info(reply), speculative=speculative_info(reply))
        return body

    def choice(self, text: str | None, finish: str | None, stream: bool, role: bool = False,
               pieces: list[Piece] = ()) -> dict:
        logprobs = self.logprobs.of(pieces, stream) if self.logprobs else None
        ends = {"finish_reason": OPENAI_FINISH.get(finish, finish)}
        if finish:
            ends["localspec_finish_reason"] = finish
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": logprobs, **ends}
        if not stream:
            return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs, **ends}
        delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
        return {"index": 0, "delta": delta, "logprobs": logprobs, **ends}

    def whole(self, pieces: list[Piece], reply: Reply) -> dict:
        text = "".join(p.text for p in pieces)
        return self.envelope(self.choice(text, reply.finish_reason, stream=False, pieces=pieces), False, reply)

    def usage_chunk(self, reply: Reply) -> dict:
        """stream_options.include_usage: the last chunk before [DONE], with no choices."""
        body = self.envelope({}, True, reply)
        body["choices"] = []
        return body

    async def events(self, job: Job, request: Request):
        """Server-sent events: the role (chat), a chunk per piece, the finish with stats, [DONE].
        Each chunk carries a `localspec` field (see web.Live): its text by who produced it, and counters."""
        if self.chat:
            yield sse(self.envelope(self.choice("", None, True, role=True), True) | {"localspec": self.live.field()})
        try:
            async for item in job.items(request):
                if isinstance(item, Piece):
                    choice, live = self.choice(item.text, None, True, pieces=[item]), self.live.field(item)
                    if item.text or choice["logprobs"]:  # not a token whose text is held back for a stop string
                        yield sse(self.envelope(choice, True) | {"localspec": live})
                    continue
                finish = self.choice(None if self.chat else "", item.finish_reason, True)
                if self.include_usage:  # the finish, then usage and stats in a chunk of their own
                    yield sse(self.envelope(finish, True) | {"localspec": self.live.field()})
                    yield sse(self.usage_chunk(item))
                else:
                    yield sse(self.envelope(finish, True, item) | {"localspec": self.live.field()})
        except ApiError as e:  # the response has begun: the error becomes the last event
            yield sse(json.loads(e.response().body))
        yield "data: [DONE]\n\n"


OPENAI_FINISH = {"cancelled": "stop"}  # localspec's finish reasons that OpenAI's set lacks -> OpenAI's


def sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def collect(job: Job, request: Request) -> tuple[list[Piece], Reply]:
    """Wait for a whole generation: its Pieces and its Reply."""
    pieces, reply = [], None
    async for item in job.items(request):
        if isinstance(item, Piece):
            pieces.append(item)
        else:
            reply = item
    if reply is None:  # the client left: nobody reads this answer
        raise ApiError(499, "the client closed the request")
    return pieces, reply

