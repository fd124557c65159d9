"""The head rows DEL copies inside the forward (del_plugin/core/head_rows.py), and the number-token reader under
FSDP2, which frees the root unit's gathered weights (the head's among them) when the forward returns.

Here FSDP2 runs in this one process (a one-rank gloo group), in seconds; tests/e2e/test_fsdp2_cpu_e2e.py runs it through
Axolotl in two processes against one."""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import DigitLogitsCapture
from del_plugin.core.capture import DigitCaptureError
from del_plugin.core.head_rows import gather_rows, rows_vocab
from del_plugin.core.hidden import digit_logits_from_hidden, number_logits_from_hidden

from capture_checks import AllocationsOfShape, Step, ce_plus_del_step
from chunked_vocab import SPACED, VOCAB, assert_same_step, batch, tiny_causal_lm
from tiny_models import lora


@pytest.mark.parametrize("vocab", [VOCAB, SPACED], ids=["number tokens", "two digit families"])
def test_rows_vocab_reads_the_copied_rows_as_the_vocabulary_reads_the_head(vocab):
    rows = rows_vocab(vocab)
    count = len(vocab.number_row_ids)
    assert rows.number_row_ids == tuple(range(count))
    assert [(g.family, g.digits) for g in rows.number_groups] == [(g.family, g.digits) for g in vocab.number_groups]
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 8, dtype=torch.float64)
    weight = torch.randn(max(vocab.number_row_ids) + 5, 8, dtype=torch.float64)
    copy = weight[list(vocab.number_row_ids)]
    torch.testing.assert_close(
        digit_logits_from_hidden(hidden, copy, rows), digit_logits_from_hidden(hidden, weight, vocab)
    )
    positions = [torch.arange(0, 21, g + 1) for g in range(len(vocab.number_groups))]
    for ours, theirs in zip(
        number_logits_from_hidden(hidden, copy, rows, positions),
        number_logits_from_hidden(hidden, weight, vocab, positions),
    ):
        torch.testing.assert_close(ours, theirs)


def test_gather_rows_gives_a_parameter_its_row_gradient_in_place():
    torch.manual_seed(1)
    weight = torch.randn(50, 6, requires_grad=True)
    ids = torch.tensor([3, 17, 4, 40])
    upstream, other = torch.randn(4, 6), torch.randn(50, 6)
    with AllocationsOfShape() as alone:
        (weight * other).sum().backward()  # another use of the weight, as CE's
    weight.grad = None
    with AllocationsOfShape() as seen:
        rows = gather_rows(weight, ids)
        ((rows * upstream).sum() + (weight * other).sum()).backward()
    assert rows.dtype == torch.float32 and torch.equal(rows.detach(), weight.detach()[ids])
    # the rows add no [V, H] tensor (a zero gradient for them) to what the other use allocates
    assert seen.shapes.count((50, 6)) == alone.shapes.count((50, 6))
    expected = other.clone()
    expected.index_add_(0, ids, upstream)
    torch.testing.assert_close(weight.grad, expected)


@pytest.mark.parametrize("kind", ["alone", "computed", "bias"])
def test_gather_rows_gradient_without_another_use_of_the_weight(kind):
    torch.manual_seed(2)
    leaf = torch.randn(30, 5, dtype=torch.float64, requires_grad=True)
    if kind == "bias":
        leaf = torch.randn(30, dtype=torch.float64, requires_grad=True)
    source = leaf * 1.0 if kind == "computed" else leaf  # a cast or view: an ordinary gradient through autograd
    ids = torch.tensor([0, 29, 7])
    upstream = torch.randn(3, *leaf.shape[1:], dtype=torch.float32)
    (gather_rows(source, ids) * upstream).sum().backward()
    expected = torch.zeros_like(leaf)
    expected.index_add_(0, ids, upstream.double())
    torch.testing.assert_close(leaf.grad, expected)


def sharded(model, *, head_unit: bool = False):
    """FSDP2 as Axolotl applies it: a unit per decoder layer, then the root, ``reshard_after_forward=True`` passed to
    every unit (the root included, so its gathered weights, the head's among them, are freed when the forward
    returns); with ``head_unit`` the head is a unit of its own too (a size-based wrap policy does that)."""
    from torch.distributed.fsdp import fully_shard

    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    for layer in causal_lm.model.layers:
        fully_shard(layer, reshard_after_forward=True)
    if head_unit:
        fully_shard(causal_lm.lm_head, reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=True)
    return model


def fsdp_step(model) -> Step:
    """CE + DEL read by the capture, one forward and backward; the loss and the (gathered) gradients."""
    return ce_plus_del_step(model, batch(), VOCAB, from_logits=False, alpha=0.7, train=None)


def test_fsdp2_frees_the_root_unit_after_the_forward(process_group):
    # what the number-token reader has to live with: the head's gathered weight has no data left after the forward
    model = sharded(tiny_causal_lm())
    seen = []

    def on_decoder(*_):
        seen.append(model.lm_head.weight)

    model.model.register_forward_hook(on_decoder)
    model(**batch())
    (weight,) = seen
    assert type(weight).__name__ != "DTensor" and weight.untyped_storage().size() == 0
    with pytest.raises(RuntimeError, match="storage"):
        weight.index_select(0, torch.tensor([1, 2]))


def test_number_tokens_under_fsdp2_give_the_plain_step(process_group):
    from chunked_vocab import step

    expected = step(tiny_causal_lm(), "logits")
    assert_same_step(fsdp_step(sharded(tiny_causal_lm())), expected)


def test_lora_on_the_head_under_fsdp2(process_group):
    from chunked_vocab import step

    def model():
        peft_model = lora(tiny_causal_lm(), target_modules=["q_proj", "lm_head"])
        torch.manual_seed(3)
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.5)
        return peft_model

    expected = step(model(), "logits")
    result = fsdp_step(sharded(model()))
    assert_same_step(result, expected)
    assert any("lm_head.lora_B" in n for n in result.grads)


def test_a_head_in_an_fsdp2_unit_of_its_own_is_refused_with_the_fix(process_group):
    model = sharded(tiny_causal_lm(), head_unit=True)
    capture = DigitLogitsCapture(model, VOCAB)
    with pytest.raises(DigitCaptureError, match="still sharded.*TRANSFORMER_BASED_WRAP"), capture:
        model(**batch())


def test_a_head_smaller_than_the_vocabulary_is_refused_at_construction():
    model = tiny_causal_lm(vocab_size=500)  # VOCAB's number tokens go up to id 1,152
    with pytest.raises(DigitCaptureError, match="outside the LM head's 500 rows"):
        DigitLogitsCapture(model, VOCAB)
