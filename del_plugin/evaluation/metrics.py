"""Numeric metrics of final answers: accuracy, MAE, log-MAE, and per-place digit accuracy.

Definitions (``n`` problems, prediction ``p`` and reference ``r``):

* ``accuracy``: share of the ``n`` problems scored correct by :func:`~.answers.is_correct`; a generation without
  a number is wrong.
* ``mae``: mean of ``|p - r|`` over the ``answered`` problems (those whose generation holds a number).
* ``log_mae``: mean of ``|s(p) - s(r)|`` over the answered problems, ``s(x) = sign(x) * log(|x| + 1)``; unlike
  the MAE, one runaway answer cannot dominate it.
* ``place_accuracy``: for each place (units 0, tens 1, first decimal -1, …) of the *reference* answer, the share
  of references having a digit there whose prediction has the same digit at the same place. A prediction without
  that place (or without a number) is wrong there; digits the prediction has beyond the reference's are not
  counted here (the accuracy sees them). Signs are ignored. Numbers are compared as written in plain notation,
  rounded to 6 decimals, trailing zeros removed (``12.50`` is ``12.5``).

Places come from :func:`del_plugin.core.number_places`, the very definition DEL's place weights use, applied to
the characters of the number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

import torch

from ..core import DigitVocab, number_places
from ..core.places import NOT_A_DIGIT
from .answers import format_decimal, is_correct, to_float

__all__ = [
    "NumericMetrics",
    "digits_by_place",
    "log_transform",
    "numeric_metrics",
    "place_label",
]

# One token per character (token id = code point): number_places then reads the places of a number's text.
CHARACTER_VOCAB = DigitVocab(
    family_token_ids=(tuple(ord(c) for c in "0123456789"),),
    decimal_point_id=ord("."),
    name="characters",
)


_FLOAT_MAX = 1.7976931348623157e308


def log_transform(x: float) -> float:
    """``sign(x) * log(|x| + 1)``."""
    return math.copysign(math.log1p(abs(x)), x)


def digits_by_place(value: Decimal) -> dict[int, int]:
    """``{place: digit}`` of ``|value|`` in plain notation (see the module docs): 1038.5 -> {3: 1, 2: 0, 1: 3, 0: 8,
    -1: 5}."""
    text = format_decimal(abs(value))
    codes = torch.tensor([ord(c) for c in text], dtype=torch.long)
    places = number_places(codes, CHARACTER_VOCAB).tolist()
    return {place: int(ch) for ch, place in zip(text, places) if place != NOT_A_DIGIT}


def place_label(place: int) -> str:
    """'10^3' … '10^0', '10^-1' …"""
    return f"10^{place}"


@dataclass
class NumericMetrics:
    n: int = 0
    answered: int = 0
    correct: int = 0
    abs_error_sum: float = 0.0
    log_abs_error_sum: float = 0.0
    place_total: dict[int, int] = field(default_factory=dict)
    place_correct: dict[int, int] = field(default_factory=dict)

    def add(self, prediction: Decimal | None, reference: Decimal) -> bool:
        """Count one problem; returns whether it is correct."""
        self.n += 1
        correct = is_correct(prediction, reference)
        self.correct += int(correct)
        predicted_digits = {}
        if prediction is not None:
            self.answered += 1
            # the error is taken on the exact decimals (no binary rounding), then clipped to a finite float
            self.abs_error_sum = min(self.abs_error_sum + to_float(abs(prediction - reference)), _FLOAT_MAX)
            self.log_abs_error_sum += abs(log_transform(to_float(prediction)) - log_transform(to_float(reference)))
            predicted_digits = digits_by_place(prediction)
        for place, digit in digits_by_place(reference).items():
            self.place_total[place] = self.place_total.get(place, 0) + 1
            hit = predicted_digits.get(place) == digit
            self.place_correct[place] = self.place_correct.get(place, 0) + int(hit)
        return correct

    def as_dict(self) -> dict:
        """The JSON form (see ``docs/evaluation.md``); means are None when there is nothing to average."""
        places = sorted(self.place_total, reverse=True)
        return {
            "n": self.n,
            "answered": self.answered,
            "correct": self.correct,
            "accuracy": self.correct / self.n if self.n else None,
            "answered_rate": self.answered / self.n if self.n else None,
            "mae": self.abs_error_sum / self.answered if self.answered else None,
            "log_mae": self.log_abs_error_sum / self.answered if self.answered else None,
            "place_accuracy": {
                str(p): {
                    "n": self.place_total[p],
                    "correct": self.place_correct[p],
                    "accuracy": self.place_correct[p] / self.place_total[p],
                }
                for p in places
            },
        }


def numeric_metrics(pairs: Iterable[tuple[Decimal | None, Decimal]]) -> dict:
    """The metrics of ``(prediction, reference)`` pairs, as :meth:`NumericMetrics.as_dict`."""
    metrics = NumericMetrics()
    for prediction, reference in pairs:
        metrics.add(prediction, reference)
    return metrics.as_dict()
