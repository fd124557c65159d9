"""The README's claim: DEL works with a plain transformers.Trainer (no Axolotl involved), through the mixin in
examples/plain_hf_trainer.py; its gradient does not depend on how the step is cut into micro-batches."""

from __future__ import annotations

import math

import pytest
import torch

from del_plugin.hf.collator import NumberSpanCollator

from trainer_checks import GradientCapture, assert_parts_logged, load_example, train_logs

example = load_example("plain_hf_trainer")


def test_plain_trainer_runs_and_adds_del(tmp_path):
    first_loss = {}
    for alpha in (0.0, 5.0):
        trainer = example.main(["--output-dir", str(tmp_path / str(alpha)), "--max-steps", "2", "--alpha", str(alpha)])
        assert "del_target_places" not in trainer.model.forward.__code__.co_varnames
        assert isinstance(trainer.data_collator, NumberSpanCollator)
        logs = train_logs(trainer)
        losses = [log["loss"] for log in logs]
        assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
        for log in logs:
            assert_parts_logged(log)
            assert (log["del_loss"] > 0) == (alpha > 0)
        first_loss[alpha] = losses[0]
    # same seed, same first batch and weights: the DEL run's first loss is CE plus a clearly positive digit term
    assert first_loss[5.0] > first_loss[0.0] + 0.1


def test_mixed_precision_float32_weights_under_bf16_autocast(tmp_path):
    """The paper's recipe (float32 weights, the Trainer's ``bf16=True``): accelerate autocasts the forward out of
    the start-up check's sight, and the run still passes the check and trains."""
    trainer = example.build_trainer(["--output-dir", str(tmp_path), "--max-steps", "2", "--alpha", "1.0"], bf16=True)
    trainer.train()
    assert trainer.accelerator.mixed_precision == "bf16" and trainer.del_capture.verified
    assert next(trainer.model.parameters()).dtype == torch.float32
    logs = train_logs(trainer)
    assert len(logs) == 2 and all(log["del_loss"] > 0 and math.isfinite(log["loss"]) for log in logs)


def first_step_gradients(tmp_path, batch_size: int, grad_accum: int, criterion: str = "del") -> dict[str, torch.Tensor]:
    trainer = example.build_trainer(
        [
            "--output-dir",
            str(tmp_path),
            "--max-steps",
            "1",
            "--alpha",
            "2.0",
            "--criterion",
            criterion,
            "--batch-size",
            str(batch_size),
            "--grad-accum",
            str(grad_accum),
        ],
        max_grad_norm=0.0,
        learning_rate=1e-4,
    )
    capture = GradientCapture()
    trainer.add_callback(capture)
    trainer.train()
    (log,) = train_logs(trainer)
    assert_parts_logged(log)
    assert len(capture.grads) > 0
    return capture.grads


def per_micro_batch_samples(self, epoch_iterator, num_batches, device):
    samples, num_items = super(example.DELTrainer, self).get_batch_samples(epoch_iterator, num_batches, device)
    self.del_metrics.step_digits = None  # each micro-batch falls back to its own digit mean
    return samples, num_items


@pytest.mark.parametrize("criterion", ["del", "ntl_number"])
def test_gradient_is_independent_of_micro_batching(tmp_path, monkeypatch, criterion):
    # the four examples hold 6 to 15 answer digits in 4 to 7 numbers: per-micro-batch means would weigh them
    # differently (ntl_number is averaged over the numbers of the step, the others over its digits)
    one_by_four = first_step_gradients(tmp_path / "ga4", 1, 4, criterion)
    four_by_one = first_step_gradients(tmp_path / "ga1", 4, 1, criterion)
    assert one_by_four.keys() == four_by_one.keys()
    for name in one_by_four:
        torch.testing.assert_close(one_by_four[name], four_by_one[name], rtol=1e-4, atol=1e-6, msg=name)

    # Control: normalising DEL per micro-batch moves the gradient.
    monkeypatch.setattr(example.DELTrainer, "get_batch_samples", per_micro_batch_samples)
    per_micro = first_step_gradients(tmp_path / "ref", 1, 4, criterion)
    differs = [n for n in per_micro if not torch.allclose(per_micro[n], four_by_one[n], rtol=1e-3, atol=1e-5)]
    assert differs


def test_llama3_number_tokens_train_and_count_every_digit(tmp_path):
    """Llama-3's tokenizer cuts numbers into 1-3-digit tokens ('1234' is '123' '4'): each digit is a slot of its
    own, so one epoch's logged digit targets are the answers' digit characters."""
    from tools.assets import tiny_model_dir

    model = ["--model", str(tiny_model_dir("llama-bpe"))]
    trainer = example.main([*model, "--output-dir", str(tmp_path / "run"), "--max-steps", "2", "--alpha", "5.0"])
    tokenizer = trainer.processing_class
    assert any(len(t) == 3 and t.isdigit() for t in tokenizer.tokenize(example.EXAMPLES[1][1]))  # really merged
    logs = train_logs(trainer)
    for log in logs:
        assert_parts_logged(log)
        assert log["del_loss"] > 0
    assert sum(log["digit_targets"] for log in logs) == sum(ch.isdigit() for _, a in example.EXAMPLES for ch in a)
