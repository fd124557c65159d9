"""The ten digit logits at each digit target, taken from the full logits without a full-size gradient.

Every digit criterion works on the ``[..., 10]`` slice that :func:`gather_digit_targets` returns. The slice is
taken at *every* position (ten logits per position is 10/V of the logits) rather than at the digit positions
only, because selecting those would need their count on the host, a device synchronisation per batch.

A plain ``gather`` would allocate a second zero gradient as large as the logits (``[B, T, V]``) in the backward
pass. Two ways avoid it:

* ``sparse`` (the default): the backward returns a sparse gradient, ten entries per position, which autograd adds
  into the dense gradient of any other loss on the same logits, or passes on alone.
* ``in_place``: the backward hands its ``[..., 10]`` gradient to a hook on the logits, which scatter-adds it into
  their summed gradient once every other contribution (cross-entropy's) has arrived. With float32 logits the
  cross-entropy gradient reaches them as a view, which autograd never accumulates into in place, so the sparse
  path then costs an out-of-place logits-sized add; this one costs ten writes per position. It needs another
  loss on the same logits in the same backward pass (the trainer's case: cross-entropy and DEL on the model's
  logits); alone it raises a clear error, since the hook only sees the logits' gradient if something else
  produced one.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from .vocab import DigitVocab

__all__ = ["DigitTargets", "GradientPath", "gather_digit_targets", "digit_entropy", "digit_correct"]

GradientPath = Literal["sparse", "in_place", "dense"]


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


class _HookedGather(torch.autograd.Function):
    """``logits.gather(-1, index)`` whose backward leaves its gradient in ``pending`` for the logits' hook."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, index: torch.Tensor, pending: list) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(index)
        ctx.pending = pending
        return logits.gather(-1, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        (index,) = ctx.saved_tensors
        ctx.pending.append((index, grad))
        return None, None, None


def _gather_into_logits_gradient(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def add_digit_gradient(grad: torch.Tensor | None) -> torch.Tensor:
        # runs after autograd has summed every other gradient of the logits, before it is passed on
        if grad is None:  # autograd cannot turn a None gradient into one, so misuse must be loud
            raise RuntimeError(
                "gather_digit_targets(gradient='in_place') adds the digit gradient into the other gradients of the "
                "logits, but no other loss on these logits was backpropagated; use gradient='sparse' for DEL alone"
            )
        if not grad.is_contiguous():
            grad = grad.contiguous()
        while pending:
            idx, g = pending.pop()
            grad.scatter_add_(-1, idx, g.to(grad.dtype))
        return grad

    logits.register_hook(add_digit_gradient)
    return _HookedGather.apply(logits, index, pending)


def gather_digit_targets(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab: DigitVocab,
    *,
    sparse_grad: bool = True,
    gradient: GradientPath | None = None,
) -> DigitTargets:
    """Take the digit slice of ``logits`` (``[..., V]``) at the targets ``labels`` (``[...]``), aligned.

    ``gradient`` picks how the backward pass reaches ``logits`` (module docstring): ``"sparse"`` (default),
    ``"in_place"`` (only next to another loss on the same logits), or ``"dense"`` (a plain gather, for code
    upstream that cannot take a sparse gradient). ``sparse_grad=False`` is the same as ``gradient="dense"``.
    """
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} are not aligned: "
            "logits[..., t, :] must predict labels[..., t] (shift them before calling)"
        )
    if gradient is None:
        gradient = "sparse" if sparse_grad else "dense"
    if gradient not in ("sparse", "in_place", "dense"):
        raise ValueError(f"gradient must be 'sparse', 'in_place' or 'dense', got {gradient!r}")
    digit, family = vocab.classify(labels)
    mask = digit >= 0
    index = vocab.family_ids(logits.device)[family.clamp(min=0)]
    if not (logits.requires_grad and torch.is_grad_enabled()) or gradient == "dense":
        z = logits.gather(-1, index)
    elif gradient == "sparse":
        z = _SparseGradGather.apply(logits, index)
    else:
        z = _gather_into_logits_gradient(logits, index)
    # at least float32 (half-precision logits are upcast on the slice only); float64 stays float64
    return DigitTargets(z.to(torch.promote_types(z.dtype, torch.float32)), digit.clamp(min=0), mask)


def digit_entropy(digit_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the digit distribution ``softmax(digit_logits)``, per position."""
    log_p = torch.log_softmax(digit_logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def digit_correct(targets: DigitTargets) -> torch.Tensor:
    """Whether the most likely digit is the target, per position (False where not a digit)."""
    return (targets.logits.argmax(-1) == targets.target) & targets.mask
