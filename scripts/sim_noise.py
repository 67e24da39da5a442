#!/usr/bin/env python3
"""The real Planner in the decode-loop simulator (tests/plannersim.py) with noisy verify costs, and how
far apart two runs of ONE planner land when only that noise differs.

Each verify takes its curve's seconds times a lognormal factor (--sd, 8% by default, as one verify
varies on a quiet 2-core CPU) and, with probability --stall-p, a further --stall-f (a stall). Each
seed is a set of --replies replies with trackers kept across them (a process answering a prompt set).
For every seed one of the hybrid's parts (--part: the lookup by default, or the draft model) runs
twice, each with its own noise stream (A and B), and the hybrid once with a third: hybrid / A shows
what the hybrid's choices cost in one set, A / B what the noise alone moves a planner's result by. The
line below the table sets the hybrid beside both runs of its part (per seed, over their geometric
mean), with a 90% interval over the seeds: one run of the part is as noisy as the hybrid's, and a
hybrid / A over a few dozen seeds leans by however lucky A's noise was. Ratios are
plain decoding's seconds (the curve's one-row cost a token, times the noise's mean factor, as plain
steps under the same noise take on average) over the simulated seconds.

    python scripts/sim_noise.py --curve h200 --set copy --seeds 40
    python scripts/sim_noise.py --curve epyc --set prose --sd 0 --stall-p 0
    python scripts/sim_noise.py --curve f16 --set sure-prose --draft-ratio 0.13 --part model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from plannersim import COPY, CPU_F16, EDIT, EPYC_TILED, H200_LIGHT, PROSE, Region, curve, generate  # noqa: E402
from script_args import Parser  # noqa: E402

CURVES = {"epyc": EPYC_TILED, "h200": H200_LIGHT, "f16": CPU_F16}
# sure-prose: prose where the draft model is sure (0.97) over 60% of the positions, in runs, and its
# other guesses taken half the time: with the Q4_0 draft on the F16 target (--draft-ratio 0.13) it
# pays; exact-copy: the copy set's copy taken whole every time, as the real copy set's replies take
# theirs (COPY's guesses are taken 98% of the time each)
SETS = {"copy": COPY, "edit": EDIT, "prose": PROSE, "sure-prose": [Region(96, 4, 2, False, 0.3, 0.5, 0.6)],
        "exact-copy": [COPY[0], COPY[1]._replace(ngram_accept=1.0)]}


def noisy(verify, rng: np.random.Generator, sd: float, stall_p: float, stall_f: float):
    """verify's seconds times a lognormal factor, and stall_f more with probability stall_p."""
    def seconds(k: int) -> float:
        t = verify(k) * float(np.exp(rng.normal(0.0, sd)))
        return t * stall_f if rng.random() < stall_p else t
    return seconds


def run_set(regions, kinds, verify, args, seed: int, noise_seed: int) -> float:
    """One process's replies: plain seconds over simulated seconds, over the set."""
    timed = noisy(verify, np.random.default_rng(noise_seed), args.sd, args.stall_p, args.stall_f)
    trackers: dict = {}
    plain = spent = 0.0
    mean_factor = np.exp(args.sd ** 2 / 2) * (1 + args.stall_p * (args.stall_f - 1))
    for i in range(args.replies):
        r = generate(regions, kinds, trackers, timed, args.draft_ratio, 1000 * seed + i)
        plain += r.tokens * verify(1) * mean_factor
        spent += r.seconds
    return plain / spent


def summary(name: str, values) -> str:
    x = np.asarray(values)
    return (f"| {name} | {x.mean():.3f} | {np.percentile(x, 10):.3f} | {x.min():.3f} | "
            f"{(x < 0.99).mean():.0%} |")


def beside_both(h, a, b) -> tuple[float, float, float]:
    """The hybrid over its part, per seed against the geometric mean of the part's two runs: the mean
    over the seeds (geometric) and a 90% interval of it (normal, on the log ratios)."""
    d = np.log(h) - (np.log(a) + np.log(b)) / 2
    half = 1.645 * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return float(np.exp(d.mean())), float(np.exp(d.mean() - half)), float(np.exp(d.mean() + half))


def main() -> None:
    parser = Parser(description=__doc__.split("\n\n")[0])  # its first paragraph, rewrapped
    parser.add_argument("--curve", choices=sorted(CURVES), default="epyc")
    parser.add_argument("--set", choices=sorted(SETS), default="copy")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--replies", type=int, default=12, help="replies a set (default 12: 4 prompts x 3 rounds)")
    parser.add_argument("--sd", type=float, default=0.08, help="a verify's lognormal noise (default 0.08)")
    parser.add_argument("--stall-p", type=float, default=0.05, help="chance of a stall a verify (default 0.05)")
    parser.add_argument("--stall-f", type=float, default=1.35, help="a stall's factor (default 1.35)")
    parser.add_argument("--draft-ratio", type=float, default=0.5, help="a draft token / a plain step (default 0.5)")
    parser.add_argument("--part", choices=["ngram", "model"], default="ngram",
                        help="the hybrid's part run alone beside it (default ngram: the lookup)")
    args = parser.parse_args()
    verify, regions = curve(CURVES[args.curve]), SETS[args.set]
    a, b, h = [], [], []
    for s in range(args.seeds):
        a.append(run_set(regions, [args.part], verify, args, s, 1 + s))
        b.append(run_set(regions, [args.part], verify, args, s, 5000 + s))
        h.append(run_set(regions, ["ngram", "model"], verify, args, s, 9000 + s))
    a, b, h = map(np.asarray, (a, b, h))
    part = {"ngram": "lookup", "model": "model"}[args.part]
    print(f"{args.curve} curve, {args.set} set, {args.seeds} seeds x {args.replies} replies, noise sd {args.sd}, "
          f"stalls {args.stall_p:.0%} x {args.stall_f}")
    print("| per seed | mean | 10th percentile | least | below 0.99 |")
    print("|---|---|---|---|---|")
    for name, values in ((f"{part} A vs plain", a), ("hybrid vs plain", h), (f"hybrid / {part} A", h / a),
                         (f"{part} A / {part} B (noise alone)", a / b)):
        print(summary(name, values))
    mean, lo, hi = beside_both(h, a, b)
    print(f"\nhybrid / {part} over both its runs (A and B): {mean:.3f} (90% interval {lo:.3f}-{hi:.3f})")


if __name__ == "__main__":
    main()
