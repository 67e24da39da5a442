"""Conversations over a loaded Pair: what chat, the server's /v1/chat/completions and a library caller hold.

A `Chat` keeps a conversation. Each turn formats the whole history with the GGUF's chat template;
the target and the draft context each keep the longest token prefix their KV cache shares with it
and evaluate only the rest, so a new turn costs its new tokens, not the conversation so far.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Iterator, Sequence

from . import models
from .config import GenerationConfig, GenerationError, check_fits
from .session import Pair, Reply
from .speculative import Piece


ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Sequence[dict]) -> list[dict]:
    """Return messages as plain {role, content} dicts, or raise GenerationError naming the bad one."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise GenerationError(f"message {i} must be {{'role': one of {', '.join(ROLES)}, 'content': text}} "
                                  f"(got {m!r:.80})")
        out.append({"role": m["role"], "content": m["content"]})
    return out


class Chat:
    """A conversation over a Pair. send() streams the reply to a new turn, reusing the longest token
    prefix that the target's and the draft's KV caches share with the conversation so far.

        chat = Chat(pair, GenerationConfig(max_tokens=200), system="Answer briefly.")
        for item in chat.send("What is a KV cache?"):
            print(item.text if isinstance(item, Piece) else f"\n{item.summary()}", end="")
    """

    def __init__(self, pair: Pair, config: GenerationConfig = GenerationConfig(), system: str | None = None,
                 messages: Sequence[dict] = ()):
        self.pair, self.config, self.system = pair, config.validate(), system
        self.messages: list[dict] = check_messages(messages)
        self.replies: list[Reply] = []
        self._cancel = threading.Event()
        self._turns = 0  # send() calls so far: the latest one's turn is the one recorded

    def send(self, message: str | Sequence[dict], config: GenerationConfig | None = None) -> Iterator[Piece | Reply]:
        """Add a user message (or a list of messages) and stream the reply: Pieces, then one Reply.

        Raises GenerationError, changing nothing, when the conversation no longer fits the context.
        The reply joins the conversation, also when cut short by stop() or by closing the iterator,
        unless a later send() began meanwhile: that one's turn stands, and this one, resumed, raises
        GenerationError (Pair.stream: one generation at a time)."""
        if not isinstance(message, (str, list, tuple)):
            raise GenerationError(f"send() takes the user's text or a list of {{'role', 'content'}} messages "
                                  f"(got {message!r:.60})")
        new = [{"role": "user", "content": message}] if isinstance(message, str) else list(message)
        messages = self.messages + check_messages(new)
        prompt = self.prompt(messages)
        self.check_fits(prompt)
        self._cancel.clear()
        self._turns += 1
        turn, parts, reply = self._turns, [], None
        try:
            for item in self.pair.stream(prompt, (config or self.config).validate(), self._cancel):
                if isinstance(item, Reply):
                    reply = item
                    break
                parts.append(item.text)
                yield item
        except GeneratorExit:
            if turn == self._turns:  # an abandoned earlier turn does not overwrite the later one
                self._record(messages, "".join(parts), None)
            raise
        self._record(messages, "".join(parts), reply)
        yield reply

    def prompt(self, messages: Sequence[dict] | None = None) -> list[int]:
        """The tokens of a conversation (default: this one) with the system prompt, ready for a reply."""
        messages = self.messages if messages is None else messages
        system = [{"role": "system", "content": self.system}] if self.system else []
        return self.pair.chat_tokens(system + list(messages))

    def check_fits(self, prompt: Sequence[int]) -> None:
        """Raise ContextFull when a turn's prompt leaves no room for a reply; say how to go on."""
        check_fits(len(prompt), self.pair.target_ctx.n_ctx, what="the conversation",
                   fix="nothing was dropped: save it ({save}), then {reset}, or {restart}")

    def _record(self, messages: list[dict], text: str, reply: Reply | None) -> None:
        self.messages = messages + [{"role": "assistant", "content": text}]
        if reply is not None:
            self.replies.append(reply)

    def stop(self) -> None:
        """Stop the reply being generated after the piece in flight (safe from a signal handler or thread)."""
        self._cancel.set()

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays; cached tokens are reused where they match)."""
        self.messages, self.replies = [], []

    def load(self, path: str | Path) -> int:
        """Resume a conversation that save() wrote: its messages (and system prompt) replace this one's;
        the caches are rebuilt from them on the next send(). Return the number of messages."""
        try:
            data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        except OSError as e:
            raise GenerationError(f"cannot read {path}: {e.strerror}; give the file /save wrote") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise GenerationError(f"{path} is not a conversation that /save wrote (not JSON: {e})") from None
        raw = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            raise GenerationError(f"{path} is not a conversation that /save wrote (no 'messages' list)")
        messages = check_messages(raw)
        self.system = None  # the saved conversation's own system prompt, or none: it is resumed as saved
        if messages and messages[0]["role"] == "system":
            self.system, messages = messages[0]["content"], messages[1:]
        self.messages, self.replies = messages, []
        return len(messages)

    def save(self, path: str | Path) -> Path:
        """Write the conversation and per-turn stats to a JSON file, atomically (a write that fails
        leaves the file as it was); return its path."""
        path = Path(path).expanduser()
        system = [{"role": "system", "content": self.system}] if self.system else []
        data = {"target": str(self.pair.target_model.path),
                "draft": str(self.pair.draft_path) if self.pair.draft_path else None,
                "messages": system + self.messages, "turns": [r.to_dict() for r in self.replies]}
        models.atomic_write(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                            fix="give /save a file in a folder you can write")
        return path
