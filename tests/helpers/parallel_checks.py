"""What the data-parallel Axolotl runs on CPU share (tests/e2e/test_ddp_cpu_e2e.py, test_fsdp2_cpu_e2e.py,
test_deepspeed_cpu_e2e.py): the GSM8K rows of one optimizer step and what they hold under each tokenizer, the step's
keys, the tolerances, and the checks of a run's results (tests/helpers/ddp_cpu.py launches the runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from trainer_checks import LOGGED_KEYS

# GSM8K train rows by index, their digit targets (the digits of the answer; the prompt is masked) and label tokens
# (the answer's tokens and EOS)
ROWS = (332, 150, 228, 393)
DIGITS_PER_ROW = (65, 12, 52, 16)
LABEL_TOKENS_PER_ROW = (111, 98, 96, 109)
ALPHA = 2.0
PARTS = ("loss",) + LOGGED_KEYS
# GSM8K train rows for Llama-3's tokenizer, their digit targets and label tokens under it (ROWS above are the Llama-2
# ones): rank 0 gets rows 0 and 2 (128 digits, 145 tokens), rank 1 rows 1 and 3 (23 and 145)
BPE_ROWS = (332, 150, 153, 85)
BPE_DIGITS_PER_ROW = (65, 12, 63, 11)
BPE_LABEL_TOKENS_PER_ROW = (68, 88, 77, 57)
# float32 sums in another order (and, at world 1, a padded row in the micro-batch) are all that may differ; measured:
# at most 3.4e-8 absolute on gradients whose largest entries are 0.04 (DEL's part) to 0.09 (the full gradient) under
# DDP, at most 7.5e-8 under FSDP2, on the head's gradient, whose largest entry is 0.21
RTOL, ATOL = 1e-4, 1e-6
# bf16 against float32: FSDP2 gathers bf16 parameters, computes in bf16 and reduce-scatters bf16 gradients (8
# significant bits). Measured: at most 0.0083 (relative norm of a parameter's gradient error; a logged part: 0.0012);
# DEL's own part of the gradient is about 0.45 of its norm at this alpha, so a lost DEL term would show
BF16_REL = 0.02


def step_keys(world: int) -> dict:
    """One optimizer step over the same four rows at world size 1 or 2 (two micro-batches of ``2 // world`` rows
    per rank), in data order, unclipped: what tests/e2e/test_fsdp2_cpu_e2e.py runs too."""
    return dict(
        micro_batch_size=2 // world,
        gradient_accumulation_steps=2,
        max_steps=1,
        max_grad_norm=0.0,
        learning_rate=1e-4,
        sequence_len=512,
        curriculum_sampling=True,
        del_alpha=ALPHA,
    )


def rank_local_digit_count():
    """Setup of the control run (runs inside each rank): normalise DEL by the rank's own digits, not the step's."""
    from del_plugin.axolotl.trainer import DELTrainer
    from del_plugin.core.places import NOT_A_DIGIT
    from del_plugin.hf.collator import TARGET_PLACES_KEY

    original = DELTrainer.get_batch_samples

    def rank_local(self, epoch_iterator, num_batches, device):
        samples, num_items = original(self, epoch_iterator, num_batches, device)
        self.del_metrics.step_digits = sum((b[TARGET_PLACES_KEY] != NOT_A_DIGIT).sum() for b in samples)
        return samples, num_items

    DELTrainer.get_batch_samples = rank_local
    return lambda: setattr(DELTrainer, "get_batch_samples", original)


def ok(result: dict) -> dict:
    assert "error" not in result, result.get("error")
    return result


def train_log(result: dict) -> dict:
    (log,) = [h for h in ok(result)["logs"] if "loss" in h]
    return log


def assert_grads_close(actual: dict, expected: dict, what: str, rtol=RTOL, atol=ATOL):
    assert actual.keys() == expected.keys() and len(expected) > 0
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=rtol, atol=atol, msg=f"{what}: {name}")


def assert_ranks_log(expected: dict, ranks: list[dict], name: str) -> None:
    """Every rank of a two-process run logs each part of the loss as the one-process run did."""
    for rank in (0, 1):
        log = train_log(ranks[rank])
        for key in PARTS:
            assert log[key] == pytest.approx(expected[key], rel=1e-5), (name, rank, key, log, expected)


def tied_copy(model_dir: Path, out: Path) -> Path:
    """``model_dir`` with ``tie_word_embeddings: true``: the head is the input embedding (its own saved weight is
    then ignored), as in Llama-3.2 1B and 3B."""
    shutil.copytree(model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["tie_word_embeddings"] = True
    (out / "config.json").write_text(json.dumps(config))
    return out
