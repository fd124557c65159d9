"""Number spans in label sequences: the place of each digit in its number, and DEL's place weights.

A *number* is a maximal run of consecutive digit / decimal-point labels inside one sequence. Everything here is
vectorised over the batch (cumulative sums and scatters, no Python loop over tokens or numbers), so it runs in
the data collator at the cost of a few passes over the labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .bounds import Bound
from .vocab import DigitVocab

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
    """
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
    batch, length = labels.shape
    device = labels.device
    if labels.numel() == 0:
        empty = torch.full(labels.shape, NOT_A_DIGIT, dtype=torch.int32, device=device)
        return empty.squeeze(0) if squeeze else empty
    digit, family = vocab.classify(labels)
    is_digit = digit >= 0
    bare_point, leading_point = vocab.decimal_points(labels)
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


@dataclass(frozen=True)
class PlaceWeighting:
    """DEL's place weight ``u``: ``integer_slope * (i + 1)`` for integer places ``i >= 0`` and
    ``decimal_base ** (i - 1)`` for decimal places ``i < 0``. With ``enabled=False`` every digit weighs 1.

    ``integer_slope`` is in (0, 100] and ``decimal_base`` in [1, 10] (:data:`PLACE_WEIGHT_BOUNDS`): beyond them
    one digit outweighs the rest of a number by orders of magnitude, and a base below 1 weighs deeper decimals
    more, up to overflow on long decimals."""

    enabled: bool = True
    integer_slope: float = 2.0
    decimal_base: float = 1.02

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"enabled must be true or false, got {self.enabled!r}")
        for name, bound in PLACE_WEIGHT_BOUNDS.items():
            bound.check(name, getattr(self, name))


PLACE_WEIGHT_BOUNDS: dict[str, Bound] = {
    "integer_slope": Bound(0.0, 100.0, "u = slope * (i + 1) must be positive; the paper uses 2", low_open=True),
    "decimal_base": Bound(1.0, 10.0, "u = base ** (i - 1) must not grow with depth (a base below 1 weighs deeper "
                          "decimals more and overflows on long decimals); the paper uses 1.02"),
}


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
    aligned = shift_to_next_token(number_places(labels, vocab, position_ids), NOT_A_DIGIT)
    if shift_labels is not None:
        aligned = torch.where(shift_labels == -100, NOT_A_DIGIT, aligned)
    return aligned
