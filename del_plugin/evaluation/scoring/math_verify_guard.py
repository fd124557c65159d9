"""A static guard in front of math-verify: it reads an output's arithmetic without evaluating it and says when
sympy would be asked for a result too large to compute within the budget (:mod:`.math_verify_scoring`), so that
such an output is "not verified" at once, with the reason, instead of spending its full second of CPU.

It estimates sizes in logarithms, never computing a value: a number is its ``log10``; a product adds them, a
quotient or a sum takes the larger; ``a^b`` has ``b * log10(a)`` digits (the exponent's value is ``10**log10(b)``,
infinite once it overflows a float: a power tower); ``n!`` has ``lgamma(n + 1) / ln 10`` digits and
``\\binom{n}{k}`` the same of ``n! / (k! (n-k)!)``; a power of a sum with a letter, ``(x+1)^N``, expands to
``C(N + t - 1, t - 1)`` terms (``t``: the terms of the sum). A letter counts 1 (``log10 = 0``): ``(2x)^N`` still
has ``2^N``. Its limits (what they were set from: docs/evaluation.md, "math-verify's budget"):

* :data:`MAX_DIGITS` digits for a power or a factorial, :data:`MAX_BINOMIAL_DIGITS` for a binomial (sympy
  computes one far more slowly: ``\\binom{100000}{50000}``, 30,101 digits, took 0.85 s);
* :data:`MAX_TERMS` terms for an expanded power of a sum;
* :data:`MAX_DEPTH` nested groups (braces, parentheses, brackets, ``\\frac``, ``\\sqrt``, an exponent without
  braces: ``2^2^2``).

It reads the whole text the scorer gives math-verify (its last 8,000 characters: the length bound), prose
included, as LaTeX or plain arithmetic (``^`` and ``**``, ``{}``, ``()``, ``[]``, ``\\left``/``\\right``,
``\\frac``, ``\\sqrt``, ``\\binom``, ``!``); a ``!`` after a word is no factorial, and ``\\!`` (LaTeX's thin space)
none at all. What it misses is the kernel budget's to stop.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

__all__ = ["MAX_BINOMIAL_DIGITS", "MAX_DEPTH", "MAX_DIGITS", "MAX_TERMS", "too_costly"]

MAX_DIGITS = 2_000_000
MAX_BINOMIAL_DIGITS = 10_000
MAX_TERMS = 10_000
MAX_DEPTH = 12

_LN10 = math.log(10)
_TOKEN = re.compile(r"[0-9]+(?:\.[0-9]+)?|\\[A-Za-z]+|\\.|\*\*|\s+|.", re.DOTALL)
_OPEN = {"{": "}", "(": ")", "[": "]"}
_PRODUCT = {"*", "\\cdot", "\\times", "\\div", "/"}
_SUM = {"+", "-", "\\pm", "\\mp"}
# LaTeX's sizing and spacing, read as nothing (\\! is a thin space, no factorial)
_SKIP = {"\\left", "\\right", "\\big", "\\Big", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr", "\\displaystyle", "\\!"}
_BINOM = {"\\binom", "\\dbinom", "\\tbinom"}
_FRAC = {"\\frac", "\\dfrac", "\\tfrac"}
_CLOSE = set(_OPEN.values())
_RISKY = re.compile(r"\^|\*\*|!|\\[dt]?binom")
_BRACKETS = re.compile(r"[{}()\[\]]")
# what starts no atom: operators, relations, separators, closing brackets (anything else, a letter or a command
# such as \pi or \text, is a letter: its value unknown)
_NOT_ATOM = _SUM | _CLOSE | {"^", "**", "!", "_", "&", "=", "<", ">", ",", ";", ":", "\\\\", "$"}


class TooCostly(Exception):
    """An output whose evaluation would cost more than the budget; its message is the reason."""


class Size(NamedTuple):
    """An expression's size: ``log10`` of its magnitude with each letter as 1 (at least 0); ``letters``: whether
    it holds a letter (its value unknown); ``terms``: the terms of a sum (1: none); ``power``: it is a power (an
    exponent that is one makes a tower)."""

    log10: float = 0.0
    letters: bool = False
    terms: int = 1
    power: bool = False


_ONE = Size()


def _digits_of_factorial(log10_n: float) -> float:
    n = 10.0**log10_n if log10_n < 300 else math.inf
    return math.lgamma(n + 1) / _LN10 if math.isfinite(n) else math.inf


def _log10_binomial(n: float, k: float) -> float:
    """log10 of C(n, k) for real n >= k >= 0 (inf when n overflows)."""
    if not math.isfinite(n):
        return math.inf
    k = min(k, n - k)
    if k <= 0:
        return 0.0
    return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / _LN10


def _log10_number(token: str) -> float:
    """log10 of a number token (at least 0), from its digits when a float would overflow."""
    whole = token.split(".")[0].lstrip("0")
    if len(whole) > 300:
        return float(len(whole) - 1)
    return max(math.log10(float(token)), 0.0) if float(token) > 0 else 0.0


def _value(size: Size) -> float:
    """The magnitude back from its log10, to 12 digits (10^{2000000}: 2,000,000, not 2,000,000.0001)."""
    return float(f"{10.0**size.log10:.12g}") if size.log10 < 300 else math.inf


class _Reader:
    """A recursive-descent reading of the tokens (see the module docs); raises :class:`TooCostly`."""

    def __init__(self, text: str):
        self.tokens = [t for t in _TOKEN.findall(text) if not t.isspace() and t not in _SKIP]
        self.at = 0
        self.depth = 0

    def peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> str:
        self.at += 1
        return self.tokens[self.at - 1]

    def read_all(self) -> None:
        while self.peek() is not None:
            start = self.at
            self.sum()
            if self.at == start:  # a token no expression starts with (a relation, a closing bracket): skip it
                self.take()

    def sum(self) -> Size:
        if self.peek() in _SUM:  # a sign
            self.take()
        sizes = [self.product()]
        while self.peek() in _SUM:
            self.take()
            sizes.append(self.product())
        if len(sizes) == 1:
            return sizes[0]
        letters = any(s.letters for s in sizes)
        terms = sum(s.terms for s in sizes)
        return Size(max(s.log10 for s in sizes) + math.log10(len(sizes)), letters, terms)

    def product(self) -> Size:
        size = self.power()
        while True:
            token = self.peek()
            if token in _PRODUCT:
                self.take()
                other = self.power()
                if token in ("/", "\\div"):
                    size = Size(max(size.log10, other.log10), size.letters or other.letters, size.terms)
                    continue
            elif self.starts_atom(token):
                other = self.power()
            else:
                return size
            size = Size(size.log10 + other.log10, size.letters or other.letters, size.terms * other.terms)

    def power(self) -> Size:
        base = self.postfix(self.atom())
        if self.peek() not in ("^", "**"):
            return base
        if self.take() == "^" and (self.peek() or "x")[0] in "0123456789":  # LaTeX: 2^23^3 is 2^2 3^3
            token = self.tokens[self.at]
            self.tokens[self.at : self.at + 1] = [token[0]] + ([token[1:]] if token[1:] else [])
        braced = self.peek() == "{"  # its group counts the level; else a tower without braces, 2^2^2^...
        if not braced:
            self.enter()
        exponent = self.power()
        self.depth -= not braced
        if exponent.letters:
            return Size(base.log10, True, power=True)
        return self.raised(base, exponent)

    @staticmethod
    def raised(base: Size, exponent: Size) -> Size:
        value = _value(exponent)
        if base.terms > 1 and base.letters:
            log_terms = _log10_binomial(value + base.terms - 1, base.terms - 1)
            if log_terms > math.log10(MAX_TERMS) + 1e-9:  # C(10000, 1) is 10,000: at the limit
                raise TooCostly(
                    f"too large to evaluate: a sum of {base.terms} terms to the power {_say(value)} expands to "
                    f"{_say_log(log_terms)} terms (limit {MAX_TERMS:,})"
                )
            terms = round(10**log_terms)
        else:
            terms = 1
        digits = value * base.log10 if base.log10 > 0 else 0.0
        if digits > MAX_DIGITS:
            kind = "power tower" if exponent.power else "power"
            raise TooCostly(
                f"too large to evaluate: {kind} of {_say(digits)} digits (exponent {_say(value)}; limit "
                f"{MAX_DIGITS:,} digits)"
            )
        return Size(digits, base.letters, terms, power=True)

    def postfix(self, size: Size) -> Size:
        while self.peek() == "!":
            self.take()
            double = self.peek() == "!"  # n!! (about the square root of n!)
            if double:
                self.take()
            if size.letters:  # n!, or a word followed by an exclamation mark
                continue
            digits = _digits_of_factorial(size.log10) / (2 if double else 1)
            if digits > MAX_DIGITS:
                raise TooCostly(
                    f"too large to evaluate: factorial of {_say(_value(size))}, {_say(digits)} digits (limit "
                    f"{MAX_DIGITS:,} digits)"
                )
            size = Size(digits)
        return size

    @staticmethod
    def starts_atom(token: str | None) -> bool:
        return token is not None and token not in _NOT_ATOM and token not in _PRODUCT

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TooCostly(f"too large to evaluate: nesting depth over {MAX_DEPTH}")

    def group(self, close: str) -> Size:
        """Inside a bracket: expressions up to ``close`` (one: its size; several, a tuple: letters)."""
        self.enter()
        sizes = []
        while self.peek() not in (close, None):
            start = self.at
            sizes.append(self.sum())
            if self.at == start:
                self.take()
        if self.peek() == close:
            self.take()
        self.depth -= 1
        return sizes[0] if len(sizes) == 1 else Size(max((s.log10 for s in sizes), default=0.0), True)

    def argument(self) -> Size:
        """A command's argument: a braced group or one token."""
        if self.peek() == "{":
            self.take()
            return self.group("}")
        return self.atom() if self.peek() is not None else _ONE

    def atom(self) -> Size:
        token = self.peek()
        if token is None or not self.starts_atom(token) and token not in _OPEN:
            return _ONE
        self.take()
        if token in _OPEN:
            return self.group(_OPEN[token])
        if token[0] in "0123456789":
            return Size(_log10_number(token))
        if token in _FRAC:
            top, bottom = self.argument(), self.argument()
            return Size(max(top.log10, bottom.log10), top.letters or bottom.letters, top.terms)
        if token == "\\sqrt":
            if self.peek() == "[":
                self.take()
                self.group("]")
            inner = self.argument()
            return Size(inner.log10 / 2, inner.letters)
        if token in _BINOM:
            n, k = self.argument(), self.argument()
            if n.letters or k.letters:
                return Size(0.0, True)
            digits = _log10_binomial(_value(n), min(_value(k), _value(n)))
            if digits > MAX_BINOMIAL_DIGITS:
                raise TooCostly(
                    f"too large to evaluate: a binomial of {_say(digits)} digits (limit {MAX_BINOMIAL_DIGITS:,})"
                )
            return Size(digits)
        if self.peek() == "_":  # a subscript names a letter (x_1, \log_2)
            self.take()
            self.argument()
        return Size(0.0, True)


def _say(value: float) -> str:
    if not math.isfinite(value) or value >= 1e300:
        return "more than 10^300"
    return f"{value:,.0f}" if value < 1e7 else f"10^{math.log10(value):.0f}"


def _say_log(log10: float) -> str:
    return _say(10.0**log10 if log10 < 300 else math.inf)


def _surely_cheap(text: str) -> bool:
    """No power, factorial or binomial, and brackets no deeper than the limit: nothing to read (most outputs)."""
    if _RISKY.search(text):
        return False
    depth = deepest = 0
    for bracket in _BRACKETS.findall(text):
        depth = depth + 1 if bracket in _OPEN else max(depth - 1, 0)
        deepest = max(deepest, depth)
    return deepest <= MAX_DEPTH


def too_costly(text: str) -> str | None:
    """Why math-verify should not be given ``text`` (an expression too large to evaluate), or None."""
    if _surely_cheap(text):
        return None
    try:
        _Reader(text).read_all()
    except TooCostly as reason:
        return str(reason)
    return None
