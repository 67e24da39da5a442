"""The fakes themselves: the cache mirrors its tokens, logits depend only on the context, pieces
round-trip. Everything the controller, chat, CLI and server tests on fakes rely on."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.llama import LlamaError, TextStream
from localspec.sampling import greedy_token
from localspec.config import GenerationConfig

from fakes import BOS, EOS, IM_START, V, FakeContext, FakeModel, RecordingContext, fake_pair

TEXT = "def add(a, b):\n    return a + b  # the sum of two numbers!"


@pytest.fixture
def model():
    return FakeModel()


def test_decode_truncate_and_reuse_prefix_mirror_the_tokens(model):
    ctx = FakeContext(model, n_ctx=64)
    ctx.decode([5, 6, 7], logits="none")
    ctx.decode([8], logits="last")
    assert ctx.tokens == [5, 6, 7, 8]
    ctx.truncate(2)
    assert ctx.tokens == [5, 6]
    ctx.truncate(10)  # past the end: nothing to drop
    assert ctx.tokens == [5, 6]
    ctx.decode([9, 10, 11], logits="none")
    assert ctx.reuse_prefix([5, 6, 9, 20, 21]) == 3 and ctx.tokens == [5, 6, 9]
    assert ctx.reuse_prefix([7]) == 0 and ctx.tokens == []


def test_a_full_context_refuses_the_decode_and_keeps_its_tokens(model):
    ctx = FakeContext(model, n_ctx=8)
    ctx.decode(list(range(5, 11)), logits="none")
    with pytest.raises(LlamaError, match=r"context full: 6 \+ 3 tokens > --ctx 8"):
        ctx.decode([5, 6, 7])
    assert len(ctx.tokens) == 6


def test_logits_depend_only_on_the_context(model):
    # The same tokens give the same rows bit for bit, in one batch or one at a time, before and after a
    # rollback; llama.cpp only promises this on F16 weights.
    tokens = model.tokenize(TEXT)
    batched = FakeContext(model, n_ctx=256)
    batched.decode(tokens, logits="all")
    rows = np.stack([batched.logits(i) for i in range(len(tokens))])  # [n, V]
    single = FakeContext(model, n_ctx=256)
    for i, t in enumerate(tokens):
        single.decode([t], logits="last")
        np.testing.assert_array_equal(single.logits(-1), rows[i])
        np.testing.assert_array_equal(model.logits_at(tokens[: i + 1]), rows[i])
    single.truncate(3)
    single.decode(tokens[3:6], logits="all")
    np.testing.assert_array_equal(single.logits(2), rows[5])
    assert len({greedy_token(r) for r in rows}) > 5  # rows differ from context to context


def test_logits_rows_are_views_of_the_last_decode_only(model):
    ctx = FakeContext(model)
    ctx.decode([BOS, 10, 11, 12], logits="all")
    row = ctx.logits(0)
    assert row.shape == (V,) and row.dtype == np.float32 and not row.flags.owndata
    kept = row.copy()
    ctx.decode([13], logits="last")  # the next decode overwrites the buffer, as llama.cpp's does
    assert not np.array_equal(row, kept)
    with pytest.raises(IndexError):
        ctx.logits(1)  # only one row was computed
    ctx.decode([14], logits="none")
    with pytest.raises(IndexError):
        ctx.logits(-1)


def test_a_draft_is_correlated_with_its_target_but_not_equal():
    target, draft, same = FakeModel(), FakeModel(noise=0.5), FakeModel(noise=0.0)
    rng = np.random.default_rng(0)
    contexts = [[BOS, *rng.integers(3, V, size=4).tolist()] for _ in range(300)]
    agree = np.mean([greedy_token(target.logits_at(c)) == greedy_token(draft.logits_at(c)) for c in contexts])
    assert 0.4 < agree < 0.95  # often the same guess, sometimes not
    assert all(np.array_equal(target.logits_at(c), same.logits_at(c)) for c in contexts[:20])


def test_pieces_round_trip_and_control_tokens_print_nothing(model):
    ids = model.tokenize(TEXT, add_special=False)
    assert model.detokenize(ids) == TEXT and len(ids) < len(TEXT)  # some words are one token
    assert model.tokenize(TEXT)[0] == BOS and model.tokenize(TEXT)[1:] == ids
    stream = TextStream(model)
    assert "".join(stream.push(t) for t in [BOS, *ids, EOS]) + stream.flush() == TEXT
    assert model.tokenize("<|im_end|>", add_special=False, parse_special=True) == [EOS]
    assert len(model.tokenize("<|im_end|>", add_special=False)) > 1  # plain text unless parse_special
    with pytest.raises(ValueError, match="no token for 'é'"):
        model.tokenize("café")


def test_chat_template_and_tokenize_prompt(model):
    prompt = model.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert prompt == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    tokens = model.tokenize_prompt(prompt)
    assert tokens[:2] == [BOS, IM_START] and tokens.count(EOS) == 1 and tokens.count(BOS) == 1
    assert model.tokenize_prompt("<s>" + prompt).count(BOS) == 1  # BOS only once
    with pytest.raises(LlamaError, match="no chat template"):
        FakeModel(template=None).apply_chat_template([{"role": "user", "content": "Hi"}])


def test_reply_len_ends_a_reply_after_that_many_tokens():
    model = FakeModel(reply_len=5)
    prompt = [BOS, IM_START, 10, 11]
    ends = [greedy_token(model.logits_at(prompt + [20] * n)) == EOS for n in range(8)]
    assert ends == [False, False, False, True, True, True, True, True]  # 5 tokens after the control token
    assert not model.is_eog(IM_START) and model.is_eog(EOS)


def test_recording_context_logs_decodes_and_rollbacks(model):
    ctx = RecordingContext(model)
    ctx.decode([BOS, 10], logits="none")
    ctx.decode([11, 12, 13], logits="all")
    ctx.truncate(3)
    ctx.truncate(3)  # drops nothing: not logged
    assert ctx.calls == [("decode", 0, [BOS, 10], "none"), ("decode", 2, [11, 12, 13], "all"), ("truncate", 3)]


def test_fake_pair_wraps_both_contexts():
    pair = fake_pair(n_ctx=128)
    assert pair.target_ctx.n_ctx == pair.draft_ctx.n_ctx == 128
    assert pair.target_model is pair.target_ctx.model and pair.draft_model.noise > 0
    assert pair.chats_by_default() and pair.drafter_kind(GenerationConfig()) == "hybrid"
    pair.close()
    assert pair.target_ctx.closed and pair.draft_ctx.closed
