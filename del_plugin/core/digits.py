"""The ten digit logits at each digit target, taken from the full logits without a full-size gradient.

Every digit criterion works on the ``[..., 10]`` slice that :func:`gather_digit_targets` returns. The slice is
taken at *every* position (ten logits per position is 10/V of the logits) rather than at the digit positions
only, because selecting those would need their count on the host, a device synchronisation per batch.

Its backward returns a sparse gradient, ten entries per position, which autograd adds in place into the dense
gradient that cross-entropy produces for the same logits. A plain ``gather`` would allocate a second zero
gradient as large as the logits (``[B, T, V]``) in the backward pass.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .vocab import DigitVocab

__all__ = ["DigitTargets", "gather_digit_targets", "digit_entropy", "digit_correct"]


class DigitTargets(NamedTuple):
    """Digit logits and targets, aligned with ``labels``.

    ``logits`` is ``[..., 10]``, float32 or wider: the logits of the ten tokens of the target's digit family (family 0
    where the label is not a digit). ``target`` is the digit 0-9 (0 where not a digit); ``mask`` is True at
    digit targets. Values where ``mask`` is False are finite but meaningless.
    """

    logits: torch.Tensor
    target: torch.Tensor
    mask: torch.Tensor


class _SparseGradGather(torch.autograd.Function):
    """``logits.gather(-1, index)`` whose backward returns a sparse COO gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(index)
        ctx.logits_shape = logits.shape
        ctx.logits_dtype = logits.dtype
        return logits.gather(-1, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (index,) = ctx.saved_tensors
        shape = ctx.logits_shape
        lead = torch.unravel_index(
            torch.arange(index.numel() // index.shape[-1], device=index.device), tuple(shape[:-1])
        )
        k = index.shape[-1]
        coords = [c.repeat_interleave(k) for c in lead] + [index.reshape(-1)]
        sparse = torch.sparse_coo_tensor(
            torch.stack(coords), grad.reshape(-1).to(ctx.logits_dtype),
            size=shape,
            is_coalesced=False,
            check_invariants=False,
        )
        return sparse, None


def gather_digit_targets(
    logits: torch.Tensor, labels: torch.Tensor, vocab: DigitVocab, *, sparse_grad: bool = True
) -> DigitTargets:
    """Take the digit slice of ``logits`` (``[..., V]``) at the targets ``labels`` (``[...]``), aligned.

    ``sparse_grad=True`` (the default) makes the backward pass return a sparse gradient for ``logits``; this is
    what keeps DEL's memory cost near zero when it is added to cross-entropy on the same logits. Pass False
    when the slice is the *only* use of ``logits`` and the code upstream cannot take a sparse gradient.
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} are not aligned: "
            "logits[..., t, :] must predict labels[..., t] (shift them before calling)"
        )
    digit, family = vocab.classify(labels)
    mask = digit >= 0
    index = vocab.family_ids(logits.device)[family.clamp(min=0)]
    if sparse_grad and logits.requires_grad and torch.is_grad_enabled():
        z = _SparseGradGather.apply(logits, index)
    else:
        z = logits.gather(-1, index)
    # at least float32 (half-precision logits are upcast on the slice only); float64 stays float64
    return DigitTargets(z.to(torch.promote_types(z.dtype, torch.float32)), digit.clamp(min=0), mask)


def digit_entropy(digit_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the digit distribution ``softmax(digit_logits)``, per position."""
    log_p = torch.log_softmax(digit_logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def digit_correct(targets: DigitTargets) -> torch.Tensor:
    """Whether the most likely digit is the target, per position (False where not a digit)."""
    return (targets.logits.argmax(-1) == targets.target) & targets.mask
