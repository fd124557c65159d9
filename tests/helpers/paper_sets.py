"""A ``--benchmark-dir`` (``del_eval_benchmark_dir``) for the tests that run all seven sets: the SimulEq and SAT
sets tests/evaluation/test_benchmarks.py writes (not the real files, which are not shipped), in the authors' layout."""

from __future__ import annotations

import json
from pathlib import Path

from test_benchmarks import SAT, SIMULEQ


def write_benchmark_dir(root: Path) -> Path:
    for folder, rows in (("simuleq", SIMULEQ), ("sat", SAT)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / f"{folder}.json").write_text(json.dumps(rows))
    return root
