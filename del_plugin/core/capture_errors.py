"""The capture's errors, and its refusals of a forward that a fused cross-entropy kernel computed without the head.

A fused cross-entropy kernel (Liger's ``liger_fused_linear_cross_entropy``, Cut Cross Entropy) reads
``lm_head.weight`` itself and never calls the head: what the head's forward adds (a LoRA adapter) or gathers
(DeepSpeed ZeRO-3, FSDP2 on a head that is a unit of its own) is then missing where DEL reads the digit rows.
:func:`refuse_fused_kernel` raises each of those refusals, with its fix, as the compatibility table
(:mod:`del_plugin.core.compatibility`) words it.
"""

from __future__ import annotations

from typing import Literal, NoReturn

from .compatibility import RULES

__all__ = ["DigitCaptureError", "FusedKernelCase", "LogitsMismatch", "refuse_fused_kernel"]


class DigitCaptureError(RuntimeError):
    """The model's digit logits cannot be read from its hidden states correctly."""


class LogitsMismatch(DigitCaptureError):
    """The measured digit logits differ from the model's own by more than rounding (``difference``, ``tolerance``)."""

    def __init__(self, message: str, difference: float, tolerance: float):
        super().__init__(message)
        self.difference, self.tolerance = difference, tolerance


FusedKernelCase = Literal["zero3_head_not_run", "lora_head_not_run", "fsdp2_head_unit"]


def refuse_fused_kernel(case: FusedKernelCase, what: object = "") -> NoReturn:
    """Raise :class:`DigitCaptureError` for ``case``: a forward that skipped the head's own forward, as fused
    cross-entropy kernels do, where DEL needs it (``what``: the module or adapters that did not run)."""
    raise DigitCaptureError(RULES[case].message(what=what))
