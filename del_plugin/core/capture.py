"""Capture the digit logits inside a Hugging Face causal LM's forward pass, whatever computes its loss.

A forward hook on the decoder's final norm reads the hidden states the head reads and multiplies them by the
digit rows of the head's effective weight (:func:`~del_plugin.core.hidden.digit_logits_from_hidden`). The
final norm runs in every forward of the verified architectures: the plain one, Liger's and Cut Cross Entropy's
fused ones (which never call the head) and under gradient checkpointing (which recomputes decoder layers only).
The product is taken inside the forward, while a weight that FSDP shards is still gathered.

The head's effective weight: ``head.weight`` is the weight itself, the tied input embedding, or PEFT's trainable
``modules_to_save`` copy (PEFT's wrapper returns the active copy). A LoRA adapter on the head adds
``scaling * B · A(dropout(h))``; a hook on ``lora_A`` reads ``A(dropout(h))`` as the head computed it (same
dropout mask) and adds the digit rows of ``B``. Fused cross-entropy kernels read ``head.weight`` without the
adapter, so an adapter that did not run in an armed forward is an error, not a silent zero.

No transformers or PEFT import: modules are recognised by their attributes.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from .digits import DigitTargets
from .hidden import digit_logits_from_hidden, select_digit_family
from .vocab import DigitVocab

__all__ = ["VERIFIED_ARCHITECTURES", "DigitCaptureError", "DigitLogitsCapture"]

# model_type -> causal-LM class whose logits are exactly ``lm_head(model.norm(...))`` with a bias-free head (read in
# transformers 5.20.1). Other architectures scale, cap or bias their logits, or were not checked.
VERIFIED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",  # Llama-2, CodeLlama, DeepSeek LLM / Math / Coder, SmolLM2
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",  # Qwen2, Qwen2.5
}
# config attributes that transform the logits after the head in other architectures (Gemma-2/3, Cohere, Granite,
# HyperCLOVA X, MiniCPM3, Falcon-H1, ...): refused even under a verified model_type
_LOGIT_TRANSFORMS = (
    "final_logit_softcapping",
    "logits_soft_cap",
    "logit_scale",
    "logits_scaling",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_mup_width_multiplier",
)


class DigitCaptureError(RuntimeError):
    """The model's digit logits cannot be read from its hidden states correctly."""


def _unwrap(model: Any) -> Any:
    """The causal LM inside DDP / DeepSpeed (``.module``) and PEFT (``.get_base_model()``) wrappers."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    return model


def check_architecture(config: Any) -> None:
    """Raise :class:`DigitCaptureError` unless the config is of a verified architecture without logit transforms."""
    model_type = getattr(config, "model_type", None)
    if model_type not in VERIFIED_ARCHITECTURES:
        raise DigitCaptureError(
            f"model_type {model_type!r} is not one DEL reads from hidden states: it is verified for "
            f"{', '.join(sorted(VERIFIED_ARCHITECTURES))} (Llama-2/CodeLlama/DeepSeek, Mistral, Qwen2/2.5), whose "
            "logits are exactly the bias-free head applied to the final norm's output. Others scale, cap or bias "
            "their logits (Gemma-2/3 softcapping, Cohere's logit_scale, Granite's logits_scaling) or were not checked"
        )
    for name in _LOGIT_TRANSFORMS:
        value = getattr(config, name, None)
        if value not in (None, 1, 1.0):
            raise DigitCaptureError(
                f"the model config sets {name}={value!r}, which transforms the logits after the "
                "head; DEL's digit logits would not be the model's"
            )


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
    :class:`DigitCaptureError` at construction for an architecture or head it cannot read exactly.
    """

    def __init__(self, model: torch.nn.Module, vocab: DigitVocab, *, differentiable: bool = True):
        causal_lm = _unwrap(model)
        config = getattr(causal_lm, "config", None)
        check_architecture(config)
        decoder = causal_lm.get_decoder() if hasattr(causal_lm, "get_decoder") else getattr(causal_lm, "model", None)
        norm = getattr(decoder, "norm", None)
        head = causal_lm.get_output_embeddings() if hasattr(causal_lm, "get_output_embeddings") else None
        if not isinstance(norm, torch.nn.Module) or not isinstance(head, torch.nn.Module):
            raise DigitCaptureError(f"{type(causal_lm).__name__} has no final norm (model.norm) or no LM head")
        if getattr(head, "bias", None) is not None:
            raise DigitCaptureError("the LM head has a bias; DEL reads bias-free heads only")
        self.vocab = vocab
        self.head = head
        self.differentiable = differentiable
        self.lora = _LoraHead(head) if hasattr(head, "lora_A") and hasattr(head, "lora_B") else None
        if self.lora is not None:
            self.lora.check()
        self._armed = False
        self._logits: torch.Tensor | None = None
        self._norm_calls = 0
        self._lora_calls: dict[str, int] = {}
        self._lora_expected: list[str] = []
        self._handles = [norm.register_forward_hook(self._on_norm)]
        if self.lora is not None:
            for name, module in self.head.lora_A.items():
                self._handles.append(module.register_forward_hook(self._lora_hook(name)))

    # ------------------------------------------------------------------ hooks
    def _on_norm(self, module, args, hidden) -> None:
        if not self._armed:
            return
        self._norm_calls += 1
        if self._norm_calls > 1:
            raise DigitCaptureError(
                "the final norm ran twice in one captured forward pass; capture one forward at a time"
            )
        weight = self.head.weight
        if type(weight).__name__ == "DTensor" or hasattr(weight, "placements"):
            raise DigitCaptureError(
                "the LM head weight is still sharded (a DTensor) when the final norm runs: FSDP wraps lm_head as a "
                "unit of its own, so its full weight exists only inside the head's forward, which fused losses "
                "skip. Keep lm_head in the root FSDP unit (do not list it in the FSDP wrap policy)"
            )
        if getattr(weight, "ds_numel", None) is not None or weight.numel() == 0:
            raise DigitCaptureError(
                "the LM head weight is partitioned (DeepSpeed ZeRO-3) when the final norm runs; use ZeRO-2 or FSDP"
            )
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.differentiable):
            self._logits = digit_logits_from_hidden(hidden, weight, self.vocab)
        self._lora_expected = self.lora.active() if self.lora is not None else []

    def _lora_hook(self, name: str):
        def on_lora_a(module, args, projected) -> None:
            if not self._armed or name not in self._lora_expected:
                return
            self._lora_calls[name] = self._lora_calls.get(name, 0) + 1
            if self._logits is None:
                raise DigitCaptureError("the LM head's LoRA adapter ran before the final norm")
            lora_b = self.lora.head.lora_B[name]
            ids = self.vocab.family_ids(projected.device).reshape(-1)
            bias = None if lora_b.bias is None else lora_b.bias[ids].float()
            grad = torch.is_grad_enabled() and self.differentiable
            with torch.autocast(device_type=projected.device.type, enabled=False), torch.set_grad_enabled(grad):
                delta = F.linear(projected.float(), lora_b.weight[ids].float(), bias) * self.lora.head.scaling[name]
            self._logits = self._logits + delta.unflatten(-1, self._logits.shape[-2:])

        return on_lora_a

    # ------------------------------------------------------------------ use
    def __enter__(self) -> DigitLogitsCapture:
        self._armed = True
        self._logits = None
        self._norm_calls = 0
        self._lora_calls = {}
        self._lora_expected = []
        return self

    def __exit__(self, *exc) -> None:
        self._armed = False

    def digit_logits(self) -> torch.Tensor:
        """``[B, T, F, 10]`` float32 digit logits of the last captured forward (see ``digit_logits_from_hidden``)."""
        if self._logits is None:
            raise DigitCaptureError(
                "no digit logits were captured: run the model's forward inside `with capture:` (the final norm did "
                "not run in an armed forward)"
            )
        missing = [n for n in self._lora_expected if self._lora_calls.get(n, 0) != 1]
        if missing:
            raise DigitCaptureError(
                f"the LoRA adapter(s) {missing} on the LM head did not run in this forward pass, so the loss was "
                "computed without them (fused cross-entropy kernels read lm_head.weight, the base weight); DEL "
                "would read a different head than the cross-entropy. Use plain cross-entropy, or train the head "
                "with modules_to_save instead of LoRA"
            )
        return self._logits

    def digit_targets(self, targets: torch.Tensor) -> DigitTargets:
        """:class:`DigitTargets` of the last captured forward for aligned ``targets`` ``[B, T]`` (position ``t`` of
        the forward predicts ``targets[:, t]``; shift the labels first)."""
        logits = self.digit_logits()
        return select_digit_family(logits, targets.to(logits.device), self.vocab)

    def remove(self) -> None:
        """Remove the hooks from the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
