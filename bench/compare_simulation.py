"""The error rates of ``del-eval compare``'s verdict, by simulation: the table of docs/evaluation.md.

    python bench/compare_simulation.py [--datasets 2000] [--out bench/results/compare_simulation.json]

For each row of the grid (one run an arm: discordance 0.2 and 0.48, 20, 200 and 1,000 problems; 3 v 3 and 1 v 3
runs on 1,000 problems, the runs' accuracies spread by 0, 1.7 and 4.2 points; then with the recipe's gain varying
by problem, tau 1 on the logit scale; and 1 v 3 where the single run's recipe spreads 4.2 points, the other's 0),
``--datasets`` datasets with no true difference, each put through the verdict's own code
(tests/helpers/verdict_simulation.py): how often it is called resolved, how often the interval covers 0, the stated
detectable difference (averaged), the standard error against the estimate's actual spread; then as many datasets
with that detectable difference as the truth, and how often it is resolved (the power the verdict claims is 80 %).
Seeded: the same table every run. Resumable: each finished row is saved to ``--out`` at once, and a run started
again skips the rows there (``--fresh`` starts over).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH.parent / "tests" / "helpers"))

from tqdm import tqdm  # noqa: E402

from verdict_simulation import Row, binomial_margin, simulate  # noqa: E402

GRID = (
    [Row((1, 1), n, discordance=q) for q in (0.2, 0.48) for n in (20, 200, 1000)]
    + [Row(runs, 1000, spread=s) for runs in ((3, 3), (1, 3)) for s in (0.0, 0.017, 0.042)]
    + [Row(runs, 1000, spread=s, tau=1.0) for runs in ((3, 3), (1, 3)) for s in (0.0, 0.017)]
    + [Row((1, 3), 1000, spread=0.0, base_spread=0.042)]
)


def _key(row: Row) -> str:
    if row.runs == (1, 1):
        return f"1 v 1, {row.problems:,} problems, discordance {row.discordance}"
    key = f"{row.runs[0]} v {row.runs[1]}, {row.problems:,} problems, seed spread {100 * row.spread:.1f}"
    if row.base_spread is not None:
        key += f" (the single run's recipe {100 * row.base_spread:.1f})"
    return key + (f", problem effects tau {row.tau}" if row.tau else "")


def _row(row: Row, datasets: int, seed: int) -> dict:
    null = simulate(row, datasets, seed)
    out = {"null": null, "power": None}
    possible = row.runs != (1, 1) or null["detectable"] <= row.discordance  # a gain beyond the discordance can't be
    if possible:
        out["power"] = simulate(row, datasets, seed + 1, difference=null["detectable"])
    return out


def _table(results: dict, datasets: int) -> str:
    margin = 100 * binomial_margin(0.05, datasets, sds=1)
    lines = [
        f"{datasets:,} datasets a row (a rate's binomial standard error: {margin:.1f} points at 5 %, "
        f"{100 * binomial_margin(0.8, datasets, sds=1):.1f} at 80 %)",
        "",
        "| row | resolved, no difference | coverage | stated detectable | SE / actual SD | power at it |",
        "|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        null, power = r["null"], r["power"]
        at = "– (beyond the discordance)" if power is None else f"{100 * power['resolved']:.1f} %"
        lines.append(
            f"| {key} | {100 * null['resolved']:.1f} % | {100 * null['coverage']:.1f} % | "
            f"{100 * null['detectable']:.1f} points | {null['se'] / null['sd']:.2f} | {at} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=2000, help="datasets a row (default %(default)s)")
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "compare_simulation.json")
    parser.add_argument("--fresh", action="store_true", help="start over instead of resuming --out")
    args = parser.parse_args(argv)
    saved = {} if args.fresh or not args.out.is_file() else json.loads(args.out.read_text())
    if saved.get("datasets") != args.datasets or saved.get("seed") != args.seed:
        saved = {"datasets": args.datasets, "seed": args.seed, "rows": {}}
    for i, row in enumerate(tqdm(GRID, desc="rows", unit="row", file=sys.stdout)):
        key = _key(row)
        if key in saved["rows"]:
            continue
        saved["rows"][key] = _row(row, args.datasets, args.seed + 10 * i)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(saved, indent=2) + "\n")
    table = _table(saved["rows"], args.datasets)
    args.out.with_suffix(".md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
