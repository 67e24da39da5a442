"""Tune's own drafters (a probe that times verifies, a timer around a model draft) in the real
controller loop on fake contexts: they follow the drafter protocol the controller calls."""

from __future__ import annotations

import inspect
import io
import sys
from pathlib import Path

from localspec.drafters import Drafter, ModelDrafter
from localspec.sampling import SamplingParams
from localspec.tune.measure import ProbeDrafter, TimedDrafter, run_drafter
from localspec.tune.options import TuneOptions

from fakes import fake_contexts

OPTIONS = TuneOptions(max_tokens=12, gamma_max=3, budget_s=None)


def test_probe_drafter_times_verifies_of_k_tokens_in_the_loop():
    target, _ = fake_contexts(draft=False)
    prompt = target.model.tokenize("def add(a, b):")
    for k in (2, 4):
        stats = run_drafter(target, prompt, ProbeDrafter(target.model.n_vocab - 1), OPTIONS, k - 1, 0, max_tokens=k + 3)
        n, seconds = stats.verify_at[k]
        assert n >= 1 and seconds > 0  # every step verified k tokens: k - 1 probes and the bonus row


def test_timed_drafter_counts_the_draft_decodes_of_a_model_draft():
    target, draft = fake_contexts()
    prompt = target.model.tokenize("The capital of France is")
    timed = TimedDrafter(ModelDrafter(draft, SamplingParams(temperature=0.0)))
    stats = run_drafter(target, prompt, timed, OPTIONS, 3, 0)
    assert stats.steps > 0 and stats.drafted > 0
    assert timed.decodes >= stats.drafted and timed.seconds > 0


def test_every_drafter_takes_the_protocols_arguments():
    """The controller calls propose(context, k, rng, stop, branch) on whatever drafter it holds."""
    protocol = list(inspect.signature(Drafter.propose).parameters)[1:]
    for cls in (ProbeDrafter, TimedDrafter):
        params = list(inspect.signature(cls.propose).parameters)[1:]
        assert params == protocol, f"{cls.__name__}.propose{params} differs from Drafter.propose{protocol}"


def test_drafts_are_tried_on_a_gpu_only_where_this_machine_has_one(monkeypatch):
    """An RPC-enabled build reports GPU offload support with no GPU (and RPC servers, added earlier in
    the process, hold the target, not drafts): tune timed every draft twice on the CPU."""
    from localspec.tune import candidates

    monkeypatch.setattr(candidates, "local_devices", lambda: [])
    assert candidates.default_devices() == ("cpu",)
    monkeypatch.setattr(candidates, "local_devices", lambda: ["CUDA0"])
    assert candidates.default_devices() == ("cpu", "gpu")


def test_progress_off_a_terminal_is_a_line_per_message(monkeypatch, capsys):
    """In a log file the progress bar's carriage returns put its states, the news printed above it and
    tune's "left out:" line after it on one line; there each is a line of its own."""
    from localspec.tune import tuner
    from localspec.tune.candidates import NGRAM, Candidate

    monkeypatch.setattr(tuner, "Pair", lambda *args: None)  # no model loaded: only the progress is run
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731  (as the CLI's click.echo(err=True))
    cands = [NGRAM, Candidate("small.gguf Q4_0 cpu", "model")]

    def run_and_leave_out() -> None:
        run = tuner.Tuner(Path("t.gguf"), OPTIONS, ["hi"], log=log, progress=True)
        for cand in run._progress(cands):
            run.say(f"measured {cand.label}")
        print("left out: x.gguf: not GGUF", file=sys.stderr)

    run_and_leave_out()  # stderr is captured: no terminal
    assert capsys.readouterr().err.splitlines() == [
        "candidate 1/2: ngram", "measured ngram", "candidate 2/2: small.gguf Q4_0 cpu",
        "measured small.gguf Q4_0 cpu", "left out: x.gguf: not GGUF"]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    monkeypatch.setattr(sys, "stderr", Terminal())
    run_and_leave_out()  # on a terminal the bar stays, redrawn in place
    assert "\rcandidates:" in sys.stderr.getvalue() and "measured ngram\n" in sys.stderr.getvalue()


def test_the_readmes_tune_lines_leave_the_tests_models_without_a_profile(tmp_path):
    # was: `LOCALSPEC_MODELS=$M localspec tune -m $M/…f16.gguf`: tune saves its pick beside the file -m
    # names, so the tests' models folder got a profile that every later `localspec generate -m
    # $M/…f16.gguf` took --draft/--drafter/--gamma/--p-min from. A link in a scratch folder keeps it there.
    import os
    import re

    from localspec import profile

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"localspec tune\b[^\n]*?\s(?:-m|--target|--model)\s+(\S+)", readme)
    assert targets and not [t for t in targets if t.startswith("$M/")], targets
    (tmp_path / "M").mkdir(), (tmp_path / "S").mkdir()
    (tmp_path / "M" / "t.gguf").write_bytes(b"GGUF")
    os.symlink(tmp_path / "M" / "t.gguf", tmp_path / "S" / "t.gguf")
    assert profile.profile_path(tmp_path / "S" / "t.gguf") == tmp_path / "S" / "t.gguf.tune.json"
