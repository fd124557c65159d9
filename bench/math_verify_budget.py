"""What math-verify's per-problem budget makes a hostile set cost: ``del-eval``'s scorer
(``MathVerifyScorer``: its worker, one forked process a problem under the budget) on the 20 hostile GSM8K-style
outputs of ``tests/helpers/hostile_math.py`` (power towers, huge powers of polynomials, factorial chains, deep
nests) and on 20 plain ones of the same shape, in this process, alternating rounds. Prints, per set, the median
wall seconds of a round (the worker's start included: a new scorer each round, as a ``del-eval`` run has) and per
problem, the CPU time the kernel counted for the problems' processes, the largest memory one held, and the ratio
hostile / plain.

    python bench/math_verify_budget.py --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from hostile_math import HOSTILE_OUTPUTS, PLAIN_OUTPUTS, REFERENCE  # noqa: E402


def one_round(outputs: list[str]) -> dict:
    """A new scorer (its worker started, as in a run) scoring ``outputs``: wall seconds, CPU, memory, stops."""
    from del_plugin.evaluation.math_verify_scoring import MathVerifyScorer

    started = time.perf_counter()
    scorer = MathVerifyScorer()
    try:
        results = [scorer.check(REFERENCE, output) for output in outputs]
    finally:
        scorer.close()
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": sum(r.cpu_s for r in results),
        "max_rss_mb": max(r.max_rss_mb for r in results),
        "over_budget": sum(r.over_budget is not None for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from del_plugin.evaluation.math_verify_scoring import CPU_BUDGET_S, MEMORY_BUDGET_MB, math_verify_available

    if not math_verify_available():
        print("math-verify is not installed (pip install 'del-plugin[eval]')")
        return 1
    sets = {"plain": PLAIN_OUTPUTS, "hostile": list(HOSTILE_OUTPUTS.values())}
    rounds: dict[str, list[dict]] = {name: [] for name in sets}
    for _ in range(args.rounds):
        for name, outputs in sets.items():
            rounds[name].append(one_round(outputs))
    print(f"budget per problem: {CPU_BUDGET_S:g} s of CPU, {MEMORY_BUDGET_MB} MiB; {args.rounds} rounds")
    print("| set | problems | s a round (median) | s a problem | problems' CPU s | largest RSS MB | over budget |")
    print("|---|---|---|---|---|---|---|")
    medians = {}
    for name, outputs in sets.items():
        runs = rounds[name]
        medians[name] = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rss = max(r["max_rss_mb"] for r in runs)
        over = max(r["over_budget"] for r in runs)
        n = len(outputs)
        print(f"| {name} | {n} | {medians[name]:.2f} | {medians[name] / n:.3f} | {cpu:.2f} | {rss:.0f} | {over} |")
    print(f"hostile / plain: {medians['hostile'] / medians['plain']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
