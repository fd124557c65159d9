"""A LoRA adapter on the LM head, read as the head computes it, and the count of its runs in a captured forward.

A LoRA adapter on the head adds ``scaling * B · A(dropout(h))``; a hook on ``lora_A`` reads ``A(dropout(h))`` as the
head computed it (same dropout mask) and adds the digit rows of ``B`` (:class:`LoraHead`). Fused cross-entropy
kernels read ``head.weight`` without the adapter, so an adapter that did not run in an armed forward is an error,
not a silent zero (:class:`LoraCalls`). PEFT's modules are recognised by their attributes (no PEFT import).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .capture_errors import DigitCaptureError

__all__ = ["LoraCalls", "LoraHead", "lora_head"]


class LoraHead:
    """The LoRA adapters of a PEFT-wrapped head (``lora_A`` / ``lora_B`` / ``scaling`` per adapter name)."""

    def __init__(self, head: torch.nn.Module):
        self.head = head

    def active(self) -> list[str]:
        """Adapters whose delta the head's forward adds now (none when disabled or merged into the weight)."""
        head = self.head
        if getattr(head, "disable_adapters", False) or getattr(head, "merged", False):
            return []
        names = getattr(head, "active_adapters", None) or []
        names = [names] if isinstance(names, str) else list(names)
        return [n for n in names if n in head.lora_A]

    def check(self) -> None:
        """Raise :class:`DigitCaptureError` for an adapter whose output is not ``scaling * B(A(x))``."""
        for name in self.head.lora_A:
            variants = getattr(self.head, "lora_variant", {}) or {}
            if getattr(self.head, "use_dora", {}).get(name) or name in variants:
                raise DigitCaptureError(
                    f"the LoRA adapter {name!r} on the LM head uses a variant (DoRA or another) whose output is not "
                    "scaling * B(A(x)); DEL cannot read its digit rows. Train the head with plain LoRA or "
                    "modules_to_save"
                )
            if not isinstance(self.head.lora_B[name], torch.nn.Linear):
                raise DigitCaptureError(f"the LoRA adapter {name!r} on the LM head is not a linear adapter")

    def rows(self, name: str, row_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The adapter ``name``'s ``B`` weight and bias (None without one) at the head's rows ``row_ids``, float32."""
        lora_b = self.head.lora_B[name]
        bias = None if lora_b.bias is None else lora_b.bias[row_ids].float()
        return lora_b.weight[row_ids].float(), bias

    def delta(
        self, name: str, projected: torch.Tensor, b_rows: torch.Tensor, b_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The adapter ``name``'s float32 contribution ``scaling * B[rows] · A(dropout(h))`` to the head's rows whose
        ``B`` rows and bias are ``b_rows`` and ``b_bias`` (:meth:`rows`), from ``projected`` = ``A(dropout(h))``
        ``[..., r]`` as the head computed it."""
        with torch.autocast(device_type=projected.device.type, enabled=False):
            return F.linear(projected.float(), b_rows, b_bias) * self.head.scaling[name]


def lora_head(head: torch.nn.Module) -> LoraHead | None:
    """The checked :class:`LoraHead` of a head that carries LoRA adapters, else None."""
    if not (hasattr(head, "lora_A") and hasattr(head, "lora_B")):
        return None
    lora = LoraHead(head)
    lora.check()
    return lora


class LoraCalls:
    """Which of the head's LoRA adapters ran in one captured forward, against those active when its decoder
    returned: each must run exactly once (a fused cross-entropy kernel runs none)."""

    def __init__(self, lora: LoraHead | None):
        self.lora = lora
        self.reset()

    def reset(self) -> None:
        self.expected: list[str] = []
        self.calls: dict[str, int] = {}

    def expect(self) -> list[str]:
        """The adapters the head's forward adds now, expected to run in this forward."""
        self.expected = self.lora.active() if self.lora is not None else []
        return self.expected

    def count(self, name: str) -> bool:
        """Count a run of the adapter ``name``; False for one that is not expected (its output is not read)."""
        if name not in self.expected:
            return False
        self.calls[name] = self.calls.get(name, 0) + 1
        return True

    def missing(self) -> list[str]:
        """The expected adapters that did not run exactly once."""
        return [n for n in self.expected if self.calls.get(n, 0) != 1]
