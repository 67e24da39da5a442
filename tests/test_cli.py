"""The command line as users drive it: CliRunner for the cases, and once as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from localspec.cli import cli
from clitools import assert_one_line_error, invoke


@pytest.fixture
def smol_args(smol_path, smol_q4_0):
    return ["--target", str(smol_path), "--draft", str(smol_q4_0), "--raw", "--ctx", "256", "--threads", "1"]


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
         "--draft", str(smol_q4_0), "--raw", "--temperature", "0", "-n", "16", "--stats", "--threads", "1"],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "alpha" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", "localspec", "generate", "x", "--target", str(tmp_path / "x.gguf")],
                         capture_output=True, text=True, env=env, timeout=60)
    assert bad.returncode == 1 and "Model file not found" in bad.stderr and "Traceback" not in bad.stderr


# Every shared flag, set to a value other than its default (tune has only some of them).
SHARED_ARGS = {"target": ["--target", "t.gguf"], "draft": ["--draft", "d.gguf"], "ngl_target": ["--ngl-target", "3"],
               "ngl_draft": ["--ngl-draft", "2"], "threads": ["--threads", "3"], "ctx": ["--ctx", "512"],
               "gamma": ["-g", "5"], "temperature": ["--temp", "0.3"], "top_k": ["--top-k", "7"],
               "top_p": ["--top-p", "0.5"], "min_p": ["--min-p", "0.1"], "seed": ["-s", "9"], "max_tokens": ["-n", "12"],
               "stop": ["--stop", "x", "--stop", "y"], "drafter": ["--drafter", "ngram"], "p_min": ["--p-min", "0.4"]}
PARSED = {"target": "t.gguf", "draft": "d.gguf", "ngl_target": 3, "ngl_draft": 2, "threads": 3, "ctx": 512, "gamma": 5,
          "temperature": 0.3, "top_k": 7, "top_p": 0.5, "min_p": 0.1, "seed": 9, "max_tokens": 12, "stop": ("x", "y"),
          "drafter": "ngram", "p_min": 0.4}
COMMANDS = ("generate", "chat", "serve", "tune")


def parse(command: str, args: list[str]) -> dict:
    """The values click hands the command, without running it (no model is loaded)."""
    with cli.commands[command].make_context(command, args) as ctx:
        return ctx.params


def shared_on(command: str) -> list[str]:
    names = {p.name for p in cli.commands[command].params}
    return [n for n in SHARED_ARGS if n in names and not (command == "tune" and n == "draft")]


def test_shared_flags_parse_identically_on_every_command():
    # The same flag parses to the same value and has the same declaration wherever it appears.
    for command in COMMANDS:
        names = shared_on(command)
        params = parse(command, [a for n in names for a in SHARED_ARGS[n]])
        assert {n: params[n] for n in names} == {n: PARSED[n] for n in names}, command
    assert len(shared_on("tune")) == 11 and len(shared_on("generate")) == len(SHARED_ARGS)
    declared = {c: {p.name: p for p in cli.commands[c].params} for c in COMMANDS}
    for name in SHARED_ARGS:
        shapes = {(tuple(p.opts + p.secondary_opts), p.type.name, p.multiple, p.envvar)
                  for c in COMMANDS if name in shared_on(c) for p in [declared[c][name]]}
        assert len(shapes) == 1, (name, shapes)


def test_shared_defaults_come_from_the_config_objects():
    # Left out, the sampling flags take SamplingParams' defaults on every command, the rest
    # GenerationConfig's and LoadOptions'; tune alone generates fewer tokens per prompt with a fixed seed.
    from localspec.sampling import SamplingParams
    from localspec.session import LoadOptions
    from localspec.config import GenerationConfig

    sampling, load, config = SamplingParams(), LoadOptions(), GenerationConfig()
    expected = {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
                "min_p": sampling.min_p, "ctx": load.n_ctx, "ngl_target": load.ngl_target, "threads": load.threads,
                "p_min": config.p_min, "gamma": config.gamma, "drafter": config.drafter, "stop": ()}
    for command in COMMANDS:
        params = parse(command, [])
        assert {n: params[n] for n in expected if n in params} == {n: v for n, v in expected.items() if n in params}
        # chat and serve answer until the end (answer_length) unless -n is given
        length = {"tune": 64, "chat": None, "serve": None}.get(command, config.max_tokens)
        assert (params["max_tokens"], params["seed"]) == (length, 1 if command == "tune" else None)


@pytest.mark.parametrize("command", COMMANDS)
def test_p_min_is_auto_or_a_number_everywhere(command):
    assert parse(command, ["--p-min", "auto"])["p_min"] is None
    assert parse(command, ["--p-min", "0"])["p_min"] == 0.0
    result = invoke(command, "--p-min", "often")
    # a bad value is one line and exit code 1 (issue 16), not click's usage and exit code 2
    assert result.exit_code == 1 and "'often' is not 'auto' or a number in [0, 1)" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_tune_p_min_auto_replays_fixed_gamma_with_the_fallback(monkeypatch, smol_path):
    # tune's --p-min auto (the default) gives its fixed-γ candidates the p-min a fixed --gamma takes.
    from localspec import tune
    from localspec.draftstop import FALLBACK_P_MIN

    seen = []

    def stop(target, options, *args, **kwargs):
        seen.append(options.p_min)
        raise tune.TuneError("stopped here")
    monkeypatch.setattr(tune, "run_tune", stop)
    for flags, p_min in (([], FALLBACK_P_MIN), (["--p-min", "0.3"], 0.3)):
        assert_one_line_error(invoke("tune", "--target", str(smol_path), *flags), "stopped here")
        assert seen.pop() == p_min


def test_generation_config_from_the_shared_flags():
    # One conversion from parsed flags to the objects: every flag lands in its field.
    from localspec.cli import generation_config, load_options

    params = parse("generate", [a for n in SHARED_ARGS for a in SHARED_ARGS[n]])
    config = generation_config(params)
    assert (config.max_tokens, config.gamma, config.seed, config.stop, config.drafter, config.p_min) == \
        (12, 5, 9, ("x", "y"), "ngram", 0.4)
    s = config.sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p) == (0.3, 7, 0.5, 0.1)
    assert generation_config(params, gamma=0).gamma == 0
    load = load_options(params)
    assert (load.n_ctx, load.threads, load.ngl_target, load.ngl_draft) == (512, 3, 3, 2)
    assert load_options(parse("tune", []), ngl_draft=0).ngl_draft == 0


def test_a_fresh_process_leaves_a_draft_that_does_not_pay_here_unloaded(smol_f16, smol_q4_0, tmp_path):
    # As a CLI user runs it, twice: the first process (nothing saved) loads the draft and saves its
    # plan; where that plan says the draft does not pay, the next process never loads it, and greedy
    # output is still the target's own (F16: batched and single-token logits agree).
    import json

    from localspec.tracker import CostTracker

    env = {**os.environ, "LOCALSPEC_MODELS": str(tmp_path)}

    def generate(*flags):
        proc = subprocess.run([sys.executable, "-m", "localspec", "generate", "def square(x):", "--target",
                               str(smol_f16), "--draft", str(smol_q4_0), "--raw", "--temperature", "0", "-n", "24",
                               "--json", "--threads", "1", *flags], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = generate()
    assert first["stats"]["draft_loaded"] is True and first["stats"]["warm_start"] is False
    (plan,) = (tmp_path / ".plans").glob("*.json")
    saved = json.loads(plan.read_text())
    poor = CostTracker()
    poor.record(0, 0, 0.0, 0.10, 0.001)
    for _ in range(50):
        poor.record(4, 0, 4 * 0.08, 0.16, 0.001, [0.9, 0.8, 0.7, 0.6])
    saved["trackers"]["model/greedy"] = poor.to_dict()
    plan.write_text(json.dumps(saved))
    second = generate()
    assert second["stats"]["warm_start"] is True and second["stats"]["draft_loaded"] is False
    assert second["stats"]["by_drafter"].get("model") is None
    assert second["text"] == generate("--target-only")["text"]
