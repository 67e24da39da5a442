"""The command line as users drive it: CliRunner for the cases, and once as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from localspec.cli import cli


@pytest.fixture
def smol_args(smol_path, smol_q4_0):
    return ["--target", str(smol_path), "--draft", str(smol_q4_0), "--raw", "--ctx", "256", "--threads", "2"]


def invoke(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def assert_one_line_error(result, *fragments):
    """A user mistake: non-zero exit, one 'Error:' line naming the problem, no traceback."""
    assert result.exit_code != 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.slow
def test_generate_json_reports_text_and_stats(smol_args):
    result = invoke("generate", "def add(a, b):", *smol_args, "--temperature", "0", "-n", "24", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    stats = out["stats"]
    assert out["text"] and stats["generated_tokens"] == 24 and stats["finish_reason"] == "length"
    assert stats["drafted"] > 0 and 0 <= stats["alpha"] <= 1
    assert stats["mean_accepted_length"] == pytest.approx(1 + stats["accepted"] / stats["steps"])
    assert set(stats["time_s"]) == {"prefill", "draft", "verify", "controller", "total"}


@pytest.mark.slow
def test_generate_target_only_matches_speculative_greedy(smol_args):
    # At T=0 the speculative text equals the target-only text (same model, same prompt).
    common = ["generate", "The three primary colours are", *smol_args, "--temperature", "0", "-n", "32", "--json"]
    spec = json.loads(invoke(*common).output)
    plain = json.loads(invoke(*common, "--target-only").output)
    assert plain["stats"]["drafted"] == 0
    assert spec["text"] == plain["text"]


@pytest.mark.slow
def test_generate_reads_stdin_and_prints_stats(smol_args):
    result = invoke("generate", *smol_args, "--temperature", "0", "-n", "8", "--stats", input="Once upon a time")
    assert result.exit_code == 0, result.output
    assert "alpha" in result.output and "tok/s" in result.output


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", [
    (["--temperature", "-1"], ["temperature", "-1"]),
    (["--top-p", "1.5"], ["top_p", "1.5"]),
    (["--top-p", "0"], ["top_p", "0"]),
    (["--gamma", "-2"], ["gamma", "-2"]),
])
def test_bad_sampling_values(smol_args, flags, fragments):
    assert_one_line_error(invoke("generate", "hi", *smol_args, *flags), *fragments)


def test_missing_model_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    assert_one_line_error(invoke("generate", "hi", "--target", str(missing), "--draft", "none"), str(missing))


def test_not_a_gguf_file(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("this is not a model")
    assert_one_line_error(invoke("generate", "hi", "--target", str(bogus), "--draft", "none"), "Not a GGUF file")


@pytest.mark.slow
def test_truncated_gguf(tmp_path, smol_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smol_path.read_bytes()[: 5_000_000])
    assert_one_line_error(invoke("generate", "hi", "--target", str(cut), "--draft", "none"), "truncated or corrupt")


@pytest.mark.slow
def test_prompt_longer_than_context(smol_args):
    result = invoke("generate", "word " * 400, *smol_args)
    assert_one_line_error(result, "context holds 256", "--ctx")


def test_unknown_model_name():
    assert_one_line_error(invoke("generate", "hi", "--target", "no-such-model"), "no-such-model", "Known models")


@pytest.mark.slow
def test_models_check_compatible(smol_path, smol_q4_0):
    result = invoke("models", "check", str(smol_path), str(smol_q4_0))
    assert result.exit_code == 0 and "compatible" in result.output


@pytest.mark.slow
def test_real_subprocess(smol_path, smol_q4_0, tmp_path):
    # `python -m localspec` as a user runs it: streams text to stdout, stats to stderr.
    env = {**os.environ, "LOCALSPEC_MODELS": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "localspec", "generate", "def square(x):", "--target", str(smol_path),
         "--draft", str(smol_q4_0), "--raw", "--temperature", "0", "-n", "16", "--stats", "--threads", "2"],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "alpha" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "localspec", "generate", "x", "--target", str(tmp_path / "x.gguf")],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and "Model file not found" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_ngram_drafter_without_a_draft_model(smol_path):
    # One GGUF only: the n-gram drafter speculates from the context; greedy output is unchanged.
    common = ["generate", "1 2 3 4 5 1 2 3 4 5 1 2 3", "--target", str(smol_path), "--draft", "none", "--raw",
              "--ctx", "256", "--threads", "2", "--temperature", "0", "-n", "32", "--json"]
    spec = json.loads(invoke(*common, "--drafter", "ngram", "--gamma", "4").output)
    plain = json.loads(invoke(*common, "--target-only").output)
    assert spec["stats"]["drafter"] == "ngram" and spec["stats"]["drafted"] > 0
    assert spec["text"] == plain["text"]


@pytest.mark.slow
def test_model_drafter_without_a_draft_is_an_error(smol_path):
    assert_one_line_error(invoke("generate", "hi", "--target", str(smol_path), "--draft", "none",
                                 "--drafter", "model"), "--drafter model needs a draft model")


@pytest.mark.slow
def test_hybrid_uses_both_drafters_and_keeps_greedy_output(smol_args):
    # A prompt that repeats itself: prompt lookup guesses where it can, the draft model elsewhere.
    prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n"
    common = ["generate", prompt, *smol_args, "--temperature", "0", "-n", "48", "--json"]
    spec = json.loads(invoke(*common, "--drafter", "hybrid", "--gamma", "4").output)
    plain = json.loads(invoke(*common, "--target-only").output)
    by = spec["stats"]["by_drafter"]
    assert spec["stats"]["drafter"] == "ngram+model" and set(by) == {"ngram", "model"}
    assert all(v["drafted"] > 0 for v in by.values())
    assert spec["text"] == plain["text"]
