"""A tiny hand-made vocabulary for unit tests: one character per token, '⁰'..'⁹' for space-marked digits and '@'
for a token that merges punctuation with a decimal point (like Llama's '*.')."""

from __future__ import annotations

import torch

from del_plugin.core import DigitVocab

SPACE_MARKED = "⁰¹²³⁴⁵⁶⁷⁸⁹"  # stands for '▁0'..'▁9'
DIGITS = "0123456789"
ALPHABET = " abcdefghijklmnopqrstuvwxyz,-$%=+*/:;" + "." + DIGITS + SPACE_MARKED + "@"
TOKEN_ID = {ch: i for i, ch in enumerate(ALPHABET)}
VOCAB = DigitVocab(
    family_token_ids=(tuple(TOKEN_ID[c] for c in DIGITS), tuple(TOKEN_ID[c] for c in SPACE_MARKED)),
    family_markers=("", "▁"),
    decimal_point_id=TOKEN_ID["."],
    leading_point_ids=(TOKEN_ID["@"],),
    name="fake",
)
V = len(ALPHABET)


def encode(text: str, masked: str = "") -> torch.Tensor:
    """Token ids of ``text``; characters at positions where ``masked`` has '#' become -100."""
    ids = [TOKEN_ID[c] for c in text]
    for i, m in enumerate(masked):
        if m == "#":
            ids[i] = -100
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------------------------------------- number tokens
# A multi-digit variant of VOCAB, for tokenizers that cut numbers into chunks of 1-3 digits (Llama-3's '123'): the
# single characters of ALPHABET keep their ids, then every 2- and 3-digit string ('00'..'999') and its space-marked
# form, written with the marked first digit ('⁴56' stands for '▁456').
def _number_strings(digits: int, marked: bool) -> list[str]:
    strings = [str(v).zfill(digits) for v in range(10**digits)]
    return [SPACE_MARKED[int(s[0])] + s[1:] for s in strings] if marked else strings


MULTI_TOKENS: tuple[str, ...] = tuple(ALPHABET) + tuple(
    s for marked in (False, True) for digits in (2, 3) for s in _number_strings(digits, marked)
)
MULTI_V = len(MULTI_TOKENS)


def multi_digit_vocab(order: list[int] | None = None) -> tuple[DigitVocab, dict[str, int]]:
    """(vocabulary, token string -> id) of MULTI_TOKENS; ``order[k]`` is the id of ``MULTI_TOKENS[k]`` (a
    permutation of ``range(MULTI_V)``; identity when None)."""
    order = list(range(MULTI_V)) if order is None else order
    token_id = {s: order[k] for k, s in enumerate(MULTI_TOKENS)}
    groups = [(marked, digits) for marked in (False, True) for digits in (2, 3)]
    vocab = DigitVocab(
        family_token_ids=(tuple(token_id[c] for c in DIGITS), tuple(token_id[c] for c in SPACE_MARKED)),
        family_markers=("", "▁"),
        decimal_point_id=token_id["."],
        leading_point_ids=(token_id["@"],),
        name="fake-multi",
        number_token_ids=tuple(tuple(token_id[s] for s in _number_strings(d, m)) for m, d in groups),
        number_families=tuple(int(m) for m, _ in groups),
    )
    return vocab, token_id


MULTI_VOCAB, MULTI_TOKEN_ID = multi_digit_vocab()


def encode_tokens(tokens: list[str], token_id: dict[str, int] = MULTI_TOKEN_ID) -> torch.Tensor:
    """Token ids of a list of MULTI_TOKENS strings; '#' becomes -100."""
    return torch.tensor([-100 if t == "#" else token_id[t] for t in tokens], dtype=torch.long)
