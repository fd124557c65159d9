"""GSM8K (MIT), gzipped in the package (``del_plugin/evaluation/data/gsm8k/``): its train and test rows as the
training examples of the docs' scripts, the demo and the tests read them (del-eval's GSM8K benchmark reads the same
files through :mod:`del_plugin.evaluation.benchmarks`)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

__all__ = ["GSM8K_DIR", "GSM8K_SPLITS", "gsm8k_rows"]

GSM8K_DIR = Path(__file__).resolve().parent / "data" / "gsm8k"
GSM8K_SPLITS: tuple[str, ...] = ("train", "test")


def gsm8k_rows(n: int | None = None, split: str = "train") -> list[dict]:
    """The first ``n`` (all if None) GSM8K problems of ``split``, as ``{"question", "answer"}`` dicts whose answer
    ends in '#### N'. Read from ``del_plugin/evaluation/data/gsm8k/``, package data (del-eval's GSM8K)."""
    if split not in GSM8K_SPLITS:
        raise KeyError(f"unknown GSM8K split {split!r}; choose from {', '.join(GSM8K_SPLITS)}")
    path = GSM8K_DIR / f"{split}.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the GSM8K rows ship in the package (del_plugin/evaluation/data/gsm8k/); "
            "reinstall del-plugin"
        )
    rows: list[dict] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if n is not None and len(rows) >= n:
                break
            rows.append(json.loads(line))
    return rows
