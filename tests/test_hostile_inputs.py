"""Hostile outputs against the readers and scorers: every one linear in its input (a 1 MiB output scored in well
under a second of CPU), memory a small multiple of the output (no Decimal per number never used), an answer
length cap, and the rewritten parts held to the old rules (the one-level-per-pass ``\\text{...}`` unwrapping, the
list of every number) as slow oracles on random text."""

from __future__ import annotations

import re
import time
import tracemalloc
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from del_plugin.evaluation import answers
from del_plugin.evaluation.answers import MAX_ANSWER_CHARS, extract_answer, find_numbers, last_match
from del_plugin.evaluation.benchmarks import latex
from del_plugin.evaluation.benchmarks.latex import same_math_answer
from del_plugin.evaluation.benchmarks.readers import (
    GSM8K_MARKERS,
    read_choice,
    read_math_answer,
    read_number,
    score_choice,
    score_math,
    score_number,
)

FUZZ = settings(max_examples=300, deadline=None)
MIB = 1 << 20

# the old unwrapping, one level per pass (quadratic in the depth): the oracle of the one-pass stack
_TEXT = re.compile(r"\\text\{([^{}]*)\}")


def unwrapped_by_passes(text: str) -> str:
    previous = None
    while previous != text:
        previous, text = text, _TEXT.sub(r"\1", text)
    return text


@FUZZ
@given(st.lists(st.sampled_from(["\\text{", "{", "}", "a", "B", "1", " "]), max_size=24))
def test_one_pass_unwrapping_is_the_old_rule(tokens):
    text = "".join(tokens)
    assert latex._unwrap_text(text) == unwrapped_by_passes(text), text


def test_deep_text_nesting_unwraps_in_one_pass():
    deep = "\\text{" * 5000 + "(B)" + "}" * 5000
    assert same_math_answer(deep, "(b)")
    assert not same_math_answer("\\text{" * 5000 + "a{b}" + "}" * 5000, "a{b}")  # a brace inside: kept


@FUZZ
@given(st.text(alphabet="1-./a )(B{,x", max_size=60), st.sampled_from(["numbers", "plain", "choices"]))
def test_last_match_from_the_end_is_the_last_of_all_matches(text, kind):
    """Windows of 8 characters (the cap set to 2 here) over short random text: the windowing is exercised at
    every cut; the oracle is the last of ``finditer``."""
    pattern, outside = {
        "numbers": (answers._NUMBER, answers._OUTSIDE_NUMBERS),
        "plain": (re.compile(r"-?\d*\.?\d+"), re.compile(r"[^-\d.]")),
        "choices": (
            re.compile(r"(?<![A-Za-z0-9])(?:([B])|\(([b])\))(?![A-Za-z0-9])"),
            re.compile(r"[^A-Za-z()]"),
        ),
    }[kind]
    saved = answers.MAX_ANSWER_CHARS
    answers.MAX_ANSWER_CHARS = 2
    try:
        found = last_match(pattern, text, outside)
    finally:
        answers.MAX_ANSWER_CHARS = saved
    every = list(pattern.finditer(text))
    expected = every[-1] if every else None
    assert (found and found.span()) == (expected and expected.span()), text


@FUZZ
@given(st.text(alphabet="12-./ x,", max_size=40), st.booleans())
def test_read_number_is_the_first_or_last_of_every_number(text, marked):
    output = ("The answer is " if marked else "") + text
    numbers = find_numbers(text)
    expected = None if not numbers else numbers[0][0] if marked else numbers[-1][0]
    assert read_number(output) == expected


def test_an_answer_longer_than_the_cap_is_no_answer():
    long_number = "7" * (MAX_ANSWER_CHARS + 1)
    assert read_number(f"The answer is {long_number}") is None and extract_answer(long_number) is None
    assert read_number("The answer is " + "7" * MAX_ANSWER_CHARS) == Decimal("7" * MAX_ANSWER_CHARS)
    assert read_math_answer("The answer is \\boxed{" + "x" * (MAX_ANSWER_CHARS + 1) + "}") is None
    assert read_math_answer("The answer is \\boxed{" + "x" * 10 + "}") == "x" * 10
    assert read_math_answer("The answer is " + "y" * (MAX_ANSWER_CHARS + 1)) is None
    assert score_number("The answer is " + long_number, long_number).prediction is None


def _fill(unit: str, size: int = MIB, tail: str = "") -> str:
    return (unit * (size // len(unit) + 1))[: size - len(tail)] + tail


# 1 MiB outputs that hit each reader where it was (or could be) worse than linear
HOSTILE_OUTPUTS = {
    "149,000 nested \\text": "\\text{" * 149_000 + "5" + "}" * 149_000,
    "149,000 nested \\text after the marker": "The answer is " + "\\text{" * 149_000 + "5" + "}" * 149_000,
    "a box of 100,000 nested \\text": "\\boxed{" + "\\text{" * 100_000 + "5" + "}" * 100_001,
    "half a million numbers": _fill("1 "),
    "half a million numbers after the marker": "The answer is " + _fill("1 "),
    "one number of a million digits": _fill("1"),
    "subtractions": _fill("-1"),
    "boxes that never close": _fill("\\boxed{"),
    "open braces": _fill("{"),
    "\\frac after the marker": "The answer is " + _fill("\\frac"),
    "markers": _fill("The answer is "),
    "equals signs": "The answer is " + _fill("1="),
    "decimal points": _fill("1."),
    "fractions": _fill("1/"),
    "thousands commas": _fill("1,"),
    "option letters": _fill("(B) "),
    "letters before digits": _fill("a1 "),
    "dollars after \\boxed": "\\boxed " + _fill("$"),
    "\\sqrt after the marker": "The answer is " + _fill("\\sqrt "),
    "spaces after the marker": "The answer is " + _fill(" "),
}
SCORERS = {
    "GSM8K": lambda text: score_number(text, "5", GSM8K_MARKERS),
    "MATH": lambda text: score_math(text, "5"),
    "AQuA": lambda text: score_choice(text, "B", "ABCDE"),
    "--data": extract_answer,
}


@pytest.mark.parametrize("name", HOSTILE_OUTPUTS)
def test_each_scorer_reads_a_hostile_1_mib_output_in_well_under_a_second(name):
    """CPU time of this process (not the wall clock of a shared machine), per scorer (one problem): a bound with a
    wide margin (each takes 0.2 s at most on a busy 2-core machine; depth 149,000 took minutes before)."""
    text = HOSTILE_OUTPUTS[name]
    for set_name, scorer in SCORERS.items():
        started = time.process_time()
        scorer(text)
        assert time.process_time() - started < 1.0, (name, set_name)


def test_memory_is_a_small_multiple_of_the_output():
    """Ten million characters of numbers ("1 " five million times): a Decimal per number took 1.67 GB; now a few
    copies of the text at most."""
    text = "1 " * 5_000_000
    for scorer in SCORERS.values():
        tracemalloc.start()
        try:
            scorer(text)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 6 * len(text), peak
    assert read_choice("The answer is " + _fill("(B) "), "ABCDE") == "B"
