"""DEL beside the cross-entropy kernels that never return logits, their real Triton kernels run by Triton's CPU
interpreter (tests/helpers/fused_kernels.py): Liger's fused linear cross-entropy and cross-entropy (``lce_forward`` and
``LigerForCausalLMLoss`` with ``liger_cross_entropy_kernel`` and ``element_mul_kernel``), for every architecture
of ``LIGER_ARCHITECTURES``, in float32 and bf16; and the Cut Cross Entropy fork's forward (a faithful CPU copy: the
fork is not on PyPI) in float32 with the exact torch loss (CCE's backward needs bf16: tests/hf/test_cce_real.py runs
its real kernel).

LoRA gradients of CE + DEL, DEL read from the hidden states under the fused forward, equal those of the plain
forward with DEL read from its logits."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core.capture import DigitCaptureError

from axolotl_helpers import LIGER, run_logged
from capture_checks import assert_same_step, ce_plus_del_step
from fake_vocab import VOCAB
from fused_kernels import CALLS, apply_liger, cce_style_forward, liger_on_cpu, restored_forwards
from fused_steps import (
    LIGER_ARCHITECTURES,
    assert_close_bf16,
    assert_digits_read_in_eval_without_logits,
    assert_same,
    batch,
    ce_plus_del,
    tiny_lora_model,
)
from number_oracle import oracle_number_errors
from trainer_checks import assert_logs_match

# Liger 0.8.4's apply_liger_kernel_to_mistral(cross_entropy=True) sets modeling_mistral.CrossEntropyLoss, which
# transformers 5's Mistral never calls: `liger_cross_entropy: true` leaves Mistral on torch's cross-entropy
LIGER_CE_NOT_APPLIED = ("mistral",)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("model_type", LIGER_ARCHITECTURES)
def test_liger_fused_linear_cross_entropy(model_type, dtype):
    model = tiny_lora_model(model_type, dtype=dtype)
    bf16 = dtype == torch.bfloat16
    # float32: DEL from the logits (independent of the capture); bf16: from the hidden states in both runs, so that
    # the comparison is of the cross-entropy kernels (the logits are rounded to bf16, DEL's product is float32)
    reference = ce_plus_del(model, from_logits=not bf16)
    before = CALLS["liger_cross_entropy_kernel"], CALLS["element_mul_kernel"]
    with restored_forwards(), liger_on_cpu():
        apply_liger(model_type, fused_linear_cross_entropy=True)
        fused = ce_plus_del(model, from_logits=False)
    assert CALLS["liger_cross_entropy_kernel"] > before[0]  # Liger's real kernel computed the loss
    if bf16:
        assert_close_bf16(reference, fused, has_logits=False)
    else:
        assert_same(reference, fused)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("model_type", LIGER_ARCHITECTURES)
def test_liger_cross_entropy(model_type, dtype):
    """``liger_cross_entropy: true``: Liger's cross-entropy kernel on the model's logits (which are returned)."""
    model = tiny_lora_model(model_type, dtype=dtype)
    bf16 = dtype == torch.bfloat16
    reference = ce_plus_del(model, from_logits=not bf16)
    before = CALLS["liger_cross_entropy_kernel"]
    with restored_forwards(), liger_on_cpu():
        apply_liger(model_type, cross_entropy=True)
        fused = ce_plus_del(model, from_logits=False)
    assert (CALLS["liger_cross_entropy_kernel"] > before) == (model_type not in LIGER_CE_NOT_APPLIED)
    if bf16:
        assert_close_bf16(reference, fused, has_logits=True)
    else:
        assert fused.returned_logits
        assert_same_step(reference, fused)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_cut_cross_entropy_forward_in_training_and_eval(model_type):
    """float32: the exact torch loss inside the fork's forward (CCE's kernel backward needs bf16,
    tests/hf/test_cce_real.py runs it)."""
    model = tiny_lora_model(model_type)
    reference = ce_plus_del(model, from_logits=True)
    with restored_forwards():
        type(model.get_base_model()).forward = cce_style_forward
        assert_same(reference, ce_plus_del(model, from_logits=False))
        # CCE returns no logits in evaluation either; the digit logits are still read
        assert_digits_read_in_eval_without_logits(model)


def number_oracle_mean(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    errors = oracle_number_errors(logits, targets, VOCAB)
    assert len(errors) >= 6
    return sum(errors.values()) / len(errors)


@pytest.mark.interpreter
@pytest.mark.parametrize("kernel", ["liger_fused_linear_cross_entropy", "cut_cross_entropy"])
def test_number_level_criterion_beside_the_fused_kernels(kernel):
    """``ntl_number`` read from the hidden states under a kernel that returns no logits: the loss and every LoRA
    gradient of a slow per-number oracle (tests/helpers/number_oracle.py) on the plain forward's logits."""
    model = tiny_lora_model("llama")
    reference = ce_plus_del_step(model, batch(), VOCAB, from_logits=True, logits_loss=number_oracle_mean)
    with restored_forwards(), liger_on_cpu():
        if kernel == "cut_cross_entropy":
            type(model.get_base_model()).forward = cce_style_forward
        else:
            apply_liger("llama", fused_linear_cross_entropy=True)
        fused = ce_plus_del_step(model, batch(), VOCAB, from_logits=False, criterion="ntl_number")
    assert_same(reference, fused)


def test_cut_cross_entropy_folds_a_lora_head_and_del_reads_the_same_adapter():
    """Axolotl 0.21's fork folds a LoRA adapter on lm_head into its loss (tests/helpers/fused_kernels.py:
    fold_lora_head), calling ``lora_A`` itself: DEL's hook reads that call, so CE and DEL train the same head, and
    every gradient (the head's lora_A and lora_B included) equals the plain forward's."""
    model = tiny_lora_model("llama", head_lora=True)
    reference = ce_plus_del(model, from_logits=True)
    with restored_forwards():
        type(model.get_base_model()).forward = cce_style_forward
        fused = ce_plus_del(model, from_logits=False)
    assert_same(reference, fused)
    assert any("lm_head.lora_A" in n for n in fused[2]) and any("lm_head.lora_B" in n for n in fused[2])


@pytest.mark.interpreter
def test_liger_fused_forward_with_lora_on_the_head_is_refused():
    model = tiny_lora_model("llama", head_lora=True)
    with restored_forwards(), liger_on_cpu():
        apply_liger("llama", fused_linear_cross_entropy=True)
        with pytest.raises(DigitCaptureError, match="did not run in this forward pass"):
            ce_plus_del(model, from_logits=False)


def test_restored_forwards_undoes_the_patches():
    from transformers import LlamaForCausalLM

    original = LlamaForCausalLM.forward
    with restored_forwards():
        LlamaForCausalLM.forward = cce_style_forward
    assert LlamaForCausalLM.forward is original


# ------------------------------------------------------------------------------ in-process Axolotl runs
@pytest.fixture(scope="module")
def axolotl_data(tmp_path_factory):
    from tools.assets import tiny_model_dir
    from tools.cpu import write_alpaca_jsonl

    from gsm8k_rows import gsm8k_rows

    # the 16 shortest of the first 200 problems (about half the average's tokens): the interpreter runs Liger's
    # kernels one token at a time
    rows = sorted(gsm8k_rows(200), key=lambda row: len(row["question"]) + len(row["answer"]))[:16]
    return tiny_model_dir("llama-spm"), write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "d.jsonl", rows)


# the typical all-kernels Liger config (tests/hf/test_liger_real.py says what the interpreter needs for it)
LIGER_ALL_KERNELS = dict(
    liger_rope=True, liger_rms_norm=True, liger_glu_activation=True, liger_fused_linear_cross_entropy=True
)
KERNEL = ("liger_cross_entropy_kernel",)


@pytest.mark.e2e
@pytest.mark.interpreter
def test_axolotl_with_every_cross_entropy_kernel(tmp_path, axolotl_data):
    """The same DEL run (same ``seed``: Axolotl's validation split depends on it) with plain, chunked, Liger's typical
    all-kernels config (RoPE, RMSNorm, SwiGLU and the fused linear cross-entropy) and Liger's cross-entropy
    (``LigerPlugin``, their real kernels under the interpreter), and the Cut Cross Entropy forward (float32: the exact
    torch loss): every DEL metric is logged in training and evaluation, with the same values. (Liger replaces the
    decoder's final norm and the MLPs; DEL's hook must still read the normed hidden state the head reads.)"""
    from transformers import LlamaForCausalLM

    runs = {"plain": run_logged(tmp_path / "plain", axolotl_data)}
    with restored_forwards():  # Axolotl's chunked loss replaces transformers' ForCausalLM loss for the process
        runs["chunked"] = run_logged(tmp_path / "chunked", axolotl_data, chunked_cross_entropy=True)
    for name, keys in (("liger_all", LIGER_ALL_KERNELS), ("liger_ce", {"liger_cross_entropy": True})):
        kernels = ("rms_norm", "rope", "swiglu", "liger_cross_entropy_kernel") if name == "liger_all" else KERNEL
        before = {k: CALLS[k] for k in kernels}
        with restored_forwards(), liger_on_cpu():
            runs[name] = run_logged(tmp_path / name, axolotl_data, plugins=[LIGER, "del_plugin.DELPlugin"], **keys)
            patched = LlamaForCausalLM.forward.__module__
        assert all(CALLS[k] > before[k] for k in kernels), (name, before, CALLS)  # Liger's kernels ran
        assert (patched == "liger_kernel.transformers.model.llama") == (name == "liger_all")
    before = CALLS["cce_style_forward"]
    with restored_forwards():
        LlamaForCausalLM.forward = cce_style_forward
        runs["cce_forward"] = run_logged(tmp_path / "cce", axolotl_data)
    assert CALLS["cce_style_forward"] > before
    assert_logs_match(runs)
