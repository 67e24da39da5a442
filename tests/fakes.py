"""Fakes of localspec.llama's Model and Context: controller, chat, CLI and server tests run in-process
in milliseconds, with no llama.cpp.

The vocabulary is BOS and the ChatML markers, every printable ASCII character and newline (so any
ASCII text tokenizes and round-trips), and a few words (so tokenizing is not one token per byte).
A row of logits is a fixed function of the context: two seeded [V, V] tables indexed by the last two
tokens, a second-order Markov chain. The same tokens give the same row bit for bit, whatever batches
they were decoded in (unlike llama.cpp's CPU kernels, see tests/test_realpair.py). A draft is the
same tables plus seeded noise of a given scale: correlated with its target, not equal to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from jinja2 import Template

from localspec.llama import LlamaError, NoChatTemplate, common_prefix_len
from localspec.sampling import distribution

CONTROL = ["<s>", "<|im_start|>", "<|im_end|>"]
BOS, IM_START, EOS = 0, 1, 2  # EOS is <|im_end|>, as in ChatML models
WORDS = [" the", " and", " is", " of", " to", "ing", "def ", "return", "    ", " Paris", " capital", " France",
         "system", "user", "assistant"]
PIECES = CONTROL + [chr(c) for c in range(32, 127)] + ["\n"] + WORDS
V = len(PIECES)  # 114

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tables(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two [V, V] float32 tables of standard normal entries, the same for the same seed."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((V, V)).astype(np.float32) for _ in range(2))


def refuse(message: str):
    """A template's raise_exception(message), as llama-cpp-python's Jinja2ChatFormatter defines it."""
    raise ValueError(message)


class FakeModel:
    """The surface of localspec.llama.Model that localspec uses, over a table of logits.

    scale: how peaked the rows are (std of a logit); noise: the scale of the seeded noise added to
    every row (0: the target itself; a draft has noise > 0); reply_len: EOS becomes near-certain once
    that many tokens follow the last control token, and is near-impossible before (None: it never
    ends). In a chat those tokens are the role line, "assistant\n" (2 tokens), then the reply."""

    def __init__(self, path: str | Path = "fake-instruct.gguf", seed: int = 0, scale: float = 3.0,
                 noise: float = 0.0, noise_seed: int = 1, reply_len: int | None = None,
                 template: str | None = CHATML):
        self.path = Path(path)
        self.n_vocab = V
        self.seed, self.scale, self.noise, self.reply_len, self.template = seed, scale, noise, reply_len, template
        last, prev = tables(seed)
        if noise:
            noise_last, noise_prev = tables(1000 + noise_seed)
            last, prev = last + noise * noise_last, prev + noise * noise_prev
        # row(prev, last) = last_table[last] + prev_table[prev]: [V] each
        self._last, self._prev = scale * last, 0.5 * scale * prev
        self._ids = {p: i for i, p in enumerate(PIECES) if i >= len(CONTROL)}
        self._special = {p: i for i, p in enumerate(CONTROL)}
        self._longest = max(map(len, PIECES))

    def logits_at(self, context: Sequence[int]) -> np.ndarray:
        """The row of logits after context: [V] float32, a function of its last tokens only."""
        row = self._last[context[-1]] + (self._prev[context[-2]] if len(context) > 1 else 0.0)
        row[BOS] = row[IM_START] = -30.0  # control tokens are written by templates, not generated
        row[EOS] = 30.0 if self._reply_done(context) else -30.0
        return row

    def _reply_done(self, context: Sequence[int]) -> bool:
        n = self.reply_len
        return n is not None and len(context) >= n and not any(t < len(CONTROL) for t in context[-n:])

    def close(self) -> None:
        pass

    # --- metadata -------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        return {"general.name": "Fake Instruct", "general.architecture": "fake", "general.file_type": "0"}.get(key)

    def description(self) -> str:
        return f"fake {V}-token table model (seed {self.seed}, noise {self.noise})"

    def n_ctx_train(self) -> int:
        return 4096

    def chat_template(self) -> str | None:
        return self.template

    # --- vocabulary -----------------------------------------------------------------------
    def vocab_type(self) -> int:
        return 2  # BPE, as llama.cpp numbers it

    def bos(self) -> int:
        return BOS

    def eos(self) -> int:
        return EOS

    def adds_bos(self) -> bool:
        return True

    def adds_eos(self) -> bool:
        return False

    def token_text(self, token: int) -> bytes:
        return PIECES[token].encode()

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def piece(self, token: int) -> bytes:
        """What a token prints as: control tokens print nothing."""
        return b"" if token < len(CONTROL) else PIECES[token].encode()

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Longest match first over the pieces (control tokens only when parse_special)."""
        ids = [BOS] if add_special else []
        i = 0
        while i < len(text):
            for n in range(min(self._longest, len(text) - i), 0, -1):
                token = self._ids.get(text[i:i + n], self._special.get(text[i:i + n]) if parse_special else None)
                if token is not None:
                    ids.append(token)
                    i += n
                    break
            else:
                raise ValueError(f"the fake vocabulary has no token for {text[i]!r} (ASCII only)")
        return ids

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode()

    def apply_chat_template(self, messages: Sequence[dict], add_assistant: bool = True) -> str:
        template = self.chat_template()  # read as llama.Model reads it, once a call
        if template is None:
            raise NoChatTemplate(f"{self.path.name} has no chat template")
        try:  # raise_exception() as llama-cpp-python's formatter gives it to a template
            return Template(template).render(messages=list(messages), add_generation_prompt=add_assistant,
                                                  raise_exception=refuse)
        except Exception as e:
            raise LlamaError(f"the chat template of {self.path.name} failed ({e})") from None

    def tokenize_prompt(self, prompt: str) -> list[int]:
        return self.tokenize(prompt, add_special=not prompt.startswith(CONTROL[BOS]), parse_special=True)


class FakeContext:
    """The surface of localspec.llama.Context: `tokens` mirrors the cache; each decode overwrites the
    rows of the one before, as llama.cpp's logits buffer is overwritten. With n_seq_max > 1 it
    verifies token trees (decode_tree, keep_path), each node's row computed from its own branch."""

    backend = False  # whether sample_on_backend succeeds (SampledContext)

    def __init__(self, model: FakeModel, n_ctx: int = 512, n_seq_max: int = 1, n_batch: int = 512):
        self.model, self.n_ctx, self.n_seq_max, self.n_batch = model, n_ctx, n_seq_max, n_batch
        self._tree: list[int] | None = None  # the nodes of the last decode_tree, until keep_path
        self.tokens: list[int] = []
        self.chain = None  # the SamplingParams a backend chain was installed with
        self._out = np.zeros((8, V), dtype=np.float32)  # the output rows of the last decode
        self._n_rows = 0
        self.closed = False

    def decode(self, tokens: Sequence[int], logits: str = "last", sampled: bool = False) -> None:
        """Append tokens; compute rows for 'last', 'all' or 'none' of them (sampled: as a backend chain)."""
        assert logits in ("last", "all", "none") and not self.closed
        assert not sampled or self.chain is not None
        if not sampled and logits != "none":
            self.chain = None  # as llama.cpp's Context: raw rows again, the chain removed
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise LlamaError(f"context full: {len(self.tokens)} + {len(tokens)} tokens > --ctx {self.n_ctx}")
        if logits == "all" and len(tokens) > self.n_batch:
            raise LlamaError(f"{len(tokens)} rows of logits in one decode, more than its batch of {self.n_batch}")
        if not tokens:
            return  # as llama.cpp: nothing decoded, the last rows stay
        start = len(self.tokens)
        self.tokens.extend(tokens)
        ends = range(start + 1, len(self.tokens) + 1) if logits == "all" else [len(self.tokens)] * (logits == "last")
        if len(ends) > len(self._out):
            self._out = np.zeros((len(ends), V), dtype=np.float32)
        for i, end in enumerate(ends):
            self._out[i] = self.model.logits_at(self.tokens[:end])
        self._n_rows = len(ends)

    def logits(self, row: int = -1) -> np.ndarray:
        """A float32 [V] view of an output row of the last decode (IndexError for a row not computed)."""
        assert self.chain is None, "rows decoded with sampled=True have no logits"
        return self._row(row)

    def _row(self, row: int) -> np.ndarray:
        return self._out[: self._n_rows][row]

    def decode_tree(self, root: int, tokens: Sequence[int], parents: Sequence[int]) -> None:
        """Root and a tree after it: row 0 root's, row i + 1 node i's (its context: root and ancestors)."""
        branches = sum(1 for i in range(len(parents)) if i not in set(parents))
        assert branches <= self.n_seq_max and not self.closed, (branches, self.n_seq_max)
        self.tokens.append(root)
        rows = [self.model.logits_at(self.tokens)]
        for i in range(len(tokens)):
            path, node = [], i
            while node >= 0:
                path.append(tokens[node])
                node = parents[node]
            rows.append(self.model.logits_at(self.tokens + path[::-1]))
        self._out, self._n_rows, self._tree = np.array(rows), len(rows), list(tokens)

    def keep_path(self, path: Sequence[int]) -> None:
        self.tokens.extend(self._tree[i] for i in path)
        self._tree = None

    def sample_on_backend(self, params) -> bool:
        """A backend sampler chain, where this fake has one (backend)."""
        self.chain = params if self.backend else None
        return self.backend

    def keep_top_k_on_backend(self, k: int) -> bool:
        """A backend top_k chain, where this fake has one (backend)."""
        self.chain = k if self.backend else None
        return self.backend

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def reuse_prefix(self, tokens: Sequence[int]) -> int:
        n = common_prefix_len(self.tokens, tokens)
        self.truncate(n)
        return n

    def close(self) -> None:
        self.closed = True


class SampledContext(FakeContext):
    """A FakeContext with llama.cpp's backend sampling: each row as the chain returns it, a dense
    float32 probability row over the vocabulary in a shuffled candidate order, 0 where filtered."""

    backend = True
    rows_offloaded = True  # as a context whose rows are made on a device

    def sampled_token(self, row: int) -> int:
        return int(np.argmax(self._row(row)))

    def sampled_logits(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        row_logits = self._row(row)
        ids = np.argpartition(-row_logits, self.chain - 1)[: self.chain]  # the k largest, any order
        return ids.astype(np.int32), row_logits[ids]

    def sampled_probs(self, row: int) -> tuple[np.ndarray, np.ndarray]:
        d = distribution(self._row(row), self.chain)
        probs = np.zeros(V, dtype=np.float32)
        probs[d.ids] = d.probs
        order = np.random.default_rng(row).permutation(V).astype(np.int32)  # candidates in any order
        return order, probs[order]


class RecordingContext(FakeContext):
    """A FakeContext that logs its calls: ("decode", start position, tokens, logits) and ("truncate", n)
    where a truncate dropped something."""

    def __init__(self, model: FakeModel, n_ctx: int = 512):
        super().__init__(model, n_ctx)
        self.calls: list[tuple] = []

    def decode(self, tokens: Sequence[int], logits: str = "last", sampled: bool = False) -> None:
        self.calls.append(("decode", len(self.tokens), list(tokens), logits))
        super().decode(tokens, logits, sampled)

    def truncate(self, n: int) -> None:
        if n < len(self.tokens):
            self.calls.append(("truncate", n))
        super().truncate(n)


def fake_contexts(n_ctx: int = 512, draft: bool = True, noise: float = 0.3, reply_len: int | None = None,
                  target_path: str | Path = "fake-instruct.gguf", draft_path: str | Path = "fake-draft.gguf",
                  context=FakeContext, n_seq_max: int = 1) -> tuple[FakeContext, FakeContext | None]:
    """A target context (verifying trees of up to n_seq_max branches) and (when draft) a correlated
    draft context with noise of that scale."""
    target = context(FakeModel(target_path, reply_len=reply_len), n_ctx)
    target.n_seq_max = n_seq_max
    return target, context(FakeModel(draft_path, noise=noise, reply_len=reply_len), n_ctx) if draft else None


def fake_pair(n_ctx: int = 512, draft: bool = True, **kwargs):
    """A localspec Pair over fake contexts (kwargs: as fake_contexts)."""
    from localspec.session import LoadOptions, Pair

    return Pair.from_contexts(*fake_contexts(n_ctx, draft, **kwargs), LoadOptions(n_ctx=n_ctx))


def failed_decode(monkeypatch, tree: bool = False):
    """The LlamaError localspec.context.Context raises where llama_decode fails (code 1, no room in the KV
    cache), on a chain or (tree) on a token tree: made without a model, llama.cpp's decode stubbed."""
    import llama_cpp as lc

    from localspec import context

    monkeypatch.setattr(context, "decode_sync", lambda ptr, batch: 1)
    monkeypatch.setattr(lc, "llama_memory_seq_rm", lambda *args: True)
    monkeypatch.setattr(lc, "llama_memory_seq_keep", lambda *args: None)
    ctx = context.Context.__new__(context.Context)
    ctx.tokens, ctx.n_batch, ctx.n_ctx, ctx.n_seq_max, ctx.memory = [1] * 7, 8, 64, 1, None
    ctx._batch = lc.llama_batch_init(8, 0, 1)
    try:
        if tree:
            ctx.decode_tree(2, [3], [-1])
        else:
            ctx.decode([2, 3])
    except LlamaError as e:
        return e
    finally:
        lc.llama_batch_free(ctx._batch)
        ctx._batch = None
    raise AssertionError("the stubbed decode did not fail")
