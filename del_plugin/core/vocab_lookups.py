"""Lookups of token ids in a vocabulary's device tables, as functions of tensors only, so that a compiled program
(:mod:`~del_plugin.core.fused`) can hold them; the :class:`~del_plugin.core.vocab.DigitVocab` methods call them
with the vocabulary's tables."""

from __future__ import annotations

import torch

__all__ = ["BARE_POINT", "LEADING_POINT", "classify_labels", "lookup", "slot_targets_of"]

# the code of the bare '.' and of the leading-point tokens ('*.', '▁.') in DigitVocab.code_table_on
BARE_POINT = -2
LEADING_POINT = -3


def lookup(table: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``table[labels]`` as int64, and -1 for -100 and every id past the table. ``table``: integer ``[V]``;
    ``labels``: integer, any shape; the result has the shape of ``labels``."""
    size = table.shape[0]
    in_table = (labels >= 0) & (labels < size)
    return torch.where(in_table, table[labels.clamp(0, size - 1)].long(), -1)


def classify_labels(labels: torch.Tensor, code_table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`DigitVocab.classify <del_plugin.core.vocab.DigitVocab.classify>` with its
    :meth:`~del_plugin.core.vocab.DigitVocab.code_table_on`. ``labels``: integer token ids ``[...]``; returns the
    digit (0-9) and the family of each label, int64 ``[...]``, -1 where it is no digit."""
    code = lookup(code_table, labels)
    is_digit = code >= 0
    digit = torch.where(is_digit, code % 10, -1)
    family = torch.where(is_digit, code // 10, -1)
    return digit, family


def slot_targets_of(
    labels: torch.Tensor, tables: dict[str, torch.Tensor], slots: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:meth:`DigitVocab.slot_targets <del_plugin.core.vocab.DigitVocab.slot_targets>` with its
    :meth:`~del_plugin.core.vocab.DigitVocab.number_tables_on` and ``slots`` =
    :attr:`~del_plugin.core.vocab.DigitVocab.max_digits`. ``labels``: integer token ids ``[...]``; ``tables``: the
    integer ``[V]`` lookups; returns ``group`` (int64 ``[...]``), ``digit`` (int64 ``[..., slots]``) and ``mask``
    (bool ``[..., slots]``)."""
    row = lookup(tables["row"], labels)
    is_number = row >= 0
    safe = row.clamp(min=0)
    group = torch.where(is_number, tables["group"][safe], -1)
    digits = torch.where(is_number, tables["digits"][safe], 0)
    value = tables["value"][safe]
    slot = torch.arange(slots, device=labels.device)
    mask = slot < digits.unsqueeze(-1)
    power = torch.pow(10, (digits.unsqueeze(-1) - 1 - slot).clamp(min=0))
    digit = torch.where(mask, value.unsqueeze(-1) // power % 10, 0)
    return group, digit, mask
