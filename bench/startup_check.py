"""The start-up check's cost (``DigitLogitsCapture.check_against_logits``) against one training step, in one process.

SmolLM2-135M-Instruct (the demo's model, float32 on CPU) with LoRA on every linear layer; a training step of
``--batch`` rows x ``--tokens`` tokens (forward + backward of CE + DEL, as the trainer computes it) against the
check's forward of one row of 64 tokens. Prints the medians of ``--rounds`` timings and their ratio.

    python bench/startup_check.py --batch 4 --tokens 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from del_plugin.core import DigitLogitsCapture, DigitVocab, next_token_places, shift_to_next_token
    from del_plugin.core.criteria import digit_criterion_terms
    from tools.assets import smollm2_dir

    torch.manual_seed(0)
    model_dir = smollm2_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    vocab = DigitVocab.from_tokenizer(tokenizer)
    capture = DigitLogitsCapture(model, vocab)
    text = " ".join(f"{i * 37 % 1000}.{i % 10} + {i * 13} = {i * 50 + 0.5}" for i in range(args.tokens))
    ids = tokenizer(text, return_tensors="pt")["input_ids"][:, : args.tokens].repeat(args.batch, 1)
    labels = ids.clone()

    def step() -> None:
        model.zero_grad(set_to_none=True)
        with capture:
            out = model(input_ids=ids, labels=labels)
        targets = shift_to_next_token(labels, -100)
        digits = capture.digit_targets(targets)
        term = digit_criterion_terms("del", digits, next_token_places(labels, vocab)).sum() / digits.mask.sum()
        (out.loss + 0.03 * term).backward()

    def check() -> float:
        return capture.check_against_logits(model, ids[:1, :64])

    def timed(fn) -> float:
        started = time.perf_counter()
        fn()
        return time.perf_counter() - started

    model.train()
    step(), check()  # warm-up
    steps, checks = [], []
    for _ in range(args.rounds):
        steps.append(timed(step))
        checks.append(timed(check))
    step_s, check_s = statistics.median(steps), statistics.median(checks)
    print(f"training step ({args.batch} x {args.tokens} tokens): {step_s * 1000:.0f} ms (median of {args.rounds})")
    print(f"start-up check (1 x 64 tokens): {check_s * 1000:.1f} ms; difference measured {check():.3g}")
    print(f"ratio check / step: {check_s / step_s:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
