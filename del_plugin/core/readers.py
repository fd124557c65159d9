"""How a vocabulary's digits are read from a captured forward: the readers the capture hands the forward to.

Two readers, chosen by the vocabulary: single digit tokens (:class:`SingleDigitReader`, the ``[B, T, F, 10]`` digit
logits computed inside the forward from the decoder's output and the head's digit rows, plus the head's bias where it
has one: :func:`~del_plugin.core.hidden.digit_logits_from_hidden`) and number tokens (Llama-3's '123',
:class:`NumberTokenReader`, :mod:`~del_plugin.core.digits`). The logits a digit slot reads depend on its target, so
the number-token reader keeps the decoder's output (the tensor the head's backward saves anyway: no copy) and
computes ``h · W[number rows]ᵀ`` only at the positions whose target is a number token, after the forward. Where the
head's weight is freed after the point where it was read (FSDP2 when the forward returns, DeepSpeed ZeRO-3 when the
head's forward returns: :mod:`~del_plugin.core.sharding`) it reads a float32 copy of the head's number rows taken
then (:mod:`~del_plugin.core.head_rows`).
"""

from __future__ import annotations

import torch

from .architectures import LogitTransform
from .capture_errors import DigitCaptureError
from .digits import DigitTargets, select_digit_family, slot_digit_targets
from .head_rows import gather_rows, rows_vocab
from .hidden import digit_logits_from_hidden, number_logits_from_hidden
from .lora_head import LoraHead
from .vocab import DigitVocab

__all__ = ["CapturedForward", "DigitReader", "NumberTokenReader", "SingleDigitReader", "digit_reader"]


class CapturedForward:
    """What one armed forward handed a reader: the decoder's output, the head's weight and bias as they were then,
    whether to build a graph, the LoRA adapters expected to run on the head, and whether the head's weight is freed
    after the point where it was read (FSDP2 when the forward returns, ZeRO-3 when the head's forward returns)."""

    __slots__ = ("hidden", "weight", "bias", "grad", "lora_expected", "freed_after")

    def __init__(self, hidden, weight, bias, grad: bool, lora_expected: list[str], freed_after: bool = False):
        self.hidden, self.weight, self.bias, self.grad, self.lora_expected = hidden, weight, bias, grad, lora_expected
        self.freed_after = freed_after


class DigitReader:
    """One way of reading a vocabulary's digits from a captured forward (single digit tokens, or number tokens).
    The capture calls :meth:`on_decoder` and :meth:`on_lora` from its hooks and :meth:`digit_targets` after the
    forward; :meth:`reset` forgets the forward."""

    def __init__(self, vocab: DigitVocab, lora: LoraHead | None):
        self.vocab, self.lora = vocab, lora
        self.reset()

    def reset(self) -> None:
        raise NotImplementedError

    def captured(self) -> bool:
        raise NotImplementedError

    def on_decoder(self, forward: CapturedForward) -> None:
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


class SingleDigitReader(DigitReader):
    """One token per digit: the ``[B, T, F, 10]`` digit logits are computed inside the forward, from the decoder's
    output and the head's digit rows, and a LoRA adapter's rows are added when it runs."""

    def reset(self) -> None:
        self.raw_logits: torch.Tensor | None = None  # before the architecture's transform
        self._final: torch.Tensor | None = None
        self._grad = False

    def captured(self) -> bool:
        return self.raw_logits is not None

    def on_decoder(self, forward: CapturedForward) -> None:
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


class NumberTokenReader(DigitReader):
    """Number tokens (Llama-3's '123'): the rows a slot reads depend on its target, so the decoder's output (the
    tensor the head's backward saves anyway: no copy), the head's weight and the LoRA adapters' ``A(dropout(h))``
    and ``B`` rows are kept, and the slots are computed in :meth:`digit_targets`, at the positions whose target is
    a number token. Where the head's weight is freed after the point where it was read (FSDP2 when the forward
    returns, ZeRO-3 when the head's forward returns: :mod:`~del_plugin.core.head_rows`), a float32 copy of the head's
    number rows (and bias) taken while the forward runs is kept instead of the weight, and read through
    :attr:`rows`, the vocabulary of the copy. A forward is read for one ``targets`` tensor; the hidden states are
    then let go."""

    def __init__(self, vocab: DigitVocab, lora: LoraHead | None):
        self.rows = rows_vocab(vocab)
        super().__init__(vocab, lora)

    def reset(self) -> None:
        self.forward: CapturedForward | None = None
        # per adapter: A(dropout(h)), and B's weight and bias at the number rows
        self.projected: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = {}
        self.slots: tuple[torch.Tensor, DigitTargets] | None = None  # the targets read last, and their slots

    def captured(self) -> bool:
        return self.forward is not None

    def on_decoder(self, forward: CapturedForward) -> None:
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


def digit_reader(vocab: DigitVocab, lora: LoraHead | None) -> DigitReader:
    """The reader of ``vocab``: number tokens read slot by slot, or one token per digit."""
    return (NumberTokenReader if vocab.max_digits > 1 else SingleDigitReader)(vocab, lora)
