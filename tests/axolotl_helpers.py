"""In-process Axolotl runs on CPU for the tests: a base config, data writers, and a runner."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from del_plugin import cpu

os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cpu_config(tmp_path: Path, model_dir: Path | str, dataset: Path | str, **overrides: Any) -> dict:
    """A small LoRA fine-tune that runs on CPU in seconds, with the DEL plugin on; override any key."""
    cfg = cpu.alpaca_lora_config(
        model_dir,
        dataset,
        tmp_path,
        sequence_len=256,
        micro_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=1e-3,
        logging_steps=1,
        plugins=["del_plugin.DELPlugin"],
        del_alpha=0.3,
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


def refused(cfg: dict) -> str:
    """The message with which Axolotl's validation refuses ``cfg`` (fails if it is accepted)."""
    import pytest

    with pytest.raises(Exception) as err:
        load_config(cfg)
    return str(err.value)
