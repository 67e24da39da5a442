"""OpenAI's `logprobs` objects from the Pieces of a generation run with GenerationConfig.logprobs.

The numbers are the target's log-probabilities at each emitted position, from the RAW logits of the
verify row that judged the token (log_softmax, before temperature and the top-k/top-p/min-p filters,
as OpenAI reports them): exact under speculation, since the verify computes the target's row for
every emitted token, accepted draft or not. See localspec.sampling.token_logprobs.
"""

from __future__ import annotations

import codecs
from typing import Sequence

from ..speculative import Piece


class Logprobs:
    """Turns Pieces into the logprobs object of one endpoint: chat ({"content": [...]}) or the
    legacy completions shape (tokens, token_logprobs, top_logprobs, text_offset).

    The object covers the text returned, not every token generated. A Piece's text is what its token
    released, which may be empty (the possible start of a stop string held back, or part of a UTF-8
    character) or may carry earlier tokens' held text; so each token waits until the returned text
    reaches it. A token is reported once its first character is returned: one that a stop string cuts
    in the middle is reported whole (its text_offset inside the text), and tokens whose text a stop
    string removed entirely are never reported (as llama-server trims them)."""

    def __init__(self, model, chat: bool):
        self.model, self.chat = model, chat
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # as TextStream decodes tokens
        self.generated = 0  # characters of the tokens' text so far, stop strings included
        self.returned = 0  # characters of text returned so far: a prefix of the tokens' text
        self.waiting: list[tuple[Piece, int, int]] = []  # tokens not yet reached: (piece, start, end) in characters

    def text(self, token: int) -> str:
        return self.model.piece(token).decode("utf-8", errors="replace")

    def of(self, pieces: Sequence[Piece], stream: bool = False) -> dict | None:
        """The logprobs of the tokens that pieces' text reaches; None for a streamed chunk that reaches none."""
        ready = self.ready(pieces)
        if stream and not ready:
            return None
        return self.chat_shape(ready) if self.chat else self.completion_shape(ready)

    def ready(self, pieces: Sequence[Piece]) -> list[tuple[Piece, int]]:
        """The tokens the returned text now reaches, with the offset of each one's text."""
        for p in pieces:
            if p.logprob is not None:  # the held-back text flushed at the end has none
                start = self.generated
                self.generated += len(self.decoder.decode(self.model.piece(p.token)))
                # a token ending inside a UTF-8 character spans that character
                self.waiting.append((p, start, self.generated + bool(self.decoder.getstate()[0])))
            self.returned += len(p.text)
        # reached: its first character is returned, or it has none and the text reaches its place
        n = next((i for i, (_, start, end) in enumerate(self.waiting)
                  if not (start < self.returned or end <= self.returned)), len(self.waiting))
        ready, self.waiting = self.waiting[:n], self.waiting[n:]
        return [(p, start) for p, start, _ in ready]

    def chat_shape(self, ready: Sequence[tuple[Piece, int]]) -> dict:
        def entry(token: int, logprob: float) -> dict:
            return {"token": self.text(token), "logprob": logprob, "bytes": list(self.model.piece(token))}
        return {"content": [{**entry(p.token, p.logprob), "top_logprobs": [entry(t, lp) for t, lp in p.top]}
                            for p, _ in ready], "refusal": None}

    def completion_shape(self, ready: Sequence[tuple[Piece, int]]) -> dict:
        pieces = [p for p, _ in ready]
        return {"tokens": [self.text(p.token) for p in pieces], "token_logprobs": [p.logprob for p in pieces],
                "top_logprobs": [{self.text(t): lp for t, lp in p.top} for p in pieces],
                "text_offset": [start for _, start in ready]}
