"""The ten digit logits at each digit target, and the metrics read from them.

Every digit criterion works on :class:`DigitTargets`: at each position, the ten logits of the target's digit
family. They come from the hidden states (:mod:`~del_plugin.core.hidden`, what training uses: no logits needed)
or from full logits (:func:`digit_targets_from_logits`, for code that only has logits).

Number tokens (tokenizers that cut numbers into chunks of 1-3 digits, Llama-3's '123'). A target that is an
m-digit number token gives m digit *slots*, one per digit, left to right. With ``T_m`` the m-digit tokens of the
target's family and ``l`` the logits at that position, slot ``j`` has the ten logits

    z_j[v] = logsumexp over s in T_m whose j-th digit is v of l[s]

so ``softmax(z_j)`` is the model's distribution of the j-th digit among m-digit tokens; for m = 1 they are the ten
digit tokens' logits. :class:`DigitTargets` then has a slot axis (``[..., M, 10]`` logits, ``M`` the
vocabulary's longest number token) and every digit criterion works on slots as it works on single digits. The
marginal conditions each digit on the target token's length: a model that puts its mass on '12' when the target is
'123' is scored by its three-digit tokens only (the other lengths' mass is not a digit of this slot).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch

from .fused import fused
from .places import shift_to_next_token
from .vocab import DigitVocab
from .vocab_lookups import classify_labels, slot_targets_of

__all__ = [
    "DigitTargets",
    "digit_targets_from_logits",
    "digit_entropy",
    "digit_correct",
    "next_token_number_positions",
    "number_target_positions",
    "select_digit_family",
    "slot_digit_targets",
    "slot_logits",
]


class DigitTargets(NamedTuple):
    """Digit logits and targets, aligned with the targets they were read for.

    ``logits`` is ``[..., 10]``, float32 or wider: the logits of the ten tokens of the target's digit family (family 0
    where the label is not a digit). ``target`` (int64 ``[...]``) is the digit 0-9 (0 where not a digit); ``mask``
    (bool ``[...]``) is True at digit targets. Values where ``mask`` is False are finite but meaningless.

    With number tokens (module docstring) each target has ``M`` slots: ``logits`` ``[..., M, 10]``, ``target`` and
    ``mask`` ``[..., M]``, aligned with the slot places of :func:`~del_plugin.core.places.next_token_places`.
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
    if vocab.max_digits > 1:
        flat = logits.reshape(-1, logits.shape[-1])
        rows = vocab.group_row_ids_on(flat.device)

        def group_logits(positions: Sequence[torch.Tensor]) -> list[torch.Tensor]:
            # one gather of [positions, the group's rows] each: never a [positions, V] copy of the logits
            return [flat[pos[:, None], ids[None, :]] for pos, ids in zip(positions, rows)]

        return slot_digit_targets(targets, vocab, group_logits)
    digit, family = vocab.classify(targets)
    index = vocab.family_ids(logits.device)[family.clamp(min=0)]
    z = logits.gather(-1, index)
    # at least float32 (half-precision logits are upcast on the slice only); float64 stays float64
    return DigitTargets(z.to(torch.promote_types(z.dtype, torch.float32)), digit.clamp(min=0), digit >= 0)


def select_digit_family(digit_logits: torch.Tensor, targets: torch.Tensor, vocab: DigitVocab) -> DigitTargets:
    """The ten logits of each target's own digit family from ``[..., F, 10]`` digit logits, aligned with
    ``targets`` (``digit_logits[..., t, :, :]`` predicts ``targets[..., t]``)."""
    if digit_logits.shape[:-2] != targets.shape or digit_logits.shape[-2:] != (vocab.num_families, 10):
        raise ValueError(
            f"digit logits {tuple(digit_logits.shape)} do not match targets {tuple(targets.shape)} and "
            f"{vocab.num_families} digit famil{'y' if vocab.num_families == 1 else 'ies'} of 10"
        )
    return _select_family(digit_logits, targets, vocab.code_table_on(targets.device))


@fused
def _select_family(digit_logits: torch.Tensor, targets: torch.Tensor, code_table: torch.Tensor) -> DigitTargets:
    digit, family = classify_labels(targets, code_table)
    index = family.clamp(min=0)[..., None, None].expand(*targets.shape, 1, 10)
    z = digit_logits.gather(-2, index).squeeze(-2)
    return DigitTargets(z.to(torch.promote_types(z.dtype, torch.float32)), digit.clamp(min=0), digit >= 0)


def digit_entropy(digit_logits: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of the digit distribution ``softmax(digit_logits)``, per position: ``[..., 10]`` logits of
    any float dtype in, float32 ``[...]`` (float64 for float64 logits) out."""
    log_p = torch.log_softmax(digit_logits.float(), dim=-1)
    return -(log_p.exp() * log_p).sum(-1)


def digit_correct(targets: DigitTargets) -> torch.Tensor:
    """Whether the most likely digit is the target, per position (False where not a digit): bool ``[...]`` from
    :class:`DigitTargets` (logits ``[..., 10]``, target int64 and mask bool ``[...]``)."""
    return (targets.logits.argmax(-1) == targets.target) & targets.mask


def slot_logits(token_logits: torch.Tensor, digits: int) -> torch.Tensor:
    """The ``[N, digits, 10]`` slot logits of ``[N, 10 ** digits]`` logits of a group's tokens in value order: slot
    ``j`` is the logsumexp over the tokens whose ``j``-th digit (left to right) is ``v``. The logits' dtype is
    kept."""
    if digits == 1:
        return token_logits.unsqueeze(1)
    grid = token_logits.unflatten(-1, (10,) * digits)  # axis 1 + j: the j-th digit
    axes = range(1, digits + 1)
    return torch.stack([torch.logsumexp(grid, dim=[a for a in axes if a != 1 + j]) for j in range(digits)], dim=1)


def number_target_positions(targets: torch.Tensor, vocab: DigitVocab) -> list[torch.Tensor]:
    """The flat positions (in ``targets.reshape(-1)``) of the targets of each group of
    :attr:`~del_plugin.core.vocab.DigitVocab.number_groups`, in order, as int64 tensors on the device of
    ``targets``: where :func:`slot_digit_targets` computes each group's logits.

    CPU tensors, as a collator has them, are read with NumPy (``NumberSpanCollator`` adds these positions to every
    batch, :func:`next_token_number_positions`, so that the training step never asks the device where its number
    tokens are). A tensor on another device is read with one ``nonzero`` per group: a host synchronisation each.
    ``targets``: integer token ids ``[...]`` (-100 where masked); returns one 1-D int64 tensor ``[N_g]`` per
    group ``g``."""
    groups = len(vocab.number_groups)
    if targets.device.type == "cpu":
        return _number_positions_numpy(targets.reshape(1, -1).numpy(), vocab, shift=False)
    flat_group = vocab.slot_targets(targets)[0].reshape(-1)
    return [(flat_group == g).nonzero().squeeze(1) for g in range(groups)]


def next_token_number_positions(
    labels: torch.Tensor, vocab: DigitVocab, shift_labels: torch.Tensor | None = None
) -> list[torch.Tensor]:
    """:func:`number_target_positions` of the targets aligned with causal-LM logits (``labels[:, t + 1]`` at
    ``t``, as :func:`~del_plugin.core.places.next_token_places` aligns places), from a CPU ``[B, T]`` batch of
    labels, without making the shifted tensor; of ``shift_labels`` when a collator provides them. ``labels`` and
    ``shift_labels``: integer ``[B, T]`` token ids (-100 where masked); returns one 1-D int64 tensor per group of
    flat positions in ``[B, T]``."""
    if shift_labels is not None:
        return number_target_positions(shift_labels, vocab)
    if labels.device.type != "cpu" or labels.dim() != 2:
        return number_target_positions(shift_to_next_token(labels, -100), vocab)
    return _number_positions_numpy(labels.numpy(), vocab, shift=True)


def _number_positions_numpy(ids: np.ndarray, vocab: DigitVocab, shift: bool) -> list[torch.Tensor]:
    """Per number group, the flat positions in ``[B, T]`` of the targets in it: ``ids[b, t]`` itself, or with
    ``shift`` ``ids[b, t + 1]`` (nothing at ``t = T - 1``). One lookup and one ``nonzero`` over the batch, then
    the groups split among the number targets only."""
    batch, length = ids.shape
    if shift:
        ids = ids[:, 1:]
    table = vocab.number_group_table
    group = table.take(ids, mode="clip").reshape(-1)  # ids past the table: its final -1
    if table[0] >= 0:  # token 0 is a number token: -100 and other negative ids read as id 0
        group = np.where(ids.reshape(-1) < 0, -1, group)
    flat = np.flatnonzero(group >= 0)
    of = group.take(flat)
    if shift and length > 1:  # from the [B, T - 1] grid of the shifted ids back to [B, T]
        flat += flat // (length - 1)
    return [torch.from_numpy(flat[of == g]) for g in range(len(vocab.number_groups))]


def slot_digit_targets(
    targets: torch.Tensor,
    vocab: DigitVocab,
    group_logits: Callable[[Sequence[torch.Tensor]], Sequence[torch.Tensor]],
    positions: Sequence[torch.Tensor] | None = None,
) -> DigitTargets:
    """:class:`DigitTargets` with a slot axis for aligned ``targets``, from the logits of each number group's tokens
    at the flat positions whose target is in that group: ``group_logits(positions)`` gets one index tensor per
    group of :attr:`~del_plugin.core.vocab.DigitVocab.number_groups` and returns the ``[len(positions[g]),
    10 ** digits]`` logits of group ``g``'s tokens there (from full logits or from the hidden states).

    A group's logits are computed only where a target needs them. ``positions`` are those places, as
    :func:`number_target_positions` gives them; computed here when not given, which on a GPU makes the host wait
    for the device once per group. Empty groups are computed too (zero rows), so the result always has a graph."""
    groups = len(vocab.number_groups)
    if positions is None:
        positions = number_target_positions(targets, vocab)
    elif len(positions) != groups:
        raise ValueError(f"one position tensor per number group ({groups}) is needed, got {len(positions)}")
    computed = group_logits(positions)
    digits = tuple(g.digits for g in vocab.number_groups)
    tables = vocab.number_tables_on(targets.device)
    return _assemble_slots(targets, tables, vocab.max_digits, digits, list(positions), list(computed))


@fused
def _assemble_slots(
    targets: torch.Tensor,
    tables: dict[str, torch.Tensor],
    slots: int,
    digits: tuple[int, ...],
    positions: list[torch.Tensor],
    computed: list[torch.Tensor],
) -> DigitTargets:
    _, digit, mask = slot_targets_of(targets, tables, slots)
    out = None
    for pos, z, m in zip(positions, computed, digits):
        per_slot = slot_logits(z.to(torch.promote_types(z.dtype, torch.float32)), m)
        if m < slots:
            per_slot = torch.nn.functional.pad(per_slot, (0, 0, 0, slots - m))
        if out is None:
            out = per_slot.new_zeros(targets.numel(), slots, 10)
        out = out.index_copy(0, pos, per_slot)
    return DigitTargets(out.view(*targets.shape, slots, 10), digit, mask)
