"""The rows of the LM head that DEL reads, copied inside the forward pass, with the head's gradient path.

Why a copy: under FSDP2 the head's whole weight exists only while the unit that holds it is gathered, from the
unit's pre-forward to its post-forward and again in the backward pass. Axolotl hands ``fully_shard`` an explicit
``reshard_after_forward`` (``fsdp_config.reshard_after_forward: true`` in the examples), so FSDP2 reshards even the
root unit, which holds the head, as soon as the model's forward returns: the weight's storage is freed (the tensor
is still there, with no data). The number-token reader, which computes each slot's logits after the forward (only
where the targets hold a number token), therefore takes the rows it reads while the forward runs, under FSDP2: the
1,110 rows ``vocab.number_row_ids`` of Llama-3's numbers, against the head's 128,256 (18 MB in float32 at a hidden
size of 4,096). Without FSDP2 it keeps the weight itself; the single-digit reader reads inside the forward.

:func:`gather_rows` copies ``weight[row_ids]`` (float32) and gives the weight their gradient as
:mod:`~del_plugin.core.hidden` does (:mod:`~del_plugin.core.row_gradient`): for a parameter (FSDP2's gathered one
included), added into the weight's summed gradient of the same backward pass, never through a ``[V, H]`` zero
gradient; FSDP then reduce-scatters it with the rest of the head's gradient. :func:`rows_vocab` is the vocabulary
as seen through the copy (its row ``r`` is the head's row ``vocab.number_row_ids[r]``), so
:mod:`~del_plugin.core.hidden`'s functions read the copy exactly as they read the head.

A head weight that is still sharded when the decoder returns (a ``DTensor``: FSDP2 made the head a unit of its
own) is not gathered here: see :class:`~del_plugin.core.capture.DigitLogitsCapture`.
"""

from __future__ import annotations

import torch

from .row_gradient import dense_row_gradient, row_gradient_sink
from .vocab import DigitVocab

__all__ = ["gather_rows", "rows_vocab"]


class _GatheredRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, row_ids, sink):  # type: ignore[override]
        ctx.save_for_backward(row_ids)
        ctx.sink, ctx.weight_shape, ctx.weight_dtype = sink, weight.shape, weight.dtype
        return weight.detach().index_select(0, row_ids).float()

    @staticmethod
    def backward(ctx, grad_rows):  # type: ignore[override]
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (row_ids,) = ctx.saved_tensors
        if ctx.sink is not None:
            ctx.sink.add(row_ids, grad_rows)
            return None, None, None
        # a weight computed from a parameter (a cast, a view): an ordinary gradient through autograd
        return dense_row_gradient(ctx.weight_shape, ctx.weight_dtype, row_ids, grad_rows), None, None


def gather_rows(weight: torch.Tensor, row_ids: torch.Tensor) -> torch.Tensor:
    """``weight[row_ids]`` as a float32 copy (``[R, ...]``, for a ``[V, ...]`` weight or bias), differentiable in
    ``weight``: a parameter's row gradient is added in place into its summed gradient (module docstring)."""
    return _GatheredRows.apply(weight, row_ids, row_gradient_sink(weight))


def rows_vocab(vocab: DigitVocab) -> DigitVocab:
    """``vocab`` with every digit and number token id replaced by its index in ``vocab.number_row_ids``: the
    vocabulary of the ``[R, H]`` copy that :func:`gather_rows` takes of the head's ``vocab.number_row_ids``. Its
    families and number groups are ``vocab``'s, in the same order (its ``number_row_ids`` are ``0..R-1``)."""
    offsets, groups = vocab.group_offsets, vocab.number_groups
    families = len(vocab.family_token_ids)
    spans = [tuple(range(offsets[g], offsets[g + 1])) for g in range(len(groups))]
    return DigitVocab(
        family_token_ids=tuple(spans[:families]),
        family_markers=vocab.family_markers,
        name=f"{vocab.name} (the head's digit rows)",
        number_token_ids=tuple(spans[families:]),
        number_families=vocab.number_families,
    )
