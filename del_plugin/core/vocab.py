"""Which token ids are digits: the ten digit tokens, their space-marked variants, the decimal point, and the
number tokens of tokenizers that merge digits.

SentencePiece tokenizers with ``split_digits`` (Llama-2, CodeLlama, Mistral) and byte-level BPE tokenizers that
pre-split ``\\p{N}`` (Qwen2, DeepSeek) give every digit its own token. Tokenizers that split numbers into chunks of
1-3 digits (``\\p{N}{1,3}``: Llama-3, gpt-oss's o200k, Phi-4's and OLMo-2's cl100k, DeepSeek-V3) are read through
their *number tokens*: a target '123' gives one digit slot per digit, whose ten logits are the marginal of that
digit among the 1,000 three-digit tokens (:mod:`~del_plugin.core.digits`). Such a tokenizer is accepted when its
vocabulary holds every m-digit string for each length m its numbers are cut into; tokenizers whose number tokens
are an incomplete set (GPT-2: '2000' but not '2001' …) are refused.

:class:`DigitVocab` holds the ids and the tables built from them; reading them from a tokenizer (and the errors
that refuse one) is :mod:`~del_plugin.core.tokenizer_digits`, and the lookups of token ids in the tables, as
functions of tensors, are :mod:`~del_plugin.core.vocab_lookups`; the tables as tensors, once per device, are
:mod:`~del_plugin.core.vocab_device`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import torch

from .tokenizer_digits import (
    DIGIT_PROBE_TEXT,
    MAX_TOKEN_DIGITS,
    SPACE_MARKERS,
    DigitVocabError,
    MultiDigitTokenizerError,
    NoDigitTokensError,
    read_digit_tokens,
)
from .vocab_device import DeviceTables, digit_code_tables, number_lookup_tables
from .vocab_lookups import BARE_POINT, LEADING_POINT, classify_labels, lookup, slot_targets_of

__all__ = [
    "DIGIT_PROBE_TEXT",
    "MAX_TOKEN_DIGITS",
    "NumberGroup",
    "SPACE_MARKERS",
    "DigitVocab",
    "DigitVocabError",
    "MultiDigitTokenizerError",
    "NoDigitTokensError",
]

# Bits of DigitVocab.kind_table: a digit token, a decimal-point token, a token that can only start a number.
KIND_DIGIT = 1
KIND_POINT = 2
KIND_FRESH = 4


class NumberGroup(NamedTuple):
    """The number tokens of one digit family and one length: ``token_ids[v]`` is the token of the ``digits``-digit
    string of value ``v`` (zero-padded: '007' is value 7), so ``len(token_ids) == 10 ** digits``."""

    family: int
    digits: int
    token_ids: tuple[int, ...]


@dataclass(frozen=True)
class DigitVocab:
    """The digit tokens of one tokenizer, grouped in families of ten.

    ``family_token_ids[f][d]`` is the id of digit ``d`` in family ``f``. Family 0 holds the bare digits; further
    families hold complete sets of space-marked digits ('▁7', 'Ġ7'). A digit target competes only against the
    ten tokens of its own family, so a model predicting '▁7' is scored among '▁0'..'▁9'.

    ``leading_point_ids`` are tokens in which punctuation is merged with a decimal point, such as '*.' or '▁.'
    (Llama-2 tokenises "18*.5" as '1', '8', '*.', '5'): followed by a digit they start a number '.5'.

    ``number_token_ids`` are, for tokenizers that merge digits, the groups of m-digit number tokens (m >= 2), each
    ``10 ** m`` ids in value order ('00', '01', …, '99'); ``number_families[g]`` is the family (space marker) of
    group ``g``. Empty for single-digit tokenizers, which then behave exactly as before number tokens existed.
    """

    family_token_ids: tuple[tuple[int, ...], ...]
    family_markers: tuple[str, ...] = ("",)
    decimal_point_id: int | None = None
    leading_point_ids: tuple[int, ...] = ()
    name: str = "tokenizer"
    number_token_ids: tuple[tuple[int, ...], ...] = ()
    number_families: tuple[int, ...] = ()
    # the tables as tensors, once per device they are used on (vocab_device.py)
    _device_tables: DeviceTables = field(default_factory=DeviceTables, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.family_token_ids:
            raise NoDigitTokensError(f"{self.name}: no digit family given")
        for ids in self.family_token_ids:
            if len(ids) != 10:
                raise NoDigitTokensError(f"{self.name}: a digit family needs 10 token ids, got {len(ids)}")
        if len(self.number_families) != len(self.number_token_ids):
            raise DigitVocabError(f"{self.name}: number_families needs one family per group of number_token_ids")
        for family, ids in zip(self.number_families, self.number_token_ids):
            digits = _digits_of(ids)
            if not 2 <= digits <= MAX_TOKEN_DIGITS or len(ids) != 10**digits:
                raise DigitVocabError(
                    f"{self.name}: a group of number tokens needs 10**m ids for m in 2..{MAX_TOKEN_DIGITS}, got "
                    f"{len(ids)}"
                )
            if not 0 <= family < len(self.family_token_ids):
                raise DigitVocabError(f"{self.name}: number group family {family} is not a digit family")
        groups = [(f, len(ids)) for f, ids in zip(self.number_families, self.number_token_ids)]
        if len(set(groups)) != len(groups):
            raise DigitVocabError(f"{self.name}: two groups of number tokens share a family and a length")
        flat = [i for ids in self.family_token_ids for i in ids]
        flat += [i for ids in self.number_token_ids for i in ids]
        if len(set(flat)) != len(flat):
            raise DigitVocabError(f"{self.name}: a token id appears twice among the digit and number tokens")
        markers = self.family_markers
        if len(markers) != len(self.family_token_ids) or markers[0] != "" or "" in markers[1:]:
            raise DigitVocabError(
                f"{self.name}: family_markers must be '' for family 0 (bare digits) and a space marker for "
                f"each further family, got {markers!r}"
            )
        points = ([self.decimal_point_id] if self.decimal_point_id is not None else []) + list(self.leading_point_ids)
        if set(points) & set(flat) or len(set(points)) != len(points):
            raise DigitVocabError(f"{self.name}: decimal point ids {points} overlap each other or the digits")
        if any(i < 0 for i in flat + points):
            raise DigitVocabError(f"{self.name}: token ids must be >= 0")

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_tokenizer(cls, tokenizer: Any, name: str | None = None) -> DigitVocab:
        """Read the digit and number tokens from a Hugging Face tokenizer (slow or fast).

        The tokenizer's own output on probe texts (:data:`DIGIT_PROBE_TEXT`, and runs of 1-12 digits) says how it
        cuts numbers. Single digits: the digit families, as always. Chunks of up to m digits: also every
        ``m'``-digit string for ``m'`` in 2..m, per space marker that appears on number tokens. Raises
        ``NoDigitTokensError`` when a bare digit '0'..'9' has no token of its own and
        ``MultiDigitTokenizerError`` when numbers are cut into tokens DEL cannot read (the error names them).
        """
        name = str(name or getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__)
        return cls(**read_digit_tokens(tokenizer, name))

    # ------------------------------------------------------------------ lookups
    @property
    def num_families(self) -> int:
        return len(self.family_token_ids)

    def describe(self) -> str:
        """How this tokenizer spells digits, for logs: "one token per digit ('0'..'9')" or "number tokens of 1-3
        digits (1,110 head rows), read digit by digit ('0'..'9', 'Ġ0'..'Ġ9')"."""
        families = ", ".join(f"{marker + '0'!r}..{marker + '9'!r}" for marker in self.family_markers)
        if self.max_digits == 1:
            return f"one token per digit ({families})"
        rows = len(self.number_row_ids)
        return f"number tokens of 1-{self.max_digits} digits ({rows:,} head rows), read digit by digit ({families})"

    @functools.cached_property
    def max_digits(self) -> int:
        """The most digits one token holds: 1 for single-digit tokenizers, 3 for Llama-3's."""
        return max(group.digits for group in self.number_groups)

    @functools.cached_property
    def number_groups(self) -> tuple[NumberGroup, ...]:
        """Every group of number tokens: the single-digit families first (one group of 10 each), then the
        ``number_token_ids`` groups. The row of group ``g``'s token ``v`` in :attr:`number_row_ids` is
        ``group_offsets[g] + v``."""
        single = [NumberGroup(f, 1, ids) for f, ids in enumerate(self.family_token_ids)]
        multi = [NumberGroup(f, _digits_of(ids), ids) for f, ids in zip(self.number_families, self.number_token_ids)]
        return tuple(single + multi)

    @functools.cached_property
    def group_offsets(self) -> tuple[int, ...]:
        offsets = [0]
        for group in self.number_groups:
            offsets.append(offsets[-1] + len(group.token_ids))
        return tuple(offsets)

    @functools.cached_property
    def number_row_ids(self) -> tuple[int, ...]:
        """The ids of every number token, group after group (1,110 for Llama-3's bare family): the head rows the
        digit slots are read from."""
        return tuple(i for group in self.number_groups for i in group.token_ids)

    @functools.cached_property
    def table_size(self) -> int:
        ids = list(self.number_row_ids) + list(self.leading_point_ids)
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
        for group in self.number_groups:
            table[list(group.token_ids)] = KIND_DIGIT | (KIND_FRESH if group.family > 0 else 0)
        if self.decimal_point_id is not None:
            table[self.decimal_point_id] = KIND_POINT
        if self.leading_point_ids:
            table[list(self.leading_point_ids)] = KIND_POINT | KIND_FRESH
        table.flags.writeable = False
        return table

    @functools.cached_property
    def digit_count_table(self) -> np.ndarray:
        """How many digits each token holds (uint8, 0 for every other token), in the layout of :attr:`kind_table`."""
        table = np.zeros(self.table_size + 1, dtype=np.uint8)
        for group in self.number_groups:
            table[list(group.token_ids)] = group.digits
        table.flags.writeable = False
        return table

    @functools.cached_property
    def counted_kind_table(self) -> np.ndarray:
        """:attr:`kind_table` with each token's digit count in bits 3-4 (the NumPy reader of number tokens reads
        both with one lookup)."""
        table = self.kind_table | (self.digit_count_table << 3)
        table.flags.writeable = False
        return table

    @functools.cached_property
    def number_group_table(self) -> np.ndarray:
        """The index in :attr:`number_groups` of each number token's group (int16, -1 for every other token), in
        the layout of :attr:`kind_table`: a clipped lookup gives -1 past the table, and for negative ids the entry
        of id 0."""
        table = np.full(self.table_size + 1, -1, dtype=np.int16)
        for g, group in enumerate(self.number_groups):
            table[list(group.token_ids)] = g
        table.flags.writeable = False
        return table

    def digit_count_table_on(self, device: torch.device) -> torch.Tensor:
        """:attr:`digit_count_table` as an int64 tensor on ``device`` (cached per device)."""
        return self._device_tables.get("count", device, lambda: torch.tensor(self.digit_count_table, dtype=torch.long))

    @functools.cached_property
    def token_zero_has_a_kind(self) -> bool:
        """Whether token id 0 is a digit or a point, so that negative ids (-100), which the clipped lookup reads
        as id 0, must be masked after it."""
        return bool(self.kind_table[0])

    def kind_table_on(self, device: torch.device) -> torch.Tensor:
        """:attr:`kind_table` as a uint8 tensor on ``device`` (cached per device)."""
        return self._device_tables.get("kind", device, lambda: torch.tensor(self.kind_table))

    def code_table_on(self, device: torch.device) -> torch.Tensor:
        """int16 ``[table_size]``: ``family * 10 + digit`` of each digit token, -2 / -3 for the bare and the
        leading decimal points, -1 elsewhere (cached per device; :func:`classify_labels` reads it)."""
        return self._device_tables.get("digit", device, partial(digit_code_tables, self))[0]

    def _codes(self, labels: torch.Tensor) -> torch.Tensor:
        return lookup(self.code_table_on(labels.device), labels)

    def classify(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position: the digit value (-1 where not a single-digit token) and the digit family (-1 likewise).
        Number tokens of several digits are read with :meth:`slot_targets`.

        Works on any integer tensor of token ids; -100 and ids outside the vocabulary are not digits.
        """
        return classify_labels(labels, self.code_table_on(labels.device))

    def decimal_points(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Masks of the bare '.' token and of the leading-point tokens ('*.', '▁.' …) among ``labels``."""
        code = self._codes(labels)
        return code == BARE_POINT, code == LEADING_POINT

    def family_ids(self, device: torch.device) -> torch.Tensor:
        """``[num_families, 10]`` long tensor of digit token ids on ``device``."""
        return self._device_tables.get("digit", device, partial(digit_code_tables, self))[1]

    def number_tables_on(self, device: torch.device) -> dict[str, torch.Tensor]:
        """The tables :func:`slot_targets_of` reads, on ``device`` (cached per device): ``row`` (the number row of
        each token id, or -1), and per number row its ``group``, ``digits`` and ``value``."""
        return self._device_tables.get("number", device, partial(number_lookup_tables, self))

    def number_row_ids_on(self, device: torch.device) -> torch.Tensor:
        """:attr:`number_row_ids` as a long tensor on ``device``."""
        return self.number_tables_on(device)["row_ids"]

    def group_row_ids_on(self, device: torch.device) -> list[torch.Tensor]:
        """The token ids of each of :attr:`number_groups`, in value order, as views of :meth:`number_row_ids_on`."""
        rows, offsets = self.number_row_ids_on(device), self.group_offsets
        return [rows[offsets[g] : offsets[g + 1]] for g in range(len(self.number_groups))]

    def slot_targets(self, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Per target, its number group, and per digit slot its digit and whether it exists.

        Returns ``group`` (``labels.shape``, long, -1 where the label is not a number token), ``digit`` and
        ``mask`` (``[..., max_digits]``): slot ``j`` holds the ``j``-th digit, left to right, of the target token
        ('123': 1, 2, 3), and exists for ``j`` below the token's digit count. Non-digits have no slot (-100 and ids
        outside the vocabulary included)."""
        return slot_targets_of(labels, self.number_tables_on(labels.device), self.max_digits)


def _digits_of(ids: tuple[int, ...]) -> int:
    """m for a group of 10**m number tokens (the length of its count in decimal, less one)."""
    return len(str(len(ids))) - 1
