"""Number places and place weights, against hand-worked values and a slow per-character oracle."""

from __future__ import annotations

import math

import pytest
import torch
from fake_vocab import DIGITS, SPACE_MARKED, VOCAB, encode
from hypothesis import given, settings
from hypothesis import strategies as st

from del_plugin.core import PlaceWeighting, number_places

from del_plugin.core.places import NOT_A_DIGIT, place_weights

N = None  # "not a digit" in the expected lists below


def places_of(text: str, masked: str = "", position_ids=None) -> list:
    places = number_places(encode(text, masked), VOCAB, position_ids)
    return [None if p == NOT_A_DIGIT else int(p) for p in places]


def test_pi_places_and_weights():
    assert places_of("3.14159") == [0, N, -1, -2, -3, -4, -5]
    weights = place_weights(number_places(encode("3.14159"), VOCAB))
    expected = [2, 0, 1.02**-2, 1.02**-3, 1.02**-4, 1.02**-5, 1.02**-6]
    assert weights.tolist() == pytest.approx(expected, rel=1e-6)
    # rounded to four places, worked out by hand: 1.02**-2 = 0.9612, 1.02**-6 = 0.8880
    assert [round(w, 4) for w in weights.tolist()] == [2, 0, 0.9612, 0.9423, 0.9238, 0.9057, 0.8880]


def test_integer_places_and_weights():
    assert places_of("12345") == [4, 3, 2, 1, 0]
    assert place_weights(number_places(encode("12345"), VOCAB)).tolist() == [10, 8, 6, 4, 2]


@pytest.mark.parametrize(
    "text, expected",
    [
        (".5", [N, -1]),  # a leading '.' followed by a digit is the decimal point
        ("5.", [0, N]),  # a '.' that ends a sentence is not part of the number
        ("5. 3", [0, N, N, 0]),
        ("1.2.3", [0, N, -1, N, -1]),  # 1.2 then .3
        ("1.2.3.45", [0, N, -1, N, -1, N, -1, -2]),
        ("10.", [1, 0, N]),
        ("a.5", [N, N, -1]),
        ("..5", [N, N, -1]),
        ("-1,234", [N, 0, N, 2, 1, 0]),  # signs and commas are not part of numbers
        ("$12.50", [N, 1, 0, N, -1, -2]),
        ("x 7 y", [N, N, 0, N, N]),
        ("", []),
        ("abc", [N, N, N]),
    ],
)
def test_run_rules(text, expected):
    assert places_of(text) == expected


def test_masked_positions_split_numbers():
    # '#' marks -100: the prompt part of "123" is masked, so the visible "23" is its own number
    assert places_of("123+45", masked="#") == [N, 1, 0, N, 1, 0]
    assert places_of("12345", masked="  #") == [1, 0, N, 1, 0]
    assert places_of("1.5", masked=" #") == [0, N, 0]


def test_space_marked_digit_starts_a_new_number():
    # '⁴' is '▁4': "12 45" tokenised as '1','2','▁4','5'
    assert places_of("12⁴5") == [1, 0, 1, 0]
    assert places_of("⁴5.25") == [1, 0, N, -1, -2]
    # a '.' followed by a space-marked digit is not a decimal point
    assert places_of("5.⁴") == [0, N, 0]


def test_leading_point_token_opens_a_decimal():
    # '@' is a merged token like Llama's '*.': "18*.5" is 18 then .5, never 18.5
    assert places_of("18@5") == [1, 0, N, -1]
    assert places_of("@25") == [N, -1, -2]
    assert places_of("5@") == [0, N]
    assert places_of("5@⁴") == [0, N, 0]
    assert places_of("1.5@5") == [0, N, -1, N, -1]


def test_packed_boundary_splits_numbers():
    # two packed sequences "123" and "45": position ids restart at 0
    position_ids = torch.tensor([0, 1, 2, 0, 1])
    assert places_of("12345", position_ids=position_ids) == [2, 1, 0, 1, 0]
    # a '.' at the end of the first sequence is not the decimal point of the second
    assert places_of("12.45", position_ids=torch.tensor([0, 1, 2, 0, 1])) == [1, 0, N, 1, 0]


def test_batch_rows_are_independent():
    labels = torch.stack([encode("12345"), encode("67890")])
    places = number_places(labels, VOCAB)
    assert places.tolist() == [[4, 3, 2, 1, 0], [4, 3, 2, 1, 0]]
    assert places.dtype == torch.int32


def test_ids_outside_vocab_and_ignore_index_are_not_digits():
    labels = torch.tensor([-100, 10_000_000, VOCAB.family_token_ids[0][3]])
    assert number_places(labels, VOCAB).tolist() == [NOT_A_DIGIT, NOT_A_DIGIT, 0]


def test_weighting_switch_and_parameters():
    places = number_places(encode("12.5"), VOCAB)
    assert place_weights(places, PlaceWeighting(enabled=False)).tolist() == [1, 1, 0, 1]
    custom = place_weights(places, PlaceWeighting(integer_slope=3.0, decimal_base=2.0))
    assert custom.tolist() == [6, 3, 0, 0.25]
    with pytest.raises(ValueError, match="integer_slope"):
        PlaceWeighting(integer_slope=0)


# ----------------------------------------------------------------------------------------------- oracle
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


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(list("0123456789.. a,-⁴⁰@") + ["12", "3.5", "0.25", "*@5"]), max_size=30).map("".join),
    st.lists(st.integers(min_value=1, max_value=40), max_size=4),
    st.booleans(),
)
def test_matches_slow_oracle(text, cut_points, packed):
    starts = {c for c in cut_points if c < len(text)} if packed else set()
    position_ids = None
    if packed:
        pos, p = [], 0
        for i in range(len(text)):
            p = 0 if i in starts else p
            pos.append(p)
            p += 1
        position_ids = torch.tensor(pos, dtype=torch.long)
    if not text:
        return
    assert places_of(text, position_ids=position_ids) == oracle_places(text, starts)


def test_oracle_agrees_with_hand_examples():
    assert oracle_places("3.14159", set()) == [0, None, -1, -2, -3, -4, -5]
    assert oracle_places("1.2.3", set()) == [0, None, -1, None, -1]
    assert math.isclose(1.02**-2, 0.96117, rel_tol=1e-4)
