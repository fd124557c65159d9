"""MATH answers: the last ``\\boxed{...}`` of a text, and the LaTeX normaliser both the reference and the model's
answer go through before they are compared as strings.

The normaliser follows the rules of the paper's harness (MAmmoTH's ``math_eval``, the MATH authors' own), written
here from those rules, one small function each, applied in this order:

1. line breaks, ``\\!`` thin spaces, ``\\left`` and ``\\right`` go; ``\\\\`` becomes ``\\``; ``\\dfrac`` and
   ``\\tfrac`` become ``\\frac``; degree marks (``^\\circ``, ``^{\\circ}``) go;
2. dollar signs go (``$`` around the answer, ``\\$`` anywhere);
3. a unit written as text on the right goes: everything from ``\\text{ `` (a text that starts with a space, as
   in ``5\\text{ cm}``);
4. percent signs go (``\\%``, ``%``);
5. a bare leading decimal point gets its zero (``.5`` -> ``0.5``, also after a space or ``{``);
6. a short left-hand side goes: ``x = 5`` -> ``5`` (one ``=`` and at most two characters before it);
7. ``\\sqrt3`` and ``\\sqrt 3`` -> ``\\sqrt{3}`` (an unbraced one-character radicand);
8. every space goes;
9. ``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{72}`` -> ``\\frac{1}{72}`` (unbraced one-character arguments);
10. ``a/b`` of two integers and nothing else -> ``\\frac{a}{b}``.

:func:`same_math_answer` then compares the two normal forms case-insensitively, after unwrapping ``\\text{...}``
(``\\text{(B)}`` is ``(B)``). No algebra: ``0.5`` and ``\\frac{1}{2}`` differ, as they do in the paper's harness.
"""

from __future__ import annotations

import re

__all__ = ["last_boxed", "normalize_math_answer", "same_math_answer"]

_UNBRACED_SQRT = re.compile(r"\\sqrt\s*([^{\\\s])")
_INTEGER_FRACTION = re.compile(r"(-?\d+)/(\d+)")
_TEXT_OPEN = "\\text{"
_BRACES = re.compile(r"\\text\{|[{}]")


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """The content of the brace group opening at ``text[start] == "{"`` and the index after its closing brace,
    or None when it never closes."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


def last_boxed(text: str, limit: int | None = None) -> str | None:
    """The content of the last ``\\boxed{...}`` in ``text`` (braces matched), or of ``\\boxed 5`` up to the next
    ``$``; None when there is none (or the last one never closes its brace, within ``limit`` characters when
    given)."""
    last = text.rfind("\\boxed")
    if last < 0:
        return None
    rest = text[last + len("\\boxed") :]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        group = _braced(stripped if limit is None else stripped[: limit + 2], 0)
        return None if group is None else group[0]
    return stripped.split("$", 1)[0].strip()


def _fix_fracs(text: str) -> str:
    """Braces around unbraced one-character arguments of ``\\frac`` (``\\frac12``, ``\\frac1{72}``, ``\\frac{1}2``)."""
    parts = text.split("\\frac")
    out = [parts[0]]  # joined once at the end: linear in the text, however many \frac it holds
    for part in parts[1:]:
        out.append("\\frac")
        if part.startswith("{"):
            group = _braced(part, 0)
            if group is None:
                out.append(part)
                continue
            numerator, end = group
            rest = part[end:]
            if rest and rest[0] not in "{\\ ":
                out += ["{", numerator, "}{", rest[0], "}", rest[1:]]
            else:
                out.append(part)
            continue
        if len(part) < 2:
            return text  # `\frac` with too little after it: leave the text as it was
        numerator, rest = part[0], part[1:]
        if rest[0] == "{":
            out += ["{", numerator, "}", rest]
        else:
            out += ["{", numerator, "}{", rest[0], "}", rest[1:]]
    return "".join(out)


def normalize_math_answer(answer: str) -> str:
    """The normal form of a MATH answer (see the module docs for the rules, in order)."""
    text = answer.replace("\n", "").replace("\\!", "").replace("\\\\", "\\")
    text = text.replace("tfrac", "frac").replace("dfrac", "frac")
    text = text.replace("\\left", "").replace("\\right", "")
    text = text.replace("^{\\circ}", "").replace("^\\circ", "")
    text = text.strip("$").replace("\\$", "")
    text = text.split("\\text{ ")[0]
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if text.startswith("."):
        text = "0" + text
    if text.count("=") == 1 and len(text.split("=")[0]) <= 2:
        text = text.split("=")[1]
    text = _UNBRACED_SQRT.sub(r"\\sqrt{\1}", text)
    text = text.replace(" ", "")
    text = _fix_fracs(text)
    whole = _INTEGER_FRACTION.fullmatch(text)
    if whole is not None:
        text = "\\frac{" + whole[1] + "}{" + whole[2] + "}"
    return text


def _unwrap_text(text: str) -> str:
    """``text`` with every ``\\text{...}`` unwrapped whose content holds no brace once the ``\\text{...}`` inside
    it are unwrapped (``\\text{\\text{(B)}}`` is ``(B)``; ``\\text{a{b}}`` stays), in one pass with a stack of
    open braces: linear in the text, however deep the nesting (unwrapping one level per pass was quadratic)."""
    if _TEXT_OPEN not in text:
        return text
    dropped = []  # (start, end) of each unwrapped `\text{` and of its closing brace
    stack: list[list] = []  # [start of `\text{` (None: a plain brace), whether a brace stays inside]
    for token in _BRACES.finditer(text):
        if token[0] == "}":
            if not stack:
                continue
            start, braced = stack.pop()
            if start is not None and not braced:
                dropped += [(start, start + len(_TEXT_OPEN)), (token.start(), token.end())]
            elif stack:  # a brace that stays: the \text{...} around it stays too
                stack[-1][1] = True
        else:
            stack.append([token.start() if token[0] == _TEXT_OPEN else None, False])
    dropped.sort()
    kept, at = [], 0
    for start, end in dropped:
        kept.append(text[at:start])
        at = end
    kept.append(text[at:])
    return "".join(kept)


def _comparable(normal_form: str) -> str:
    return _unwrap_text(normal_form).lower()


def same_math_answer(prediction: str, reference: str) -> bool:
    """Whether two *normalised* MATH answers are the same (case-insensitive, ``\\text{...}`` unwrapped)."""
    return _comparable(prediction) == _comparable(reference)
