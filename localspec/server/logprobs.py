"""OpenAI's `logprobs` objects from the Pieces of a generation run with GenerationConfig.logprobs.

The numbers are the target's log-probabilities at each emitted position, from the RAW logits of the
verify row that judged the token (log_softmax, before temperature and the top-k/top-p/min-p filters,
as OpenAI reports them): exact under speculation, since the verify computes the target's row for
every emitted token, accepted draft or not. See localspec.sampling.token_logprobs.
"""

from __future__ import annotations

from typing import Sequence

from ..speculative import Piece


class Logprobs:
    """Turns Pieces into the logprobs object of one endpoint: chat ({"content": [...]}) or the
    legacy completions shape (tokens, token_logprobs, top_logprobs, text_offset)."""

    def __init__(self, model, chat: bool):
        self.model, self.chat = model, chat
        self.offset = 0  # characters of text before the next piece (completions' text_offset)

    def text(self, token: int) -> str:
        return self.model.piece(token).decode("utf-8", errors="replace")

    def of(self, pieces: Sequence[Piece]) -> dict:
        pieces = [p for p in pieces if p.logprob is not None]  # the held-back text flushed at the end has none
        return self.chat_shape(pieces) if self.chat else self.completion_shape(pieces)

    def chat_shape(self, pieces: Sequence[Piece]) -> dict:
        def entry(token: int, logprob: float) -> dict:
            return {"token": self.text(token), "logprob": logprob, "bytes": list(self.model.piece(token))}
        return {"content": [{**entry(p.token, p.logprob), "top_logprobs": [entry(t, lp) for t, lp in p.top]}
                            for p in pieces], "refusal": None}

    def completion_shape(self, pieces: Sequence[Piece]) -> dict:
        offsets = []
        for p in pieces:
            offsets.append(self.offset)
            self.offset += len(p.text)
        return {"tokens": [self.text(p.token) for p in pieces], "token_logprobs": [p.logprob for p in pieces],
                "top_logprobs": [{self.text(t): lp for t, lp in p.top} for p in pieces], "text_offset": offsets}
