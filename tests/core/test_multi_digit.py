"""Number tokens of 1-3 digits (Llama-3 cuts "12345678" into '123', '456', '78'), against oracles written from the
definition rather than from the production code (tests/helpers/number_token_oracle.py):

* **Places.** A number token stands for its characters: the oracle expands every token into them (the first keeps
  the token's space marker and its packed-sequence start), reads the expanded sequence digit by digit with the
  single-digit rules (``oracle_places`` and the trusted old ``oracle_number_places`` of
  tests/helpers/places_oracle.py and bench/oracles.py, on the same characters), and hands each digit's place back
  to its token's slot. Checked on
  the real Llama-3 tokenizer (hand-worked cases, GSM8K rows and odd texts in padded, masked and packed batches,
  ``shift_labels``) and by a Hypothesis fuzz on a character tokenizer that also merges digits into chunks of 1-3 at
  random cut points (tests/helpers/fake_vocab.py's ``multi_digit_vocab``, ids permuted): NumPy path == torch path ==
  oracle.
* **Losses.** Every digit criterion on random float64 logits over Llama-3's 128,256 tokens, against a slow per-slot
  oracle: for each digit slot, ten logsumexps over token lists built from the token strings, the per-character
  places, the place weights and the criterion's formula; values, the "mean" / "sum" / "none" reductions, the slot
  count and the gradient with respect to the logits (autograd on both sides).
* **Single-digit tokenizers** (Llama-2's SentencePiece, Qwen2) read exactly as before: ``[B, T]`` places equal to
  the old oracle's.
"""

from __future__ import annotations

import functools
import math
import random
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.oracles import oracle_next_token_places, oracle_number_places
from del_plugin.core import (
    DigitVocab,
    PlaceWeighting,
    digit_targets_from_logits,
    next_token_places,
    number_places,
    shift_to_next_token,
)
from del_plugin.core.criteria import CRITERIA, DIGIT_CRITERIA, digit_criterion_loss, dist2_place_weights
from del_plugin.core.places import NOT_A_DIGIT, _slot_places_torch
from del_plugin.core.vocab import MultiDigitTokenizerError
from tools.assets import load_tokenizer

from fake_vocab import DIGITS, MULTI_TOKENS, MULTI_V, SPACE_MARKED, encode_tokens, multi_digit_vocab
from gsm8k_rows import gsm8k_rows
from number_token_oracle import (
    is_leading_point,
    is_number_token,
    llama3,
    oracle_batch,
    oracle_row,
    oracle_terms,
    shifted,
    slot_token_lists,
    strings_of,
    token_chars,
)

N = NOT_A_DIGIT
FUZZ = settings(max_examples=150, deadline=None)  # tests/project/test_fuzz.py's


# ---------------------------------------------------------------------------------------------- Llama-3
def llama_ids(text: str) -> list[int]:
    tok = llama3()[0]
    return tok(text, add_special_tokens=False)["input_ids"]


TEXTS = [
    "In 2024 she paid $1,234.50 for 12345678 items: 3.14159 each, .5 less than 90, i.e. 0.001%.",
    "The total is 1234567890123 dollars and 3.14159265358979 is pi.",
    "He ran 5. Then 1.2.3 happened; version 10.0.19045 shipped in 1999.",
    "A .5 cup, 0.25 lb, 12.5%, -7, +8, 1e10, 6x7=42, 10² and ½.",
    "Prices: $19.99, $1,000,000.00, 2,500, 12,345.678 and 100.",
    "18*.5 = 9, (.5) and ( .75 ), x=.125; a.5 ..5 5.. 7.",
    "Year 1066 to 2023: 957 years. 3:45 pm on 12/25/2023.",
    "Numbers 7 77 777 7777 77777 777777 7777777 and 0.0000001.",
    "0.1+0.2=0.30000000000000004 and 1.0e-7, 00012 and 000.000",
    "She earned $12/hour * 50 minutes = $10.\n#### 10",
    "Ends with a number 42",
    "3.",
    ".5",
    "12345",
    "12345.678",
]


@functools.cache
def corpus() -> list[list[int]]:
    """Token ids of TEXTS and of GSM8K questions and answers."""
    rows = gsm8k_rows(40)
    texts = TEXTS + [r["question"] for r in rows] + [r["answer"] for r in rows]
    return [llama_ids(t) for t in texts]


def random_batch(seqs: list[list[int]], rng: random.Random, pad_id: int, bos_id: int | None = None):
    """A [B, T] batch of some of ``seqs`` as collators build them, and its position_ids (None when not packed):
    right or left padding (with -100 or the pad token), masked prompts (also cutting into numbers), scattered -100,
    or several sequences packed per row, with position ids that restart at 0 (padding continues them or is 0)."""
    batch = rng.randint(1, 4)
    packed = rng.random() < 0.4
    rows, positions = [], []
    for _ in range(batch):
        parts = [rng.choice(seqs) for _ in range(rng.randint(2, 4) if packed else 1)]
        row, pos = [], []
        for part in parts:
            part = ([bos_id] if bos_id is not None and rng.random() < 0.3 else []) + list(part)
            if rng.random() < 0.5:  # a masked prompt: the first tokens are -100
                cut = rng.randint(0, len(part))
                part = [-100] * cut + part[cut:]
            part = [-100 if rng.random() < 0.04 else i for i in part]
            row += part
            pos += list(range(len(part)))
        rows.append(row)
        positions.append(pos)
    length = max(len(r) for r in rows)
    pad = rng.choice([-100, pad_id])
    left = not packed and rng.random() < 0.3
    for row, pos in zip(rows, positions):
        fill = length - len(row)
        if left:
            row[:0] = [pad] * fill
            pos[:0] = [0] * fill
        else:
            row += [pad] * fill
            pos += list(range(pos[-1] + 1, pos[-1] + 1 + fill)) if rng.random() < 0.5 else [0] * fill
    labels = torch.tensor(rows, dtype=torch.long)
    return labels, torch.tensor(positions, dtype=torch.long) if packed else None


def test_llama3_vocabulary_is_read_from_the_token_strings():
    """The digit and number tokens, the point and the leading points that ``from_tokenizer`` finds are those the
    token strings say: m-digit groups in value order, and the leading points of the definition."""
    tok, vocab, strings = llama3()
    index = tok.get_vocab()
    assert vocab.max_digits == 3
    assert vocab.family_token_ids == (tuple(index[str(d)] for d in range(10)),)
    assert [(g.family, g.digits) for g in vocab.number_groups] == [(0, 1), (0, 2), (0, 3)]
    for group in vocab.number_groups:
        assert group.token_ids == tuple(index[str(v).zfill(group.digits)] for v in range(10**group.digits))
    assert vocab.number_families == (0, 0)
    assert vocab.decimal_point_id == index["."]
    assert set(vocab.leading_point_ids) == {i for i, s in enumerate(strings) if is_leading_point(s)}
    assert {"Ġ.", "*.", "(."} <= {strings[i] for i in vocab.leading_point_ids}


# token strings -> expected slot places (None: not a digit), worked out by hand
HAND = [
    ("12345", ["123", "45"], [[4, 3, 2], [1, 0, N]]),
    ("12345678", ["123", "456", "78"], [[7, 6, 5], [4, 3, 2], [1, 0, N]]),
    ("12345.678", ["123", "45", ".", "678"], [[4, 3, 2], [1, 0, N], [N] * 3, [-1, -2, -3]]),
    ("3.14159", ["3", ".", "141", "59"], [[0, N, N], [N] * 3, [-1, -2, -3], [-4, -5, N]]),
    ("$1,234.50", ["$", "1", ",", "234", ".", "50"], [[N] * 3, [0, N, N], [N] * 3, [2, 1, 0], [N] * 3, [-1, -2, N]]),
    (
        " .5 5. 1.2.3",
        ["Ġ.", "5", "Ġ", "5", ".", "Ġ", "1", ".", "2", ".", "3"],
        [[N] * 3, [-1, N, N], [N] * 3, [0, N, N], [N] * 3, [N] * 3, [0, N, N], [N] * 3, [-1, N, N], [N] * 3]
        + [[-1, N, N]],
    ),
    ("18*.5", ["18", "*.", "5"], [[1, 0, N], [N] * 3, [-1, N, N]]),
    (" (.25)", ["Ġ(.", "25", ")"], [[N] * 3, [-1, -2, N], [N] * 3]),
    (
        "1234567890123",
        ["123", "456", "789", "012", "3"],
        [[12, 11, 10], [9, 8, 7], [6, 5, 4], [3, 2, 1], [0, N, N]],
    ),
    (" 2024.", ["Ġ", "202", "4", "."], [[N] * 3, [3, 2, 1], [0, N, N], [N] * 3]),
]


@pytest.mark.parametrize("text, tokens, expected", HAND, ids=[h[0] for h in HAND])
def test_hand_worked_places(text, tokens, expected):
    tok, vocab, strings = llama3()
    ids = torch.tensor(llama_ids(text))
    assert tok.convert_ids_to_tokens(ids.tolist()) == tokens
    places = number_places(ids, vocab)
    assert places.dtype == torch.int32 and places.shape == (len(tokens), 3)
    assert places.tolist() == expected
    assert _slot_places_torch(ids[None], vocab, None)[0].tolist() == expected
    assert oracle_row(tokens, None, 3) == expected
    aligned = next_token_places(ids[None], vocab)
    assert aligned.shape == (1, len(tokens), 3) and aligned[0].tolist() == expected[1:] + [[N] * 3]


def test_hand_worked_masks_and_packing():
    _, vocab, _ = llama3()
    ids = torch.tensor([llama_ids("12345")])  # '123' '45'
    assert number_places(ids, vocab).tolist() == [[[4, 3, 2], [1, 0, N]]]
    # '123' masked (a prompt): '45' is a number of its own
    assert number_places(torch.tensor([[-100, ids[0, 1]]]), vocab).tolist() == [[[N] * 3, [1, 0, N]]]
    # two packed samples '123' and '45'
    packed = torch.tensor([[0, 0]])
    assert number_places(ids, vocab, packed).tolist() == [[[2, 1, 0], [1, 0, N]]]
    assert _slot_places_torch(ids, vocab, packed).tolist() == [[[2, 1, 0], [1, 0, N]]]
    # a sample ending in '.' does not give the next one's digits decimal places
    dot = llama_ids("12.")  # '12', '.'
    labels = torch.tensor([dot + llama_ids("45")])
    assert number_places(labels, vocab, torch.tensor([[0, 1, 0]])).tolist() == [[[1, 0, N], [N] * 3, [1, 0, N]]]
    assert number_places(labels, vocab).tolist() == [[[1, 0, N], [N] * 3, [-1, -2, N]]]
    # shift_labels masking the target '45' of position 0
    shift = torch.tensor([[-100, -100]])
    assert next_token_places(ids, vocab, shift_labels=shift).tolist() == [[[N] * 3, [N] * 3]]


@pytest.mark.parametrize("seed", range(24))
def test_places_on_real_batches_match_the_per_character_oracle(seed):
    tok, vocab, strings = llama3()
    rng = random.Random(seed)
    labels, position_ids = random_batch(corpus(), rng, tok.pad_token_id, tok.bos_token_id)
    expected = oracle_batch(strings_of(labels, strings), position_ids, 3)
    places = number_places(labels, vocab, position_ids)
    assert places.dtype == torch.int32 and places.shape == (*labels.shape, 3)
    assert places.tolist() == expected
    assert _slot_places_torch(labels, vocab, position_ids).tolist() == expected
    # each digit character of a number token has one slot with a place
    digits = sum(len(token_chars(s)) for row in strings_of(labels, strings) for s in row if token_chars(s)[0] in DIGITS)
    assert int((places != N).sum()) == digits

    shift_labels = shift_to_next_token(labels, -100)
    extra = torch.tensor([[rng.random() < 0.15 for _ in row] for row in labels.tolist()])
    shift_labels = torch.where(extra, -100, shift_labels)
    for given_shift in (None, shift_labels):
        aligned = next_token_places(labels, vocab, position_ids, shift_labels=given_shift)
        assert aligned.shape == (*labels.shape, 3) and aligned.dtype == torch.int32
        assert aligned.tolist() == shifted(expected, given_shift, 3)
    # one row as [T]
    one = number_places(labels[0], vocab, None if position_ids is None else position_ids[0])
    assert one.tolist() == expected[0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device for the torch path of number_places")
def test_places_on_cuda_match_the_cpu():
    tok, vocab, _ = llama3()
    rng = random.Random(0)
    for _ in range(8):
        labels, position_ids = random_batch(corpus(), rng, tok.pad_token_id)
        cpu = next_token_places(labels, vocab, position_ids)
        gpu = next_token_places(labels.cuda(), vocab, None if position_ids is None else position_ids.cuda())
        assert torch.equal(gpu.cpu(), cpu)
        assert torch.equal(number_places(labels.cuda(), vocab).cpu(), number_places(labels, vocab))


# ---------------------------------------------------------------------------------------------- fuzz
@functools.cache
def fake_vocab(seed: int):
    """tests/helpers/fake_vocab.py's multi-digit vocabulary, its ids in order (seed 0) or shuffled; seed 1 also gives
    id 0
    to a three-digit token, which -100 must not read as (the clipped lookup reads negative ids as id 0)."""
    order = list(range(MULTI_V))
    if seed:
        random.Random(seed).shuffle(order)
    if seed == 1:
        k = order.index(0)
        three = len(MULTI_TOKENS) - 1  # '⁹99'
        order[k], order[three] = order[three], 0
    vocab, token_id = multi_digit_vocab(order)
    assert seed > 1 or vocab.token_zero_has_a_kind == (seed == 1)
    return vocab, token_id


FAKE_SEEDS = [0, 1, 2, 3, 4, 5]
# The text's characters: digits frequent, so that long numbers come up; 'a', ',' and ' ' are other tokens and '#' a
# masked label or an id outside the vocabulary.
TEXT_CHARS = list(DIGITS) * 3 + list(SPACE_MARKED) + [".", ".", ".", "@", "a", ",", " ", "#"]
MASKS = [-100, -100, -1, MULTI_V, MULTI_V + 7, 10**7]


def chunked(text: list[str], cut) -> list[str]:
    """``text`` as tokens: every run of digits (a space-marked digit, or a bare one, then bare digits) cut into
    chunks of 1-3 digits, of lengths ``cut(longest)``; every other character a token of its own."""
    tokens, i = [], 0
    while i < len(text):
        if text[i] in DIGITS + SPACE_MARKED:
            end = i + 1
            while end < len(text) and text[end] in DIGITS:
                end += 1
            while i < end:
                k = cut(min(3, end - i))
                tokens.append("".join(text[i : i + k]))
                i += k
        else:
            tokens.append(text[i])
            i += 1
    return tokens


@st.composite
def chunked_batches(draw):
    """(vocab, token strings per row, ids [B, T], position_ids or None)."""
    vocab, token_id = fake_vocab(draw(st.sampled_from(FAKE_SEEDS)))
    batch = draw(st.integers(1, 3))
    packed = draw(st.booleans())
    rows = []
    for _ in range(batch):
        text = draw(st.lists(st.sampled_from(TEXT_CHARS), max_size=40))
        rows.append(chunked(text, lambda most: draw(st.integers(1, most))))
    length = max(len(r) for r in rows)
    rows = [r + ["#"] * (length - len(r)) for r in rows]
    ids = [[draw(st.sampled_from(MASKS)) if t == "#" else token_id[t] for t in row] for row in rows]
    positions = []
    for _ in range(batch):
        pos, p = [], draw(st.integers(0, 5))
        for _ in range(length):
            pos.append(p)
            p = draw(st.sampled_from([p + 1] * 4 + [0, draw(st.integers(0, 50))])) if packed else p + 1
        positions.append(pos)
    dtype = draw(st.sampled_from([torch.long, torch.int32]))
    labels = torch.tensor(ids, dtype=dtype).reshape(batch, length)
    position_ids = torch.tensor(positions, dtype=torch.long).reshape(batch, length) if packed else None
    return vocab, [[None if t == "#" else t for t in row] for row in rows], labels, position_ids


def fake_leading_point(token: str) -> bool:
    return token == "@"


FAKE = {"leading_point": fake_leading_point, "marked": SPACE_MARKED}  # how the oracle reads the fake tokens


@FUZZ
@given(chunked_batches(), st.randoms(use_true_random=False))
def test_fuzz_chunked_numbers_numpy_torch_and_oracle_agree(case, rnd):
    vocab, rows, labels, position_ids = case
    expected = oracle_batch(rows, position_ids, 3, **FAKE)
    places = number_places(labels, vocab, position_ids)
    assert places.dtype == torch.int32 and places.shape == (*labels.shape, 3)
    assert places.tolist() == expected, rows
    assert _slot_places_torch(labels, vocab, position_ids).tolist() == expected, rows

    shift_labels = shift_to_next_token(labels.long(), -100)
    extra = torch.tensor([[rnd.random() < 0.2 for _ in row] for row in labels.tolist()], dtype=torch.bool)
    shift_labels = torch.where(extra.reshape(labels.shape), -100, shift_labels)
    for given_shift in (None, shift_labels):
        aligned = next_token_places(labels, vocab, position_ids, shift_labels=given_shift)
        assert aligned.shape == (*labels.shape, 3)
        assert aligned.tolist() == shifted(expected, given_shift, 3), rows


def test_fake_multi_digit_vocab_hand_cases():
    vocab, token_id = fake_vocab(0)
    # "12345.678 ⁴56 7@12": marked '⁴56' starts a number; '@' opens '.12'
    tokens = ["12", "345", ".", "67", "8", " ", "⁴56", "7", "@", "12"]
    expected = [[4, 3, N], [2, 1, 0], [N] * 3, [-1, -2, N], [-3, N, N], [N] * 3, [3, 2, 1], [0, N, N], [N] * 3]
    expected += [[-1, -2, N]]
    assert number_places(encode_tokens(tokens, token_id), vocab).tolist() == expected
    assert oracle_row(tokens, None, 3, **FAKE) == expected
    # a marked chunk after a bare one starts a new number: "12⁴5" as '12' '⁴5'
    assert number_places(encode_tokens(["12", "⁴5"], token_id), vocab).tolist() == [[1, 0, N], [1, 0, N]]
    # a '.' before a marked chunk is no decimal point
    assert number_places(encode_tokens(["5", ".", "⁴5"], token_id), vocab).tolist() == [[0, N, N], [N] * 3, [1, 0, N]]


# ---------------------------------------------------------------------------------------------- losses
V_LLAMA3 = 128256  # the model's vocabulary (the tokenizer's ids all lie below it)


LENGTH = 30
# Decimals spread over several tokens ('3', '.', '141', '592' ...) and ones inside one token ('.', '125')
LOSS_TEXTS = {
    "spread": (
        "Pi is 3.14159265358979 and e is 2.718281828; 12345.678 + 1234567890123 = ?",
        "In 2024 she paid $1,234.50 for 12345678 items: .5 of 1.2.3, 0.001% and 99.",
    ),
    "compact": (
        "Pay $12.50, 3.5 kg, 0.125 l and 7.25 m for 1,234 or 98765 items in 1999.",
        "So 2023 + 1.5 = 2024.5; 100 - 0.75 = 99.25 and 12345678 + 1 = 12345679.",
    ),
}


@functools.cache
def loss_batch(which: str) -> torch.Tensor:
    """[2, LENGTH] labels: the row texts, cut or padded with -100; the second row's first 4 tokens masked."""
    rows = []
    for b, text in enumerate(LOSS_TEXTS[which]):
        ids = llama_ids(text)[:LENGTH]
        ids += [-100] * (LENGTH - len(ids))
        if b == 1:
            ids[:4] = [-100] * 4
        rows.append(ids)
    return torch.tensor(rows)


@functools.cache
def random_logits(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, LENGTH, V_LLAMA3, generator=g, dtype=torch.float64) * 3


EXACT = PlaceWeighting(integer_slope=3.0, decimal_base=2.0)  # weights that float32 holds exactly
WEIGHTINGS = {"default": PlaceWeighting(), "exact": EXACT, "off": PlaceWeighting(enabled=False)}


def loss_cases():
    """Every criterion at the default place weights; the other weightings for ``del`` (``del_centered`` and
    ``del_dist`` weigh their terms by the same place_weights) and ``dist2`` (its own weights, switched off)."""
    for which in LOSS_TEXTS:
        for criterion in (c for c in DIGIT_CRITERIA if CRITERIA[c].unit == "digit"):  # ntl_number: its own test
            names = {"del": list(WEIGHTINGS), "dist2": ["default", "off"]}.get(criterion, ["default"])
            for name in names:
                yield pytest.param(criterion, name, which, id=f"{criterion}-{name}-{which}")


@pytest.mark.parametrize("criterion, weighting_name, which", list(loss_cases()))
def test_losses_and_gradients_match_the_per_slot_oracle(criterion, weighting_name, which):
    _, vocab, strings = llama3()
    weighting = WEIGHTINGS[weighting_name]
    labels = loss_batch(which)
    assert labels.max() < V_LLAMA3
    targets = shift_to_next_token(labels, -100)
    places = next_token_places(labels, vocab)
    alpha = 0.7
    params = {"dist2_tau": 0.5} if criterion == "dist2" else {}
    tau = params.get("dist2_tau", 1.0)

    leaf = random_logits(0).clone().requires_grad_()
    digits = digit_targets_from_logits(leaf, targets, vocab)
    assert digits.logits.dtype == torch.float64 and digits.logits.shape == (2, LENGTH, 3, 10)
    loss = digit_criterion_loss(criterion, digits, places, alpha=alpha, weighting=weighting, **params)
    loss.backward()

    ref_leaf = random_logits(0).clone().requires_grad_()
    terms = oracle_terms(criterion, ref_leaf, labels, weighting, strings, tau)
    # the slot count: one slot per digit character of the target tokens
    chars = sum(len(s) for row in strings_of(targets, strings) for s in row if is_number_token(s))
    assert len(terms) == chars == int(digits.mask.sum()) == int((places != N).sum())
    assert chars >= 30
    ref = alpha * sum(terms.values()) / len(terms)
    ref.backward()

    # u(place) of the default weighting is float32 by design (place_weights); weights it holds exactly: float64
    # (a relative error of ~6e-8 per weight, so gradient entries that cancel get an absolute tolerance too)
    rtol = 1e-6 if weighting_name == "default" and criterion.startswith("del") else 1e-10
    torch.testing.assert_close(loss.detach(), ref.detach(), rtol=rtol, atol=0)
    scale = ref_leaf.grad.abs().max().item()
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=rtol, atol=max(1e-15, rtol * 1e-2 * scale))
    # the gradient reaches exactly the number tokens of the positions that predict a digit
    touched = (ref_leaf.grad != 0).any(-1)
    assert touched.tolist() == [[any((b, t, j) in terms for j in range(3)) for t in range(LENGTH)] for b in range(2)]

    with torch.no_grad():
        digits = digit_targets_from_logits(random_logits(0), targets, vocab)
        total = digit_criterion_loss(criterion, digits, places, reduction="sum", weighting=weighting, **params)
        per_slot = digit_criterion_loss(criterion, digits, places, reduction="none", weighting=weighting, **params)
        expected = torch.zeros(2, LENGTH, 3, dtype=torch.float64)
        for key, term in terms.items():
            expected[key] = term.detach()
    torch.testing.assert_close(total, expected.sum(), rtol=rtol, atol=0)
    assert per_slot.shape == (2, LENGTH, 3)
    torch.testing.assert_close(per_slot, expected, rtol=rtol, atol=0)
    assert not per_slot[~digits.mask].any()


def oracle_number_errors(logits, labels, strings, tokenizer="llama-bpe", float_level=False):
    """{(b, t): relative error} of every number of the targets ``labels[:, t + 1]``, ``t`` the position that
    predicts its first token, from the token strings: a number is a run of consecutive number-token targets (the
    Llama-3 tokenizer puts no digit in any other token; with ``float_level`` a run also goes on across one '.'
    target between two number tokens), its value the integer its digits spell; each digit's expected value is read
    from the marginal of its slot over the m-digit tokens, m its token's length."""
    batch, length = labels.shape
    rows = logits.reshape(batch * length, -1).unbind(0)
    out = {}
    for b in range(batch):
        run: list[tuple[int, str]] = []
        for t in range(length):
            target = labels[b, t + 1].item() if t + 1 < length else -100
            s = strings[target] if target >= 0 else None
            if is_number_token(s):
                run.append((t, s))
                continue
            after = labels[b, t + 2].item() if t + 2 < length else -100
            if float_level and s == "." and run[-1:] and run[-1][0] == t - 1 and after >= 0:
                if is_number_token(strings[after]):
                    continue
            if not run:
                continue
            chars = "".join(s for _, s in run)
            predicted, k = 0.0, 0
            for t_run, s_run in run:
                lists = slot_token_lists(len(s_run), tokenizer)
                for j in range(len(s_run)):
                    z = torch.stack(
                        [torch.logsumexp(rows[b * length + t_run][torch.tensor(lists[j][v])], 0) for v in range(10)]
                    )
                    expected = (torch.softmax(z, 0) * torch.arange(10, dtype=z.dtype)).sum()
                    predicted = predicted + expected * 10.0 ** (len(chars) - 1 - k)
                    k += 1
            true = int(chars)
            out[b, run[0][0]] = (predicted - true).abs() / (predicted.abs() + true + torch.finfo(torch.float32).eps)
            run = []
    return out


@pytest.mark.parametrize("which, float_level", [("spread", False), ("compact", False), ("spread", True)])
def test_number_level_loss_and_gradient_match_the_per_number_oracle(which, float_level):
    """``ntl_number`` on Llama-3's number tokens (which ntloss does not read): loss and gradient of the mean over
    numbers equal a slow oracle's, numbers of up to 13 digits cut into 1-3-digit tokens, decimals in several tokens;
    with ``del_ntl_float_level`` a decimal part one '.' token after a number token is in its number."""
    _, vocab, strings = llama3()
    labels = loss_batch(which)
    targets = shift_to_next_token(labels, -100)
    places = next_token_places(labels, vocab)
    leaf = random_logits(0).clone().requires_grad_()
    digits = digit_targets_from_logits(leaf, targets, vocab)
    loss = digit_criterion_loss("ntl_number", digits, places, alpha=0.7, ntl_float_level=float_level)
    loss.backward()

    ref_leaf = random_logits(0).clone().requires_grad_()
    errors = oracle_number_errors(ref_leaf, labels, strings, float_level=float_level)
    assert len(errors) >= (8 if float_level else 12) and any(len(k) for k in errors)
    ref = 0.7 * sum(errors.values()) / len(errors)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach(), rtol=1e-9, atol=0)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=1e-9, atol=1e-12)
    # one term per number, at the first slot of the position that predicts its first token
    with torch.no_grad():
        per_slot = digit_criterion_loss("ntl_number", digits, places, reduction="none", ntl_float_level=float_level)
    expected = torch.zeros(per_slot.shape, dtype=torch.float64)
    for (b, t), error in errors.items():
        expected[b, t, 0] = error.detach()
    torch.testing.assert_close(per_slot, expected, rtol=1e-9, atol=0)


def test_slot_logits_are_marginals_over_the_token_strings():
    """digit_targets_from_logits: slot j's ten logits are the logsumexp over the m-digit tokens with that digit at j;
    the targets are the digits of the target token, the mask its digit count."""
    _, vocab, strings = llama3()
    labels = loss_batch("spread")
    targets = shift_to_next_token(labels, -100)
    logits = random_logits(1)
    digits = digit_targets_from_logits(logits, targets, vocab)
    checked = 0
    for b in range(2):
        for t in range(LENGTH):
            target = targets[b, t].item()
            s = strings[target] if target >= 0 else None
            m = len(s) if is_number_token(s) else 0
            assert digits.mask[b, t].tolist() == [j < m for j in range(3)]
            for j in range(m):
                lists = slot_token_lists(m)
                z = [math.log(sum(math.exp(logits[b, t, i].item()) for i in lists[j][v])) for v in range(10)]
                assert digits.logits[b, t, j].tolist() == pytest.approx(z, rel=1e-12)
                assert digits.target[b, t, j].item() == int(s[j])
                checked += 1
    assert checked >= 30


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12345.678", [[5, 4, 3], [2, 1, 0], [0] * 3, [3, 2, 1]]),  # the decimals in one token
        ("3.14159", [[1, 0, 0], [0] * 3, [5, 4, 3], [2, 1, 0]]),  # '141' '59'
        ("0.1234567", [[1, 0, 0], [0] * 3, [7, 6, 5], [4, 3, 2], [1, 0, 0]]),
    ],
)
def test_dist2_weights_count_the_numbers_decimals(text, expected):
    """DIST2 reads the decimals as an integer of their own: in 3.14159 they weigh 5, 4, 3, 2, 1, however the
    tokenizer cuts them."""
    _, vocab, _ = llama3()
    places = number_places(torch.tensor([llama_ids(text)]), vocab)
    assert dist2_place_weights(places)[0].tolist() == expected


@pytest.mark.parametrize("criterion", DIGIT_CRITERIA)
def test_unbatched_labels_give_the_batched_loss(criterion):
    """[T] labels and [T, V] logits (places [T, M]) give the loss of the same row as a [1, T] batch."""
    _, vocab, _ = llama3()
    labels = torch.tensor(llama_ids("x 3.14159 and 12345.678 or 0.1234567"))
    targets = shift_to_next_token(labels, -100)
    places = next_token_places(labels, vocab)
    assert places.shape == (len(labels), 3)
    logits = random_logits(2)[0, : len(labels)]
    one = digit_criterion_loss(criterion, digit_targets_from_logits(logits, targets, vocab), places)
    batched = digit_criterion_loss(
        criterion, digit_targets_from_logits(logits[None], targets[None], vocab), places[None]
    )
    torch.testing.assert_close(one, batched, rtol=1e-12, atol=0)


@pytest.mark.parametrize("criterion", DIGIT_CRITERIA)
@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 5)], ids=str)
def test_empty_batches_give_zero(criterion, shape):
    _, vocab, _ = llama3()
    labels = torch.zeros(shape, dtype=torch.long)
    places = next_token_places(labels, vocab)
    assert places.shape == (*shape, 3) and number_places(labels, vocab).shape == (*shape, 3)
    leaf = torch.zeros(*shape, V_LLAMA3, dtype=torch.float64, requires_grad=True)
    digits = digit_targets_from_logits(leaf, labels, vocab)
    assert digits.logits.shape == (*shape, 3, 10) and digits.mask.shape == (*shape, 3)
    loss = digit_criterion_loss(criterion, digits, places)
    loss.backward()
    assert loss.item() == 0.0 and leaf.grad is not None and not leaf.grad.any()


# ---------------------------------------------------------------------------------------------- single digits
@pytest.mark.parametrize("name", ["llama-spm", "qwen2"])
def test_single_digit_tokenizers_read_as_before(name):
    tok = load_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    assert vocab.max_digits == 1 and vocab.number_token_ids == () and vocab.number_families == ()
    assert [g.digits for g in vocab.number_groups] == [1] * vocab.num_families
    rows = gsm8k_rows(20)
    texts = TEXTS + [r["question"] + "\n" + r["answer"] for r in rows]
    seqs = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    rng = random.Random(name)
    for _ in range(10):
        labels, position_ids = random_batch(seqs, rng, pad, tok.bos_token_id)
        places = number_places(labels, vocab, position_ids)
        assert places.shape == labels.shape and places.dtype == torch.int32
        assert torch.equal(places, oracle_number_places(labels, vocab, position_ids))
        shift_labels = torch.where(torch.rand(labels.shape) < 0.15, -100, shift_to_next_token(labels, -100))
        for given_shift in (None, shift_labels):
            aligned = next_token_places(labels, vocab, position_ids, shift_labels=given_shift)
            assert aligned.shape == labels.shape
            assert torch.equal(aligned, oracle_next_token_places(labels, vocab, position_ids, given_shift))
    # digit targets keep their [..., 10] shape
    labels = torch.tensor([seqs[0][:12]])
    logits = torch.randn(1, labels.shape[1], len(tok))
    digits = digit_targets_from_logits(logits, labels, vocab)
    assert digits.logits.shape == (1, labels.shape[1], 10) and digits.mask.shape == labels.shape


@pytest.mark.parametrize("name, criterion", [("cl100k", "dist2"), ("o200k", "del")])
def test_cl100k_and_o200k_match_the_per_slot_oracle(name, criterion):
    """The same definition on the other \\p{N}{1,3} vocabularies (Phi-4's and OLMo-2's base, gpt-oss's), whose
    number tokens sit at other ids: places per character, slot logits and the loss with its gradient."""
    tok = load_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    assert vocab.max_digits == 3 and len(vocab.number_row_ids) == 1110
    strings = tok.convert_ids_to_tokens(list(range(max(tok.get_vocab().values()) + 1)))
    rows = [tok(text, add_special_tokens=False)["input_ids"][:LENGTH] for text in LOSS_TEXTS["spread"]]
    labels = torch.tensor([r + [-100] * (LENGTH - len(r)) for r in rows])
    targets = shift_to_next_token(labels, -100)
    places = next_token_places(labels, vocab)
    assert places.tolist() == shifted(oracle_batch(strings_of(labels, strings), None, 3), None, 3)
    size = len(strings)
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, LENGTH, size, generator=g, dtype=torch.float64) * 3
    leaf = logits.clone().requires_grad_()
    loss = digit_criterion_loss(criterion, digit_targets_from_logits(leaf, targets, vocab), places, weighting=EXACT)
    loss.backward()
    ref_leaf = logits.clone().requires_grad_()
    terms = oracle_terms(criterion, ref_leaf, labels, EXACT, strings, tokenizer=name)
    assert len(terms) == int((places != N).sum()) >= 30
    ref = sum(terms.values()) / len(terms)
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach(), rtol=1e-10, atol=0)
    torch.testing.assert_close(leaf.grad, ref_leaf.grad, rtol=1e-10, atol=1e-15)


class _ChunkingTokenizer:
    """The three calls DigitVocab.from_tokenizer makes, on a vocabulary of characters and the given number strings:
    digit runs cut into chunks of up to ``longest`` digits from the left, or glued to the letters after them."""

    def __init__(self, numbers: list[str], longest: int = 3, glue_letters: bool = False):
        self.tokens = [chr(c) for c in range(32, 127)] + numbers
        self.index = {t: i for i, t in enumerate(self.tokens)}
        self.longest, self.glue = longest, glue_letters

    def get_vocab(self):
        return dict(self.index)

    def _pieces(self, text: str) -> list[str]:
        pieces = []
        for run in re.findall(r"\d+[a-z]*|\D", text):
            digits = re.match(r"\d+", run)
            if digits is None:
                pieces.append(run)
            elif self.glue and len(run) > digits.end():
                pieces.append(run)
                self.index.setdefault(run, len(self.index))
            else:
                number = digits.group()
                pieces += [number[i : i + self.longest] for i in range(0, len(number), self.longest)]
                pieces += list(run[digits.end() :])
        return pieces

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [self.index[p] for p in self._pieces(text)]}

    def convert_ids_to_tokens(self, ids):
        inverse = {i: t for t, i in self.index.items()}
        return [inverse[i] for i in ids]


def test_number_tokens_accepted_complete_and_refused_otherwise():
    """Accepted: every m-digit string for each length the tokenizer cuts. Refused, naming the tokens: a missing
    string, and digits glued to letters ('12th')."""
    complete = [str(v).zfill(m) for m in (2, 3) for v in range(10**m)]
    vocab = DigitVocab.from_tokenizer(_ChunkingTokenizer(complete), name="chunks")
    assert vocab.max_digits == 3 and len(vocab.number_row_ids) == 1110
    two_only = DigitVocab.from_tokenizer(_ChunkingTokenizer(complete[:100], longest=2), name="pairs")
    assert two_only.max_digits == 2 and len(two_only.number_row_ids) == 110
    with pytest.raises(MultiDigitTokenizerError, match=r"lacks 1 of the 1000 3-digit strings \(e\.g\. '042'\)"):
        DigitVocab.from_tokenizer(_ChunkingTokenizer([t for t in complete if t != "042"]), name="holes")
    glued = _ChunkingTokenizer(complete, glue_letters=True)
    with pytest.raises(MultiDigitTokenizerError, match="merges digits with other characters"):
        DigitVocab.from_tokenizer(glued, name="glued")
