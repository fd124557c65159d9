"""The ten digit logits at each digit target, and the metrics read from them.

Every digit criterion works on :class:`DigitTargets`: at each position, the ten logits of the target's digit
family. They come from the hidden states (:mod:`~del_plugin.core.hidden`, what training uses: no logits needed)
or from full logits (:func:`digit_targets_from_logits`, for code that only has logits).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .vocab import DigitVocab

__all__ = ["DigitTargets", "digit_targets_from_logits", "digit_entropy", "digit_correct"]


class DigitTargets(NamedTuple):
    """Digit logits and targets, aligned with the targets they were read for.

    ``logits`` is ``[..., 10]``, float32 or wider: the logits of the ten tokens of the target's digit family (family 0
    where the label is not a digit). ``target`` is the digit 0-9 (0 where not a digit); ``mask`` is True at
    digit targets. Values where ``mask`` is False are finite but meaningless.
    """

    logits: torch.Tensor
    target: torch.Tensor
    mask: torch.Tensor


def digit_targets_from_logits(logits: torch.Tensor, targets: torch.Tensor, vocab: DigitVocab) -> DigitTargets:
    """The ten logits of each target's digit family from full logits ``[..., V]``, aligned with ``targets`` ``[...]``
    (``logits[..., t, :]`` predicts ``targets[..., t]``).

    A plain ``gather``: correct for logits of any provenance (a cast, a view, a linear layer, bf16); its backward
    allocates one logits-sized gradient. Training code that can reach the hidden states should use
    :func:`~del_plugin.core.hidden.digit_targets_from_hidden`, which needs neither the logits nor that gradient.
    """
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and targets {tuple(targets.shape)} are not aligned: "
            "logits[..., t, :] must predict targets[..., t] (shift the labels before calling)"
        )
    digit, family = vocab.classify(targets)
    index = vocab.family_ids(logits.device)[family.clamp(min=0)]
    z = logits.gather(-1, index)
    # at least float32 (half-precision logits are upcast on the slice only); float64 stays float64
    return DigitTargets(z.to(torch.promote_types(z.dtype, torch.float32)), digit.clamp(min=0), digit >= 0)


def digit_entropy(digit_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the digit distribution ``softmax(digit_logits)``, per position."""
    log_p = torch.log_softmax(digit_logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def digit_correct(targets: DigitTargets) -> torch.Tensor:
    """Whether the most likely digit is the target, per position (False where not a digit)."""
    return (targets.logits.argmax(-1) == targets.target) & targets.mask
