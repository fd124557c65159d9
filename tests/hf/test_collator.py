"""The number-span collator around Axolotl's own collators: padded, packed, attributes and pickling."""

from __future__ import annotations

import pickle

import pytest
import torch
from axolotl.utils.collators import DataCollatorForSeq2Seq, V2BatchSamplerDataCollatorForSeq2Seq

from del_plugin.core import DigitVocab, number_places, shift_to_next_token
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.hf.collator import TARGET_PLACES_KEY, NumberSpanCollator
from tools.assets import load_tokenizer

from gsm8k_rows import gsm8k_rows


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("llama-spm")


@pytest.fixture(scope="module")
def vocab(tokenizer):
    return DigitVocab.from_tokenizer(tokenizer)


def features(tokenizer, rows, train_on_inputs=False):
    out = []
    for row in rows:
        prompt = tokenizer(row["question"] + "\n")["input_ids"]
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = prompt + answer
        labels = ids if train_on_inputs else [-100] * len(prompt) + answer
        out.append(
            {
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "labels": list(labels),
                "position_ids": list(range(len(ids))),
            }
        )
    return out


def test_padded_batch_matches_each_sample_alone(tokenizer, vocab):
    feats = features(tokenizer, gsm8k_rows(4))
    collator = NumberSpanCollator(
        DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=64, return_tensors="pt"), vocab
    )
    batch = collator([dict(f) for f in feats])
    places = batch[TARGET_PLACES_KEY]
    assert places.dtype == torch.int32 and places.shape == batch["labels"].shape
    assert places.shape[1] % 64 == 0
    for row, feat in enumerate(feats):
        alone = shift_to_next_token(number_places(torch.tensor(feat["labels"]), vocab), NOT_A_DIGIT)
        n = len(feat["labels"])
        assert torch.equal(places[row, :n], alone)
        assert (places[row, n:] == NOT_A_DIGIT).all()
        assert (alone != NOT_A_DIGIT).sum() > 5  # GSM8K answers are full of digits


def plain_sample(tokenizer, text):
    # piece by piece, so that a leading number is not preceded by a '▁' token
    ids = [i for piece in text.split("|") for i in tokenizer.convert_tokens_to_ids(tokenizer.tokenize(piece))]
    ids = [i for i in ids if tokenizer.convert_ids_to_tokens(i) != "▁"]
    return {
        "input_ids": ids,
        "labels": list(ids),
        "attention_mask": [1] * len(ids),
        "position_ids": list(range(len(ids))),
    }


def test_packed_batch_never_joins_numbers_across_samples(tokenizer, vocab):
    feats = features(tokenizer, gsm8k_rows(4), train_on_inputs=True)
    # one sample ends with digits and the next starts with digits: packed, they are adjacent
    ends_in_digits = plain_sample(tokenizer, "so the total is 72")
    starts_with_digits = plain_sample(tokenizer, "2024| was the year")
    packs = [[ends_in_digits, starts_with_digits, feats[0]], [feats[1], feats[2]]]
    collator = NumberSpanCollator(
        V2BatchSamplerDataCollatorForSeq2Seq(tokenizer, padding=True, return_tensors="pt"), vocab
    )
    batch = collator(packs)
    for row, pack in enumerate(packs):
        per_sample = torch.cat([number_places(torch.tensor(f["labels"]), vocab) for f in pack])
        expected = shift_to_next_token(per_sample, NOT_A_DIGIT)
        assert torch.equal(batch[TARGET_PLACES_KEY][row, : expected.numel()], expected)
    boundary = len(ends_in_digits["labels"])
    places = batch[TARGET_PLACES_KEY][0]
    assert places[boundary - 2].item() == 0  # the '2' of 72 is a units digit ...
    assert places[boundary - 1].item() == 3  # ... and the '2' of 2024 a thousands digit
    # read without position ids, "722024" would be one number
    glued = shift_to_next_token(number_places(batch["labels"][0], vocab), NOT_A_DIGIT)
    assert glued[boundary - 2].item() == 4


def test_wrapper_forwards_attributes_and_pickles(tokenizer, vocab):
    inner = DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=8, return_tensors="pt")
    collator = NumberSpanCollator(inner, vocab)
    assert collator.tokenizer is tokenizer and collator.pad_to_multiple_of == 8
    assert NumberSpanCollator(collator, vocab).collator is inner  # never wrapped twice
    clone = pickle.loads(pickle.dumps(collator))  # data-loader workers may pickle it
    feats = features(tokenizer, gsm8k_rows(2))
    assert torch.equal(
        clone([dict(f) for f in feats])[TARGET_PLACES_KEY], collator([dict(f) for f in feats])[TARGET_PLACES_KEY]
    )


def test_missing_labels_is_a_clear_error(vocab):
    collator = NumberSpanCollator(lambda feats: {"input_ids": torch.zeros(1, 3, dtype=torch.long)}, vocab)
    with pytest.raises(KeyError, match="returned no `labels`"):
        collator([{}])


def test_shift_labels_mask_is_respected(vocab):
    labels = torch.tensor([[5, vocab.family_token_ids[0][1], vocab.family_token_ids[0][2], 7]])
    shift_labels = torch.tensor([[-100, vocab.family_token_ids[0][2], -100, -100]])

    def inner(_):
        return {"labels": labels, "shift_labels": shift_labels}

    places = NumberSpanCollator(inner, vocab)([{}])[TARGET_PLACES_KEY]
    assert places.tolist() == [[NOT_A_DIGIT, 0, NOT_A_DIGIT, NOT_A_DIGIT]]
