"""The digit logits from the final hidden states: ``z = h · W[digit ids]ᵀ``, without the ``[..., V]`` logits.

A causal LM's head computes ``h · Wᵀ (+ b)`` (``h`` the final norm's output, ``W`` the ``[V, H]`` head weight; the
capture applies an architecture's post-head transform), so the ten logits of a digit family are ``h`` times ten
rows of ``W``. Reading them this way costs ``N x H x 10F`` multiply-adds and never needs the full logits, so DEL works
beside cross-entropy kernels that never materialise them (Cut Cross Entropy, Liger's fused linear
cross-entropy).

Precision. The product runs in float32 from the model's own ``h`` and ``W`` (bf16 or fp16 in mixed precision),
with autocast off: the digit logits are then as exact as a float32 head would give, where the model's own
bf16 logits are rounded to 8 significant bits (a step of 0.125 at a logit of 20) before any loss sees them.
The float32 copies of ``h`` (forward) and of its gradient (backward) are made in blocks of ``_BLOCK_ROWS`` rows and
not kept; the backward pass saves ``h`` itself (the same tensor the head's or the fused loss's backward saves) and
the ``10F x H`` rows.

Gradients. ``h`` gets ``dz · rows``. The head weight gets ``dzᵀ · h`` on its ``10F`` digit rows only, added into
the weight's summed gradient outside autograd, never through a zero ``[V, H]`` gradient (1 GiB in bf16 for
Qwen2.5-7B): :mod:`~del_plugin.core.row_gradient` states when and how. A weight computed from a parameter (a cast, a
view) gets an ordinary ``[V, H]`` gradient instead.
"""

from __future__ import annotations

import torch

from .digits import DigitTargets, select_digit_family, slot_digit_targets
from .row_gradient import dense_row_gradient, row_gradient_sink
from .vocab import DigitVocab

__all__ = [
    "digit_logits_from_hidden",
    "digit_targets_from_hidden",
    "number_logits_from_hidden",
]

# Rows of ``h`` upcast to float32 at a time: bounds the transient copy at _BLOCK_ROWS x H x 4 bytes.
_BLOCK_ROWS = 4096


def _rows_times(hidden: torch.Tensor, rows_t: torch.Tensor) -> torch.Tensor:
    """``hidden.float() @ rows_t`` for ``hidden`` ``[N, H]`` in any float dtype and float32 ``rows_t`` ``[H, R]``."""
    if hidden.shape[0] <= _BLOCK_ROWS:
        return hidden.float() @ rows_t
    out = torch.empty(hidden.shape[0], rows_t.shape[1], dtype=torch.float32, device=hidden.device)
    for block, o in zip(hidden.split(_BLOCK_ROWS), out.split(_BLOCK_ROWS)):
        torch.mm(block.float(), rows_t, out=o)  # into the result: no concatenation
    return out


def _grad_hidden(grad: torch.Tensor, rows: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``(grad @ rows.float()).to(dtype)`` (``[N, H]``) for float32 ``grad`` ``[N, R]``, in row blocks, so that the
    float32 product never exists for more than ``_BLOCK_ROWS`` rows at a time. A float32 ``h`` takes the product
    itself: blocks would only add a second ``[N, H]`` buffer to copy from."""
    rows = rows.float()
    if dtype == torch.float32:
        return grad @ rows
    out = torch.empty(grad.shape[0], rows.shape[1], dtype=dtype, device=grad.device)
    for g, o in zip(grad.split(_BLOCK_ROWS), out.split(_BLOCK_ROWS)):
        o.copy_(g @ rows)
    return out


def _grad_times(grad: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """``grad.T @ hidden.float()`` (``[R, H]``) for float32 ``grad`` ``[N, R]`` and ``hidden`` ``[N, H]``."""
    out = grad.new_zeros(grad.shape[1], hidden.shape[1])
    for g, h in zip(grad.split(_BLOCK_ROWS), hidden.split(_BLOCK_ROWS)):
        out.addmm_(g.t(), h.float())
    return out


class _HiddenDigitLogits(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, row_ids, sink):  # type: ignore[override]
        rows = weight.detach().index_select(0, row_ids)  # [R, H]
        ctx.save_for_backward(hidden, rows, row_ids)
        ctx.sink, ctx.weight_shape = sink, weight.shape
        flat = hidden.detach().reshape(-1, hidden.shape[-1])
        return _rows_times(flat, rows.float().t()).view(*hidden.shape[:-1], rows.shape[0])

    @staticmethod
    def backward(ctx, grad_z):  # type: ignore[override]
        hidden, rows, row_ids = ctx.saved_tensors
        flat_grad = grad_z.reshape(-1, grad_z.shape[-1]).float()
        grad_hidden = None
        if ctx.needs_input_grad[0]:
            grad_hidden = _grad_hidden(flat_grad, rows, hidden.dtype).view(hidden.shape)
        grad_weight = None
        if ctx.needs_input_grad[1]:
            row_grad = _grad_times(flat_grad, hidden.reshape(-1, hidden.shape[-1]))  # [R, H]
            if ctx.sink is not None:
                ctx.sink.add(row_ids, row_grad)
            else:  # a weight computed from a parameter (a cast, a view): a plain gradient through autograd
                grad_weight = dense_row_gradient(ctx.weight_shape, rows.dtype, row_ids, row_grad)
        return grad_hidden, grad_weight, None, None


class _HiddenNumberLogits(torch.autograd.Function):
    """The logits of each number group's rows at that group's positions: ``h[pos_g] · W[rows_g]ᵀ`` per group, one
    ``[N, H]`` gradient for ``h`` (positions of different groups never coincide) and the rows' weight gradient
    added through the sink, as :class:`_HiddenDigitLogits` does."""

    @staticmethod
    def forward(ctx, hidden, weight, sink, *positions_and_rows):  # type: ignore[override]
        flat = hidden.detach().reshape(-1, hidden.shape[-1])
        pairs = list(zip(positions_and_rows[0::2], positions_and_rows[1::2]))
        # the weight itself is saved, not a copy of its 1,110 rows (9 MB at H = 4,096, alive until the backward):
        # the rows are gathered again there (DEL reads the weight after the forward, so it must be whole then too)
        ctx.save_for_backward(hidden, weight.detach(), *positions_and_rows)
        ctx.sink, ctx.groups = sink, len(pairs)
        return tuple(
            _rows_times(flat.index_select(0, pos), weight.detach().index_select(0, ids).float().t())
            for pos, ids in pairs
        )

    @staticmethod
    def backward(ctx, *grad_zs):  # type: ignore[override]
        hidden, weight, *saved = ctx.saved_tensors
        positions, row_ids = saved[0::2], saved[1::2]
        flat = hidden.reshape(-1, hidden.shape[-1])
        grad_hidden = torch.zeros_like(flat) if ctx.needs_input_grad[0] else None
        grad_weight = None
        for pos, ids, grad_z in zip(positions, row_ids, grad_zs):
            if grad_z is None or pos.numel() == 0:
                continue
            grad_z = grad_z.float()
            r = weight.index_select(0, ids)
            if grad_hidden is not None:
                grad_hidden.index_copy_(0, pos, _grad_hidden(grad_z, r, hidden.dtype))
            if ctx.needs_input_grad[1]:
                row_grad = _grad_times(grad_z, flat.index_select(0, pos))
                if ctx.sink is not None:
                    ctx.sink.add(ids, row_grad)
                elif grad_weight is None:
                    grad_weight = dense_row_gradient(weight.shape, weight.dtype, ids, row_grad)
                else:
                    grad_weight.index_add_(0, ids, row_grad.to(weight.dtype))
        if grad_hidden is not None:
            grad_hidden = grad_hidden.view(hidden.shape)
        return (grad_hidden, grad_weight, None) + (None,) * (2 * ctx.groups)


def _check_head(hidden: torch.Tensor, head_weight: torch.Tensor, vocab: DigitVocab, largest_id: int) -> None:
    if head_weight.dim() != 2 or head_weight.shape[0] == 0 or head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"the head weight {tuple(head_weight.shape)} is not the [vocab, hidden] matrix of hidden states "
            f"{tuple(hidden.shape)}; a weight sharded by FSDP or partitioned by DeepSpeed ZeRO-3 must be gathered first"
        )
    if not (head_weight.is_floating_point() and hidden.is_floating_point()):
        raise TypeError(
            f"the head weight ({head_weight.dtype}) and hidden states ({hidden.dtype}) must be floating point; a "
            "quantised LM head cannot be read row by row"
        )
    if largest_id >= head_weight.shape[0]:
        raise ValueError(
            f"digit token id {largest_id} of {vocab.name} is outside the head's {head_weight.shape[0]} rows: the "
            "tokenizer and the model do not match"
        )


def number_logits_from_hidden(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    vocab: DigitVocab,
    positions: list[torch.Tensor],
    head_bias: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """For each group of ``vocab.number_groups``, the float32 logits ``[len(positions[g]), 10 ** digits]`` of its
    tokens at the flat positions ``positions[g]`` of ``hidden`` ``[..., H]``: ``(h @ Wᵀ + b)[pos_g][:, rows_g]``
    without the other rows or positions (1,110 rows at number targets only, for Llama-3). Precision and gradients
    as :func:`digit_logits_from_hidden`."""
    groups = vocab.number_groups
    if len(positions) != len(groups):
        raise ValueError(f"one position tensor per number group ({len(groups)}) is needed, got {len(positions)}")
    _check_head(hidden, head_weight, vocab, max(vocab.number_row_ids))
    row_ids = vocab.group_row_ids_on(hidden.device)
    sink = row_gradient_sink(head_weight)
    args = [t for pair in zip(positions, row_ids) for t in pair]
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        z = list(_HiddenNumberLogits.apply(hidden, head_weight, sink, *args))
        if head_bias is not None:
            z = [zg + head_bias[ids].float() for zg, ids in zip(z, row_ids)]
    return z


def digit_logits_from_hidden(
    hidden: torch.Tensor, head_weight: torch.Tensor, vocab: DigitVocab, head_bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The logits of every digit token, ``[..., F, 10]`` float32, from hidden states ``[..., H]``.

    ``hidden`` is what the LM head reads (the final norm's output), ``head_weight`` its ``[V, H]`` weight and
    ``head_bias`` its ``[V]`` bias, if it has one (Phi-2); ``out[..., f, d]`` is the logit of digit ``d`` of family
    ``f`` (``vocab.family_token_ids``). Equal to ``(hidden @ head_weight.T + head_bias)[..., ids]`` in float32
    (module docstring); differentiable in every input, with the weight's gradient added in place on its digit rows
    (a trainable bias gets an ordinary ``[V]`` gradient).
    """
    _check_head(hidden, head_weight, vocab, max(max(ids) for ids in vocab.family_token_ids))
    ids = vocab.family_ids(hidden.device)
    sink = row_gradient_sink(head_weight)
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        z = _HiddenDigitLogits.apply(hidden, head_weight, ids.reshape(-1), sink)
        if head_bias is not None:
            z = z + head_bias[ids.reshape(-1)].float()
    return z.unflatten(-1, tuple(ids.shape))


def digit_targets_from_hidden(
    hidden: torch.Tensor,
    head_weight: torch.Tensor,
    targets: torch.Tensor,
    vocab: DigitVocab,
    positions: list[torch.Tensor] | None = None,
) -> DigitTargets:
    """:class:`DigitTargets` for aligned ``targets`` from hidden states and the head weight (see
    :func:`digit_logits_from_hidden`); the same as :func:`~del_plugin.core.digits.digit_targets_from_logits` on
    ``hidden @ head_weight.T`` without computing it. With number tokens, the slots of each target
    (:func:`~del_plugin.core.digits.slot_digit_targets`, at ``positions`` when given) from
    :func:`number_logits_from_hidden`."""
    if vocab.max_digits > 1:
        if hidden.shape[:-1] != targets.shape:
            raise ValueError(f"hidden states {tuple(hidden.shape)} do not match targets {tuple(targets.shape)}")
        return slot_digit_targets(
            targets, vocab, lambda where: number_logits_from_hidden(hidden, head_weight, vocab, where), positions
        )
    if positions is not None:
        raise ValueError(f"{vocab.name} has no number tokens: number-token positions are not read")
    return select_digit_family(digit_logits_from_hidden(hidden, head_weight, vocab), targets, vocab)
