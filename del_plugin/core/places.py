"""Number spans in label sequences: the place of each digit in its number, and DEL's place weights.

A *number* is a maximal run of consecutive digit / decimal-point labels inside one sequence. Everything here is
vectorised over the batch (no Python loop over tokens or numbers): CPU tensors, as the data collator has them, are
read with NumPy in about twenty array operations per batch; tensors on other devices with torch on their device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .bounds import Bound
from .vocab import KIND_DIGIT, KIND_FRESH, KIND_POINT, MAX_TOKEN_DIGITS, DigitVocab

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


def number_places(labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None = None) -> torch.Tensor:
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

    Number tokens of several digits (Llama-3's '123') are read digit by digit: their digits get one *slot* each,
    and places count digits, not tokens ('12345' as '123' '45' has places 4 3 2 | 1 0).

    Returns int32 of the shape of ``labels`` for a single-digit vocabulary; ``[..., vocab.max_digits]`` for one
    with number tokens, slot ``j`` the ``j``-th digit of the token left to right (``NOT_A_DIGIT`` past its last
    digit). On the device of ``labels``: CPU tensors (the collator's) are read with NumPy, tensors on other
    devices with torch, on that device (no copy to the host, no synchronisation).
    """
    return _read(labels, vocab, position_ids, shift=False)


def _read(labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None, shift: bool) -> torch.Tensor:
    """:func:`number_places` (``shift=False``) or its values moved one position to the left (``shift=True``: the
    place of ``labels[..., t + 1]`` at ``t``, ``NOT_A_DIGIT`` in the last column). CPU tensors are read with NumPy,
    others in torch on their device."""
    if labels.is_cpu and (position_ids is None or position_ids.is_cpu):
        ids = labels.numpy()
        pos = None if position_ids is None else position_ids.numpy()
        squeeze = ids.ndim == 1
        if squeeze:
            ids = ids.reshape(1, -1)
            pos = None if pos is None else pos.reshape(1, -1)
        _check_shapes(ids.shape, None if pos is None else pos.shape)
        read = _places_numpy if vocab.max_digits == 1 else _slot_places_numpy
        place = torch.from_numpy(read(ids, vocab, pos, shift))
        return place[0] if squeeze else place
    squeeze = labels.dim() == 1
    if squeeze:
        labels = labels.unsqueeze(0)
        position_ids = None if position_ids is None else position_ids.reshape(1, -1)
    _check_shapes(labels.shape, None if position_ids is None else position_ids.shape)
    if vocab.max_digits > 1:
        place = _slot_places_torch(labels, vocab, position_ids)
        if shift:
            shifted = torch.full_like(place, NOT_A_DIGIT)
            shifted[:, :-1] = place[:, 1:]
            place = shifted
    elif labels.numel() == 0:
        place = torch.full(labels.shape, NOT_A_DIGIT, dtype=torch.int32, device=labels.device)
    else:
        place = _places_torch(labels, vocab, position_ids)
        if shift:
            place = shift_to_next_token(place, NOT_A_DIGIT)
    return place.squeeze(0) if squeeze else place


def _check_shapes(labels: tuple[int, ...], position_ids: tuple[int, ...] | None) -> None:
    if len(labels) != 2:
        raise ValueError(f"labels must be [B, T] or [T], got shape {tuple(labels)}")
    if position_ids is not None and tuple(position_ids) != tuple(labels):
        raise ValueError(f"position_ids {tuple(position_ids)} must have the shape of labels {tuple(labels)}")


# How numbers are read. Every label gets a *class* from its own kind (DigitVocab.kind_table: digit, decimal
# point, "fresh": a space-marked digit, a leading point, or a packed sample's first label) and the kind of the label
# before it. That is all the run rules need, once a '.' counts as a decimal point exactly when a non-fresh digit
# follows it:
#
# * a digit after a digit *continues* the part of a number that digit is in;
# * a non-fresh digit after a point *opens a decimal part*, so '1.2.3' is 1.2 then .3;
# * any other digit *opens an integer part*: it is fresh, or follows neither a digit nor a point;
# * any other label is not a digit.
#
# A part's digits are consecutive labels. The place of a digit at t is (anchor - t), where an integer part's
# anchor is its last digit and a decimal part's the point before its first digit. A leading point ('*.' in
# "18*.5") gives the same places as a bare one ('18.5': 1, 0, then -1), so both are points here.

_NOT_A_DIGIT, _CONTINUES, _OPENS_DECIMAL, _OPENS_INTEGER = 0, 1, 2, 3  # openings have bit 2, integer ones bit 1


def _class_of(before: int, here: int) -> int:
    """The class of a label of kind ``here`` after a label of kind ``before``."""
    if not here & KIND_DIGIT:
        return _NOT_A_DIGIT
    if here & KIND_FRESH:
        return _OPENS_INTEGER
    if before & KIND_DIGIT:
        return _CONTINUES
    if before & KIND_POINT:
        return _OPENS_DECIMAL
    return _OPENS_INTEGER


def _class_table(shift: int) -> np.ndarray:
    """``table[before | (here << shift)]`` is :func:`_class_of` for the 3-bit kinds; int64, the dtype of the
    indices the NumPy path computes with the classes, so that no operation mixes types."""
    table = np.zeros((7 << shift) + 8, dtype=np.int64)
    for before in range(8):
        for here in range(8):
            table[before | (here << shift)] = _class_of(before, here)
    table.flags.writeable = False
    return table


_CLASSES = _class_table(3)  # the torch path's
_PAIR_CLASSES = _class_table(8)  # indexed by two consecutive kind bytes read as one little-endian uint16
# With number tokens, the NumPy path's kinds carry the digit count in bits 3-4 (DigitVocab.counted_kind_table)
_COUNT_SHIFT = 3
_COUNTED_PAIR_CLASSES = _PAIR_CLASSES.take((lambda i: (i & 7) | (((i >> 8) & 7) << 8))(np.arange((31 << 8) + 32)))
_COUNTED_PAIR_CLASSES.flags.writeable = False
_COUNT_OF_KIND = np.arange(256, dtype=np.int64) >> _COUNT_SHIFT
_COUNT_OF_KIND.flags.writeable = False


def _slot_index(slots: int) -> np.ndarray:
    """Row m < slots: the slot offsets 0 .. m - 1 of an m-digit token, then an index past any array (clipped to
    the spare last entry); row ``slots``: 0 .. slots - 1."""
    table = np.full((slots + 1, slots), np.iinfo(np.int64).max // 4, dtype=np.int64)
    for m in range(slots + 1):
        table[m, :m] = np.arange(m)
    table[slots] = np.arange(slots)
    table.flags.writeable = False
    return table


_SLOT_INDEX = {m: _slot_index(m) for m in range(2, MAX_TOKEN_DIGITS + 1)}
_PAIR = np.dtype("<u2")
# By class: 1 for an opening, and -1 for an integer one (lookups instead of arithmetic: the NumPy path then
# needs no other arithmetic than int64 subtraction, and each kind of operation costs the collator ~10-30 us)
_OPENS = np.array([0, 0, 1, 1], dtype=np.int64)
_MINUS_INTEGER = np.array([0, 0, 0, -1], dtype=np.int64)
_CLASSES_ON: dict[str, torch.Tensor] = {}


def _places_numpy(labels: np.ndarray, vocab: DigitVocab, position_ids: np.ndarray | None, shift: bool) -> np.ndarray:
    """:func:`number_places` of a ``[B, T]`` array with NumPy, shifted as in :func:`_read`.

    Written for the collator, which calls this on every batch in a data-loader worker right after the host
    collator: there each NumPy operation costs 10-40 us of cold caches whatever its size (measured; the ~2,600
    labels of a padded GSM8K batch are read in a few microseconds), so this uses as few operations, and as few
    kinds of operation, as it can. One class per label (a table lookup on each pair of neighbouring kinds), one
    ``nonzero`` for the digits and one for the parts they open, and one ``repeat`` that spreads each part's anchor
    over its digits.
    """
    batch, length = labels.shape
    if batch * length == 0:
        return np.full((batch, length), NOT_A_DIGIT, dtype=np.int32)
    cls, size, width = _label_classes(labels, vocab, position_ids)
    digit = cls.nonzero()[0]  # ends with the closing digit
    digit_cls = cls.take(digit)
    bounds = _OPENS.take(digit_cls).nonzero()[0]  # each part's first digit, then the closing digit
    first, after = bounds[:-1], bounds[1:]
    # Counted in digits (a part's digits are consecutive labels), the place of digit j is (anchor - j), where an
    # integer part's anchor is its last digit, after - 1, and a decimal part's its point, first - 1: so anchor + 1
    # is bounds[k + 1] for an integer part k, bounds[k] for a decimal one.
    anchor = bounds.take(_COUNTING.get(len(first))[: len(first)] - _MINUS_INTEGER.take(digit_cls.take(first)))
    counting = _COUNTING.get(len(digit))[1 : len(digit)]  # j + 1
    out = _NOT_DIGITS.get(size + 1)[: size + 1].copy()
    out.put(digit[:-1], anchor.repeat(after - first) - counting)
    # out[r * (T + 1) + t] is the place of labels[r, t]; shifted by one, the last column shows the 0 of the next row
    view = np.ndarray((batch, length), dtype=np.int64, buffer=out, offset=8 * shift, strides=(8 * width, 8))
    return view.astype(np.int32)


def _label_classes(labels: np.ndarray, vocab: DigitVocab, position_ids: np.ndarray | None, counted: bool = False):
    """(``cls``, size, width): the class of every label of a nonempty ``[B, T]`` array, in rows of ``width = T + 1``
    (``cls[r * width + t]`` is the class of ``labels[r, t]``; each row's last entry is not a digit) and a closing
    digit at ``cls[size - 1]``, which ends the last number. ``counted``: the kinds carry each token's digit count
    in their high bits (:attr:`DigitVocab.counted_kind_table`), and are returned too (``kind[i + 1]`` is the kind
    of ``cls[i]``)."""
    batch, length = labels.shape
    if labels.dtype.kind != "i":
        labels = labels.astype(np.int64)
    # The kinds in rows of T + 1 that start with a 0 (not a digit), so that no number runs on from the row above,
    # then a fresh digit after the last row, which closes the last number.
    width = length + 1
    size = batch * width
    kind = (_CLOSING_COUNTED if counted else _CLOSING_KINDS).get(size + 1)[-size - 1 :].copy()
    rows = np.ndarray((batch, length), dtype=np.uint8, buffer=kind, offset=1, strides=(width, 1))
    table = vocab.counted_kind_table if counted else vocab.kind_table
    table.take(labels, mode="clip", out=rows)  # ids < 0 read as id 0, ids past the table as its final 0
    if vocab.token_zero_has_a_kind:  # then -100 must not read as token 0
        np.copyto(rows, 0, where=labels < 0)
    if position_ids is not None and length > 1:  # a packed sample starts where the positions do not continue
        np.bitwise_or(rows[:, 1:], KIND_FRESH, out=rows[:, 1:], where=np.diff(position_ids) != 1)
    # kind[i] | kind[i + 1] << 8 for every i, read from the same bytes (a stride of one byte)
    pairs = np.ndarray((size,), dtype=_PAIR, buffer=kind, strides=(1,))
    if counted:
        return _COUNTED_PAIR_CLASSES.take(pairs), size, width, kind
    return _PAIR_CLASSES.take(pairs), size, width  # cls[i] is the class of kind[i + 1]


def _slot_places_numpy(
    labels: np.ndarray, vocab: DigitVocab, position_ids: np.ndarray | None, shift: bool
) -> np.ndarray:
    """:func:`_places_numpy` for a vocabulary with number tokens: ``[B, T, M]`` places, ``M = vocab.max_digits``.

    The same classes and parts as single digits, read per token; places are then counted in digits: with
    ``start[k]`` the number of digits before number token ``k``, slot ``j`` of token ``k`` sits at digit
    ``start[k] + j``, and its place is ``anchor - start[k] - j`` with ``anchor`` the digit one before the part's
    end (an integer part) or the point (a decimal part), as for single digits."""
    batch, length = labels.shape
    slots = vocab.max_digits
    if batch * length == 0:
        return np.full((batch, length, slots), NOT_A_DIGIT, dtype=np.int32)
    cls, size, width, kind = _label_classes(labels, vocab, position_ids, counted=True)
    token = cls.nonzero()[0]  # number tokens, then the closing digit
    token_cls = cls.take(token)
    digits = _COUNT_OF_KIND.take(kind[1:].take(token))  # kind[i + 1] is the kind of cls[i]; the closing digit: 1
    end = np.cumsum(digits)
    start = end - digits  # digits before each number token
    bounds = _OPENS.take(token_cls).nonzero()[0]  # each part's first token, then the closing digit
    first, after = bounds[:-1], bounds[1:]
    # one past the anchor, in digits: the part's end for an integer part, its first digit for a decimal part
    anchor = start.take(bounds.take(np.arange(len(first)) - _MINUS_INTEGER.take(token_cls.take(first))))
    base = anchor.repeat(after - first) - start[:-1] - 1  # the place of each token's first digit
    # slot j of token k goes to out[token[k] * slots + j]; a slot past the token's digits to the clipped last entry
    # of `out`, a spare one (a put with mode="clip" instead of a mask and a `where`)
    index = (token[:-1] * slots)[:, None] + _SLOT_INDEX[slots].take(digits[:-1], axis=0)
    out = _NOT_DIGITS.get((size + 1) * slots + 1)[: (size + 1) * slots + 1].copy()
    out.put(index, base[:, None] - _SLOT_INDEX[slots][slots], mode="clip")
    # out[r * (T + 1) + t] holds the places of labels[r, t]; shifted by one, the last column shows the next row's 0
    view = np.ndarray(
        (batch, length, slots),
        dtype=np.int64,
        buffer=out,
        offset=8 * slots * shift,
        strides=(8 * slots * width, 8 * slots, 8),
    )
    return view.astype(np.int32)


class _Grown:
    """A read-only array ``build(size)``, kept per process and rebuilt twice as long when a batch needs more:
    copying a slice of it is one array operation, where making a new one (allocate, fill, set) takes two or three."""

    def __init__(self, build: Callable[[int], np.ndarray]):
        self.build = build
        self.array = build(0)

    def get(self, size: int) -> np.ndarray:
        array = self.array  # this one, not self.array, is returned: another thread may swap in a shorter one
        if array.size < size:
            array = self.build(max(size, 2 * array.size))
            array.flags.writeable = False
            self.array = array
        return array


def _closing_kinds(size: int) -> np.ndarray:
    kind = np.zeros(size, dtype=np.uint8)
    kind[-1:] = KIND_DIGIT | KIND_FRESH
    return kind


_CLOSING_KINDS = _Grown(_closing_kinds)  # no digit, ..., then a fresh digit


def _closing_counted(size: int) -> np.ndarray:
    kind = _closing_kinds(size)
    kind[-1:] |= 1 << _COUNT_SHIFT  # the closing digit holds one digit
    return kind


_CLOSING_COUNTED = _Grown(_closing_counted)
_NOT_DIGITS = _Grown(lambda size: np.full(size, NOT_A_DIGIT, dtype=np.int64))
_COUNTING = _Grown(lambda size: np.arange(size))


def _token_classes_torch(labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None) -> torch.Tensor:
    """The class of every label of a nonempty ``[B, T]`` tensor, flattened to ``[B * T]``."""
    device = labels.device
    kind_table = vocab.kind_table_on(device)
    ids = labels.long()
    kind = kind_table[ids.clamp(0, kind_table.numel() - 1)]
    if vocab.token_zero_has_a_kind:
        kind = torch.where(ids < 0, 0, kind)
    if position_ids is not None and labels.shape[1] > 1:
        kind[:, 1:] |= (position_ids.diff(dim=-1) != 1).to(torch.uint8) * KIND_FRESH
    before = torch.zeros_like(kind)
    before[:, 1:] = kind[:, :-1]
    classes = _CLASSES_ON.get(str(device))
    if classes is None:
        with torch.inference_mode(False):  # a normal tensor, whatever mode the first call runs in
            classes = _CLASSES_ON.setdefault(str(device), torch.tensor(_CLASSES, device=device))
    return classes[(before | (kind << 3)).long()].reshape(-1)


def _parts_torch(cls: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For flat classes ``cls``: the index of each label, the latest opening at or before it (``2 i + 1`` for a
    decimal part opened at ``i``, ``2 i`` for an integer part, -1 for none: a running maximum) and the first label
    after it that does not continue its part (one past an integer part's last digit: a backward running minimum)."""
    n = cls.numel()
    idx = torch.arange(n, device=cls.device)
    opening = torch.where(cls >= _OPENS_DECIMAL, 2 * idx + (cls == _OPENS_DECIMAL), -1).cummax(0).values
    stops = torch.where(cls == _CONTINUES, n, idx)
    next_stop = torch.full((n,), n, dtype=torch.long, device=cls.device)
    next_stop[:-1] = stops.flip(0).cummin(0).values.flip(0)[1:]
    return idx, opening, next_stop


def _places_torch(labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None) -> torch.Tensor:
    """:func:`number_places` of a nonempty ``[B, T]`` tensor in torch, on its device and without a host
    synchronisation: a running maximum (the latest opening, which says whether a digit is decimal) and a backward
    running minimum (the end of its part) over the flattened batch, instead of NumPy's ``nonzero``."""
    batch, length = labels.shape
    cls = _token_classes_torch(labels, vocab, position_ids)
    idx, opening, next_stop = _parts_torch(cls)
    place = torch.where((opening & 1) != 0, (opening >> 1) - 1, next_stop - 1) - idx
    return torch.where(cls != _NOT_A_DIGIT, place, NOT_A_DIGIT).to(torch.int32).view(batch, length)


def _slot_places_torch(labels: torch.Tensor, vocab: DigitVocab, position_ids: torch.Tensor | None) -> torch.Tensor:
    """:func:`_places_torch` for a vocabulary with number tokens, ``[B, T, M]``: the same openings and part ends,
    counted in digits (a running sum of each label's digit count), as :func:`_slot_places_numpy` counts them."""
    batch, length = labels.shape
    slots = vocab.max_digits
    device = labels.device
    if labels.numel() == 0:
        return torch.full((batch, length, slots), NOT_A_DIGIT, dtype=torch.int32, device=device)
    cls = _token_classes_torch(labels, vocab, position_ids)
    n = batch * length
    ids = labels.long().reshape(-1)
    count_table = vocab.digit_count_table_on(device)
    digits = count_table[ids.clamp(0, count_table.numel() - 1)]
    digits = torch.where((ids < 0) | (cls == _NOT_A_DIGIT), 0, digits)
    start = torch.zeros(n + 1, dtype=torch.long, device=device)  # digits before label t; start[n]: all of them
    start[1:] = digits.cumsum(0)
    _, opening, next_stop = _parts_torch(cls)
    anchor = torch.where((opening & 1) != 0, start[(opening >> 1).clamp(min=0)], start[next_stop])
    slot = torch.arange(slots, device=device)
    place = (anchor - start[:-1] - 1).unsqueeze(-1) - slot
    place = torch.where(slot < digits.unsqueeze(-1), place, NOT_A_DIGIT)
    return place.to(torch.int32).view(batch, length, slots)


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
    "decimal_base": Bound(
        1.0,
        10.0,
        "u = base ** (i - 1) must not grow with depth (a base below 1 weighs deeper "
        "decimals more and overflows on long decimals); the paper uses 1.02",
    ),
}


def place_weights(places: torch.Tensor, weighting: PlaceWeighting = PlaceWeighting()) -> torch.Tensor:
    """float32 place weights for ``places`` from :func:`number_places`; 0 where there is no digit. ``places``:
    integer, any shape (``[B, T]``, or ``[B, T, M]`` with number tokens); the result has the same shape."""
    is_digit = places != NOT_A_DIGIT
    if not weighting.enabled:
        return is_digit.to(torch.float32)
    i = torch.where(is_digit, places, 0).to(torch.float32)
    integer = weighting.integer_slope * (i + 1.0)
    # a Python base: no tensor made from host data (on a GPU, a blocking copy to the device in every step)
    decimal = torch.pow(weighting.decimal_base, i - 1.0)
    return torch.where(is_digit, torch.where(i >= 0, integer, decimal), 0.0)


def shift_to_next_token(tensor: torch.Tensor, fill: int) -> torch.Tensor:
    """``out[..., t] = tensor[..., t + 1]`` and ``fill`` at the end: aligns per-label values with the logits that
    predict them, as causal-LM losses do. ``tensor``: ``[..., T]``, any dtype; the result has its shape, dtype and
    device."""
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
    mask are masked here too. With number tokens the result has a slot axis, as :func:`number_places`'.

    ``labels`` and ``shift_labels``: integer ``[B, T]`` token ids (-100 where masked); ``position_ids``: integer
    ``[B, T]``. Returns int32 ``[B, T]`` (``[B, T, M]`` with number tokens of up to ``M`` digits), ``NOT_A_DIGIT``
    where the target is no digit.
    """
    aligned = _read(labels, vocab, position_ids, shift=True)
    if shift_labels is not None:
        masked = shift_labels == -100
        aligned = torch.where(masked if aligned.dim() == masked.dim() else masked.unsqueeze(-1), NOT_A_DIGIT, aligned)
    return aligned
