"""Tree verification in the bindings layer: one decode over llama.cpp's multi-sequence KV cache, on
SmolLM2-135M in F16 (batched and one-token logits agree, so rows are comparable across batches)."""

from __future__ import annotations

import numpy as np
import pytest

from localspec.context import Context, _branch_seqs
from localspec.llama import LlamaError, Model

from conftest import GPU_LAYERS

# Rows computed in batches of different shapes differ by float rounding (a few hundredths); a cell seen
# that should not be (another branch's node) moves logits by whole units.
ATOL = 0.1
PROMPT = "The capital of France is Paris. The capital of Italy is"
# Root children 0 and 1; nodes 2 and 3 under 0; node 4 under 2; node 5 under 1. The leaves 3, 4, 5
# are the branches (sequences) 0, 1, 2.
PARENTS = [-1, -1, 0, 0, 2, 1]


@pytest.fixture(scope="module")
def model(smol_f16):
    return Model(smol_f16, n_gpu_layers=GPU_LAYERS)


@pytest.fixture(scope="module")
def prompt(model):
    return model.tokenize(PROMPT)


def tree_tokens(model) -> list[int]:
    return [model.tokenize(w, add_special=False)[0] for w in (" Rome", " Milan", " and", ".", " the", ",")]


def branch(parents, leaf) -> list[int]:
    path = []
    while leaf >= 0:
        path.append(leaf)
        leaf = parents[leaf]
    return path[::-1]


def chain_logits(model, prefix, tokens) -> np.ndarray:
    """The logits of every token of a chain decoded after prefix in a fresh context ([n, V])."""
    ctx = Context(model, n_ctx=256, n_threads=1)
    ctx.decode(prefix, logits="none")
    ctx.decode(tokens, logits="all")
    out = np.array([ctx.logits(i) for i in range(len(tokens))])
    ctx.close()
    return out


def test_branch_sequences():
    assert _branch_seqs(PARENTS) == [[0, 1], [2], [1], [0], [1], [2]]
    assert _branch_seqs([]) == []


def test_tree_rows_equal_each_branch_decoded_as_a_chain(model, prompt):
    ctx = Context(model, n_ctx=256, n_threads=1, n_seq_max=4)
    tokens = tree_tokens(model)
    ctx.decode(prompt[:-1], logits="none")
    ctx.decode_tree(prompt[-1], tokens, PARENTS)
    tree_rows = np.array([ctx.logits(i) for i in range(len(tokens) + 1)])  # [7, V]
    for leaf in (4, 3, 5):
        nodes = branch(PARENTS, leaf)
        chain = chain_logits(model, prompt[:-1], [prompt[-1], *(tokens[i] for i in nodes)])
        np.testing.assert_allclose(tree_rows[[0, *(i + 1 for i in nodes)]], chain, atol=ATOL, rtol=0)
        assert [int(np.argmax(r)) for r in tree_rows[[0, *(i + 1 for i in nodes)]]] == \
            [int(np.argmax(r)) for r in chain]


@pytest.mark.parametrize("path", [[1, 5], [0, 2], [0, 3], []], ids=["other-branch", "first", "short", "none"])
def test_after_keep_path_decoding_continues_like_a_chain(model, prompt, path):
    # Keep a path (sequence 0's own or another branch's), then decode three more tokens: the cache must
    # hold exactly the prompt and the path, as if they had been decoded as one chain.
    ctx = Context(model, n_ctx=256, n_threads=1, n_seq_max=4)
    tokens = tree_tokens(model)
    ctx.decode(prompt[:-1], logits="none")
    ctx.decode_tree(prompt[-1], tokens, PARENTS)
    ctx.keep_path(path)
    kept = [*prompt, *(tokens[i] for i in path)]
    assert ctx.tokens == kept
    more = model.tokenize(" a city", add_special=False) + [tokens[0]]
    ctx.decode(more, logits="all")
    got = np.array([ctx.logits(i) for i in range(len(more))])
    np.testing.assert_allclose(got, chain_logits(model, kept, more), atol=ATOL, rtol=0)
    ctx.truncate(len(kept))  # and a chain rollback still works after a tree
    ctx.decode(more[:1], logits="last")
    np.testing.assert_allclose(ctx.logits(), got[0], atol=ATOL, rtol=0)


def test_a_second_tree_after_keep_path(model, prompt):
    ctx = Context(model, n_ctx=256, n_threads=1, n_seq_max=4)
    tokens = tree_tokens(model)
    ctx.decode(prompt[:-1], logits="none")
    ctx.decode_tree(prompt[-1], tokens, PARENTS)
    ctx.keep_path([1])
    ctx.decode_tree(tokens[5], tokens[:2], [-1, -1])  # after " Milan": pending ",", two guesses
    kept = [*prompt, tokens[1], tokens[5]]
    for i, guess in enumerate(tokens[:2]):
        np.testing.assert_allclose(ctx.logits(i + 1), chain_logits(model, kept, [guess])[0], atol=ATOL, rtol=0)


def test_too_many_branches_is_an_error(model, prompt):
    ctx = Context(model, n_ctx=256, n_threads=1, n_seq_max=2)
    ctx.decode(prompt[:-1], logits="none")
    with pytest.raises(LlamaError, match="n_seq_max >= 3"):
        ctx.decode_tree(prompt[-1], tree_tokens(model), PARENTS)
