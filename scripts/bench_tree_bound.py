#!/usr/bin/env python3
"""What a tree of the draft's ranked guesses could give over a chain of them, beside localspec's, in ONE run.

A tree whose children at each node are the draft's most likely tokens there, in its order (its first
guess, its second, ...), is verified by an exact rule (rule_tree: recursive rejection sampling; at
T=0, the target's argmax down the tree). With such deterministic guesses the token emitted at a node
follows the target's distribution and is one of the node's children exactly when the rule accepts
one. So how deep a step gets is how far the reply, as the target itself would write it, stays inside
the tree: the draft's rank of each token of a target-only reply (the draft reads the prompt and the
reply in one decode) decides every step of every tree, at any temperature.

Priced on this machine's costs (the target's verify of k rows and the draft's decode of k rows at
the prompt's depth, measured right after each reply), over the same target-only replies:

- the tree oracle: a step that knows the reply drafts exactly as deep as pays, its tree holding, at
  each depth, the draft's guesses down to the reply's token there (a node whose child of rank r is
  drafted holds ranks 1..r too), priced at one draft row a depth. No tree of these guesses, whatever
  its shape rule, exceeds it; the chain oracle is the same with the first guess alone;
- the best fixed shape (as SpecInfer and Sequoia fix one): every step drafts the same tree, the N rank
  paths that the replies' steps reach most often, every N up to a cap tried, each level's nodes
  drafted in one batched draft decode (a chain among them); and the best fixed chain (γ), the same
  with first guesses only.

Beside them localspec's model drafter with trees (auto) and with chains only, each measured against
target-only side by side (the three alternate reply by reply). A speed the tree oracle does not reach
is out of reach for any tree of this draft's guesses on these costs; the oracles' ratio is what
branching adds where both know where the reply goes.

    python scripts/bench_tree_bound.py --target big.gguf --draft small.gguf \\
        --prompt-set humaneval --n-prompts 4 --max-tokens 96 --rounds 3 --temperature 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the prompt sets and the reply order)
from bench_copy_bound import curve_of, streamed  # noqa: E402
from bench_stop_bound import decode_medians, rate, rows_along  # noqa: E402
from script_args import Parser  # noqa: E402
from localspec.config import GenerationConfig  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402
from localspec.session import Pair  # noqa: E402

VERIFY_WIDTHS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64)  # target rows measured; linear between
DRAFT_WIDTHS = (1, 2, 3, 4, 6, 8)  # draft rows measured
MAX_RANK = 4      # the deepest guess a tree holds at a node (the draft's fourth most likely token)
SCENARIOS = ("target-only", "trees", "chain")


class Costs(NamedTuple):
    verify: Callable[[int], float]  # seconds of a target decode of k rows
    draft: Callable[[int], float]   # seconds of a draft decode of k rows


def draft_ranks(rows: Sequence[np.ndarray], tokens: Sequence[int]) -> np.ndarray:
    """The draft's rank of each reply token (1: its most likely) from its logits there."""
    return np.array([1 + int((row > row[t]).sum()) for row, t in zip(rows, tokens)])


def oracle_seconds(ranks: Sequence[int], costs: Costs, cap: int, max_rank: int) -> float:
    """The least seconds over the reply for steps that know it: a step at position i drafting d tokens
    (each of rank ≤ max_rank, d ≤ cap, the reply's last token never drafted) verifies 1 + Σ ranks rows
    and decodes d + 1 draft rows (the token before the first guess, each guess: the path alone) and
    emits d + 1 tokens; a plain step one row, one token."""
    n = len(ranks)
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        best[i] = costs.verify(1) + best[i + 1]
        rows = 1
        for d in range(1, min(cap, n - i - 1) + 1):
            if ranks[i + d - 1] > max_rank:
                break
            rows += int(ranks[i + d - 1])
            best[i] = min(best[i], costs.verify(rows) + (d + 1) * costs.draft(1) + best[i + d + 1])
    return best[0]


def path_counts(replies: Sequence[Sequence[int]], depth: int, max_rank: int) -> Counter:
    """How many step starts (every position of every reply) reach each rank path of up to depth
    guesses: the path (r1, …, rj) is reached where the reply's next j tokens have those ranks."""
    counts: Counter = Counter()
    for ranks in replies:
        for i in range(len(ranks) - 1):
            path: tuple[int, ...] = ()
            for r in ranks[i : min(i + depth, len(ranks) - 1)]:
                if r > max_rank:
                    break
                path += (int(r),)
                counts[path] += 1
    return counts


def fixed_shape(counts: Counter, nodes: int) -> frozenset:
    """The tree of the nodes rank paths reached most often, each with its parent and its elder
    siblings (ranks 1..r of a node's children are all drafted), most often reached first."""
    shape: set = set()
    for path, _ in sorted(counts.items(), key=lambda pc: (-pc[1], len(pc[0]), pc[0])):
        needed = {path[:j] + (r,) for j in range(len(path)) for r in range(1, path[j] + 1)} - shape
        if len(shape) + len(needed) > nodes:
            continue
        shape |= needed
        if len(shape) == nodes:
            break
    return frozenset(shape)


def shape_step_seconds(shape: frozenset, costs: Costs) -> float:
    """One step of a fixed tree: each level's nodes with children decoded in one draft batch (the root
    included), the verify of the root and every node, and the next step's root row in the draft."""
    if not shape:
        return costs.verify(1)
    depth = max(map(len, shape))
    parents = [{p[:-1] for p in shape if len(p) == level + 1} for level in range(depth)]
    return sum(costs.draft(len(level)) for level in parents) + costs.draft(1) + costs.verify(1 + len(shape))


def shape_seconds(ranks: Sequence[int], shape: frozenset, costs: Costs) -> tuple[float, int]:
    """(seconds, steps) of a reply drafted by the same tree every step: a step goes as deep as the
    reply's ranks stay inside the tree (never drafting the reply's last token) and emits one more."""
    n, i, steps = len(ranks), 0, 0
    step_s = shape_step_seconds(shape, costs)
    while i < n:
        path: tuple[int, ...] = ()
        while i + len(path) < n - 1 and path + (int(ranks[i + len(path)]),) in shape:
            path += (int(ranks[i + len(path)]),)
        i, steps = i + len(path) + 1, steps + 1
    return steps * step_s, steps


def chain_shape(gamma: int) -> frozenset:
    return frozenset((1,) * j for j in range(1, gamma + 1))


def best_fixed(replies: Sequence[tuple[np.ndarray, Costs]], shapes: Sequence[frozenset]) -> tuple[frozenset, float]:
    """The shape with the least seconds over every reply, each priced on its own costs."""
    scored = [(shape, sum(shape_seconds(r, shape, c)[0] for r, c in replies)) for shape in shapes]
    return min(scored, key=lambda sc: sc[1])


def measure_costs(pair: Pair, prompt: Sequence[int], filler: Sequence[int]) -> Costs:
    """The target's and the draft's decode of each width at the prompt's depth (decode_medians)."""
    median = decode_medians(pair, prompt, filler, VERIFY_WIDTHS, DRAFT_WIDTHS)
    return Costs(curve_of({k: median[0, k] for k in VERIFY_WIDTHS}), curve_of({k: median[1, k] for k in DRAFT_WIDTHS}))


def reply(pair: Pair, prompt: list[int], args, name: str, seed: int) -> tuple[list[int], float]:
    """(tokens, decode seconds) of one reply: target-only, or the model drafter (auto) with trees or chains."""
    cfg = GenerationConfig(max_tokens=args.max_tokens, gamma=0 if name == "target-only" else None, seed=seed,
                           drafter="model", trees=name == "trees",
                           sampling=SamplingParams(temperature=args.temperature, top_k=args.top_k))
    tokens, stats = streamed(pair, prompt, cfg)
    return tokens, stats.total_s


def run(args, pair: Pair) -> list[dict]:
    """One record per reply: prompt, round, per scenario (tokens, seconds), the draft's ranks along
    target-only's reply, and the costs measured right after it."""
    texts = bench.load_prompts(args.prompts, args.n_prompts, args.prompt_set)
    prompts = [pair.prompt_tokens(t, True) for t in texts]
    trackers: dict[str, dict] = {name: {} for name in SCENARIOS}
    records = []
    for n, i in enumerate([i for _ in range(args.rounds) for i in range(len(prompts))]):
        record = {"prompt": i, "round": n // len(prompts)}
        for name in bench.reply_order(list(SCENARIOS), n):
            pair.trackers = trackers[name]  # each plans from its own measurements, as its own process would
            record[name] = reply(pair, prompts[i], args, name, seed=n)
        tokens = record["target-only"][0]
        record["ranks"] = draft_ranks(rows_along(pair.draft_ctx, prompts[i], tokens), tokens)
        record["costs"] = measure_costs(pair, prompts[i], tokens)
        print(f"reply {n} (prompt {i}): " + "  ".join(f"{name} {len(record[name][0]) / record[name][1]:.1f} tok/s"
                                                  for name in SCENARIOS), file=sys.stderr, flush=True)
        records.append(record)
    return records


def bounds(args, records: Sequence[dict]) -> dict:
    """Every ratio to plain decoding over the replies (each priced on the costs measured after it)."""
    replies = [(r["ranks"], r["costs"]) for r in records]
    plain = sum(len(ranks) * c.verify(1) for ranks, c in replies)
    counts = path_counts([ranks for ranks, _ in replies], args.cap, MAX_RANK)
    chain, chain_s = best_fixed(replies, [chain_shape(g) for g in range(0, args.cap + 1)])
    trees = best_fixed(replies, [fixed_shape(counts, k) for k in range(1, args.nodes + 1)])
    tree, tree_s = min((chain, chain_s), trees, key=lambda sc: sc[1])  # a chain is a tree too
    ranks = np.concatenate([r for r, _ in replies])

    def measured(name: str) -> float:
        return rate(records, name, lambda r: r[name][1]) / rate(records, "target-only", lambda r: r["target-only"][1])

    return {"tree_oracle": plain / sum(oracle_seconds(r, c, args.cap, MAX_RANK) for r, c in replies),
            "chain_oracle": plain / sum(oracle_seconds(r, c, args.cap, 1) for r, c in replies),
            "tree": (plain / tree_s, tree), "chain": (plain / chain_s, len(chain)),
            "trees_measured": measured("trees"), "chain_measured": measured("chain"),
            "rank_share": [float((ranks == k).mean()) for k in range(1, MAX_RANK + 1)],
            "verify_ms": {k: round(1e3 * statistics.mean(c.verify(k) for _, c in replies), 1) for k in VERIFY_WIDTHS},
            "draft_ms": {k: round(1e3 * statistics.mean(c.draft(k) for _, c in replies), 1) for k in DRAFT_WIDTHS}}


def report(b: dict) -> str:
    tree, shape = b["tree"]
    depth = max(map(len, shape), default=0)
    shares = ", ".join(f"{k + 1}: {s:.1%}" for k, s in enumerate(b["rank_share"]))
    return "\n".join([
        f"the draft's rank of the reply's token (share of positions): {shares}; beyond: {1 - sum(b['rank_share']):.1%}",
        f"costs, the mean over the replies: a verify of k rows {b['verify_ms']} ms; a draft decode of k rows "
        f"{b['draft_ms']} ms",
        "| over target-only | vs plain |", "|---|---|",
        f"| tree oracle (knows the reply; guesses down to rank {MAX_RANK}) | {b['tree_oracle']:.2f}x |",
        f"| chain oracle (knows the reply; first guesses) | {b['chain_oracle']:.2f}x |",
        f"| best fixed tree ({len(shape)} nodes, depth {depth}) | {tree:.2f}x |",
        f"| best fixed chain (γ {b['chain'][1]}) | {b['chain'][0]:.2f}x |",
        f"| localspec model drafter (auto), trees where they pay, measured | {b['trees_measured']:.2f}x |",
        f"| localspec model drafter (auto), chains only, measured | {b['chain_measured']:.2f}x |",
        f"best fixed tree / best fixed chain {tree / b['chain'][0]:.2f}x; tree oracle / localspec's chain "
        f"{b['tree_oracle'] / b['chain_measured']:.2f}x; localspec's trees / its chain "
        f"{b['trees_measured'] / b['chain_measured']:.2f}x"])


def parse_args(argv=None):
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_one_process_args(ap, "humaneval", 4, 96)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--cap", type=int, default=16,
                    help="the deepest a step drafts (twice localspec's draft model cap by default)")
    ap.add_argument("--nodes", type=int, default=24, help="the most nodes a fixed tree holds")
    args = ap.parse_args(argv)
    for flag, value in (("--cap", args.cap), ("--nodes", args.nodes)):
        if value < 1:
            ap.error(f"{flag} {value}: give 1 or more")
    if args.temperature < 0:
        ap.error(f"--temperature {args.temperature}: give 0 (greedy) or more")
    bench.one_process_args(ap, args)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    with bench.one_process_pair(args, "localspec-trees-") as pair:
        records = run(args, pair)
    print(report(bounds(args, records)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
