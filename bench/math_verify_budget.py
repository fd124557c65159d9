"""What math-verify's guard and per-problem budget make a hostile set cost: ``del-eval``'s scorer
(``MathVerifyScorer``: the static guard, then its worker, one forked process a problem under the budget) on the 20
hostile GSM8K-style outputs of ``tests/helpers/hostile_math.py`` (power towers, huge powers of polynomials,
factorial chains, deep nests) and on 20 plain ones of the same shape, in this process, alternating rounds; with
``--no-guard``, the budget alone. Prints, per set, the median wall seconds of a round (the worker's start included
when a problem needs it: a new scorer each round, as a ``del-eval`` run has) and per problem, the CPU seconds of a
round (this process's, the guard's included, and the problems' processes' as the kernel counted them), the largest
memory a problem's process held, how many the guard stopped and how many in all had no verdict, and the ratios
hostile / plain.

    python bench/math_verify_budget.py --rounds 3 [--no-guard]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from hostile_math import HOSTILE_OUTPUTS, PLAIN_OUTPUTS, REFERENCE  # noqa: E402


def one_round(outputs: list[str], guard: bool) -> dict:
    """A new scorer (its worker started at the first problem that needs it, as in a run) scoring ``outputs``: wall
    seconds, CPU (this process's and the problems' processes'), memory, stops."""
    from del_plugin.evaluation.scoring.math_verify_guard import too_costly
    from del_plugin.evaluation.scoring.math_verify_scoring import MathVerifyScorer

    started, own_cpu = time.perf_counter(), time.process_time()
    scorer = MathVerifyScorer(guard=too_costly if guard else None)
    try:
        results = [scorer.check(REFERENCE, output) for output in outputs]
    finally:
        scorer.close()
    return {
        "wall_s": time.perf_counter() - started,
        "cpu_s": time.process_time() - own_cpu + sum(r.cpu_s or 0.0 for r in results),
        "max_rss_mb": max((r.max_rss_mb for r in results if r.max_rss_mb is not None), default=0.0),
        "guarded": sum((r.over_budget or "").startswith("too large to evaluate") for r in results),
        "over_budget": sum(r.over_budget is not None for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-guard", action="store_true", help="the budget alone (every output to math-verify)")
    args = parser.parse_args(argv)

    from del_plugin.evaluation.scoring.math_verify_scoring import CPU_BUDGET_S, MEMORY_BUDGET_MB, math_verify_available

    if not math_verify_available():
        print("math-verify is not installed (pip install 'del-plugin[eval]')")
        return 1
    sets = {"plain": PLAIN_OUTPUTS, "hostile": list(HOSTILE_OUTPUTS.values())}
    rounds: dict[str, list[dict]] = {name: [] for name in sets}
    for _ in range(args.rounds):
        for name, outputs in sets.items():
            rounds[name].append(one_round(outputs, guard=not args.no_guard))
    guard = "off" if args.no_guard else "on"
    print(f"budget per problem: {CPU_BUDGET_S:g} s of CPU, {MEMORY_BUDGET_MB} MiB; guard {guard}; {args.rounds} rounds")
    print("| set | problems | s a round (median) | s a problem | CPU s | largest RSS MB | guarded | not verified |")
    print("|---|---|---|---|---|---|---|---|")
    wall, cpu = {}, {}
    for name, outputs in sets.items():
        runs = rounds[name]
        wall[name] = statistics.median(r["wall_s"] for r in runs)
        cpu[name] = statistics.median(r["cpu_s"] for r in runs)
        rss = max(r["max_rss_mb"] for r in runs)
        guarded, over = (max(r[key] for r in runs) for key in ("guarded", "over_budget"))
        n = len(outputs)
        print(
            f"| {name} | {n} | {wall[name]:.2f} | {wall[name] / n:.3f} | {cpu[name]:.2f} | {rss:.0f} | {guarded} "
            f"| {over} |"
        )
    print(f"hostile / plain: {wall['hostile'] / wall['plain']:.2f} (wall), {cpu['hostile'] / cpu['plain']:.2f} (CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
