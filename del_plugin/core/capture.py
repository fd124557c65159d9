"""Capture the digit logits inside a Hugging Face causal LM's forward pass, whatever computes its loss.

A forward hook on the decoder (``causal_lm.model``) reads the last hidden state it returns, the tensor the head
reads, and multiplies it by the digit rows of the head's effective weight, plus the head's bias where it has one
(:func:`~del_plugin.core.hidden.digit_logits_from_hidden`); the architecture's post-head transform
(:mod:`~del_plugin.core.architectures`: a soft cap, a scale) is then applied to those ten logits. The decoder runs
once in every forward: the plain one, Liger's and Cut Cross Entropy's fused ones (which never call the head), under
gradient checkpointing (which recomputes decoder layers, not the decoder's own call) and whatever module computes
its final norm (Liger replaces it; Phi and Falcon-H1 call it ``final_layernorm``). The product is taken inside the
forward, while a weight that FSDP shards is still gathered. Multimodal wrappers are read through their text part:
Gemma-3 and Mistral-3 keep the head on the wrapper, Llama-4 a whole causal LM inside it (``language_model``).

The head's effective weight: ``head.weight`` is the weight itself, the tied input embedding, or PEFT's trainable
``modules_to_save`` copy (PEFT's wrapper returns the active copy). A LoRA adapter on the head adds
``scaling * B · A(dropout(h))``; a hook on ``lora_A`` reads ``A(dropout(h))`` as the head computed it (same
dropout mask) and adds the digit rows of ``B``. Fused cross-entropy kernels read ``head.weight`` without the
adapter, so an adapter that did not run in an armed forward is an error, not a silent zero.

Two readers, chosen by the vocabulary at construction: single digit tokens (:class:`_SingleDigitReader`, the
``[B, T, F, 10]`` digit logits computed inside the forward) and number tokens (Llama-3's '123',
:class:`_NumberTokenReader`, :mod:`~del_plugin.core.digits`). The logits a digit slot reads depend on its target,
so the number-token reader keeps the decoder's output (the tensor the head's backward saves anyway: no copy) and
computes ``h · W[number rows]ᵀ`` only at the positions whose target is a number token, after the forward. Under
FSDP2 it reads a float32 copy of the head's number rows taken when the decoder returned
(:mod:`~del_plugin.core.head_rows`): FSDP2 frees the gathered head weight when the forward returns (Axolotl
reshards the root unit after the forward too).

Under FSDP2 the head must be whole when the decoder returns: it is in the root unit, which holds everything outside
the wrapped decoder layers (Axolotl's ``TRANSFORMER_BASED_WRAP``) and is gathered for the whole forward. A head that
FSDP2 made a unit of its own is still sharded then and is refused.

Under DeepSpeed ZeRO-3 every parameter is partitioned (shape ``(0,)`` on each rank) except while the module that owns
it runs its forward: DeepSpeed gathers a module's own parameters in its pre-forward hook (or earlier, prefetching
them, but need not) and releases them in its post-forward hook. The head weight is therefore read inside the forward
of the module that owns it (the head itself, PEFT's ``modules_to_save`` copy or a LoRA layer's ``base_layer``; the
head when tied to the embedding), by a forward hook that runs before DeepSpeed's release; a LoRA adapter's ``B`` rows
likewise inside ``lora_B``'s forward. What is read there is what the FSDP2 path reads when the decoder returns: the
single-digit reader's ``[B, T, F, 10]`` logits, or the number-token reader's float32 copy of the head's number rows
(:mod:`~del_plugin.core.head_rows`); nothing is gathered a second time. Their gradient is added into the gathered
weight's gradient in the backward pass, where DeepSpeed gathers the weight again for the head's own backward and then
reduce-scatters its gradient. A forward that never calls the head (a fused cross-entropy kernel that reads
``lm_head.weight`` itself) cannot be read under ZeRO-3 and is an error.

No transformers or PEFT import: modules are recognised by their attributes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .architectures import ARCHITECTURES, TRANSFORM_KEYS, Architecture, LogitTransform, text_config
from .digits import DigitTargets, select_digit_family, slot_digit_targets
from .head_rows import gather_rows, rows_vocab
from .hidden import digit_logits_from_hidden, number_logits_from_hidden
from .vocab import DigitVocab

__all__ = ["DigitCaptureError", "DigitLogitsCapture", "LogitsMismatch", "check_architecture"]


class DigitCaptureError(RuntimeError):
    """The model's digit logits cannot be read from its hidden states correctly."""


class LogitsMismatch(DigitCaptureError):
    """The measured digit logits differ from the model's own by more than rounding (``difference``, ``tolerance``)."""

    def __init__(self, message: str, difference: float, tolerance: float):
        super().__init__(message)
        self.difference, self.tolerance = difference, tolerance


def _unwrap(model: Any) -> tuple[Any, Any]:
    """(the model, the causal LM with the head): the model inside DDP / DeepSpeed (``.module``), ``torch.compile``
    (``._orig_mod``) and PEFT (``.get_base_model()``) wrappers, and the causal LM inside a multimodal wrapper whose
    text part is a causal LM of its own (Llama-4's ``language_model``), else the model itself."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), torch.nn.Module):
            model = model._orig_mod
        elif hasattr(model, "get_base_model"):
            model = model.get_base_model()
        else:
            break
    inner = getattr(model, "language_model", None)
    if isinstance(inner, torch.nn.Module) and isinstance(getattr(inner, "lm_head", None), torch.nn.Module):
        return model, inner
    return model, model


def _sharded_by_fsdp2(model: Any) -> bool:
    """Whether ``model``, or a model inside the wrappers :func:`_unwrap` sees through, is an FSDP2 unit (the root unit
    of a sharded model, which holds the head)."""
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


def _partitioned_by_zero3(weight: torch.Tensor) -> bool:
    """Whether ``weight`` is a DeepSpeed ZeRO-3 parameter (DeepSpeed gives those a ``ds_id``): whole for certain only
    inside the forward (and backward) of the module that owns it, else of shape ``(0,)``."""
    return hasattr(weight, "ds_id")


def _full_rows(weight: torch.Tensor) -> int:
    """The rows of a head weight, partitioned by ZeRO-3 (its ``ds_shape``) or not."""
    return tuple(getattr(weight, "ds_shape", weight.shape))[0]


def check_architecture(config: Any) -> Architecture | None:
    """The :class:`~del_plugin.core.architectures.Architecture` of ``config``'s model type, or None for a model type
    outside the table (then accepted only by measurement, :meth:`DigitLogitsCapture.check_against_logits`). Raises
    :class:`DigitCaptureError` when the config sets a post-head transform that DEL does not apply for this model
    type (the digit logits would not be the model's)."""
    model_type = getattr(config, "model_type", None)
    architecture = ARCHITECTURES.get(model_type)
    handled = architecture.reads if architecture is not None else ()
    configs = [config] + ([text_config(config)] if text_config(config) is not config else [])
    for name in TRANSFORM_KEYS:
        if name in handled:
            continue
        for part in configs:
            value = getattr(part, name, None)
            if value not in (None, 1, 1.0):
                known = (
                    "a model type DEL has no table entry for"
                    if architecture is None
                    else f"model_type {model_type!r}, whose entry does not read it"
                )
                raise DigitCaptureError(
                    f"model_type {model_type!r}: the model config sets {name}={value!r}, a transform of the logits "
                    f"after the head, on {known}; DEL's digit logits would not be the model's. Supported model "
                    f"types: {', '.join(ARCHITECTURES)} (docs/architectures.md)"
                )
    return architecture


def logits_tolerance(dtype: torch.dtype, scale: float) -> float:
    """How far the model's own logits may lie from DEL's float32 digit logits by rounding alone: four steps of the
    logits' dtype at the largest logit (a bf16 head output and a bf16 transform round a few times), and at least
    1e-4 of it (float32 matrix products summed in another order)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 1e-4
    return max(4 * eps, 1e-4) * max(1.0, scale)


class _LoraHead:
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


class _Forward:
    """What one armed forward handed a reader: the decoder's output, the head's weight and bias as they were then,
    whether to build a graph, the LoRA adapters expected to run on the head, and whether the head's weight is freed
    after the point where it was read (FSDP2 when the forward returns, ZeRO-3 when the head's forward returns)."""

    __slots__ = ("hidden", "weight", "bias", "grad", "lora_expected", "freed_after")

    def __init__(self, hidden, weight, bias, grad: bool, lora_expected: list[str], freed_after: bool = False):
        self.hidden, self.weight, self.bias, self.grad, self.lora_expected = hidden, weight, bias, grad, lora_expected
        self.freed_after = freed_after


class _DigitReader:
    """One way of reading a vocabulary's digits from a captured forward (single digit tokens, or number tokens).
    The capture calls :meth:`on_decoder` and :meth:`on_lora` from its hooks and :meth:`digit_targets` after the
    forward; :meth:`reset` forgets the forward."""

    def __init__(self, vocab: DigitVocab, lora: _LoraHead | None):
        self.vocab, self.lora = vocab, lora
        self.reset()

    def reset(self) -> None:
        raise NotImplementedError

    def captured(self) -> bool:
        raise NotImplementedError

    def on_decoder(self, forward: _Forward) -> None:
        raise NotImplementedError

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        raise NotImplementedError

    def digit_targets(
        self, targets: torch.Tensor, transform: LogitTransform | None, positions: list[torch.Tensor] | None
    ) -> DigitTargets:
        raise NotImplementedError

    def check_logits(self, shape: torch.Size, transform: LogitTransform | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(DEL's logits of every row it reads at every position of the forward, ``[B, T, ...]``; the vocabulary ids
        of those rows, to index the model's own ``[B, T, V]`` logits with)."""
        raise NotImplementedError


class _SingleDigitReader(_DigitReader):
    """One token per digit: the ``[B, T, F, 10]`` digit logits are computed inside the forward, from the decoder's
    output and the head's digit rows, and a LoRA adapter's rows are added when it runs."""

    def reset(self) -> None:
        self.raw_logits: torch.Tensor | None = None  # before the architecture's transform
        self._final: torch.Tensor | None = None
        self._grad = False

    def captured(self) -> bool:
        return self.raw_logits is not None

    def on_decoder(self, forward: _Forward) -> None:
        with torch.set_grad_enabled(forward.grad):
            self.raw_logits = digit_logits_from_hidden(forward.hidden, forward.weight, self.vocab, forward.bias)
        self._grad = forward.grad

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        if self.raw_logits is None:
            raise DigitCaptureError("the LM head's LoRA adapter ran before the decoder returned")
        ids = self.vocab.family_ids(projected.device).reshape(-1)
        with torch.set_grad_enabled(self._grad):
            delta = self.lora.delta(name, projected, *self.lora.rows(name, ids))
            self.raw_logits = self.raw_logits + delta.unflatten(-1, self.raw_logits.shape[-2:])
        self._final = None

    def digit_logits(self, transform: LogitTransform | None) -> torch.Tensor:
        if self._final is None:
            self._final = self.raw_logits if transform is None else transform(self.raw_logits)
        return self._final

    def digit_targets(
        self, targets: torch.Tensor, transform: LogitTransform | None, positions: list[torch.Tensor] | None
    ) -> DigitTargets:
        if positions is not None:
            raise ValueError(f"{self.vocab.name} has no number tokens: number-token positions are not read")
        logits = self.digit_logits(transform)
        return select_digit_family(logits, targets.to(logits.device), self.vocab)

    def check_logits(self, shape: torch.Size, transform: LogitTransform | None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.digit_logits(transform), self.vocab.family_ids(self.raw_logits.device)


class _NumberTokenReader(_DigitReader):
    """Number tokens (Llama-3's '123'): the rows a slot reads depend on its target, so the decoder's output (the
    tensor the head's backward saves anyway: no copy), the head's weight and the LoRA adapters' ``A(dropout(h))``
    and ``B`` rows are kept, and the slots are computed in :meth:`digit_targets`, at the positions whose target is
    a number token. Under FSDP2, which frees the head's weight when the forward returns (module docstring), a
    float32 copy of the head's number rows (and bias) taken while the forward runs is kept instead of the weight,
    and read through :attr:`rows`, the vocabulary of the copy. A forward is read for one ``targets`` tensor; the
    hidden states are then let go."""

    def __init__(self, vocab: DigitVocab, lora: _LoraHead | None):
        self.rows = rows_vocab(vocab)
        super().__init__(vocab, lora)

    def reset(self) -> None:
        self.forward: _Forward | None = None
        # per adapter: A(dropout(h)), and B's weight and bias at the number rows
        self.projected: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
        self.slots: tuple[torch.Tensor, DigitTargets] | None = None  # the targets read last, and their slots

    def captured(self) -> bool:
        return self.forward is not None

    def on_decoder(self, forward: _Forward) -> None:
        if forward.freed_after:
            ids = self.vocab.number_row_ids_on(forward.weight.device)
            with torch.set_grad_enabled(forward.grad):
                forward.weight = gather_rows(forward.weight, ids)
                forward.bias = None if forward.bias is None else forward.bias[ids].float()
        self.forward = forward

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        if self.forward is None:
            raise DigitCaptureError("the LM head's LoRA adapter ran before the decoder returned")
        with torch.set_grad_enabled(self.forward.grad):
            self.projected[name] = (projected, *self.lora.rows(name, self.vocab.number_row_ids_on(projected.device)))

    def digit_targets(
        self, targets: torch.Tensor, transform: LogitTransform | None, positions: list[torch.Tensor] | None
    ) -> DigitTargets:
        hidden = self.forward.hidden
        if positions is not None:
            positions = [p.to(hidden.device) for p in positions]
        slots = slot_digit_targets(
            targets.to(hidden.device),
            self.vocab,
            lambda where: self._group_logits(where, transform),
            positions,
        )
        # the decoder's output is not held past its one read (the result's graph keeps what backward needs)
        self.forward, self.projected, self.slots = None, {}, (targets, slots)
        return slots

    def _group_logits(self, positions: list[torch.Tensor], transform: LogitTransform | None) -> list[torch.Tensor]:
        """Each number group's logits at its flat positions of the captured forward, as the model's own: the head's
        rows (bias, LoRA adapters) on the decoder's output, then the architecture's transform."""
        forward, offsets = self.forward, self.vocab.group_offsets
        with torch.set_grad_enabled(forward.grad):
            vocab = self.rows if forward.freed_after else self.vocab  # the copied rows, or the head's weight
            z = number_logits_from_hidden(forward.hidden, forward.weight, vocab, positions, forward.bias)
            for name in forward.lora_expected:
                projected, b_rows, b_bias = self.projected[name]
                flat = projected.reshape(-1, projected.shape[-1])
                for g, pos in enumerate(positions):
                    group = slice(offsets[g], offsets[g + 1])
                    bias = None if b_bias is None else b_bias[group]
                    z[g] = z[g] + self.lora.delta(name, flat.index_select(0, pos), b_rows[group], bias)
            if transform is not None:
                z = [transform(zg) for zg in z]
        return z

    def check_logits(self, shape: torch.Size, transform: LogitTransform | None) -> tuple[torch.Tensor, torch.Tensor]:
        # every number row at every position: [B, T, R]
        device = self.forward.hidden.device
        everywhere = torch.arange(shape[0] * shape[1], device=device)
        ours = torch.cat(self._group_logits([everywhere] * len(self.vocab.number_groups), transform), dim=-1)
        return ours.view(*shape[:2], -1), self.vocab.number_row_ids_on(device)


class DigitLogitsCapture:
    """Reads the digit logits of a causal LM's forward from its final hidden states (module docstring).

    ::

        capture = DigitLogitsCapture(model, vocab)      # once: registers the hooks
        with capture:                                   # one forward pass
            outputs = model(**batch)                    # any loss kernel; outputs.logits may be None
        digit_targets = capture.digit_targets(targets)  # DigitTargets for aligned targets [B, T]
        capture.remove()                                # when done with the model

    Outside a ``with`` block the hooks do nothing (generation, gradient-checkpoint recomputation). With
    ``differentiable=False`` the digit logits are computed without a graph (metrics only). Raises
    :class:`DigitCaptureError` at construction for an architecture or head it cannot read exactly. How digits are
    read is the vocabulary's: one token per digit, or number tokens read slot by slot (``self.reader``).
    """

    def __init__(self, model: torch.nn.Module, vocab: DigitVocab, *, differentiable: bool = True):
        self._model = model  # to tell, at each forward, whether FSDP2 has sharded it since
        outer, causal_lm = _unwrap(model)
        config = getattr(outer, "config", None)
        self.model_type = getattr(config, "model_type", None)
        self.architecture = check_architecture(config)
        # the transform the model applies (an unlisted model type: none, to be measured)
        self.transform: LogitTransform | None = (
            self.architecture.transform(config) if self.architecture is not None else None
        )
        decoder = getattr(causal_lm, "model", None)
        head = causal_lm.get_output_embeddings() if hasattr(causal_lm, "get_output_embeddings") else None
        if not isinstance(decoder, torch.nn.Module) or not isinstance(head, torch.nn.Module):
            raise DigitCaptureError(
                f"model_type {self.model_type!r}: {type(causal_lm).__name__} has no decoder (`.model`) or no LM head "
                "(get_output_embeddings()), so DEL cannot read what the head reads"
            )
        if getattr(head, "weight", None) is None:
            raise DigitCaptureError(f"model_type {self.model_type!r}: the LM head {type(head).__name__} has no weight")
        largest = max(vocab.number_row_ids)
        if largest >= _full_rows(head.weight):
            raise DigitCaptureError(
                f"digit token id {largest} of {vocab.name} is outside the LM head's {_full_rows(head.weight)} rows: "
                "the tokenizer and the model do not match"
            )
        self.vocab = vocab
        self.head = head
        self.differentiable = differentiable
        self.lora = _LoraHead(head) if hasattr(head, "lora_A") and hasattr(head, "lora_B") else None
        if self.lora is not None:
            self.lora.check()
        reader = _NumberTokenReader if vocab.max_digits > 1 else _SingleDigitReader
        self.reader: _DigitReader = reader(vocab, self.lora)
        self.verified = False  # set by check_against_logits, with the difference it measured
        self.measured_difference: float | None = None
        self.measured_tolerance: float | None = None  # what rounding allowed at that measurement
        self._armed = False
        self._reset()
        self._handles = [decoder.register_forward_hook(self._on_decoder)]
        if self.lora is not None:
            for name, module in self.head.lora_A.items():
                self._handles.append(module.register_forward_hook(self._lora_hook(name)))
        self._zero3_hooks = False  # registered at the first forward that finds the head partitioned by ZeRO-3

    def _reset(self) -> None:
        """Forget the last captured forward."""
        self.reader.reset()
        self._decoder_calls = 0
        self._lora_calls: dict[str, int] = {}
        self._lora_expected: list[str] = []
        self._autocast_dtype: torch.dtype | None = None  # autocast's dtype inside the forward, if it was on
        # ZeRO-3: the decoder's forward, waiting for the head's forward to read the gathered weight; per LoRA
        # adapter, A(dropout(h)) waiting for lora_B's forward
        self._head_pending: _Forward | None = None
        self._lora_pending: dict[str, torch.Tensor] = {}

    # ------------------------------------------------------------------ hooks
    def _on_decoder(self, module, args, output) -> None:
        if not self._armed:
            return
        self._decoder_calls += 1
        if self._decoder_calls > 1:
            if not torch.is_grad_enabled():
                # a host that runs the model again without gradients after its loss forward (TRL 1.16 recomputes
                # the logits for `return_outputs`): the loss's forward is the one read
                return
            raise DigitCaptureError("the decoder ran twice in one captured forward pass; capture one forward at a time")
        hidden = getattr(output, "last_hidden_state", None)
        if hidden is None:
            hidden = output[0] if isinstance(output, (tuple, list)) else output
        if not isinstance(hidden, torch.Tensor):
            raise DigitCaptureError(
                f"model_type {self.model_type!r}: the decoder returned {type(output).__name__}, without a last "
                "hidden state tensor"
            )
        self._lora_expected = self.lora.active() if self.lora is not None else []
        # read here, inside the forward: a wrapper that autocasts the forward (accelerate's mixed precision) has
        # switched autocast off again by the time the forward returns
        device = hidden.device.type
        self._autocast_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        grad = torch.is_grad_enabled() and self.differentiable
        if _partitioned_by_zero3(self.head.weight):  # read inside the head's forward: _on_head_weight_owner
            if not self._zero3_hooks:
                self._register_zero3_hooks()
            self._head_pending = _Forward(hidden, None, None, grad, self._lora_expected, freed_after=True)
            return
        bias = getattr(self.head, "bias", None)
        weight, freed_after = self._whole_head_weight(), _sharded_by_fsdp2(self._model)
        self.reader.on_decoder(_Forward(hidden, weight, bias, grad, self._lora_expected, freed_after))

    def _register_zero3_hooks(self) -> None:
        """Hooks inside the forwards where ZeRO-3 has gathered the head's weights (module docstring): after the forward
        of every module of the head that owns a weight (the head, PEFT's copies, a LoRA layer's base layer) and of
        each LoRA ``B``, ahead of DeepSpeed's own hook, which releases them (``prepend``)."""
        for module in self.head.modules():
            if isinstance(module._parameters.get("weight"), torch.Tensor):
                self._handles.append(module.register_forward_hook(self._on_head_weight_owner, prepend=True))
        if self.lora is not None:
            for name, lora_b in self.head.lora_B.items():
                self._handles.append(lora_b.register_forward_hook(self._lora_b_hook(name), prepend=True))
        self._zero3_hooks = True

    def _on_head_weight_owner(self, module, args, output) -> None:
        """After the forward of a module of the head that owns a weight, before DeepSpeed releases it: a ZeRO-3
        forward whose decoder has returned reads the head's (now gathered) weight here."""
        forward = self._head_pending
        if not self._armed or forward is None or module._parameters.get("weight") is not self.head.weight:
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

    def _whole_head_weight(self) -> torch.Tensor:
        weight = self.head.weight
        if type(weight).__name__ == "DTensor" or hasattr(weight, "placements"):
            raise DigitCaptureError(
                "the LM head weight is still sharded (a DTensor) when the decoder returns, where DEL reads its digit "
                "rows: FSDP2 made lm_head a unit of its own, gathered only inside the head's own forward (which "
                "fused cross-entropy kernels skip). Keep lm_head in the root FSDP unit: fsdp_config "
                "auto_wrap_policy: TRANSFORMER_BASED_WRAP with transformer_layer_cls_to_wrap set to the decoder "
                "layer class, as examples/*/paper-full-fsdp.yml do (SIZE_BASED_WRAP makes a unit of every module above "
                "min_num_params, the head included)"
            )
        return weight

    def _lora_hook(self, name: str):
        def on_lora_a(module, args, projected) -> None:
            if not self._armed or name not in self._lora_expected:
                return
            self._lora_calls[name] = self._lora_calls.get(name, 0) + 1
            if _partitioned_by_zero3(self.head.lora_B[name].weight):  # B's rows are read inside lora_B's forward
                self._lora_pending[name] = projected
            else:
                self.reader.on_lora(name, projected)

        return on_lora_a

    def _lora_b_hook(self, name: str):
        def on_lora_b(module, args, output) -> None:
            projected = self._lora_pending.pop(name, None)
            if self._armed and projected is not None:
                self.reader.on_lora(name, projected)

        return on_lora_b

    # ------------------------------------------------------------------ use
    def __enter__(self) -> DigitLogitsCapture:
        self._armed = True
        self._reset()
        return self

    def __exit__(self, *exc) -> None:
        self._armed = False

    def _check_captured(self) -> None:
        if self._head_pending is not None or self._lora_pending:
            module = "the LM head" if self._head_pending is not None else f"the LoRA B of {list(self._lora_pending)}"
            raise DigitCaptureError(
                f"DeepSpeed ZeRO-3 partitions the LM head, and {module} did not run its forward after the decoder "
                "returned, where DEL reads its digit rows while DeepSpeed has gathered them: a fused cross-entropy "
                "kernel (liger_fused_linear_cross_entropy, cut_cross_entropy) reads lm_head.weight without calling "
                "the head. Under ZeRO-3 use plain cross-entropy, or shard with FSDP2 (examples/*/paper-full-fsdp.yml), "
                "which keeps fused kernels"
            )
        if not self.reader.captured():
            read_before = isinstance(self.reader, _NumberTokenReader) and self.reader.slots is not None
            raise DigitCaptureError(
                "no digit logits were captured: run the model's forward inside `with capture:` (the decoder did "
                "not run in an armed forward)"
                + ("; with number tokens each forward is read once, for one targets tensor" if read_before else "")
            )
        missing = [n for n in self._lora_expected if self._lora_calls.get(n, 0) != 1]
        if missing:
            raise DigitCaptureError(
                f"the LoRA adapter(s) {missing} on the LM head did not run in this forward pass, so the loss was "
                "computed without them (fused cross-entropy kernels read lm_head.weight, the base weight); DEL "
                "would read a different head than the cross-entropy. Use plain cross-entropy, or train the head "
                "with modules_to_save instead of LoRA"
            )

    def digit_logits(self) -> torch.Tensor:
        """``[B, T, F, 10]`` float32 digit logits of the last captured forward, as the model's own logits are: the
        head's digit rows (and bias) on the decoder's last hidden state, then the architecture's transform. For a
        vocabulary with number tokens, whose slots read other rows at each target, use :meth:`digit_targets`."""
        if not isinstance(self.reader, _SingleDigitReader):
            raise DigitCaptureError(
                f"{self.vocab.name} has number tokens of up to {self.vocab.max_digits} digits: their digit logits "
                "depend on the target, so read them with capture.digit_targets(targets)"
            )
        self._check_captured()
        return self.reader.digit_logits(self.transform)

    def digit_targets(self, targets: torch.Tensor, positions: list[torch.Tensor] | None = None) -> DigitTargets:
        """:class:`DigitTargets` of the last captured forward for aligned ``targets`` ``[B, T]`` (position ``t`` of
        the forward predicts ``targets[:, t]``; shift the labels first).

        With number tokens the slots are computed here, at the positions whose target is a number token, and the
        forward's hidden states are then let go: a forward is read for one ``targets`` tensor (asking again with the
        same tensor returns the same slots). ``positions`` are those positions, one tensor per number group, as
        :func:`~del_plugin.core.digits.number_target_positions` reads them from ``targets`` on the host (the
        collator's ``del_number_positions``); without them they are found on the device of ``targets``, which on a
        GPU makes the host wait for it once per group."""
        slots = getattr(self.reader, "slots", None)
        if slots is not None and slots[0] is targets:
            return slots[1]
        self._check_captured()
        return self.reader.digit_targets(targets, self.transform, positions)

    @torch.no_grad()
    def check_against_logits(
        self, model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> float | None:
        """Measure the captured digit logits against the model's own on one short forward: returns the largest
        absolute difference, or None when that forward returns no logits; raises :class:`LogitsMismatch` when it
        exceeds :func:`logits_tolerance` (a model type whose logits DEL does not read exactly).

        The forward runs in eval mode without labels and without a graph (fused cross-entropy forwards compute the
        logits then), on ``model`` as the trainer holds it; the training mode is restored afterwards."""
        was_training, differentiable = model.training, self.differentiable
        model.eval()
        self.differentiable = False
        try:
            with self:
                outputs = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
            logits = outputs.get("logits") if hasattr(outputs, "get") else outputs[0]
            if logits is None:
                return None
            self._check_captured()
            ours, ids = self.reader.check_logits(logits.shape, self.transform)
        finally:
            model.train(was_training)
            self.differentiable = differentiable
            autocast_dtype = self._autocast_dtype
            self._reset()
        theirs = logits[..., ids.to(logits.device)]  # [B, T, F, 10], or [B, T, R] for number tokens
        keep = torch.ones(theirs.shape[:2], dtype=torch.bool, device=theirs.device)
        if attention_mask is not None:
            keep = attention_mask.to(theirs.device).bool()
        theirs, ours = theirs[keep].float(), ours.to(theirs.device)[keep]
        difference = (ours - theirs).abs().max().item() if theirs.numel() else 0.0
        scale = theirs.abs().max().item() if theirs.numel() else 0.0
        # the coarsest precision the logits went through: their dtype, the head's, or autocast's (a bf16 product
        # cast to float32 is still a bf16 product)
        device = logits.device.type
        dtypes = [logits.dtype, self.head.weight.dtype]
        if torch.is_autocast_enabled(device):
            dtypes.append(torch.get_autocast_dtype(device))
        if autocast_dtype is not None:  # a wrapper that autocast the forward alone (see _on_decoder)
            dtypes.append(autocast_dtype)
        tolerance = max(logits_tolerance(dtype, scale) for dtype in dtypes)
        if not difference <= tolerance:
            transform = self.transform.description if self.transform is not None else "none"
            raise LogitsMismatch(
                f"model_type {self.model_type!r}: DEL's digit logits differ from the model's own by {difference:.4g} "
                f"(rounding allows {tolerance:.3g} at a largest logit of {scale:.4g}; post-head transform applied: "
                f"{transform}), measured on a forward of {int(keep.sum())} tokens. This architecture does not make "
                "its logits as the head on the decoder's last hidden state"
                + ("" if self.architecture is not None else ", and it has no entry in DEL's table")
                + "; DEL cannot train it exactly (docs/architectures.md)",
                difference,
                tolerance,
            )
        self.verified, self.measured_difference, self.measured_tolerance = True, difference, tolerance
        return difference

    def remove(self) -> None:
        """Remove the hooks from the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._zero3_hooks = False
