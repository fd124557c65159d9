"""Digit Entropy Loss (DEL), on aligned tensors: ``logits[..., t, :]`` predicts ``labels[..., t]``.

    L = CE + alpha * L_num,    L_num = mean over digit targets t of  u_t * mean_k(p_hat_k * BCE_k)

with ``z`` the ten logits of the target's digit family, ``p_hat = softmax(z)``,
``BCE_k = bce_with_logits(z_k, onehot(y)_k)`` and ``u_t`` the place weight of the digit (see ``places.py``).
Nothing is detached. There is deliberately no distance term between digits.

``del_centered_token_losses`` is the shift-invariant variant: the BCE reads ``z - mean_j z_j`` instead of ``z``
(``p_hat`` is unchanged, softmax being shift-invariant), so adding one constant to all ten logits changes nothing.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from .digits import DigitTargets

__all__ = ["Reduction", "del_centered_token_losses", "del_token_losses", "reduce_token_losses"]

Reduction = Literal["mean", "sum", "none"]


def _entropy_weighted_bce(targets: DigitTargets, weights: torch.Tensor, bce_logits: torch.Tensor) -> torch.Tensor:
    z = targets.logits
    onehot = F.one_hot(targets.target, num_classes=10).to(z.dtype)
    p_hat = torch.softmax(z, dim=-1)
    bce = F.binary_cross_entropy_with_logits(bce_logits, onehot, reduction="none")
    per_token = (p_hat * bce).mean(-1) * weights
    # `where`, not a product with the mask, so that a non-finite logit off the digits cannot leak a NaN.
    return torch.where(targets.mask, per_token, 0.0)


def del_token_losses(targets: DigitTargets, weights: torch.Tensor) -> torch.Tensor:
    """``l_t = u_t * mean_k(p_hat_k * BCE_k)`` per position, float32, exactly 0 where there is no digit."""
    return _entropy_weighted_bce(targets, weights, targets.logits)


def del_centered_token_losses(targets: DigitTargets, weights: torch.Tensor) -> torch.Tensor:
    """``l_t = u_t * mean_k(p_hat_k * BCE(z_k - mean_j z_j, onehot(y)_k))`` per position: DEL with its binary
    cross-entropies on the centred digit logits, invariant to a common shift of the ten logits. Nothing is
    detached (the centring's gradient flows too), float32, exactly 0 where there is no digit."""
    z = targets.logits
    return _entropy_weighted_bce(targets, weights, z - z.mean(-1, keepdim=True))


def reduce_token_losses(
    per_token: torch.Tensor, mask: torch.Tensor, reduction: Reduction, alpha: float = 1.0
) -> torch.Tensor:
    """``alpha`` times the mean over ``mask`` (0 when empty), the sum, or the per-position tensor."""
    if reduction == "none":
        return alpha * per_token
    total = per_token.sum()
    if reduction == "sum":
        return alpha * total
    if reduction == "mean":
        # clamp instead of branching on the count: no host synchronisation, and 0 / 1 = 0 on empty batches
        return alpha * total / mask.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
