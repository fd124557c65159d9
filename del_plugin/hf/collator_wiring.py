"""The trainer's collators wrapped in :class:`~del_plugin.hf.collator.NumberSpanCollator`, and the number-token
positions it sends carried to the device with the batch."""

from __future__ import annotations

import torch

from ..core.vocab import DigitVocab
from .collator import NUMBER_POSITIONS_KEY, NumberSpanCollator

__all__ = ["batches_dispatched", "prepare_with_positions", "wrap_collators"]

COLLATOR_ATTRIBUTES = ("data_collator", "train_data_collator", "eval_data_collator")


def wrap_collators(trainer, vocab: DigitVocab) -> bool:
    """Wrap each of the trainer's collators; returns whether they send the number-token positions. Dispatched
    batches are cut along their first axis per process, which the positions (one flat list per batch) do not
    survive: the step then finds them on the device."""
    positions = not batches_dispatched(trainer)
    for attr in COLLATOR_ATTRIBUTES:
        collator = getattr(trainer, attr, None)
        if collator is not None:
            setattr(trainer, attr, NumberSpanCollator(collator, vocab, number_positions=positions))
    return positions


def batches_dispatched(trainer) -> bool:
    """Whether accelerate dispatches the batches (reads them on one process and cuts every tensor along its
    first axis): ``accelerator_config.dispatch_batches``, by default for iterable datasets."""
    config = getattr(trainer.args, "accelerator_config", None)
    dispatch = config.get("dispatch_batches") if isinstance(config, dict) else getattr(config, "dispatch_batches", None)
    if dispatch is not None:
        return bool(dispatch)
    datasets = (getattr(trainer, "train_dataset", None), getattr(trainer, "eval_dataset", None))
    datasets += tuple(datasets[1].values()) if isinstance(datasets[1], dict) else ()
    return any(isinstance(d, torch.utils.data.IterableDataset) for d in datasets)


def prepare_with_positions(inputs, prepare, device):
    """``prepare(inputs)`` (the host's ``_prepare_inputs``) with the number-token positions copied to ``device``
    without blocking. They sit in a list, which a BatchEncoding's .to() (what accelerate calls on the batches of a
    Hugging Face collator) leaves on the host and the Trainer then copies with blocking copies, each a host
    synchronisation on a GPU: copied here, beside the batch's own copies."""
    positions = inputs.pop(NUMBER_POSITIONS_KEY, None)
    inputs = prepare(inputs)
    if positions is not None:
        inputs[NUMBER_POSITIONS_KEY] = [p.to(device, non_blocking=True) for p in positions]
    return inputs
