"""Issue 16 on fakes: llama.cpp's flag habits, escapes, one-line errors, --json, chat /load."""

from __future__ import annotations

import json
import re
import sys

import pytest
from click.testing import CliRunner

from localspec.cli import cli
from localspec.cli.flags import unescape
from localspec.sampling import SamplingParams
from clitools import assert_one_line_error, invoke


def run_json(*args) -> dict:
    result = invoke("generate", "def add(a, b):", "--raw", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_llama_cpp_short_flags_parse_like_the_long_names(fake_cli):
    t, d = str(fake_cli.target), str(fake_cli.draft)
    long = run_json("--target", t, "--draft", d, "--ctx", "200", "--threads", "2", "--ngl-target", "0",
                    "--ngl-draft", "0", "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9", "--min-p", "0.1",
                    "--gamma", "3", "--max-tokens", "8", "--p-min", "0.4")
    short = run_json("-m", t, "-md", d, "-c", "200", "-t", "2", "-ngl", "0", "-ngld", "0", "--temp", "0.5",
                     "--top-k", "7", "--top-p", "0.9", "--min-p", "0.1", "--draft-max", "3", "-n", "8",
                     "--draft-p-min", "0.4")
    also = run_json("--model", t, "--model-draft", d, "--ctx-size", "200", "--n-gpu-layers", "0",
                    "--n-gpu-layers-draft", "0", "--temp", "0.5", "--top-k", "7", "--top-p", "0.9", "--min-p", "0.1",
                    "--draft-max", "3", "--n-predict", "8", "--draft-p-min", "0.4")
    assert long["settings"] == short["settings"] == also["settings"]
    assert long["settings"]["gamma"] == 3 and long["settings"]["top_k"] == 7 and long["settings"]["p_min"] == 0.4
    assert long["settings"]["max_tokens"] == 8
    assert run_json("--target", t, "--draft", "none", "--predict", "5")["settings"]["max_tokens"] == 5
    assert long["target"] == short["target"] == t and long["draft"] == short["draft"] == d
    a, b = fake_cli.loaded[0], fake_cli.loaded[1]
    assert a.options == b.options and a.options.threads == 2 and a.options.n_ctx == 200


def test_dash_t_is_threads_not_the_target(fake_cli):
    # was: -t 4 meant --target 4 ("Unknown model '4'")
    out = run_json("--target", str(fake_cli.target), "--draft", "none", "-t", "4", "-n", "4")
    assert out["target"] == str(fake_cli.target) and fake_cli.loaded[0].options.threads == 4


def test_seed_minus_one_is_a_random_seed_as_in_llama_cpp(fake_cli):
    common = ["--target", str(fake_cli.target), "--draft", "none", "--temperature", "1", "-n", "4"]
    assert run_json(*common, "--seed", "-1")["settings"]["seed"] is None
    assert run_json(*common, "--seed", "7")["settings"]["seed"] == 7


def test_a_random_seed_is_reported_and_repeats_its_sample(fake_cli):
    # `"seed": null` left a good sample impossible to repeat; llama.cpp prints the seed it drew. At a
    # fixed γ (README): under auto the draft lengths follow timings, and with them which sample a seed gives.
    common = ["--target", str(fake_cli.target), "--draft", "none", "--gamma", "3", "--temperature", "1.5", "-n", "12"]
    drawn = [run_json(*common) for _ in range(3)]
    seeds = [d["stats"]["seed"] for d in drawn]
    assert all(isinstance(s, int) and s >= 0 for s in seeds) and len(set(seeds)) == 3
    for d in drawn:
        again = run_json(*common, "--seed", str(d["stats"]["seed"]))
        assert again["text"] == d["text"] and again["stats"]["seed"] == d["stats"]["seed"]
    assert len({d["text"] for d in drawn}) > 1  # the seeds drawn do differ in what they sample


def test_minus_one_tokens_run_until_the_answer_ends_as_in_llama_cpp(fake_cli):
    common = ["--target", str(fake_cli.target), "--draft", "none", "--temperature", "0", "--ctx", "48"]
    out = run_json(*common, "-n", "-1")
    assert out["settings"]["max_tokens"] is None and out["stats"]["finish_reason"] == "length"  # the context filled: 48 tokens, the prompt's among them
    assert out["stats"]["prompt_tokens"] + out["stats"]["generated_tokens"] >= 47
    assert run_json(*common, "-n", "5")["stats"]["generated_tokens"] == 5
    result = invoke("generate", "hi", "--target", str(fake_cli.target), "-n", "-2")
    assert result.exit_code == 1 and "Error: --max-tokens must be >= 1, or -1 to run until the answer ends (got -2)" \
        in result.output


def test_tune_and_the_library_name_a_negative_seed():
    from localspec.config import GenerationConfig, GenerationError
    from localspec.tune.options import TuneError, TuneOptions
    with pytest.raises(GenerationError, match=r"seed must be >= 0 \(got -1\)"):
        GenerationConfig(seed=-1).validate()  # -1 means random to the CLI and the server only
    with pytest.raises(TuneError, match=r"^seed must be >= 0 \(got -3\)$"):  # the field, as GenerationConfig's
        TuneOptions(seed=-3).validate()


@pytest.mark.parametrize("field, value, library, flags, cli", [
    ("max_tokens", 1, "max_tokens must be >= 2 (got 1)", ("-n", "1"), "--max-tokens must be >= 2 (got 1)"),
    ("gamma_max", 0, "gamma_max must be in 1..64 (got 0)", ("--gamma-max", "0"), "--gamma-max must be in 1..64 (got 0)"),
    ("budget_s", 0, "budget_s must be > 0 seconds (got 0); None for no limit", ("--budget", "0"),
     "--budget must be > 0 seconds (got 0.0)"),
    ("p_min", 1.0, "p_min must be in [0, 1) (got 1.0); use 0 to never stop a draft early", ("--p-min", "1"),
     "--p-min must be in [0, 1) (got 1.0)"),
])
def test_tune_options_name_the_field_to_the_library_and_the_flag_to_the_cli(field, value, library, flags, cli):
    # the library was told "--budget must be > 0 seconds" of TuneOptions(budget_s=0), a flag it never gave
    from localspec.tune.options import TuneError, TuneOptions
    with pytest.raises(TuneError) as e:
        TuneOptions(**{field: value}).validate()
    assert str(e.value) == library
    assert_one_line_error(invoke("config", "show", "tune", *flags), cli)


@pytest.mark.parametrize("field, value, library, cli", [
    ("seed", -3, "seed must be >= 0 (got -3); None gives a random seed", "--seed must be >= 0 (got -3)"),
    ("gamma", -2, "gamma must be >= 0 or auto (got -2); use 0 for plain decoding",
     "--gamma must be >= 0 or auto (got -2); use 0 for plain decoding"),
    ("max_tokens", 0, "max_tokens must be >= 1 (got 0)", "--max-tokens must be >= 1 (got 0)"),
    ("sampling", SamplingParams(top_p=1.5), "top_p must be in [0, 1] (got 1.5); use 1.0 to disable top-p",
     "--top-p must be in [0, 1] (got 1.5); use 1.0 to disable top-p"),
    # a field no flag sets is said to the CLI as to the library
    ("ngram_gamma_max", -1, "ngram_gamma_max must be >= 0 (got -1)", "ngram_gamma_max must be >= 0 (got -1)"),
])
def test_generation_config_names_the_field_to_the_library_and_the_flag_to_the_cli(field, value, library, cli):
    # the CLI said "seed must be >= 0, or -1 for a random seed" of --seed -5, where tune's said "--max-tokens"
    from localspec.cli.errors import said
    from localspec.config import GenerationConfig, GenerationError
    with pytest.raises(GenerationError) as e:
        GenerationConfig(**{field: value}).validate()
    assert (str(e.value), said(e.value)) == (library, cli)


@pytest.mark.parametrize("fields, message", [
    ({"max_tokens": "64"}, "max_tokens must be a whole number >= 2 (got '64')"),
    ({"gamma_max": 2.5}, "gamma_max must be a whole number in 1..64 (got 2.5)"),
    ({"seed": None}, "seed must be a whole number >= 0 (got None)"),
    ({"confirm": True}, "confirm must be a whole number >= 0 (got True)"),  # not read as 1
    ({"passes": "8"}, "passes must be a whole number >= 1 (got '8')"),
    ({"passes": 0}, "passes must be >= 1 (got 0)"),  # was accepted: no replays at T > 0, every prediction 0 tokens/s
    ({"budget_s": "60"}, "budget_s must be a number of seconds > 0, or None for no limit (got '60')"),
    ({"p_min": "0.5"}, "p_min must be a number in [0, 1) (got '0.5')"),
    ({"chat": "yes"}, "chat must be True, False, or None for the target's own choice (got 'yes')"),
    ({"sampling": {"temperature": 0}}, "sampling must be a SamplingParams (got {'temperature': 0}); "
                                       "e.g. SamplingParams(temperature=0)"),
    ({"load": None}, "load must be a LoadOptions (got None); e.g. LoadOptions(n_ctx=4096)"),
    ({"quants": "Q4_0"}, "quants must be a tuple of quantization types (got 'Q4_0'); e.g. quants=('Q4_0',)"),
    ({"devices": "gpu"}, "devices must be a tuple of 'cpu' and 'gpu', or None for each this machine has "
                         "(got 'gpu'); e.g. devices=('gpu',)"),
    ({"drafts": "d.gguf"}, "drafts must be a tuple of paths (got 'd.gguf'); e.g. drafts=(Path('d.gguf'),)"),
    ({"sampling": SamplingParams(temperature=-1)}, "temperature must be >= 0 (got -1); use 0 for greedy decoding"),
])
def test_tune_options_of_the_wrong_type_name_the_field_as_generation_config_does(fields, message):
    # was: TuneOptions(max_tokens="64").validate() raised "TypeError: '>=' not supported between
    # instances of 'str' and 'int'", naming neither the field nor the fix; a bad sampling a bare ValueError
    from localspec.tune.options import TuneError, TuneOptions
    with pytest.raises(TuneError) as e:
        TuneOptions(**fields).validate()
    assert str(e.value) == message


def stop_tune_at_its_run(monkeypatch) -> list:
    """Make `localspec tune` stop with a one-line error where it would start calibrating; the TuneOptions
    it would have run with are appended to the list returned."""
    from localspec import tune
    from localspec.tune import TuneError

    seen = []

    def run_tune(target, options, prompts, **kwargs):
        seen.append(options)
        raise TuneError("stopped where the run starts")
    monkeypatch.setattr(tune, "run_tune", run_tune)
    return seen


@pytest.mark.parametrize("name, library, cli", [
    ("t.txt", "the plot {path}: matplotlib cannot write .txt files; use one of",
     "--plot {path}: matplotlib cannot write .txt files; use one of"),
    ("no-such-folder/t.png", "Cannot write the plot {path} (the folder {folder} is not there or not writable); "
     "choose a writable path", "Cannot write the plot {path} (the folder {folder} is not there or not writable); "
     "choose a writable --plot path")])
def test_a_plot_tune_cannot_write_is_named_as_the_library_and_the_cli_name_it(fake_cli, tmp_path, name, library, cli):
    # a library caller of check_plot(path) or TuneResult.plot(path) was told of --plot, a flag it has not
    from localspec.cli.errors import said
    from localspec.tune import TuneError, check_plot

    path = tmp_path / name
    words = {"path": path, "folder": path.parent}
    with pytest.raises(TuneError) as e:
        check_plot(path)
    assert str(e.value).startswith(library.format(**words)) and said(e.value).startswith(cli.format(**words))
    assert_one_line_error(invoke("tune", "-m", fake_cli.target, "--plot", path, "--quants", "none"),
                          "Error: " + cli.format(**words))


def test_a_plot_without_matplotlib_is_named_as_the_library_and_the_cli_name_it(fake_cli, tmp_path, monkeypatch):
    from localspec.cli.errors import said
    from localspec.tune import TuneError, check_plot

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    fix = "needs matplotlib: pip install 'localspec[plot]' (or pip install matplotlib)"
    with pytest.raises(TuneError) as e:
        check_plot(tmp_path / "t.png")
    assert (str(e.value), said(e.value)) == (f"the plot {fix}", f"--plot {fix}")
    assert_one_line_error(invoke("tune", "-m", fake_cli.target, "--plot", tmp_path / "t.png", "--quants", "none"),
                          f"Error: --plot {fix}")


def test_tune_d_none_adds_no_draft(fake_cli, monkeypatch):
    # --draft none is no draft on generate, chat and serve; tune's -d none was "Unknown model 'none'",
    # and with it a config file's [defaults] draft = "none" stopped tune
    seen = stop_tune_at_its_run(monkeypatch)
    result = invoke("tune", "-m", fake_cli.target, "--quants", "none", "-d", "none", "-d", "None")
    assert "stopped where the run starts" in result.stderr and seen[0].drafts == ()


def test_tune_seed_minus_one_draws_a_seed_and_reports_it(fake_cli, monkeypatch):
    # --seed -1 is a random seed on every command that has the flag (README); tune refused it
    # ("--seed must be >= 0 (got -1)"), and with it a config file's [defaults] seed = -1
    seen = stop_tune_at_its_run(monkeypatch)
    for _ in range(2):
        result = invoke("tune", "-m", fake_cli.target, "--quants", "none", "--seed", "-1")
        assert "stopped where the run starts" in result.stderr
        drawn = seen[-1].seed
        assert isinstance(drawn, int) and drawn >= 0
        assert f"localspec tune: seed {drawn} (drawn for --seed -1; --seed {drawn} repeats it)" in result.stderr
    assert seen[0].seed != seen[1].seed
    result = invoke("tune", "-m", fake_cli.target, "--quants", "none", "--seed", "7")
    assert seen[-1].seed == 7 and "drawn" not in result.stderr
    assert_one_line_error(invoke("tune", "-m", fake_cli.target, "--seed", "-2"),
                          "Error: --seed must be >= 0, or -1 for a random seed (got -2)")


def test_tune_takes_the_llama_cpp_names_of_draft(fake_cli, monkeypatch):
    # -md/--model-draft are --draft on every command that has it (README); tune read -md as -m d
    # and the draft as an extra argument
    seen = stop_tune_at_its_run(monkeypatch)
    for flag in ("-d", "--draft", "-md", "--model-draft"):
        result = invoke("tune", "-m", fake_cli.target, flag, fake_cli.draft, "--quants", "none")
        assert "stopped where the run starts" in result.stderr, result.output
        assert seen[-1].drafts == (fake_cli.draft,)
    help_text = invoke("tune", "--help").output
    assert "-d, -md, --draft, --model-draft" in help_text  # as generate lists them


def test_escapes_as_llama_cli():
    assert unescape(r"\n\n") == "\n\n" and unescape(r"a\tb") == "a\tb" and unescape(r"a\\nb") == "a\\nb"
    assert unescape(r"C:\path") == r"C:\path"


def test_the_readme_stop_example_matches(fake_cli):
    # the README's --stop "\n\n": typed in a shell, the flag receives backslash-n backslash-n
    out = run_json("--target", str(fake_cli.target), "--draft", "none", "--stop", r"\n\n", "-n", "4")
    assert out["settings"]["stop"] == ["\n\n"]
    readme = open("README.md", encoding="utf-8").read()
    assert '--stop "\\n\\n"' in readme


@pytest.mark.parametrize("flag,value,fragment", [("--gamma", "abc", "abc"), ("--drafter", "foo", "foo")])
def test_bad_values_are_one_line_and_exit_1(fake_cli, flag, value, fragment):
    result = invoke("generate", "hi", "--target", str(fake_cli.target), flag, value)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error:") and fragment in lines[0]


def test_a_bad_value_reads_as_one_sentence(fake_cli):
    # was: "'abc' is not a valid float.; see --help"
    result = invoke("generate", "hi", "--target", str(fake_cli.target), "--temp", "abc")
    assert_one_line_error(result, "'abc' is not a valid float; see `")


@pytest.mark.parametrize("command, flags", [
    ("serve", ("--temp", "abc")), ("serve", ("--port", "abc")),  # a shared flag, and serve's own
    ("tune", ("-c", "-3")), ("tune", ("--budget", "abc")),
    ("generate", ("hi", "--drafter", "foo")), ("generate", ("hi", "--ngl-target", "-5")),
])
def test_every_bad_flag_value_names_the_commands_own_help(command, flags):
    # was: the shared flags' ended "; see --help", a command's own "; see `localspec serve --help`"
    result = invoke(command, *flags)
    assert_one_line_error(result, "Invalid value for")
    assert result.output.rstrip().endswith(f" {command} --help`") and "; see `" in result.output


@pytest.mark.parametrize("line, end", [
    ("[tune]\nctx-size = -3", "-3 is not in the range x>=0"),  # a shared flag ended "; see --help"
    ("[serve]\nport = 0", "0 is not a port number: give a whole number from 1 to 65535"),  # serve's own
])
def test_a_config_files_bad_value_ends_alike_for_every_flag(tmp_path, monkeypatch, line, end):
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke("generate", "hi")
    assert_one_line_error(result, f"{config}: {line.split(chr(10))[0]}")
    assert result.output.rstrip().endswith(end), result.output


def test_json_errors_are_json(fake_cli):
    result = invoke("generate", "hi", "--target", str(fake_cli.target), "--gamma", "abc", "--json")
    assert result.exit_code == 1 and "abc" in json.loads(result.stdout)["error"]["message"]
    result = invoke("generate", "hi", "--target", "no-such-model", "--json")
    error = json.loads(result.stdout)["error"]
    assert result.exit_code == 1 and "no-such-model" in error["message"] and error["type"]


def test_json_echoes_settings_and_explains_times(fake_cli):
    out = run_json("--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "--drafter", "hybrid",
                   "--seed", "5", "-n", "6")
    s, stats = out["settings"], out["stats"]
    assert s["drafter"] == "hybrid" and s["gamma"] == "auto" and s["seed"] == 5 and s["max_tokens"] == 6
    assert {"temperature", "top_k", "top_p", "min_p", "p_min", "stop"} <= set(s)
    assert stats["drafter"] == "hybrid" and set(stats["sources"]) == {"ngram", "model"}
    t = stats["time_s"]
    assert t["total"] == pytest.approx(t["prefill"] + t["decode"]) and t["total"] >= t["prefill"]


def test_target_only_says_so(fake_cli):
    result = invoke("generate", "hi", "--raw", "--target", str(fake_cli.target), "--target-only", "-n", "4", "--stats")
    assert "drafter: none (target only)" in result.stderr and "none drafter" not in result.stderr
    assert "draft: none (target only)" in result.stderr and "none (none" not in result.stderr
    out = run_json("--target", str(fake_cli.target), "--target-only", "-n", "4")
    assert out["stats"]["time_s"]["draft_prefill"] == 0.0
    assert out["settings"]["drafter"] == "none" and out["stats"]["drafter"] == "none" and out["stats"]["sources"] == []


@pytest.mark.parametrize("command", ["chat", "serve"])
def test_answer_length_help_has_no_false_default(command):
    text = " ".join(invoke(command, "--help").output.split())
    assert "[default: 256]" not in text and "until it ends" in text


def test_every_generating_command_has_the_flags(fake_cli):
    assert "--show-drafts" in invoke("generate", "--help").output
    for command in ("generate", "chat", "serve"):
        text = " ".join(invoke(command, "--help").output.split())
        for flag in ("-m, --target", "-md", "-c, --ctx", "-t, --threads", "-ngl", "-ngld", "--temp", "--draft-max"):
            assert flag in text, (command, flag)


def test_chat_load_resumes_a_saved_conversation(fake_cli, tmp_path):
    fake_cli.reply_len = 3
    saved = tmp_path / "talk.json"
    base = ["chat", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "-n", "4"]
    first = invoke(*base, input=f"hello\n/save {saved}\n")
    assert first.exit_code == 0, first.output
    second = invoke(*base, input=f"/load {saved}\n/stats\nmore\n")
    assert second.exit_code == 0 and "loaded 2 messages" in second.output
    assert "conversation: 2 messages" in second.output
    bad = invoke(*base, input=f"/load {tmp_path / 'nope.json'}\n")
    assert bad.exit_code == 0 and "Error:" in bad.output


def test_models_pull_says_already_installed(isolated_store, tmp_path, monkeypatch):
    from test_discovery import gguf, write_catalog

    write_catalog(tmp_path, monkeypatch, size=10)
    path = gguf(isolated_store / "fake.gguf", size=10)
    result = invoke("models", "pull", "fake")
    assert result.exit_code == 0 and f"fake: already installed: {path}" in result.output


def test_models_list_all_names_the_source(isolated_store, tmp_path, monkeypatch):
    import os
    from pathlib import Path

    from test_discovery import gguf, ollama_model

    gguf(isolated_store / "publisher" / "repo" / "mine.gguf")
    ollama_model(Path(os.environ["HOME"]) / ".ollama/models", "llama3.2", "1b", b"x")
    plain = invoke("models", "list").output
    assert "publisher/repo/mine.gguf" in plain and "llama3.2:1b" not in plain
    every = invoke("models", "list", "--all")
    assert every.exit_code == 0 and "llama3.2:1b  [ollama]" in every.output


def test_models_list_says_what_a_name_two_files_share_picks(isolated_store, tmp_path, monkeypatch):
    # two lines began "x.gguf", and nothing said that --target x.gguf takes the store's
    from test_discovery import gguf

    mine = gguf(isolated_store / "x.gguf")
    other = gguf(tmp_path / "extra" / "x.gguf", b"other")
    monkeypatch.setenv("LOCALSPEC_MODEL_DIRS", str(other.parent))
    lines = invoke("models", "list", "--all").output.splitlines()
    assert len(lines) == 2 and lines[0].startswith("x.gguf  [store]") and lines[0].endswith(str(mine)), lines
    assert lines[1].startswith("x.gguf  [extra]"), lines
    assert lines[1].endswith(f"{other}  (this name picks {mine}; give this path instead)"), lines


def test_models_list_all_names_an_ollama_model_whose_blob_is_missing(isolated_store):
    # its manifest was read, its blob not found, and the model silently left out of the list
    import hashlib
    import os
    from pathlib import Path

    from test_discovery import ollama_model

    root = Path(os.environ["HOME"]) / ".ollama/models"
    ollama_model(root, "llama3.2", "1b", b"x")
    ollama_model(root, "qwen3", "0.6b", b"y").unlink()  # its blob deleted
    every = invoke("models", "list", "--all")
    assert every.exit_code == 0 and "llama3.2:1b  [ollama]" in every.output, every.output
    lines = [line for line in every.output.splitlines() if line.startswith("qwen3:0.6b")]
    assert lines == [f"qwen3:0.6b  [ollama]  cannot be used: its model file, blob sha256-"
                     f"{hashlib.sha256(b'GGUFy').hexdigest()}, is missing from {root / 'blobs'}; "
                     "run `ollama pull qwen3:0.6b`"], every.output
    assert "qwen3" not in invoke("models", "list").output  # the store's list names other apps' models not at all


def test_an_empty_store_points_at_the_models_other_apps_hold(isolated_store):
    # `ollama list` shows Ollama's models only; told only to pull, a user whose models LM Studio or
    # Ollama had downloaded was sent to download them again
    import os
    from pathlib import Path

    from test_discovery import gguf, ollama_model

    ollama_model(Path(os.environ["HOME"]) / ".ollama/models", "llama3.2", "1b", b"x")
    gguf(Path(os.environ["HOME"]) / ".lmstudio/models/publisher/repo/theirs.gguf")
    plain = invoke("models", "list")
    assert plain.exit_code == 0 and "2 elsewhere on this machine (lmstudio, ollama)" in plain.output
    assert "`localspec models list --all`" in plain.output and "`localspec models pull`" in plain.output


def test_a_target_without_draft_names_the_chosen_draft(fake_cli):
    result = invoke("generate", "hi", "--raw", "--target", str(fake_cli.target), "-n", "4", "--json")
    out = json.loads(result.stdout)
    assert result.exit_code == 0 and out["draft_reason"] and out["draft_reason"] in result.stderr
    off = run_json("--target", str(fake_cli.target), "--draft", "none", "-n", "4")
    assert off["draft"] is None and off["draft_reason"] == "--draft none"


@pytest.mark.parametrize("command", ["generate", "chat"])
def test_a_target_only_tune_profile_is_named_as_the_reason_for_no_draft(fake_cli, command):
    # draft_reason said "none (target only)", as for --target-only, where the README promises --json
    # says a tune profile chose it
    from localspec import profile

    profile.save_profile(fake_cli.target, profile.Choice("none", None, 0, temperature=0.0, tokens_per_s=9.0,
                                                         target_only_tokens_per_s=9.0))
    args = ["--target", fake_cli.target, "--temp", "0", "-n", "4", "--json", "--stats"]
    result = invoke(command, "hi", *args) if command == "generate" else invoke(command, *args, input="hi\n")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["draft"] is None and out["settings"]["drafter"] == "none"
    assert out["draft_reason"] == "none: chosen by the tune profile"
    assert command == "chat" or "draft: none: chosen by the tune profile" in result.stderr
    off = run_json("--target", fake_cli.target, "--target-only", "-n", "4")  # no profile with --target-only
    assert off["draft_reason"] == "none (target only)"


def show(*args, env=None) -> dict[str, tuple[str, str]]:
    result = CliRunner().invoke(cli, ["config", "show", *args], env=env)
    assert result.exit_code == 0, result.output
    lines = [line.split(" = ", 1) for line in result.stdout.splitlines()[1:]]
    return {name: (rest.rsplit("  (", 1)[0], rest.rsplit("  (", 1)[1].rstrip(")")) for name, rest in lines}


def test_precedence_flag_env_config_default(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[defaults]\ntemperature = 0.3\nctx-size = 512\ntop-k = 5\n'
                      '[generate]\nstop = ["\\n\\n"]\ntarget = "from-config"\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    monkeypatch.delenv("LOCALSPEC_TARGET", raising=False)
    s = show("generate", "--no-profile", "--top-k", "9")
    assert s["temperature"] == ("0.3", "config") and s["ctx"] == ("512", "config")
    assert s["top_k"] == ("9", "flag") and s["top_p"][1] == "default" and s["stop"] == ("('\\n\\n',)", "config")
    s = show("generate", "--no-profile", env={"LOCALSPEC_TARGET": "from-env"})
    assert s["target"] == ("'from-env'", "env")
    s = show("generate", "--no-profile", "-m", "from-flag", env={"LOCALSPEC_TARGET": "from-env"})
    assert s["target"] == ("'from-flag'", "flag")
    assert show("chat", "--no-profile")["temperature"] == ("0.3", "config")


def test_config_show_gives_gamma_and_p_min_auto_as_a_user_writes_them(tmp_path, monkeypatch):
    # was: "gamma = None" and "p_min = None", the values the flags' default auto becomes inside
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    for command in ("generate", "serve"):
        s = show(command, "--no-profile")
        assert s["gamma"] == ("'auto'", "default") and s["p_min"] == ("'auto'", "default")
    assert show("tune")["p_min"] == ("'auto'", "default")
    s = show("chat", "--no-profile", "-g", "3", "--p-min", "0.5")
    assert s["gamma"] == ("3", "flag") and s["p_min"] == ("0.5", "flag")
    assert show("generate", "--no-profile")["seed"] == ("None", "default")  # only auto's None is renamed


def test_config_beats_the_profile(tmp_path, monkeypatch, fake_cli):
    from localspec import profile

    monkeypatch.setattr("localspec.naming.installed_target", lambda target: fake_cli.target)
    choice = type("Choice", (), {})()
    monkeypatch.setattr(profile, "load_profile", lambda target, temperature: choice)

    def merge(choice, given, explicit):
        return {n: v for n, v in {"gamma": 2, "drafter": "model"}.items() if n not in explicit}, "profile applied"
    monkeypatch.setattr(profile, "merge_profile", merge)
    config = tmp_path / "config.toml"
    config.write_text('[generate]\ngamma = 5\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    s = show("generate")
    assert s["gamma"] == ("5", "config") and s["drafter"] == ("'model'", "profile")
    assert show("generate", "--gamma", "3")["gamma"] == ("3", "flag")
    # as generate takes them: --target-only and profile = false leave the profile out, and say so
    assert show("generate", "--target-only")["drafter"] == ("'auto'", "default")
    config.write_text('[generate]\nprofile = false\n')
    s = show("generate")
    assert s["use_profile"] == ("False", "config") and s["drafter"] == ("'auto'", "default")
    config.write_text('[generate]\nno-profile = true\n')
    assert show("generate")["use_profile"] == ("False", "config")


def test_an_empty_config_such_as_dev_null_is_read_as_no_settings(tmp_path, monkeypatch, fake_cli):
    # was: LOCALSPEC_CONFIG=/dev/null (git's GIT_CONFIG=/dev/null habit) was refused as a file that
    # "does not exist": the check was is_file(), false for a device; only nothing there, or a folder, is refused
    import os
    monkeypatch.setenv("LOCALSPEC_CONFIG", os.devnull)
    result = invoke("config", "show", "generate", "--no-profile")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"config file: {os.devnull}"  # not "(none)"
    assert run_json("--target", fake_cli.target, "--draft", "none", "-n", "2")["settings"]["max_tokens"] == 2
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "missing.toml"))
    assert_one_line_error(invoke("generate", "hi"), f"LOCALSPEC_CONFIG names {tmp_path / 'missing.toml'}, "
                          "which does not exist; create it or unset LOCALSPEC_CONFIG")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path))
    assert_one_line_error(invoke("generate", "hi"), f"the config file {tmp_path} is a directory")


def test_config_file_errors_are_one_line(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[generate]\nno-such-flag = 1\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke("generate", "hi")
    assert result.exit_code == 1 and "no-such-flag" in result.output and len(result.output.splitlines()) == 1


@pytest.mark.parametrize("line, fragment", [
    ("[generate]\ngamma = 1.5", "gamma = 1.5: Invalid value for '-g'"),  # not cut to 1, as --gamma 1.5 is refused
    ("[generate]\ngamma = true", "gamma = true: give auto|N as after its flag"),
    ("[generate]\nmax-tokens = 4.7", "max-tokens = 4.7: Invalid value for '-n'"),
    ("[generate]\ntarget-only = 1", "target-only = 1: give true or false"),
    ("[generate]\nstop = true", "stop = true: give text as after its flag, a quoted string or a number, or a list of"),
    ("[generate]\nstop = [[1]]", "stop = [[1]]: give text as after its flag"),
    ("[generate]\nseed = {a = 1}", 'seed = {"a": 1}: give integer as after its flag'),
    ("[generate]\ntemperature = true", "temperature = true: give float as after its flag"),
    ("[defaults]\ntemprature = 0", "[defaults] has no setting 'temprature' that any of generate"),
])
def test_a_config_value_of_the_wrong_kind_is_one_line_naming_file_table_and_key(tmp_path, monkeypatch, line, fragment):
    # click casts a default_map's value as it finds it: a float for an integer flag was cut (1.5 -> 1),
    # true read as 1, and a list or a table for a number was a Python traceback.
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke("generate", "hi")
    assert_one_line_error(result, f"{config}: ", fragment)
    assert result.exit_code == 1


@pytest.mark.parametrize("line, fragment", [
    ("[defaults]\ntemperature = -1", "[defaults] temperature = -1: --temperature must be >= 0 (got -1.0)"),
    ("[defaults]\ntemperature = nan", "[defaults] temperature = NaN: --temperature must be a finite number"),
    ("[generate]\nmax-tokens = 0", "[generate] max-tokens = 0: --max-tokens must be >= 1"),
    ("[chat]\nseed = -5", "[chat] seed = -5: --seed must be >= 0, or -1 for a random seed"),
    ("[tune]\nctx-size = -3", "[tune] ctx-size = -3: Invalid value for '-c'"),
    ("[tune]\nbudget = 0", "[tune] budget = 0: --budget must be > 0 seconds (got 0.0)"),
    ("[tune]\ngamma-max = 99", "[tune] gamma-max = 99: --gamma-max must be in 1..64 (got 99)"),
    ('[serve]\ncors-origin = ["localhost:3000"]',
     "[serve] cors-origin = [\"localhost:3000\"]: Invalid value for '--cors-origin': 'localhost:3000' is not an origin"),
])
def test_a_config_value_the_command_refuses_is_one_line_naming_file_table_and_key(tmp_path, monkeypatch, fake_cli,
                                                                                  line, fragment):
    # the range checks came later, with no word of the file ("temperature must be >= 0 (got -1.0)"), a bad
    # --cors-origin named `localspec serve --help`, and -c -3 was found only when llama.cpp was reached
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    for args in (("generate", "hi", "--target", fake_cli.target), ("config", "show", "generate")):
        assert_one_line_error(invoke(*args), f"{config}: {fragment}")


def test_a_defaults_seed_of_minus_one_is_a_random_seed_for_every_command(tmp_path, monkeypatch, fake_cli):
    # [defaults] is for every command that has the flag, and tune refused -1: every command failed
    # with "[defaults] seed = -1: --seed must be >= 0 (got -1)"
    config = tmp_path / "config.toml"
    config.write_text("[defaults]\nseed = -1\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    common = ["--target", str(fake_cli.target), "--draft", "none", "-n", "2"]
    assert run_json(*common, "--seed", "5")["settings"]["seed"] == 5
    assert run_json(*common)["settings"]["seed"] is None  # -1, from the file: drawn (stats.seed)
    for command in ("generate", "chat", "serve", "tune"):
        assert show(command, *(() if command == "tune" else ("--no-profile",)))["seed"] == ("-1", "config")
    seen = stop_tune_at_its_run(monkeypatch)
    result = invoke("tune", "-m", fake_cli.target, "--quants", "none")
    assert seen[0].seed >= 0 and f"seed {seen[0].seed} (drawn for --seed -1" in result.stderr


KEEP_IT = "; or, to keep it for the other commands, give {command} its own {key} in a [{command}] table"
CORRECT_IT = "; correct it in [defaults]: no command that takes {key} takes this value"


@pytest.mark.parametrize("line, command, fragment, fix", [
    ("max-tokens = -1", "tune", "max-tokens = -1: --max-tokens must be >= 2 (got -1)", KEEP_IT),
    # tune alone has --budget: there are no other commands to keep it for
    ("budget = 0", "tune", "budget = 0: --budget must be > 0 seconds (got 0.0)", CORRECT_IT),
])
def test_a_defaults_value_one_command_refuses_is_that_commands_error_alone(tmp_path, monkeypatch, fake_cli,
                                                                           line, command, fragment, fix):
    # each [defaults] key was checked for every command that has the flag, whichever ran: tune's
    # budget = 0 stopped generate, and the error named no fix
    config = tmp_path / "config.toml"
    config.write_text(f"[defaults]\n{line}\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    assert show("generate", "--no-profile")  # taken (or, for a flag it lacks, left to the others)
    fix = fix.format(command=command, key=line.split(" ")[0])
    assert_one_line_error(invoke(command, "-m", fake_cli.target), f"{config}: [defaults] {fragment}", fix)
    assert_one_line_error(invoke("config", "show", command), f"{config}: [defaults] {fragment}", fix)


@pytest.mark.parametrize("line, fragment", [
    ('top-k = "x"', "Invalid value for '--top-k': 'x' is not a valid integer"),
    ("temperature = -1", "--temperature must be"),
])
def test_a_defaults_value_every_command_refuses_says_to_correct_it_not_to_keep_it(tmp_path, monkeypatch, fake_cli,
                                                                                line, fragment):
    # was: "...; or, to keep it for the other commands, give generate its own top-k in a [generate]
    # table", though every other command refuses it as well
    config = tmp_path / "config.toml"
    config.write_text(f"[defaults]\n{line}\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    fix = CORRECT_IT.format(key=line.split(" ")[0])
    for command in ("generate", "chat", "serve", "tune"):
        result = invoke(command, "-m", fake_cli.target, input="")
        assert_one_line_error(result, f"{config}: [defaults] {line}: {fragment}", fix)
        assert "to keep it" not in result.output


def test_a_defaults_max_tokens_of_minus_one_runs_generate_to_the_end(tmp_path, monkeypatch, fake_cli):
    config = tmp_path / "config.toml"
    config.write_text("[defaults]\nmax-tokens = -1\n[tune]\nmax-tokens = 32\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    out = run_json("--target", str(fake_cli.target), "--draft", "none", "--temperature", "0", "--ctx", "48")
    assert out["settings"]["max_tokens"] is None and out["stats"]["finish_reason"] == "length"
    assert show("tune")["max_tokens"] == ("32", "config")  # tune's own table wins for tune


def test_a_config_value_of_the_right_kind_reads_as_its_flag(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[generate]\ngamma = 2\ntemperature = 0.5\ntop-k = 7\ntarget-only = true\nstop = ["a", "b"]\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    s = show("generate", "--no-profile")
    assert s["gamma"] == ("2", "config") and s["temperature"] == ("0.5", "config") and s["top_k"] == ("7", "config")
    assert s["target_only"] == ("True", "config") and s["stop"] == ("('a', 'b')", "config")


def test_a_repeatable_flags_one_value_in_the_config_file_is_a_list_of_one(tmp_path, monkeypatch, fake_cli):
    # `stop = "x"` was refused ("give a list"), where the command line takes one --stop x as a list of one
    config = tmp_path / "config.toml"
    config.write_text(f'[generate]\nstop = "x"\n[defaults]\ndraft = "{fake_cli.draft.as_posix()}"\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    assert show("generate", "--no-profile")["stop"] == ("('x',)", "config")
    assert show("tune")["drafts"] == (repr((str(fake_cli.draft.as_posix()),)), "config")  # tune's -d: also try it
    seen = stop_tune_at_its_run(monkeypatch)
    invoke("tune", "-m", fake_cli.target, "--quants", "none")
    assert seen[0].drafts == (fake_cli.draft,)
    config.write_text('[generate]\nstop = "x"\n[defaults]\ndraft = "none"\n')  # generate's no draft: tune adds none
    invoke("tune", "-m", fake_cli.target, "--quants", "none")
    assert seen[1].drafts == ()


def test_an_on_off_flags_off_name_is_a_config_key(tmp_path, monkeypatch):
    # was: "[generate] has no setting 'raw'", though --help lists --raw
    config = tmp_path / "config.toml"
    config.write_text('[generate]\nraw = true\nno-show-drafts = true\n')
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    s = show("generate", "--no-profile")
    assert s["chat"] == ("False", "config") and s["show_drafts"] == ("False", "config")
    assert show("generate", "--no-profile", "--chat")["chat"] == ("True", "flag")
    config.write_text('[generate]\nraw = false\n')  # not a guess between --chat and auto
    assert_one_line_error(invoke("generate", "hi"), f"{config}: [generate] raw = false: raw only turns chat off, "
                          "so give true; to turn it on, give chat = true")


def test_a_config_file_named_but_missing_or_a_directory_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "nope.toml"))
    assert_one_line_error(invoke("generate", "hi"), "LOCALSPEC_CONFIG names", "nope.toml", "does not exist")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path))
    assert_one_line_error(invoke("generate", "hi"), "is a directory")


@pytest.mark.parametrize("text, fragment", [
    ("[defaults]\ntemperature = -1\n", "[defaults] temperature = -1: --temperature must be >= 0"),
    ("[x", "cannot read the config file"),
    (None, "which does not exist; create it or unset LOCALSPEC_CONFIG"),
])
@pytest.mark.parametrize("command", ["generate", "chat", "tune"])
def test_a_config_file_error_is_json_with_json(tmp_path, monkeypatch, fake_cli, command, text, fragment):
    # the file was read by the group, before the command's --json could turn its error into JSON:
    # a plain 'Error:' line on stderr and nothing on stdout, where a bad flag gives JSON
    config = tmp_path / "config.toml"
    if text is not None:
        config.write_text(text)
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke(command, "-m", fake_cli.target, "--json", input="hi\n")
    assert result.exit_code == 1 and not result.stderr, result.output
    error = json.loads(result.stdout)["error"]
    assert fragment in error["message"] and str(config) in error["message"]
    assert_one_line_error(invoke(command, "-m", fake_cli.target, input="hi\n"), fragment)  # without: one line


def test_json_set_in_the_config_file_makes_a_bad_flag_json(tmp_path, monkeypatch, fake_cli):
    config = tmp_path / "config.toml"
    config.write_text("[generate]\njson = true\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke("generate", "hi", "-m", fake_cli.target, "--gamma", "abc")
    assert result.exit_code == 1 and "'abc' is not 'auto'" in json.loads(result.stdout)["error"]["message"]


def test_config_show_refuses_what_the_command_would_refuse(tmp_path, monkeypatch):
    # it parsed resiliently, so `--temp abc` printed temperature = None (flag) and exit code 0
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("")
    assert_one_line_error(invoke("config", "show", "generate", "--temp", "abc"), "'abc' is not a valid float")
    assert_one_line_error(invoke("config", "show", "generate", "--bogus"), "No such option '--bogus'")


@pytest.mark.parametrize("args, fragment", [
    (("--temp", "-1"), "--temperature must be >= 0 (got -1.0)"),
    (("-n", "0"), "--max-tokens must be >= 1"),
    (("--seed", "-5"), "--seed must be >= 0, or -1 for a random seed (got -5)"),
    (("-c", "-3"), "-3 is not in the range x>=0"),
])
@pytest.mark.parametrize("command", ["generate", "chat"])
def test_config_show_refuses_the_values_the_command_refuses(tmp_path, monkeypatch, fake_cli, command, args, fragment):
    # config show printed each of them and exit code 0
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("")
    assert_one_line_error(invoke(command, "--target", fake_cli.target, *args, input="hi"), fragment)
    assert_one_line_error(invoke("config", "show", command, *args), fragment)


@pytest.mark.parametrize("args, fragment", [
    (("--temp", "-1"), "--temperature must be >= 0 (got -1.0)"),
    (("--budget", "0"), "--budget must be > 0 seconds (got 0.0)"),
    (("--quants", "Q9_Z"), "Unknown quantization type 'Q9_Z' in --quants"),
])
def test_config_show_refuses_what_tune_refuses(tmp_path, monkeypatch, fake_cli, args, fragment):
    # tune's checks were written inside the command: config show printed them with exit code 0
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("")
    assert_one_line_error(invoke("tune", "--target", fake_cli.target, *args), fragment)
    assert_one_line_error(invoke("config", "show", "tune", *args), fragment)


def test_config_show_refuses_flags_that_exclude_each_other_as_generate_does(tmp_path, monkeypatch, fake_cli):
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("")
    for args, fragment in ((("--target-only", "--gamma", "4"), "--target-only decodes with the target alone"),
                           (("--raw", "--system", "Be brief."), "--system needs the chat template")):
        assert_one_line_error(invoke("generate", "hi", "--target", fake_cli.target, *args), fragment)
        assert_one_line_error(invoke("config", "show", "generate", *args), fragment)


def test_config_show_refuses_a_config_value_the_command_refuses(tmp_path, monkeypatch):
    # it was shown as "temperature = nan  (profile)": nan != nan read as a value the profile changed
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path / "config.toml"))
    (tmp_path / "config.toml").write_text("[defaults]\ntemperature = nan\n")
    assert_one_line_error(invoke("config", "show", "generate"), "temperature must be a finite number (got nan)")


@pytest.mark.parametrize("args, fragment", [
    (("generate", "hi", "--bogus-flag"), "No such option '--bogus-flag'; see `"),  # `localspec generate --help`
    (("generate", "hi", "extra"), "Got unexpected extra argument (extra); see `"),
    (("models", "list", "extra"), " models list --help`"),
    (("bogus",), "No such command 'bogus'; see `"),
])
def test_usage_mistakes_are_one_line_and_exit_code_1(args, fragment):
    result = invoke(*args)
    assert_one_line_error(result, fragment)
    assert result.exit_code == 1


def test_environment_variables_are_in_help():
    text = " ".join((invoke("generate", "--help").output + invoke("serve", "--help").output
                     + invoke("--help").output).split())
    for var in ("LOCALSPEC_TARGET", "LOCALSPEC_DRAFT", "LOCALSPEC_PROFILE", "LOCALSPEC_HOST", "LOCALSPEC_PORT",
                "LOCALSPEC_API_KEY", "LOCALSPEC_VERBOSE", "LOCALSPEC_CONFIG"):
        assert var in text, var


def test_the_readmes_environment_table_lists_every_variable_help_shows_and_the_code_reads():
    # it left out LOCALSPEC_DEVICE_TARGET, LOCALSPEC_DEVICE_DRAFT and LOCALSPEC_RPC, which --help lists,
    # then LOCALSPEC_CATALOG and LOCALSPEC_LISTEN_FD, which the package reads and --help does not list
    import re
    from pathlib import Path

    import localspec

    from localspec.config import SWITCHES

    def helps(command, path):
        yield invoke(*path, "--help").output
        for name, sub in getattr(command, "commands", {}).items():
            yield from helps(sub, [*path, name])

    shown = set(re.findall(r"LOCALSPEC_[A-Z_]+", " ".join(helps(cli, []))))
    readme = open("README.md", encoding="utf-8").read()
    heading = "The environment variables (those down to\n`LOCALSPEC_MODEL_DIRS` are also in the `--help` of"
    table = readme.split(heading, 1)[1].split("\n\n")[1]
    listed = set(re.findall(r"LOCALSPEC_[A-Z_]+", table))
    assert {"LOCALSPEC_TARGET", "LOCALSPEC_RPC", "LOCALSPEC_CONFIG", "LOCALSPEC_MODELS"} <= shown  # all found
    assert table.startswith("| variable | what |")
    # the heading says which rows --help shows too: it said all, and six are not (LOCALSPEC_CATALOG, ...)
    in_help, only_here = table.split("| `LOCALSPEC_MODEL_DIRS` |", 1)
    assert set(re.findall(r"LOCALSPEC_[A-Z_]+", in_help)) | {"LOCALSPEC_MODEL_DIRS"} == shown
    assert not set(re.findall(r"LOCALSPEC_[A-Z_]+", only_here)) & shown
    assert shown - listed == set() and set(SWITCHES) - listed == set()  # and those checked as a command starts
    package = Path(localspec.__file__).parent
    read = {name for path in package.rglob("*.py")
            for name in re.findall(r"\bLOCALSPEC_[A-Z0-9_]*[A-Z0-9]", path.read_text(encoding="utf-8"))}
    assert {"LOCALSPEC_CATALOG", "LOCALSPEC_WARM_START"} <= read  # all found
    assert read - listed == set(), f"read by the package, missing from the README's table: {sorted(read - listed)}"


def test_a_bad_value_names_the_flag_or_the_variable_it_came_from(tmp_path, monkeypatch):
    # click named the variable whatever gave the value: `serve --port abc` was "Invalid value for
    # '--port' (env var: 'LOCALSPEC_PORT')", with no LOCALSPEC_PORT set, and so was a config file's port
    given = invoke("serve", "--port", "abc")
    assert_one_line_error(given, "Invalid value for '--port': 'abc' is not")
    assert "LOCALSPEC_PORT" not in given.output
    from_env = invoke("serve", env={"LOCALSPEC_PORT": "abc"})
    assert_one_line_error(from_env, "Invalid value for 'LOCALSPEC_PORT' (the environment variable for '--port'): 'abc'")
    assert_one_line_error(invoke("generate", "hi", env={"LOCALSPEC_PROFILE": "maybe"}),
                          "Invalid value for 'LOCALSPEC_PROFILE' (the environment variable for '--profile'): 'maybe'")
    assert_one_line_error(invoke("models", "list", env={"LOCALSPEC_VERBOSE": "maybe"}),
                          "Invalid value for 'LOCALSPEC_VERBOSE' (the environment variable for '--verbose')")
    config = tmp_path / "config.toml"
    config.write_text("[serve]\nport = 0\n")
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    in_file = invoke("serve")
    assert_one_line_error(in_file, f"{config}: [serve] port = 0: Invalid value for '--port': 0 is not a port number")
    assert "LOCALSPEC_PORT" not in in_file.output


@pytest.mark.parametrize("value, said", [("x", "'x'"), ("1.5", "'1.5'"), ("0", "0"), ("65536", "65536")])
def test_a_port_that_is_not_one_is_said_to_be_not_a_port_number(value, said):
    # was: "'x' is not a valid integer range" (click's IntRange, by its type's name), and for 0 "0 is
    # not in the range 1<=x<=65535"
    fix = f"{said} is not a port number: give a whole number from 1 to 65535"
    assert_one_line_error(invoke("serve", env={"LOCALSPEC_PORT": value}),
                          f"Invalid value for 'LOCALSPEC_PORT' (the environment variable for '--port'): {fix}")
    assert_one_line_error(invoke("serve", "--port", value), f"Invalid value for '--port': {fix}")
    assert_one_line_error(invoke("rpc-server", "--port", value), f"Invalid value for '--port': {fix}")


@pytest.mark.parametrize("command, flag, least", [
    ("generate", "--ctx", 0), ("generate", "--threads", -1), ("serve", "--max-queue", 0),
    ("serve", "--max-body", 1), ("tune", "--n-prompts", 1), ("rpc-server", "--threads", -1),
])
@pytest.mark.parametrize("value", ["x", "1.5"])
def test_a_whole_number_flag_given_no_whole_number_says_what_is_wanted(command, flag, least, value):
    # was: "'x' is not a valid integer range" (click's IntRange, by its type's name)
    result = invoke(command, flag, value)
    assert_one_line_error(result, "Invalid value for", f"{value!r} is not a whole number: give one >= {least}")
    assert "integer range" not in result.output


def test_an_on_off_variable_lists_the_values_it_takes_readably():
    # was: "'maybe' is not a valid boolean. Recognized values: , 0, 1, f, false, ...": click's empty first
    # entry, which an empty variable never reaches (click takes it as unset); a blank one read as off
    takes = "give 1, true, yes or on (y, t), or 0, false, no or off (n, f); empty is as if unset"
    for value in ("maybe", "  "):
        result = invoke("generate", "hi", env={"LOCALSPEC_PROFILE": value})
        assert_one_line_error(result, f"(the environment variable for '--profile'): {value!r} is not on or off: {takes}")
    assert_one_line_error(invoke("models", "list", env={"LOCALSPEC_VERBOSE": "2"}), f"'2' is not on or off: {takes}")
    assert show("generate", env={"LOCALSPEC_PROFILE": ""})["use_profile"] == ("True", "default")
    assert show("generate", env={"LOCALSPEC_PROFILE": "Off"})["use_profile"] == ("False", "env")
    assert show("generate", env={"LOCALSPEC_PROFILE": "y"})["use_profile"] == ("True", "env")


def test_every_option_with_a_variable_names_where_its_bad_value_came_from():
    from localspec.cli.flags import EnvvarOption

    def options(command):
        yield from command.params
        for sub in getattr(command, "commands", {}).values():
            yield from options(sub)
    with_variable = [o for o in options(cli) if getattr(o, "envvar", None)]
    assert len(with_variable) >= 9 and all(isinstance(o, EnvvarOption) for o in with_variable), \
        [o.name for o in with_variable if not isinstance(o, EnvvarOption)]


def test_loading_line_names_models_sizes_and_places(tmp_path, monkeypatch):
    # was: "GPU" from -ngl alone, on a machine with no GPU, where --stats then said "runs on: target CPU"
    from localspec import devices
    from localspec.cli.options import loading_line
    from localspec.session import LoadOptions

    (tmp_path / "t.gguf").write_bytes(b"x" * 2**21)
    (tmp_path / "d.gguf").write_bytes(b"x" * 2**20)
    t, d = tmp_path / "t.gguf", tmp_path / "d.gguf"
    monkeypatch.setattr(devices, "local_devices", lambda: [])
    assert loading_line(t, d, LoadOptions(ngl_target=999, ngl_draft=999)) == \
        "localspec: loading target t.gguf (2 MiB, CPU) + draft d.gguf (1 MiB, CPU)"
    monkeypatch.setattr(devices, "local_devices", lambda: ["CUDA0"])
    assert loading_line(t, d, LoadOptions(ngl_target=999, ngl_draft=0)) == \
        "localspec: loading target t.gguf (2 MiB, GPU) + draft d.gguf (1 MiB, CPU)"
    assert loading_line(t, None, LoadOptions(ngl_target=999, device_target=("CPU",))) == \
        "localspec: loading target t.gguf (2 MiB, CPU)"


def test_nothing_prints_after_ctrl_c(capsys):
    # was: the piece in flight when Ctrl-C arrived still printed
    import signal

    from localspec.cli.chat import chat_answer
    from localspec.session import Reply
    from localspec.speculative import Piece
    from localspec.stats import GenerationStats

    class Session:
        def stop(self):
            self.stopped = True

        def send(self, text):
            yield Piece("one ", 1, False)
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)  # Ctrl-C while "two" is in flight
            yield Piece("two", 2, False)
            yield Reply("one two", "cancelled", GenerationStats(), 0, None, False, 64)

    session = Session()
    chat_answer(session, "hi", colour=False, show_stats=False)
    out = capsys.readouterr()
    assert session.stopped and "one " in out.out and "two" not in out.out and "[stopped]" in out.err


def test_chat_json_prints_one_object_per_answer(fake_cli):
    fake_cli.reply_len = 3
    result = invoke("chat", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "-n", "6", "--json",
                    input="hello\nagain\n")
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(answers) == 2 and all(a["text"] and a["settings"]["max_tokens"] == 6 for a in answers)
    assert answers[0]["settings"]["drafter"] == "auto" and answers[0]["stats"]["drafter"] == "hybrid"


def kind(line: dict) -> str:
    """What a chat --json line is: an answer, an error, or /stats's object."""
    return "error" if "error" in line else "answer" if "text" in line else "/stats" if "messages" in line else "?"


@pytest.mark.parametrize("draft", ["draft", "none"])
def test_chat_json_answers_have_the_shape_of_generate_json(fake_cli, draft):
    # chat --json had no "target" and kept "draft" and "draft_reason" inside "settings", where the
    # README says --json means the same on every command that generates
    fake_cli.reply_len = 3
    model = ["--target", str(fake_cli.target), "--draft", str(fake_cli.draft) if draft == "draft" else "none",
             "-n", "6", "--raw"]
    generated = json.loads(invoke("generate", "hello", *model, "--json").stdout)
    result = invoke("chat", *model[:-1], "--json", input="hello\n")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer.keys() == generated.keys() and answer["settings"].keys() == generated["settings"].keys()
    assert answer["stats"].keys() == generated["stats"].keys()
    for key in ("target", "draft", "draft_reason", "settings"):
        assert answer[key] == generated[key], key
    assert answer["finish_reason"] == answer["stats"]["finish_reason"]


def test_chat_json_gives_a_refused_message_its_error_line_on_stdout(fake_cli):
    # A message too long for the context was said on stderr only: a script reading one JSON line a
    # message fell out of step with the answers.
    fake_cli.reply_len = 3
    long = "word " * 400
    result = invoke("chat", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "-n", "6", "--json",
                    "-c", "128", input=f"hello\n{long}\nagain\n")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [kind(x) for x in lines] == ["answer", "error", "answer"]
    assert "tokens" in lines[1]["error"]["message"] and lines[1]["error"]["type"]


def test_chat_json_keeps_stdout_json_lines_through_commands(fake_cli, tmp_path):
    # /stats printed its summary lines on stdout between the answers' JSON lines
    fake_cli.reply_len = 3
    script = f"/stats\nhello\n/stats\n/save {tmp_path / 'c.json'}\n/reset\n/load {tmp_path / 'c.json'}\n/bogus\n"
    result = invoke("chat", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "-n", "6", "--json",
                    input=script)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert [kind(x) for x in lines] == ["/stats", "answer", "/stats"]
    assert lines[0]["stats"] is None and lines[2]["stats"]["generated_tokens"] == lines[1]["stats"]["generated_tokens"] > 0
    assert lines[2]["messages"] == 2 and 0 < lines[2]["tokens"] <= lines[2]["n_ctx"]
    assert "loaded 2 messages" in result.stderr and "unknown command /bogus" in result.stderr


def test_chat_load_of_a_file_that_is_missing_or_not_json_names_it(fake_cli, tmp_path):
    (tmp_path / "bad.json").write_text("not json")
    result = invoke("chat", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft),
                    input=f"/load {tmp_path / 'bad.json'}\n/load {tmp_path / 'none.json'}\n")
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 2 and "bad.json is not a conversation that /save wrote (not JSON" in errors[0]
    assert "cannot read" in errors[1] and "none.json" in errors[1] and "No such file" in errors[1]


def test_library_chat_alpha_is_none_on_every_turn_without_drafts(fake_cli, tmp_path):
    from localspec.config import GenerationConfig
    from localspec.chat import Chat
    from localspec.session import LoadOptions

    fake_cli.reply_len = 4
    pair = fake_cli.load(fake_cli.target, fake_cli.draft, LoadOptions(n_ctx=256))
    chat = Chat(pair, GenerationConfig(max_tokens=6, gamma=0))
    alphas = [list(chat.send(q))[-1].stats.alpha for q in ("one", "two", "three")]
    assert alphas == [None, None, None]
    drafted = list(chat.send("four", GenerationConfig(max_tokens=6, gamma=2, drafter="model", p_min=0)))[-1]
    assert isinstance(drafted.stats.alpha, float)
    saved = chat.save(tmp_path / "c.json")
    again = Chat(pair, GenerationConfig(max_tokens=6))
    assert again.load(saved) == len(chat.messages) and again.messages == chat.messages


@pytest.mark.parametrize("command", ["chat", "tune"])
def test_every_json_command_reports_errors_as_json(command):
    result = invoke(command, "--gamma" if command == "chat" else "--p-min", "abc", "--json")
    assert result.exit_code == 1 and "abc" in json.loads(result.stdout)["error"]["message"]


def test_serve_stats_prints_each_requests_stats(fake_cli, monkeypatch):
    from localspec import server

    seen = {}

    def fake_serve(pair, defaults, host, port, api_key, max_queue, log, *listen):
        seen["replies"] = list(pair.stream(pair.prompt_tokens("hi", False), defaults))

    monkeypatch.setattr(server, "serve", fake_serve)
    monkeypatch.setattr(server, "bind", lambda host, port: None)  # no socket: the fake serve listens nowhere
    result = invoke("serve", "--target", str(fake_cli.target), "--draft", str(fake_cli.draft), "-n", "4", "--stats")
    assert result.exit_code == 0, result.output
    assert seen["replies"] and "tokens: 4 generated" in result.stderr
    assert "--stats" in invoke("serve", "--help").output


@pytest.mark.parametrize("text", ["[x", "[generate]\ngamma = 1.5\n"])
def test_help_answers_while_the_config_file_is_broken(tmp_path, monkeypatch, fake_cli, text):
    # was: `generate --help` failed on the file, so the help that says how to fix it could not be read
    config = tmp_path / "config.toml"
    config.write_text(text)
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(config))
    result = invoke("generate", "--help")
    assert result.exit_code == 0 and "--gamma" in result.output
    assert_one_line_error(invoke("generate", "hi", "-m", fake_cli.target), str(config))


def test_stats_name_a_draft_left_unloaded_as_not_loaded_not_as_running_somewhere(fake_cli, monkeypatch):
    # was: "runs on: target CPU, draft CPU" where saved measurements had left the draft unloaded (the
    # ngram drafter here never asks for it), while the line above said "draft model not loaded"
    from localspec.session import Pair

    deferred = Pair.draft_deferred
    monkeypatch.setattr(Pair, "draft_deferred", lambda self: True)
    fake_cli.reply_len = 6
    result = invoke("generate", "hi", "--target", fake_cli.target, "--draft", fake_cli.draft, "--drafter", "ngram",
                    "-n", "4", "--stats")
    assert result.exit_code == 0, result.output
    assert fake_cli.loaded[-1].draft_model is None and "draft model not loaded)" in result.stderr
    assert result.stderr.rstrip().endswith("runs on: target CPU, draft not loaded (CPU if it is)")
    result = invoke("chat", "--target", fake_cli.target, "--draft", fake_cli.draft, "--drafter", "ngram",
                    "-n", "4", "--stats", input="hi\n")
    assert result.exit_code == 0, result.output
    assert "runs on: target CPU, draft not loaded (CPU if it is)" in result.stderr
    result = invoke("generate", "hi", "--target", fake_cli.target, "--draft", fake_cli.draft, "--drafter", "ngram",
                    "-n", "4", "--json")
    # was: "draft": "CPU" in --json while --stats said the draft was not loaded
    assert json.loads(result.stdout)["placement"] == {"target": "CPU", "draft": "not loaded (CPU if it is)"}
    monkeypatch.setattr(Pair, "draft_deferred", deferred)  # nothing saved: loaded, and named where it runs
    result = invoke("generate", "hi", "--target", fake_cli.target, "--draft", fake_cli.draft, "-n", "4", "--stats")
    assert result.stderr.rstrip().endswith("runs on: target CPU, draft CPU")
    result = invoke("generate", "hi", "--target", fake_cli.target, "--draft", fake_cli.draft, "-n", "4", "--json")
    assert json.loads(result.stdout)["placement"] == {"target": "CPU", "draft": "CPU"}


def test_tune_names_the_room_it_needs_by_field_to_the_library_and_by_flag_to_the_cli(fake_cli, monkeypatch):
    # a library caller with TuneOptions and LoadOptions was told to raise --ctx, --max-tokens, --gamma-max
    from localspec.session import LoadOptions
    from localspec.tune import TuneError, TuneOptions, tuner

    monkeypatch.setattr(tuner, "Pair", fake_cli.load)
    options = TuneOptions(max_tokens=8, gamma_max=4, budget_s=None, chat=False, load=LoadOptions(n_ctx=16))
    with pytest.raises(TuneError) as e:
        tuner.run_tune(fake_cli.target, options, ["def fibonacci(n): return n if n < 2 else the sum"], log=print)
    assert re.fullmatch(r"load\.n_ctx must be >= (\d+) \(got 16\): calibration prompt 1 has \d+ tokens, and 8 "
                        r"generated plus a draft of up to 4 need 13 more; or lower max_tokens or gamma_max",
                        str(e.value)), str(e.value)
    result = invoke("tune", "--target", fake_cli.target, "--ctx", "16", "-n", "8", "--gamma-max", "4", "--raw")
    assert result.exit_code == 1 and "Traceback" not in result.output  # after the "calibrating ..." line
    assert re.fullmatch(r"Error: --ctx must be >= \d+ \(got 16\): calibration prompt 1 has \d+ tokens, and 8 "
                        r"generated plus a draft of up to 4 need 13 more; or lower --max-tokens or --gamma-max",
                        result.output.splitlines()[-1]), result.output


# A Worded error that names a library setting (here llama.cpp's memory, in LoadOptions' words), as each of the
# CLI's side lines below may meet one; the CLI must say its flags, not the fields.
IN_FLAGS = "lower --ctx, --ngl-target or --ngl-draft"


def wordy_failure(*args, **kwargs):
    from localspec.llama import LlamaError

    raise LlamaError.naming("llama.cpp could not read the model; {lower_memory}")


def test_the_reason_for_no_draft_says_a_checks_error_in_flags(fake_cli, monkeypatch):
    # was: "could not check the installed models (...; lower n_ctx, ngl_target or ngl_draft in the Pair's LoadOptions)"
    monkeypatch.setattr("localspec.pairing.choose_draft", wordy_failure)
    result = invoke("generate", "hi", "--raw", "--target", fake_cli.target, "-n", "2")
    assert result.exit_code == 0, result.output
    assert ("localspec: draft none: no draft model: could not check the installed models (llama.cpp could not read "
            f"the model; {IN_FLAGS})") in result.stderr.splitlines()


def test_a_tune_profile_that_cannot_be_read_is_warned_of_in_flags(fake_cli, monkeypatch):
    # was: "warning: llama.cpp could not read the model; lower n_ctx, ngl_target or ngl_draft in the Pair's ..."
    monkeypatch.setattr("localspec.profile.load_profile", wordy_failure)
    result = invoke("generate", "hi", "--raw", "--target", fake_cli.target, "--draft", "none", "-n", "2")
    assert result.exit_code == 0, result.output
    assert f"warning: llama.cpp could not read the model; {IN_FLAGS}" in result.stderr.splitlines()


def test_models_list_says_a_file_it_cannot_read_in_flags(isolated_store, monkeypatch):
    # was: "(cannot read: llama.cpp could not read the model; lower n_ctx, ... in the Pair's LoadOptions)"
    from test_discovery import gguf

    gguf(isolated_store / "mine.gguf")
    monkeypatch.setattr("localspec.llama.model_info", wordy_failure)
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.output.splitlines() if line.startswith("mine.gguf")]
    assert f"(cannot read: llama.cpp could not read the model; {IN_FLAGS})" in line


def test_chat_says_a_failed_save_in_its_own_words(fake_cli, monkeypatch):
    # was the library's words: "cannot write there; Chat.save(path) to another folder"
    from localspec.chat import Chat
    from localspec.config import ModelError

    def refused(self, path):
        raise ModelError.naming("cannot write there; {save} to another folder")

    monkeypatch.setattr(Chat, "save", refused)
    result = CliRunner().invoke(cli, ["chat", "--target", str(fake_cli.target), "--draft", "none", "-n", "2"],
                                input="/save here.json\n/exit\n")
    assert result.exit_code == 0, result.output
    assert "Error: cannot write there; /save FILE to another folder" in result.stderr.splitlines()
