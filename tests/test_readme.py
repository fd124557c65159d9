"""The README's standalone example, run as written on a bf16 model whose logits it casts to float: both ways of
reading the digits give the same loss and the same gradients."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def standalone_example() -> str:
    text = README.read_text(encoding="utf-8")
    marker = text.index("<!-- standalone-example:")
    match = re.compile(r"```python\n(.*?)```", re.S).search(text, marker)
    assert match, "the README's standalone example is missing"
    return match.group(1)


def test_readme_standalone_example_runs_on_a_bf16_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer, DataCollatorForSeq2Seq

    from del_plugin.assets import gsm8k_rows, tiny_model_dir

    model_dir = tiny_model_dir("llama-spm")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    features = []
    for row in gsm8k_rows(2):
        prompt = tokenizer(row["question"] + "\n")["input_ids"]
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"]
        features.append({"input_ids": prompt + answer, "labels": [-100] * len(prompt) + answer})
    scope = {
        "tokenizer": tokenizer,
        "model": model,
        "features": features,
        "DataCollatorForSeq2Seq": DataCollatorForSeq2Seq,
    }
    exec(compile(standalone_example(), "README.md", "exec"), scope)

    assert scope["outputs"].logits.dtype == torch.bfloat16
    loss, logits_loss = scope["loss"], scope["logits_loss"]
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    # the two digit terms: from float32 products of bf16 h and W, and from the bf16 logits cast to float
    assert logits_loss.item() == pytest.approx(loss.item(), rel=1e-2)
    digit_term = loss - scope["outputs"].loss
    assert digit_term.item() > 0
    grads = []  # of the digit terms alone, so that the cross-entropy cannot hide a difference
    for total in (loss, logits_loss):
        model.zero_grad(set_to_none=True)
        (total - scope["outputs"].loss).backward(retain_graph=True)
        grads.append({n: p.grad.float().clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        scale = grads[1][name].abs().max().clamp(min=1e-12)
        assert (grads[0][name] - grads[1][name]).abs().max() <= 0.05 * scale, name  # bf16 rounding of the logits
    assert any(g.abs().max() > 0 for g in grads[0].values())
