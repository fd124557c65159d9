"""DEL's digit rows under DeepSpeed ZeRO-3 (del_plugin/core/capture.py), in this process: a one-rank gloo group and
DeepSpeed's engine on its CPU accelerator, which partitions every parameter to shape ``(0,)`` between the forwards of
the modules that own them. One step of CE + DEL through the engine must give the loss and the gradients (as
DeepSpeed's optimizer sees them, ``safe_get_full_grad``) of the same model without DeepSpeed, DEL read from the full
logits there, for single digit tokens and number tokens, a trainable, tied, biased, ``modules_to_save`` or LoRA head.
tests/e2e/test_deepspeed_cpu_e2e.py runs ZeRO-1, -2 and -3 through Axolotl in two processes against one.

DeepSpeed runs in the test process here; what it changes in the process is undone when the file's tests end.
"""

from __future__ import annotations

import pytest
import torch

from del_plugin.core import DigitLogitsCapture, shift_to_next_token
from del_plugin.core.capture import DigitCaptureError

from capture_checks import Step, ce_plus_del_step
from chunked_vocab import SPACED, VOCAB, assert_same_step, batch, tiny_causal_lm
from ddp_cpu import skip_deepspeed_shm_build
from tiny_models import lora

# every parameter partitioned, however small (DeepSpeed keeps parameters under the persistence threshold whole), and
# released as soon as its module's forward returns, never fetched ahead: as Axolotl's deepspeed_configs/zero3.json
# sets it (max_live_parameters and max_reuse_distance 0); by default DeepSpeed keeps gathered parameters for reuse
ZERO3 = {
    "train_micro_batch_size_per_gpu": 2,
    "zero_optimization": {
        "stage": 3,
        "stage3_param_persistence_threshold": 0,
        "stage3_max_live_parameters": 0,
        "stage3_max_reuse_distance": 0,
        "stage3_prefetch_bucket_size": 0,
    },
    "zero_allow_untested_optimizer": True,
}


@pytest.fixture(scope="module")
def deepspeed(process_group):
    """DeepSpeed's communicator on the one-rank gloo group, its accelerator the CPU; afterwards the process is left
    as it was (a ZeRO-3 engine replaces ``torch.nn.functional.linear`` with DeepSpeed's own for good)."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in {"DS_ACCELERATOR": "cpu", "LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1"}.items():
            patch.setenv(key, value)
        patch.setattr(torch.nn.functional, "linear", torch.nn.functional.linear)  # restored on exit
        import deepspeed
        import deepspeed.comm.comm as ds_comm

        skip_deepspeed_shm_build()
        deepspeed.init_distributed(dist_backend="gloo")
        yield deepspeed
        ds_comm.cdb = None  # the group goes with process_group


def engine(deepspeed, model):
    """``model`` in a ZeRO-3 engine (an SGD optimizer at learning rate 0: the step is never taken)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    ds_engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(trainable, lr=0.0), config=ZERO3)
    return ds_engine


def zero3_step(deepspeed, model, vocab=VOCAB, inputs=None) -> Step:
    """CE + DEL read by the capture through a ZeRO-3 engine; the loss and the gradients."""
    return ce_plus_del_step(
        engine(deepspeed, model), inputs or batch(), vocab, from_logits=False, alpha=0.7, train=None
    )


def plain_step(model, vocab=VOCAB, inputs=None) -> Step:
    """The same step without DeepSpeed, DEL read from the logits the forward returns."""
    return ce_plus_del_step(model, inputs or batch(), vocab, from_logits=True, alpha=0.7, train=None)


def lora_model(target_modules, **config):
    model = lora(tiny_causal_lm(), target_modules=target_modules, **config)
    torch.manual_seed(3)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # a non-zero adapter, so that leaving it out would show
    return model


def test_zero3_partitions_the_head_outside_its_own_forward(deepspeed):
    # what DEL has to live with: the head weight has no elements on the rank but inside the head's own forward
    # (DeepSpeed may gather it earlier, ahead of its use, but need not)
    shape = tiny_causal_lm().lm_head.weight.shape
    model = engine(deepspeed, tiny_causal_lm())
    head = model.module.lm_head
    inside = []
    head.register_forward_hook(lambda *_: inside.append(head.weight.shape) and None, prepend=True)
    assert head.weight.shape == torch.Size([0]) and head.weight.ds_shape == shape
    model(**batch())
    assert inside == [shape] and head.weight.shape == torch.Size([0])


def biased_head():
    """A Phi model, whose head has a bias (drawn non-zero, so that leaving it out would show)."""
    model = tiny_causal_lm("phi", num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(4)
    torch.nn.init.normal_(model.lm_head.bias, std=1.0)
    return model


@pytest.mark.parametrize(
    "build",
    [
        pytest.param(tiny_causal_lm, id="number tokens"),
        pytest.param(lambda: tiny_causal_lm(tie_word_embeddings=True), id="number tokens, tied head"),
        pytest.param(biased_head, id="head bias"),
    ],
)
def test_a_full_fine_tune_under_zero3_gives_the_plain_step(deepspeed, build):
    expected = plain_step(build())
    result = zero3_step(deepspeed, build())
    assert_same_step(result, expected)
    head = "model.embed_tokens.weight" if build().config.tie_word_embeddings else "lm_head.weight"
    assert head in result.grads


def test_single_digit_tokens_under_zero3(deepspeed):
    # SPACED's two families of one token per digit (ids 40-49 and 60-69), between other tokens
    ids = torch.tensor([[5, 41, 42, 7, 60, 65, 3, 49, 44, 61, 8, 2, 47, 50, 66, 9]] * 2)
    labels = ids.clone()
    labels[1, :5] = -100
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    expected = plain_step(tiny_causal_lm(), SPACED, inputs)
    assert_same_step(zero3_step(deepspeed, tiny_causal_lm(), SPACED, inputs), expected)


def test_a_modules_to_save_head_under_zero3(deepspeed):
    expected = plain_step(lora_model(["q_proj"], modules_to_save=["lm_head"]))
    result = zero3_step(deepspeed, lora_model(["q_proj"], modules_to_save=["lm_head"]))
    assert_same_step(result, expected)
    assert any("modules_to_save" in n and "lm_head" in n for n in result.grads)


def test_lora_on_the_head_under_zero3(deepspeed):
    # the adapter's B rows are read inside lora_B's own forward, where ZeRO-3 has gathered them
    expected = plain_step(lora_model(["q_proj", "lm_head"]))
    result = zero3_step(deepspeed, lora_model(["q_proj", "lm_head"]))
    assert_same_step(result, expected)
    assert any("lm_head.lora_B" in n for n in result.grads)


def test_a_forward_that_never_calls_the_head_is_refused_with_the_fix(deepspeed):
    # a fused cross-entropy kernel reads lm_head.weight itself and never runs the head's forward: under ZeRO-3 the
    # weight is partitioned then, and DEL has no gathered rows to read
    model = engine(deepspeed, tiny_causal_lm())
    capture = DigitLogitsCapture(model, VOCAB)
    inputs = batch()
    with capture:
        model.module.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    with pytest.raises(DigitCaptureError, match="did not run its forward.*liger_fused_linear_cross_entropy.*FSDP2"):
        capture.digit_targets(shift_to_next_token(inputs["labels"], -100))


def test_digit_rows_alone_cannot_train_a_partitioned_head(deepspeed):
    # with no cross-entropy the head's own backward never runs: ZeRO-3 would not reduce the rows' gradient
    from del_plugin.core import digit_criterion_loss, next_token_places

    model = engine(deepspeed, tiny_causal_lm())
    capture = DigitLogitsCapture(model, VOCAB)
    inputs = batch()
    with capture:
        model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    digits = capture.digit_targets(shift_to_next_token(inputs["labels"], -100))
    loss = digit_criterion_loss("del", digits, next_token_places(inputs["labels"], VOCAB), alpha=0.7)
    with pytest.raises(RuntimeError, match="only gradient of the LM head weight.*beside the cross-entropy"):
        model.backward(loss)
