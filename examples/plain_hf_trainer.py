"""DEL with a plain `transformers.Trainer`, no Axolotl: the core and the collator are all it takes.

    python examples/plain_hf_trainer.py            # a few steps on a tiny local model, on CPU

Each micro-batch adds ``alpha * mean(l_t)`` over its own digits. That is exact without gradient accumulation;
with accumulation, normalise by the digit count of the whole step as ``del_plugin/trainer.py`` does.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq, Trainer, TrainingArguments

from del_plugin.collator import TARGET_PLACES_KEY, NumberSpanCollator
from del_plugin.core import DigitVocab, digit_entropy_loss, shift_to_next_token

EXAMPLES = [
    ("What is 12.5 times 4?", "12.5 * 4 = 50. The answer is 50"),
    ("Tom has 1,234 apples and sells 234. How many are left?", "1234 - 234 = 1000. The answer is 1000"),
    ("A pen costs $3.75. What do 3 pens cost?", "3 * 3.75 = 11.25. The answer is 11.25"),
    ("What is 7 + 8?", "7 + 8 = 15. The answer is 15"),
]


class DigitEntropyTrainer(Trainer):
    def __init__(self, *args, digit_vocab: DigitVocab, del_alpha: float = 0.3, **kwargs):
        super().__init__(*args, **kwargs)
        self.digit_vocab = digit_vocab
        self.del_alpha = del_alpha

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        places = inputs.pop(TARGET_PLACES_KEY)  # never passed to the model's forward
        ce, outputs = super().compute_loss(model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch)
        targets = shift_to_next_token(inputs["labels"], -100)  # logits[:, t] predicts labels[:, t + 1]
        loss = ce + digit_entropy_loss(outputs.logits, targets, places, self.digit_vocab, alpha=self.del_alpha)
        return (loss, outputs) if return_outputs else loss


def tokenize(tokenizer, question: str, answer: str) -> dict:
    prompt = tokenizer(f"Question: {question}\nAnswer: ")["input_ids"]
    target = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return {"input_ids": prompt + target, "labels": [-100] * len(prompt) + target}


def main(argv: list[str] | None = None) -> Trainer:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model folder (default: a tiny local Llama with the Llama-2 tokenizer)")
    parser.add_argument("--output-dir", default="runs/plain_hf_trainer")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.3)
    args = parser.parse_args(argv)
    if args.model is None:
        from del_plugin.assets import tiny_model_dir

        args.model = str(tiny_model_dir("llama-spm"))
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    vocab = DigitVocab.from_tokenizer(tokenizer)
    trainer = DigitEntropyTrainer(
        model=model,
        args=TrainingArguments(
            output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=2,
            learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        ),
        train_dataset=[tokenize(tokenizer, q, a) for q, a in EXAMPLES],
        data_collator=NumberSpanCollator(DataCollatorForSeq2Seq(tokenizer, padding=True), vocab),
        digit_vocab=vocab,
        del_alpha=args.alpha,
    )
    trainer.train()
    return trainer


if __name__ == "__main__":
    main()
