"""How long ``del-eval compare``'s bootstrap takes on the paper's seven sets at their full sizes.

    python bench/compare_bootstrap.py [--resamples 2000] [--seeds 3] [--rounds 5]

Times :func:`del_plugin.evaluation.stats.paired_bootstrap` on random 0/1 outcomes of GSM8K's 1,319 problems, MATH's
5,000, SVAMP's 1,000, SimulEq's 514, AQuA's 254, SAT's 220 and MMLU-math's 974: one run an arm (the baseline of this
measurement) and ``--seeds`` runs an arm, in the same process, the median of ``--rounds`` rounds each, and their
ratio. (Reading the reports and drawing the plot come on top: well under a second for reports of this size.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from del_plugin.evaluation.stats import ArmOutcomes, paired_bootstrap

SIZES = (1319, 5000, 1000, 514, 254, 220, 974)


def _sets(seeds: int, rng: np.random.Generator) -> list[ArmOutcomes]:
    return [ArmOutcomes(rng.random((seeds, n)) < 0.4, rng.random((seeds, n)) < 0.45) for n in SIZES]


def _median_seconds(sets: list[ArmOutcomes], resamples: int, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        paired_bootstrap(sets, resamples=resamples)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    one = _median_seconds(_sets(1, rng), args.resamples, args.rounds)
    several = _median_seconds(_sets(args.seeds, rng), args.resamples, args.rounds)
    print(f"seven sets ({sum(SIZES):,} problems), {args.resamples:,} resamples, median of {args.rounds} rounds:")
    print(f"  one run an arm:          {one:.3f} s")
    print(f"  {args.seeds} seeds an arm:           {several:.3f} s  ({several / one:.2f} x one run an arm)")


if __name__ == "__main__":
    main()
