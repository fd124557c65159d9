"""DEL with a plain `transformers.Trainer`, no Axolotl: the mixin is all it takes.

    python examples/plain_hf_trainer.py            # a few steps on a tiny local model, on CPU

``DELTrainerMixin`` wraps the collator (adding each digit target's place), reads the digit logits from the final
hidden states, adds ``alpha * L_num`` normalised over the digits of the whole optimizer step (any accumulation,
any number of GPUs), and logs ``ce_loss``, ``del_loss``, ``del_l_num``, ``digit_entropy``, ``digit_accuracy`` and
``digit_targets``.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

from del_plugin.hf import DELSettings, DELTrainerMixin
from del_plugin.hf.settings import DEFAULT_ALPHA

EXAMPLES = [
    ("What is 12.5 times 4?", "12.5 * 4 = 50. The answer is 50"),
    ("Tom has 1,234 apples and sells 234. How many are left?", "1234 - 234 = 1000. The answer is 1000"),
    ("A pen costs $3.75. What do 3 pens cost?", "3 * 3.75 = 11.25. The answer is 11.25"),
    ("What is 7 + 8?", "7 + 8 = 15. The answer is 15"),
]


class DELTrainer(DELTrainerMixin, Trainer):
    pass


def clone_tiny_model():
    """The default model in a clone of del-plugin: a tiny Llama its tools/ build offline (tests, docs)."""
    try:
        from tools.assets import tiny_model_dir
    except ImportError:
        raise SystemExit("--model is required: name a model folder (the tiny default exists only in a clone)") from None
    return tiny_model_dir("llama-spm")


def tokenize(tokenizer, question: str, answer: str) -> dict:
    prompt = tokenizer(f"Question: {question}\nAnswer: ")["input_ids"]
    target = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}


def build_trainer(argv: list[str] | None = None, **training_args) -> DELTrainer:
    """The trainer of the command line ``argv``; ``training_args`` override ``TrainingArguments`` fields."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default, in a clone: a tiny Llama with the Llama-2 tokenizer)")
    parser.add_argument("--output-dir", default="runs/plain_hf_trainer")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    parser.add_argument("--criterion", default="del", help="del_criterion: del, ntl_number, ... (docs/criteria.md)")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=1)
    args = parser.parse_args(argv)
    if args.model is None:
        args.model = str(clone_tiny_model())
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    arguments = dict(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
    )
    return DELTrainer(
        model=AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32),
        args=TrainingArguments(**{**arguments, **training_args}),
        train_dataset=[tokenize(tokenizer, q, a) for q, a in EXAMPLES],
        data_collator=DataCollatorForSeq2Seq(tokenizer, padding=True),
        processing_class=tokenizer,
        del_settings=DELSettings(criterion=args.criterion, alpha=args.alpha),
    )


def main(argv: list[str] | None = None) -> Trainer:
    trainer = build_trainer(argv)
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
