"""Axolotl on a CPU: the keys that stand in for GPU-only features, and an in-process run.

Used by the demo, the tests and the benchmarks, so that every CPU run here is configured the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from del_plugin.axolotl.cpu import CPU_RECIPE

# the users' recipe (its one home: del_plugin/axolotl/cpu.py, each key with why), and what runs in this process need
CPU_KEYS: dict = {
    **{key: entry.value for key, entry in CPU_RECIPE.items()},
    "optimizer": "adamw_torch",  # the same maths as the examples' paged 8-bit AdamW, without bitsandbytes' states
    "dataloader_pin_memory": False,  # pinning needs CUDA
    "dataloader_num_workers": 0,  # workers would re-import the caller's __main__ under spawn
    "dataset_num_proc": 1,  # datasets saves with a spawn pool otherwise, which re-imports __main__ too
}


def write_alpaca_jsonl(path, rows) -> Path:
    """GSM8K-style ``{"question", "answer"}`` rows as the alpaca JSONL that :func:`alpaca_lora_config` trains on."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps({"instruction": row["question"], "input": "", "output": row["answer"]}) + "\n")
    return path


def alpaca_lora_config(model_dir, dataset, work, **overrides) -> dict:
    """A small LoRA fine-tune of ``model_dir`` on an alpaca JSONL, for CPU runs (tests, benchmarks); outputs go
    under ``work``. Any key can be overridden."""
    work = Path(work)
    return {
        "base_model": str(model_dir),
        "tokenizer_config": str(model_dir),
        "datasets": [{"path": str(dataset), "ds_type": "json", "type": "alpaca"}],
        "val_set_size": 0.0,
        "lr_scheduler": "constant",
        "adapter": "lora",
        "lora_r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "lora_target_linear": True,
        **CPU_KEYS,
        "output_dir": str(work / "out"),
        "dataset_prepared_path": str(work / "prepared"),
        "save_strategy": "no",
        "seed": 42,
        **overrides,
    }


def run_axolotl(config: dict):
    """``load_cfg`` -> ``load_datasets`` -> ``train`` in this process, as ``axolotl train`` does; returns the
    trainer (``trainer.state.log_history``, ``trainer.model``). Raises on a bad config before loading anything."""
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets
    from axolotl.train import train
    from axolotl.utils.dict import DictDefault

    cfg = load_cfg(DictDefault(config))
    _, _, trainer = train(cfg=cfg, dataset_meta=load_datasets(cfg=cfg))
    return trainer
