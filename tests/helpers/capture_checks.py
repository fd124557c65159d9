"""The check the capture tests share: one training step of the model's own cross-entropy plus ``alpha`` x DEL (mean
over the digit targets), with DEL's digit logits read either from the hidden states (:class:`DigitLogitsCapture`,
what training uses) or from the logits the forward returned (the reference), and the gradients it leaves."""

from __future__ import annotations

from typing import NamedTuple

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from del_plugin.core import (
    DigitLogitsCapture,
    digit_criterion_loss,
    digit_targets_from_logits,
    next_token_places,
    shift_to_next_token,
)


class Step(NamedTuple):
    loss: torch.Tensor
    returned_logits: bool  # whether the forward returned logits (fused kernels return none)
    grads: dict[str, torch.Tensor]


def ce_plus_del_step(
    model,
    batch: dict,
    vocab,
    *,
    from_logits: bool,
    alpha: float = 0.5,
    train: bool | None = True,
    criterion: str = "del",
    logits_loss=None,
    **forward_kwargs,
) -> Step:
    """CE (the model's own ``out.loss``) + ``alpha`` x DEL (or another digit ``criterion``) on ``batch``;
    ``train=None`` keeps the model's mode. ``logits_loss(logits, targets)``, when given, replaces the criterion
    by an independent reference computed from the logits the forward returned."""
    targets = shift_to_next_token(batch["labels"], -100)
    places = next_token_places(batch["labels"], vocab)
    if train is not None:
        model.train(train)
    if not _deepspeed_engine(model):  # (a new engine has no gradients yet)
        model.zero_grad(set_to_none=True)
    capture = DigitLogitsCapture(model, vocab)
    try:
        with capture:
            out = model(**batch, **forward_kwargs)
        digits = (
            digit_targets_from_logits(out.logits, targets, vocab) if from_logits else capture.digit_targets(targets)
        )
    finally:
        capture.remove()
    if logits_loss is not None:
        term = alpha * logits_loss(out.logits, targets)
    else:
        term = digit_criterion_loss(criterion, digits, places, alpha=alpha)
    loss = out.loss + term
    if _deepspeed_engine(model):
        model.backward(loss)  # the engine's backward ends by reducing ZeRO's gradients into its partitions
    else:
        loss.backward()
    return Step(loss.detach(), out.logits is not None, gradients(model))


def _deepspeed_engine(model) -> bool:
    return type(model).__name__ == "DeepSpeedEngine"


def gradients(model) -> dict[str, torch.Tensor]:
    """Every parameter's gradient, whole (an FSDP2-sharded gradient gathered from its shards; under a DeepSpeed
    engine, the gradient its optimizer will step with, read with DeepSpeed's ``safe_get_full_grad``, named as in the
    model inside the engine)."""
    if _deepspeed_engine(model):
        from deepspeed.utils import safe_get_full_grad

        grads = {n: safe_get_full_grad(p) for n, p in model.module.named_parameters() if p.requires_grad}
        return {n: g.clone() for n, g in grads.items() if g is not None}
    from torch.distributed.tensor import DTensor

    return {
        n: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
        for n, p in model.named_parameters()
        if p.grad is not None
    }


def assert_same_step(reference: Step, ours: Step, *, rtol: float = 1e-4, atol: float = 1e-6, loss_rtol: float = 1e-5):
    """The same loss and the same gradient for every parameter (and at least one)."""
    assert ours.loss.item() == pytest.approx(reference.loss.item(), rel=loss_rtol)
    assert ours.grads.keys() == reference.grads.keys() and ours.grads
    for name in ours.grads:
        torch.testing.assert_close(ours.grads[name], reference.grads[name], rtol=rtol, atol=atol, msg=name)


class AllocationsOfShape(TorchDispatchMode):
    """Records the shapes of the new tensors ops allocate (views and in-place ops, whose output shares an input's
    storage, allocate nothing)."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = torch.utils._pytree.tree_leaves((args, kwargs))
        storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in storages:
                self.shapes.append(tuple(t.shape))
        return out
