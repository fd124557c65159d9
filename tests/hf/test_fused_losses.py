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

from del_plugin.core import DigitLogitsCapture, shift_to_next_token
from del_plugin.core.capture import DigitCaptureError

from capture_checks import Step, assert_same_step, ce_plus_del_step
from fake_vocab import VOCAB, V, encode
from fused_kernels import CALLS, apply_liger, cce_style_forward, liger_on_cpu, restored_forwards
from number_oracle import oracle_number_errors
from tiny_models import tiny_causal_lm
from trainer_checks import LOGGED_KEYS

# The architectures Liger patches (``apply_liger_kernel_to_<type>``) among those DEL accepts, tested here with its
# real kernels. To add one: its model type, if transformers' config class takes the keywords of tiny_lora_model, and
# ``restored_forwards`` (tests/helpers/fused_kernels.py) undoes its patches (add its causal-LM class there).
# tests/core/test_architectures.py runs the fused linear cross-entropy alone on every Liger-patched architecture.
LIGER_ARCHITECTURES = ["llama", "mistral", "qwen2"]
# Liger 0.8.4's apply_liger_kernel_to_mistral(cross_entropy=True) sets modeling_mistral.CrossEntropyLoss, which
# transformers 5's Mistral never calls: `liger_cross_entropy: true` leaves Mistral on torch's cross-entropy
LIGER_CE_NOT_APPLIED = ("mistral",)
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
    from del_plugin.evaluation.gsm8k import gsm8k_rows
    from tools.assets import tiny_model_dir
    from tools.cpu import write_alpaca_jsonl

    # the 16 shortest of the first 200 problems (about half the average's tokens): the interpreter runs Liger's
    # kernels one token at a time
    rows = sorted(gsm8k_rows(200), key=lambda row: len(row["question"]) + len(row["answer"]))[:16]
    return tiny_model_dir("llama-spm"), write_alpaca_jsonl(tmp_path_factory.mktemp("data") / "d.jsonl", rows)


LIGER = "axolotl.integrations.liger.LigerPlugin"
# the typical all-kernels Liger config (tests/hf/test_liger_real.py says what the interpreter needs for it)
LIGER_ALL_KERNELS = dict(
    liger_rope=True, liger_rms_norm=True, liger_glu_activation=True, liger_fused_linear_cross_entropy=True
)
KERNEL = ("liger_cross_entropy_kernel",)


def run_logged(tmp_path, data, **overrides):
    from axolotl_helpers import cpu_config, run_axolotl
    from trainer_checks import eval_logs, train_logs

    model_dir, dataset = data
    # 2 steps of 2 rows and 2 evaluation rows: the interpreter runs Liger's kernels one token at a time
    keys = dict(val_set_size=0.125, eval_steps=2, max_steps=2, gradient_accumulation_steps=1) | overrides
    cfg = cpu_config(tmp_path, model_dir, dataset, **keys)
    trainer = run_axolotl(cfg)
    return train_logs(trainer), eval_logs(trainer)


def assert_logs_match(runs: dict, reference: str = "plain"):
    ref_train, ref_eval = runs[reference]
    for name, (train, evals) in runs.items():
        assert len(train) == len(ref_train) == 2 and len(evals) == len(ref_eval) >= 1, name
        for prefix, got, want in [("", train[0], ref_train[0]), ("eval_", evals[-1], ref_eval[-1])]:
            for key in ("loss",) + LOGGED_KEYS:
                assert got[prefix + key] == pytest.approx(want[prefix + key], rel=1e-4, abs=1e-6), (name, key)
            assert got[prefix + "ce_loss"] + got[prefix + "del_loss"] == pytest.approx(got[prefix + "loss"], rel=1e-5)
            assert got[prefix + "digit_targets"] > 0 and got[prefix + "del_loss"] > 0


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
