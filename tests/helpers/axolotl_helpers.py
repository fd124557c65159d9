"""In-process Axolotl runs on CPU for the tests: a base config, data writers, and a runner."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tools import cpu

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
    """The message with which Axolotl's validation refuses ``cfg``: fails if it is accepted, or refused by anything
    but a validation error (pydantic's ``ValidationError`` and the plugin's rules raise ``ValueError``s; a crash, a
    ``KeyError`` or a ``TypeError`` naming the key is no refusal)."""
    import pytest

    with pytest.raises(ValueError) as err:
        load_config(cfg)
    return str(err.value)


ASCII_DIGITS = frozenset("0123456789")


class StepLabels:
    """The labels of every optimizer step's micro-batches, as the trainer gathered them (``get_batch_samples``, once
    per step, after the collator): ``steps[k]`` is the list of step ``k``'s label tensors. Installed on
    ``DELTrainer`` with pytest's ``monkeypatch`` (:meth:`install`), so that a test can count the digits each step
    really trained on independently of DEL."""

    def __init__(self):
        self.steps: list[list] = []

    def install(self, monkeypatch) -> StepLabels:
        from del_plugin.axolotl.trainer import DELTrainer

        gather = DELTrainer.get_batch_samples
        steps = self.steps

        def recording(trainer, epoch_iterator, num_batches, device):
            samples, num_items = gather(trainer, epoch_iterator, num_batches, device)
            steps.append([batch["labels"].detach().cpu().clone() for batch in samples])
            return samples, num_items

        monkeypatch.setattr(DELTrainer, "get_batch_samples", recording)
        return self

    def digit_characters(self, tokenizer) -> list[int]:
        """Per step, the digit characters (ASCII 0-9) of its trained targets: every label that is not -100, less
        each row's first label (position t predicts label t + 1, so the first label is never a target), spelled by
        ``tokenizer``. A multi-digit token ('123') counts its digits, as DEL's slots do."""
        counts = []
        for batches in self.steps:
            count = 0
            for labels in batches:
                targets = labels[:, 1:]
                ids = targets[targets != -100].tolist()
                count += sum(ch in ASCII_DIGITS for tok in tokenizer.convert_ids_to_tokens(ids) for ch in tok)
            counts.append(count)
        return counts

    def longest_number_token(self, tokenizer) -> int:
        """The most digits one trained target token held, over every recorded step."""
        longest = 0
        for batches in self.steps:
            for labels in batches:
                targets = labels[:, 1:]
                for tok in tokenizer.convert_ids_to_tokens(targets[targets != -100].tolist()):
                    if tok and all(ch in ASCII_DIGITS for ch in tok):
                        longest = max(longest, len(tok))
        return longest


LIGER = "axolotl.integrations.liger.LigerPlugin"


def run_logged(tmp_path, data, **overrides):
    """Axolotl's run of ``data`` (model folder, dataset) for 2 steps: its training and evaluation logs."""
    from trainer_checks import eval_logs, train_logs

    model_dir, dataset = data
    # 2 steps of 2 rows and 2 evaluation rows: the interpreter runs Liger's kernels one token at a time
    keys = dict(val_set_size=0.125, eval_steps=2, max_steps=2, gradient_accumulation_steps=1) | overrides
    cfg = cpu_config(tmp_path, model_dir, dataset, **keys)
    trainer = run_axolotl(cfg)
    return train_logs(trainer), eval_logs(trainer)
