"""In-process Axolotl runs on CPU for the tests: a base config, data writers, and a runner."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from del_plugin import cpu

GSM8K_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k"

os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def gsm8k_rows(n: int | None = None, split: str = "train") -> list[dict]:
    """The first ``n`` GSM8K problems (``question``, ``answer`` ending in '#### N') from ../shared."""
    path = GSM8K_DIR / f"{split}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the tests read GSM8K from shared/data/gsm8k beside the repo")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            rows.append(json.loads(line))
            if n is not None and len(rows) >= n:
                break
    return rows


def write_alpaca_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            record = {"instruction": row["question"], "input": "", "output": row["answer"]}
            handle.write(json.dumps(record) + "\n")
    return path


def cpu_config(tmp_path: Path, model_dir: Path | str, dataset: Path | str, **overrides: Any) -> dict:
    """A small LoRA fine-tune that runs on CPU in seconds, with the DEL plugin on; override any key."""
    cfg = cpu.alpaca_lora_config(
        model_dir, dataset, tmp_path,
        sequence_len=256, micro_batch_size=2, gradient_accumulation_steps=2, max_steps=4, learning_rate=1e-3,
        logging_steps=1, plugins=["del_plugin.DELPlugin"], del_alpha=0.3,
    )
    cfg.update(overrides)
    return cfg


def load_config(cfg: dict):
    """Axolotl's own loading and validation (raises on a bad config)."""
    from axolotl.cli.config import load_cfg
    from axolotl.utils.dict import DictDefault

    return load_cfg(DictDefault(cfg))


def run_axolotl(cfg: dict):
    """``load_cfg`` -> ``load_datasets`` -> ``train``; returns the trainer (``trainer.state.log_history``)."""
    return cpu.run_axolotl(cfg)


def train_logs(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "loss" in h]


def eval_logs(trainer) -> list[dict]:
    return [h for h in trainer.state.log_history if "eval_loss" in h]
