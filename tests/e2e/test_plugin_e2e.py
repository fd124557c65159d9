"""The plugin inside real, in-process Axolotl runs on CPU with a tiny local model and the Llama-2 tokenizer; the last
three with Llama-3's tokenizer, which cuts numbers into tokens of 1-3 digits (DEL counts one slot per digit)."""

from __future__ import annotations

import pytest
import torch

from del_plugin.axolotl.trainer import DELTrainer
from del_plugin.hf.collator import NumberSpanCollator
from tools.assets import tiny_model_dir
from tools.cpu import write_alpaca_jsonl

from axolotl_helpers import cpu_config, load_config, run_axolotl
from gsm8k_rows import gsm8k_rows
from trainer_checks import GradientCapture, assert_parts_logged, eval_logs, train_logs

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def model_dir():
    return tiny_model_dir("llama-spm")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", gsm8k_rows(24))


def test_lora_with_eval_logs_every_part_and_del_falls(tmp_path, model_dir, dataset):
    # A large alpha: under cross-entropy alone, L_num of this tiny random model *rises* (CE lifts all digit
    # logits, and BCE on raw logits penalises that); DEL has to win against it to fall.
    cfg = cpu_config(
        tmp_path,
        model_dir,
        dataset,
        val_set_size=0.25,
        eval_steps=8,
        max_steps=16,
        learning_rate=3e-2,
        del_alpha=20.0,
    )
    trainer = run_axolotl(cfg)
    assert isinstance(trainer, DELTrainer)
    assert isinstance(trainer.data_collator, NumberSpanCollator)
    assert isinstance(trainer.eval_data_collator, NumberSpanCollator)
    logs, evals = train_logs(trainer), eval_logs(trainer)
    assert len(logs) == 16 and len(evals) >= 2
    for log in logs:
        assert_parts_logged(log)
        assert log["del_loss"] == pytest.approx(20.0 * log["del_l_num"], rel=1e-5)  # one step per log: same mean
    for log in evals:
        assert_parts_logged(log, "eval_")
    first = sum(log["del_l_num"] for log in logs[:4]) / 4
    last = sum(log["del_l_num"] for log in logs[-4:]) / 4
    assert last < 0.9 * first, (first, last)
    assert evals[-1]["eval_del_l_num"] < 0.9 * evals[0]["eval_del_l_num"], evals


def test_qlora_4bit(tmp_path, model_dir, dataset):
    cfg = cpu_config(tmp_path, model_dir, dataset, adapter="qlora", load_in_4bit=True, max_steps=3)
    trainer = run_axolotl(cfg)
    import bitsandbytes as bnb

    assert any(isinstance(m, bnb.nn.Linear4bit) for m in trainer.model.modules())
    for log in train_logs(trainer):
        assert_parts_logged(log)


def test_sample_packing(tmp_path, model_dir, dataset):
    cfg = cpu_config(
        tmp_path,
        model_dir,
        dataset,
        sample_packing=True,
        eval_sample_packing=False,
        sequence_len=512,
        micro_batch_size=1,
        max_steps=3,
    )
    trainer = run_axolotl(cfg)
    from axolotl.utils.collators import V2BatchSamplerDataCollatorForSeq2Seq

    assert isinstance(trainer.data_collator.collator, V2BatchSamplerDataCollatorForSeq2Seq)
    logs = train_logs(trainer)
    assert len(logs) == 3
    for log in logs:
        assert_parts_logged(log)


def test_alpha_zero_gives_plain_axolotl_losses(tmp_path, model_dir, dataset):
    common = dict(val_set_size=0.25, eval_steps=3, max_steps=3)
    with_plugin = run_axolotl(cpu_config(tmp_path / "a", model_dir, dataset, del_alpha=0.0, **common))
    plain_cfg = cpu_config(tmp_path / "b", model_dir, dataset, **common)
    del plain_cfg["del_alpha"]
    plain_cfg["plugins"] = []
    plain = run_axolotl(plain_cfg)
    assert type(plain).__name__ == "AxolotlTrainer"
    ours, theirs = train_logs(with_plugin), train_logs(plain)
    assert [log["loss"] for log in ours] == [log["loss"] for log in theirs]
    assert [log["grad_norm"] for log in ours] == [log["grad_norm"] for log in theirs]
    assert [log["eval_loss"] for log in eval_logs(with_plugin)] == [log["eval_loss"] for log in eval_logs(plain)]
    for log in ours:  # the digit metrics are still there for comparison
        assert log["del_loss"] == 0.0 and log["del_l_num"] > 0 and log["ce_loss"] == log["loss"]


def first_step_gradients(cfg) -> dict[str, torch.Tensor]:
    from axolotl.common.datasets import load_datasets
    from axolotl.train import setup_model_and_trainer

    loaded = load_config(cfg)
    trainer = setup_model_and_trainer(loaded, load_datasets(cfg=loaded))[0]
    capture = GradientCapture()
    trainer.add_callback(capture)
    trainer.train()
    return capture.grads


def test_gradient_is_independent_of_micro_batching(tmp_path, model_dir, monkeypatch):
    # four answers with very different numbers of digits, so that per-micro-batch means would differ
    rows = sorted(gsm8k_rows(40), key=lambda r: sum(ch.isdigit() for ch in r["answer"]))
    rows = [rows[0], rows[13], rows[26], rows[39]]
    data = write_alpaca_jsonl(tmp_path / "four.jsonl", rows)
    common = dict(max_steps=1, del_alpha=2.0, max_grad_norm=0.0, learning_rate=1e-4)
    one_by_four = first_step_gradients(
        cpu_config(tmp_path / "ga4", model_dir, data, micro_batch_size=1, gradient_accumulation_steps=4, **common)
    )
    four_by_one = first_step_gradients(
        cpu_config(tmp_path / "ga1", model_dir, data, micro_batch_size=4, gradient_accumulation_steps=1, **common)
    )
    assert one_by_four.keys() == four_by_one.keys() and len(one_by_four) > 0
    for name in one_by_four:
        torch.testing.assert_close(one_by_four[name], four_by_one[name], rtol=1e-4, atol=1e-6, msg=name)

    # Control: normalising DEL per micro-batch (the reference scripts' mean) moves the gradient.
    monkeypatch.setattr(DELTrainer, "get_batch_samples", per_micro_batch_samples)
    per_micro = first_step_gradients(
        cpu_config(tmp_path / "ref", model_dir, data, micro_batch_size=1, gradient_accumulation_steps=4, **common)
    )
    differs = [n for n in per_micro if not torch.allclose(per_micro[n], four_by_one[n], rtol=1e-3, atol=1e-5)]
    assert differs


def per_micro_batch_samples(self, epoch_iterator, num_batches, device):
    samples, num_items = super(DELTrainer, self).get_batch_samples(epoch_iterator, num_batches, device)
    self.del_metrics.step_digits = None  # each micro-batch falls back to its own digit mean
    return samples, num_items


# ------------------------------------------------------------------ Llama-3's tokenizer: numbers in 1-3-digit tokens
@pytest.fixture(scope="module")
def llama3_model_dir():
    """A tiny random Llama (hidden 64, 2 layers) with Llama-3's real tokenizer (``llama-bpe``: 128,256 tokens, every
    1-, 2- and 3-digit string one of them, numbers cut into chunks of up to three digits)."""
    return tiny_model_dir("llama-bpe")


@pytest.fixture(scope="module")
def llama3_tokenizer(llama3_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(llama3_model_dir))


def assert_slots_counted(trainer, logs, recorded, tokenizer) -> None:
    """Every DEL metric of every step logged and finite, the parts adding up to the loss, DEL weighted by the run's
    del_alpha, and ``digit_targets`` the digit characters the step's targets hold (number tokens counted digit by
    digit), with targets of two and three digits among them."""
    import math

    assert trainer.del_vocab.max_digits == 3 and len(trainer.del_vocab.number_row_ids) == 1110
    assert len(recorded.steps) == len(logs)
    for log in logs:
        assert_parts_logged(log)
        for key in ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy", "digit_targets"):
            assert math.isfinite(log[key]), (key, log)
        assert log["del_loss"] == pytest.approx(trainer.del_settings.alpha * log["del_l_num"], rel=1e-5)
    assert [log["digit_targets"] for log in logs] == recorded.digit_characters(tokenizer)
    assert recorded.longest_number_token(tokenizer) == 3


def test_llama3_tokenizer_plain_ce_counts_digit_slots(tmp_path, llama3_model_dir, llama3_tokenizer, monkeypatch):
    from axolotl_helpers import StepLabels

    recorded = StepLabels().install(monkeypatch)
    trainer = run_axolotl(cpu_config(tmp_path, llama3_model_dir, dataset_rows(tmp_path, 16), max_steps=3))
    assert isinstance(trainer, DELTrainer)
    logs = train_logs(trainer)
    assert len(logs) == 3
    assert_slots_counted(trainer, logs, recorded, llama3_tokenizer)


@pytest.mark.interpreter
def test_llama3_tokenizer_liger_flce_gives_the_plain_ce_metrics(tmp_path, llama3_model_dir):
    """Liger's fused linear cross-entropy (its real kernels under Triton's interpreter, tests/helpers/fused_kernels.py)
    and
    plain cross-entropy, same seed: every DEL metric the same in training and evaluation, as
    tests/hf/test_fused_losses.py checks for the Llama-2 tokenizer."""
    from transformers import LlamaForCausalLM

    from axolotl_helpers import LIGER, run_logged
    from fused_kernels import CALLS, liger_on_cpu, restored_forwards
    from trainer_checks import assert_logs_match

    # few rows, one a micro-batch: the interpreter runs the kernel over V = 128k
    data = (llama3_model_dir, dataset_rows(tmp_path, 8))
    runs = {"plain": run_logged(tmp_path / "plain", data, micro_batch_size=1)}
    before = CALLS["liger_cross_entropy_kernel"]
    with restored_forwards(), liger_on_cpu():
        runs["liger_flce"] = run_logged(
            tmp_path / "liger",
            data,
            micro_batch_size=1,
            plugins=[LIGER, "del_plugin.DELPlugin"],
            liger_fused_linear_cross_entropy=True,
        )
        patched = LlamaForCausalLM.forward.__module__
    assert CALLS["liger_cross_entropy_kernel"] > before  # Liger's loss ran, not transformers'
    assert patched == "liger_kernel.transformers.model.llama"
    assert_logs_match(runs)


def test_llama3_tokenizer_sample_packing(tmp_path, llama3_model_dir, llama3_tokenizer, monkeypatch):
    from axolotl.utils.collators import V2BatchSamplerDataCollatorForSeq2Seq

    from axolotl_helpers import StepLabels

    recorded = StepLabels().install(monkeypatch)
    cfg = cpu_config(
        tmp_path,
        llama3_model_dir,
        dataset_rows(tmp_path, 24),
        sample_packing=True,
        eval_sample_packing=False,
        sequence_len=512,
        micro_batch_size=1,
        max_steps=3,
    )
    trainer = run_axolotl(cfg)
    assert isinstance(trainer.data_collator.collator, V2BatchSamplerDataCollatorForSeq2Seq)
    logs = train_logs(trainer)
    assert len(logs) == 3
    assert_slots_counted(trainer, logs, recorded, llama3_tokenizer)


def dataset_rows(tmp_path, n: int):
    return write_alpaca_jsonl(tmp_path / "data" / f"train-{n}.jsonl", gsm8k_rows(n))
