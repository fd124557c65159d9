"""Reading a tokenizer's digits: which tokens are the digits '0'..'9' (bare and space-marked), how the tokenizer
cuts numbers (its own output on probe texts), its m-digit number tokens, and the errors that refuse a tokenizer
DEL cannot read. :meth:`~del_plugin.core.vocab.DigitVocab.from_tokenizer` builds its vocabulary from what
:func:`read_digit_tokens` finds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "DIGIT_PROBE_TEXT",
    "LENGTH_PROBE_TEXT",
    "MAX_TOKEN_DIGITS",
    "SPACE_MARKERS",
    "DigitVocabError",
    "MultiDigitTokenizerError",
    "NoDigitTokensError",
    "read_digit_tokens",
    "strip_marker",
]

# Word-start markers that tokenizers glue onto a token: SentencePiece '▁', byte-level BPE 'Ġ', and a plain space.
SPACE_MARKERS: tuple[str, ...] = ("▁", "Ġ", " ")

# Numbers in the shapes fine-tuning data has (years, money, decimals, thousands separators, a leading '.'):
# a tokenizer that splits all of them into single digits splits numbers into digits.
DIGIT_PROBE_TEXT = "In 2024 she paid $1,234.50 for 12345678 items: 3.14159 each, .5 less than 90, i.e. 0.001%."
# Runs of 1 to 12 digits, after a space and after a letter: how long the number tokens a tokenizer cuts can be;
# then digits before letters (ordinals, versions), which a tokenizer might glue into one token.
LENGTH_PROBE_TEXT = " ".join(f"{'314159265358'[:n]} x{'271828182845'[:n]}" for n in range(1, 13)) + (
    " the 21st, 42nd and 2024th time; x86 or v12"
)

# The longest number tokens DEL reads: a slot of an m-digit token is a marginal over 10**m token logits.
MAX_TOKEN_DIGITS = 3

_ASCII_DIGITS = frozenset("0123456789")
_SINGLE_DIGIT_TOKENIZERS = "(Llama-2/CodeLlama, Mistral incl. Tekken, Qwen2/2.5/3/3.5, Gemma-3, Phi-3, DeepSeek LLM)"


class DigitVocabError(ValueError):
    """The tokenizer cannot be used with DEL."""


class NoDigitTokensError(DigitVocabError):
    """The tokenizer lacks one of the single-character tokens '0'..'9'."""


class MultiDigitTokenizerError(DigitVocabError):
    """The tokenizer merges digits into tokens DEL cannot read: an incomplete set of m-digit tokens, digits merged
    with other characters, or numbers longer than :data:`MAX_TOKEN_DIGITS` digits per token."""


def strip_marker(token: str) -> tuple[str, str]:
    """``(space marker, the rest)`` of a token: ``('Ġ', '12')`` for 'Ġ12', ``('', '12')`` for '12'."""
    for marker in SPACE_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return marker, token[len(marker) :]
    return "", token


def read_digit_tokens(tokenizer: Any, name: str) -> dict[str, Any]:
    """The fields of a :class:`~del_plugin.core.vocab.DigitVocab` read from a Hugging Face tokenizer (slow or
    fast) named ``name`` in messages: its digit families, decimal points and number tokens
    (:meth:`~del_plugin.core.vocab.DigitVocab.from_tokenizer` says which)."""
    vocab: Mapping[str, int] = tokenizer.get_vocab()
    lengths = _number_token_lengths(tokenizer, name)
    families, markers = _digit_families(vocab, name)
    number_ids, number_families = _number_groups(vocab, lengths, markers, name)
    return {
        "family_token_ids": families,
        "family_markers": markers,
        "decimal_point_id": vocab.get("."),
        "leading_point_ids": tuple(sorted(i for tok, i in vocab.items() if _is_leading_point(tok))),
        "name": name,
        "number_token_ids": number_ids,
        "number_families": number_families,
    }


def _digit_families(vocab: Mapping[str, int], name: str) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """The ids of '0'..'9' per space marker with a complete set (the bare digits first), and those markers."""
    families: list[tuple[int, ...]] = []
    markers: list[str] = []
    for marker in ("",) + SPACE_MARKERS:
        ids = [vocab.get(marker + str(d)) for d in range(10)]
        if all(i is not None for i in ids):
            families.append(tuple(int(i) for i in ids))
            markers.append(marker)
        elif marker == "":
            missing = [str(d) for d, i in zip(range(10), ids) if i is None]
            raise NoDigitTokensError(
                f"{name}: DEL needs a token for each digit 0-9, but {', '.join(repr(m) for m in missing)} "
                f"have none. Use a tokenizer that splits numbers into single digits {_SINGLE_DIGIT_TOKENIZERS} or "
                "into complete chunks of 1-3 digits (Llama-3, gpt-oss, Phi-4, OLMo-2, DeepSeek-V3)."
            )
    return tuple(families), tuple(markers)


def _number_groups(
    vocab: Mapping[str, int], lengths: dict[str, int], markers: Sequence[str], name: str
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """The ids of every m-digit string ('00'..'99', '000'..'999') per space marker and length m >= 2 the tokenizer
    cuts numbers into (``lengths``: the longest per marker), in value order, and the family of each group."""
    number_ids: list[tuple[int, ...]] = []
    number_families: list[int] = []
    for marker, longest in sorted(lengths.items()):
        if marker not in markers:
            raise MultiDigitTokenizerError(
                f"{name} cuts numbers into {marker!r}-marked tokens of up to {longest} digits, but has no "
                f"complete set of {marker!r}-marked single digits to read them with"
            )
        for digits in range(2, longest + 1):
            strings = [marker + str(v).zfill(digits) for v in range(10**digits)]
            missing = [t for t in strings if t not in vocab]
            if missing:
                raise MultiDigitTokenizerError(
                    f"{name} merges digits into multi-digit tokens of up to {longest} digits, but its "
                    f"vocabulary lacks {len(missing)} of the {10**digits} {digits}-digit strings (e.g. "
                    f"{', '.join(repr(t) for t in missing[:5])}), so the digits of a {digits}-digit token have "
                    "no ten-way distribution for DEL to act on. Use a tokenizer that splits numbers into single "
                    "digits or into complete chunks of 1-3 digits (Llama-3, gpt-oss, Phi-4, OLMo-2), or remove "
                    "del_plugin.DELPlugin from `plugins`."
                )
            number_ids.append(tuple(int(vocab[t]) for t in strings))
            number_families.append(markers.index(marker))
    return tuple(number_ids), tuple(number_families)


def _is_leading_point(token: str) -> bool:
    """'*.', '(.', '▁.', '=.': punctuation (or a space marker) then one final '.', so that "18*.5" keeps its '.5'."""
    marker, body = strip_marker(token)
    if not body.endswith(".") or (len(body) < 2 and not marker):
        return False
    # byte-level markers such as 'Ġ' are letters to str.isalnum, so judge the token without its marker
    return not any(ch.isalnum() or ch == "." for ch in body[:-1])


def _number_token_lengths(tokenizer: Any, name: str) -> dict[str, int]:
    """The longest number token per space marker in the tokenizer's output on the probe texts, for markers whose
    number tokens hold 2 digits or more (empty for single-digit tokenizers). Refuses a tokenizer that merges digits
    with other characters ('2024th', '$12') or cuts numbers longer than :data:`MAX_TOKEN_DIGITS` digits."""
    longest: dict[str, int] = {}
    mixed: list[str] = []
    too_long: list[str] = []
    for text in (DIGIT_PROBE_TEXT, LENGTH_PROBE_TEXT):
        ids: Sequence[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
        for tok in tokenizer.convert_ids_to_tokens(list(ids)):
            marker, body = strip_marker(tok)
            digits = sum(ch in _ASCII_DIGITS for ch in body)
            if digits < 2:
                continue
            if digits != len(body):
                if tok not in mixed:
                    mixed.append(tok)
                continue
            longest[marker] = max(longest.get(marker, 0), digits)
            if digits > MAX_TOKEN_DIGITS and tok not in too_long:
                too_long.append(tok)
    if mixed or too_long:
        if mixed:
            why = f"merges digits with other characters into tokens (e.g. {', '.join(repr(t) for t in mixed[:5])})"
        else:
            why = (
                f"merges digits into multi-digit tokens of up to {max(longest.values())} digits (e.g. "
                f"{', '.join(repr(t) for t in too_long[:5])}; DEL reads number tokens of up to {MAX_TOKEN_DIGITS})"
            )
        raise MultiDigitTokenizerError(
            f"{name} {why} in its probe texts, so those digits have no ten-way distribution for DEL to act on. Use "
            f"a tokenizer that splits numbers into single digits {_SINGLE_DIGIT_TOKENIZERS} or into complete chunks "
            "of 1-3 digits (Llama-3, gpt-oss, Phi-4, OLMo-2), or remove del_plugin.DELPlugin from `plugins`."
        )
    return longest
