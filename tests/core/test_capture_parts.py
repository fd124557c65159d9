"""The capture's parts, each on its own (del_plugin/core: head_lookup, sharding, lora_head, capture_errors): what
each hands on, to a recording reader that replaces the digit reader only. The whole capture is tested through real
models in test_hidden.py, test_number_capture.py, test_head_rows.py (FSDP2) and test_zero3_capture.py (ZeRO-3)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from del_plugin.core import capture_errors
from del_plugin.core.capture_errors import DigitCaptureError, refuse_fused_kernel
from del_plugin.core.head_lookup import find_head, unwrap
from del_plugin.core.lora_head import LoraCalls
from del_plugin.core.readers import CapturedForward
from del_plugin.core.sharding import Fsdp2Head, HeadSharding, HeadShardings, PlainHead, Zero3Head

from chunked_vocab import VOCAB, tiny_causal_lm


class RecordingReader:
    """Records what a strategy hands on, in order."""

    def __init__(self):
        self.seen: list[tuple] = []

    def on_decoder(self, forward: CapturedForward) -> None:
        self.seen.append(("decoder", forward.weight, forward.bias, forward.freed_after))

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        self.seen.append(("lora", name, projected))


def _forward() -> CapturedForward:
    return CapturedForward(torch.randn(2, 3, 4), None, None, True, [])


def _zero3_head() -> torch.nn.Linear:
    """A head whose weight carries what DeepSpeed ZeRO-3 gives its parameters (gathered here: ``numel`` is that of
    ``ds_shape``)."""
    head = torch.nn.Linear(4, 6)
    head.weight.ds_id, head.weight.ds_shape = 0, head.weight.shape
    return head


def test_each_sharding_is_one_strategy_behind_one_interface():
    head, reader, armed = torch.nn.Linear(4, 6), RecordingReader(), [True]
    shardings = HeadShardings(head, head, reader, None, lambda: armed[0])
    for strategy in (shardings.plain, shardings.fsdp2, shardings.zero3):
        assert isinstance(strategy, HeadSharding)
    assert isinstance(shardings.plain, PlainHead) and isinstance(shardings.fsdp2, Fsdp2Head)
    assert isinstance(shardings.zero3, Zero3Head)
    assert shardings.of(head.weight) is shardings.plain  # not an FSDP2 unit, not partitioned
    assert shardings.of(_zero3_head().weight) is shardings.zero3


@pytest.mark.parametrize("strategy, freed_after", [(PlainHead, False), (Fsdp2Head, True)])
def test_a_whole_head_is_read_when_the_decoder_returns(strategy, freed_after):
    head, reader = torch.nn.Linear(4, 6), RecordingReader()
    sharding = strategy(head, reader)
    sharding.on_decoder(_forward())
    projected = torch.randn(2, 3, 2)
    sharding.on_lora("default", projected)
    assert reader.seen == [("decoder", head.weight, head.bias, freed_after), ("lora", "default", projected)]
    assert sharding.unread() is None


def test_a_head_still_sharded_when_the_decoder_returns_is_refused_with_the_fix():
    head = torch.nn.Linear(4, 6)
    head.weight.placements = ()  # what a DTensor carries
    with pytest.raises(DigitCaptureError, match="FSDP2 made lm_head a unit of its own.*TRANSFORMER_BASED_WRAP"):
        PlainHead(head, RecordingReader()).on_decoder(_forward())


def test_zero3_reads_the_head_inside_its_own_forward_and_only_while_armed():
    head, reader, armed = _zero3_head(), RecordingReader(), [True]
    sharding = Zero3Head(head, reader, None, lambda: armed[0])
    sharding.on_decoder(_forward())
    assert reader.seen == [] and sharding.unread() == "the LM head"  # waits for the head's forward
    head(torch.randn(1, 4))
    assert reader.seen == [("decoder", head.weight, head.bias, True)] and sharding.unread() is None
    armed[0] = False
    sharding.on_decoder(_forward())
    head(torch.randn(1, 4))
    assert len(reader.seen) == 1 and sharding.unread() == "the LM head"
    sharding.reset()
    assert sharding.unread() is None
    armed[0] = True
    sharding.remove()  # its hooks go; the next forward registers them again
    head(torch.randn(1, 4))
    assert len(reader.seen) == 1
    sharding.on_decoder(_forward())
    head(torch.randn(1, 4))
    assert len(reader.seen) == 2


def test_zero3_refuses_a_head_still_partitioned_inside_its_own_forward():
    head, reader = _zero3_head(), RecordingReader()
    head.weight.ds_shape = (60, 4)  # more than the rows this rank holds
    sharding = Zero3Head(head, reader, None, lambda: True)
    sharding.on_decoder(_forward())
    with pytest.raises(DigitCaptureError, match=r"still partitioned \(shape \(6, 4\)\) inside its own forward"):
        head(torch.randn(1, 4))


def test_lora_calls_expect_each_active_adapter_once():
    class TwoAdapters:
        def active(self):
            return ["a", "b"]

    calls = LoraCalls(TwoAdapters())
    assert calls.missing() == [] and not calls.count("a")  # nothing expected before the decoder returns
    assert calls.expect() == ["a", "b"]
    assert calls.count("a") and not calls.count("c")  # an inactive adapter is not read
    assert calls.missing() == ["b"]
    assert calls.count("b") and calls.count("a")
    assert calls.missing() == ["a"]  # ran twice in one forward
    calls.reset()
    assert calls.missing() == [] and LoraCalls(None).expect() == []


@pytest.mark.parametrize(
    "case, what, fragment",
    [
        ("zero3_head_not_run", "the LM head", "partitions the LM head, and the LM head did not run its forward"),
        ("lora_head_not_run", ["default"], "LoRA adapter(s) ['default'] on the LM head did not run"),
        ("fsdp2_head_unit", "", "still sharded (a DTensor) when the decoder returns"),
    ],
)
def test_each_fused_kernel_refusal_names_the_module_and_the_fix(case, what, fragment):
    with pytest.raises(DigitCaptureError) as raised:
        refuse_fused_kernel(case, what)
    assert fragment in str(raised.value)
    assert any(fix in str(raised.value) for fix in ("plain cross-entropy", "root FSDP unit"))


def test_the_fused_kernel_refusals_are_written_once():
    core = Path(capture_errors.__file__).parent
    for fragment in (
        "reads lm_head.weight without calling",
        "would read a different head",
        "gathered only inside the head",
    ):
        holders = sorted(p.name for p in core.rglob("*.py") if fragment in p.read_text())
        assert holders == ["compatibility.py"], (fragment, holders)  # the table of what works with what


def test_the_head_is_found_through_wrappers():
    model = tiny_causal_lm()

    class Compiled(torch.nn.Module):  # as torch.compile's wrapper holds the model
        def __init__(self, inner):
            super().__init__()
            self._orig_mod = inner

    class Parallel(torch.nn.Module):  # as DDP and DeepSpeed hold it
        def __init__(self, inner):
            super().__init__()
            self.module = inner

    wrapped = Parallel(Compiled(model))
    assert unwrap(wrapped) == (model, model)
    site = find_head(wrapped, VOCAB)
    assert site.head is model.lm_head and site.decoder is model.model and site.model_type == "llama"
    with pytest.raises(DigitCaptureError, match="outside the LM head's 5 rows"):
        find_head(tiny_causal_lm(vocab_size=5), VOCAB)
