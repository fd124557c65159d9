"""The typical all-kernels Liger config (``liger_rope``, ``liger_rms_norm``, ``liger_glu_activation``,
``liger_fused_linear_cross_entropy``) with DEL, every kernel Liger's real Triton code under Triton's CPU
interpreter.

Without the test-only shims of tests/helpers/fused_kernels.py (``interpreter_shims``) this config fails inside the
interpreter with ``InterpreterError: AttributeError("'float' object has no attribute 'to'")``: Liger's RMSNorm
kernel calls ``eps.to(tl.float32)`` (and its SwiGLU kernel ``gate_multiplier.to(tl.float32)``) on a float argument,
which compiled Triton passes as an fp32 scalar and the interpreter (Triton 3.8.0) leaves a Python float; RMSNorm's
``rsqrt`` then comes from CUDA's libdevice, which the interpreter evaluates to None. Both are interpreter
limitations, not Liger's or DEL's: the shims convert the float as compiled Triton does and compute ``rsqrt`` with
``tl.rsqrt``. Liger's RoPE kernel runs unshimmed. The kernels themselves run unchanged.

The point for DEL: Liger replaces the decoder's final norm module (``LigerRMSNorm``) and the MLPs; DEL's hook must
still read the final, normed hidden state that the head reads. The same config in an in-process Axolotl run:
tests/hf/test_fused_losses.py::test_axolotl_with_every_cross_entropy_kernel."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import DigitLogitsCapture

from fake_vocab import VOCAB
from fused_kernels import CALLS, apply_liger, liger_on_cpu, restored_forwards
from fused_steps import LIGER_ARCHITECTURES, assert_same, batch, ce_plus_del, tiny_lora_model

pytestmark = pytest.mark.interpreter
ALL_KERNELS = dict(fused_linear_cross_entropy=True, rope=True, rms_norm=True, swiglu=True)


@pytest.mark.parametrize("model_type", LIGER_ARCHITECTURES)
def test_all_kernels_read_the_final_hidden_state(model_type):
    from liger_kernel.transformers.rms_norm import LigerRMSNorm
    from liger_kernel.transformers.swiglu import LigerSwiGLUMLP

    plain = tiny_lora_model(model_type)
    reference = ce_plus_del(plain, from_logits=True)  # DEL from the plain model's own logits
    inputs = batch()
    with torch.no_grad():
        plain_logits = plain(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    before = {k: CALLS[k] for k in ("rms_norm", "rope", "swiglu", "liger_cross_entropy_kernel")}
    with restored_forwards(), liger_on_cpu():
        apply_liger(model_type, **ALL_KERNELS)  # class-level, as Axolotl's LigerPlugin does before loading
        model = tiny_lora_model(model_type)  # the same seed: the same weights, in Liger's modules
        decoder = model.get_base_model().model
        assert isinstance(decoder.norm, LigerRMSNorm) and isinstance(decoder.layers[0].mlp, LigerSwiGLUMLP)
        for name, p in plain.state_dict().items():
            torch.testing.assert_close(model.state_dict()[name], p, rtol=0, atol=0, msg=name)

        # the digit logits DEL reads under the fused forward (no logits) equal the plain model's own
        model.train()
        capture = DigitLogitsCapture(model, VOCAB)
        with torch.no_grad(), capture:
            out = model(**inputs)
        assert out.logits is None
        torch.testing.assert_close(
            capture.digit_logits(), plain_logits[..., VOCAB.family_ids(plain_logits.device)], rtol=1e-5, atol=1e-5
        )
        capture.remove()
        fused = ce_plus_del(model, from_logits=False)
    assert all(CALLS[k] > before[k] for k in before), (before, CALLS)  # every kernel really ran
    assert_same(reference, fused)
