"""Where a Hugging Face causal LM keeps what DEL reads: its decoder, its LM head, and its architecture's post-head
transform.

The model is read through its wrappers: DDP and DeepSpeed (``.module``), ``torch.compile`` (``._orig_mod``) and PEFT
(``.get_base_model()``). Multimodal wrappers are read through their text part: Gemma-3 and Mistral-3 keep the head on
the wrapper, Llama-4 a whole causal LM inside it (``language_model``). The decoder is ``causal_lm.model``, the head
``causal_lm.get_output_embeddings()``. No transformers or PEFT import: modules are recognised by their attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .architectures import ARCHITECTURES, TRANSFORM_KEYS, Architecture, LogitTransform, text_config
from .capture_errors import DigitCaptureError
from .vocab import DigitVocab

__all__ = ["HeadSite", "check_architecture", "find_head", "full_rows", "unwrap"]


def unwrap(model: Any) -> tuple[Any, Any]:
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


def full_rows(weight: torch.Tensor) -> int:
    """The rows of a head weight, partitioned by DeepSpeed ZeRO-3 (its ``ds_shape``) or not."""
    return tuple(getattr(weight, "ds_shape", weight.shape))[0]


def check_architecture(config: Any) -> Architecture | None:
    """The :class:`~del_plugin.core.architectures.Architecture` of ``config``'s model type, or None for a model type
    outside the table (then accepted only by measurement,
    :meth:`~del_plugin.core.capture.DigitLogitsCapture.check_against_logits`). Raises :class:`DigitCaptureError`
    when the config sets a post-head transform that DEL does not apply for this model type (the digit logits would
    not be the model's)."""
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


@dataclass(frozen=True)
class HeadSite:
    """What DEL reads in a model: its decoder (whose output the head reads), its head, and the architecture's entry
    and post-head transform (None for a model type outside the table: no transform, to be measured)."""

    model_type: str | None
    architecture: Architecture | None
    transform: LogitTransform | None
    decoder: torch.nn.Module
    head: torch.nn.Module


def find_head(model: torch.nn.Module, vocab: DigitVocab) -> HeadSite:
    """The :class:`HeadSite` of ``model`` (any wrapper :func:`unwrap` sees through). Raises
    :class:`DigitCaptureError` for an architecture, a decoder or a head that DEL cannot read, or a head with fewer
    rows than ``vocab``'s token ids."""
    outer, causal_lm = unwrap(model)
    config = getattr(outer, "config", None)
    model_type = getattr(config, "model_type", None)
    architecture = check_architecture(config)
    transform = architecture.transform(config) if architecture is not None else None
    decoder = getattr(causal_lm, "model", None)
    head = causal_lm.get_output_embeddings() if hasattr(causal_lm, "get_output_embeddings") else None
    if not isinstance(decoder, torch.nn.Module) or not isinstance(head, torch.nn.Module):
        raise DigitCaptureError(
            f"model_type {model_type!r}: {type(causal_lm).__name__} has no decoder (`.model`) or no LM head "
            "(get_output_embeddings()), so DEL cannot read what the head reads"
        )
    if getattr(head, "weight", None) is None:
        raise DigitCaptureError(f"model_type {model_type!r}: the LM head {type(head).__name__} has no weight")
    largest = max(vocab.number_row_ids)
    if largest >= full_rows(head.weight):
        raise DigitCaptureError(
            f"digit token id {largest} of {vocab.name} is outside the LM head's {full_rows(head.weight)} rows: "
            "the tokenizer and the model do not match"
        )
    return HeadSite(model_type, architecture, transform, decoder, head)
