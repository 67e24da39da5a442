#!/usr/bin/env python3
"""The exhaustive grid behind `localspec tune`: every candidate tune considers (the same discovery:
store drafts, derived types, n-gram) at every γ in 1..γmax, plus target-only and, per draft, hybrid
with γ auto (what tune also confirms), each measured by real runs on the same calibration prompts,
alternating prompt by prompt in ONE process, warm-up excluded.
Then the tuner's pick, read from the target's saved profile, is looked up in the grid: how far is it
from the grid's best? The profile's predictions are compared with the grid at every (candidate, γ).

    localspec tune --temperature 0 && python scripts/tune_grid.py --temperature 0
    python scripts/tune_grid.py --target X.gguf --gamma-max 8 --rounds 2
    python scripts/tune_grid.py --quick          # tiny SmolLM2 models: checks the report's shape
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import localspec  # noqa: F401  (llama.cpp before numpy)
from localspec import models, naming, profile, tune
from localspec.config import ModelError
from localspec.sampling import SamplingParams
from localspec.session import LoadOptions, Pair

from bench import load_prompt_file, smol_path
from script_args import Parser


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", help="catalog name or .gguf path (default: the default pair's target)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--prompts", type=Path, help="JSONL of {\"prompt\": ...} (default: tune's 8 HumanEval prompts)")
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--gamma-max", type=int, default=8)
    ap.add_argument("--quants", default=",".join(tune.DERIVED_QUANTS))
    ap.add_argument("--p-min", type=float, default=0.75)
    ap.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1, help="passes over the prompts")
    ap.add_argument("--out", type=Path, default=Path("bench-out/tune-grid"))
    ap.add_argument("--quick", action="store_true", help="tiny SmolLM2 pair, 2 prompts, 16 tokens, gamma <= 3")
    return ap.parse_args(argv)


def quick_target(folder: Path) -> Path:
    """A store holding SmolLM2-135M and a Q4_0 copy of it, for --quick; returns the target."""
    from localspec.llama import quantize

    folder.mkdir(parents=True, exist_ok=True)
    os.environ["LOCALSPEC_MODELS"] = str(folder)
    target = folder / "smol.gguf"
    if not target.exists():
        target.symlink_to(smol_path())
    if not (folder / "draft.gguf").exists():
        quantize(target, folder / "draft.gguf", "Q4_0")
    return target


def run_grid(pair: Pair, prompt_ids, configs, options: tune.TuneOptions, rounds: int) -> dict:
    """Every prompt, every (candidate, γ) in turn, measured as tune confirms (tune.RealRuns: each
    configuration keeps its n-gram index and cost trackers across prompts, as a Pair does);
    returns (candidate, γ) -> [GenerationStats]."""
    results = {key: [] for key in configs}
    real = tune.RealRuns(pair.target_ctx, options)
    try:
        real.load(cand for cand, _ in configs)
        real.warm_up(prompt_ids[0])
        t0 = time.time()
        for r in range(rounds):
            for i, prompt in enumerate(prompt_ids):
                for cand, gamma in configs:
                    results[(cand, gamma)].append(real.run(cand, gamma, prompt, i))
                print(f"  round {r + 1} prompt {i + 1}/{len(prompt_ids)} done at {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        real.close()
    return results


def tps(runs) -> float:
    seconds = sum(s.total_s for s in runs)
    return sum(s.generated for s in runs) / seconds if seconds else 0.0


def pick_key(choice: profile.Choice | None, configs):
    """The grid key of the profile's choice, or None."""
    if choice is None:
        return None
    for cand, gamma in configs:
        if choice.drafter == "none" and cand.kind == "none":
            return cand, gamma
        same = cand.kind == choice.drafter and gamma == choice.gamma and (
            cand.path is None or os.path.samefile(cand.path, choice.draft))
        if same:
            return cand, gamma
    return None


def report(results, base_key, pick, predicted: dict) -> tuple[str, dict]:
    """A markdown table (best first) and the summary numbers. tune's predictions are scaled by this
    run's target-only speed over the one tune predicted (the machine's speed drifts between runs)."""
    speed = {key: tps(runs) for key, runs in results.items()}
    base = speed[base_key]
    best = max(speed, key=speed.get)
    drift = base / predicted[(base_key[0].label, 0)] if (base_key[0].label, 0) in predicted else 1.0
    predicted = {key: value * drift for key, value in predicted.items()}
    lines = ["| candidate | γ | measured tok/s | vs target-only | α | tune's prediction | pred/meas |",
             "|---|---|---|---|---|---|---|"]
    for key in sorted(speed, key=speed.get, reverse=True):
        cand, gamma = key
        drafted = sum(s.drafted for s in results[key])
        alpha = f"{sum(s.accepted for s in results[key]) / drafted:.2f}" if drafted else ""
        pred = predicted.get((cand.label, gamma))
        mark = " ← tune's pick" if key == pick else (" ← grid best" if key == best else "")
        lines.append(f"| {cand.label}{mark} | {'auto' if gamma is None else gamma} | {speed[key]:.1f} | {speed[key] / base:.2f}x | {alpha} | "
                     f"{'' if pred is None else f'{pred:.1f}'} | {'' if pred is None else f'{pred / speed[key]:.2f}'} |")
    summary = {"best": f"{best[0].label} γ={best[1] if best[1] is not None else 'auto'}", "best_tokens_per_s": speed[best],
               "target_only_tokens_per_s": base}
    if pick is not None:
        summary.update(pick=f"{pick[0].label} γ={pick[1] if pick[1] is not None else 'auto'}", pick_tokens_per_s=speed[pick],
                       pick_vs_best=speed[pick] / speed[best], within_5_percent=speed[pick] >= 0.95 * speed[best])
    errors = [abs(predicted[(k[0].label, k[1])] / speed[k] - 1) for k in speed if (k[0].label, k[1]) in predicted]
    if errors:
        summary.update(prediction_error_median=sorted(errors)[len(errors) // 2], prediction_error_max=max(errors),
                       drift=drift)
    return "\n".join(lines), summary


def profile_predictions(choice: profile.Choice | None, target: Path, temperature: float) -> dict:
    """(candidate label, γ) -> tokens/s that tune predicted, from the profile's saved table."""
    if choice is None:
        return {}
    entry = json.loads(profile.profile_path(target).read_text())["modes"][profile.mode_of(temperature)]
    return {(row["candidate"], int(g)): v for row in entry.get("candidates", [])
            for g, v in row.get("predicted_by_gamma", {}).items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.n_prompts, args.max_tokens, args.gamma_max, args.quants = 2, 16, 3, "none"
        target = quick_target(args.out / "store")
    else:
        try:
            target = naming.resolve_model(args.target or models.resolve_pair(None)[0])
        except ModelError as e:
            sys.exit(f"tune_grid.py: {e}")
    options = tune.TuneOptions(sampling=SamplingParams(temperature=args.temperature), p_min=args.p_min,
                               max_tokens=args.max_tokens, gamma_max=args.gamma_max, budget_s=None, seed=args.seed,
                               chat=args.chat, load=LoadOptions(n_ctx=args.ctx, threads=args.threads),
                               quants=tune.parse_quants(args.quants)).validate()
    candidates, skipped = tune.discover(target, (), options.quants)
    candidates = [tune.materialize(c, lambda s: print(s, file=sys.stderr)) for c in candidates]
    configs = [(tune.TARGET_ONLY, 0)] + [(c, g) for c in candidates for g in range(1, args.gamma_max + 1)]
    configs += [(tune.hybrid_of(c), None) for c in candidates if c.kind == "model"]
    pair = Pair(target, None, options.load)
    try:
        prompt_ids = tune.prompt_tokens(pair, load_prompt_file(args.prompts, args.n_prompts), options.chat)
        print(f"grid: {len(configs)} configurations x {len(prompt_ids)} prompts x {args.max_tokens} tokens "
              f"x {args.rounds} rounds", file=sys.stderr)
        t0 = time.time()
        results = run_grid(pair, prompt_ids, configs, options, args.rounds)
        wall = time.time() - t0
    finally:
        pair.close()
    try:
        choice = profile.load_profile(target, args.temperature)
    except profile.ProfileError as e:
        print(f"no usable profile: {e}", file=sys.stderr)
        choice = None
    table, summary = report(results, configs[0], pick_key(choice, configs),
                            profile_predictions(choice, target, args.temperature))
    print(f"\n{target.name}, T={args.temperature}, {len(prompt_ids)} prompts x {args.max_tokens} tokens, "
          f"{args.rounds} round(s), grid {wall:.0f} s\n")
    print(table)
    print("\n" + json.dumps(summary, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "grid.md").write_text(table + "\n")
    (args.out / "grid.json").write_text(json.dumps({"target": str(target), "skipped": skipped, "wall_s": wall,
                                                    "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
