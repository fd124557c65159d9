"""The oracle of ``number_places`` that reads a string of the fake vocabulary's characters
(tests/helpers/fake_vocab.py) one by one, as a person reads numbers: :func:`oracle_places`. The previous
implementation, the other oracle, is bench/oracles.py (bench/places_paths.py times it too)."""

from __future__ import annotations

from fake_vocab import DIGITS, SPACE_MARKED


def oracle_places(text: str, starts: set[int]) -> list:
    """Character by character, the way a person reads numbers; ``starts`` are packed-sequence starts."""
    out: list = [None] * len(text)
    numbers: list[list[int]] = []
    current: list[int] | None = None
    has_point = False

    def is_digit(i: int) -> bool:
        return i < len(text) and text[i] in DIGITS + SPACE_MARKED

    for i, ch in enumerate(text):
        fresh = i == 0 or i in starts
        if ch in DIGITS + SPACE_MARKED:
            if current is None or fresh or ch in SPACE_MARKED:
                current = [i]
                numbers.append(current)
                has_point = False
            else:
                current.append(i)
        elif ch in ".@" and is_digit(i + 1) and text[i + 1] in DIGITS and (i + 1) not in starts:
            if current is None or fresh or has_point or ch == "@":
                current = [i]
                numbers.append(current)
            else:
                current.append(i)
            has_point = True
        else:
            current = None
    for number in numbers:
        chars = [text[i] for i in number]
        points = [k for k, ch in enumerate(chars) if ch in ".@"]
        point = points[0] if points else len(chars)
        for k, i in enumerate(number):
            if k < point:
                out[i] = sum(1 for j in range(k + 1, point))  # digits to its right in the integer part
            elif k > point:
                out[i] = -(k - point)
    return out
