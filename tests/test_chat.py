"""Conversations: cache reuse across turns, a full context, stopping an answer, and `localspec chat`
driven as a user drives it (in-process through a pipe, and once as a real program in a pseudo-terminal).

The sessions run on fakes (tests/fakes.py), whose logits depend only on the tokens; with real models
turn-over-turn equality is checked on F16 targets: llama.cpp's batched and single-token logits agree
there (see the README), so an answer computed over a reused cache equals one computed from scratch.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from fakes import CHATML, FakeModel, fake_pair

from localspec.chat import Chat
from localspec.cli import cli
from localspec.sampling import SamplingParams
from localspec.session import LoadOptions, Pair, Reply
from localspec.config import GenerationConfig, GenerationError
from localspec.speculative import Piece

GREEDY = GenerationConfig(max_tokens=64, gamma=4, sampling=SamplingParams(temperature=0), drafter="model")
GREEN = "\x1b[32m"
QUESTION_A = [{"role": "user", "content": "What is the capital of France?"}]
QUESTION_B = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def smol_pair(smol_f16, smol_q4_0):
    pair = Pair(smol_f16, smol_q4_0, LoadOptions(n_ctx=1024, threads=1))
    yield pair
    pair.close()


def run(items) -> tuple[str, Reply]:
    """Drain a send()/stream() iterator: the text of its pieces and its Reply."""
    parts, reply = [], None
    for item in items:
        if isinstance(item, Piece):
            parts.append(item.text)
        else:
            reply = item
    return "".join(parts), reply


class DecodeLog:
    """Records the size of every decode a context makes (the first one of a turn is the prompt)."""

    def __init__(self, ctx):
        self.ctx, self.calls = ctx, []
        decode = ctx.decode

        def logged(tokens, logits="last", sampled=False):
            self.calls.append((len(tokens), logits))
            return decode(tokens, logits, sampled)

        ctx.decode = logged

    def stop(self) -> None:
        del self.ctx.decode  # back to the class's method


def check_second_turn_reuse(pair: Pair, config: GenerationConfig, questions: tuple[str, str]):
    """Turn 2 evaluates only its new tokens in both caches, and answers as a fresh session would."""
    pair.target_ctx.truncate(0)
    pair.draft_ctx.truncate(0)
    chat = Chat(pair, config, system="You are a helpful assistant. Answer in one short sentence.")
    prompt1 = chat.prompt([{"role": "user", "content": questions[0]}])
    _, first = run(chat.send(questions[0]))
    assert first.finish_reason == "stop", "turn 1 should end by itself so that all of it is cached"
    assert first.reused_target == 0 and first.evaluated == len(prompt1)

    prompt2 = chat.prompt(chat.messages + [{"role": "user", "content": questions[1]}])
    turn1 = len(prompt1) + first.stats.generated  # the prompt and the answer, now in the caches
    target_log, draft_log = DecodeLog(pair.target_ctx), DecodeLog(pair.draft_ctx)
    try:
        answer, second = run(chat.send(questions[1]))
    finally:
        target_log.stop()
        draft_log.stop()

    # Everything of turn 1 is reused; the target evaluates the rest of the prompt: its prefill decode,
    # then the prompt's last token in the first verify batch.
    new_tokens = len(prompt2) - second.reused_target
    assert second.reused_target >= turn1
    assert new_tokens == second.evaluated and new_tokens <= len(prompt2) - turn1
    assert target_log.calls[0] == (new_tokens - 1, "none")
    # The draft cache too: it holds turn 1 up to its last guesses, and decodes only what follows.
    assert second.reused_draft >= turn1 - (config.gamma + 1)
    assert draft_log.calls[0] == (len(prompt2) - 1 - second.reused_draft, "none")

    # A fresh session given the whole history, cold caches: the same answer.
    pair.target_ctx.truncate(0)
    pair.draft_ctx.truncate(0)
    fresh = Chat(pair, config, system=chat.system, messages=chat.messages[:2])
    fresh_answer, fresh_reply = run(fresh.send(questions[1]))
    assert fresh_reply.reused_target == 0 and fresh_reply.evaluated == len(prompt2)
    assert answer == fresh_answer and answer.strip()
    return first, second


@pytest.fixture
def pair():
    """A fake pair whose replies end by themselves: 20 tokens after the role line."""
    return fake_pair(n_ctx=1024, reply_len=22)


def test_second_turn_reuses_both_caches(pair):
    _, second = check_second_turn_reuse(pair, GREEDY, ("What is the capital of France?", "And of Italy?"))
    assert second.stats.generated == 20 and second.stats.accepted > 0


@pytest.mark.slow
def test_second_turn_reuses_both_caches_smollm2(smol_pair):
    check_second_turn_reuse(smol_pair, GREEDY, ("What is the capital of France?", "And of Italy?"))


@pytest.mark.slow
@pytest.mark.realpair
def test_second_turn_reuses_both_caches_f16_target(real_pair):
    pair = Pair(real_pair["target_f16"], real_pair["draft"], LoadOptions(n_ctx=1024, threads=2))
    try:
        config = GenerationConfig(max_tokens=96, gamma=4, sampling=SamplingParams(temperature=0), drafter="model")
        questions = ("Write a Python one-liner that reverses a string s.", "Now one that counts the vowels in s.")
        _, second = check_second_turn_reuse(pair, config, questions)
        assert second.stats.accepted > 0
    finally:
        pair.close()


def test_full_context_ends_with_length_and_keeps_the_conversation():
    pair = fake_pair(n_ctx=128)  # replies never end
    chat = Chat(pair, GenerationConfig(max_tokens=1000, gamma=4, sampling=SamplingParams(temperature=0)))
    text, reply = run(chat.send("Count from 1 to 500, separated by commas."))
    assert reply.finish_reason == "length" and reply.context_full and reply.n_ctx == 128
    assert reply.stats.prompt_tokens + reply.stats.generated == 129 and text  # the last token is never evaluated
    assert len(chat.messages) == 2 and chat.messages[1]["content"] == text
    # worded for a library caller: its Chat's methods and the Pair's LoadOptions, not chat's /save nor --ctx
    with pytest.raises(GenerationError, match=r"context holds 128; nothing was dropped: save it "
                       r"\(Chat\.save\(path\)\), then Chat\.reset\(\), or raise n_ctx in the Pair's LoadOptions$"):
        run(chat.send("Go on."))
    assert len(chat.messages) == 2  # the refused turn changed nothing
    chat.reset()
    _, again = run(chat.send("Hi"))
    assert again.finish_reason == "length" and again.reused_target > 0


def test_stop_ends_the_answer_within_a_step_and_the_next_turn_works(pair):
    chat = Chat(pair, GenerationConfig(max_tokens=200, gamma=4, sampling=SamplingParams(temperature=0),
                                            drafter="model"))
    parts, reply = [], None
    for item in chat.send("Count from 1 to 100, separated by commas."):
        if isinstance(item, Piece):
            parts.append(item.text)
            chat.stop()  # as Ctrl-C does, from the signal handler
        else:
            reply = item
    assert reply.finish_reason == "cancelled" and reply.stats.finish_reason == "cancelled"
    assert 1 <= reply.stats.generated <= 4 + 1  # the step in flight: at most gamma drafts and one more
    assert chat.messages[-1] == {"role": "assistant", "content": "".join(parts)}
    text, nxt = run(chat.send("Thanks. What is 2 + 2?"))
    assert nxt.finish_reason == "stop" and text.strip()
    assert nxt.reused_target > 0


def test_closing_the_iterator_keeps_what_was_said(pair):
    chat = Chat(pair, GREEDY)
    items = chat.send("Say hello.")
    first = next(items)
    items.close()
    assert chat.messages == [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": first.text}]


def test_send_takes_a_message_list_and_save_writes_json(pair, tmp_path):
    chat = Chat(pair, GREEDY, system="Be brief.")
    text, reply = run(chat.send([{"role": "user", "content": "Name a colour."}]))
    path = chat.save(tmp_path / "chat.json")
    data = json.loads(path.read_text())
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant"]
    assert data["messages"][2]["content"] == text and data["turns"][0]["generated_tokens"] == reply.stats.generated
    assert data["target"] == "fake-instruct.gguf" and data["draft"] == "fake-draft.gguf"
    with pytest.raises(GenerationError, match="message 0"):
        run(chat.send([{"role": "wizard", "content": "x"}]))


# --- the chat program -----------------------------------------------------------------------------
def chat_args(smol_f16, smol_q4_0, *extra):
    return [sys.executable, "-m", "localspec", "chat", "--target", str(smol_f16), "--draft", str(smol_q4_0),
            "--ctx", "1024", "--threads", "1", "--temperature", "0", "--gamma", "4", "--drafter", "model", *extra]


def chat_env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "LOCALSPEC_TARGET", "LOCALSPEC_DRAFT")}
    return {**env, "LOCALSPEC_MODELS": str(tmp_path / "models"), "HF_HUB_OFFLINE": "1", **extra}


@pytest.mark.slow
def test_chat_in_a_terminal(smol_f16, smol_q4_0, tmp_path):
    pexpect = pytest.importorskip("pexpect")
    args = chat_args(smol_f16, smol_q4_0, "-n", "300")
    child = pexpect.spawn(args[0], args[1:], env=chat_env(tmp_path, TERM="xterm-256color"), encoding="utf-8",
                          timeout=120, dimensions=(40, 200))
    try:
        child.expect_exact("> ")
        child.sendline("What is the capital of France?")
        child.expect_exact("What is the capital of France?")  # the terminal's echo
        child.expect_exact("> ")
        answer = child.before
        assert "Paris" in answer
        assert GREEN in answer  # accepted draft tokens are green on a colour terminal

        child.sendline("/stats")
        child.expect_exact("> ")
        assert "alpha" in child.before and "reused" in child.before

        child.sendline("/reset")
        child.expect_exact("conversation cleared")
        child.expect_exact("> ")

        # Ctrl-C stops an answer (a long one: SmolLM2 lists on and on), not the program.
        child.sendline("List the numbers from 1 to 100.")
        child.expect_exact("from 1 to 100.")
        child.expect(r"\d(\x1b\[\d*m)*,(\x1b\[\d*m)* (\x1b\[\d*m)*\d")  # "1, 2", coloured or not
        child.sendintr()
        child.expect_exact("[stopped]")
        child.expect_exact("> ")
        child.sendline("/stats")
        child.expect_exact("> ")
        assert "finish: cancelled" in child.before

        child.sendline("/exit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def chat_in_process(files, script: str, *extra):
    """`localspec chat` on fakes, its input piped in: (exit code, stdout, stderr)."""
    args = ["chat", "--target", str(files.target), "--draft", str(files.draft), "--temperature", "0",
            "--gamma", "4", "--drafter", "model", *extra]
    result = CliRunner().invoke(cli, args, input=script)
    return result.exit_code, result.stdout, result.stderr


def test_chat_through_a_pipe_has_no_colour_codes(fake_cli, tmp_path):
    fake_cli.reply_len = 12
    saved = tmp_path / "talk.json"
    script = f"What is the capital of France?\n/stats\n/save {saved}\n/reset\n/stats\n/bogus\nHello\n"
    code, out, err = chat_in_process(fake_cli, script, "-n", "48", "--show-drafts")
    assert code == 0, err  # end of input (no /exit) leaves cleanly
    assert "\x1b[" not in out + err
    assert "alpha" in out and "conversation cleared" in out and "conversation: 0 messages" in out
    assert "unknown command /bogus" in out and "Traceback" not in err
    data = json.loads(saved.read_text())
    messages, turn = data["messages"], data["turns"][0]
    assert [m["role"] for m in messages] == ["user", "assistant"] and messages[1]["content"]
    assert turn["generated_tokens"] == 10 and turn["finish_reason"] == "stop"  # the reply ended by itself
    assert out.startswith(messages[1]["content"] + "\n")  # the answer streamed to stdout
    assert fake_cli.loaded[0].target_ctx.closed  # the pair is closed on the way out


def test_chat_at_gamma_0_loads_no_draft_as_generate_does(fake_cli):
    # was: the draft loaded and never used, named in the banner and in --stats as running on the CPU
    # beside "drafter: none (target only)"
    fake_cli.reply_len = 6
    code, out, err = chat_in_process(fake_cli, "Hi\n", "-n", "4", "--gamma", "0", "--drafter", "auto", "--stats")
    assert code == 0, err
    assert fake_cli.loaded[-1].draft_path is None and "fake-instruct.gguf + no draft." in err
    assert "drafter: none (target only)" in err and err.rstrip().endswith("runs on: target CPU")


def test_chat_tells_when_the_context_is_full_and_goes_on(fake_cli):
    # Without -n an answer may fill the context; replies of the fake never end.
    code, out, err = chat_in_process(fake_cli, "Count from 1 to 500, separated by commas.\nGo on.\n/stats\n/exit\n",
                                     "--ctx", "128")
    assert code == 0, err
    assert "[context full" in err and "context holds 128; nothing was dropped: save it (/save FILE), then /reset, " \
                                      "or restart with a larger --ctx" in err
    assert "conversation: 2 messages" in out and "Traceback" not in err


def load_with_template(fake_cli, monkeypatch, template: str | None) -> None:
    """Make the CLI's fake Pairs load with this chat template (None: the target has none)."""
    load = fake_cli.load

    def with_template(*args):
        pair = load(*args)
        pair.target_model.template = template
        return pair

    monkeypatch.setattr("localspec.cli.Pair", with_template)


def test_chat_without_a_template_is_a_one_line_error(fake_cli, monkeypatch):
    load_with_template(fake_cli, monkeypatch, None)
    code, out, err = chat_in_process(fake_cli, "Hi\n")
    assert code == 1 and "no chat template" in err and "Traceback" not in err


# A target without a chat template, and one whose template refuses a conversation (in words with braces,
# which a template of names must keep as they are): (template, the error up to its fix, the fix's tail).
TEMPLATE_ERRORS = [(None, "fake-instruct.gguf has no chat template", " to send the prompt as is"),
                   ("{{ raise_exception('roles must alternate {user, assistant}') }}",
                    "the chat template of fake-instruct.gguf failed (roles must alternate {user, assistant})", "")]


@pytest.mark.parametrize("template, error, tail", TEMPLATE_ERRORS)
def test_a_chat_template_error_names_the_librarys_raw_prompt_and_the_clis_raw_flag(template, error, tail):
    # a Python caller was told to "use --raw", a flag it does not have: it sends text as is with chat=False
    from localspec.cli.errors import said

    pair = fake_pair(draft=False)
    pair.target_model.template = template
    with pytest.raises(GenerationError) as e:
        pair.prompt_tokens("Hi", chat=True)
    assert str(e.value) == f"{error}; use Pair.prompt_tokens(text, chat=False){tail}"
    assert said(e.value) == f"{error}; use --raw{tail}"


@pytest.mark.parametrize("template, error, tail", [(CHATML, None, None), *TEMPLATE_ERRORS])
def test_a_conversation_reads_the_chat_template_once(monkeypatch, template, error, tail):
    # chat_tokens read the template to refuse a target without one, then apply_chat_template read it again;
    # apply_chat_template's reading alone decides now, with the same messages
    pair = fake_pair(draft=False)
    pair.target_model.template = template
    reads = []
    monkeypatch.setattr(FakeModel, "chat_template", lambda self: reads.append(self.template) or self.template)
    if error is None:
        assert pair.chat_tokens([{"role": "user", "content": "Hi"}])
    else:
        with pytest.raises(GenerationError) as e:
            pair.chat_tokens([{"role": "user", "content": "Hi"}])
        assert str(e.value) == f"{error}; use Pair.prompt_tokens(text, chat=False){tail}"
    assert reads == [template]


@pytest.mark.parametrize("template, error, tail", TEMPLATE_ERRORS)
def test_generate_says_a_chat_template_error_with_its_raw_flag(fake_cli, monkeypatch, template, error, tail):
    from clitools import assert_one_line_error

    load_with_template(fake_cli, monkeypatch, template)
    result = CliRunner().invoke(cli, ["generate", "Hi", "--target", str(fake_cli.target), "--draft", "none",
                                      "--chat", "-n", "4"])
    assert_one_line_error(result, f"Error: {error}; use --raw{tail}")


@pytest.mark.parametrize("template, error, tail", TEMPLATE_ERRORS)
def test_chat_says_a_chat_template_error_with_what_chat_offers(fake_cli, monkeypatch, template, error, tail):
    # was "use --raw", a flag chat does not have: a prompt sent as is is generate's
    from clitools import assert_one_line_error

    load_with_template(fake_cli, monkeypatch, template)
    result = CliRunner().invoke(cli, ["chat", "--target", str(fake_cli.target), "--draft", "none"], input="Hi\n")
    assert_one_line_error(result, f"Error: {error}; use `localspec generate --raw`{tail}")


def test_a_chat_turn_the_template_refuses_is_said_with_what_chat_offers(fake_cli, monkeypatch):
    # the chat goes on after a turn its template refuses (here a third message), said in chat's words
    load_with_template(fake_cli, monkeypatch, "{% if messages|length > 2 %}{{ raise_exception('too long') }}"
                                              "{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}")
    fake_cli.reply_len = 4
    code, out, err = chat_in_process(fake_cli, "Hi\nAgain\n/exit\n", "--draft", "none", "--drafter", "ngram")
    assert code == 0, err
    assert ("Error: the chat template of fake-instruct.gguf failed (too long); use `localspec generate --raw`"
            in err.splitlines())


def test_a_save_that_fails_midway_leaves_the_saved_file_as_it_was(pair, tmp_path, monkeypatch):
    # Written in place, a full disk left the earlier conversation as 4 KiB of cut-off JSON.
    chat = Chat(pair, GREEDY)
    path = tmp_path / "saved" / "talk.json"
    path.parent.mkdir()
    path.write_text('{"messages": []}\n')

    def half_then_full(self, data, *args, **kwargs):
        with open(self, "wb") as f:
            f.write((data.encode() if isinstance(data, str) else data)[:5])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_full)
    monkeypatch.setattr(Path, "write_bytes", half_then_full)
    run(chat.send([{"role": "user", "content": "Name a colour."}]))
    with pytest.raises(OSError, match="No space"):
        chat.save(path)
    assert path.read_text() == '{"messages": []}\n' and [p.name for p in path.parent.iterdir()] == ["talk.json"]


def test_load_resumes_the_saved_conversation_without_the_current_system_prompt(pair, tmp_path):
    saved = Chat(pair, GREEDY)
    run(saved.send([{"role": "user", "content": "Name a colour."}]))
    path = saved.save(tmp_path / "plain.json")
    chat = Chat(pair, GREEDY, system="Answer in French.")
    chat.load(path)
    assert chat.system is None
    assert [m["role"] for m in json.loads(chat.save(tmp_path / "again.json").read_text())["messages"]] == [
        "user", "assistant"]


def test_a_raw_prompts_special_tokens_are_parsed_and_bos_is_added_once(pair):
    # `generate --raw` and /v1/completions split '<|im_start|>' written in a prompt into plain text,
    # where llama-cli and llama-server parse it as the marker.
    from fakes import BOS, IM_START

    tokens = pair.prompt_tokens("<|im_start|>user\nHi", chat=False)
    assert tokens[:2] == [BOS, IM_START] and tokens.count(IM_START) == 1
    assert pair.prompt_tokens("<s><|im_start|>Hi", chat=False).count(BOS) == 1


def text_of(pair, prompt, config=GREEDY) -> str:
    return [x for x in pair.stream(prompt, config)][-1].text


def test_a_stream_resumed_after_a_later_generation_raises_instead_of_mixing_their_caches(pair):
    # It carried on over the later prompt's cache and returned both prompts' text mixed, without an error.
    first, second = pair.chat_tokens(QUESTION_A), pair.chat_tokens(QUESTION_B)
    alone = text_of(pair, first)
    paused = pair.stream(first, GREEDY)
    next(paused), next(paused)
    later = text_of(pair, second)
    with pytest.raises(GenerationError, match="a later generation on this Pair"):
        list(paused)
    assert text_of(pair, second) == later and text_of(pair, first) == alone  # the caches are consistent


def test_generations_from_two_threads_each_finish_whole_or_raise(pair):
    # From two threads, one returned the other's text and a later round aborted the process in ggml.
    prompts = {"a": pair.chat_tokens(QUESTION_A), "b": pair.chat_tokens(QUESTION_B)}
    expected = {k: text_of(pair, p) for k, p in prompts.items()}
    got, errors = [], []

    def run(name):
        for _ in range(20):
            try:
                got.append((name, text_of(pair, prompts[name])))
            except GenerationError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=run, args=(k,)) for k in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got and all(text == expected[name] for name, text in got)
    assert all("a later generation on this Pair" in e for e in errors) and len(got) + len(errors) == 40


def test_a_closed_pair_says_so_instead_of_handing_llama_cpp_freed_memory():
    with fake_pair(n_ctx=256) as pair:
        assert "fake-instruct" in repr(pair) and "closed" not in repr(pair)
    assert "closed" in repr(pair)
    pair.close()  # a second close does nothing
    for use in (lambda: pair.prompt_tokens("hi", chat=True), lambda: list(pair.stream([1, 2, 3], GREEDY))):
        with pytest.raises(GenerationError, match="this Pair is closed; make a new Pair"):
            use()


def test_a_prompt_token_the_vocabulary_lacks_is_named(pair):
    # llama.cpp's decode only failed ('code -1 at position 0; lower --ctx or --ngl')
    for bad in ([10**9], [-1], [1.5], ["hello"]):
        with pytest.raises(GenerationError, match=r"prompt\[0\] = .* is not a token id of the target's vocabulary"):
            list(pair.stream(bad, GREEDY))


def test_a_long_prompt_is_checked_without_a_python_test_per_token(pair, monkeypatch):
    # check_prompt called is_whole on each token: 6.6 ms on a 32k-token prompt, under the Pair's lock
    import numpy as np
    from localspec import session

    calls = []
    monkeypatch.setattr(session, "is_whole", lambda t: calls.append(t) or type(t) is int)
    n_vocab = pair.target_model.n_vocab
    assert session.token_ids([1, np.int64(2), np.int32(n_vocab - 1)] * 1000, n_vocab)
    assert not session.token_ids([1, True], n_vocab) and not session.token_ids([0, n_vocab], n_vocab)
    assert session.token_ids([], n_vocab) and not session.token_ids(np.array([0.5]), n_vocab)
    list(pair.stream([1, 2, 3] * 20, GREEDY))
    assert calls == []
    with pytest.raises(GenerationError, match=r"prompt\[2\] = True is not a token id"):  # the first bad one named
        list(pair.stream([1, 2, True, -1], GREEDY))


def test_a_turn_sent_while_another_streams_stands(pair):
    # The earlier, unfinished turn overwrote the later one's messages when it ended.
    chat = Chat(pair, GREEDY)
    early = chat.send("one")
    next(early)
    text, _ = run(chat.send("two"))
    with pytest.raises(GenerationError, match="a later generation"):
        list(early)
    early.close()
    assert chat.messages == [{"role": "user", "content": "two"}, {"role": "assistant", "content": text}]
    with pytest.raises(GenerationError, match=r"send\(\) takes the user's text"):
        run(chat.send(None))


def test_pieces_count_every_token_they_cover(pair):
    # A token whose text is held back (the possible start of a stop string, part of a UTF-8
    # character) releases none: counting a token a piece, the web chat's live counters said 5 tokens
    # from the draft where 16 were generated and 9 drafts accepted.
    prompt = pair.chat_tokens(QUESTION_A)
    text = text_of(pair, prompt)
    held = text[-3:] + "\x7f"  # wherever the reply's last three characters come, held until the \x7f fails
    config = dataclasses.replace(GREEDY, stop=(held,), p_min=0.0)  # always 4 drafted: both runs alike
    items = list(pair.stream(prompt, config))
    pieces, reply = items[:-1], items[-1]
    assert len(pieces) < reply.stats.generated  # some pieces do cover several tokens
    assert sum(p.n_tokens for p in pieces) == reply.stats.generated
    per_token = list(pair.stream(prompt, dataclasses.replace(config, logprobs=0)))[:-1]  # a piece a token
    assert sum(p.drafted for p in pieces) == sum(p.from_draft for p in per_token if p.token >= 0) > 0
    assert "".join(p.text for p in pieces) == reply.text
