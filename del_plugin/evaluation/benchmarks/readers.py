"""Reading and scoring a model's answer on the paper's benchmarks, by the rules of the paper's harness.

Every reader starts the same way: the answer is what follows the **last** "The answer is" (any case, an optional
colon; GSM8K also "####"). When there is no such marker the whole output is searched instead, from its end.

* **Numbers** (GSM8K, SVAMP, SimulEq; :func:`score_number`): thousands commas go; the answer is the first number
  after the marker, or the last number of the output without one; a marker with no number after it is no answer.
  Numbers are written in one canonical form, compared **as strings, exactly**: trailing zeros go (``18.0`` is
  ``18``), ``3/4`` is ``0.75``, ``-0`` is ``0``. No tolerance: ``17.99`` is not ``18``.
* **LaTeX** (MATH; :func:`score_math`): the last ``\\boxed{...}`` after the marker; without one, after a marker the
  text after its last ``=`` (``12 cm`` keeps ``12``), and without a marker the last number of the output; then the
  normaliser of :mod:`.latex` and an exact, case-insensitive comparison.
* **Option letters** (AQuA, SAT, MMLU-math; :func:`score_choice`): the first option letter after the marker, or the
  last one in the output without one. An option letter stands alone: a capital of the set's options (``B``,
  ``(B)``, ``B)``), a small one in parentheses (``(b)``), or a small one as the first word after the marker
  ("The answer is: d", not "The answer is a total of 35"). A bare capital with a word after it on its line is a
  word of the sentence, not a letter ("A car is ...", "A and B can ...", "A: The original price ..."), unless an
  option word comes right before it ("option B is ...", "answer: A since ...", the marker) or "is correct" after
  it ("B is correct"). With no letter the paper's harness answers ``A``: the
  verdict is then ``defaulted`` and counts as correct when the reference is ``A``; ``correct_without_default`` is
  the verdict without that default.

An answer read is at most :data:`~.answers.MAX_ANSWER_CHARS` characters (a longer one is no answer; a
``\\boxed{`` whose brace does not close within it counts as one that never closes), and every reader is linear in
the output.

A :class:`Verdict` holds the answer read (``None``: no answer), whether it is correct, and for numbers its value.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from .answers import ANSWER_MARKER, GSM8K_MARKERS, MAX_ANSWER_CHARS, after_last_marker, find_number, last_match
from .latex import last_boxed, normalize_math_answer, same_math_answer

__all__ = [
    "ANSWER_MARKER",
    "DEFAULT_CHOICE",
    "GSM8K_MARKERS",
    "Verdict",
    "after_last_marker",
    "canonical_number",
    "read_choice",
    "read_math_answer",
    "read_number",
    "reference_number",
    "score_choice",
    "score_math",
    "score_number",
]

DEFAULT_CHOICE = "A"

_LAST_EQUALS_NUMBER_WITH_UNIT = re.compile(r"[\d.]+\s\D+")
_PLAIN_NUMBER = re.compile(r"-?\d*\.?\d+")
_OUTSIDE_NUMBERS = re.compile(r"[^-\d.]")


@dataclass(frozen=True)
class Verdict:
    """One output scored. ``prediction``: the answer read, in canonical form (``"0.75"``, ``"\\frac{1}{2}"``,
    ``"B"``), None for no answer. ``value``: the number of a numeric answer (for the MAE). ``defaulted``: a choice
    output without a letter, scored as ``"A"``. ``math_verify``: math-verify's verdict on the same text
    (:mod:`~del_plugin.evaluation.scoring.math_verify_scoring`; None when it was not asked or is not installed);
    ``math_verify_note``: why math-verify gave no verdict (over its budget: then ``math_verify`` is False), else
    None."""

    prediction: str | None
    correct: bool
    value: Decimal | None = None
    defaulted: bool = False
    correct_without_default: bool | None = None
    math_verify: bool | None = None
    math_verify_note: str | None = None

    @property
    def answered(self) -> bool:
        return self.prediction is not None


def canonical_number(value: Decimal) -> str:
    """The form numbers are compared in: plain notation, no trailing zeros, ``-0`` as ``0`` (``12.50`` -> ``12.5``,
    ``1E+3`` -> ``1000``). Exact: no rounding (a quotient that does not terminate keeps 28 significant digits)."""
    text = format(value.normalize(), "f")
    return "0" if text in ("0", "-0") else text


def read_number(output: str, markers: tuple[str, ...] = (ANSWER_MARKER,)) -> Decimal | None:
    """The numeric answer of ``output`` (see the module docs), or None."""
    tail, marked = after_last_marker(output, markers)
    found = find_number(tail, last=not marked)
    return None if found is None else found[0]


def score_number(output: str, reference: str, markers: tuple[str, ...] = (ANSWER_MARKER,)) -> Verdict:
    """GSM8K, SVAMP and SimulEq: ``reference`` in :func:`canonical_number` form."""
    value = read_number(output, markers)
    if value is None:
        return Verdict(None, False)
    prediction = canonical_number(value)
    return Verdict(prediction, prediction == reference, value)


def read_math_answer(output: str) -> str | None:
    """The normalised MATH answer of ``output`` (see the module docs), or None."""
    tail, marked = after_last_marker(output)
    tail = tail.strip().rstrip(".").rstrip("/").strip()
    boxed = last_boxed(tail, MAX_ANSWER_CHARS)
    if boxed is not None:
        answer = boxed
    elif marked:
        answer = tail[tail.rfind("=") + 1 :].strip()
        if len(answer) <= MAX_ANSWER_CHARS and _LAST_EQUALS_NUMBER_WITH_UNIT.fullmatch(answer):
            answer = answer.split(" ")[0]
    else:
        number = last_match(_PLAIN_NUMBER, tail, _OUTSIDE_NUMBERS)
        answer = number[0] if number else ""
    if len(answer) > MAX_ANSWER_CHARS:
        return None
    answer = normalize_math_answer(answer)
    return answer or None


def score_math(output: str, reference: str) -> Verdict:
    """MATH: ``reference`` normalised by :func:`~.latex.normalize_math_answer`."""
    prediction = read_math_answer(output)
    if prediction is None:
        return Verdict(None, False)
    return Verdict(prediction, same_math_answer(prediction, reference))


def _choice_pattern(letters: str) -> re.Pattern:
    capitals = re.escape(letters)
    small = re.escape(letters.lower())
    return re.compile(rf"(?<![A-Za-z0-9])(?:([{capitals}])|\(([{small}])\))(?![A-Za-z0-9])")


# A bare letter with a word after it on the same line (an optional colon between) is a word of a sentence: the
# article ("A car is ..."), a person ("A and B can ..."), a speaker's label ("A: The original price ..."); unless
# an option word comes right before it ("option B is correct", "the answer: A since ...") or "is correct" after it.
_WORD_AFTER = re.compile(r":?[ \t]+[A-Za-z]")
_CORRECT_AFTER = re.compile(r"[ \t]+is[ \t]+(?:the[ \t]+)?(?:correct|right|answer)\b", re.IGNORECASE)
_OPTION_WORD_BEFORE = re.compile(r"\b(?:option|choice|answer)s?(?:[ \t]+is)?[ \t]*:?[ \t]*$", re.IGNORECASE)
_LOOK_BEHIND = 24  # characters: enough for "answer is: ", so that each letter costs a bounded look


def _opens_a_phrase(text: str, start: int, end: int) -> bool:
    """Whether the bare letter ``text[start:end]`` is a word of a sentence, not an option letter (see above)."""
    if not _WORD_AFTER.match(text, end) or _CORRECT_AFTER.match(text, end):
        return False
    return _OPTION_WORD_BEFORE.search(text[max(0, start - _LOOK_BEHIND) : start]) is None


def read_choice(output: str, letters: str) -> str | None:
    """The option letter of ``output`` among ``letters`` (e.g. ``"ABCDE"``; see the module docs), or None."""
    tail, marked = after_last_marker(output, (ANSWER_MARKER, "####"))
    if marked:
        first_word = re.match(rf"[\s:]*(\(?)([{re.escape(letters)}])\)?(?![A-Za-z0-9])", tail, re.IGNORECASE)
        # right after the marker a capital is the answer ("The answer is B because ..."); a small letter with a word
        # after it is the article ("The answer is a total of 35")
        if first_word is not None and (
            first_word[2].isupper() or first_word[1] or not _WORD_AFTER.match(tail, first_word.end())
        ):
            return first_word[2].upper()
    # one pass, keeping one match: linear in the output whatever it holds
    letters_found = (
        m for m in _choice_pattern(letters).finditer(tail) if not (m[1] and _opens_a_phrase(tail, m.start(), m.end()))
    )
    found = next(letters_found, None) if marked else next(iter(deque(letters_found, maxlen=1)), None)
    return None if found is None else (found[1] or found[2]).upper()


def score_choice(output: str, reference: str, letters: str) -> Verdict:
    """AQuA, SAT and MMLU-math: ``reference`` is a letter of ``letters``."""
    prediction = read_choice(output, letters)
    if prediction is None:
        return Verdict(None, reference == DEFAULT_CHOICE, defaulted=True, correct_without_default=False)
    correct = prediction == reference
    return Verdict(prediction, correct, correct_without_default=correct)


def reference_number(text: str) -> str:
    """A reference written as one number (``"51.0"``, ``"1,080"``, ``"583.3333"``), in canonical form."""
    try:
        value = Decimal(text.replace(",", "").strip())
    except InvalidOperation:
        raise ValueError(f"not a number: {text!r}") from None
    if not value.is_finite():
        raise ValueError(f"not a finite number: {text!r}")
    return canonical_number(value)
