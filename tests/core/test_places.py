"""Number places and place weights, against hand-worked values, a slow per-character oracle and the previous
implementation (bench/oracles.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.oracles import oracle_next_token_places, oracle_number_places
from del_plugin.core import DigitVocab, PlaceWeighting, next_token_places, number_places, shift_to_next_token
from del_plugin.core.places import NOT_A_DIGIT, _places_torch, place_weights

from fake_vocab import TOKEN_ID, VOCAB, encode
from places_oracle import oracle_places

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


# ------------------------------------------------------------------------------ against the reference implementation
# `number_places` reads CPU tensors with NumPy and other devices with a torch pass; both must give exactly what the
# previous implementation (kept in bench/oracles.py) gives, on every kind of token the vocabulary knows.


def token_kinds(vocab: DigitVocab, others: list[int]) -> dict[str, list[int]]:
    table = vocab.table_size
    return {
        "bare digit": list(vocab.family_token_ids[0]),
        "space-marked digit": list(vocab.family_token_ids[1]),
        "point": [vocab.decimal_point_id],
        "leading point": list(vocab.leading_point_ids),
        "ignore": [-100],
        "other": others,
        "outside the table": [table, table + 1, 2**31 - 1, 2**31, 2**40, 2**63 - 1, -1, -2, -101, -(2**63)],
    }


def token_strategy(kinds: dict[str, list[int]]) -> st.SearchStrategy[int]:
    # digits and points weighted up, so that long numbers, '1.2.3' and '.5' shapes are common
    return st.one_of(
        st.sampled_from(kinds["bare digit"]),
        st.sampled_from(kinds["bare digit"]),
        st.sampled_from(kinds["point"] + kinds["leading point"]),
        *(st.sampled_from(ids) for ids in kinds.values()),
    )


TOKEN_KINDS = token_kinds(VOCAB, [TOKEN_ID[c] for c in " abz,-$%=+*/:;"])
# a vocabulary whose token 0 is the digit '0': the clipped table lookup reads -100 as token 0 and must undo it
ZERO_VOCAB = DigitVocab(
    family_token_ids=(tuple(range(10)), tuple(range(10, 20))),
    family_markers=("", "▁"),
    decimal_point_id=20,
    leading_point_ids=(21,),
    name="digits-first",
)
VOCAB_CASES = [
    (VOCAB, token_strategy(TOKEN_KINDS)),
    (ZERO_VOCAB, token_strategy(token_kinds(ZERO_VOCAB, list(range(22, 30))))),
]


@st.composite
def label_batches(draw, max_rows: int = 4, max_len: int = 24):
    """(vocab, labels, position_ids or None, shift_labels or None): labels ``[B, T]`` or ``[T]``, empty and length 1
    included, from one of the test vocabularies."""
    vocab, token_ids = draw(st.sampled_from(VOCAB_CASES))
    one_d = draw(st.booleans())
    rows = 1 if one_d else draw(st.integers(0, max_rows))
    length = draw(st.integers(0, max_len))
    dtype = draw(st.sampled_from([torch.int64, torch.int32]))
    ids = draw(st.lists(st.lists(token_ids, min_size=length, max_size=length), min_size=rows, max_size=rows))
    if dtype == torch.int32:
        ids = [[i if -(2**31) <= i < 2**31 else -100 for i in row] for row in ids]
    labels = torch.tensor(ids, dtype=dtype).reshape(rows, length)
    position_ids = None
    if draw(st.booleans()):
        # packed rows: each position continues (p + 1), restarts at 0, or jumps to any position
        steps = st.sampled_from(["continue", "continue", "continue", "restart", "jump"])
        pos = []
        for _ in range(rows):
            row, p = [], draw(st.integers(0, 5))
            for t in range(length):
                step = draw(steps) if t else "first"
                p = {"first": p, "continue": p + 1, "restart": 0}.get(step, draw(st.integers(-3, 50)))
                row.append(p)
            pos.append(row)
        position_ids = torch.tensor(pos, dtype=draw(st.sampled_from([torch.int64, torch.int32])))
        position_ids = position_ids.reshape(rows, length)
    shift_labels = None
    if draw(st.booleans()):
        keep = draw(st.lists(st.booleans(), min_size=rows * length, max_size=rows * length))
        keep = torch.tensor(keep, dtype=torch.bool).reshape(rows, length)
        shift_labels = torch.where(keep, shift_to_next_token(labels, -100), -100)
    if one_d:
        labels = labels[0]
        position_ids = None if position_ids is None else position_ids[0]
        shift_labels = None if shift_labels is None else shift_labels[0]
    return vocab, labels, position_ids, shift_labels


def assert_same(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype == torch.int32
    assert got.shape == expected.shape and got.device == expected.device
    assert torch.equal(got, expected), (got.tolist(), expected.tolist())


@settings(max_examples=400, deadline=None)
@given(label_batches())
def test_number_places_equals_the_reference(batch):
    vocab, labels, position_ids, shift_labels = batch
    assert_same(number_places(labels, vocab, position_ids), oracle_number_places(labels, vocab, position_ids))
    assert_same(
        next_token_places(labels, vocab, position_ids, shift_labels),
        oracle_next_token_places(labels, vocab, position_ids, shift_labels),
    )


@settings(max_examples=200, deadline=None)
@given(label_batches())
def test_torch_pass_for_other_devices_equals_the_reference(batch):
    # the path tensors on a GPU take, run here on the CPU
    vocab, labels, position_ids, _ = batch
    labels2d = labels.unsqueeze(0) if labels.dim() == 1 else labels
    if labels2d.numel() == 0:
        return
    pos2d = None if position_ids is None else position_ids.reshape(labels2d.shape)
    got = _places_torch(labels2d, vocab, pos2d)
    assert_same(got, oracle_number_places(labels2d, vocab, pos2d))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_stay_on_the_device():
    cpu_labels = encode("x 3.14 and 1.2.3 or 18@5, ⁴5.25 then 12.5.").repeat(3, 1)
    cpu_pos = torch.arange(cpu_labels.shape[1]).remainder(7).repeat(3, 1)  # packed samples of 7 tokens
    cpu_shift = shift_to_next_token(cpu_labels, -100)
    labels, position_ids, shift_labels = cpu_labels.cuda(), cpu_pos.cuda(), cpu_shift.cuda()
    got = number_places(labels, VOCAB, position_ids)
    assert got.device == labels.device
    assert_same(got.cpu(), oracle_number_places(cpu_labels, VOCAB, cpu_pos))
    aligned = next_token_places(labels, VOCAB, position_ids, shift_labels)
    assert aligned.device == labels.device
    assert_same(aligned.cpu(), oracle_next_token_places(cpu_labels, VOCAB, cpu_pos, cpu_shift))


@pytest.mark.parametrize("vocab", [VOCAB, ZERO_VOCAB], ids=["fake", "digits-first"])
def test_kind_table_agrees_with_classify_and_decimal_points(vocab):
    ids = torch.tensor(sorted(set(range(-3, vocab.table_size + 3)) | set(TOKEN_KINDS["outside the table"][:4])))
    digit, family = vocab.classify(ids)
    bare, leading = vocab.decimal_points(ids)
    kind = torch.from_numpy(vocab.kind_table.take(ids.numpy(), mode="clip")).long()
    if vocab.token_zero_has_a_kind:
        kind = torch.where(ids < 0, 0, kind)
    assert torch.equal((kind & 1) != 0, digit >= 0)
    assert torch.equal((kind & 2) != 0, bare | leading)
    assert torch.equal((kind & 4) != 0, (family > 0) | leading)
    assert vocab.kind_table_on(torch.device("cpu")).tolist() == vocab.kind_table.tolist()
    assert vocab.token_zero_has_a_kind == (vocab is ZERO_VOCAB)


# the real tokenizer on GSM8K answers: padded like DataCollatorForSeq2Seq and packed like the multipack collator
@pytest.fixture(scope="module")
def llama_answers():
    from tools.assets import load_tokenizer

    from gsm8k_rows import gsm8k_rows

    tokenizer = load_tokenizer("llama-spm")
    vocab = DigitVocab.from_tokenizer(tokenizer, name="llama-spm")
    question = [tokenizer(row["question"], add_special_tokens=False)["input_ids"] for row in gsm8k_rows(96)]
    answer = [
        tokenizer(row["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for row in gsm8k_rows(96)
    ]
    return vocab, question, answer


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_real_tokenizer_gsm8k_batches_equal_the_reference(llama_answers, data):
    vocab, questions, answers = llama_answers
    picks = data.draw(st.lists(st.integers(0, len(answers) - 1), min_size=1, max_size=8))
    # a sample: question masked with -100 or trained on, then the answer; some cut short
    samples = []
    for k in picks:
        prompt = questions[k] if data.draw(st.booleans()) else [-100] * len(questions[k])
        ids = prompt + answers[k]
        samples.append(ids[: data.draw(st.integers(1, len(ids)))] if data.draw(st.booleans()) else ids)
    packed = data.draw(st.booleans())
    if packed:
        rows = data.draw(st.integers(1, len(samples)))
        groups = [samples[r::rows] for r in range(rows)]
        labels = [[t for s in g for t in s] for g in groups]
        pos = [[p for s in g for p in range(len(s))] for g in groups]
    else:
        labels, pos = samples, [list(range(len(s))) for s in samples]
    width = max(len(r) for r in labels) + data.draw(st.integers(0, 70))
    labels = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    position_ids = torch.tensor([p + [0] * (width - len(p)) for p in pos]) if packed else None
    shift_labels = shift_to_next_token(labels, -100) if data.draw(st.booleans()) else None
    assert_same(number_places(labels, vocab, position_ids), oracle_number_places(labels, vocab, position_ids))
    assert_same(
        next_token_places(labels, vocab, position_ids, shift_labels),
        oracle_next_token_places(labels, vocab, position_ids, shift_labels),
    )


def test_real_tokenizer_whole_gsm8k_batches_equal_the_reference(llama_answers):
    vocab, questions, answers = llama_answers
    samples = [[-100] * len(q) + a for q, a in zip(questions, answers)]
    width = max(len(s) for s in samples)
    padded = torch.tensor([s + [-100] * (width - len(s)) for s in samples])
    packed = torch.tensor([t for s in samples for t in s]).reshape(1, -1)
    position_ids = torch.tensor([p for s in samples for p in range(len(s))]).reshape(1, -1)
    for labels, pos in [(padded, None), (packed, position_ids), (packed[0], position_ids[0])]:
        expected = oracle_number_places(labels, vocab, pos)
        assert (expected != NOT_A_DIGIT).sum() > 1000
        assert_same(number_places(labels, vocab, pos), expected)
        assert_same(next_token_places(labels, vocab, pos), oracle_next_token_places(labels, vocab, pos))
