"""The measurement of DEL's digit logits against a model's own logits, and how far rounding alone lets them differ.

An architecture whose logits are not the head on the decoder's last hidden state (plus the post-head transform DEL
applies) cannot be trained exactly: :func:`compare_with_model_logits` raises :class:`LogitsMismatch` when the two
differ by more than :func:`logits_tolerance` of the coarsest precision the model's logits went through.
"""

from __future__ import annotations

import torch

from .architectures import LogitTransform
from .capture_errors import LogitsMismatch

__all__ = ["compare_with_model_logits", "logits_tolerance", "rounding_dtypes"]


def logits_tolerance(dtype: torch.dtype, scale: float) -> float:
    """How far the model's own logits may lie from DEL's float32 digit logits by rounding alone: four steps of the
    logits' dtype at the largest logit (a bf16 head output and a bf16 transform round a few times), and at least
    1e-4 of it (float32 matrix products summed in another order)."""
    eps = torch.finfo(dtype).eps if dtype.is_floating_point else 1e-4
    return max(4 * eps, 1e-4) * max(1.0, scale)


def rounding_dtypes(
    logits: torch.Tensor, head_weight: torch.Tensor, forward_autocast: torch.dtype | None
) -> list[torch.dtype]:
    """The precisions the model's logits went through: their dtype, the head's, and autocast's, on now or only inside
    the forward (``forward_autocast``: a wrapper that autocast the forward alone). A bf16 product cast to float32 is
    still a bf16 product."""
    device = logits.device.type
    dtypes = [logits.dtype, head_weight.dtype]
    if torch.is_autocast_enabled(device):
        dtypes.append(torch.get_autocast_dtype(device))
    if forward_autocast is not None:
        dtypes.append(forward_autocast)
    return dtypes


def compare_with_model_logits(
    ours: torch.Tensor,
    ids: torch.Tensor,
    logits: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dtypes: list[torch.dtype],
    *,
    model_type: str | None,
    transform: LogitTransform | None,
    in_table: bool,
) -> tuple[float, float]:
    """(the largest absolute difference, the tolerance) between DEL's logits ``ours`` ``[B, T, ...]`` of the rows
    ``ids`` and the model's own ``logits`` ``[B, T, V]`` at those rows, over the positions ``attention_mask`` keeps.
    Raises :class:`LogitsMismatch` when the difference exceeds the tolerance of the coarsest of ``dtypes``."""
    theirs = logits[..., ids.to(logits.device)]  # [B, T, F, 10], or [B, T, R] for number tokens
    keep = torch.ones(theirs.shape[:2], dtype=torch.bool, device=theirs.device)
    if attention_mask is not None:
        keep = attention_mask.to(theirs.device).bool()
    theirs, ours = theirs[keep].float(), ours.to(theirs.device)[keep]
    difference = (ours - theirs).abs().max().item() if theirs.numel() else 0.0
    scale = theirs.abs().max().item() if theirs.numel() else 0.0
    tolerance = max(logits_tolerance(dtype, scale) for dtype in dtypes)
    if not difference <= tolerance:
        applied = transform.description if transform is not None else "none"
        raise LogitsMismatch(
            f"model_type {model_type!r}: DEL's digit logits differ from the model's own by {difference:.4g} "
            f"(rounding allows {tolerance:.3g} at a largest logit of {scale:.4g}; post-head transform applied: "
            f"{applied}), measured on a forward of {int(keep.sum())} tokens. This architecture does not make "
            "its logits as the head on the decoder's last hidden state"
            + ("" if in_table else ", and it has no entry in DEL's table")
            + "; DEL cannot train it exactly (docs/architectures.md)",
            difference,
            tolerance,
        )
    return difference, tolerance
