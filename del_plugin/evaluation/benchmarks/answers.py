"""Numbers in text, and the ``--data`` sets' answer rule (the demo's too).

**Reading** (:func:`extract_answer`) is the paper's GSM8K reader (:func:`~.readers.read_number` with
"The answer is" and "####": the markers and :func:`after_last_marker` are here, the readers of every set in
:mod:`.readers` build on them): the text after the
**last** "The answer is" (any case) or "####"; thousands commas removed; the first number there; without a marker,
the last number in the text; a marker with no number after it is no answer.

A *number* (:func:`find_numbers`, which every reader uses) is an optional minus sign, digits with an optional
decimal part (or a bare ``.5``), and an optional ``/denominator`` (``3/4`` reads as 0.75). A minus sign counts only
where it cannot be a subtraction: ``16-3`` reads as 16 and 3, ``x = -3`` as -3. Dollar signs, percent signs and
units around the number are ignored. The Unicode minus '−' is read as '-'.

An answer is at most :data:`MAX_ANSWER_CHARS` characters: a longer one (a runaway generation, a program printing
a million digits) is no answer. Reading is linear in the text, and makes a number only of the one it keeps.

**Scoring** (:func:`is_correct`), the ``--data`` sets' only difference from the paper's GSM8K rule, which compares
exactly: a prediction is correct when, rounded to the nearest integer (halves away from zero), it equals an integer
reference; or, for a non-integer reference, when it is within 4% of it (relative). It is the comparison of
MAmmoTH's harness, on which the paper's is built, for references given as a value (TheoremQA); the paper's seven
sets compare exactly. It is kept for ``--data`` files, the demo's and the efficacy sweeps' held-out sets, whose
published numbers it made; the math-verify column (:mod:`..scoring.math_verify_scoring`) stands beside it.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, DivisionByZero, InvalidOperation, Overflow, localcontext

__all__ = [
    "ANSWER_MARKER",
    "GSM8K_MARKERS",
    "ExtractedNumber",
    "MAX_ANSWER_CHARS",
    "RELATIVE_TOLERANCE",
    "after_last_marker",
    "extract_answer",
    "find_number",
    "find_numbers",
    "format_decimal",
    "is_correct",
    "last_match",
    "to_float",
]

MAX_ANSWER_CHARS = 10_000  # an answer read from an output is at most this long (longer: no answer)
RELATIVE_TOLERANCE = Decimal("0.04")

# A digit or letter right before a '-' makes it a subtraction / hyphen, not a sign; a word character or '.' right
# before the digits means they belong to something else (a name such as 'CO2', a second decimal point in '1.2.3').
_NUMBER = re.compile(
    r"(?:(?<![\w.)\]])(?P<sign>-))?(?<![\w.])(?P<body>\d+(?:\.\d+)?|\.\d+)(?:/(?P<denominator>\d+(?:\.\d+)?))?"
)
_OUTSIDE_NUMBERS = re.compile(r"[^-\d./]")  # a character no number holds
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d)")
# Numbers are kept as exact decimals; a quotient that does not terminate is cut at this many significant digits.
_DIVISION_DIGITS = 28


@dataclass(frozen=True)
class ExtractedNumber:
    """A number read from text: its exact ``value``, the ``text`` it was read from, and where it was found
    (``"marker"`` after "The answer is"/"####", or ``"last"`` for the last number in the text)."""

    value: Decimal
    text: str
    source: str


# the markers a final answer follows: the paper's (its prompts end "The answer is"), and GSM8K's own "####"
ANSWER_MARKER = r"the answer is:?"
GSM8K_MARKERS = (ANSWER_MARKER, "####")


def _normalise(text: str) -> str:
    return _THOUSANDS_COMMA.sub("", text.replace("\u2212", "-"))


def _value(match: re.Match) -> Decimal:
    value = Decimal(match["body"])
    denominator = match["denominator"]
    if denominator is not None and Decimal(denominator) != 0:
        # quantize-free exact division where it terminates; otherwise 28 significant digits
        try:
            value = value / Decimal(denominator)
        except (DivisionByZero, InvalidOperation, Overflow):
            pass
    return -value if match["sign"] else value


def find_numbers(text: str) -> list[tuple[Decimal, str]]:
    """Every number in ``text`` (after removing thousands commas), in order, as ``(value, matched text)``."""
    text = _normalise(text)
    return [(_value(m), m.group(0)) for m in _NUMBER.finditer(text)]


def last_match(pattern: re.Pattern, text: str, outside: re.Pattern) -> re.Match | None:
    """The last match of ``pattern`` in ``text`` (the last that ``finditer`` gives), found from the end a window of
    a few answers' length at a time: the usual output costs its last window, and none costs more than one scan
    (with no Match made for the numbers before). ``outside``: a character no match holds (``[^-\\d./]`` for
    numbers), at which the windows are cut, so that no match is cut in two."""
    reversed_text = None
    end = len(text)
    while end > 0:
        start = max(0, end - 4 * MAX_ANSWER_CHARS)
        if start > 0:
            reversed_text = reversed_text or text[::-1]
            boundary = outside.search(reversed_text, len(text) - start)  # the first such character before start
            start = 0 if boundary is None else len(text) - boundary.start()
        found = deque(pattern.finditer(text, start, end), maxlen=1)
        if found:
            return found[0]
        end = start
    return None


def after_last_marker(output: str, markers: tuple[str, ...] = (ANSWER_MARKER,)) -> tuple[str, bool]:
    """``(the text after the last marker, True)``, or ``(output, False)`` when no marker occurs. ``markers`` are
    regular expressions, matched case-insensitively."""
    last = None
    for match in re.finditer("|".join(f"(?:{m})" for m in markers), output, re.IGNORECASE):
        last = match
    if last is None:
        return output, False
    return output[last.end() :], True


def find_number(text: str, last: bool = False) -> tuple[Decimal, str] | None:
    """The first (``last``: the last) number of ``text`` as :func:`find_numbers` reads them, ``(value, matched
    text)``; None when there is none, or when it is longer than :data:`MAX_ANSWER_CHARS`. Only that one number is
    made: ``"1 " * 5_000_000`` costs no five million Decimals."""
    text = _normalise(text)
    match = last_match(_NUMBER, text, _OUTSIDE_NUMBERS) if last else _NUMBER.search(text)
    if match is None or match.end() - match.start() > MAX_ANSWER_CHARS:
        return None
    return _value(match), match.group(0)


def extract_answer(text: str) -> ExtractedNumber | None:
    """The model's final answer in ``text``, or None (see the module docs: the paper's GSM8K reader, which also
    gives the ``text`` the number was read from and whether it followed a marker)."""
    if not isinstance(text, str):
        raise TypeError(f"extract_answer needs a str, got {type(text).__name__}")
    tail, marked = after_last_marker(text, GSM8K_MARKERS)
    found = find_number(tail, last=not marked)
    return None if found is None else ExtractedNumber(*found, "marker" if marked else "last")


def _round_half_away(value: Decimal) -> Decimal:
    with localcontext() as context:
        # room for every integer digit: a runaway answer can have hundreds
        context.prec = max(context.prec, value.adjusted() + 2)
        return value.quantize(Decimal(1), rounding=ROUND_HALF_UP)


def is_correct(prediction: Decimal | float | None, reference: Decimal | float) -> bool:
    """The harness's rule: rounded prediction == integer reference; else within 4% relative of the reference."""
    if prediction is None:
        return False
    prediction, reference = Decimal(str(prediction)), Decimal(str(reference))
    if not prediction.is_finite() or not reference.is_finite():
        return False
    if reference == reference.to_integral_value():
        return _round_half_away(prediction) == reference
    return abs(prediction - reference) <= RELATIVE_TOLERANCE * abs(reference)


def to_float(value: Decimal) -> float:
    """``float(value)``, clipped to the largest finite float (a runaway generation can print 400 digits)."""
    as_float = float(value)
    if math.isinf(as_float):
        return math.copysign(1.7976931348623157e308, as_float)
    return as_float


def format_decimal(value: Decimal, max_decimals: int = 6) -> str:
    """Plain positional notation, rounded to ``max_decimals`` places, without trailing zeros: 12.50 -> '12.5',
    1E+3 -> '1000', 2/3 -> '0.666667'."""
    quantum = Decimal(1).scaleb(-max_decimals)
    try:
        value = value.quantize(quantum, rounding=ROUND_HALF_UP) if value.adjusted() < 60 else value
    except InvalidOperation:  # more digits than the context precision: no decimals to round anyway
        pass
    text = format(value.normalize(), "f")
    return "0" if text in ("0", "-0") else text
