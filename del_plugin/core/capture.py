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
computes ``h · W[number rows]ᵀ`` only at the positions whose target is a number token, after the forward. The
head's weight must still be whole then (it is in the root FSDP unit, which FSDP does not reshard after the
forward).

No transformers or PEFT import: modules are recognised by their attributes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .architectures import ARCHITECTURES, TRANSFORM_KEYS, Architecture, LogitTransform, text_config
from .digits import DigitTargets, select_digit_family, slot_digit_targets
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

    def delta(self, name: str, projected: torch.Tensor, row_ids: torch.Tensor) -> torch.Tensor:
        """The adapter ``name``'s float32 contribution ``scaling * B[rows] · A(dropout(h))`` to the head's rows
        ``row_ids``, from ``projected`` = ``A(dropout(h))`` ``[..., r]`` as the head computed it."""
        lora_b = self.head.lora_B[name]
        bias = None if lora_b.bias is None else lora_b.bias[row_ids].float()
        with torch.autocast(device_type=projected.device.type, enabled=False):
            return F.linear(projected.float(), lora_b.weight[row_ids].float(), bias) * self.head.scaling[name]


class _Forward:
    """What one armed forward handed a reader: the decoder's output, the head's weight and bias as they were then,
    whether to build a graph, and the LoRA adapters expected to run on the head."""

    __slots__ = ("hidden", "weight", "bias", "grad", "lora_expected")

    def __init__(self, hidden, weight, bias, grad: bool, lora_expected: list[str]):
        self.hidden, self.weight, self.bias, self.grad, self.lora_expected = hidden, weight, bias, grad, lora_expected


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

    def digit_targets(self, targets: torch.Tensor, transform: LogitTransform | None) -> DigitTargets:
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
            delta = self.lora.delta(name, projected, ids)
            self.raw_logits = self.raw_logits + delta.unflatten(-1, self.raw_logits.shape[-2:])
        self._final = None

    def digit_logits(self, transform: LogitTransform | None) -> torch.Tensor:
        if self._final is None:
            self._final = self.raw_logits if transform is None else transform(self.raw_logits)
        return self._final

    def digit_targets(self, targets: torch.Tensor, transform: LogitTransform | None) -> DigitTargets:
        logits = self.digit_logits(transform)
        return select_digit_family(logits, targets.to(logits.device), self.vocab)

    def check_logits(self, shape: torch.Size, transform: LogitTransform | None) -> tuple[torch.Tensor, torch.Tensor]:
        return self.digit_logits(transform), self.vocab.family_ids(self.raw_logits.device)


class _NumberTokenReader(_DigitReader):
    """Number tokens (Llama-3's '123'): the rows a slot reads depend on its target, so the decoder's output (the
    tensor the head's backward saves anyway: no copy) and the LoRA adapters' ``A(dropout(h))`` are kept, and the
    slots are computed in :meth:`digit_targets`, at the positions whose target is a number token. A forward is read
    for one ``targets`` tensor; the hidden states are then let go."""

    def reset(self) -> None:
        self.forward: _Forward | None = None
        self.projected: dict[str, torch.Tensor] = {}
        self.slots: tuple[torch.Tensor, DigitTargets] | None = None  # the targets read last, and their slots

    def captured(self) -> bool:
        return self.forward is not None

    def on_decoder(self, forward: _Forward) -> None:
        self.forward = forward

    def on_lora(self, name: str, projected: torch.Tensor) -> None:
        if self.forward is None:
            raise DigitCaptureError("the LM head's LoRA adapter ran before the decoder returned")
        self.projected[name] = projected

    def digit_targets(self, targets: torch.Tensor, transform: LogitTransform | None) -> DigitTargets:
        hidden = self.forward.hidden
        slots = slot_digit_targets(
            targets.to(hidden.device), self.vocab, lambda positions: self._group_logits(positions, transform)
        )
        # the decoder's output is not held past its one read (the result's graph keeps what backward needs)
        self.forward, self.projected, self.slots = None, {}, (targets, slots)
        return slots

    def _group_logits(self, positions: list[torch.Tensor], transform: LogitTransform | None) -> list[torch.Tensor]:
        """Each number group's logits at its flat positions of the captured forward, as the model's own: the head's
        rows (bias, LoRA adapters) on the decoder's output, then the architecture's transform."""
        forward = self.forward
        with torch.set_grad_enabled(forward.grad):
            z = number_logits_from_hidden(forward.hidden, forward.weight, self.vocab, positions, forward.bias)
            rows = self.vocab.group_row_ids_on(forward.hidden.device)
            for name in forward.lora_expected:
                projected = self.projected[name]
                flat = projected.reshape(-1, projected.shape[-1])
                for g, (pos, ids) in enumerate(zip(positions, rows)):
                    z[g] = z[g] + self.lora.delta(name, flat.index_select(0, pos), ids)
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
        self._armed = False
        self._reset()
        self._handles = [decoder.register_forward_hook(self._on_decoder)]
        if self.lora is not None:
            for name, module in self.head.lora_A.items():
                self._handles.append(module.register_forward_hook(self._lora_hook(name)))

    def _reset(self) -> None:
        """Forget the last captured forward."""
        self.reader.reset()
        self._decoder_calls = 0
        self._lora_calls: dict[str, int] = {}
        self._lora_expected: list[str] = []

    # ------------------------------------------------------------------ hooks
    def _on_decoder(self, module, args, output) -> None:
        if not self._armed:
            return
        self._decoder_calls += 1
        if self._decoder_calls > 1:
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
        grad = torch.is_grad_enabled() and self.differentiable
        bias = getattr(self.head, "bias", None)
        self.reader.on_decoder(_Forward(hidden, self._whole_head_weight(), bias, grad, self._lora_expected))

    def _whole_head_weight(self) -> torch.Tensor:
        weight = self.head.weight
        if type(weight).__name__ == "DTensor" or hasattr(weight, "placements"):
            raise DigitCaptureError(
                "the LM head weight is still sharded (a DTensor) when DEL reads it: FSDP wraps lm_head as a "
                "unit of its own, so its full weight exists only inside the head's forward, which fused losses "
                "skip. Keep lm_head in the root FSDP unit (do not list it in the FSDP wrap policy)"
            )
        if getattr(weight, "ds_numel", None) is not None or weight.numel() == 0:
            raise DigitCaptureError(
                "the LM head weight is partitioned (DeepSpeed ZeRO-3) when DEL reads it; use ZeRO-2 or FSDP"
            )
        return weight

    def _lora_hook(self, name: str):
        def on_lora_a(module, args, projected) -> None:
            if not self._armed or name not in self._lora_expected:
                return
            self._lora_calls[name] = self._lora_calls.get(name, 0) + 1
            self.reader.on_lora(name, projected)

        return on_lora_a

    # ------------------------------------------------------------------ use
    def __enter__(self) -> DigitLogitsCapture:
        self._armed = True
        self._reset()
        return self

    def __exit__(self, *exc) -> None:
        self._armed = False

    def _check_captured(self) -> None:
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

    def digit_targets(self, targets: torch.Tensor) -> DigitTargets:
        """:class:`DigitTargets` of the last captured forward for aligned ``targets`` ``[B, T]`` (position ``t`` of
        the forward predicts ``targets[:, t]``; shift the labels first).

        With number tokens the slots are computed here, at the positions whose target is a number token, and the
        forward's hidden states are then let go: a forward is read for one ``targets`` tensor (asking again with the
        same tensor returns the same slots)."""
        slots = getattr(self.reader, "slots", None)
        if slots is not None and slots[0] is targets:
            return slots[1]
        self._check_captured()
        return self.reader.digit_targets(targets, self.transform)

    @torch.no_grad()
    def check_against_logits(
        self,
        model: torch.nn.Module,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        autocast_dtype: torch.dtype | None = None,
    ) -> float | None:
        """Measure the captured digit logits against the model's own on one short forward: returns the largest
        absolute difference, or None when that forward returns no logits; raises :class:`LogitsMismatch` when it
        exceeds :func:`logits_tolerance` (a model type whose logits DEL does not read exactly).

        ``autocast_dtype``: the dtype of an autocast that ``model``'s forward enters itself, out of sight of this
        call (accelerate's mixed precision wraps the forward of a float32 model in bf16/fp16 autocast and hands back
        float32 logits: bf16 products all the same).

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
        if autocast_dtype is not None:
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
        self.verified, self.measured_difference = True, difference
        return difference

    def remove(self) -> None:
        """Remove the hooks from the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
