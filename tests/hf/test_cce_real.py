"""DEL beside Cut Cross Entropy's real Triton kernels (PyPI's cut-cross-entropy 25.1.1, Apple's), run by Triton's
CPU interpreter with the test-only shims of tests/helpers/fused_kernels.py.

What stops CCE's kernel in the plain interpreter: ``_cce_lse_forward_kernel`` merges each block's log-sum-exp with
``tl_logaddexp``, which calls ``tl_log1p`` = ``triton.language.extra.libdevice.log1p``, a CUDA libdevice extern; the
interpreter (Triton 3.8.0) evaluates it to None, and the addition that follows fails: ``AttributeError: 'NoneType'
object has no attribute 'type'`` (test_what_stops_the_kernel_without_the_shims). Past it, bf16 (the only dtype its
backward takes) is the next: the interpreter multiplies bf16 bit patterns as integers (a bf16 loss of 4e10). The
shims compute ``log1p`` as ``log(1 + x)`` and bf16 arithmetic in float32; the kernels run unchanged.

What does not run here: Axolotl's CutCrossEntropyPlugin needs Axolotl's fork (``cut_cross_entropy.transformers``,
not on PyPI), and the fork's ``cce_linear_cross_entropy`` refuses any machine without an Ampere GPU before its
kernels. Its patched forward is copied in tests/helpers/fused_kernels.py (``cce_style_forward``); here that copy calls
the
PyPI kernels, an older version of the fork's (the fork adds Kahan summation and chunked classifier gradients).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fused_kernels import CALLS, cce_style_forward, interpreter_shims, restored_forwards
from fused_steps import (
    LIGER_ARCHITECTURES,
    assert_close_bf16,
    assert_digits_read_in_eval_without_logits,
    ce_plus_del,
    tiny_lora_model,
)

pytest.importorskip("cut_cross_entropy")
pytestmark = pytest.mark.interpreter


def embeddings():
    torch.manual_seed(0)
    e = torch.randn(40, 32).bfloat16().requires_grad_()
    c = (0.3 * torch.randn(300, 32)).bfloat16().requires_grad_()
    targets = torch.randint(0, 300, (40,))
    targets[:5] = -100
    return e, c, targets


def test_the_kernel_alone_is_the_cross_entropy():
    from cut_cross_entropy import linear_cross_entropy

    e, c, targets = embeddings()
    exact = F.cross_entropy(e.float() @ c.float().T, targets, ignore_index=-100)
    want = torch.autograd.grad(exact, (e, c))
    with interpreter_shims():
        loss = linear_cross_entropy(e, c, targets, filter_eps=None)  # no gradient filtering: the exact gradient
        got = torch.autograd.grad(loss, (e, c))
    assert loss.item() == pytest.approx(exact.item(), rel=1e-4)
    for g, w in zip(got, want):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=2e-3)  # bf16 gradients: one bf16 step


def test_what_stops_the_kernel_without_the_shims():
    from cut_cross_entropy import linear_cross_entropy
    from triton.runtime.errors import InterpreterError

    e, c, targets = embeddings()
    with pytest.raises(InterpreterError, match=r"NoneType.{0,4} object has no attribute .{0,4}type"):
        linear_cross_entropy(e, c, targets)


@pytest.mark.parametrize("model_type", LIGER_ARCHITECTURES)
def test_del_beside_the_cce_kernel_in_training_and_eval(model_type):
    """bf16 LoRA model: CE + DEL under the fork's forward with CCE's real kernel equal CE + DEL of the plain forward
    (DEL from the hidden states in both: the comparison is of the cross-entropy kernels); in evaluation CCE returns
    no logits and DEL still reads its digits."""
    model = tiny_lora_model(model_type, dtype=torch.bfloat16)
    reference = ce_plus_del(model, from_logits=False)
    before = CALLS["cce_kernel"]
    with restored_forwards(), interpreter_shims():
        type(model.get_base_model()).forward = cce_style_forward
        fused = ce_plus_del(model, from_logits=False)
        assert CALLS["cce_kernel"] > before  # the real kernel computed the loss
        # 5%: CCE's backward also rounds the hidden states' gradient blocks to bf16 (measured: 3.0% at most here)
        assert_close_bf16(reference, fused, has_logits=False, rel=0.05)

        assert_digits_read_in_eval_without_logits(model)


def test_axolotl_cce_plugin_stops_at_its_fork_check():
    """Axolotl's CCE plugin path, as far as it runs here: its pre_model_load refuses PyPI's package (no
    ``cut_cross_entropy.transformers``) and names Axolotl's fork."""
    from axolotl.integrations.cut_cross_entropy import CutCrossEntropyPlugin
    from axolotl.utils.dict import DictDefault

    cfg = DictDefault(cut_cross_entropy=True, model_config_type="llama")
    with pytest.raises(ImportError, match="fork of cut_cross_entropy") as err:
        CutCrossEntropyPlugin().pre_model_load(cfg)
    assert "ml-cross-entropy.git" in str(err.value)
