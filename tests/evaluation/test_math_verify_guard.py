"""The static guard in front of math-verify (del_plugin/evaluation/scoring/math_verify_guard.py): hand-worked cases on
both sides of each limit, the shapes it must not misread (LaTeX's one-character exponents, ``\\!``, an exclamation mark
after a word), and no rejection of any answer or solution shipped with the project. The hostile set through the scorer
and ``del-eval score``: test_math_verify_budget.py."""

from __future__ import annotations

import gzip
import json
import math
import random

import pytest

from del_plugin.evaluation.scoring.math_verify_guard import (
    MAX_BINOMIAL_DIGITS,
    MAX_DEPTH,
    MAX_DIGITS,
    MAX_TERMS,
    too_costly,
)
from tools.assets import GSM8K_TRAIN_DIR

from repo import REPO

DATA = REPO / "del_plugin" / "evaluation" / "data"


def _nest(opening: str, closing: str, levels: int) -> str:
    return opening * levels + "2" + closing * levels


def _log10_factorial(n: int) -> float:
    """The slow oracle: log10(n!) as a sum of logs (not lgamma, which the guard uses)."""
    return math.fsum(math.log10(k) for k in range(2, n + 1))


def test_the_limits_are_those_the_docs_argue():
    assert (MAX_DIGITS, MAX_BINOMIAL_DIGITS, MAX_TERMS, MAX_DEPTH) == (2_000_000, 10_000, 10_000, 12)


@pytest.mark.parametrize(
    ("expression", "digits"),
    [
        # 10^N: the guard counts N * log10(10) = N (the exact count is N + 1)
        ("10^{2000000}", 2_000_000),
        ("10^{2000001}", 2_000_001),
        # 2^N: N * 0.30103 (log10 2 = 0.30102999566): 6,643,856 -> 1,999,999.94; 6,643,857 -> 2,000,000.24
        ("2^{6643856}", 1_999_999.94),
        ("2^{6643857}", 2_000_000.24),
        # a negative exponent is as costly (sympy computes the denominator): its size is the same
        ("10^{-2000001}", 2_000_001),
        # (2x)^N: sympy distributes the power over the 2, so a letter does not hide 2^N
        ("(2x)^{6643857}", 2_000_000.24),
        # \frac{1}{2}^N: a quotient has its larger side's size
        ("\\frac{1}{2}^{6643857}", 2_000_000.24),
    ],
)
def test_powers_on_both_sides_of_the_digit_limit(expression, digits):
    reason = too_costly(f"The answer is ${expression}$.")
    if digits <= MAX_DIGITS:
        assert reason is None
    else:
        assert reason.startswith("too large to evaluate: power of 2,000,00") and "limit 2,000,000 digits" in reason


def test_factorials_on_both_sides_of_the_digit_limit():
    # 388,006! has 1,999,997.2 digits and 388,007! 2,000,002.8 (the slow oracle agrees with the guard's lgamma)
    assert _log10_factorial(388_006) < MAX_DIGITS < _log10_factorial(388_007)
    assert too_costly("$388006!$") is None
    assert too_costly("$388007!$") == (
        "too large to evaluate: factorial of 388,007, 2,000,003 digits (limit 2,000,000 digits)"
    )
    # n!! is a double factorial, about half n!'s digits: 700,000! has 3.78 million, 700,000!! about 1.89 million
    assert 3.78e6 < _log10_factorial(700_000) < 3.79e6
    assert too_costly("$700000!!$") is None and too_costly("$700000!$") is not None
    assert "factorial of 3,628,800" in too_costly("$((10!)!)!$")  # 10! = 3,628,800: (10!)! has 22 million digits


def test_binomials_on_both_sides_of_the_digit_limit():
    # log10 C(n, k) by the slow oracle: C(33220, 16610) has 9,997.9 digits, C(33230, 16615) 10,000.9
    def log10_binomial(n, k):
        return math.fsum(math.log10((n - i) / (i + 1)) for i in range(k))

    assert log10_binomial(33220, 16610) < MAX_BINOMIAL_DIGITS < log10_binomial(33230, 16615)
    assert too_costly("$\\binom{33220}{16610}$") is None
    assert too_costly("$\\dbinom{33230}{16615}$") == "too large to evaluate: a binomial of 10,001 digits (limit 10,000)"
    # C(10^10, 10^5): about 10^5 * log10(e 10^10 / 10^5) = 543,000 digits
    assert (
        too_costly("$\\binom{10^{10}}{10^{5}}$") == "too large to evaluate: a binomial of 543,426 digits (limit 10,000)"
    )
    assert too_costly("$\\binom{n}{10^{6}}$") is None  # a letter: sympy keeps it unevaluated


def test_power_towers_are_named():
    reason = too_costly("$10^{10^{10}}$")  # 10^10 digits
    assert reason == ("too large to evaluate: power tower of 10^10 digits (exponent 10^10; limit 2,000,000 digits)")
    # 9^{9^9} = 9^387,420,489: 387,420,489 * log10(9) = 370 million digits, reached before the top 9
    assert "power tower of 10^9 digits (exponent 10^9;" in too_costly("$9^{9^{9^{9}}}$")
    assert too_costly("$2^{2^{2^{2}}}$") is None  # 2^16 = 65,536
    # plain arithmetic, as math-verify's expression reader takes it: ** reads the whole number
    assert too_costly("The answer is 10**10**10.").startswith("too large to evaluate: power tower of 10^10 digits")
    assert too_costly("The answer is 10**1000.") is None
    assert too_costly("$x^{y^{z}}$") is None


@pytest.mark.parametrize(
    ("base", "terms", "exponent_over"),
    # (x+1)^N expands to N + 1 terms: 9,999 -> 10,000 (at the limit), 10,000 -> 10,001;
    # (x+y+1)^N to C(N + 2, 2): 139 -> 9,870, 140 -> 10,011
    [("x+1", 2, 10_000), ("x+y+1", 3, 140)],
)
def test_powers_of_sums_on_both_sides_of_the_term_limit(base, terms, exponent_over):
    assert too_costly(f"$({base})^{{{exponent_over - 1}}}$") is None
    reason = too_costly(f"$\\left({base}\\right)^{{{exponent_over}}}$")
    assert reason.startswith(f"too large to evaluate: a sum of {terms} terms to the power {exponent_over:,} expands")
    assert too_costly(f"$x^{{{exponent_over * 100}}}$") is None  # one term: nothing to expand
    # a quotient over a number expands as its numerator: ((x+1)/2)^N
    assert too_costly(f"$(\\frac{{{base}}}{{2}})^{{{exponent_over}}}$").startswith(
        f"too large to evaluate: a sum of {terms}"
    )


@pytest.mark.parametrize(
    ("opening", "closing"), [("\\frac{1}{", "}"), ("\\sqrt{", "}"), ("(", ")"), ("{", "}"), ("1^", ""), ("1^{", "}")]
)
def test_nesting_on_both_sides_of_the_depth_limit(opening, closing):
    assert too_costly(f"${_nest(opening, closing, MAX_DEPTH)}$") is None
    assert too_costly(f"${_nest(opening, closing, MAX_DEPTH + 1)}$") == (
        f"too large to evaluate: nesting depth over {MAX_DEPTH}"
    )


@pytest.mark.parametrize(
    "text",
    [
        "$2^23^35^57^7$",  # LaTeX: a one-character exponent, 2^2 3^3 5^5 7^7 (not 2^{23}...)
        "$x^{1000000}$",
        "Great! So 5! = 120 and 3\\!4 is the answer!",  # a word's !, LaTeX's thin space \!
        "The answer is 1,000,000,000,000.",
        "$" + "9" * 4000 + "$",  # a long number is its own size, no power
        "",
    ],
)
def test_what_the_guard_lets_through(text):
    assert too_costly(text) is None


def _shipped_texts() -> dict[str, list[str]]:
    """Every answer and solution shipped in del_plugin/evaluation/data, by set, and GSM8K's train split (the clone's
    tools/data/gsm8k/)."""
    texts: dict[str, list[str]] = {}
    with gzip.open(DATA / "math" / "test.jsonl.gz", "rt") as handle:
        rows = [json.loads(line) for line in handle]
    texts["MATH"] = [row["solution"] for row in rows]  # each ends in its \\boxed answer
    for split, folder in (("test", DATA / "gsm8k"), ("train", GSM8K_TRAIN_DIR)):
        with gzip.open(folder / f"{split}.jsonl.gz", "rt") as handle:
            texts[f"GSM8K {split}"] = [json.loads(line)["answer"] for line in handle]
    with gzip.open(DATA / "svamp" / "SVAMP.json.gz", "rt") as handle:
        texts["SVAMP"] = [f"{row['Equation']} = {row['Answer']}" for row in json.load(handle)]
    with gzip.open(DATA / "aqua" / "AQuA.json.gz", "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    texts["AQuA"] = [text for row in rows for text in (row["rationale"], *row["options"])]
    with gzip.open(DATA / "mmlu-math" / "mathematics.json.gz", "rt") as handle:
        texts["MMLU-math"] = [choice for row in json.load(handle) for choice in row["choices"]]
    return texts


def test_no_shipped_answer_or_solution_is_rejected():
    texts = _shipped_texts()
    assert len(texts["MATH"]) == 5_000 and len(texts["GSM8K test"]) == 1_319 and len(texts["AQuA"]) > 254
    rejected = [(name, text[:120], too_costly(text)) for name, group in texts.items() for text in group]
    assert [row for row in rejected if row[2] is not None] == []


def test_any_text_gets_an_answer_never_an_error():
    """A seeded fuzz over the guard's own alphabet (numbers, operators, brackets, the commands it reads, unbalanced
    and deep): a reason or None, never an exception (the guard runs in the scoring thread)."""
    rng = random.Random(0)
    alphabet = ["0", "1", "9", "99999999", "0.5", "x", "e", "^", "**", "!", "!!", "+", "-", "/", "\\cdot", "{", "}"]
    alphabet += ["(", ")", "[", "]", "\\frac", "\\sqrt", "\\binom", "\\left(", "\\right)", "_", "=", ",", "\\!", " "]
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        reason = too_costly(text)
        assert reason is None or reason.startswith("too large to evaluate: "), text
