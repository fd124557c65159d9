"""Which token ids are digits: the ten digit tokens, their space-marked variants, and the decimal point.

DEL needs every digit to be its own token. SentencePiece tokenizers with ``split_digits`` (Llama-2, CodeLlama,
Mistral) and byte-level BPE tokenizers that pre-split ``\\p{N}`` (Qwen2, DeepSeek) qualify; tokenizers that merge
digits into multi-digit tokens (Llama-3, GPT-2) are refused, because the ten-way digit distribution DEL
regularises does not exist for them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

__all__ = [
    "DIGIT_PROBE_TEXT",
    "SPACE_MARKERS",
    "DigitVocab",
    "DigitVocabError",
    "MultiDigitTokenizerError",
    "NoDigitTokensError",
]

# Word-start markers that tokenizers glue onto a token: SentencePiece '▁', byte-level BPE 'Ġ', and a plain space.
SPACE_MARKERS: tuple[str, ...] = ("▁", "Ġ", " ")

# Bits of DigitVocab.kind_table: a digit token, a decimal-point token, a token that can only start a number.
KIND_DIGIT = 1
KIND_POINT = 2
KIND_FRESH = 4

# Numbers in the shapes fine-tuning data has (years, money, decimals, thousands separators, a leading '.'):
# a tokenizer that splits all of them into single digits splits numbers into digits.
DIGIT_PROBE_TEXT = "In 2024 she paid $1,234.50 for 12345678 items: 3.14159 each, .5 less than 90, i.e. 0.001%."


class DigitVocabError(ValueError):
    """The tokenizer cannot be used with DEL."""


class NoDigitTokensError(DigitVocabError):
    """The tokenizer lacks one of the single-character tokens '0'..'9'."""


class MultiDigitTokenizerError(DigitVocabError):
    """The tokenizer merges several digits into one token."""


def _strip_marker(token: str) -> tuple[str, str]:
    for marker in SPACE_MARKERS:
        if token.startswith(marker) and len(token) > len(marker):
            return marker, token[len(marker) :]
    return "", token


@dataclass(frozen=True)
class DigitVocab:
    """The digit tokens of one tokenizer, grouped in families of ten.

    ``family_token_ids[f][d]`` is the id of digit ``d`` in family ``f``. Family 0 holds the bare digits; further
    families hold complete sets of space-marked digits ('▁7', 'Ġ7'). A digit target competes only against the
    ten tokens of its own family, so a model predicting '▁7' is scored among '▁0'..'▁9'.

    ``leading_point_ids`` are tokens in which punctuation is merged with a decimal point, such as '*.' or '▁.'
    (Llama-2 tokenises "18*.5" as '1', '8', '*.', '5'): followed by a digit they start a number '.5'.
    """

    family_token_ids: tuple[tuple[int, ...], ...]
    family_markers: tuple[str, ...] = ("",)
    decimal_point_id: int | None = None
    leading_point_ids: tuple[int, ...] = ()
    name: str = "tokenizer"
    _device_tables: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.family_token_ids:
            raise NoDigitTokensError(f"{self.name}: no digit family given")
        for ids in self.family_token_ids:
            if len(ids) != 10:
                raise NoDigitTokensError(f"{self.name}: a digit family needs 10 token ids, got {len(ids)}")
        flat = [i for ids in self.family_token_ids for i in ids]
        if len(set(flat)) != len(flat):
            raise DigitVocabError(f"{self.name}: a token id appears twice among the digit tokens: {flat}")
        markers = self.family_markers
        if len(markers) != len(self.family_token_ids) or markers[0] != "" or "" in markers[1:]:
            raise DigitVocabError(
                f"{self.name}: family_markers must be '' for family 0 (bare digits) and a space marker for "
                f"each further family, got {markers!r}"
            )
        points = ([self.decimal_point_id] if self.decimal_point_id is not None else []) + list(self.leading_point_ids)
        if set(points) & set(flat) or len(set(points)) != len(points):
            raise DigitVocabError(f"{self.name}: decimal point ids {points} overlap each other or the digits")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_tokenizer(cls, tokenizer: Any, name: str | None = None) -> DigitVocab:
        """Read the digit tokens from a Hugging Face tokenizer (slow or fast).

        Raises ``NoDigitTokensError`` when a bare digit '0'..'9' has no token of its own and
        ``MultiDigitTokenizerError`` when the tokenizer turns numbers into multi-digit tokens.
        """
        name = name or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__
        vocab: Mapping[str, int] = tokenizer.get_vocab()
        _refuse_multi_digit_tokenization(tokenizer, name)
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
                    "have none. Use a tokenizer that splits numbers into single digits "
                    "(Llama-2/CodeLlama, Mistral incl. Tekken, Qwen2/2.5/3/3.5, Gemma-3, Phi-3, DeepSeek LLM)."
                )
        return cls(
            family_token_ids=tuple(families),
            family_markers=tuple(markers),
            decimal_point_id=vocab.get("."),
            leading_point_ids=tuple(sorted(i for tok, i in vocab.items() if _is_leading_point(tok))),
            name=str(name),
        )

    # ------------------------------------------------------------------ lookups
    @property
    def num_families(self) -> int:
        return len(self.family_token_ids)

    @functools.cached_property
    def table_size(self) -> int:
        ids = [i for fam in self.family_token_ids for i in fam] + list(self.leading_point_ids)
        if self.decimal_point_id is not None:
            ids.append(self.decimal_point_id)
        return max(ids) + 1

    def digit_of(self, token_id: int) -> int | None:
        """The digit a token id stands for, or None."""
        for ids in self.family_token_ids:
            if token_id in ids:
                return ids.index(token_id)
        return None

    @functools.cached_property
    def kind_table(self) -> np.ndarray:
        """What each token is to the number reader (:mod:`del_plugin.core.places`), as bits: ``KIND_DIGIT``,
        ``KIND_POINT`` ('.' and the leading-point tokens) and ``KIND_FRESH`` (tokens that can only start a number:
        space-marked digits and leading points); 0 for every other token.

        uint8, indexed by token id, with one 0 entry after the largest digit or point id: the clipped lookup
        ``kind_table.take(ids, mode="clip")`` gives 0 for every id past the table, and for negative ids (-100) the
        kind of id 0, which is 0 unless token 0 is a digit or a point. Built once per vocabulary and read-only (the
        collator uses it on every batch).
        """
        table = np.zeros(self.table_size + 1, dtype=np.uint8)
        for f, ids in enumerate(self.family_token_ids):
            table[list(ids)] = KIND_DIGIT | (KIND_FRESH if f > 0 else 0)
        if self.decimal_point_id is not None:
            table[self.decimal_point_id] = KIND_POINT
        if self.leading_point_ids:
            table[list(self.leading_point_ids)] = KIND_POINT | KIND_FRESH
        table.flags.writeable = False
        return table

    @functools.cached_property
    def token_zero_has_a_kind(self) -> bool:
        """Whether token id 0 is a digit or a point, so that negative ids (-100), which the clipped lookup reads
        as id 0, must be masked after it."""
        return bool(self.kind_table[0])

    def kind_table_on(self, device: torch.device) -> torch.Tensor:
        """:attr:`kind_table` as a uint8 tensor on ``device`` (cached per device)."""
        key = ("kind", str(device))
        table = self._device_tables.get(key)
        if table is None:
            table = torch.tensor(self.kind_table, device=device)
            self._device_tables[key] = table
        return table

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        key = str(device)
        tables = self._device_tables.get(key)
        if tables is None:
            # code[id] = family * 10 + digit for digit tokens, _BARE_POINT / _LEADING_POINT for decimal points,
            # -1 elsewhere (one int16 per vocabulary entry)
            code = torch.full((self.table_size,), -1, dtype=torch.int16)
            for f, ids in enumerate(self.family_token_ids):
                code[list(ids)] = torch.arange(10, dtype=torch.int16) + 10 * f
            if self.decimal_point_id is not None:
                code[self.decimal_point_id] = _BARE_POINT
            if self.leading_point_ids:
                code[list(self.leading_point_ids)] = _LEADING_POINT
            family_ids = torch.tensor(self.family_token_ids, dtype=torch.long)
            tables = (code.to(device), family_ids.to(device), torch.arange(10, device=device))
            self._device_tables[key] = tables
        return tables

    def _codes(self, labels: torch.Tensor) -> torch.Tensor:
        code_table = self._tables(labels.device)[0]
        in_table = (labels >= 0) & (labels < self.table_size)
        code = code_table[labels.clamp(0, self.table_size - 1)].long()
        return torch.where(in_table, code, -1)

    def classify(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position: the digit value (-1 where not a digit) and the digit family (-1 where not a digit).

        Works on any integer tensor of token ids; -100 and ids outside the vocabulary are not digits.
        """
        code = self._codes(labels)
        is_digit = code >= 0
        digit = torch.where(is_digit, code % 10, -1)
        family = torch.where(is_digit, code // 10, -1)
        return digit, family

    def decimal_points(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masks of the bare '.' token and of the leading-point tokens ('*.', '▁.' …) among ``labels``."""
        code = self._codes(labels)
        return code == _BARE_POINT, code == _LEADING_POINT

    def family_ids(self, device: torch.device) -> torch.Tensor:
        """``[num_families, 10]`` long tensor of digit token ids on ``device``."""
        return self._tables(device)[1]


_BARE_POINT = -2
_LEADING_POINT = -3


def _is_leading_point(token: str) -> bool:
    """'*.', '(.', '▁.', '=.': punctuation (or a space marker) then one final '.', so that "18*.5" keeps its '.5'."""
    marker, body = _strip_marker(token)
    if not body.endswith(".") or (len(body) < 2 and not marker):
        return False
    # byte-level markers such as 'Ġ' are letters to str.isalnum, so judge the token without its marker
    return not any(ch.isalnum() or ch == "." for ch in body[:-1])


def _refuse_multi_digit_tokenization(tokenizer: Any, name: str) -> None:
    ids: Sequence[int] = tokenizer(DIGIT_PROBE_TEXT, add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(list(ids))
    merged = []
    for tok in tokens:
        _, body = _strip_marker(tok)
        if sum(ch.isdigit() for ch in body) >= 2 and tok not in merged:
            merged.append(tok)
    if merged:
        raise MultiDigitTokenizerError(
            f"{name} merges digits into multi-digit tokens (e.g. {', '.join(repr(t) for t in merged[:5])} "
            f"in {DIGIT_PROBE_TEXT!r}), so there is no ten-way digit distribution for DEL to act on. "
            "Use a single-digit tokenizer (Llama-2/CodeLlama, Mistral incl. Tekken, Qwen2/2.5/3/3.5, Gemma-3, Phi-3, "
            "DeepSeek LLM) or remove del_plugin.DELPlugin from `plugins`."
        )
