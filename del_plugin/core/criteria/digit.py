"""The digit criteria: per-position terms added to cross-entropy, ``L = CE + alpha * mean over digit targets``.

Each reads :class:`~del_plugin.core.digits.DigitTargets` only (the ``[..., 10]`` logits of the target's digit family,
or of each slot of a number token) and returns a float32 term per position (per slot), exactly 0 where there is no
digit; the caller normalises (:func:`~del_plugin.core.criteria.dispatch.reduce_token_losses`, or the trainer's
step-wide digit count).

DEL: ``l_t = u_t * mean_k(p_hat_k * BCE_k)``, ``p_hat = softmax(z)``, ``BCE_k = bce_with_logits(z_k, onehot(y)_k)``,
``u_t`` the place weight of the digit (:mod:`~del_plugin.core.places`). Nothing is detached. There is deliberately no
distance term between digits. ``del_centered`` is the shift-invariant variant: the BCE reads ``z - mean_j z_j``
instead of ``z`` (``p_hat`` is unchanged, softmax being shift-invariant), so adding one constant to all ten logits
changes nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..digits import DigitTargets
from ..places import NOT_A_DIGIT

__all__ = [
    "del_centered_token_losses",
    "del_dist_token_losses",
    "del_token_losses",
    "dist2_place_weights",
    "dist2_token_losses",
    "ntl_mse_token_losses",
    "ntl_was_token_losses",
]


def _entropy_weighted_bce(targets: DigitTargets, weights: torch.Tensor, bce_logits: torch.Tensor) -> torch.Tensor:
    z = targets.logits
    # a comparison, not F.one_hot, which checks the targets' range on the host
    onehot = (targets.target.unsqueeze(-1) == _digit_values(z)).to(z.dtype)
    p_hat = torch.softmax(z, dim=-1)
    bce = F.binary_cross_entropy_with_logits(bce_logits, onehot, reduction="none")
    per_token = (p_hat * bce).mean(-1) * weights
    return _masked(targets, per_token)


def del_token_losses(targets: DigitTargets, weights: torch.Tensor) -> torch.Tensor:
    """``l_t = u_t * mean_k(p_hat_k * BCE_k)`` per position, float32, exactly 0 where there is no digit.

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``); ``weights`` ``u_t``: float32 ``[...]`` (:func:`~del_plugin.core.places.place_weights`).
    Returns ``[...]``, the logits' dtype."""
    return _entropy_weighted_bce(targets, weights, targets.logits)


def del_centered_token_losses(targets: DigitTargets, weights: torch.Tensor) -> torch.Tensor:
    """``l_t = u_t * mean_k(p_hat_k * BCE(z_k - mean_j z_j, onehot(y)_k))`` per position: DEL with its binary
    cross-entropies on the centred digit logits, invariant to a common shift of the ten logits. Nothing is
    detached (the centring's gradient flows too), float32, exactly 0 where there is no digit.

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``); ``weights``: float32 ``[...]``. Returns ``[...]``, the logits' dtype."""
    z = targets.logits
    return _entropy_weighted_bce(targets, weights, z - z.mean(-1, keepdim=True))


def _digit_values(z: torch.Tensor) -> torch.Tensor:
    return torch.arange(10, device=z.device, dtype=z.dtype)


def _masked(targets: DigitTargets, per_token: torch.Tensor) -> torch.Tensor:
    # `where`, not a product with the mask, so a non-finite logit off the digits cannot leak a NaN.
    return torch.where(targets.mask, per_token, 0.0)


def _was_distance(targets: DigitTargets) -> torch.Tensor:
    z = targets.logits
    distance = (targets.target.unsqueeze(-1).to(z.dtype) - _digit_values(z)).abs()
    return (torch.softmax(z, dim=-1) * distance).sum(-1)


def ntl_was_token_losses(targets: DigitTargets) -> torch.Tensor:
    """NTL-WAS ``sum_k p_hat_k |y - k|`` per position (no place weight, as in the NTL paper).

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``). Returns ``[...]``, the logits' dtype, 0 where there is no digit."""
    return _masked(targets, _was_distance(targets))


def ntl_mse_token_losses(targets: DigitTargets) -> torch.Tensor:
    """NTL-MSE ``(sum_k p_hat_k k - y)^2`` per position (no place weight, as in the NTL paper).

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``). Returns ``[...]``, the logits' dtype, 0 where there is no digit."""
    z = targets.logits
    expected = (torch.softmax(z, dim=-1) * _digit_values(z)).sum(-1)
    return _masked(targets, (expected - targets.target.to(z.dtype)) ** 2)


def dist2_place_weights(places: torch.Tensor, enabled: bool = True) -> torch.Tensor:
    """DIST2's place weight ``i + 1``, with the digits after a decimal point read as an integer of their own.

    Integer digit of place ``i >= 0``: ``i + 1``. Decimal digit of place ``-k`` in a number with ``D`` decimals:
    ``D - k + 1`` (in 3.14159 the decimals '14159' weigh 5, 4, 3, 2, 1, as the integer 14159 would). ``D`` is
    read from ``places`` itself: the decimals of a number are a run of digits with places -1, -2, ..., -D, each
    the digit after the one before in reading order (row after row, and with number tokens slot after slot:
    '141' '59' is one run), so ``D`` is minus the lowest place in the run (vectorised; no loop over tokens).
    Unused slots and other labels between two digits do not break a run, and need not: the number reader never
    puts place ``p - 1`` after ``p`` across a label that ends a number (a new decimal part starts at -1, after a
    point, which follows no decimal digit of place 0). A number whose first decimals are cut off (the sequence
    starts inside it) keeps the ``D`` of its visible decimals' lowest place, which is the true ``D``. Any shape
    (``[T]``, ``[B, T]``, slotted ``[..., M]``); float32; 0 where there is no digit; 1 at every digit if not
    ``enabled``.
    """
    is_digit = places != NOT_A_DIGIT
    if not enabled:
        return is_digit.to(torch.float32)
    if places.numel() == 0:
        return torch.zeros(places.shape, dtype=torch.float32, device=places.device)
    flat = places.reshape(-1).to(torch.long)
    n = flat.numel()
    index = torch.arange(n, device=places.device)
    # the digit before each digit in reading order (its index, -1 for none) and its place
    latest = torch.where(flat != NOT_A_DIGIT, index, -1).cummax(0).values
    before = torch.full_like(latest, -1)
    before[1:] = latest[:-1]
    previous = torch.where(before >= 0, flat[before.clamp(min=0)], NOT_A_DIGIT)
    decimal = (flat != NOT_A_DIGIT) & (flat < 0)
    continues = decimal & (previous != NOT_A_DIGIT) & (previous < 0) & (flat == previous - 1)
    run = torch.cumsum(decimal & ~continues, 0) - 1
    dump = torch.full_like(run, n)  # scatter slot for positions outside decimal runs
    run_of_decimal = torch.where(decimal, run, dump)
    lowest = torch.zeros(n + 1, dtype=torch.long, device=places.device)
    lowest.scatter_reduce_(0, run_of_decimal, flat, reduce="amin", include_self=False)
    decimals_in_number = -lowest[run_of_decimal]
    weight = torch.where(decimal, decimals_in_number + flat + 1, flat + 1).to(torch.float32)
    return torch.where(flat != NOT_A_DIGIT, weight, 0.0).view(places.shape)


def dist2_token_losses(targets: DigitTargets, weights: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """DIST2 ``w_t * KL(q || p_hat)`` per position, ``q = softmax_k(-(y - k)^2 / tau)``.

    The KL is summed over the ten digits (the DEL authors' re-implementation takes ``KLDivLoss(...).mean(-1)``,
    a tenth of this; fold that factor into ``alpha``).

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``); ``weights`` ``w_t``: float32 ``[...]`` (:func:`dist2_place_weights`). Returns ``[...]``,
    the logits' dtype, 0 where there is no digit.
    """
    if not tau > 0:
        raise ValueError(f"dist2 temperature tau must be > 0, got {tau}")
    z = targets.logits
    log_p = torch.log_softmax(z, dim=-1)
    squared = (targets.target.unsqueeze(-1).to(z.dtype) - _digit_values(z)) ** 2
    log_q = torch.log_softmax(-squared / tau, dim=-1)
    kl = F.kl_div(log_p, log_q, reduction="none", log_target=True).sum(-1)
    return _masked(targets, kl * weights)


def del_dist_token_losses(targets: DigitTargets, weights: torch.Tensor) -> torch.Tensor:
    """The paper's ablation: DEL's ``u_t * mean_k(p_hat_k BCE_k)`` times NTL-WAS ``sum_k p_hat_k |y - k|``.

    Nothing is detached: the gradient flows through both factors.

    ``targets``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64 and
    mask bool ``[...]``); ``weights``: float32 ``[...]``. Returns ``[...]``, the logits' dtype, 0 where there is no
    digit.
    """
    return _masked(targets, del_token_losses(targets, weights) * _was_distance(targets))
