"""DEL's gradient-accumulation and multi-rank normalisation (del_plugin/hf/normalisation.py): the pure factors against
hand-worked values, and one real ``transformers.Trainer`` step's gradient against the gradient of the step's loss
worked out by hand, for accumulation 1 x 4 and 4 x 1, ``average_tokens_across_devices`` on and off, and a model that
takes loss kwargs or not (the two ways the Trainer treats the loss). It runs on both test lanes (transformers
5.20.1 and the newest, CONTRIBUTING.md): a Trainer release that changes how it scales the loss fails here."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from del_plugin.core import digit_entropy_loss, shift_to_next_token
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.hf.collator import TARGET_PLACES_KEY
from del_plugin.hf.normalisation import StepScales, step_scales

from trainer_checks import GradientCapture, load_example, train_logs

example = load_example("plain_hf_trainer")
ALPHA = 2.0


def scales(**overrides) -> StepScales:
    keys = dict(
        accumulation_steps=4,
        num_processes=1,
        loss_is_scaled_for_ga=None,
        model_accepts_loss_kwargs=True,
        compute_loss_func_given=False,
        num_items_in_batch_given=True,
        average_tokens_across_devices=True,
    )
    return step_scales(**(keys | overrides))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # the model normalises its loss by the step's token count: the Trainer leaves the loss as it is
        ({}, (1, 1.0, 1)),
        # a model without loss kwargs: the Trainer divides by the 4 accumulation steps, which DEL's term undoes
        ({"model_accepts_loss_kwargs": False}, (4, 0.25, 1)),
        # no token count (e.g. no labels counted): divided as well
        ({"num_items_in_batch_given": False}, (4, 0.25, 1)),
        # a compute_loss_func (a token criterion's) is taken as scaled
        ({"model_accepts_loss_kwargs": False, "compute_loss_func_given": True}, (1, 1.0, 1)),
        # the trainer's own loss_is_scaled_for_ga wins over the Trainer's rule, either way
        ({"loss_is_scaled_for_ga": False}, (4, 0.25, 1)),
        ({"model_accepts_loss_kwargs": False, "loss_is_scaled_for_ga": True}, (1, 1.0, 1)),
        # 2 ranks: the ranks' gradients are averaged, DEL's count is summed over them: x2 (x8 with the GA factor);
        # the host's loss takes the rank factor only when tokens are averaged across devices
        ({"num_processes": 2}, (2, 1.0, 2)),
        ({"num_processes": 2, "average_tokens_across_devices": False}, (2, 1.0, 1)),
        ({"num_processes": 2, "model_accepts_loss_kwargs": False}, (8, 0.25, 1)),
        # tensor parallelism 2 of 4 processes: the host's factor counts the 2 data-parallel groups
        ({"num_processes": 4, "tp_size": 2}, (4, 1.0, 2)),
        # DataParallel: one process, the host's factor is the GPU count
        ({"n_gpu": 2}, (1, 1.0, 2)),
    ],
)
def test_step_scales_by_hand(overrides, expected):
    assert tuple(scales(**overrides)) == pytest.approx(expected)


def test_each_digit_weighs_alpha_over_the_steps_digits():
    """The Trainer's arithmetic, done by hand for 3 ranks x 4 micro-batches: each micro-batch's returned term
    ``alpha * sum_micro(l) * digit_term / N``, divided by the accumulation steps when the loss is not scaled for GA,
    summed over the micro-batches and averaged over the ranks (DDP), is ``alpha * sum_step(l) / N``."""
    generator = torch.Generator().manual_seed(0)
    ranks, steps = 3, 4
    sums = torch.rand(ranks, steps, generator=generator, dtype=torch.float64)  # each micro-batch's sum of l_t
    digits = 57  # the step's digit targets, over every micro-batch and rank
    for accepts_kwargs in (True, False):
        s = scales(accumulation_steps=steps, num_processes=ranks, model_accepts_loss_kwargs=accepts_kwargs)
        trainer_divides = not accepts_kwargs
        returned = ALPHA * sums * s.digit_term / digits
        backward = returned / steps if trainer_divides else returned
        gradient_weight = backward.sum(dim=1).mean(dim=0)  # accumulated, then DDP's average over the ranks
        assert gradient_weight.item() == pytest.approx(ALPHA * sums.sum().item() / digits, rel=1e-12)


# ------------------------------------------------------------------------------------------ a real Trainer step
def hand_worked_step(trainer, split: tuple[int, int], accepts_loss_kwargs: bool):
    """(gradients, ce, del) of one optimizer step over the example's four rows, worked out without the Trainer or
    DEL's capture: a fresh copy of the model, full logits, DEL's sum from the logits (tests/core/test_loss.py checks it
    by hand), ``alpha * sum(l) / N`` over the step's digits, and the cross-entropy as the Trainer defines the step's:
    the token sum over the step's target tokens when the model takes loss kwargs, else each micro-batch's token mean
    divided by the accumulation steps."""
    batch_size, accumulation = split
    model_dir = trainer.model.config._name_or_path
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    collate, rows = trainer.data_collator, list(trainer.train_dataset)
    micro_batches = [collate(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
    assert len(micro_batches) == accumulation
    targets_of = [shift_to_next_token(b["labels"], -100) for b in micro_batches]
    tokens = sum((t != -100).sum() for t in targets_of)
    digits = sum((b[TARGET_PLACES_KEY] != NOT_A_DIGIT).sum() for b in micro_batches)
    ce = del_term = 0.0
    for batch, targets in zip(micro_batches, targets_of):
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum")
        ce = ce + (nll / tokens if accepts_loss_kwargs else nll / (targets != -100).sum() / accumulation)
        l_sum = digit_entropy_loss(logits, targets, batch[TARGET_PLACES_KEY], trainer.del_vocab, reduction="sum")
        del_term = del_term + ALPHA * l_sum / digits
    (ce + del_term).backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return grads, ce.item(), del_term.item()


@pytest.mark.parametrize("accepts_loss_kwargs", [True, False], ids=["loss-kwargs", "no-loss-kwargs"])
@pytest.mark.parametrize("average_tokens", [True, False], ids=["avg-tokens", "no-avg-tokens"])
@pytest.mark.parametrize("split", [(4, 1), (1, 4)], ids=["4x1", "1x4"])
def test_trainer_step_gradient_is_the_hand_worked_one(tmp_path, split, average_tokens, accepts_loss_kwargs):
    batch_size, accumulation = split
    argv = ["--output-dir", str(tmp_path), "--max-steps", "1", "--alpha", str(ALPHA)]
    argv += ["--batch-size", str(batch_size), "--grad-accum", str(accumulation)]
    trainer = example.build_trainer(argv, max_grad_norm=0.0, average_tokens_across_devices=average_tokens)
    assert trainer.model_accepts_loss_kwargs  # transformers' Llama takes them
    # what the Trainer reads at construction for a model whose forward takes no loss kwargs (it then lets the model
    # average over the micro-batch, passes no token count and divides the loss by the accumulation steps)
    trainer.model_accepts_loss_kwargs = accepts_loss_kwargs
    capture = GradientCapture()
    trainer.add_callback(capture)
    trainer.train()

    grads, ce, del_term = hand_worked_step(trainer, split, accepts_loss_kwargs)
    assert capture.grads.keys() == grads.keys() and len(grads) > 0
    for name, grad in grads.items():
        torch.testing.assert_close(capture.grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    (log,) = train_logs(trainer)
    assert log["ce_loss"] == pytest.approx(ce, rel=1e-4)
    assert log["del_loss"] == pytest.approx(del_term, rel=1e-4)
    assert log["loss"] == pytest.approx(ce + del_term, rel=1e-4)
