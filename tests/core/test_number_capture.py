"""Number tokens read from the hidden states: the slot logits of ``h · W[number rows]ᵀ`` at number targets equal
those of the model's full logits, with the same gradients, inside real Hugging Face causal LMs (plain, tied,
soft-capped, with a head bias, LoRA on the head, checkpointed), and the start-up check measures them.

The vocabulary is a small hand-made one that cuts digit runs left to right into chunks of three, as Llama-3's
``\\p{N}{1,3}`` does; ``tests/core/test_multi_digit.py`` holds the definition's oracle on the real Llama-3 tokenizer."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import (
    DigitLogitsCapture,
    digit_criterion_loss,
    digit_targets_from_hidden,
    digit_targets_from_logits,
    next_token_places,
    shift_to_next_token,
)
from del_plugin.core.capture import DigitCaptureError, LogitsMismatch
from del_plugin.core.places import NOT_A_DIGIT

from capture_checks import AllocationsOfShape
from chunked_vocab import TEXT, TOKENS, VOCAB, H, V, assert_same_step, batch, encode, step, tiny_causal_lm
from tiny_models import lora


def targets_and_places(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return shift_to_next_token(labels, -100), next_token_places(labels, VOCAB)


def test_the_vocabulary_and_its_slots():
    assert VOCAB.max_digits == 3 and len(VOCAB.number_row_ids) == 1110
    labels = batch()["labels"]
    targets, places = targets_and_places(labels)
    digit_chars = sum(ch.isdigit() for ch in TEXT)
    assert int((places[0] != NOT_A_DIGIT).sum()) == digit_chars  # one slot per digit character
    pieces = [TOKENS[i] for i in labels[0].tolist()]
    assert pieces[pieces.index("123") : pieces.index("123") + 3] == ["123", "456", "78"]


# ------------------------------------------------------------------------------------------------ the maths
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_trainable", [True, False])
def test_hidden_path_equals_the_logits_path(dtype, head_trainable):
    torch.manual_seed(3)
    targets, places = targets_and_places(batch()["labels"])
    hidden = (torch.randn(*targets.shape, H) * 2).to(dtype)
    weight = torch.randn(V, H).to(dtype)
    # the reference: float32 logits of the same half-precision inputs
    h_ref, w_ref = hidden.float().requires_grad_(), weight.float().requires_grad_(head_trainable)
    hidden.requires_grad_()
    weight.requires_grad_(head_trainable)
    got = digit_targets_from_hidden(hidden, weight, targets, VOCAB)
    want = digit_targets_from_logits(h_ref @ w_ref.T, targets, VOCAB)
    assert got.logits.dtype == torch.float32 and got.logits.shape == (*targets.shape, 3, 10)
    assert torch.equal(got.mask, want.mask) and torch.equal(got.target, want.target)
    torch.testing.assert_close(got.logits[got.mask], want.logits[want.mask], rtol=1e-5, atol=1e-5)
    digit_criterion_loss("del", got, places).backward()
    digit_criterion_loss("del", want, places).backward()
    pairs = [(hidden, h_ref)] + ([(weight, w_ref)] if head_trainable else [])
    for ours, reference in pairs:
        assert ours.grad.dtype == dtype
        scale = reference.grad.abs().max()
        # half precision: the gradient of h is rounded to its dtype once
        tol = 1e-5 if dtype == torch.float32 else 2.0 ** -(8 if dtype == torch.bfloat16 else 11)
        assert (ours.grad.float() - reference.grad).abs().max() <= tol * scale


def test_only_number_targets_are_computed_and_no_head_sized_gradient():
    torch.manual_seed(4)
    targets, places = targets_and_places(batch()["labels"])
    n = targets.numel()
    hidden = torch.randn(*targets.shape, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    with AllocationsOfShape() as seen:
        loss = digit_criterion_loss("del", digit_targets_from_hidden(hidden, weight, targets, VOCAB), places)
        loss.backward()
    # no [N, V] logits and no [N, 1000] block over all positions: the 3-digit rows only where a target has 3 digits
    three = int(((places != NOT_A_DIGIT).sum(-1) == 3).sum())
    assert 0 < three < n
    assert (n, V) not in seen.shapes and (n, 1000) not in seen.shapes and (three, 1000) in seen.shapes
    # DEL alone: the weight's one [V, H] gradient, its 1,110 number rows added in place
    assert seen.shapes.count((V, H)) == 1
    rows = torch.tensor(VOCAB.number_row_ids)
    others = torch.ones(V, dtype=torch.bool)
    others[rows] = False
    assert weight.grad[others].abs().max() == 0 and weight.grad[rows].abs().max() > 0


def test_the_head_rows_are_not_copied_for_the_backward():
    """What the graph keeps from the forward to the backward: the hidden states and the weight themselves (no
    copies of them: 1,110 rows of 4,096 are 9 MB in bf16, which a step with few tokens would notice), the positions
    and small per-slot tensors."""
    torch.manual_seed(6)
    targets, places = targets_and_places(batch()["labels"])
    hidden = torch.randn(*targets.shape, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = digit_criterion_loss("del", digit_targets_from_hidden(hidden, weight, targets, VOCAB), places)
    wide = [t for t in saved if t.shape[-1:] == (H,)]  # whatever holds hidden-sized rows
    own = {hidden.untyped_storage().data_ptr(), weight.untyped_storage().data_ptr()}
    assert wide and all(t.untyped_storage().data_ptr() in own for t in wide)
    loss.backward()
    assert weight.grad is not None and hidden.grad is not None


def test_a_batch_without_numbers_gives_zero_with_a_graph():
    labels = encode("no digits here, at all").unsqueeze(0)
    targets, places = targets_and_places(labels)
    hidden = torch.randn(*targets.shape, H, requires_grad=True)
    weight = torch.randn(V, H, requires_grad=True)
    loss = digit_criterion_loss("del", digit_targets_from_hidden(hidden, weight, targets, VOCAB), places)
    assert loss.item() == 0.0
    loss.backward()
    assert hidden.grad.abs().max() == 0
    assert weight.grad is None  # no number row was read, so none got a gradient


# ------------------------------------------------------------------------------------- inside a causal LM


MODELS = {
    "llama": {},
    "qwen2": {"tie_word_embeddings": True},
    "gemma2": {
        "final_logit_softcapping": 2.0,
        "head_dim": 6,
    },  # a cap that bends the logits: a plain h · Wᵀ would be wrong
    "phi": {"num_attention_heads": 2, "num_key_value_heads": 2},  # a head with a bias; an even rotary part
}


@pytest.mark.parametrize("model_type", list(MODELS))
def test_capture_gives_the_logits_path_and_the_check_passes(model_type):
    model = tiny_causal_lm(model_type, **MODELS[model_type])
    if model_type == "phi":
        torch.nn.init.normal_(model.lm_head.bias, std=1.0)
    capture = DigitLogitsCapture(model, VOCAB)
    inputs = batch()
    assert capture.check_against_logits(model, inputs["input_ids"]) <= 1e-5
    capture.remove()
    assert_same_step(step(model, "hidden"), step(model, "logits"))


def test_the_check_measures_a_wrong_reading(monkeypatch):
    model = tiny_causal_lm("gemma2", **MODELS["gemma2"])
    capture = DigitLogitsCapture(model, VOCAB)
    capture.transform = None  # as if the table had no soft cap for gemma2
    with pytest.raises(LogitsMismatch):
        capture.check_against_logits(model, batch()["input_ids"])


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing(reentrant):
    model = tiny_causal_lm()
    model.train()
    plain = step(model, "logits")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    if reentrant:
        model.enable_input_require_grads()
    assert_same_step(step(model, "hidden"), plain)


def test_lora_on_the_head_with_dropout():
    model = lora(tiny_causal_lm(), target_modules=["q_proj", "lm_head"], lora_dropout=0.5)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-zero adapter, so that leaving it out would show
    model.train()
    torch.manual_seed(9)
    hidden = step(model, "hidden")
    torch.manual_seed(9)
    assert_same_step(hidden, step(model, "logits"))
    assert any("lm_head.lora_B" in n for n in hidden.grads)


def test_modules_to_save_head():
    model = lora(tiny_causal_lm(), target_modules=["q_proj"], modules_to_save=["lm_head"])
    hidden = step(model, "hidden")
    assert any("modules_to_save" in n and "lm_head" in n for n in hidden.grads)
    assert_same_step(hidden, step(model, "logits"))


def test_a_forward_is_read_once_and_then_let_go():
    model = tiny_causal_lm()
    capture = DigitLogitsCapture(model, VOCAB)
    inputs = batch()
    targets, _ = targets_and_places(inputs["labels"])
    with capture:
        model(**inputs)
    with pytest.raises(DigitCaptureError, match="capture.digit_targets"):
        capture.digit_logits()  # number slots depend on the target
    first = capture.digit_targets(targets)
    assert capture.digit_targets(targets) is first
    assert capture.reader.forward is None  # the decoder's output is not kept past its read
    with pytest.raises(DigitCaptureError, match="read once"):
        capture.digit_targets(targets.clone())


def test_half_precision_models_stay_finite():
    for dtype in (torch.bfloat16, torch.float16):
        model = tiny_causal_lm(dtype=dtype)
        inputs = batch()
        targets, places = targets_and_places(inputs["labels"])
        capture = DigitLogitsCapture(model, VOCAB)
        with capture:
            out = model(**inputs)
        loss = out.loss.float() + digit_criterion_loss("del", capture.digit_targets(targets), places, alpha=1.0)
        loss.backward()
        assert torch.isfinite(loss)
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


# ------------------------------------------------------------------------------------------ fused losses
@pytest.mark.interpreter
def test_liger_fused_linear_cross_entropy_with_number_tokens():
    """Liger's real FLCE kernel (Triton's interpreter, set by conftest) computes the cross-entropy without logits;
    the number slots read beside it give the loss and gradients of the plain model's logits path."""
    from fused_kernels import CALLS, apply_liger, liger_on_cpu, restored_forwards

    model = tiny_causal_lm()
    reference = step(model, "logits")
    before = CALLS["liger_cross_entropy_kernel"]
    with restored_forwards(), liger_on_cpu():
        apply_liger("llama", fused_linear_cross_entropy=True)
        inputs = batch()
        capture = DigitLogitsCapture(model, VOCAB)
        with capture:
            out = model(**inputs)
        assert out.logits is None  # the fused path really ran without logits
        fused = step(model, "hidden")
    assert CALLS["liger_cross_entropy_kernel"] > before
    assert_same_step(fused, reference)
