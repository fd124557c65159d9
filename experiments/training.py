"""The demo's two fine-tunes: the same Axolotl LoRA config, run in-process, with DEL off (``del_alpha: 0``, plain
cross-entropy; the plugin still logs the digit metrics) and on."""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path

from axolotl.utils.logging import get_logger

from tools.cpu import CPU_KEYS, run_axolotl

LOG = get_logger(__name__)

__all__ = ["TrainSettings", "axolotl_config", "train_lora"]


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 100
    micro_batch_size: int = 4
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    lora_r: int = 16
    lora_alpha: int = 32
    sequence_len: int = 128
    seed: int = 42
    logging_steps: int = 5

    @property
    def examples(self) -> int:
        """Training rows one epoch needs to cover every step (no row seen twice)."""
        return self.steps * self.micro_batch_size


def axolotl_config(
    model_dir: Path, train_file: Path, run_dir: Path, del_alpha: float, settings: TrainSettings, criterion: str = "del"
) -> dict:
    """A LoRA config for SmolLM2's chat template that runs on a CPU (no bf16/fp16, sdpa, no fused kernels).

    ``settings.seed`` sets the LoRA initialisation and the order of the training rows (Axolotl shuffles with it),
    so two configs that differ only in ``del_alpha`` / ``criterion`` see the same data in the same order.
    ``criterion`` is ``del_criterion`` (docs/criteria.md); the key is written only when it is not DEL's."""
    config = {
        "base_model": str(model_dir),
        "tokenizer_config": str(model_dir),
        "datasets": [
            {"path": str(train_file), "ds_type": "json", "type": "chat_template", "field_messages": "messages"}
        ],
        "chat_template": "tokenizer_default",
        "val_set_size": 0.0,
        "sequence_len": settings.sequence_len,
        "pad_to_sequence_len": False,
        "sample_packing": False,
        "micro_batch_size": settings.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "num_epochs": 1,
        "max_steps": settings.steps,
        "learning_rate": settings.learning_rate,
        "lr_scheduler": "cosine",
        "warmup_steps": settings.warmup_steps,
        "adapter": "lora",
        "lora_r": settings.lora_r,
        "lora_alpha": settings.lora_alpha,
        "lora_dropout": 0.0,
        "lora_target_linear": True,
        **CPU_KEYS,
        "output_dir": str(run_dir / "adapter"),
        "dataset_prepared_path": str(run_dir / "prepared"),
        "save_strategy": "no",
        "logging_steps": settings.logging_steps,
        "seed": settings.seed,
        "plugins": ["del_plugin.DELPlugin"],
        "del_alpha": del_alpha,
    }
    if criterion != "del":
        config["del_criterion"] = criterion
    return config


def train_lora(config: dict, run_dir: Path) -> tuple[Path, list[dict]]:
    """``load_cfg`` -> ``load_datasets`` -> ``train`` in this process; returns the adapter folder and the trainer's
    log history (also saved as run_dir/train_log.json and the config as run_dir/config.json)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    trainer = run_axolotl(config)
    history = list(trainer.state.log_history)
    (run_dir / "train_log.json").write_text(json.dumps(history, indent=2) + "\n")
    adapter = Path(config["output_dir"])
    if not (adapter / "adapter_config.json").is_file():
        raise RuntimeError(f"Axolotl finished but saved no adapter in {adapter}")
    del trainer
    gc.collect()
    return adapter, history
