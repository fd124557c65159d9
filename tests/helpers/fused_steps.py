"""The tiny LoRA models and the CE + DEL step the fused cross-entropy tests compare (tests/hf/test_fused_losses.py,
tests/hf/test_cce_real.py, tests/hf/test_liger_real.py): the plain forward with DEL read from its logits against the
fused forward, which returns none, with DEL read from the hidden states."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import DigitLogitsCapture, shift_to_next_token

from capture_checks import Step, assert_same_step, ce_plus_del_step
from fake_vocab import VOCAB, V, encode
from tiny_models import tiny_causal_lm

# The architectures Liger patches (``apply_liger_kernel_to_<type>``) among those DEL accepts, tested with its real
# kernels in tests/hf/test_fused_losses.py. To add one: its model type, if transformers' config class takes the
# keywords of tiny_lora_model, and ``restored_forwards`` (tests/helpers/fused_kernels.py) undoes its patches (add
# its causal-LM class there).
# tests/core/test_architectures.py runs the fused linear cross-entropy alone on every Liger-patched architecture.
LIGER_ARCHITECTURES = ["llama", "mistral", "qwen2"]
H = 24
TEXT = "it costs 12.75 and 3,040 more: 1.5"


def tiny_lora_model(model_type: str, *, head_lora: bool = False, dtype=torch.float32):
    from peft import LoraConfig, get_peft_model

    model = tiny_causal_lm(model_type, V, dtype=dtype, seed=11, hidden_size=H, max_position_embeddings=64)
    targets = ["q_proj", "v_proj", "down_proj"] + (["lm_head"] if head_lora else [])
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.2)
    return model


def batch() -> dict:
    labels = torch.stack([encode(TEXT), encode(TEXT[::-1])])
    labels[0, :5] = -100
    ids = torch.where(labels == -100, 3, labels)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def ce_plus_del(model, *, from_logits: bool, train: bool = True) -> Step:
    return ce_plus_del_step(model, batch(), VOCAB, from_logits=from_logits, train=train)


def assert_same(reference: Step, fused: Step):
    assert reference.returned_logits and not fused.returned_logits  # the fused path really ran without logits
    assert any("lora_A" in n for n in fused.grads)
    assert_same_step(reference, fused)


def assert_digits_read_in_eval_without_logits(model) -> None:
    """An eval forward with labels that returns no logits (Cut Cross Entropy's): the digit logits are still read."""
    model.eval()
    capture = DigitLogitsCapture(model, VOCAB)
    inputs = batch()
    with torch.no_grad(), capture:
        out = model(**inputs)
    assert out.logits is None
    digits = capture.digit_targets(shift_to_next_token(inputs["labels"], -100))
    assert digits.mask.sum() > 0 and torch.isfinite(digits.logits).all()
    capture.remove()


def assert_close_bf16(reference, fused, *, has_logits: bool, rel: float = 0.03):
    """bf16: the same loss within bf16 round-off of the logits; each gradient within ``rel`` of its norm (the
    kernels store the logits' gradient in bf16, the plain path rounds it from float32)."""
    assert fused.returned_logits == has_logits
    assert fused.loss.item() == pytest.approx(reference.loss.item(), rel=2e-3)
    assert fused.grads.keys() == reference.grads.keys() and any("lora_A" in n for n in fused.grads)
    for name in fused.grads:
        ref, got = reference.grads[name].float(), fused.grads[name].float()
        assert (got - ref).norm() <= rel * ref.norm() + 1e-6, name
