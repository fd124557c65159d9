"""The oracle of ``number_places`` that the tests and bench/places_paths.py share: :func:`oracle_number_places`
(and :func:`oracle_next_token_places` on it), the previous implementation, kept as the reference. The tests' other
oracle, which reads a string of the fake vocabulary's characters, is tests/helpers/places_oracle.py.

:func:`oracle_number_places` is ``del_plugin.core.places.number_places`` as it was before the collator's NumPy
path: the vectorised torch version (cumulative sums and scatters), whose rules are documented and hand-tested in
``tests/core/test_places.py``. It is kept verbatim, together with the digit-code lookup it relied on
(``DigitVocab.classify`` / ``decimal_points`` of that version, rebuilt here from the vocabulary's public fields), so
that later changes to the production code or to ``DigitVocab``'s lookups cannot change the oracle with them.
Do not optimise it: its value is that it is the old, slow and trusted code.
"""

from __future__ import annotations

import torch

from del_plugin.core import DigitVocab
from del_plugin.core.places import NOT_A_DIGIT

_BARE_POINT = -2
_LEADING_POINT = -3


def _codes(labels: torch.Tensor, vocab: DigitVocab) -> torch.Tensor:
    """That version's ``DigitVocab._codes``: family * 10 + digit, -2 / -3 for decimal points, -1 elsewhere."""
    ids = [i for fam in vocab.family_token_ids for i in fam] + list(vocab.leading_point_ids)
    if vocab.decimal_point_id is not None:
        ids.append(vocab.decimal_point_id)
    table_size = max(ids) + 1
    code_table = torch.full((table_size,), -1, dtype=torch.int16)
    for f, fam in enumerate(vocab.family_token_ids):
        code_table[list(fam)] = torch.arange(10, dtype=torch.int16) + 10 * f
    if vocab.decimal_point_id is not None:
        code_table[vocab.decimal_point_id] = _BARE_POINT
    if vocab.leading_point_ids:
        code_table[list(vocab.leading_point_ids)] = _LEADING_POINT
    code_table = code_table.to(labels.device)
    in_table = (labels >= 0) & (labels < table_size)
    code = code_table[labels.clamp(0, table_size - 1)].long()
    return torch.where(in_table, code, -1)


def oracle_classify(labels: torch.Tensor, vocab: DigitVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """``DigitVocab.classify`` of commit c985f29."""
    code = _codes(labels, vocab)
    is_digit = code >= 0
    digit = torch.where(is_digit, code % 10, -1)
    family = torch.where(is_digit, code // 10, -1)
    return digit, family


def oracle_decimal_points(labels: torch.Tensor, vocab: DigitVocab) -> tuple[torch.Tensor, torch.Tensor]:
    """``DigitVocab.decimal_points`` of commit c985f29."""
    code = _codes(labels, vocab)
    return code == _BARE_POINT, code == _LEADING_POINT


def _as_batch(
    labels: torch.Tensor, position_ids: torch.Tensor | None
) -> tuple[bool, torch.Tensor, torch.Tensor | None]:
    """(whether ``labels`` was one row, labels as ``[B, T]``, position_ids likewise), or a ValueError for bad shapes."""
    squeeze = labels.dim() == 1
    if squeeze:
        labels = labels.unsqueeze(0)
        position_ids = None if position_ids is None else position_ids.reshape(1, -1)
    if labels.dim() != 2:
        raise ValueError(f"labels must be [B, T] or [T], got shape {tuple(labels.shape)}")
    if position_ids is not None and position_ids.shape != labels.shape:
        raise ValueError(
            f"position_ids {tuple(position_ids.shape)} must have the shape of labels {tuple(labels.shape)}"
        )
    return squeeze, labels, position_ids


def oracle_number_places(
    labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """``number_places`` of commit c985f29 (see ``del_plugin.core.places.number_places`` for the rules); its checks
    of the arguments' shapes, unchanged, are :func:`_as_batch` (the house's function limit)."""
    squeeze, labels, position_ids = _as_batch(labels, position_ids)
    batch, length = labels.shape
    device = labels.device
    if labels.numel() == 0:
        empty = torch.full(labels.shape, NOT_A_DIGIT, dtype=torch.int32, device=device)
        return empty.squeeze(0) if squeeze else empty
    digit, family = oracle_classify(labels, vocab)
    is_digit = digit >= 0
    bare_point, leading_point = oracle_decimal_points(labels, vocab)
    is_dot = bare_point | leading_point

    # Positions where nothing can continue a number from the left.
    fresh = torch.zeros_like(is_digit)
    fresh[:, 0] = True
    if position_ids is not None and length > 1:
        fresh[:, 1:] |= position_ids[:, 1:] != position_ids[:, :-1] + 1
    fresh |= family > 0  # space-marked digits
    fresh |= leading_point  # '*.' can only open a number ('18*.5' is 18 then .5)

    # A '.' is a decimal-point candidate when the next position is a digit that continues the same number.
    continues_digit = torch.zeros_like(is_digit)
    continues_digit[:, :-1] = is_digit[:, 1:] & ~fresh[:, 1:]
    point = is_dot & continues_digit
    member = is_digit | point
    prev_member = torch.zeros_like(member)
    prev_member[:, 1:] = member[:, :-1]
    start = member & (fresh | ~prev_member)

    # Flatten: rows never share a number because position 0 of each row is `fresh`.
    n = batch * length
    member_f, point_f, start_f = member.reshape(-1), point.reshape(-1), start.reshape(-1)
    dump = torch.full_like(member_f, n, dtype=torch.long)  # scatter target for positions outside numbers
    # Every decimal point after the first one in a run starts a new number.
    run = torch.cumsum(start_f, 0) - 1
    points_incl = torch.cumsum(point_f, 0)
    points_before_run = torch.zeros(n + 1, dtype=torch.long, device=device)
    points_before_run.scatter_(0, torch.where(start_f, run, dump), points_incl - point_f.long())
    points_in_run = points_incl - points_before_run[torch.where(member_f, run, dump)]
    start_f = start_f | (point_f & (points_in_run >= 2))

    run = torch.cumsum(start_f, 0) - 1
    run_of_member = torch.where(member_f, run, dump)
    pos = torch.arange(n, device=device)
    last = torch.full((n + 1,), -1, dtype=torch.long, device=device)
    last.scatter_reduce_(0, run_of_member, pos, reduce="amax")
    point_pos = torch.full((n + 1,), -1, dtype=torch.long, device=device)
    point_pos.scatter_reduce_(0, torch.where(point_f, run, dump), pos, reduce="amax")
    # The anchor is where the decimal point is, or would be: one past the last digit of an integer.
    anchor = torch.where(point_pos >= 0, point_pos, last + 1)[run_of_member]
    place = torch.where(pos < anchor, anchor - pos - 1, anchor - pos)
    place = torch.where(is_digit.reshape(-1), place, NOT_A_DIGIT).to(torch.int32).view(batch, length)
    return place.squeeze(0) if squeeze else place


def oracle_next_token_places(
    labels: torch.Tensor,
    vocab: DigitVocab,
    position_ids: torch.Tensor | None = None,
    shift_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """``next_token_places`` of commit c985f29."""
    places = oracle_number_places(labels, vocab, position_ids)
    aligned = torch.full_like(places, NOT_A_DIGIT)
    aligned[..., :-1] = places[..., 1:]
    if shift_labels is not None:
        aligned = torch.where(shift_labels == -100, NOT_A_DIGIT, aligned)
    return aligned
