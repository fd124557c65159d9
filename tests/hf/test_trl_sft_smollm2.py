"""examples/trl_sft.py with a real small model, SmolLM2-135M-Instruct (LoRA, short GSM8K rows, two steps on CPU):
conversational prompt-completion through its chat template (completion-only loss, padded, evaluation) and
padding-free BFD packing. The tiny-model runs and the gradient checks are in test_trl_sft.py."""

from __future__ import annotations

import pytest

from del_plugin.hf.collator import NumberSpanCollator
from tools.assets import smollm2_dir

from gsm8k_rows import GSM8K_FILES, gsm8k_rows
from trainer_checks import check_run, load_example

pytestmark = pytest.mark.e2e

example = load_example("trl_sft")


def shortest(n: int, split: str) -> list[dict]:
    """GSM8K rows whose question and answer fit in ~100 tokens, so that short sequences keep digits to learn."""
    return sorted(gsm8k_rows(200, split=split), key=lambda r: len(r["question"]) + len(r["answer"]))[:n]


@pytest.mark.parametrize(
    "argv, evaluations",
    [
        (["--chat", "--eval-steps", "2", "--max-length", "128"], 1),
        (["--packing", "--max-length", "192"], 0),  # two samples a row
    ],
    ids=["chat-padded-eval", "packed"],
)
def test_smollm2(tmp_path, argv, evaluations):
    trainer = example.build_trainer(
        [
            "--model",
            str(smollm2_dir()),
            *GSM8K_FILES,
            "--output-dir",
            str(tmp_path),
            "--max-steps",
            "2",
            "--batch-size",
            "1",
            "--alpha",
            "1.0",
            "--lora",
            *argv,
        ],
        rows=shortest(4, "train"),
        eval_rows=shortest(1, "test"),
        gradient_checkpointing=False,  # time: the tiny-model runs keep TRL's default (on)
    )
    assert isinstance(trainer.data_collator, NumberSpanCollator)
    assert trainer.completion_only_loss and type(trainer.model).__name__ == "PeftModelForCausalLM"
    trainer.train()
    check_run(trainer, steps=2, evaluations=evaluations)
    if "--packing" in argv:
        batch = next(iter(trainer.get_train_dataloader()))
        assert batch["input_ids"].shape[0] == 1 and (batch["position_ids"] == 0).sum() >= 2
