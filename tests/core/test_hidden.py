"""Digit logits from the final hidden states: equal to the full logits' digits, the same gradients, no [V, H]
gradient for the head, and read inside real Hugging Face causal LMs (plain, LoRA, tied, checkpointed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from del_plugin.core import (
    DigitLogitsCapture,
    digit_criterion_loss,
    digit_targets_from_hidden,
    digit_targets_from_logits,
    next_token_places,
    number_places,
    shift_to_next_token,
)
from del_plugin.core.capture import DigitCaptureError
from del_plugin.core.criteria import del_token_losses
from del_plugin.core.digits import select_digit_family
from del_plugin.core.hidden import digit_logits_from_hidden
from del_plugin.core.places import place_weights

import tiny_models
from capture_checks import Step, assert_same_step, ce_plus_del_step
from fake_vocab import VOCAB, V, encode
from tiny_models import lora

TEXT = "pay 1,234.50 for ⁷8 items, not 42 or .5"
H = 24


def aligned_batch(rows: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.stack([encode(TEXT)] * rows)
    labels[1:, :4] = -100
    return labels, number_places(labels, VOCAB)


def digit_term(targets, places) -> torch.Tensor:
    return del_token_losses(targets, place_weights(places)).sum()


def bf16_step(x: torch.Tensor) -> torch.Tensor:
    """The spacing of bfloat16 numbers at |x| (8 significant bits)."""
    exponent = torch.floor(torch.log2(x.abs().clamp(min=torch.finfo(torch.bfloat16).tiny)))
    return torch.pow(2.0, exponent - 7)


# ----------------------------------------------------------------------------------------------- the maths
@pytest.mark.parametrize("shape", [(1, 5), (2, 41), (3, 7)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_digit_logits_equal_the_full_logits(shape, dtype):
    torch.manual_seed(sum(shape))
    hidden = (torch.randn(*shape, H) * 2).to(dtype)
    weight = torch.randn(V, H).to(dtype)
    z = digit_logits_from_hidden(hidden, weight, VOCAB)
    assert z.dtype == torch.float32 and z.shape == (*shape, VOCAB.num_families, 10)
    exact = (hidden.double() @ weight.double().T)[..., VOCAB.family_ids(hidden.device)]
    model_logits = (hidden @ weight.T)[..., VOCAB.family_ids(hidden.device)].float()  # what the head computes
    if dtype == torch.float32:
        torch.testing.assert_close(z, model_logits, rtol=1e-5, atol=1e-5)
    else:
        # float32 products of the half-precision inputs: exact to float round-off, and within one step of the
        # model's own half-precision logits (which are rounded to 8 or 11 significant bits)
        torch.testing.assert_close(z.double(), exact, rtol=1e-5, atol=1e-5)
        step = bf16_step(exact.float()) if dtype == torch.bfloat16 else exact.float().abs() * 2.0**-10
        assert ((z - model_logits).abs() <= step + 1e-6).all()


def test_each_target_reads_its_own_family():
    torch.manual_seed(0)
    labels, _ = aligned_batch(1)
    hidden, weight = torch.randn(*labels.shape, H), torch.randn(V, H)
    from_hidden = digit_targets_from_hidden(hidden, weight, labels, VOCAB)
    from_logits = digit_targets_from_logits(hidden @ weight.T, labels, VOCAB)
    torch.testing.assert_close(from_hidden.logits, from_logits.logits, rtol=1e-5, atol=1e-5)
    assert torch.equal(from_hidden.target, from_logits.target) and torch.equal(from_hidden.mask, from_logits.mask)
    marked = TEXT.index("⁷")  # a space-marked digit competes among '▁0'..'▁9' (family 1)
    ids = torch.tensor(VOCAB.family_token_ids[1])
    torch.testing.assert_close(from_hidden.logits[0, marked], weight[ids] @ hidden[0, marked], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("head_trainable", [True, False])
def test_gradients_equal_those_of_the_logits_path(dtype, head_trainable):
    # cross-entropy and DEL on the same head, as in training; the logits path is the reference
    labels, places = aligned_batch()
    grads = {}
    for path in ("logits", "hidden"):
        torch.manual_seed(1)
        hidden0 = torch.randn(*labels.shape, H, requires_grad=True)
        head = torch.nn.Linear(H, V, bias=False).to(dtype).requires_grad_(head_trainable)
        hidden = (hidden0 * 1.5).to(dtype)
        logits = head(hidden)
        ce = F.cross_entropy(logits.float().reshape(-1, V), labels.reshape(-1))
        if path == "logits":
            targets = digit_targets_from_logits(logits, labels, VOCAB)
        else:
            targets = digit_targets_from_hidden(hidden, head.weight, labels, VOCAB)
        (ce + 0.3 * digit_term(targets, places)).backward()
        grads[path] = (hidden0.grad, head.weight.grad)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(grads["hidden"][0], grads["logits"][0], **tol)
    if head_trainable:
        torch.testing.assert_close(grads["hidden"][1].float(), grads["logits"][1].float(), **tol)
        assert grads["hidden"][1].dtype == dtype
    else:
        assert grads["hidden"][1] is None


def test_digit_loss_alone_still_reaches_a_trainable_head():
    torch.manual_seed(2)
    labels, places = aligned_batch()
    hidden = torch.randn(*labels.shape, H)
    weight = torch.randn(V, H, requires_grad=True)
    reference = weight.detach().clone().requires_grad_()
    digit_term(digit_targets_from_hidden(hidden, weight, labels, VOCAB), places).backward()
    digit_term(digit_targets_from_logits(hidden @ reference.T, labels, VOCAB), places).backward()
    torch.testing.assert_close(weight.grad, reference.grad, rtol=1e-5, atol=1e-6)
    # a second backward accumulates, as autograd does
    digit_term(digit_targets_from_hidden(hidden, weight, labels, VOCAB), places).backward()
    torch.testing.assert_close(weight.grad, 2 * reference.grad, rtol=1e-5, atol=1e-6)


class _AllocationsOfSize(TorchDispatchMode):
    """Records the ops that allocate a new tensor of exactly ``numel`` elements (views and in-place ops, whose
    output shares an input's storage, allocate nothing)."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = torch.utils._pytree.tree_leaves((args, kwargs))
        storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if (
                isinstance(t, torch.Tensor)
                and t.numel() == self.numel
                and t.untyped_storage().data_ptr() not in storages
            ):
                self.ops.append(str(func))
        return out


def test_no_second_head_sized_gradient():
    # The head weight's gradient is [V, H]; cross-entropy allocates one. Reading ten rows must not add another
    # (a plain index_select backward does: the control below shows the count would catch it).
    torch.manual_seed(3)
    labels, places = aligned_batch()
    big = V * H

    def head_sized_ops(digit_path):
        hidden = torch.randn(*labels.shape, H, requires_grad=True)
        weight = torch.randn(V, H, requires_grad=True)
        ce = F.cross_entropy((hidden @ weight.T).reshape(-1, V), labels.reshape(-1))
        loss = ce + digit_path(hidden, weight) if digit_path else ce
        with _AllocationsOfSize(big) as mode:
            loss.backward()
        return len(mode.ops)

    def naive(hidden, weight):
        rows = weight[VOCAB.family_ids(hidden.device).reshape(-1)]
        z = (hidden @ rows.T).unflatten(-1, (VOCAB.num_families, 10))
        return digit_term(select_digit_family(z, labels, VOCAB), places)

    ce_alone = head_sized_ops(None)
    assert ce_alone >= 1  # cross-entropy's own gradient of the weight
    assert head_sized_ops(lambda h, w: digit_term(digit_targets_from_hidden(h, w, labels, VOCAB), places)) == ce_alone
    assert head_sized_ops(naive) > ce_alone


def test_bad_inputs_are_refused():
    hidden = torch.randn(2, 3, H)
    with pytest.raises(ValueError, match="FSDP or partitioned"):
        digit_logits_from_hidden(hidden, torch.randn(0), VOCAB)
    with pytest.raises(ValueError, match="not the \\[vocab, hidden\\] matrix"):
        digit_logits_from_hidden(hidden, torch.randn(V, H + 1), VOCAB)
    with pytest.raises(TypeError, match="quantised"):
        digit_logits_from_hidden(hidden, torch.zeros(V, H, dtype=torch.uint8), VOCAB)
    with pytest.raises(ValueError, match="outside the head"):
        digit_logits_from_hidden(hidden, torch.randn(10, H), VOCAB)
    with pytest.raises(ValueError, match="do not match targets"):
        digit_targets_from_hidden(hidden, torch.randn(V, H), torch.zeros(2, 4, dtype=torch.long), VOCAB)


def test_empty_batches_give_empty_digit_logits():
    for shape in ((0, H), (2, 0, H)):
        hidden = torch.randn(*shape, requires_grad=True)
        z = digit_logits_from_hidden(hidden, torch.randn(V, H), VOCAB)
        assert z.shape == (*shape[:-1], VOCAB.num_families, 10)
        z.sum().backward()
        assert hidden.grad.shape == hidden.shape


# ------------------------------------------------------------------------------------ inside a causal LM
def tiny_causal_lm(model_type: str = "llama", *, tie: bool = False, dtype=torch.float32):
    return tiny_models.tiny_causal_lm(
        model_type, V, dtype=dtype, hidden_size=H, max_position_embeddings=64, tie_word_embeddings=tie
    )


def inputs(rows: int = 2) -> dict:
    labels, _ = aligned_batch(rows)
    ids = torch.where(labels == -100, 3, labels)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids}


def shifted(labels: torch.Tensor) -> torch.Tensor:
    from del_plugin.core import shift_to_next_token

    return shift_to_next_token(labels, -100)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_capture_equals_the_models_own_logits(model_type, dtype):
    model = tiny_causal_lm(model_type, dtype=dtype)
    capture = DigitLogitsCapture(model, VOCAB)
    batch = inputs()
    with capture:
        out = model(**batch)
    targets = shifted(batch["labels"])
    got = capture.digit_targets(targets)
    want = digit_targets_from_logits(out.logits, targets, VOCAB)
    if dtype == torch.float32:
        torch.testing.assert_close(got.logits, want.logits, rtol=1e-5, atol=1e-5)
    else:
        assert ((got.logits - want.logits).abs() <= bf16_step(want.logits) + 1e-6).all()
    capture.remove()


def test_capture_only_while_armed():
    model = tiny_causal_lm()
    capture = DigitLogitsCapture(model, VOCAB)
    model(**inputs())
    with pytest.raises(DigitCaptureError, match="no digit logits were captured"):
        capture.digit_logits()
    capture.remove()
    with capture:
        model(**inputs())
    with pytest.raises(DigitCaptureError, match="no digit logits"):
        capture.digit_logits()  # removed hooks capture nothing


def train_step(model, path: str) -> Step:
    """CE (the model's) + DEL, DEL from the captured hidden states or from the returned logits."""
    return ce_plus_del_step(model, inputs(), VOCAB, from_logits=path == "logits", alpha=0.7, train=None)


@pytest.mark.parametrize("tie", [False, True])
def test_full_fine_tune_gradients_match_with_a_trainable_or_tied_head(tie):
    model = tiny_causal_lm("qwen2", tie=tie)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    assert_same_step(train_step(model, "hidden"), train_step(model, "logits"))


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing(reentrant):
    model = tiny_causal_lm()
    model.train()
    plain = train_step(model, "logits")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    if reentrant:
        model.enable_input_require_grads()
    assert_same_step(train_step(model, "hidden"), plain)


def test_lora_on_the_head_with_dropout_reads_the_adapted_head():
    model = lora(tiny_causal_lm(), target_modules=["q_proj", "lm_head"], lora_dropout=0.5)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-zero adapter, so that leaving it out would show
    model.train()
    capture = DigitLogitsCapture(model, VOCAB)
    batch = inputs()
    torch.manual_seed(9)
    with capture:
        out = model(**batch)  # one dropout mask, seen by both the logits and the capture
    targets = shifted(batch["labels"])
    torch.testing.assert_close(
        capture.digit_targets(targets).logits,
        digit_targets_from_logits(out.logits, targets, VOCAB).logits,
        rtol=1e-5,
        atol=1e-5,
    )
    model.eval()
    with model.disable_adapter(), capture:  # the base head alone: the adapter is not expected then
        base = model(**batch)
    torch.testing.assert_close(
        capture.digit_targets(targets).logits,
        digit_targets_from_logits(base.logits, targets, VOCAB).logits,
        rtol=1e-5,
        atol=1e-5,
    )
    model.train()
    torch.manual_seed(9)
    hidden_grads = train_step(model, "hidden")
    torch.manual_seed(9)
    assert_same_step(hidden_grads, train_step(model, "logits"))
    assert any("lm_head.lora_B" in n for n in hidden_grads.grads)


def test_lora_on_the_head_refuses_a_forward_that_skips_it():
    model = lora(tiny_causal_lm(), target_modules=["lm_head"])
    capture = DigitLogitsCapture(model, VOCAB)
    with capture:
        model.base_model.model.model(input_ids=inputs()["input_ids"])  # decoder only: the head never runs
    with pytest.raises(DigitCaptureError, match="did not run in this forward"):
        capture.digit_logits()


def test_modules_to_save_head_gets_the_gradient():
    model = lora(tiny_causal_lm(), target_modules=["q_proj"], modules_to_save=["lm_head"])
    grads = train_step(model, "hidden")
    assert any("modules_to_save" in n and "lm_head" in n for n in grads.grads)
    assert_same_step(grads, train_step(model, "logits"))


def test_dora_on_the_head_is_refused():
    model = lora(tiny_causal_lm(), target_modules=["lm_head"], use_dora=True)
    with pytest.raises(DigitCaptureError, match="DoRA"):
        DigitLogitsCapture(model, VOCAB)


def test_row_blocks_give_the_unblocked_result(monkeypatch):
    # the float32 copies are made in blocks of rows; with blocks of 5 rows the 82 positions span 17 blocks
    from del_plugin.core import hidden as hidden_module

    labels, places = aligned_batch()
    results = []
    for block in (4096, 5):
        monkeypatch.setattr(hidden_module, "_BLOCK_ROWS", block)
        torch.manual_seed(12)
        hidden = torch.randn(*labels.shape, H, dtype=torch.bfloat16, requires_grad=True)
        weight = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
        ce = F.cross_entropy((hidden @ weight.T).float().reshape(-1, V), labels.reshape(-1))
        digits = digit_targets_from_hidden(hidden, weight, labels, VOCAB)
        (ce + digit_term(digits, places)).backward()
        results.append((digits.logits.detach(), hidden.grad, weight.grad))
    for unblocked, blocked in zip(*results):
        torch.testing.assert_close(blocked, unblocked, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("numbers", [False, True], ids=["digits", "number tokens"])
def test_tables_first_built_in_inference_mode_still_train(numbers):
    """del-eval reads digits under torch.inference_mode; a training step in the same process, with the same
    vocabulary, must not get its cached tables as inference tensors (autograd refuses to save those)."""
    import dataclasses

    from del_plugin.core.vocab_device import DeviceTables

    if numbers:
        from chunked_vocab import VOCAB as vocab
        from chunked_vocab import V as size
        from chunked_vocab import batch as number_batch

        labels = number_batch()["labels"]
    else:
        vocab, size, labels = VOCAB, V, aligned_batch()[0]
    vocab = dataclasses.replace(vocab, _device_tables=DeviceTables())  # nothing cached yet
    targets = shifted(labels)
    hidden = torch.randn(*targets.shape, H)
    weight = torch.randn(size, H)
    with torch.inference_mode():
        digit_targets_from_hidden(hidden, weight, targets, vocab)
    weight.requires_grad_()
    places = next_token_places(labels, vocab)
    digits = digit_targets_from_hidden(hidden, weight, targets, vocab)
    digit_criterion_loss("del", digits, places).backward()
    assert weight.grad.abs().max() > 0


def test_a_second_forward_without_gradients_is_not_read_and_one_with_gradients_is_refused():
    """A host may run the model again without gradients after its loss forward (TRL 1.16 recomputes the logits for
    ``return_outputs``): the digits stay those of the first forward. A second forward with gradients is an error."""
    model = tiny_causal_lm()
    ids = encode("12.5 and 7").unsqueeze(0)
    targets = shift_to_next_token(ids, -100)
    capture = DigitLogitsCapture(model, VOCAB)
    with capture:
        first = model(input_ids=ids).logits
        with torch.no_grad():
            model(input_ids=ids.flip(1))  # other tokens: read, they would change the digits
    read = capture.digit_targets(targets)
    expected = digit_targets_from_logits(first, targets, VOCAB)
    torch.testing.assert_close(read.logits, expected.logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(DigitCaptureError, match="decoder ran twice"), capture:
        model(input_ids=ids)
        model(input_ids=ids)
    capture.remove()
