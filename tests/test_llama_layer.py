"""The bindings layer on SmolLM2-135M: tokens, incremental text, logits views, rollback."""

from __future__ import annotations

import random

import llama_cpp as lc
import numpy as np
import pytest

from localspec import session
from localspec.context import Context
from localspec.llama import LlamaError
from localspec.llama import Model, TextStream, common_prefix_len


@pytest.fixture(scope="module")
def model(smol_path):
    return Model(smol_path)


@pytest.fixture(scope="module")
def ctx(model):
    return Context(model, n_ctx=256, n_threads=1)


def test_common_prefix_len_matches_a_plain_scan():
    def scan(a, b):
        n = min(len(a), len(b))
        return next((i for i in range(n) if a[i] != b[i]), n)

    rng = random.Random(0)
    for _ in range(5000):
        a = [rng.randint(0, 3) for _ in range(rng.randint(0, 40))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
        assert common_prefix_len(a, b) == scan(a, b) == common_prefix_len(tuple(b), a)


@pytest.mark.slow
def test_tokenize_follows_the_models_bos_rule(model):
    with_special = model.tokenize("Hello world", add_special=True)
    plain = model.tokenize("Hello world", add_special=False)
    assert with_special == ([model.bos()] + plain if model.adds_bos() else plain)
    assert model.detokenize(plain) == "Hello world"


@pytest.mark.slow
def test_a_raw_prompts_special_tokens_are_parsed_as_llama_cpp_parses_them(model):
    # Split as plain text, a raw prompt written in the model's chat markers answered '#1 #2'.
    start = model.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(start) == 1
    raw = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    tokens = model.tokenize_prompt(raw)
    assert tokens.count(start[0]) == 2 and len(tokens) < 12


@pytest.mark.slow
def test_multibyte_text_split_across_tokens_prints_once_complete(model):
    text = "naïve café — 日本語 🙂🚀 done"
    tokens = model.tokenize(text, add_special=False)
    # Byte-level BPE splits some of these characters over several tokens: their bytes alone are no text.
    assert any(_incomplete_utf8(model.piece(t)) for t in tokens)
    stream = TextStream(model)
    pieces = [stream.push(t) for t in tokens] + [stream.flush()]
    assert "".join(pieces) == text and "\ufffd" not in "".join(pieces)


def _incomplete_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


@pytest.mark.slow
def test_logits_rows_are_views_and_rollback_recomputes_the_same(model, ctx):
    prompt = model.tokenize("The capital of France is", add_special=True)
    ctx.truncate(0)
    ctx.decode(prompt[:-1], logits="none")
    ctx.decode([prompt[-1], 11, 12], logits="all")  # a verify-shaped batch of 3 rows
    rows = [ctx.logits(i) for i in range(3)]
    assert all(r.shape == (model.n_vocab,) and r.dtype == np.float32 and not r.flags.owndata for r in rows)
    first = [r.copy() for r in rows]
    assert not np.array_equal(first[0], first[1])  # distinct rows, not one buffer
    # Roll back the last two tokens and decode the same batch again: the cache holds exactly the prefix.
    ctx.truncate(len(prompt) - 1)
    assert ctx.tokens == prompt[:-1]
    ctx.decode([prompt[-1], 11, 12], logits="all")
    for i in range(3):
        np.testing.assert_array_equal(ctx.logits(i), first[i])


@pytest.mark.slow
def test_decode_only_the_rows_asked_for(model, ctx):
    ctx.truncate(0)
    ctx.decode(model.tokenize("one two three", add_special=True), logits="last")
    last = ctx.logits(-1).copy()
    with pytest.raises(IndexError):
        ctx.logits(1)  # only one output row was computed
    assert np.isfinite(last).all()


@pytest.mark.slow
def test_reuse_prefix_keeps_only_the_shared_tokens(model, ctx):
    a = model.tokenize("def add(a, b): return a + b", add_special=True)
    ctx.truncate(0)
    ctx.decode(a, logits="none")
    b = a[:4] + model.tokenize(" something else", add_special=False)
    assert ctx.reuse_prefix(b) == 4 and ctx.tokens == a[:4]


def count_decodes(monkeypatch) -> list[tuple[int, bool]]:
    """(width, whether its last row came sampled) of each Context.decode from now on, in order."""
    decodes, decode = [], Context.decode

    def counted(self, tokens, *a, **k):
        decode(self, tokens, *a, **k)
        decodes.append((len(tokens), lc.llama_get_sampled_token_ith(self.ptr, len(tokens) - 1) >= 0))

    monkeypatch.setattr(Context, "decode", counted)
    return decodes


@pytest.mark.slow
def test_warming_up_decodes_each_width_once_and_leaves_an_empty_cache_and_the_same_logits(model, monkeypatch):
    """The decodes that load a GPU's kernels for each verify width, and size llama.cpp's output buffer
    with the widest, leave nothing behind: no tokens, no cells, no chain; and what the context
    computes next is what a context that never warmed up computes."""
    from localspec.context import SAMPLED_ROWS_MAX, WARM_WIDTHS

    warmed, fresh = Context(model, n_ctx=256, n_threads=1), Context(model, n_ctx=256, n_threads=1)
    warmed.rows_offloaded = True  # (rows judged by the greedy chain, as a GPU's verifies are)
    assert lc.llama_get_sampled_token_ith(warmed.ptr, 23) < 0  # no decode yet: no row 23
    decodes = count_decodes(monkeypatch)
    warmed.warm_up((3, 1, 24, 2, 8, 16, 2))  # (the defaults, WARM_WIDTHS, decode 1,116 tokens: slow on a CPU)
    monkeypatch.undo()
    assert [w for w, _ in decodes] == [24, 16, 8, 3, 2, 1]  # each once, the widest first: one growth of the buffer
    assert all(judged for _, judged in decodes)  # every row made and judged by the greedy chain, as a GPU verify's
    # the defaults: one width per matrix-vector kernel (1-8), one per tile width (16-128 by 8)
    assert WARM_WIDTHS == tuple(range(1, 9)) + tuple(range(16, 129, 8)) and max(WARM_WIDTHS) == SAMPLED_ROWS_MAX
    assert warmed.tokens == [] and warmed.chain_key is None
    assert lc.llama_memory_seq_pos_max(warmed.memory, 0) == -1
    prompt = model.tokenize("The capital of France is", add_special=True)
    for c in (warmed, fresh):
        c.decode(prompt, logits="all")
    for i in range(len(prompt)):
        np.testing.assert_array_equal(warmed.logits(i), fresh.logits(i))


@pytest.mark.slow
def test_warming_up_keeps_within_the_batch_and_the_context(model, monkeypatch):
    # A context shorter than the widest warm width decodes no wider than it holds.
    small = Context(model, n_ctx=32, n_threads=1)
    decodes = count_decodes(monkeypatch)
    small.warm_up(logits="last")
    assert [w for w, _ in decodes] == [32, 24, 16, 8, 7, 6, 5, 4, 3, 2, 1] and small.tokens == []


@pytest.mark.slow
def test_a_pair_warms_up_each_model_only_where_it_runs_on_a_gpu(smol_path, monkeypatch):
    """On a GPU a model's first decode at each width loads kernels, and the target's page-locked
    output buffer is slow to grow: the Pair decodes each width once at load, the target's rows all
    out, the draft's last only (unless LoadOptions.warm_up is off: bench_rpc_costs --no-warm-up). On the
    CPU it decodes nothing at load."""
    from localspec import session
    from localspec.context import WARM_WIDTHS
    from localspec.placement import Placement

    for where, warm_up in (("CPU", True), ("CUDA0", True), ("CUDA0", False)):
        placed = Placement(None, where)
        monkeypatch.setattr(session, "place_pair", lambda *a, placed=placed: (placed, placed))
        warmed = []
        monkeypatch.setattr(Context, "warm_up", lambda self, widths=WARM_WIDTHS, logits="all":
                            warmed.append((self.model.path == smol_path, logits)))
        options = session.LoadOptions(n_ctx=256, threads=1, warm_start=False, warm_up=warm_up)
        pair = session.Pair(smol_path, smol_path, options)
        try:
            pair.draft_ctx.get()
            assert warmed == ([(True, "all"), (True, "last")] if where != "CPU" and warm_up else [])
            assert pair.target_ctx.tokens == []
        finally:
            pair.close()


def test_only_a_model_wholly_on_a_local_gpu_is_warmed_up():
    # Partly on the CPU the warm decodes (over a thousand tokens) would cost the CPU's prompt speed,
    # and an RPC server may be a CPU: rows_on_gpu, which the Pair asks, says no to both.
    from types import SimpleNamespace

    from localspec.placement import Placement

    gpu, rpc = SimpleNamespace(is_rpc=False), SimpleNamespace(is_rpc=True)
    assert session.rows_on_gpu(Placement(None, "CUDA0"), 999, 28)
    assert session.rows_on_gpu(Placement((gpu,), "CUDA0"), 29, 28)
    assert not session.rows_on_gpu(Placement(None, "CUDA0 (20 layers, the rest on the CPU)"), 20, 28)
    assert not session.rows_on_gpu(Placement(None, "CPU"), 999, 28)
    assert not session.rows_on_gpu(Placement((rpc,), "RPC0[127.0.0.1:50052]"), 999, 28)
    assert not session.rows_on_gpu(Placement((gpu, rpc), "CUDA0,RPC0[127.0.0.1:50052]"), 999, 28)


def test_amx_guard_follows_the_build_and_the_override(monkeypatch):
    # An AMX build must load weights without ggml's extra buffers (its AMX matmul segfaults here).
    import localspec.llama as layer

    info = b"CPU : AVX512 = 1 | AVX512_VNNI = 1 | AMX_INT8 = %d | REPACK = 1 | "
    monkeypatch.delenv("LOCALSPEC_ALLOW_AMX", raising=False)
    monkeypatch.setattr(layer.lc, "llama_print_system_info", lambda: info % 1)
    assert layer.amx_guard()
    monkeypatch.setenv("LOCALSPEC_ALLOW_AMX", "1")
    assert not layer.amx_guard()
    monkeypatch.setenv("LOCALSPEC_ALLOW_AMX", "0")  # any value set turned the guard off
    assert layer.amx_guard()
    monkeypatch.delenv("LOCALSPEC_ALLOW_AMX")
    monkeypatch.setattr(layer.lc, "llama_print_system_info", lambda: info % 0)
    assert not layer.amx_guard()


def test_an_interrupt_held_while_a_context_is_made_frees_it_without_a_traceback(monkeypatch):
    # Ctrl-C during llama.cpp's allocation is raised once it returns, before the batch exists: the
    # half-made context was freed by __del__, which read a batch never made and printed a traceback.
    import contextlib
    import gc
    import types

    import localspec.context as layer

    freed, unraisable = [], []

    @contextlib.contextmanager
    def interrupted():
        yield []
        raise KeyboardInterrupt

    monkeypatch.setattr(layer, "held_interrupts", interrupted)
    monkeypatch.setattr(layer.lc, "llama_init_from_model", lambda model, params: 12345)
    monkeypatch.setattr(layer.lc, "llama_free", freed.append)
    monkeypatch.setattr(layer.lc, "llama_batch_free", lambda batch: freed.append("batch"))
    monkeypatch.setattr("sys.unraisablehook", unraisable.append)
    with pytest.raises(KeyboardInterrupt):
        layer.Context(types.SimpleNamespace(ptr=1), n_ctx=64, n_threads=1)
    gc.collect()
    assert freed == [12345] and not unraisable


@pytest.mark.slow
def test_ctx_0_takes_the_models_own_length_for_both_models_and_a_negative_one_names_itself(smol_path, model):
    # llama.cpp's -c 0: the context the model was trained for; the draft's as long as the target's
    pair = session.Pair(smol_path, smol_path, session.LoadOptions(n_ctx=0, threads=1, warm_start=False))
    try:
        assert pair.target_ctx.n_ctx == model.n_ctx_train() > 256
        assert pair.draft_ctx.get().n_ctx == model.n_ctx_train()
    finally:
        pair.close()
    with pytest.raises(LlamaError) as e:  # the LoadOptions field to a library caller, the flag to the CLI
        Context(model, n_ctx=-5, n_threads=1)
    from localspec.cli.errors import said
    rule = "must be >= 0 (got -5); 0 takes the model's own context length"
    assert (str(e.value), said(e.value)) == (f"n_ctx {rule}", f"--ctx {rule}")


def test_one_rule_reads_threads_for_contexts_plan_keys_and_rpc_servers():
    from localspec.llama import default_threads, threads_of
    assert threads_of(-1) == threads_of(0) == threads_of(None) == default_threads() and threads_of(3) == 3


@pytest.mark.slow
def test_threads_minus_one_or_zero_take_the_default_as_in_llama_cpp(model):
    from localspec.llama import default_threads
    for asked, threads in ((-1, default_threads()), (0, default_threads()), (None, default_threads()), (1, 1)):
        ctx = Context(model, n_ctx=256, n_threads=asked)
        try:
            assert lc.llama_n_threads(ctx.ptr) == lc.llama_n_threads_batch(ctx.ptr) == threads
        finally:
            ctx.close()


@pytest.mark.slow
def test_a_model_loads_on_the_gpu_with_numpy_imported_first(smol_path):
    # On the lent H100 a CUDA build segfaulted at model load wherever numpy came before llama.cpp
    # (localspec/__init__.py says why). Runs where this build sees a GPU; CI's CPU skips it.
    import subprocess
    import sys

    from localspec.devices import local_devices

    if not any(d.type == "GPU" for d in local_devices()):
        pytest.skip("no GPU in this llama.cpp build or on this machine")
    code = ("import sys, numpy, localspec\nfrom localspec.llama import Model\n"
            "Model(sys.argv[1], n_gpu_layers=999)\nprint('loaded')")
    proc = subprocess.run([sys.executable, "-c", code, str(smol_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "loaded" in proc.stdout, proc.stderr[-2000:]


def test_a_context_whose_start_failed_closes_quietly():
    # Where llama.cpp refuses a context, __init__ raises LlamaError (a one-line error for the user);
    # __del__ then closes the half-made object, which printed "Exception ignored ... AttributeError:
    # 'Context' object has no attribute '_chain'" under that error.
    half = Context.__new__(Context)
    half.close()
    assert half.ptr is None and half._chain is None


@pytest.mark.slow
def test_rows_beyond_one_batch_are_refused_rather_than_read_from_the_last_chunk(model):
    # llama.cpp decodes a batch longer than n_batch in chunks, each overwriting the rows of the one
    # before: row i read back would be another token's. The layer refuses, naming both sizes.
    small = Context(model, n_ctx=256, n_threads=1, n_batch=8)
    tokens = model.tokenize("one two three four five six seven eight nine ten eleven")
    assert len(tokens) > 8
    with pytest.raises(LlamaError, match=rf"{len(tokens)} rows of logits in one decode, more than its batch of 8"):
        small.decode(tokens, logits="all")
    small.decode(tokens, logits="last")  # rows for the last token only: chunked, as a prefill is
    assert small.tokens == tokens and np.isfinite(small.logits(-1)).all()


@pytest.mark.slow
def test_a_context_too_small_for_its_sequences_or_too_many_threads_is_one_line(model):
    # llama.cpp aborts the process on either (an assertion, a segfault): the layer says what to give.
    with pytest.raises(LlamaError, match=r"n_ctx 3 is smaller than the 4 sequences .* give 4 or more"):
        Context(model, n_ctx=3, n_threads=1, n_seq_max=4)
    with pytest.raises(LlamaError, match=r"threads 100000 is more than llama.cpp's 512; give at most 512"):
        Context(model, n_ctx=64, n_threads=100000)
    assert Context(model, n_ctx=4, n_threads=1, n_seq_max=4).n_ctx == 4


SEQUENCES = "sequences a draft's token trees are verified in"


@pytest.mark.parametrize("kwargs, library, cli", [
    ({"n_ctx": -1}, "n_ctx must be >= 0 (got -1); 0 takes the model's own context length",
     "--ctx must be >= 0 (got -1); 0 takes the model's own context length"),
    ({"n_ctx": 3, "n_seq_max": 4}, f"n_ctx 3 is smaller than the 4 {SEQUENCES}; give 4 or more",
     f"--ctx 3 is smaller than the 4 {SEQUENCES}; give 4 or more"),  # was "; give --ctx 4 or more"
    ({"n_threads": 100000}, "threads 100000 is more than llama.cpp's 512; give at most 512, or 0 for the default",
     "--threads 100000 is more than llama.cpp's 512; give at most 512, or 0 for the default")])
def test_a_context_option_llama_cpp_cannot_take_is_named_as_loadoptions_and_as_the_cli_name_it(kwargs, library, cli):
    # A Python caller was told "--ctx must be >= 0", a flag it does not have: it sets the Pair's LoadOptions.
    # Checked before llama.cpp is reached: no model needed.
    from localspec.cli.errors import said

    with pytest.raises(LlamaError) as e:
        Context(None, **kwargs)
    assert (str(e.value), said(e.value)) == (library, cli)


def test_a_tensor_split_of_too_many_parts_is_named_as_loadoptions_and_as_the_cli_name_it():
    from localspec.cli.errors import said
    from localspec.llama import place

    n_max = lc.llama_max_devices()
    with pytest.raises(LlamaError) as e:
        place(lc.llama_model_default_params(), None, [1.0] * (n_max + 1))
    rule = f"has {n_max + 1} parts; this build takes at most {n_max}"
    assert (str(e.value), said(e.value)) == (f"tensor_split {rule}", f"--tensor-split {rule}")


@pytest.mark.parametrize("tree, failed, library, cli", [
    (False, "llama_decode failed with code 1 at position 7",
     "lower n_ctx, ngl_target or ngl_draft in the Pair's LoadOptions",
     "lower --ctx, --ngl-target or --ngl-draft"),  # was "lower --ctx or --ngl": the CLI has no --ngl
    (True, "llama_decode failed with code 1 on a tree at position 7", "lower n_ctx in the Pair's LoadOptions",
     "lower --ctx")])
def test_a_failed_decode_names_loadoptions_to_the_library_and_flags_to_the_cli(monkeypatch, tree, failed, library,
                                                                                cli):
    from fakes import failed_decode

    from localspec.cli.errors import said

    e = failed_decode(monkeypatch, tree)
    assert (str(e), said(e)) == (f"{failed}; {library}", f"{failed}; {cli}")


def test_an_interrupt_raised_inside_a_llama_callback_stops_the_command_once_the_call_returns():
    # llama.cpp logs through a Python callback while it loads; a Ctrl-C raised inside a ctypes
    # callback is printed and dropped, and generate, serve and convert ran on to the end (exit 0).
    import ctypes
    import os
    import signal

    from localspec.llama import held_interrupts

    callback = ctypes.CFUNCTYPE(None)(lambda: os.kill(os.getpid(), signal.SIGINT))
    went_on = []
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive process has it
    try:
        with pytest.raises(KeyboardInterrupt):
            with held_interrupts():
                callback()
                went_on.append(True)  # the call itself finishes ...
        assert went_on  # ... and the interrupt comes after it
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)  # a background run (CI's, nohup) ignores Ctrl-C


def test_a_model_load_interrupted_is_told_to_stop_and_raises(smol_path, monkeypatch):
    # The load's progress callback returns false once a Ctrl-C is held: llama.cpp stops loading.
    import os
    import signal

    import localspec.llama as llama

    answers = []

    def load(path, params):
        os.kill(os.getpid(), signal.SIGINT)
        answers.append(params.progress_callback(0.5, None))
        return None

    monkeypatch.setattr(llama.lc, "llama_model_load_from_file", load)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as an interactive process has it
    try:
        with pytest.raises(KeyboardInterrupt):
            Model(smol_path)
    finally:
        signal.signal(signal.SIGINT, before)
    assert answers == [False]


def test_sigterm_stops_a_command_as_ctrl_c_does(monkeypatch):
    # timeout, kill and docker send SIGTERM: a conversion then left its partial file behind, since only
    # KeyboardInterrupt ran its clean-up.
    import signal

    from localspec import cli

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr("sys.argv", ["localspec", "--version"])
    try:
        with pytest.raises(SystemExit):
            cli.main()
        with pytest.raises(KeyboardInterrupt):
            signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_ignored_interrupt_stays_ignored_through_a_llama_call():
    # nohup and background jobs ignore Ctrl-C; holding it would turn it on for the call
    import os
    import signal

    from localspec.llama import held_interrupts

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
