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
