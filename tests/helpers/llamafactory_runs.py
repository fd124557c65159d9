"""What the LLaMA-Factory host's tests share: a small dataset in LLaMA-Factory's alpaca format, a tiny run's config,
and the core's loss on a batch (the oracle the trainer's loss is compared with)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

from del_plugin.core import DigitVocab, digit_criterion_loss, digit_targets_from_logits
from del_plugin.core.places import next_token_places, shift_to_next_token

# whether this process is the LLaMA-Factory lane (make test-llamafactory), where LLaMA-Factory is importable
LLAMAFACTORY_LANE = os.environ.get("DEL_TEST_LANE") == "llamafactory"
LANE_ONLY = "runs in the LLaMA-Factory lane (make test-llamafactory), where LLaMA-Factory 0.9.5 is installed"

# numbers of different lengths in every row, one row with a single digit: a mean per micro-batch would weigh them
# differently from the step's mean, so accumulation 4 x 1 and 1 x 4 agree only when the normalisation is right
ROWS = [
    {"instruction": "What is 12 + 35?", "input": "", "output": "12 + 35 = 47"},
    {"instruction": "Name a colour.", "input": "", "output": "Blue, like 7 skies."},
    {"instruction": "What is 250 * 4?", "input": "", "output": "250 * 4 = 1000, so 1000 in all"},
    {"instruction": "Say hello.", "input": "", "output": "Hello 3.14 world 2026 and 58"},
]
DATASET = "arith"


def write_dataset(folder: Path) -> Path:
    """``folder`` as a LLaMA-Factory ``dataset_dir`` holding :data:`ROWS` under the name :data:`DATASET`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.json").write_text(json.dumps(ROWS), encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps({DATASET: {"file_name": "rows.json"}}), encoding="utf-8")
    return folder


def tiny_config(model: Path, dataset_dir: Path, output_dir: Path, **overrides) -> dict:
    """A LLaMA-Factory SFT config of a few CPU steps on :data:`ROWS`, in their order, with DEL's weight."""
    return {
        "model_name_or_path": str(model),
        "stage": "sft",
        "do_train": True,
        "finetuning_type": "lora",
        "lora_target": "all",
        "dataset": DATASET,
        "dataset_dir": str(dataset_dir),
        "template": "default",
        "cutoff_len": 128,
        "overwrite_cache": True,
        "output_dir": str(output_dir),
        "overwrite_output_dir": True,
        "logging_steps": 1,
        "max_steps": 1,
        "per_device_train_batch_size": 2,
        "learning_rate": 1.0e-3,
        "report_to": "none",
        "disable_shuffling": True,
        "save_strategy": "no",
        "seed": 7,
        "del_alpha": 0.3,
        **overrides,
    }


def core_loss(model, batch: dict, vocab: DigitVocab, alpha: float) -> torch.Tensor:
    """``CE + alpha * L_num`` of ``batch`` from the model's full logits, by the core's functions and the library's
    cross-entropy: the mean over the batch's target tokens and the mean of DEL's term over its digit targets."""
    labels, position_ids = batch["labels"], batch.get("position_ids")
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    with torch.no_grad():
        logits = model(**inputs).logits.float()
    targets = shift_to_next_token(labels, -100)
    ce = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
    ce = ce / (targets != -100).sum()
    places = next_token_places(labels, vocab, position_ids)
    l_num = digit_criterion_loss("del", digit_targets_from_logits(logits, targets, vocab), places)
    return ce + alpha * l_num
