"""The number-level criterion: one term per number, on the value the model predicts for the whole number.

``ntl_number`` is the number-level Number Token Loss of ``ntloss.NumberLevelLoss`` (``reweigh=False``, either
``float_level``). Each digit's expected value ``E_d = sum_k p_hat_k k`` (``p_hat = softmax`` over the ten logits
of the digit's family, or of its slot of a number token) is put at its place, and the number's predicted value
``y_hat = sum_d E_d 10^(i_d)`` is compared with its true value ``y = sum_d y_d 10^(i_d)`` by the symmetric relative
error

    l_n = |y_hat - y| / (|y_hat| + |y| + eps * 10^(lowest place of the number)),    eps = 2^-23

(bounded by 1). As ``ntloss`` reads them, a number's integer part and its decimal part are two numbers: 12.34 is 12
and 34, each scored as an integer (with ``eps`` at its lowest digit, which the formula above writes in its
places). With ``float_level`` (``ntloss``'s ``float_level=True``) a decimal part joins the digit one point before
it: 12.34 is one number, its digits read as the integer 1234 (``eps`` at its lowest place, 10^-2 here: the relative
error of 12.34 is that of 1234), and so is 1.2.3 (123), as ``ntloss`` reads them. One difference: the places do not
tell ``ntloss``'s '.' token from a point merged with punctuation ('*.' in "18*.5", '▁.' in "3 .5"), so such a
point between two digits joins them here too (and so does a packed sample's leading '.5' the digit ending the
sample before it). The term is put at the number's first digit (0 elsewhere) and
averaged over numbers, not digits (:func:`number_starts` marks them). Everything is vectorised over the batch: no
Python loop over numbers, no host synchronisation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..digits import DigitTargets
from ..places import NOT_A_DIGIT

__all__ = ["NUMBER_EPS", "ntl_number_terms_and_starts", "ntl_number_token_losses", "number_starts"]

# ntloss's guard in the relative error's denominator: float32's machine epsilon, at the number's lowest digit
NUMBER_EPS = float(torch.finfo(torch.float32).eps)


def _previous_digit(places: torch.Tensor, float_level: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For the flattened ``places``: the places, whether each is a digit, and whether it continues the number that
    the digit before it in reading order (row after row, slot after slot) is in.

    A part's places fall by one, digit after digit, and a decimal part starts at -1 (a part of its own, as
    ``ntloss`` splits 12.34 into 12 and 34). The number reader ends every integer part at place 0 (a row's last
    one too), so a new integer part, which starts at a place >= 0, never reads as the continuation of the digit
    before it; nor does a new decimal part, which starts at -1. So the places alone say where the parts are (as
    they say where DIST2's decimals are), whatever lies between two digits: unused slots, other labels, a row's end.

    With ``float_level`` a decimal part also continues the number of the digit before it when that digit's token is
    two tokens before its own in the same row: the one label between them is then the point that opened the part
    (a digit after anything else opens an integer part), as ``ntloss`` joins digit, '.', digit.
    """
    flat = places.reshape(-1).to(torch.long)
    is_digit = flat != NOT_A_DIGIT
    # the index of the digit before each position in reading order: a running maximum of the digits' indices,
    # counted from 1 so that 0 means none and points at the padding of `previous`
    counted = torch.arange(1, flat.numel() + 1, device=places.device)
    latest = F.pad(torch.where(is_digit, counted, 0).cummax(0).values[:-1], (1, 0))
    previous = F.pad(flat, (1, 0), value=NOT_A_DIGIT)[latest]
    # (no position that is no digit continues: NOT_A_DIGIT + 1 is no place)
    continues = (previous == flat + 1) & (flat != -1)
    if float_level:
        slots = places.shape[-1] if places.dim() == 3 else 1
        length = places.shape[-2] if places.dim() == 3 else places.shape[-1]
        token, before = (counted - 1) // slots, (latest - 1) // slots
        joins = (flat == -1) & (latest > 0) & (token - before == 2) & (token // length == before // length)
        continues = continues | joins
    return flat, is_digit, continues


def _digits_only(places: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    # a place the caller gives where the targets hold no digit (a masked label) is not read
    return places if mask is None else torch.where(mask, places, NOT_A_DIGIT)


def number_starts(places: torch.Tensor, mask: torch.Tensor | None = None, float_level: bool = False) -> torch.Tensor:
    """True at the first digit of each number (each integer part and each decimal part, as ``ntloss`` splits
    them; with ``float_level`` a decimal part one point after a digit is in that digit's number) in ``places``
    (:func:`~del_plugin.core.places.next_token_places`, ``[B, T]`` or slotted ``[B, T, M]``), counting only the
    digits where ``mask`` (the digit targets' mask, when given) is True; its sum is the count the criterion is
    averaged over."""
    if places.numel() == 0:
        return torch.zeros(places.shape, dtype=torch.bool, device=places.device)
    _, is_digit, continues = _previous_digit(_digits_only(places, mask), float_level)
    return (is_digit & ~continues).view(places.shape)


def ntl_number_token_losses(targets: DigitTargets, places: torch.Tensor, float_level: bool = False) -> torch.Tensor:
    """The number-level relative error ``l_n`` (module docstring) of every number, at its first digit; 0 elsewhere.

    ``targets`` and ``places`` are aligned (``[B, T]``, or ``[B, T, M]`` with number tokens); float32 (float64
    logits stay float64). The values are computed relative to each number's highest place, so a number of any
    length stays finite (``ntloss`` caps the exponent at 19). ``float_level``: ``ntloss``'s reading (module
    docstring)."""
    return ntl_number_terms_and_starts(targets, places, float_level)[0]


def ntl_number_terms_and_starts(
    targets: DigitTargets, places: torch.Tensor, float_level: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`ntl_number_token_losses` and :func:`number_starts` (where the numbers start, which the term is
    averaged over) from one reading of the numbers.

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``; target int64 and mask bool
    ``[...]``); ``places``: integer ``[...]``. Returns the terms (``[...]``, float32 or the logits' wider dtype)
    and the starts (bool ``[...]``)."""
    z = targets.logits
    dtype = torch.promote_types(z.dtype, torch.float32)
    flat, is_digit, continues = _previous_digit(_digits_only(places, targets.mask), float_level)
    n = flat.numel()
    start = is_digit & ~continues
    # each position's number: 1, 2, ... from a number's first digit on, 0 before the first one. The positions
    # between two numbers fall in the one before, to which they add exactly 0 (their scale below is 0)
    number = torch.cumsum(start, 0)
    # each digit's power of ten relative to its number's first digit: minus the digits before it in the number (a
    # running count of digits, less its count at the number's first digit). Not the places: 1.2.3 read at float
    # level is 123, places 0, -1, -1
    rank = torch.cumsum(is_digit, 0)
    first = torch.where(start, rank, 0).cummax(0).values
    scale = torch.where(is_digit, torch.pow(10.0, (first - rank).to(dtype)), 0.0)
    # the expected digit sum_k p_hat_k k, with the softmax written out (on a CPU torch.softmax over ten logits
    # costs three times this); the maximum is a constant shift, so the gradient is the softmax's
    z = z.to(dtype).reshape(n, 10)
    e = torch.exp(z - z.detach().amax(-1, keepdim=True))
    expected = (e @ torch.arange(10, device=z.device, dtype=dtype)) / e.sum(-1)
    # `where`, not the product with a scale of 0, so that a non-finite logit off the digits cannot leak a NaN
    expected = torch.where(is_digit, expected, 0.0)
    truth = targets.target.reshape(n).to(dtype)
    # per number, in one pass: the predicted and the true value relative to the top place, and the digit count
    parts = torch.stack([expected * scale, truth * scale, is_digit.to(dtype)], -1)
    predicted, true, count = torch.zeros(n + 1, 3, dtype=dtype, device=z.device).index_add(0, number, parts).unbind(-1)
    # eps at the number's lowest digit, relative to its first one (count - 1 digits below it); kept above 1e-37
    # so that a number of more than 38 digits predicted all-zero scores 0 / 1e-37 instead of 0 / 0 in float32
    guard = NUMBER_EPS * torch.pow(10.0, (1.0 - count).clamp(min=-30.0))
    error = (predicted - true).abs() / (predicted + true + guard)
    return torch.where(start, error[number], 0.0).view(places.shape), start.view(places.shape)
