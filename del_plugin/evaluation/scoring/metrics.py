"""Numeric metrics of final answers: accuracy, MAE, log-MAE, and per-place digit accuracy.

Definitions (``n`` problems, prediction ``p`` and reference ``r``):

* ``accuracy``: share of the ``n`` problems scored correct by :func:`~..benchmarks.answers.is_correct`; a generation
  without a number is wrong.
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

from ...core import DigitVocab, number_places
from ...core.places import NOT_A_DIGIT
from ..benchmarks.answers import format_decimal, is_correct, to_float

__all__ = [
    "GenerationMetrics",
    "NUMERIC_SCORINGS",
    "NumericMetrics",
    "ProgramCounts",
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

    def add(self, prediction: Decimal | None, reference: Decimal, correct: bool | None = None) -> bool:
        """Count one problem; returns whether it is correct: ``correct`` when given (the paper's benchmarks compare
        exactly), else by :func:`~..benchmarks.answers.is_correct`."""
        self.n += 1
        if correct is None:
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

    @classmethod
    def from_dict(cls, data: dict) -> NumericMetrics:
        """The accumulator behind :meth:`as_dict` ``data`` (sums rebuilt from the means), to pool a resumed set."""
        places = data.get("place_accuracy") or {}
        return cls(
            n=data["n"],
            answered=data["answered"],
            correct=data["correct"],
            abs_error_sum=(data.get("mae") or 0.0) * data["answered"],
            log_abs_error_sum=(data.get("log_mae") or 0.0) * data["answered"],
            place_total={int(p): v["n"] for p, v in places.items()},
            place_correct={int(p): v["correct"] for p, v in places.items()},
        )

    def merge(self, other: NumericMetrics) -> None:
        self.n += other.n
        self.answered += other.answered
        self.correct += other.correct
        self.abs_error_sum = min(self.abs_error_sum + other.abs_error_sum, _FLOAT_MAX)
        self.log_abs_error_sum += other.log_abs_error_sum
        for place, total in other.place_total.items():
            self.place_total[place] = self.place_total.get(place, 0) + total
            self.place_correct[place] = self.place_correct.get(place, 0) + other.place_correct[place]


NUMERIC_SCORINGS = ("numeric", "numeric-tolerance")


@dataclass
class ProgramCounts:
    """Program-of-thought on one set: problems ``asked`` for a program, outputs that held a ``program``, programs
    that ``ran`` (exit 0), problems ``answered`` by the program-of-thought output, problems asked again as
    chain-of-thought (``cot_fallback``)."""

    asked: int = 0
    programs: int = 0
    ran: int = 0
    answered: int = 0
    cot_fallback: int = 0

    def as_dict(self) -> dict:
        return dict(vars(self))


@dataclass
class GenerationMetrics:
    """What the generations of one set (or several, pooled) scored, whatever the set's ``scoring``:

    * every set: ``n``, ``correct``, ``accuracy``, ``answered``, ``no_answer``, ``answered_rate``,
      ``mean_new_tokens``, ``cut_at_max_new_tokens``;
    * numbers (``numeric``, ``numeric-tolerance``): ``mae``, ``log_mae``, ``place_accuracy`` (see the module docs);
    * options (``choice``): ``defaulted`` (no letter, scored as "A" as the paper's harness does; counted in
      ``no_answer`` too) and ``accuracy_without_default`` (those counted wrong);
    * ``program_of_thought``: :class:`ProgramCounts` when the set ran as program-of-thought, else None;

    and, apart (:meth:`math_verify_summary`, the set's ``math_verify`` in the report), math-verify's verdicts.
    """

    scoring: str
    n: int = 0
    correct: int = 0
    answered: int = 0
    defaulted: int = 0
    correct_without_default: int = 0
    new_tokens: int = 0
    generated: int = 0
    cut: int = 0
    programs: ProgramCounts | None = None
    numeric: NumericMetrics | None = None
    math_verify_n: int = 0
    math_verify_correct: int = 0
    math_verify_over_budget: int = 0
    disagreements: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.numeric is None and self.scoring in NUMERIC_SCORINGS:
            self.numeric = NumericMetrics()

    def add(
        self,
        verdict,
        reference: str,
        new_tokens: int | None = None,
        finished: bool = True,
        problem_id: int | None = None,
    ) -> None:
        """Count one scored problem: its :class:`~..benchmarks.readers.Verdict`, the reference (canonical text),
        the length of the generation scored (None: not generated here), whether it ended (EOS or a stop string)
        before the token limit, and its id (listed when math-verify's verdict differs from the paper's)."""
        self.n += 1
        if verdict.math_verify is not None:
            self.math_verify_n += 1
            self.math_verify_correct += int(verdict.math_verify)
            self.math_verify_over_budget += int(verdict.math_verify_note is not None)
            if verdict.math_verify != verdict.correct and problem_id is not None:
                self.disagreements.append(problem_id)
        self.correct += int(verdict.correct)
        self.answered += int(verdict.answered)
        self.defaulted += int(verdict.defaulted)
        self.correct_without_default += int(
            verdict.correct if verdict.correct_without_default is None else verdict.correct_without_default
        )
        if new_tokens is not None:
            self.new_tokens += new_tokens
            self.generated += 1
            self.cut += int(not finished)
        if self.numeric is not None:
            self.numeric.add(verdict.value, Decimal(reference), correct=verdict.correct)

    def merge(self, other: GenerationMetrics) -> None:
        for key in (
            "n",
            "correct",
            "answered",
            "defaulted",
            "correct_without_default",
            "new_tokens",
            "generated",
            "cut",
        ):
            setattr(self, key, getattr(self, key) + getattr(other, key))
        if self.numeric is not None and other.numeric is not None:
            self.numeric.merge(other.numeric)

    def as_dict(self) -> dict:
        n = self.n
        out = {
            "n": n,
            "correct": self.correct,
            "accuracy": self.correct / n if n else None,
            "answered": self.answered,
            "no_answer": n - self.answered,
            "answered_rate": self.answered / n if n else None,
            "mean_new_tokens": self.new_tokens / self.generated if self.generated else None,
            "cut_at_max_new_tokens": self.cut,
        }
        if self.numeric is not None:
            numeric = self.numeric.as_dict()
            out |= {key: numeric[key] for key in ("mae", "log_mae", "place_accuracy")}
        if self.scoring == "choice":
            out["defaulted"] = self.defaulted
            out["accuracy_without_default"] = self.correct_without_default / n if n else None
        out["program_of_thought"] = None if self.programs is None else self.programs.as_dict()
        return out

    def math_verify_summary(self) -> dict | None:
        """``{correct, n, accuracy, disagreements, over_budget}``: math-verify's verdicts, the ids of the problems on
        which they differ from the paper's (sorted), and how many had no verdict within math-verify's budget
        (counted not verified); None when math-verify gave none (not installed)."""
        if not self.math_verify_n:
            return None
        return {
            "correct": self.math_verify_correct,
            "n": self.math_verify_n,
            "accuracy": self.math_verify_correct / self.math_verify_n,
            "disagreements": sorted(self.disagreements),
            "over_budget": self.math_verify_over_budget,
        }

    @classmethod
    def from_dict(cls, scoring: str, data: dict) -> GenerationMetrics:
        """The accumulator behind :meth:`as_dict` ``data``, to pool a resumed set with new ones."""
        metrics = cls(
            scoring,
            n=data["n"],
            correct=data["correct"],
            answered=data["answered"],
            defaulted=data.get("defaulted", 0),
            correct_without_default=round((data.get("accuracy_without_default") or 0) * data["n"])
            if scoring == "choice"
            else data["correct"],
            new_tokens=round((data.get("mean_new_tokens") or 0) * data["n"]),
            generated=data["n"] if data.get("mean_new_tokens") is not None else 0,
            cut=data.get("cut_at_max_new_tokens", 0),
        )
        if metrics.numeric is not None:
            metrics.numeric = NumericMetrics.from_dict(data)
        if data.get("program_of_thought"):
            metrics.programs = ProgramCounts(**data["program_of_thought"])
        return metrics


def numeric_metrics(pairs: Iterable[tuple[Decimal | None, Decimal]]) -> dict:
    """The metrics of ``(prediction, reference)`` pairs, as :meth:`NumericMetrics.as_dict`."""
    metrics = NumericMetrics()
    for prediction, reference in pairs:
        metrics.add(prediction, reference)
    return metrics.as_dict()
