"""Where the LM head's weight is whole, so that DEL reads its digit rows there: one small strategy per sharding.

Each strategy (:class:`HeadSharding`) is handed the decoder's output when the decoder returns
(:meth:`~HeadSharding.on_decoder`) and each LoRA adapter's ``A(dropout(h))`` when ``lora_A`` runs
(:meth:`~HeadSharding.on_lora`), and passes them on to the reader, with the head's weight, where that weight is
whole; :meth:`~HeadSharding.unread` says what it still waits for after the forward. :class:`HeadShardings` picks the
strategy of a weight at each forward (a model may be sharded after the capture was built).

- :class:`PlainHead`: the weight is whole; read when the decoder returns.
- :class:`Fsdp2Head`: the head must be whole when the decoder returns: it is in the root unit, which holds
  everything outside the wrapped decoder layers (Axolotl's ``TRANSFORMER_BASED_WRAP``) and is gathered for the whole
  forward. A head that FSDP2 made a unit of its own is still sharded then (a ``DTensor``) and is refused. Read when
  the decoder returns; the weight is freed after the forward (the reader copies what it reads later).
- :class:`Zero3Head`: under DeepSpeed ZeRO-3 every parameter is partitioned (shape ``(0,)`` on each rank) except
  while the module that owns it runs its forward: DeepSpeed gathers a module's own parameters in its pre-forward
  hook (or earlier, prefetching them, but need not) and releases them in its post-forward hook. The head weight is
  therefore read inside the forward of the module that owns it (the head itself, PEFT's ``modules_to_save`` copy or a
  LoRA layer's ``base_layer``; the head when tied to the embedding), by a forward hook that runs before DeepSpeed's
  release; a LoRA adapter's ``B`` rows likewise inside ``lora_B``'s forward. Nothing is gathered a second time. The
  rows' gradient is added into the gathered weight's gradient in the backward pass
  (:mod:`~del_plugin.core.row_gradient`), where DeepSpeed gathers the weight again for the head's own backward and
  then reduce-scatters its gradient. A forward that never calls the head (a fused cross-entropy kernel that reads
  ``lm_head.weight`` itself) cannot be read under ZeRO-3 and is an error.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from .capture_errors import DigitCaptureError, refuse_fused_kernel
from .lora_head import LoraHead
from .readers import CapturedForward, DigitReader

__all__ = ["Fsdp2Head", "HeadSharding", "HeadShardings", "PlainHead", "Zero3Head", "partitioned_by_zero3"]


def partitioned_by_zero3(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is a DeepSpeed ZeRO-3 parameter (DeepSpeed gives those a ``ds_id``): whole for certain only
    inside the forward (and backward) of the module that owns it, else of shape ``(0,)``."""
    return hasattr(weight, "ds_id")


def sharded_by_fsdp2(model: Any) -> bool:
    """Whether ``model``, or a model inside the wrappers :func:`~del_plugin.core.head_lookup.unwrap` sees through, is
    an FSDP2 unit (the root unit of a sharded model, which holds the head)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch built without distributed support
        return False
    seen = set()
    while isinstance(model, torch.nn.Module) and id(model) not in seen:
        if isinstance(model, FSDPModule):
            return True
        seen.add(id(model))
        inner = getattr(model, "module", None)
        if not isinstance(inner, torch.nn.Module):
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, torch.nn.Module) and hasattr(model, "get_base_model"):
            inner = model.get_base_model()
        model = inner
    return False


class HeadSharding(ABC):
    """How one sharding makes the head's weight whole where DEL reads it (module docstring)."""

    def __init__(self, head: torch.nn.Module, reader: DigitReader):
        self.head, self.reader = head, reader

    @abstractmethod
    def on_decoder(self, forward: CapturedForward) -> None:
        """The decoder returned ``forward`` (its ``weight`` and ``bias`` not yet set): fill them in and hand it to the
        reader, now or once the weight is whole."""

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        """The adapter ``name``'s ``lora_A`` returned ``projected``: to the reader, now or once ``B`` is whole."""
        self.reader.on_lora(name, projected)

    def unread(self) -> str | None:
        """The module whose forward DEL still waits for in this forward, if any."""
        return None

    @abstractmethod
    def reset(self) -> None:
        """Forget the last forward."""

    @abstractmethod
    def remove(self) -> None:
        """Remove the hooks this strategy registered."""


class PlainHead(HeadSharding):
    """A whole weight, read when the decoder returns."""

    freed_after = False

    def reset(self) -> None:
        return  # nothing is held between the decoder's return and the reader

    def remove(self) -> None:
        return  # no hook of its own: the capture's decoder hook hands it the forward

    def on_decoder(self, forward: CapturedForward) -> None:
        weight = self.head.weight
        if type(weight).__name__ == "DTensor" or hasattr(weight, "placements"):
            refuse_fused_kernel("fsdp2_head_unit")
        forward.weight, forward.bias = weight, getattr(self.head, "bias", None)
        forward.freed_after = self.freed_after
        self.reader.on_decoder(forward)


class Fsdp2Head(PlainHead):
    """The root FSDP2 unit's gathered weight, read when the decoder returns and freed when the forward returns."""

    freed_after = True


class Zero3Head(HeadSharding):
    """A DeepSpeed ZeRO-3 weight, read inside the forward of the module that owns it (module docstring). Its hooks
    are registered at the first forward that finds the head partitioned; they read only while ``armed()``."""

    def __init__(self, head: torch.nn.Module, reader: DigitReader, lora: LoraHead | None, armed: Callable[[], bool]):
        super().__init__(head, reader)
        self.lora, self.armed = lora, armed
        self._handles: list[Any] = []
        self._hooked = False  # hooks registered at the first forward that finds the head partitioned
        self.reset()

    def reset(self) -> None:
        # the decoder's forward, waiting for the head's forward; per adapter, A(dropout(h)) waiting for lora_B's
        self._head_pending: CapturedForward | None = None
        self._lora_pending: dict[str, torch.Tensor] = {}

    def on_decoder(self, forward: CapturedForward) -> None:
        if not self._hooked:
            self._register_hooks()
        forward.freed_after = True
        self._head_pending = forward

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        self._lora_pending[name] = projected

    def unread(self) -> str | None:
        if self._head_pending is not None:
            return "the LM head"
        return f"the LoRA B of {list(self._lora_pending)}" if self._lora_pending else None

    def _register_hooks(self) -> None:
        """Hooks inside the forwards where ZeRO-3 has gathered the head's weights: after the forward of every module
        of the head that owns a weight (the head, PEFT's copies, a LoRA layer's base layer) and of each LoRA ``B``,
        ahead of DeepSpeed's own hook, which releases them (``prepend``)."""
        for module in self.head.modules():
            if isinstance(module._parameters.get("weight"), torch.Tensor):
                self._handles.append(module.register_forward_hook(self._on_weight_owner, prepend=True))
        if self.lora is not None:
            for name, lora_b in self.head.lora_B.items():
                self._handles.append(lora_b.register_forward_hook(self._lora_b_hook(name), prepend=True))
        self._hooked = True

    def _on_weight_owner(self, module, args, output) -> None:
        """After the forward of a module of the head that owns a weight, before DeepSpeed releases it: a forward whose
        decoder has returned reads the head's (now gathered) weight here."""
        forward = self._head_pending
        if not self.armed() or forward is None or module._parameters.get("weight") is not self.head.weight:
            return
        weight = self.head.weight
        if weight.numel() != math.prod(weight.ds_shape):
            raise DigitCaptureError(
                f"the LM head weight is still partitioned (shape {tuple(weight.shape)}) inside its own forward, where "
                "DeepSpeed ZeRO-3 gathers it and DEL reads its digit rows"
            )
        self._head_pending = None
        forward.weight, forward.bias = weight, getattr(self.head, "bias", None)
        self.reader.on_decoder(forward)

    def _lora_b_hook(self, name: str):
        def on_lora_b(module, args, output) -> None:
            projected = self._lora_pending.pop(name, None)
            if self.armed() and projected is not None:
                self.reader.on_lora(name, projected)

        return on_lora_b

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles, self._hooked = [], False


class HeadShardings:
    """The three strategies of one capture, and the one that reads a given weight of the head at this forward."""

    def __init__(self, model: Any, head: torch.nn.Module, reader: DigitReader, lora: LoraHead | None, armed):
        self.model = model  # to tell, at each forward, whether FSDP2 has sharded it since
        self.plain, self.fsdp2 = PlainHead(head, reader), Fsdp2Head(head, reader)
        self.zero3 = Zero3Head(head, reader, lora, armed)

    def of(self, weight: torch.Tensor) -> HeadSharding:
        """The strategy that reads ``weight`` (the head's, or a LoRA adapter's ``B``) at this forward."""
        if partitioned_by_zero3(weight):
            return self.zero3
        return self.fsdp2 if sharded_by_fsdp2(self.model) else self.plain

    def all(self) -> tuple[HeadSharding, ...]:
        return self.plain, self.fsdp2, self.zero3

    def unread(self) -> str | None:
        """The module some strategy still waits for in this forward, if any."""
        return next((what for what in (s.unread() for s in self.all()) if what is not None), None)

    def reset(self) -> None:
        for sharding in self.all():
            sharding.reset()

    def remove(self) -> None:
        for sharding in self.all():
            sharding.remove()
