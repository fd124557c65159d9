"""How :class:`~del_plugin.hf.trainer.DELTrainerMixin` scales DEL's digit term for what ``transformers.Trainer`` does
with the loss it returns, so that an optimizer step's gradient is that of ``alpha * sum(l_t) / N`` (the sum and the
digit count ``N`` over every micro-batch of the step and every data-parallel rank), whatever the accumulation,
micro-batch size and number of processes.

The Trainer (transformers 5.20.1 and 5.25.0 alike, ``Trainer.training_step`` and ``Trainer.compute_loss``):

* divides the returned loss by the accumulation steps unless it is "scaled for GA": ``loss_is_scaled_for_ga`` when
  the trainer sets it, else when the model takes loss kwargs and the step's ``num_items_in_batch`` was counted, or
  when a ``compute_loss_func`` is set;
* multiplies a loss normalised by ``num_items_in_batch`` by the number of processes (over the tensor-parallel size;
  the GPU count under ``DataParallel``) when ``average_tokens_across_devices`` is on;
* under DDP and FSDP, averages the gradients over the ranks.

Every input is one of those decisions' inputs, read from the trainer at the call site: a change in the Trainer's
rules shows as a gradient that differs from the hand-worked one in ``tests/hf/test_normalisation.py``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["StepScales", "step_scales"]


class StepScales(NamedTuple):
    """The factors of one training micro-batch."""

    # multiplies alpha * sum_micro(l_t) / N_step in the loss the mixin returns to the Trainer
    digit_term: float
    # this micro-batch's share of the loss the Trainer logs (it adds the divided loss of every micro-batch)
    logged: float
    # the factor Trainer.compute_loss applied to a loss normalised by num_items_in_batch (the cross-entropy logged
    # beside a token criterion takes the same)
    host_loss: float


def step_scales(
    *,
    accumulation_steps: int,
    num_processes: int,
    loss_is_scaled_for_ga: bool | None,
    model_accepts_loss_kwargs: bool,
    compute_loss_func_given: bool,
    num_items_in_batch_given: bool,
    average_tokens_across_devices: bool,
    tp_size: int = 1,
    n_gpu: int = 1,
) -> StepScales:
    """The factors for a micro-batch of an optimizer step of ``accumulation_steps`` micro-batches on each of
    ``num_processes`` ranks (module docstring). DEL's count of the step's digits is always summed over the ranks
    (the mixin's ``get_batch_samples``), so its term takes the rank factor whether or not the Trainer averages
    tokens across devices: the ranks' gradients are averaged either way."""
    scaled = loss_is_scaled_for_ga
    if scaled is None:
        scaled = (model_accepts_loss_kwargs and num_items_in_batch_given) or compute_loss_func_given
    divided_by = 1 if scaled else accumulation_steps
    host_loss = 1
    if (
        average_tokens_across_devices
        and (model_accepts_loss_kwargs or compute_loss_func_given)
        and num_items_in_batch_given
    ):
        host_loss = num_processes // tp_size if n_gpu <= 1 else n_gpu
    return StepScales(digit_term=num_processes * divided_by, logged=1.0 / divided_by, host_loss=host_loss)
