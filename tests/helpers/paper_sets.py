"""SimulEq and SAT stand-ins (a few problems each; the real files are not shipped), and a ``--benchmark-dir``
(``del_eval_benchmark_dir``) holding them in the authors' layout, for the tests that run all seven sets."""

from __future__ import annotations

import json
from pathlib import Path

SIMULEQ = [
    {"question": "Two numbers add up to 10 and differ by 2. What is the larger number?", "answer": "6"},
    {"question": "A prize of 1750 dollars is shared by 3 winners. How much does each get?", "answer": "583.3333"},
    {"question": "A recipe needs 3 cups of flour for 4 cakes. How many cups per cake?", "answer": "0.75"},
]
SAT = [
    {"question": "If 2x = 10, what is x? \nAnswer Choices: (A) 2 (B) 4 (C) 5 (D) 10", "answer": "C"},
    {"question": "What is 3 squared? \nAnswer Choices: (A) 9 (B) 6 (C) 3 (D) 1", "answer": "A"},
]


def write_benchmark_dir(root: Path) -> Path:
    for folder, rows in (("simuleq", SIMULEQ), ("sat", SAT)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / f"{folder}.json").write_text(json.dumps(rows))
    return root
