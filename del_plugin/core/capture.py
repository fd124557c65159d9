"""Capture the digit logits inside a Hugging Face causal LM's forward pass, whatever computes its loss.

A forward hook on the decoder (``causal_lm.model``) reads the last hidden state it returns, the tensor the head
reads, and multiplies it by the digit rows of the head's effective weight, plus the head's bias where it has one
(:func:`~del_plugin.core.hidden.digit_logits_from_hidden`); the architecture's post-head transform
(:mod:`~del_plugin.core.architectures`: a soft cap, a scale) is then applied to those ten logits. The decoder runs
once in every forward: the plain one, Liger's and Cut Cross Entropy's fused ones (which never call the head), under
gradient checkpointing (which recomputes decoder layers, not the decoder's own call) and whatever module computes
its final norm (Liger replaces it; Phi and Falcon-H1 call it ``final_layernorm``). The product is taken inside the
forward, while a weight that FSDP shards is still gathered.

The head's effective weight: ``head.weight`` is the weight itself, the tied input embedding, or PEFT's trainable
``modules_to_save`` copy (PEFT's wrapper returns the active copy); a LoRA adapter on the head adds its rows.

:class:`DigitLogitsCapture` composes one home per job:

- :mod:`~del_plugin.core.head_lookup`: the decoder, the head and the architecture, through the model's wrappers;
- :mod:`~del_plugin.core.sharding`: where the head's weight is whole (plain, FSDP2, DeepSpeed ZeRO-3), one strategy
  each behind one interface;
- :mod:`~del_plugin.core.readers`: how the vocabulary's digits are read (single digit tokens, or number tokens);
- :mod:`~del_plugin.core.lora_head`: a LoRA adapter on the head, and the count of its runs;
- :mod:`~del_plugin.core.logits_check`: the measurement against the model's own logits;
- :mod:`~del_plugin.core.capture_errors`: its errors, and the refusals of a forward that a fused kernel computed
  without the head.

No transformers or PEFT import: modules are recognised by their attributes.
"""

from __future__ import annotations

import torch

from .architectures import LogitTransform
from .capture_errors import DigitCaptureError, LogitsMismatch, refuse_fused_kernel
from .digits import DigitTargets
from .head_lookup import check_architecture, find_head
from .logits_check import compare_with_model_logits, logits_tolerance, rounding_dtypes
from .lora_head import LoraCalls, lora_head
from .readers import CapturedForward, DigitReader, NumberTokenReader, SingleDigitReader, digit_reader
from .sharding import HeadShardings
from .vocab import DigitVocab

__all__ = ["DigitCaptureError", "DigitLogitsCapture", "LogitsMismatch", "check_architecture", "logits_tolerance"]


def _last_hidden_state(output, model_type: str | None) -> torch.Tensor:
    """The last hidden state tensor in what the decoder returned."""
    hidden = getattr(output, "last_hidden_state", None)
    if hidden is None:
        hidden = output[0] if isinstance(output, (tuple, list)) else output
    if not isinstance(hidden, torch.Tensor):
        raise DigitCaptureError(
            f"model_type {model_type!r}: the decoder returned {type(output).__name__}, without a last "
            "hidden state tensor"
        )
    return hidden


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
        site = find_head(model, vocab)
        self.model_type, self.architecture = site.model_type, site.architecture
        # the transform the model applies (an unlisted model type: none, to be measured)
        self.transform: LogitTransform | None = site.transform
        self.vocab, self.head, self.differentiable = vocab, site.head, differentiable
        self.lora = lora_head(site.head)
        self.reader: DigitReader = digit_reader(vocab, self.lora)
        self.verified = False  # set by check_against_logits, with the difference it measured
        self.measured_difference: float | None = None
        self.measured_tolerance: float | None = None  # what rounding allowed at that measurement
        self._armed = False
        self._lora_calls = LoraCalls(self.lora)
        self._shardings = HeadShardings(model, site.head, self.reader, self.lora, lambda: self._armed)
        self._reset()
        self._handles = [site.decoder.register_forward_hook(self._on_decoder)]
        if self.lora is not None:
            for name, module in self.head.lora_A.items():
                self._handles.append(module.register_forward_hook(self._lora_hook(name)))

    def _reset(self) -> None:
        """Forget the last captured forward."""
        self.reader.reset()
        self._shardings.reset()
        self._lora_calls.reset()
        self._decoder_calls = 0
        self._autocast_dtype: torch.dtype | None = None  # autocast's dtype inside the forward, if it was on

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
        hidden = _last_hidden_state(output, self.model_type)
        lora_expected = self._lora_calls.expect()
        # read here, inside the forward: a wrapper that autocasts the forward (accelerate's mixed precision) has
        # switched autocast off again by the time the forward returns
        device = hidden.device.type
        self._autocast_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        forward = CapturedForward(hidden, None, None, torch.is_grad_enabled() and self.differentiable, lora_expected)
        self._shardings.of(self.head.weight).on_decoder(forward)

    def _lora_hook(self, name: str):
        def on_lora_a(module, args, projected) -> None:
            if self._armed and self._lora_calls.count(name):
                self._shardings.of(self.head.lora_B[name].weight).on_lora(name, projected)

        return on_lora_a

    # ------------------------------------------------------------------ use
    def __enter__(self) -> DigitLogitsCapture:
        self._armed = True
        self._reset()
        return self

    def __exit__(self, *exc) -> None:
        self._armed = False

    def _check_captured(self) -> None:
        unread = self._shardings.unread()
        if unread is not None:
            refuse_fused_kernel("zero3_head_not_run", unread)
        if not self.reader.captured():
            read_before = isinstance(self.reader, NumberTokenReader) and self.reader.slots is not None
            raise DigitCaptureError(
                "no digit logits were captured: run the model's forward inside `with capture:` (the decoder did "
                "not run in an armed forward)"
                + ("; with number tokens each forward is read once, for one targets tensor" if read_before else "")
            )
        missing = self._lora_calls.missing()
        if missing:
            refuse_fused_kernel("lora_head_not_run", missing)

    def digit_logits(self) -> torch.Tensor:
        """``[B, T, F, 10]`` float32 digit logits of the last captured forward, as the model's own logits are: the
        head's digit rows (and bias) on the decoder's last hidden state, then the architecture's transform. For a
        vocabulary with number tokens, whose slots read other rows at each target, use :meth:`digit_targets`."""
        if not isinstance(self.reader, SingleDigitReader):
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
        exceeds :func:`~del_plugin.core.logits_check.logits_tolerance` (a model type whose logits DEL does not read
        exactly).

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
        difference, tolerance = compare_with_model_logits(
            ours,
            ids,
            logits,
            attention_mask,
            rounding_dtypes(logits, self.head.weight, autocast_dtype),
            model_type=self.model_type,
            transform=self.transform,
            in_table=self.architecture is not None,
        )
        self.verified, self.measured_difference, self.measured_tolerance = True, difference, tolerance
        return difference

    def remove(self) -> None:
        """Remove the hooks from the model."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._shardings.remove()
