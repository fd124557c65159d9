"""A :class:`~del_plugin.core.vocab.DigitVocab`'s tensors on the devices it is used on: the lookup tables built from
its ids (each digit token's code, the families' ids, the number tokens' rows), built once per device and kept.

The vocabulary says what the tables hold; this module builds them as tensors and keeps one copy per device, so that
a training step reads them without a host-to-device copy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .vocab_lookups import BARE_POINT, LEADING_POINT

Tables = torch.Tensor | tuple[torch.Tensor, ...] | dict[str, torch.Tensor]


class DeviceTables:
    """Tables by name and device, each built once: ``get(name, device, build)`` returns ``build()``'s tensors moved
    to ``device``, building them on the first call for that name and device only."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], Tables] = {}

    def __len__(self) -> int:
        return len(self._tables)

    def get(self, name: str, device: torch.device, build: Callable[[], Tables]) -> Tables:
        """Built outside inference mode: a table first made while evaluating (``torch.inference_mode``) would be an
        inference tensor, which a later training step's autograd refuses to save."""
        key = (name, str(device))
        tables = self._tables.get(key)
        if tables is None:
            with torch.inference_mode(False):
                built = build()
                if isinstance(built, torch.Tensor):
                    tables = built.to(device)
                elif isinstance(built, dict):
                    tables = {k: v.to(device) for k, v in built.items()}
                else:
                    tables = tuple(t.to(device) for t in built)
            self._tables[key] = tables
        return tables


def digit_code_tables(vocab) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A :class:`~del_plugin.core.vocab.DigitVocab`'s ``(code, family_ids, arange(10))`` on the CPU:
    ``code[id] = family * 10 + digit`` for digit tokens, ``BARE_POINT`` / ``LEADING_POINT`` for decimal points, -1
    elsewhere (one int16 per vocabulary entry), and the ``[num_families, 10]`` long tensor of digit token ids."""
    code = torch.full((vocab.table_size,), -1, dtype=torch.int16)
    for f, ids in enumerate(vocab.family_token_ids):
        code[list(ids)] = torch.arange(10, dtype=torch.int16) + 10 * f
    if vocab.decimal_point_id is not None:
        code[vocab.decimal_point_id] = BARE_POINT
    if vocab.leading_point_ids:
        code[list(vocab.leading_point_ids)] = LEADING_POINT
    return code, torch.tensor(vocab.family_token_ids, dtype=torch.long), torch.arange(10)


def number_lookup_tables(vocab) -> dict[str, torch.Tensor]:
    """The tables of a :class:`~del_plugin.core.vocab.DigitVocab` that
    :func:`~del_plugin.core.vocab_lookups.slot_targets_of` reads, on the CPU: ``row`` (the number row
    of each token id, or -1), per number row its ``group``, ``digits`` and ``value``, and ``row_ids`` (the ids of
    the number rows)."""
    rows = torch.tensor(vocab.number_row_ids, dtype=torch.long)
    row = torch.full((vocab.table_size,), -1, dtype=torch.long)
    row[rows] = torch.arange(len(rows))
    group = torch.cat([torch.full((len(g.token_ids),), k) for k, g in enumerate(vocab.number_groups)])
    digits = torch.tensor([g.digits for g in vocab.number_groups])[group]
    value = torch.arange(len(rows)) - torch.tensor(vocab.group_offsets[:-1])[group]
    return {"row": row, "group": group, "digits": digits, "value": value, "row_ids": rows}
