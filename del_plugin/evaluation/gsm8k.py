"""GSM8K (MIT), gzipped: the one reader of its rows. The package ships the test split only
(``del_plugin/evaluation/data/gsm8k/``, what del-eval scores; the GSM8K benchmark reads the same file through
:mod:`del_plugin.evaluation.benchmarks`); the train split is training data, not product: a clone holds it in
``tools/data/gsm8k/`` (``tools.assets.gsm8k_train_rows``), a user loads ``openai/gsm8k`` from the hub."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

__all__ = ["GSM8K_DIR", "GSM8K_SPLITS", "gsm8k_rows"]

GSM8K_DIR = Path(__file__).resolve().parent / "data" / "gsm8k"
GSM8K_SPLITS: tuple[str, ...] = ("train", "test")


def gsm8k_rows(n: int | None = None, split: str = "test", *, directory: Path = GSM8K_DIR) -> list[dict]:
    """The first ``n`` (all if None) GSM8K problems of ``split`` in ``directory`` (``<split>.jsonl.gz``), as
    ``{"question", "answer"}`` dicts whose answer ends in '#### N'. The default folder is the package's, which holds
    the test split only."""
    if split not in GSM8K_SPLITS:
        raise KeyError(f"unknown GSM8K split {split!r}; choose from {', '.join(GSM8K_SPLITS)}")
    path = Path(directory) / f"{split}.jsonl.gz"
    if not path.exists():
        if Path(directory) != GSM8K_DIR:
            hint = "pass the folder that holds it"
        elif split == "test":
            hint = "reinstall del-plugin"
        else:  # training data is not product
            hint = (
                "the package ships GSM8K's test split only: load the train split as datasets does "
                "(load_dataset('openai/gsm8k', 'main')) or, in a clone, from tools/data/gsm8k/"
            )
        raise FileNotFoundError(f"{path} is missing: {hint}")
    rows: list[dict] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if n is not None and len(rows) >= n:
                break
            rows.append(json.loads(line))
    return rows
