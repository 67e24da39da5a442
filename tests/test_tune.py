"""localspec tune: candidate discovery and a whole tune on tiny models, the replay that predicts and
the saved profile (pure: no model loaded), how generate applies a profile, and `models convert`
failing cleanly."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from localspec import profile, prompts
from localspec.llama import Model
from localspec.sampling import Dist, SamplingParams
from localspec.session import LoadOptions, Pair
from localspec.config import GenerationConfig
from localspec.stats import GenerationStats
from localspec.tune import candidates, measure, report, run_tune, tuner
from localspec.tune.options import TuneError, TuneOptions, parse_quants
from localspec.tune.replay import Costs, Run, model_guess, ngram_guess, overlap, replay
from clitools import assert_one_line_error, invoke
from test_discovery import hf_cached, ollama_model

SMALL = dict(max_tokens=16, gamma_max=3, confirm=3, budget_s=None, load=LoadOptions(n_ctx=512, threads=2))
PROMPTS = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n", "The capital of France is"]


@pytest.fixture(scope="session")
def alien(smol_q4_0, tmp_path_factory) -> Path:
    """SmolLM2 with token 1001 renamed: loads fine, but cannot draft for SmolLM2."""
    import gguf

    path = tmp_path_factory.mktemp("alien") / "alien.gguf"
    shutil.copy(smol_q4_0, path)
    reader = gguf.GGUFReader(path, "r+")
    tokens = reader.fields["tokenizer.ggml.tokens"]
    text = tokens.parts[tokens.data[1001]]  # b'\xc4\xa0loc' ('Ġloc'), edited in place: same length
    text[:] = np.frombuffer("∞".encode() + b"Q" * (len(text) - 3), dtype=np.uint8)
    reader.data.flush()
    del reader
    return path


@pytest.fixture
def store_pair(isolated_store, smol_path, smol_q4_0) -> tuple[Path, Path]:
    """The target (SmolLM2 Q4_1) and a compatible draft (its Q4_0 copy) in the model store, as links."""
    isolated_store.mkdir(parents=True, exist_ok=True)
    target, draft = isolated_store / "smol.gguf", isolated_store / "draft.gguf"
    target.symlink_to(smol_path)
    draft.symlink_to(smol_q4_0)
    return target, draft


@pytest.fixture
def fake_pair(isolated_store) -> tuple[Path, Path]:
    """A target and a draft file in the store that no test loads: profiles only read names and sizes."""
    isolated_store.mkdir(parents=True, exist_ok=True)
    target, draft = isolated_store / "smol.gguf", isolated_store / "draft.gguf"
    target.write_bytes(b"GGUF target" * 8)
    draft.write_bytes(b"GGUF draft")
    return target, draft


# --- candidates ---------------------------------------------------------------------------------

def test_discovery_finds_compatible_drafts_and_plans_derived_quants(store_pair, alien, isolated_store):
    target, draft = store_pair
    (isolated_store / "alien.gguf").symlink_to(alien)
    (isolated_store / "notes.gguf").write_bytes(b"not a model")
    cands, skipped = candidates.discover(target, quants=("Q4_0", "Q3_K_S", "Q2_K"))
    assert [(c.label, c.kind, c.quant) for c in cands] == [
        ("ngram", "ngram", ""),
        ("draft", "model", "Q4_0"),
        # Q4_0 itself is not re-made; the smaller types are planned, made on first use in the store:
        ("draft-q3_k_s", "model", "Q3_K_S"), ("draft-q2_k", "model", "Q2_K")]
    assert cands[2].source == draft.absolute() and cands[2].path == isolated_store / "draft-q3_k_s.gguf"
    assert not cands[2].path.exists()
    assert "alien.gguf: incompatible, token 1001 is 'Ġloc' in the target but '∞QQ' in the draft" in skipped
    assert any(s.startswith("notes.gguf: Not a GGUF file") for s in skipped)
    assert all("smol.gguf" not in s for s in skipped)  # the target itself is no candidate, and no news


def test_a_draft_not_smaller_than_the_target_is_left_out(isolated_store, smol_path, smol_q4_0):
    isolated_store.mkdir(parents=True, exist_ok=True)
    (isolated_store / "big.gguf").symlink_to(smol_path)  # Q4_1: larger than the Q4_0 target
    cands, skipped = candidates.discover(smol_q4_0, quants=())
    assert [c.label for c in cands] == ["ngram"]
    assert skipped == ["big.gguf: not smaller than the target"]


def test_the_target_given_as_a_draft_is_left_out_with_the_fix(store_pair, smol_path):
    # tune -m X --draft X dropped the draft silently, where a copy of X was reported as left out
    target, _ = store_pair
    for given in (target, smol_path):  # the file itself, and a link to it
        cands, skipped = candidates.discover(target, extra=[given], quants=())
        assert [c.label for c in cands] == ["ngram", "draft"]
        assert skipped == [f"{given.name}: it is the target itself; give a smaller model of the same vocabulary"]


def test_derived_drafts_are_not_derived_again(store_pair, isolated_store, smol_q4_0):
    target, _ = store_pair
    (isolated_store / "draft-q2_k.gguf").symlink_to(smol_q4_0)  # as if an earlier tune had made it
    cands, _ = candidates.discover(target, quants=("Q2_K",))
    assert [(c.label, c.source) for c in cands] == [("ngram", None), ("draft", None), ("draft-q2_k", None)]


def test_bad_quants_are_one_line_errors():
    assert parse_quants("q4_0, Q2_K") == ("Q4_0", "Q2_K") and parse_quants("none") == ()
    with pytest.raises(TuneError) as e:
        parse_quants("Q4_0,Q9")
    # TuneOptions' field to the library (it said "in --quants"), the flag to the CLI
    from localspec.cli.errors import said
    assert str(e.value).startswith("Unknown quantization type 'Q9' in quants; choose from F32")
    assert said(e.value).startswith("Unknown quantization type 'Q9' in --quants; choose from F32")


# --- the replay ---------------------------------------------------------------------------------

def length_run(known: list[int], prompt=(1, 2, 3)) -> Run:
    """A continuation cut by max_tokens: len(known) + 1 tokens generated, the last never drafted."""
    return Run(list(prompt), known, len(known) + 1, stopped=False)


def test_replay_follows_the_controller_at_fixed_gamma():
    run = length_run([0] * 9)  # 10 tokens generated
    beta = [1, 1, 1, 0, 1, 1, 1, 1, 1, 1]
    guess = model_guess(run, beta, [1.0] * 10, p_min=0.0)
    rng = np.random.default_rng(0)
    # (start, asked, drafted, accepted, draft decodes)
    assert replay(run, 2, 10, guess, rng) == [
        (0, 2, 2, 2, 2),   # both accepted: 3 tokens
        (3, 2, 2, 0, 2),   # position 3 rejected: the target's token only
        (4, 2, 2, 2, 2),
        (7, 2, 2, 2, 2)]   # drafts may reach position 8, the last before the cap of 10
    assert replay(run, 4, 10, guess, rng) == [
        (0, 4, 4, 3, 4),
        (4, 4, 4, 4, 4),
        (9, 0, 0, 0, 0)]   # one token left: a plain step, as the controller's cap makes it


def test_replay_stops_drafts_below_p_min_and_counts_the_extra_decode():
    run = length_run([0] * 9)
    conf = [1.0, 0.5] + [1.0] * 8  # the draft doubts position 1
    guess = model_guess(run, [1.0] * 10, conf, p_min=0.75)
    steps = replay(run, 3, 10, guess, np.random.default_rng(0))
    # At 0 it drafts one token then stops (sync + one decode = 2 decodes); accepted, the step emits 2.
    assert steps[0] == (0, 3, 1, 1, 2)
    assert steps[1] == (2, 3, 3, 3, 3)


def test_replay_of_the_ngram_drafter_scores_its_lookups():
    prompt = [5, 6, 7, 5, 6]
    run = length_run([7, 5, 6, 7, 9], prompt)  # 6 tokens generated
    guess = ngram_guess(run, greedy=True, is_eog=lambda t: False)
    steps = replay(run, 3, 6, guess, np.random.default_rng(0))
    # (5, 6) was followed by 7 5 6: all three right; then (6, 7) was followed by 5, but 9 came.
    assert steps == [(0, 3, 3, 3, 0), (4, 1, 1, 0, 0), (5, 0, 0, 0, 0)]


def test_acceptance_chance_at_t_above_zero_is_the_overlap_of_p_and_q():
    p = Dist(np.array([1, 2, 3]), np.array([0.5, 0.3, 0.2]))
    q = Dist(np.array([2, 3, 4]), np.array([0.6, 0.1, 0.3]))
    assert overlap(p, q) == pytest.approx(0.3 + 0.1)  # Σ min(p, q) over the shared tokens


def test_row_predicts_tokens_per_second_from_steps_and_costs():
    costs = Costs({1: 0.030, 2: 0.040, 3: 0.050}, step_s=0.001, row_s=0.0005)
    row = report.Row(candidates.NGRAM, steps={2: [[[(0, 2, 2, 2, 0), (3, 2, 2, 0, 0)]]]}, tokens=[4], costs=costs)
    # step 1: verify 3 + controller 0.001 + 2 rows 0.001; step 2: verify 3 + 0.001
    assert row.predicted(2) == pytest.approx(4 / (0.050 + 0.002 + 0.050 + 0.001))
    assert row.alpha(2) == 0.5 and row.alpha_at(2) == [0.5, 1.0]


def test_speed_scale_compares_the_verifies_of_real_runs_with_the_calibrated_curve():
    slow, other = GenerationStats(), GenerationStats()
    slow.verify_at = {1: [2, 0.24], 5: [1, 0.30]}   # calibrated: 2 x 0.10 + 1 x 0.25 = 0.45 s
    other.verify_at = {9: [3, 1.0]}                  # a batch size the curve lacks: not compared
    assert measure.speed_scale([slow, other], {1: 0.10, 5: 0.25}) == pytest.approx(0.54 / 0.45)
    assert measure.speed_scale([other], {1: 0.10}) == 1.0


def measured_row(cand: candidates.Candidate, tokens_per_s: float) -> report.Row:
    return report.Row(cand, measured=[GenerationStats(generated=100, total_s=100 / tokens_per_s)])


@pytest.mark.parametrize("ngram_tps, pick", [(10.2, "target only"), (10.4, "ngram")])
def test_speculation_is_picked_only_when_it_beats_target_only_by_3_percent(ngram_tps, pick):
    rows = [measured_row(candidates.TARGET_ONLY, 10.0), measured_row(candidates.NGRAM, ngram_tps)]
    assert tuner.choose(rows, confirmed=True).candidate.label == pick


# --- a whole tune on tiny models ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tuned(tmp_path_factory, smol_path, smol_q4_0):
    """One tune of SmolLM2 at T=0 with its Q4_0 copy in the store and a Q2_K derived from it."""
    store = tmp_path_factory.mktemp("tuned") / "models"
    store.mkdir()
    (store / "smol.gguf").symlink_to(smol_path)
    (store / "draft.gguf").symlink_to(smol_q4_0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOCALSPEC_MODELS", str(store))
        options = TuneOptions(sampling=SamplingParams(temperature=0.0), quants=("Q2_K",), p_min=0.0, **SMALL)
        said: list[str] = []
        result = run_tune(store / "smol.gguf", options, PROMPTS, log=said.append)
    return result, store, said


def test_tune_measures_every_candidate_and_confirms_the_best(tuned):
    result, store, said = tuned
    labels = [r.candidate.label for r in result.rows]
    drafts = [r.candidate.label for r in sorted(result.rows[2:4], key=lambda r: -r.predicted(r.gamma))]
    # ... and hybrid with γ auto over each of the two best predicted drafts, the best first: what
    # generate does without a profile
    assert labels == ["target only", "ngram", "draft", "draft-q2_k", *(f"hybrid auto, {d}" for d in drafts)]
    best_draft = drafts[0]
    assert (store / "draft-q2_k.gguf").is_file() and any("making draft-q2_k.gguf" in s for s in said)
    for row in result.rows[1:4]:
        assert sorted(row.steps) == [1, 2, 3] and all(row.predicted(g) > 0 for g in row.steps)
    for row in result.rows:
        assert len(row.measured) == len(PROMPTS)  # confirm=3: every candidate ran for real
    for hybrid in result.rows[-2:]:
        assert hybrid.gamma is None and {s.drafter for s in hybrid.measured} == {"ngram+model"}
    assert result.confirmed
    fastest = max(result.rows, key=lambda r: r.measured_tps())
    assert result.pick is (fastest if fastest.measured_tps() >= 1.03 * result.baseline.measured_tps()
                           else result.baseline)
    table = result.table()
    assert table.count("\n") == 1 + len(result.rows) and "← pick" in table
    assert f"| hybrid auto, {best_draft}" in table and "| auto |" in table


def test_replay_matches_the_real_runs_at_t0(tuned):
    # With p-min off and greedy decoding, the replay along the target's own continuation makes the
    # controller's exact steps, unless batched and single-token logits part at a near-tie.
    result, _, _ = tuned
    for row in result.rows[1:4]:
        steps = [s for passes in row.steps[row.gamma] for s in passes[0]]
        replayed = (sum(d for _, _, d, _, _ in steps), sum(a for _, _, _, a, _ in steps))
        real = (sum(s.drafted for s in row.measured), sum(s.accepted for s in row.measured))
        assert abs(replayed[1] - real[1]) <= 0.1 * max(real[0], 1), (row.candidate.label, replayed, real)
        assert all(s.generated == t for s, t in zip(row.measured, row.tokens))


def test_a_second_tune_reuses_the_derived_draft(tuned, monkeypatch):
    _, store, _ = tuned
    monkeypatch.setenv("LOCALSPEC_MODELS", str(store))
    monkeypatch.setattr("localspec.models.quantize", lambda *a, **k: pytest.fail("converted again"))
    cands, _ = candidates.discover(store / "smol.gguf", quants=("Q2_K",))
    assert [(c.label, c.source) for c in cands][-1] == ("draft-q2_k", None)  # a store file now


def test_budget_skips_drafts_and_confirmation(store_pair, monkeypatch):
    target, _ = store_pair
    now = [0.0]
    calibrate = tuner.Tuner.calibrate

    def calibrate_then_run_out(self):
        row = calibrate(self)
        now[0] = 1000.0  # past the 60 s budget
        return row

    monkeypatch.setattr(tuner.Tuner, "calibrate", calibrate_then_run_out)
    options = TuneOptions(sampling=SamplingParams(temperature=0.0), quants=("Q2_K",), **{**SMALL, "budget_s": 60})
    result = run_tune(target, options, PROMPTS[:1], log=lambda s: None, clock=lambda: now[0])
    notes = {r.candidate.label: r.note for r in result.rows}
    assert notes == {"target only": "", "ngram": "", "draft": "skipped: --budget", "draft-q2_k": "skipped: --budget"}
    assert not result.confirmed and "predicted only" in result.summary()
    assert not (target.parent / "draft-q2_k.gguf").exists()  # nothing derived without the time for it


# --- the profile --------------------------------------------------------------------------------

def test_profile_round_trip(fake_pair):
    target, draft = fake_pair
    greedy = profile.Choice("model", draft, 3, ngl_draft=0, temperature=0.0, tokens_per_s=40.0,
                            target_only_tokens_per_s=20.0)
    path = profile.save_profile(target, greedy, [{"candidate": "draft"}])
    assert path == target.parent / "smol.gguf.tune.json"
    got = profile.load_profile(target, 0.0)
    assert (got.drafter, got.draft, got.gamma, got.tokens_per_s, got.path) == ("model", draft, 3, 40.0, path)
    assert profile.load_profile(target, 0.7) is None  # tuned greedy only: sampled runs are not touched
    profile.save_profile(target, profile.Choice("ngram", None, 5, temperature=0.7))
    assert profile.load_profile(target, 0.7).drafter == "ngram" and profile.load_profile(target, 0).drafter == "model"
    assert json.loads(path.read_text())["modes"]["greedy"]["draft"] == "draft.gguf"  # relative: the store may move


def test_a_profile_for_another_apps_model_is_kept_in_the_store(isolated_store, monkeypatch, tmp_path):
    # Beside an Ollama model the profile lay among Ollama's blobs, which Ollama empties of every file
    # not named as a blob when it starts (and the service's folder is not the user's to write).
    ollama, hf = tmp_path / "ollama", tmp_path / "hf"
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("HF_HUB_CACHE", str(hf))
    blob = ollama_model(ollama, "smol", "latest", b" target" * 8)
    snapshot = hf_cached(hf, "org/smol-GGUF", "smol.gguf", b" other" * 8)
    before = {p: sorted(p.rglob("*")) for p in (ollama, hf)}
    for target, drafter in ((blob, "ngram"), (snapshot, "none")):
        path = profile.save_profile(target, profile.Choice(drafter, None, 4 if drafter == "ngram" else None))
        assert path.parent == isolated_store / ".profiles" and path == profile.profile_path(target)
        assert profile.load_profile(target, 0).drafter == drafter
    assert profile.profile_path(blob) != profile.profile_path(snapshot)
    assert {p: sorted(p.rglob("*")) for p in (ollama, hf)} == before  # nothing written among their files
    mine = tmp_path / "mine" / "smol.gguf"  # a folder of the user's own: beside the file, as before
    mine.parent.mkdir()
    mine.write_bytes(b"GGUF mine")
    assert profile.save_profile(mine, profile.Choice("ngram", None, 4)) == mine.parent / "smol.gguf.tune.json"


def test_unusable_profiles_are_named(fake_pair, tmp_path):
    target, draft = fake_pair
    path = profile.profile_path(target)
    path.write_text("{not json")
    with pytest.raises(profile.ProfileError, match=r"Cannot read the tune profile .*smol\.gguf\.tune\.json.*tune` again"):
        profile.load_profile(target, 0)
    gone = tmp_path / "gone.gguf"
    gone.write_bytes(b"GGUF")
    profile.save_profile(target, profile.Choice("model", gone, 2))
    gone.unlink()
    with pytest.raises(profile.ProfileError, match=r"names a draft that is gone \(.*gone\.gguf\)"):
        profile.load_profile(target, 0)
    data = json.loads(path.read_text())
    data["target_size"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(profile.ProfileError, match="made for another file named smol.gguf"):
        profile.load_profile(target, 0)


@pytest.mark.parametrize("key, value", [("tokens_per_s", "fast"), ("target_only_tokens_per_s", 0),
                                        ("target_only_tokens_per_s", -16.0), ("gamma", 3.7), ("gamma", True),
                                        ("ngl_draft", -5), ("temperature", float("nan")), ("p_min", 2.0),
                                        ("confirmed", "yes")])
def test_a_profile_value_tune_never_writes_is_named(fake_pair, key, value):
    # a speed as a string was a traceback in generate; gamma 3.7 was read as 3 and NaN as a temperature
    target, draft = fake_pair
    path = profile.save_profile(target, profile.Choice("model", draft, 3, tokens_per_s=40.0, target_only_tokens_per_s=20.0))
    data = json.loads(path.read_text())
    data["modes"]["greedy"][key] = value
    path.write_text(json.dumps(data))
    with pytest.raises(profile.ProfileError, match=rf"Cannot read the tune profile .*{key}"):
        profile.load_profile(target, 0)


def test_merge_profile_fills_only_what_the_user_left_out(fake_pair):
    target, draft = fake_pair
    choice = profile.Choice("model", draft, 3, ngl_draft=0, p_min=0.75)
    given = {"draft": None, "drafter": "auto", "gamma": None, "ngl_draft": 999, "p_min": 0.75}
    updates, note = profile.merge_profile(choice, given, set())
    assert updates == {"draft": draft, "drafter": "model", "gamma": 3, "ngl_draft": 0, "p_min": 0.75}
    assert note.startswith("profile: drafter model, draft draft.gguf, gamma 3")
    updates, note = profile.merge_profile(choice, {**given, "gamma": 5}, {"gamma"})
    assert "gamma" not in updates and note.endswith("your --gamma kept")
    updates, note = profile.merge_profile(choice, {**given, "draft": str(draft)}, {"draft"})  # the same draft
    assert updates["gamma"] == 3
    updates, note = profile.merge_profile(choice, {**given, "draft": "none"}, {"draft"})
    assert updates == {} and "not used, --draft differs" in note
    updates, note = profile.merge_profile(choice, {**given, "drafter": "ngram"}, {"drafter"})
    assert updates == {} and "not used, --drafter differs" in note
    plain = profile.Choice("none", None, 0)
    assert profile.merge_profile(plain, given, set())[0] == {"draft": None, "gamma": 0}  # cli: --draft none
    assert profile.merge_profile(plain, {**given, "gamma": 4}, {"gamma"})[0] == {}


def generate_json(target, *flags, env=None):
    result = invoke("generate", "1 2 3 4 5 1 2 3 4 5 1 2 3", "--target", target, "--raw", "--ctx", 256,
                    "--threads", 2, "--temperature", 0, "-n", 12, "--json", *flags, env=env)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_generate_applies_the_profile_unless_told_otherwise(store_pair):
    target, draft = store_pair
    profile.save_profile(target, profile.Choice("model", draft, 2, temperature=0.0, tokens_per_s=9.0,
                                             target_only_tokens_per_s=6.0))
    out, err = generate_json(target, "--stats")
    assert out["draft"] == str(draft) and out["stats"]["drafter"] == "model" and out["stats"]["gamma"] == 2
    assert "profile: drafter model, draft draft.gguf, gamma 2 (tuned at T=0: 9.0 tok/s, 1.50x target-only" in err
    assert out["draft_reason"] == "chosen by the tune profile"  # was "given with --draft"
    out, _ = generate_json(target, "--draft", draft)
    assert out["draft_reason"] == "given with --draft"
    out, err = generate_json(target, "--gamma", 1, "--stats")  # an explicit flag wins, the rest still applies
    assert out["stats"]["gamma"] == 1 and out["stats"]["drafter"] == "model" and "your --gamma kept" in err
    out, _ = generate_json(target, "--drafter", "ngram")  # a different drafter: the profile stands aside
    assert out["draft"] is None and out["stats"]["drafter"] == "ngram" and out["stats"]["gamma"] == "auto"
    # Without the profile, the draft is the one chosen for any target given no --draft: the smallest
    # installed model with its vocabulary (here the same file), with γ and drafter left at auto.
    for flags, env in ((["--no-profile"], None), ([], {"LOCALSPEC_PROFILE": "0"}), (["--temperature", 0.5], None)):
        out, err = generate_json(target, *flags, env=env)
        assert out["draft"] == str(draft) and out["stats"]["gamma"] == "auto", (flags, env)
        assert out["stats"]["drafter"] == "hybrid" and "profile:" not in err
        assert "smallest installed model" in out["draft_reason"]
    out, _ = generate_json(target, env={"LOCALSPEC_DRAFT": "none"})  # set in the environment: the user's choice
    assert out["draft"] is None and out["stats"]["drafter"] == "ngram"


def test_a_hybrid_auto_profile_loads_its_draft(store_pair):
    target, draft = store_pair
    profile.save_profile(target, profile.Choice("hybrid", draft, None, temperature=0.0))
    assert profile.load_profile(target, 0).gamma is None
    out, err = generate_json(target, "--stats")
    assert out["draft"] == str(draft) and out["stats"]["drafter"] == "hybrid" and out["stats"]["gamma"] == "auto"
    assert "profile: drafter hybrid, draft draft.gguf, gamma auto" in err


def test_a_broken_profile_warns_and_generate_goes_on(store_pair):
    target, _ = store_pair
    profile.profile_path(target).write_text("[]")
    out, err = generate_json(target)
    assert out["stats"]["generated_tokens"] == 12
    assert "warning: Cannot read the tune profile" in err


def test_tune_command_end_to_end(store_pair, tmp_path):
    target, _ = store_pair
    prompts_file = tmp_path / "p.jsonl"
    prompts_file.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
    png = tmp_path / "tune.png"
    result = invoke("tune", "--target", target, "--temperature", 0, "--prompts", prompts_file, "-n", 12,
                    "--gamma-max", 2, "--quants", "none", "--ctx", 512, "--threads", 2, "--plot", png)
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert table[0].startswith("| candidate | quant | device | best γ | α | predicted tok/s | measured tok/s")
    names = [line.split("|")[1].strip().replace(" ← pick", "") for line in table[2:]]
    assert names == ["target only", "ngram", "draft", "hybrid auto, draft"]
    assert "pick: " in result.stdout and f"profile: {profile.profile_path(target)}" in result.stdout
    assert profile.load_profile(target, 0) is not None
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, fragments", [
    (["--quants", "Q9_Z"], ["Unknown quantization type 'Q9_Z'"]),
    (["--max-tokens", "1"], ["--max-tokens must be >= 2"]),
    (["--budget", "0"], ["--budget must be > 0"]),
])
def test_tune_bad_flags(store_pair, flags, fragments):
    target, _ = store_pair
    assert_one_line_error(invoke("tune", "--target", target, *flags), *fragments)


@pytest.mark.parametrize("name, fragments", [("no-such-folder/t.png", ["Cannot write the plot", "no-such-folder"]),
                                             ("t.txt", ["--plot", "cannot write .txt files", ".png"])])
def test_a_plot_that_cannot_be_written_is_refused_before_the_run(store_pair, tmp_path, name, fragments):
    # it was found after the whole run (up to --budget seconds): the profile saved, the table lost
    target, _ = store_pair
    result = invoke("tune", "--target", target, "--plot", tmp_path / name, "--quants", "none")
    assert_one_line_error(result, *fragments)
    assert not profile.profile_path(target).exists() and "candidates" not in result.output


def test_tune_seed_help_offers_the_random_seed_tune_takes():
    # -1 was advertised as random (the shared flag's help) and then refused; it is taken now
    # (tests/test_cli_habits.py: test_tune_seed_minus_one_draws_a_seed_and_reports_it)
    help_text = " ".join(invoke("tune", "--help").output.split())
    assert "-1: a random one, reported" in help_text.split("--seed")[1].split("--")[0]


def test_a_draft_named_with_d_that_is_no_gguf_is_refused(store_pair, tmp_path):
    # it was left out with a note and tune ran on (exit 0); a missing one was already an error
    target, _ = store_pair
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    assert_one_line_error(invoke("tune", "--target", target, "-d", bad, "--quants", "none"), "Not a GGUF file", "notes.gguf")


def test_a_pick_only_predicted_keeps_a_confirmed_profile(store_pair):
    # a run cut short by --budget replaced a measured, confirmed pick with an unconfirmed prediction
    target, _ = store_pair
    profile.save_profile(target, profile.Choice("ngram", None, 5, temperature=0.0, tokens_per_s=30.0,
                                             target_only_tokens_per_s=20.0, confirmed=True))
    # one calibration prompt and drafts of up to 2 (the defaults, 8 and 8, calibrated 4x longer): the budget
    # runs out after the calibration all the same
    result = invoke("tune", "--target", target, "--temperature", 0, "-n", 8, "--quants", "none", "--budget", 0.001,
                    "--threads", 2, "--ctx", 512, "--n-prompts", 1, "--gamma-max", 2, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["profile_kept"] is True and "kept the confirmed profile" in result.stderr
    assert json.loads(result.stdout)["seed"] == 1  # the calibration's seed, as --seed -1 draws it too
    kept = profile.load_profile(target, 0)
    assert (kept.drafter, kept.gamma, kept.confirmed) == ("ngram", 5, True)


def test_tune_bad_prompts_file(store_pair, tmp_path):
    target, _ = store_pair
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"text": "no prompt key"}\n')
    assert_one_line_error(invoke("tune", "--target", target, "--prompts", bad), "bad.jsonl line 2", '"prompt"')


def test_a_prompts_file_is_checked_line_by_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n{"prompt": "c"}\n')
    assert prompts.load_prompts(path, 2) == ["a", "b"]  # blank lines skipped, the first n kept
    path.write_text('{"prompt": "a"}\n{"prompt": ""}\n')
    with pytest.raises(prompts.PromptsError, match=r"p\.jsonl line 2 is not a JSON object with a non-empty"):
        prompts.load_prompts(path)
    path.write_text("\n")
    with pytest.raises(prompts.PromptsError, match="holds no prompts"):
        prompts.load_prompts(path)


def test_default_prompts_ship_with_the_package():
    texts = prompts.load_prompts()
    assert len(texts) == 8 and texts[0].startswith("from typing import List")


# --- convert ------------------------------------------------------------------------------------

def test_converting_a_truncated_file_says_it_may_be_truncated(smol_path, tmp_path):
    # "try another type" alone, for a source no type could be made from
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smol_path.read_bytes()[:1_000_000])
    result = invoke("models", "convert", cut, "--quant", "q8_0", "--out", tmp_path / "out.gguf")
    assert_one_line_error(result, "truncated or corrupt", "localspec models check")
    assert not (tmp_path / "out.gguf").exists()


def test_convert_writes_a_model_that_loads_and_generates(smol_path, tmp_path):
    out = tmp_path / "new" / "smol-q8.gguf"  # the folder is made
    result = invoke("models", "convert", smol_path, "--quant", "q8_0", "--out", out)
    assert result.exit_code == 0 and f"wrote {out}" in result.output, result.output
    assert Model(out, vocab_only=True).meta("general.file_type") == "7"  # Q8_0
    pair = Pair(out, None, LoadOptions(n_ctx=128, threads=2))
    try:
        tokens = pair.prompt_tokens("The sky is", chat=False)
        *pieces, reply = pair.stream(tokens, GenerationConfig(max_tokens=4, gamma=0, sampling=SamplingParams(0.0)))
        assert reply.stats.generated == 4 and "".join(p.text for p in pieces)
    finally:
        pair.close()


def test_convert_to_a_type_llama_cpp_refuses_leaves_nothing(smol_path, tmp_path, monkeypatch):
    # IQ2_XXS needs an importance matrix: llama.cpp starts, then refuses. Offer it as if it were known.
    from localspec import llama

    monkeypatch.setitem(llama.QUANT_TYPES, "IQ2_XXS", 19)
    out = tmp_path / "made" / "for" / "it.gguf"
    result = invoke("models", "convert", smol_path, "--quant", "IQ2_XXS", "--out", out)
    assert_one_line_error(result, "llama.cpp refused to convert", "IQ2_XXS")
    assert list(tmp_path.iterdir()) == []  # no file, no temporary file, no folder made for it


def test_convert_to_an_unknown_type_leaves_nothing(smol_path, tmp_path):
    result = invoke("models", "convert", smol_path, "--quant", "Q9_Z", "--out", tmp_path / "sub" / "x.gguf")
    assert_one_line_error(result, "Unknown quantization type 'Q9_Z'", "Q4_0")
    assert list(tmp_path.iterdir()) == []


def test_convert_to_an_unwritable_destination_leaves_nothing(smol_path, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("a file, not a folder")  # (permission bits do not stop root; this does)
    result = invoke("models", "convert", smol_path, "--quant", "Q8_0", "--out", a_file / "x.gguf")
    assert_one_line_error(result, "Cannot write to", "writable folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"] and a_file.read_text() == "a file, not a folder"
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        result = invoke("models", "convert", smol_path, "--quant", "Q8_0", "--out", locked / "x.gguf")
        assert_one_line_error(result, "Cannot write to", "Permission denied")
        assert list(locked.iterdir()) == []


def test_convert_refuses_to_overwrite(smol_path, tmp_path):
    existing = tmp_path / "x.gguf"
    existing.write_bytes(b"keep me")
    assert_one_line_error(invoke("models", "convert", smol_path, "--quant", "Q8_0", "--out", existing),
                          "already exists")
    assert existing.read_bytes() == b"keep me"
