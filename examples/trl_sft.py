"""DEL with TRL's SFTTrainer, no Axolotl: ``DELSFTTrainer`` is ``SFTTrainer`` plus ``del_settings``.

    python examples/trl_sft.py                       # a few steps on a tiny local model, on CPU
    python examples/trl_sft.py --packing             # padding-free BFD packing (position_ids per sample)
    python examples/trl_sft.py --loss-type dft       # TRL's loss paths: chunked_nll (default), nll, dft
    python examples/trl_sft.py --model PATH          # any Llama / Mistral / Qwen2 causal LM folder
    python examples/trl_sft.py --train-file train.jsonl --eval-file test.jsonl   # offline: GSM8K's files

The data are GSM8K question/answer pairs (``openai/gsm8k`` from the hub, or its JSONL files, gzipped or not, given
with ``--train-file`` / ``--eval-file``) as a prompt-completion dataset, so TRL trains on the completions only
(``completion_only_loss``) and DEL's digit targets are the digits of the answers. Logged: ``loss`` (= ``ce_loss`` +
``del_loss``), ``del_l_num``, ``digit_entropy``, ``digit_accuracy``, ``digit_targets``, and their ``eval_`` twins.
"""

from __future__ import annotations

import argparse
import gzip
import json
from itertools import islice

import torch
from datasets import Dataset, load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig

from del_plugin.hf import DELSettings
from del_plugin.hf.settings import DEFAULT_ALPHA
from del_plugin.hf.trl import DELSFTTrainer


def clone_tiny_model():
    """The default model in a clone of del-plugin: a tiny Llama its tools/ build offline (tests, docs)."""
    try:
        from tools.assets import tiny_model_dir
    except ImportError:
        raise SystemExit("--model is required: name a model folder (the tiny default exists only in a clone)") from None
    return tiny_model_dir("llama-spm")


def gsm8k_rows(n: int, split: str, path: str | None = None) -> list[dict]:
    """The first ``n`` GSM8K rows of ``split`` ({"question", "answer"}): from ``path`` (JSONL, ``.gz`` or not, as
    openai/grade-school-math's files) where given, else ``openai/gsm8k`` from the hub."""
    if path is None:
        return [dict(row) for row in load_dataset("openai/gsm8k", "main", split=f"{split}[:{n}]")]
    with (gzip.open if path.endswith(".gz") else open)(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in islice(handle, n)]


def gsm8k_dataset(rows: list[dict], conversational: bool = False) -> Dataset:
    if conversational:
        return Dataset.from_list(
            [
                {
                    "prompt": [{"role": "user", "content": r["question"]}],
                    "completion": [{"role": "assistant", "content": r["answer"]}],
                }
                for r in rows
            ]
        )
    # the space opens the completion: a prompt ending in a space tokenizes differently alone and before the answer
    return Dataset.from_list(
        [{"prompt": f"Question: {r['question']}\nAnswer:", "completion": " " + r["answer"]} for r in rows]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default, in a clone: a tiny Llama with the Llama-2 tokenizer)")
    parser.add_argument("--output-dir", default="runs/trl_sft")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--criterion", default="del")
    parser.add_argument("--loss-type", choices=("chunked_nll", "nll", "dft"), default="chunked_nll")
    parser.add_argument("--packing", action="store_true", help="padding-free BFD packing")
    parser.add_argument("--chat", action="store_true", help="conversational prompt-completion (chat template)")
    parser.add_argument("--rows", type=int, default=16, help="GSM8K training rows (a quarter as many for eval)")
    parser.add_argument("--train-file", help="GSM8K's train split as a local JSONL file (default: openai/gsm8k)")
    parser.add_argument("--eval-file", help="GSM8K's test split as a local JSONL file (default: openai/gsm8k)")
    parser.add_argument("--eval-steps", type=int, default=0, help="evaluate every N steps (0: no evaluation)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--lora", action="store_true", help="train a LoRA adapter (r=8 on q_proj, v_proj)")
    return parser.parse_args(argv)


def build_trainer(
    argv: list[str] | None = None, rows: list[dict] | None = None, eval_rows: list[dict] | None = None, **config
) -> DELSFTTrainer:
    """The trainer of the command line ``argv``; ``rows`` and ``eval_rows`` replace the GSM8K rows, ``config``
    overrides ``SFTConfig`` fields."""
    args = parse_args(argv)
    if args.model is None:
        args.model = str(clone_tiny_model())
    train = rows if rows is not None else gsm8k_rows(args.rows, "train", args.train_file)
    held_out = None
    if args.eval_steps:
        held_out = eval_rows if eval_rows is not None else gsm8k_rows(max(args.rows // 4, 2), "test", args.eval_file)
    sft_config = dict(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=1e-3,
        logging_steps=1,
        max_length=args.max_length,
        packing=args.packing,
        loss_type=args.loss_type,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        bf16=False,  # CPU: fp32
    )
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    return DELSFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
        processing_class=AutoTokenizer.from_pretrained(args.model),
        args=SFTConfig(**{**sft_config, **config}),
        train_dataset=gsm8k_dataset(train, args.chat),
        eval_dataset=gsm8k_dataset(held_out, args.chat) if args.eval_steps else None,
        peft_config=lora if args.lora else None,
        del_settings=DELSettings(criterion=args.criterion, alpha=args.alpha),
    )


def main(argv: list[str] | None = None) -> DELSFTTrainer:
    trainer = build_trainer(argv)
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
