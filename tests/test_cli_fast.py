"""`localspec generate` in-process (click's CliRunner) on fakes: the flags, the output and the errors
as users see them, in milliseconds. tests/test_cli.py runs it once as a real process on SmolLM2."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import pytest

from clitools import assert_one_line_error, invoke

REPEATS = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"


@pytest.fixture
def args(fake_cli):
    return ["--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "--raw", "--ctx", "256"]


def generate_json(*args) -> dict:
    result = invoke("generate", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_generate_json_reports_text_and_stats(args, fake_cli):
    out = generate_json("def add(a, b):", *args, "--temperature", "0", "-n", "24", "--gamma", "4", "--drafter", "model")
    stats = out["stats"]
    assert out["text"] and stats["generated_tokens"] == 24 and stats["finish_reason"] == "length"
    assert out["target"] == str(fake_cli.target) and out["draft"] == str(fake_cli.draft)
    assert stats["drafted"] > 0 and 0 <= stats["alpha"] <= 1 and stats["gamma"] == 4
    assert stats["mean_accepted_length"] == pytest.approx(1 + stats["accepted"] / stats["steps"])
    t = stats["time_s"]
    assert set(t) == {"prefill", "draft_prefill", "draft", "verify", "controller", "decode", "total"}
    assert 0 < t["draft_prefill"] <= t["prefill"]  # a fixed γ: the draft model took in the prompt
    assert fake_cli.loaded[0].target_ctx.n_ctx == 256 and fake_cli.loaded[0].target_ctx.closed


@pytest.mark.parametrize("drafter", ["model", "ngram", "hybrid", "auto"])
def test_every_drafter_keeps_the_target_only_text(args, drafter):
    # At T=0 the speculative text equals the target-only text; a prompt that repeats itself gives the
    # n-gram lookup something to copy, and p-min 0 lets the draft model guess wherever it is asked.
    common = [REPEATS, *args, "--temperature", "0", "-n", "48"]
    spec = generate_json(*common, "--drafter", drafter, "--gamma", "4", "--p-min", "0")
    plain = generate_json(*common, "--target-only")
    assert plain["stats"]["drafted"] == 0 and plain["draft"] is None
    assert spec["text"] == plain["text"] and spec["stats"]["drafted"] > 0
    by = spec["stats"]["by_drafter"]
    assert set(by) == {"hybrid": {"ngram", "model"}, "auto": {"ngram", "model"}}.get(drafter, {drafter})
    assert all(v["drafted"] > 0 for v in by.values())


@pytest.mark.parametrize("flags, fragment", [(["--threads", "-2"], "-2 is not in the range x>=-1"),
                                             (["-ngl", "-5"], "-5 layers: give 0 or more, or -1"),
                                             (["-ngld", "x"], "'x' is not a whole number: give 0 or more, or -1")])
def test_negative_threads_and_layers_are_refused(args, flags, fragment):
    # they were accepted silently; -1 keeps llama.cpp's meaning (the default threads, every layer)
    assert_one_line_error(invoke("generate", "hi", *args, "-n", "2", *flags), fragment)


def test_llama_cpps_minus_one_for_threads_and_layers(args, fake_cli):
    generate_json("hi", *args, "-n", "2", "-t", "-1", "-ngld", "-1")
    options = fake_cli.loaded[0].options
    assert options.threads == -1 and options.ngl_draft == 999  # threads_of reads -1 as the default


def test_gamma_zero_loads_no_draft_model(args):
    # it loaded the draft (and took in the prompt with it) to draft nothing
    out = generate_json("def add(a, b):", *args, "--temperature", "0", "-n", "8", "--gamma", "0")
    assert out["draft"] is None and out["stats"]["time_s"]["draft_prefill"] == 0 and out["stats"]["drafted"] == 0


def test_ngram_drafter_without_a_draft_model(fake_cli):
    common = [REPEATS, "--target", str(fake_cli.target), "--draft", "none", "--raw",
              "--temperature", "0", "-n", "32"]
    spec = generate_json(*common, "--drafter", "ngram", "--gamma", "4")
    plain = generate_json(*common, "--target-only")
    assert spec["stats"]["drafter"] == "ngram" and spec["stats"]["drafted"] > 0
    assert spec["text"] == plain["text"] and spec["draft"] is None


def test_seeded_sampling_repeats(args):
    common = ["Once upon a time", *args, "--temperature", "1", "-n", "24", "--gamma", "3"]
    a, b, c = (generate_json(*common, "--seed", s)["text"] for s in ("7", "7", "8"))
    assert a == b != c


def test_generate_reads_stdin_and_prints_stats(args):
    result = invoke("generate", *args, "--temperature", "0", "-n", "8", "--stats", input="Once upon a time")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() and "alpha" in result.stderr and "tok/s" in result.stderr


def test_a_reader_that_stops_early_ends_it_quietly(args, monkeypatch):
    # `localspec generate ... | head -c 3` said "Error: [Errno 32] Broken pipe"
    from localspec.cli import cli

    read, write = os.pipe()
    os.close(read)  # head has read its 3 bytes and gone
    stdout, stderr = open(write, "w"), io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    monkeypatch.setattr(sys, "stderr", stderr)
    with pytest.raises(SystemExit) as exit:
        cli.main(["generate", "hi", *args, "-n", "8"], prog_name="localspec")
    with contextlib.suppress(BrokenPipeError):
        stdout.close()
    assert exit.value.code == 1 and stderr.getvalue() == ""


def test_the_prompt_from_dash_p_or_a_file_as_llama_cli_takes_it(args, tmp_path):
    common = [*args, "--temperature", "0", "-n", "8"]
    (tmp_path / "p.txt").write_text("Once upon a time", encoding="utf-8")
    texts = {generate_json(*common, *how)["text"] for how in (("Once upon a time",), ("-p", "Once upon a time"),
                                                              ("--prompt", "Once upon a time"), ("-f", tmp_path / "p.txt"))}
    assert len(texts) == 1 and texts != {""}


@pytest.mark.parametrize("line", ['prompt = "hello"', 'f = "/no/such/prompt.txt"'])
def test_the_prompt_typed_wins_over_a_config_files(args, tmp_path, monkeypatch, line):
    # was: "give the prompt once: PROMPT and -p (or -f) were both given"
    common = [*args, "--temperature", "0", "-n", "8"]
    typed = generate_json("Once upon a time", *common)["text"]
    (tmp_path / "p.txt").write_text("Once upon a time", encoding="utf-8")
    (tmp_path / "config.toml").write_text(f"[generate]\n{line}\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    assert generate_json("Once upon a time", *common)["text"] == typed
    assert generate_json("-f", tmp_path / "p.txt", *common)["text"] == typed
    assert generate_json("-p", "Once upon a time", *common)["text"] == typed


def test_a_config_file_that_gives_two_prompts_is_one_line(args, tmp_path, monkeypatch):
    (tmp_path / "config.toml").write_text('[generate]\nprompt = "hello"\nf = "p.txt"\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    assert_one_line_error(invoke("generate", *args), "give the prompt once: -p and -f were both given")


@pytest.mark.parametrize("how, stdin, fragments", [
    (("",), None, ["the prompt is empty"]),
    ((), "", ["the prompt is empty", "on stdin"]),
    (("-p", ""), None, ["the prompt is empty"]),
    (("hi", "-p", "there"), None, ["give the prompt once: PROMPT and -p"]),
    (("\udcff\udcfehello",), None, ["not UTF-8 text", "character 0", "give it as UTF-8"]),
    (("-f", "/no/such/prompt.txt"), None, ["cannot read the prompt file /no/such/prompt.txt"]),
])
def test_an_empty_double_or_undecodable_prompt_is_one_line(args, how, stdin, fragments):
    # outside --raw an empty prompt ran as an empty chat message; undecodable bytes were Python's own message
    chat = [a for a in args if a != "--raw"]
    assert_one_line_error(invoke("generate", *how, *chat, input=stdin), *fragments)


@pytest.mark.parametrize("flags, fragment", [
    (["--target-only", "--gamma", "4"], "--target-only decodes with the target alone; leave out --gamma"),
    (["--target-only", "--drafter", "model"], "leave out --drafter"),
    (["--system", "be brief"], "--system needs the chat template, which --raw turns off"),
])
def test_flags_that_exclude_each_other_are_one_line(args, flags, fragment):
    # they ran, one of them silently dropped (gamma 0 and no drafter; the system prompt)
    assert_one_line_error(invoke("generate", "hi", *args, *flags), fragment)


@pytest.mark.parametrize("name, value, fragment", [
    ("LOCALSPEC_WARM_START", "maybe", "LOCALSPEC_WARM_START=maybe: give 0 or 1"),
    ("LOCALSPEC_BACKEND_SAMPLING", "2", "LOCALSPEC_BACKEND_SAMPLING=2: give 0 or 1"),
    ("LOCALSPEC_ALLOW_AMX", "maybe", "LOCALSPEC_ALLOW_AMX=maybe: give 0 or 1"),  # was taken as 1, as was 0
    ("LOCALSPEC_RPC_TIMEOUT", "abc", "LOCALSPEC_RPC_TIMEOUT=abc: give the seconds"),
    ("LOCALSPEC_RPC_TIMEOUT", "-5", "a number > 0"),
])
def test_an_environment_switch_set_to_what_it_cannot_take_is_one_line(args, name, value, fragment):
    # read deep in the code as "not 0" or float(), a typo was silently taken as on, or a traceback later
    assert_one_line_error(invoke("generate", "hi", *args, env={name: value}), fragment)
    assert invoke("generate", "hi", *args, "-n", "2", env={name: "1"}).exit_code == 0
    result = invoke("generate", "hi", *args, "--json", env={name: value})  # with --json, a JSON error
    assert result.exit_code == 1 and fragment in json.loads(result.stdout)["error"]["message"]


def test_a_cors_origin_that_is_no_origin_is_one_line():
    # a missing model: were the origin taken, the command ends there instead of serving
    no_model = ("serve", "-m", "/no/such/model.gguf", "--draft", "none", "--cors-origin")
    assert_one_line_error(invoke(*no_model, "not a url"), "'not a url' is not an origin")
    assert_one_line_error(invoke(*no_model, "http://localhost:3000/app"), "no path")


def test_chat_template_and_system_prompt(fake_cli):
    # The fake calls itself instruct and has a template: chat formatting is the default, --raw turns it off.
    common = ["Hi", "--target", str(fake_cli.target), "--draft", "none", "--temperature", "0", "-n", "4"]
    chat = generate_json(*common, "--system", "Be brief.")
    raw = generate_json(*common, "--raw")
    assert raw["stats"]["prompt_tokens"] == 3  # BOS, "H", "i"
    # BOS, <|im_start|>system\nBe brief.<|im_end|>\n, <|im_start|>user\nHi<|im_end|>\n, <|im_start|>assistant\n
    assert chat["stats"]["prompt_tokens"] == 1 + 14 + 7 + 3


def test_any_model_with_a_chat_template_chats_by_default(fake_cli, tmp_path, monkeypatch):
    # gemma-3-1b-it, Qwen3-0.6B or an Ollama blob say neither "instruct" nor "chat" in their names: they
    # ran raw by default and answered garbage. Now the template alone decides, as in llama-cli and Ollama.
    import fakes
    monkeypatch.setattr(fakes.FakeModel, "meta", lambda self, key: None)  # no general.name to go by
    target = tmp_path / "gemma-3-1b-it.gguf"
    target.write_bytes(b"GGUF")
    common = ["Hi", "--target", str(target), "--draft", "none", "--temperature", "0", "-n", "4"]
    # BOS, <|im_start|>user\nHi<|im_end|>\n, <|im_start|>assistant\n
    assert generate_json(*common)["stats"]["prompt_tokens"] == 1 + 7 + 3
    assert generate_json(*common, "--raw")["stats"]["prompt_tokens"] == 3  # BOS, "H", "i"
    # without a template there is nothing to format with: raw, whatever the name says
    monkeypatch.setattr(fakes.FakeModel, "chat_template", lambda self: None)
    instruct = ["Hi", "--target", str(fake_cli.target), "--draft", "none", "--temperature", "0", "-n", "4"]
    assert generate_json(*instruct)["stats"]["prompt_tokens"] == 3


def test_an_empty_raw_reply_from_a_model_with_a_chat_template_suggests_chat(fake_cli, monkeypatch):
    # An instruct model given the bare prompt can end its turn at once: the user saw an empty line and
    # nothing else. The fakes' reply ends 3 tokens after the last control token: the raw prompt's BOS is
    # further back than that, so EOS comes first; the chat template's "<|im_start|>assistant\n" leaves room.
    fake_cli.reply_len = 3
    common = ["Write a haiku about the sea", "--target", str(fake_cli.target), "--draft", "none", "-n", "8"]
    hint = "the model ended its reply at once; an instruct or chat model may need --chat"
    raw = invoke("generate", *common, "--raw")
    assert raw.exit_code == 0 and raw.stdout == "\n", raw.output
    assert [line for line in raw.stderr.splitlines() if "--chat" in line] == [f"localspec: {hint} (its chat "
                                                                             "template around the prompt)"]
    chat = invoke("generate", *common)  # the default for this model
    assert chat.exit_code == 0 and chat.stdout.strip() and hint not in chat.stderr, chat.output
    import fakes
    monkeypatch.setattr(fakes.FakeModel, "chat_template", lambda self: None)  # no template: --chat cannot help
    bare = invoke("generate", *common, "--raw")
    assert bare.exit_code == 0 and bare.stdout == "\n" and hint not in bare.stderr, bare.output


@pytest.mark.parametrize("flags, fragments", [
    (["--temperature", "-1"], ["Error: --temperature must be >= 0 (got -1.0); use 0 for greedy decoding"]),
    (["--top-p", "1.5"], ["Error: --top-p must be in [0, 1] (got 1.5); use 1.0 to disable top-p"]),
    (["--top-p", "-0.5"], ["Error: --top-p must be in [0, 1] (got -0.5)"]),
    (["--gamma", "-2"], ["Error: --gamma must be >= 0 or auto (got -2); use 0 for plain decoding"]),
    (["--p-min", "1.5"], ["Error: --p-min must be in [0, 1) (got 1.5); use 0 to never stop a draft early, or auto"]),
    (["-n", "0"], ["Error: --max-tokens must be >= 1, or -1 to run until the answer ends (got 0)"]),
    (["--seed", "-5"], ["Error: --seed must be >= 0, or -1 for a random seed (got -5)"]),
])
def test_bad_sampling_values(args, flags, fragments):
    # the CLI names the flag given, where a library caller is told GenerationConfig's field (test_cli_habits)
    assert_one_line_error(invoke("generate", "hi", *args, *flags), *fragments)


def test_prompt_longer_than_context(args):
    # the CLI names its flag; a library caller is told of LoadOptions (test_controller)
    result = invoke("generate", "word " * 400, *args)
    assert_one_line_error(result, "context holds 256", "; raise --ctx or shorten the prompt")
    assert "LoadOptions" not in result.output


def test_invalid_logits_are_one_line_naming_no_flag_the_cli_lacks(fake_cli, monkeypatch):
    # it said "lower --ngl": no such flag (-ngl is --ngl-target's short form)
    import numpy as np
    from fakes import FakeModel

    monkeypatch.setattr(FakeModel, "logits_at", lambda self, context: np.full(self.n_vocab, np.nan, np.float32))
    result = invoke("generate", "hi", "--target", str(fake_cli.target), "--draft", "none", "--raw", "-n", "4")
    assert_one_line_error(result, "Error: logits contain NaN/inf at token 0 (nan); the model produced invalid "
                          "numbers — check the GGUF file, or put fewer of its layers on the GPU")


def test_model_drafter_without_a_draft_is_an_error(fake_cli):
    # the CLI's words; a library caller is told of the Pair's draft and drafter='ngram' (test_controller)
    assert_one_line_error(invoke("generate", "hi", "--target", str(fake_cli.target), "--draft", "none",
                                 "--drafter", "model"),
                          "Error: --drafter model needs a draft model; give --draft, or use --drafter ngram")
