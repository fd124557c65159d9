"""The number-span collator: wraps whichever collator the host chose and adds the digit places of each target.

Places are computed here, on the CPU and in the data-loader workers, so that the training step only gathers ten
logits per position. With number tokens (Llama-3's '123') the collator also says where they are, per number group,
so that the step computes each group's logits there without asking the device (a host synchronisation per group on
a GPU). This module imports no Axolotl: it wraps any callable collator (HF, TRL, Axolotl).
"""

from __future__ import annotations

from collections import UserDict
from collections.abc import Callable
from typing import Any

from ..core import DigitVocab, next_token_places
from ..core.digits import next_token_number_positions

TARGET_PLACES_KEY = "del_target_places"
NUMBER_POSITIONS_KEY = "del_number_positions"


class NumberSpanCollator:
    """``collator(features)`` plus ``batch["del_target_places"]``: for each position t of the logits, the place
    of the digit target ``labels[:, t + 1]`` in its number (``NOT_A_DIGIT`` elsewhere), int32 ``[B, T]``.

    Packed batches are read with their ``position_ids``, so a number never spans two packed samples. With number
    tokens and ``number_positions`` (the default), also ``batch["del_number_positions"]``: for each group of
    :attr:`~del_plugin.core.vocab.DigitVocab.number_groups`, the flat positions ``b * T + t`` whose target is one
    of its tokens, as a list of int64 tensors (:func:`~del_plugin.core.digits.next_token_number_positions`). Their
    lengths differ from batch to batch and from the batch size, so a loader that cuts every tensor of a batch
    along its first axis (accelerate's dispatched batches) would cut them wrongly: the trainer turns them off
    there. Every other attribute is the wrapped collator's (``tokenizer``, ``pad_to_multiple_of`` …), so code that
    inspects the collator still sees the one it configured.
    """

    def __init__(self, collator: Callable[..., dict], vocab: DigitVocab, number_positions: bool = True):
        if isinstance(collator, NumberSpanCollator):
            collator = collator.collator
        self.collator = collator
        self.vocab = vocab
        self.number_positions = number_positions and vocab.max_digits > 1

    def __call__(self, features: Any, *args: Any, **kwargs: Any) -> dict:
        batch = self.collator(features, *args, **kwargs)
        # a BatchEncoding (a UserDict) answers .get() in Python, through a KeyError for each missing key
        fields = batch.data if isinstance(batch, UserDict) else batch
        labels = fields.get("labels")
        if labels is None:
            raise KeyError(
                f"del_plugin: the collator {type(self.collator).__name__} returned no `labels` "
                f"(keys: {sorted(batch)}); DEL needs the training targets"
            )
        shift_labels = fields.get("shift_labels")
        batch[TARGET_PLACES_KEY] = next_token_places(labels, self.vocab, fields.get("position_ids"), shift_labels)
        if self.number_positions:  # of the targets the trainer reads: shift_labels, else the labels shifted
            batch[NUMBER_POSITIONS_KEY] = next_token_number_positions(labels, self.vocab, shift_labels)
        return batch

    def __getattr__(self, name: str) -> Any:
        # only reached for attributes this object lacks; guard against recursion while unpickling
        if name in ("collator", "vocab", "number_positions"):
            raise AttributeError(name)
        return getattr(self.collator, name)

    def __repr__(self) -> str:
        return f"NumberSpanCollator({self.collator!r}, vocab={self.vocab.name!r})"
