"""The capture's errors, and its refusals of a forward that a fused cross-entropy kernel computed without the head.

A fused cross-entropy kernel (Liger's ``liger_fused_linear_cross_entropy``, Cut Cross Entropy) reads
``lm_head.weight`` itself and never calls the head: what the head's forward adds (a LoRA adapter) or gathers
(DeepSpeed ZeRO-3, FSDP2 on a head that is a unit of its own) is then missing where DEL reads the digit rows.
:func:`refuse_fused_kernel` raises each of those refusals, with its fix, from one place.
"""

from __future__ import annotations

from typing import Literal, NoReturn

__all__ = ["DigitCaptureError", "FusedKernelCase", "LogitsMismatch", "refuse_fused_kernel"]


class DigitCaptureError(RuntimeError):
    """The model's digit logits cannot be read from its hidden states correctly."""


class LogitsMismatch(DigitCaptureError):
    """The measured digit logits differ from the model's own by more than rounding (``difference``, ``tolerance``)."""

    def __init__(self, message: str, difference: float, tolerance: float):
        super().__init__(message)
        self.difference, self.tolerance = difference, tolerance


FusedKernelCase = Literal["zero3_head_not_run", "lora_head_not_run", "fsdp2_head_unit"]

_FUSED_KERNEL_REFUSALS: dict[str, str] = {
    # DeepSpeed ZeRO-3 gathers the head's weight (or a LoRA B's) only inside its own forward: {what} did not run
    "zero3_head_not_run": (
        "DeepSpeed ZeRO-3 partitions the LM head, and {what} did not run its forward after the decoder "
        "returned, where DEL reads its digit rows while DeepSpeed has gathered them: a fused cross-entropy "
        "kernel (liger_fused_linear_cross_entropy, cut_cross_entropy) reads lm_head.weight without calling "
        "the head. Under ZeRO-3 use plain cross-entropy, or shard with FSDP2 (examples/*/paper-full-fsdp.yml), "
        "which keeps fused kernels"
    ),
    # the LoRA adapters {what} on the head expected to run did not
    "lora_head_not_run": (
        "the LoRA adapter(s) {what} on the LM head did not run in this forward pass, so the loss was "
        "computed without them (fused cross-entropy kernels read lm_head.weight, the base weight); DEL "
        "would read a different head than the cross-entropy. Use plain cross-entropy, or train the head "
        "with modules_to_save instead of LoRA"
    ),
    # FSDP2 made the head a unit of its own: it is a DTensor when the decoder returns
    "fsdp2_head_unit": (
        "the LM head weight is still sharded (a DTensor) when the decoder returns, where DEL reads its digit "
        "rows: FSDP2 made lm_head a unit of its own, gathered only inside the head's own forward (which "
        "fused cross-entropy kernels skip). Keep lm_head in the root FSDP unit: fsdp_config "
        "auto_wrap_policy: TRANSFORMER_BASED_WRAP with transformer_layer_cls_to_wrap set to the decoder "
        "layer class, as examples/*/paper-full-fsdp.yml do (SIZE_BASED_WRAP makes a unit of every module above "
        "min_num_params, the head included)"
    ),
}


def refuse_fused_kernel(case: FusedKernelCase, what: object = "") -> NoReturn:
    """Raise :class:`DigitCaptureError` for ``case``: a forward that skipped the head's own forward, as fused
    cross-entropy kernels do, where DEL needs it (``what``: the module or adapters that did not run)."""
    raise DigitCaptureError(_FUSED_KERNEL_REFUSALS[case].format(what=what))
