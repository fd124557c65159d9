"""The oracle of number tokens of 1-3 digits (Llama-3 cuts "12345678" into '123', '456', '78'), written from the
definition rather than from the production code: a token stands for its characters, which are read digit by digit
with the single-digit rules (bench/oracles.py, tests/helpers/places_oracle.py); and each digit slot's criterion term
from ten logsumexps over token lists built from the token strings (``oracle_terms``). tests/core/test_multi_digit.py
checks the plugin against it."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from bench.oracles import oracle_number_places
from del_plugin.core import DigitVocab, PlaceWeighting
from del_plugin.core.places import NOT_A_DIGIT
from tools.assets import load_tokenizer

from fake_vocab import DIGITS, VOCAB, encode
from places_oracle import oracle_places

N = NOT_A_DIGIT


# ---------------------------------------------------------------------------------------------- places
def is_leading_point(token: str) -> bool:
    """A token that merges punctuation (or a space marker) with a final decimal point: 'Ġ.', '*.', '(.', 'Ġ$.'."""
    body = token[1:] if token[:1] in ("Ġ", "▁") and len(token) > 1 else token
    if token == "." or not body.endswith("."):
        return False
    return all(not ch.isalnum() and ch != "." for ch in body[:-1])


def token_chars(token: str | None, leading_point=is_leading_point, marked: str = "") -> list[str]:
    """The characters a token stands for, in the alphabet of ``oracle_places``: a number token of m ASCII digits
    gives its m digits (a first digit among ``marked``, the fake vocabulary's '⁴56', stays space-marked: it starts a
    number), '.' a point, a leading-point token '@', anything else (-100 and padding included: ``None``) one
    non-digit."""
    if token is None:
        return ["a"]
    if 1 <= len(token) <= 3 and token[0] in DIGITS + marked and all(ch in DIGITS for ch in token[1:]):
        return list(token)
    if token == ".":
        return ["."]
    if leading_point(token):
        return ["@"]
    return ["a"]


def oracle_row(
    tokens: list[str | None], positions: list[int] | None, slots: int, leading_point=is_leading_point, marked=""
):
    """``[T][slots]`` places of one row of tokens (token strings, ``None`` for -100), read per character."""
    chars: list[str] = []
    owner: list[tuple[int, int]] = []
    starts: set[int] = set()  # packed-sequence starts, in characters
    char_positions: list[int] = []  # the same boundaries as position ids of the characters
    for t, token in enumerate(tokens):
        boundary = positions is not None and t > 0 and positions[t] != positions[t - 1] + 1
        if boundary:
            starts.add(len(chars))
        for j, ch in enumerate(token_chars(token, leading_point, marked)):
            if char_positions:
                char_positions.append(char_positions[-1] + (2 if boundary and j == 0 else 1))
            else:
                char_positions.append(0)
            chars.append(ch)
            owner.append((t, j))
    text = "".join(chars)
    per_char = oracle_places(text, starts)
    # the trusted old code on the same characters, as single-digit tokens of tests/helpers/fake_vocab.py's VOCAB
    old = oracle_number_places(encode(text), VOCAB, torch.tensor(char_positions) if positions is not None else None)
    assert [N if p is None else p for p in per_char] == old.tolist(), text
    out = [[N] * slots for _ in tokens]
    for (t, j), place in zip(owner, per_char):
        if place is not None:
            assert j < slots
            out[t][j] = place
    return out


def oracle_batch(rows: list[list[str | None]], position_ids: torch.Tensor | None, slots: int, **kw) -> list:
    return [
        oracle_row(tokens, None if position_ids is None else position_ids[b].tolist(), slots, **kw)
        for b, tokens in enumerate(rows)
    ]


def shifted(places: list, shift_labels: torch.Tensor | None, slots: int) -> list:
    """The oracle's next-token places: row ``[t]`` is the places of label ``t + 1``; masked targets have none."""
    out = [row[1:] + [[N] * slots] if row else [] for row in places]
    if shift_labels is not None:
        for b, row in enumerate(out):
            for t, mask in enumerate(shift_labels[b].tolist()):
                if mask == -100:
                    row[t] = [N] * slots
    return out


# ---------------------------------------------------------------------------------------------- Llama-3
@functools.cache
def llama3():
    """(tokenizer, DigitVocab, token string of every id) of the real Llama-3 tokenizer."""
    tok = load_tokenizer("llama-bpe")
    vocab = DigitVocab.from_tokenizer(tok, name="llama-bpe")
    strings = tok.convert_ids_to_tokens(list(range(len(tok))))
    return tok, vocab, strings


def strings_of(labels: torch.Tensor, strings: list[str]) -> list[list[str | None]]:
    return [[strings[i] if 0 <= i < len(strings) else None for i in row] for row in labels.tolist()]


# ---------------------------------------------------------------------------------------------- losses
@functools.cache
def slot_token_lists(m: int, tokenizer: str = "llama-bpe") -> tuple[tuple[tuple[int, ...], ...], ...]:
    """``[j][v]``: the ids of the m-digit tokens whose j-th digit is v, from the token strings."""
    index = (llama3()[0] if tokenizer == "llama-bpe" else load_tokenizer(tokenizer)).get_vocab()
    strings = [str(x).zfill(m) for x in range(10**m)]
    return tuple(tuple(tuple(index[s] for s in strings if s[j] == str(v)) for v in range(10)) for j in range(m))


def is_number_token(s: str | None) -> bool:
    return s is not None and 1 <= len(s) <= 3 and all(ch in DIGITS for ch in s)


def oracle_u(place: int, weighting: PlaceWeighting) -> float:
    if not weighting.enabled:
        return 1.0
    return weighting.integer_slope * (place + 1) if place >= 0 else weighting.decimal_base ** (place - 1)


def oracle_dist2_weight(place: int, decimals: int, enabled: bool) -> float:
    """DIST2's weight: i + 1 for an integer digit, D - k + 1 for decimal -k of a number with D decimals."""
    if not enabled:
        return 1.0
    return place + 1 if place >= 0 else decimals + place + 1


def bce(x: torch.Tensor, target: float) -> torch.Tensor:
    """binary_cross_entropy_with_logits, written out: -(y log sigmoid(x) + (1 - y) log sigmoid(-x))."""
    return -(target * F.logsigmoid(x) + (1 - target) * F.logsigmoid(-x))


def oracle_term(criterion: str, z: torch.Tensor, y: int, place: int, decimals: int, weighting, tau=1.0):
    """One slot's term from its ten logits ``z``, its digit ``y`` and its place."""
    log_p = z - torch.logsumexp(z, 0)
    p = torch.exp(log_p)
    k = torch.arange(10, dtype=z.dtype)
    onehot = [1.0 if v == y else 0.0 for v in range(10)]
    distance = (p * (k - y).abs()).sum()
    if criterion == "ntl_was":
        return distance
    if criterion == "ntl_mse":
        return ((p * k).sum() - y) ** 2
    if criterion == "dist2":
        log_q = torch.log_softmax(-((k - y) ** 2) / tau, 0)
        kl = (torch.exp(log_q) * (log_q - log_p)).sum()
        return oracle_dist2_weight(place, decimals, weighting.enabled) * kl
    x = z - z.mean() if criterion == "del_centered" else z
    entropy_weighted = sum(p[v] * bce(x[v], onehot[v]) for v in range(10)) / 10
    term = oracle_u(place, weighting) * entropy_weighted
    return term * distance if criterion == "del_dist" else term


def decimals_of(row_places: list[list[int]], t: int, j: int) -> int:
    """D of the number that slot (t, j) is a decimal of: follow the places -1, -2, ... through the following
    characters (slots of this token, then of the next ones) as far as they continue."""
    flat = [(tt, jj) for tt in range(len(row_places)) for jj in range(len(row_places[tt])) if row_places[tt][jj] != N]
    k = flat.index((t, j))
    lowest = row_places[t][j]
    while k + 1 < len(flat) and row_places[flat[k + 1][0]][flat[k + 1][1]] == lowest - 1:
        k += 1
        lowest -= 1
    return -lowest


def oracle_terms(criterion, logits, labels, weighting, strings, tau=1.0, tokenizer="llama-bpe"):
    """{(b, t, j): term} for every digit slot of the targets labels[:, t + 1], with the autograd graph."""
    batch, length = labels.shape
    rows = logits.reshape(batch * length, -1).unbind(0)
    places = oracle_batch(strings_of(labels, strings), None, 3)
    out = {}
    for b in range(batch):
        for t in range(length - 1):
            target = labels[b, t + 1].item()
            s = strings[target] if target >= 0 else None
            if not is_number_token(s):
                continue
            lists = slot_token_lists(len(s), tokenizer)
            for j, ch in enumerate(s):
                row = rows[b * length + t]
                z = torch.stack([torch.logsumexp(row[torch.tensor(lists[j][v])], 0) for v in range(10)])
                place = places[b][t + 1][j]
                assert place != N
                decimals = decimals_of(places[b], t + 1, j) if place < 0 else 0
                out[b, t, j] = oracle_term(criterion, z, int(ch), place, decimals, weighting, tau)
    return out
