"""The dispatch of the training criteria by name (:data:`~del_plugin.core.criteria.registry.CRITERIA`): the
per-position terms of a digit or token criterion, their reduction, and the sums a training step logs.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import torch

from ..digits import DigitTargets, digit_correct, digit_entropy, digit_targets_from_logits
from ..fused import fused
from ..places import PlaceWeighting
from ..vocab import DigitVocab
from .registry import TOKEN_CRITERIA, criterion_spec
from .token import TokenCriterionTerms

__all__ = [
    "DigitTermSums",
    "Reduction",
    "digit_criterion_loss",
    "digit_criterion_sums",
    "digit_criterion_terms",
    "digit_entropy_loss",
    "reduce_token_losses",
    "token_criterion_terms",
]

Reduction = Literal["mean", "sum", "none"]


def reduce_token_losses(
    per_token: torch.Tensor, mask: torch.Tensor, reduction: Reduction, alpha: float = 1.0
) -> torch.Tensor:
    """``alpha`` times the mean over ``mask`` (0 when empty), the sum, or the per-position tensor.

    ``per_token``: float ``[...]`` (0 where not counted); ``mask``: ``[...]``, bool or a float count per position
    (a number-level criterion counts numbers). Returns a 0-d tensor (``"mean"``, ``"sum"``) or ``[...]``
    (``"none"``), in ``per_token``'s dtype."""
    if reduction == "none":
        return alpha * per_token
    total = per_token.sum()
    if reduction == "sum":
        return alpha * total
    if reduction == "mean":
        # clamp instead of branching on the count: no host synchronisation, and 0 / 1 = 0 on empty batches
        return alpha * total / mask.sum().clamp(min=1)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def digit_criterion_terms(
    criterion: str,
    digits: DigitTargets,
    places: torch.Tensor,
    *,
    weighting: PlaceWeighting = PlaceWeighting(),
    **params: float,
) -> torch.Tensor:
    """The per-position term of a criterion (float32, 0 off the digit targets); zeros for ``mle`` and the token
    criteria, which add no digit term. ``places`` are aligned with ``digits`` (:func:`next_token_places`).

    ``digits``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64
    and mask bool ``[...]``); ``places``: integer ``[...]``. Returns ``[...]`` in the digit logits' dtype."""
    spec = criterion_spec(criterion)
    checked = spec.check_params(params)
    if spec.kind != "digit":
        return torch.zeros(digits.mask.shape, dtype=digits.logits.dtype, device=digits.logits.device)
    return spec.terms(digits, places, weighting, **checked)


class DigitTermSums(NamedTuple):
    """What a training step needs of a digit criterion on one batch, as float32 scalars: ``loss``, the sum of its
    per-position term (with its graph), and, without a graph, the batch's ``digits`` (digit targets), the sum of
    their digit ``entropy`` (nats), how many are ``correct`` (the most likely digit is the target) and the
    ``units`` the term is averaged over (:meth:`CriterionSpec.units`: the digit targets, or the numbers); ``term``
    is ``alpha * loss``, what the training loss adds before it is normalised (the criteria apply ``del_alpha`` here,
    as the token criteria do in their terms, and a trainer only normalises; None only inside the fused program,
    which :func:`digit_criterion_sums` completes).
    """

    loss: torch.Tensor
    digits: torch.Tensor
    entropy: torch.Tensor
    correct: torch.Tensor
    units: torch.Tensor
    term: torch.Tensor | None = None


def digit_criterion_sums(
    criterion: str,
    digits: DigitTargets,
    places: torch.Tensor,
    *,
    weighting: PlaceWeighting = PlaceWeighting(),
    alpha: float = 1.0,
    **params: float,
) -> DigitTermSums:
    """:func:`digit_criterion_terms` summed over the batch, with the statistics a trainer logs
    (:class:`DigitTermSums`), computed as one program (:mod:`~del_plugin.core.fused`: on a GPU a few kernels
    instead of dozens of small ones); a zero loss for ``mle`` and the token criteria. ``alpha`` (the digit term's
    weight, :attr:`~del_plugin.hf.settings.DELSettings.digit_alpha`) makes ``term = alpha * loss``.

    ``digits``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64
    and mask bool ``[...]``); ``places``: integer ``[...]``. Every sum is a 0-d float32 tensor."""
    spec = criterion_spec(criterion)
    checked = spec.check_params(params)
    terms = (spec.terms_and_units or spec.terms) if spec.kind == "digit" else None
    sums = _digit_sums(terms, spec.unit, digits, places, weighting, tuple(sorted(checked.items())))
    return sums._replace(term=alpha * sums.loss)


@fused
def _digit_sums(
    terms, unit, digits: DigitTargets, places: torch.Tensor, weighting: PlaceWeighting, params
) -> DigitTermSums:
    mask = digits.mask
    units = mask
    if terms is None:
        loss = torch.zeros((), dtype=torch.float32, device=mask.device)
    elif unit == "number":  # the terms and where the numbers start, from one reading of the numbers
        per_position, units = terms(digits, places, weighting, **dict(params))
        loss = per_position.sum()
    else:
        loss = terms(digits, places, weighting, **dict(params)).sum()
    entropy = torch.where(mask, digit_entropy(digits.logits.detach()), 0.0).sum()
    counted = units.sum().float()
    return DigitTermSums(loss, mask.sum().float(), entropy, digit_correct(digits).sum().float(), counted)


def digit_criterion_loss(
    criterion: str,
    digits: DigitTargets,
    places: torch.Tensor,
    *,
    alpha: float = 1.0,
    reduction: Reduction = "mean",
    weighting: PlaceWeighting = PlaceWeighting(),
    **params: float | bool,
) -> torch.Tensor:
    """``alpha`` times a digit criterion on :class:`DigitTargets` (from logits, hidden states or a capture) and
    the aligned ``places``: the mean over digit targets (over numbers for a number-level criterion; 0 when there
    is none), the sum, or per position.

    ``digits``: :class:`~del_plugin.core.digits.DigitTargets` (logits ``[..., 10]``, float32 or wider; target int64
    and mask bool ``[...]``); ``places``: integer ``[...]``. Returns a 0-d tensor (``"mean"``, ``"sum"``) or
    ``[...]`` (``"none"``), in the digit logits' dtype."""
    per_token = digit_criterion_terms(criterion, digits, places, weighting=weighting, **params)
    units = criterion_spec(criterion).units(places, digits.mask, **params)
    return reduce_token_losses(per_token, units, reduction, alpha)


def digit_entropy_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    places: torch.Tensor,
    vocab: DigitVocab,
    alpha: float = 1.0,
    reduction: Reduction = "mean",
    *,
    weighting: PlaceWeighting = PlaceWeighting(),
) -> torch.Tensor:
    """DEL, ``alpha * L_num``, from full logits ``[..., V]`` and aligned ``targets`` / ``places`` ``[...]``: the
    ``del`` case of :func:`digit_criterion_loss` on :func:`~del_plugin.core.digits.digit_targets_from_logits`.

    ``targets`` are the labels shifted so that ``logits[..., t, :]`` predicts ``targets[..., t]``
    (:func:`~del_plugin.core.places.shift_to_next_token`); ``places`` come from
    :func:`~del_plugin.core.places.next_token_places` on the unshifted labels. Reductions as in
    :func:`digit_criterion_loss`. Float32 on the ``[..., 10]`` digit slice only.

    ``logits``: ``[..., V]`` of any float dtype (bf16 and fp16 are upcast on the slice); ``targets``: integer
    ``[...]`` (-100 where masked); ``places``: integer ``[...]``. Returns a 0-d float32 tensor (``"mean"``,
    ``"sum"``) or float32 ``[...]`` (``"none"``); float64 for float64 logits.
    """
    digits = digit_targets_from_logits(logits, targets, vocab)
    return digit_criterion_loss("del", digits, places, alpha=alpha, reduction=reduction, weighting=weighting)


def token_criterion_terms(
    criterion: str,
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    alpha: float,
    ignore_index: int = -100,
    state: dict | None = None,
    **params: float,
) -> TokenCriterionTerms:
    """The per-position terms of a token criterion (``mixce``, ``emo``) on full logits and aligned ``targets``;
    ``state`` is what the criterion's ``prepare(model)`` built (EMO's cost embedding)."""
    spec = criterion_spec(criterion)
    if spec.kind != "token":
        raise ValueError(f"{criterion!r} is not a token criterion; those are {', '.join(TOKEN_CRITERIA)}")
    checked = spec.check_params(params)
    return spec.terms(logits, targets, alpha=alpha, ignore_index=ignore_index, **checked, **(state or {}))
