"""Number spans in label sequences: the place of each digit in its number, and DEL's place weights.

A *number* is a maximal run of consecutive digit / decimal-point labels inside one sequence. Everything here is
vectorised over the batch (running maxima and minima, no Python loop over tokens or numbers), so it runs in the
data collator at the cost of a few passes over the labels: with NumPy on CPU tensors (a few dozen array
operations per batch), with the same steps in torch on other devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .vocab import KIND_DIGIT, KIND_FRESH, KIND_POINT, DigitVocab

__all__ = [
    "NOT_A_DIGIT",
    "PlaceWeighting",
    "next_token_places",
    "number_places",
    "place_weights",
    "shift_to_next_token",
]

# Place of every position that is not a digit target (decimal points, words, -100, padding). It is the int32
# minimum so that no real place (|place| < sequence length) can collide with it.
NOT_A_DIGIT: int = torch.iinfo(torch.int32).min


def number_places(
    labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None = None
) -> torch.Tensor:
    """The place of each digit label in its number; ``NOT_A_DIGIT`` elsewhere.

    Units are place 0, tens 1, hundreds 2, …; the first decimal is -1, the second -2, …

    Run rules (``labels`` is ``[B, T]`` or ``[T]``):

    * -100, padding and any non-digit token end a number; so does a packed-sequence boundary, where
      ``position_ids`` does not continue from the previous position.
    * A space-marked digit ('▁7', 'Ġ7') always starts a new number.
    * A '.' followed by a digit of the same number is a decimal point ('3.14', '.5'); a '.' not followed by a
      digit ends the number and is not part of it ('5.' at the end of a sentence). A token that merges
      punctuation with the point ('*.' in "18*.5") opens a number '.5'.
    * A second decimal point ends the number and starts a new one: '1.2.3' reads as 1.2 then .3.
    * Signs and thousands separators are not part of numbers: '-1,234' reads as 1 then 234.

    Returns int32 of the shape of ``labels``, on its device. CPU tensors (the collator's) are read with NumPy in
    one pass over the flattened batch; tensors on other devices with the same steps in torch, on that device
    (no copy to the host).
    """
    labels, position_ids, squeeze = _as_batch(labels, position_ids)
    place = _places(labels, vocab, position_ids, shift=False)
    return place.squeeze(0) if squeeze else place


def _as_batch(
    labels: torch.Tensor, position_ids: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
    """``labels`` and ``position_ids`` as ``[B, T]``, and whether ``labels`` was ``[T]``."""
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
    return labels, position_ids, squeeze


def _places(
    labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None, shift: bool
) -> torch.Tensor:
    """int32 ``[B, T]`` places of ``[B, T]`` labels; with ``shift``, already moved one position to the left (the
    place of ``labels[:, t + 1]`` at ``t``, ``NOT_A_DIGIT`` in the last column)."""
    if labels.numel() == 0:
        return torch.full(labels.shape, NOT_A_DIGIT, dtype=torch.int32, device=labels.device)
    if labels.device.type == "cpu" and (position_ids is None or position_ids.device.type == "cpu"):
        pos = None if position_ids is None else position_ids.numpy()
        return torch.from_numpy(_places_numpy(labels.numpy(), vocab.kind_table, pos, shift))
    place = _places_torch(labels, vocab.kind_table_on(labels.device), position_ids)
    return shift_to_next_token(place, NOT_A_DIGIT) if shift else place


# How the number reader works (both implementations below take the same steps).
#
# Flatten the batch; rows never share a number because position 0 of each row is *fresh* (nothing continues a
# number from the left there, as at packing restarts, space-marked digits and leading-point tokens). A '.' is a
# decimal *point* when the next position is a digit that is not fresh; *members* are digits and points; a member
# *starts* a run when it is fresh or follows a non-member. Within a run, a point after the first one starts a new
# number ('1.2.3' is 1.2 then .3), so the point that a digit after a point belongs to is always the latest point
# before it, and a digit is a decimal digit exactly when that point is not before its run's start (a leading
# point is the start). Hence:
#
# * decimal digit at t: place = (latest point <= t) - t, negative;
# * integer digit at t: place = (next *stop* > t) - t - 1, where a stop is a point, a start or a non-member:
#   the decimal point, or one past the last digit when the number has no point.
#
# One forward running maximum finds the latest start-or-point (encoded 2 i + 1 for a point and 2 i for a start,
# so that its parity tells which), one backward running minimum the next stop. No per-number scatter is needed.

def _places_numpy(
    labels: np.ndarray, kind_table: np.ndarray, position_ids: np.ndarray | None, shift: bool
) -> np.ndarray:
    """:func:`number_places` of a nonempty ``[B, T]`` array with NumPy; ``shift`` as in :func:`_places`."""
    batch, length = labels.shape
    n = batch * length
    ids = labels.reshape(-1)
    if ids.dtype != np.int64 and ids.dtype != np.int32:
        ids = ids.astype(np.int64)
    kind = kind_table.take(ids + 1, mode="clip")
    # canonical 0/1 masks (a bool view of other byte values would not be a proper bool)
    is_digit = (kind & KIND_DIGIT).view(np.bool_)
    is_dot = ((kind >> 1) & 1).view(np.bool_)  # KIND_POINT
    fresh = (kind >> 2).view(np.bool_)  # KIND_FRESH, the highest bit
    fresh[::length] = True
    if position_ids is not None and length > 1:
        p = position_ids.reshape(-1)
        fresh[1:] |= p[1:] != p[:-1] + 1

    point = np.zeros(n, dtype=np.bool_)
    np.greater(is_digit[1:], fresh[1:], out=point[:-1])  # the next position is a digit that continues
    point &= is_dot
    member = is_digit | point
    start = np.empty(n, dtype=np.bool_)
    start[0] = True
    np.greater_equal(fresh[1:], member[:-1], out=start[1:])  # fresh, or after a non-member
    start &= member

    idx = np.arange(n, dtype=np.int32 if n < 2**30 else np.int64)  # 2 * idx + 1 must not overflow
    start_or_point = start | point
    latest = np.where(start_or_point, 2 * idx + point, -1)
    np.maximum.accumulate(latest, out=latest)
    stops = np.where(start_or_point | ~member, idx, n)
    next_stop = np.empty_like(idx)
    next_stop[-1] = n
    np.minimum.accumulate(stops[:0:-1], out=next_stop[-2::-1])
    place = (np.where(latest & 1, latest >> 1, next_stop - 1) - idx).astype(np.int32, copy=False)

    if shift:
        out = np.empty(n, dtype=np.int32)
        out[:-1] = place[1:]
        np.copyto(out[:-1], NOT_A_DIGIT, where=~is_digit[1:])
        out[length - 1 :: length] = NOT_A_DIGIT
    else:
        out = place
        np.copyto(out, NOT_A_DIGIT, where=~is_digit)
    return out.reshape(batch, length)


def _places_torch(labels: torch.Tensor, kind_table: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    """:func:`number_places` of a ``[B, T]`` tensor (nonempty), in torch on its device (no shift)."""
    batch, length = labels.shape
    n = batch * length
    device = labels.device
    ids = labels.reshape(-1).long()
    kind = kind_table[(ids + 1).clamp_(0, kind_table.numel() - 1)]
    is_digit = (kind & KIND_DIGIT) != 0
    is_dot = (kind & KIND_POINT) != 0
    fresh = (kind & KIND_FRESH) != 0
    fresh[::length] = True
    if position_ids is not None and length > 1:
        p = position_ids.reshape(-1)
        fresh[1:] |= p[1:] != p[:-1] + 1

    point = torch.zeros(n, dtype=torch.bool, device=device)
    point[:-1] = is_dot[:-1] & is_digit[1:] & ~fresh[1:]
    member = is_digit | point
    start = member.clone()
    start[1:] &= fresh[1:] | ~member[:-1]

    idx = torch.arange(n, device=device)
    start_or_point = start | point
    latest = torch.where(start_or_point, 2 * idx + point, -1).cummax(0).values
    stops = torch.where(start_or_point | ~member, idx, n)
    next_stop = torch.full((n,), n, dtype=torch.long, device=device)
    next_stop[:-1] = stops.flip(0).cummin(0).values.flip(0)[1:]
    place = torch.where((latest & 1) != 0, latest >> 1, next_stop - 1) - idx
    return torch.where(is_digit, place, NOT_A_DIGIT).to(torch.int32).view(batch, length)


@dataclass(frozen=True)
class PlaceWeighting:
    """DEL's place weight ``u``: ``integer_slope * (i + 1)`` for integer places ``i >= 0`` and
    ``decimal_base ** (i - 1)`` for decimal places ``i < 0``. With ``enabled=False`` every digit weighs 1."""

    enabled: bool = True
    integer_slope: float = 2.0
    decimal_base: float = 1.02

    def __post_init__(self) -> None:
        if self.integer_slope <= 0:
            raise ValueError(f"integer_slope must be > 0, got {self.integer_slope}")
        if self.decimal_base <= 0:
            raise ValueError(f"decimal_base must be > 0, got {self.decimal_base}")


def place_weights(places: torch.Tensor, weighting: PlaceWeighting = PlaceWeighting()) -> torch.Tensor:
    """float32 place weights for ``places`` from :func:`number_places`; 0 where there is no digit."""
    is_digit = places != NOT_A_DIGIT
    if not weighting.enabled:
        return is_digit.to(torch.float32)
    i = torch.where(is_digit, places, 0).to(torch.float32)
    integer = weighting.integer_slope * (i + 1.0)
    decimal = torch.pow(torch.tensor(weighting.decimal_base, dtype=torch.float32, device=places.device), i - 1.0)
    return torch.where(is_digit, torch.where(i >= 0, integer, decimal), 0.0)


def shift_to_next_token(tensor: torch.Tensor, fill: int) -> torch.Tensor:
    """``out[..., t] = tensor[..., t + 1]`` and ``fill`` at the end: aligns per-label values with the logits that
    predict them, as causal-LM losses do."""
    out = torch.full_like(tensor, fill)
    out[..., :-1] = tensor[..., 1:]
    return out


def next_token_places(
    labels: torch.Tensor,
    vocab: DigitVocab,
    position_ids: torch.Tensor | None = None,
    shift_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Places of the digit targets aligned with causal-LM logits: ``out[:, t]`` is the place of ``labels[:, t+1]``.

    Numbers are read on the unshifted ``labels`` (so packing boundaries in ``position_ids`` line up), then shifted.
    ``shift_labels``, when a collator provides them, are the targets the model's loss really uses; positions they
    mask are masked here too.
    """
    labels, position_ids, squeeze = _as_batch(labels, position_ids)
    aligned = _places(labels, vocab, position_ids, shift=True)
    if squeeze:
        aligned = aligned.squeeze(0)
    if shift_labels is not None:
        aligned = torch.where(shift_labels == -100, NOT_A_DIGIT, aligned)
    return aligned
