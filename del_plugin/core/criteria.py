"""The DEL paper's baselines and ablation, on aligned tensors: ``logits[..., t, :]`` predicts ``labels[..., t]``.

Every function returns a *per-position* term (``[B, T]`` for ``[B, T]`` labels), float32, exactly 0 where it does
not apply, so the caller decides the normalisation (``reduce_token_losses`` or the trainer's step-wide digit
count). Two kinds:

* **Digit criteria** (``ntl_was``, ``ntl_mse``, ``dist2``, ``del``, ``del_centered``, ``del_dist``) are *added* to
  cross-entropy, ``L = CE + alpha * mean over digit targets``. They read the ``[..., 10]`` slice of
  :class:`~del_plugin.core.digits.DigitTargets` only: ``p_hat = softmax`` over the ten logits of the
  target's digit family, ``y`` the target digit.

  - ``ntl_was``:  ``sum_k p_hat_k |y - k|``                       (Number Token Loss, Wasserstein form)
  - ``ntl_mse``:  ``(sum_k p_hat_k k - y)^2``                     (Number Token Loss, MSE form)
  - ``dist2``:    ``w_t * KL(q || p_hat)``, ``q = softmax_k(-(y - k)^2 / tau)``, ``w_t`` the DIST2 place weight
                  (:func:`dist2_place_weights`)
  - ``del``:      ``u_t * mean_k(p_hat_k BCE_k)``                  (:func:`~del_plugin.core.losses.del_token_losses`)
  - ``del_centered``: ``u_t * mean_k(p_hat_k BCE(z_k - mean_j z_j, onehot(y)_k))``  (DEL, shift-invariant)
  - ``del_dist``: ``u_t * mean_k(p_hat_k BCE_k) * sum_k p_hat_k |y - k|``  (DEL times the NTL-WAS distance)

* **Token criteria** (``mixce``, ``emo``) *replace* cross-entropy over all target tokens; they need the full
  logits. ``alpha`` interpolates: ``l_t = (1 - alpha) * NLL_t + alpha * criterion_t`` (``alpha = 1``: the
  criterion as published).

  - ``mixce``: ``eta * NLL_t + (1 - eta) * sg[exp(-NLL_t)] * NLL_t``
  - ``emo``:   ``0.5 * (NLL_t + sg[NLL_t / emo_t] * emo_t)``, ``emo_t = 1 - <e_y, E^T q>`` with ``E`` the frozen,
    row-L2-normalised initial output embedding and ``q = p - sg[p_y] onehot(y)`` (the model distribution less
    the detached target mass, *not* renormalised; the gradient still flows through ``p_y``).

``mle`` is cross-entropy alone: no term at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import torch
import torch.nn.functional as F

from .bounds import Bound
from .digits import DigitTargets, digit_targets_from_logits
from .losses import Reduction, del_centered_token_losses, del_token_losses, reduce_token_losses
from .places import NOT_A_DIGIT, PlaceWeighting, place_weights
from .vocab import DigitVocab

__all__ = [
    "CRITERIA",
    "CriterionSpec",
    "Param",
    "TokenCriterionTerms",
    "digit_criterion_loss",
    "digit_criterion_terms",
    "digit_entropy_loss",
    "dist2_place_weights",
    "emo_cost_embedding",
    "token_criterion_terms",
]

# EMO's guard against a zero transport cost in sg[NLL / emo] (the reference implementation's value).
EMO_EPS = 1e-10


# ---------------------------------------------------------------------------------------------- digit criteria
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
    """NTL-WAS ``sum_k p_hat_k |y - k|`` per position (no place weight, as in the NTL paper)."""
    return _masked(targets, _was_distance(targets))


def ntl_mse_token_losses(targets: DigitTargets) -> torch.Tensor:
    """NTL-MSE ``(sum_k p_hat_k k - y)^2`` per position (no place weight, as in the NTL paper)."""
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
    """
    return _masked(targets, del_token_losses(targets, weights) * _was_distance(targets))


# ---------------------------------------------------------------------------------------------- token criteria
class TokenCriterionTerms(NamedTuple):
    """Per-position terms of a criterion that replaces cross-entropy, all float32, 0 off the targets.

    ``loss`` is what is minimised (``(1 - alpha) * nll + alpha * criterion``); ``nll`` the plain cross-entropy
    (for logging); ``mask`` marks the targets (labels != ``ignore_index``); ``cost`` is EMO's transport cost
    ``emo_t`` (zeros for MixCE).
    """

    loss: torch.Tensor
    nll: torch.Tensor
    mask: torch.Tensor
    cost: torch.Tensor


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha interpolates cross-entropy and the criterion; it must be in [0, 1], got {alpha}")


def _safe_targets(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int):
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} are not aligned: "
            "logits[..., t, :] must predict labels[..., t] (shift them before calling)"
        )
    mask = labels != ignore_index
    return torch.where(mask, labels, 0), mask


def token_nll(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Cross-entropy per position in float32 (0 where ``labels == ignore_index``), from ``[..., V]`` logits."""
    _safe_targets(logits, labels, ignore_index)
    vocab_size = logits.shape[-1]
    nll = F.cross_entropy(
        logits.float().reshape(-1, vocab_size), labels.reshape(-1), ignore_index=ignore_index, reduction="none"
    )
    return nll.view(labels.shape)


def mixce_token_losses(
    logits: torch.Tensor, labels: torch.Tensor, eta: float = 0.5, alpha: float = 1.0, ignore_index: int = -100
) -> TokenCriterionTerms:
    """MixCE per target token: ``eta * NLL + (1 - eta) * sg[exp(-NLL)] * NLL``, interpolated with CE by ``alpha``.

    ``exp(-NLL_t)`` is the model's probability of the target, detached: the reverse cross-entropy's gradient
    estimate of the MixCE paper. With ``alpha`` the per-token loss is ``(1 - alpha(1 - eta)) NLL + alpha(1 - eta)
    sg[p_y] NLL``: MixCE with ``eta' = 1 - alpha (1 - eta)``.
    """
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"MixCE eta must be in [0, 1], got {eta}")
    _check_alpha(alpha)
    _, mask = _safe_targets(logits, labels, ignore_index)
    nll = token_nll(logits, labels, ignore_index)
    mixce = eta * nll + (1.0 - eta) * torch.exp(-nll.detach()) * nll
    loss = torch.where(mask, (1.0 - alpha) * nll + alpha * mixce, 0.0)
    return TokenCriterionTerms(loss, torch.where(mask, nll, 0.0), mask, torch.zeros_like(nll))


@torch.no_grad()
def emo_cost_embedding(output_embedding: torch.Tensor) -> torch.Tensor:
    """EMO's frozen cost embedding: a float32, row-L2-normalised copy of the ``[V, H]`` output embedding.

    Rows of norm 0 (padding rows of an enlarged vocabulary) stay 0 instead of becoming NaN. Memory: ``V * H * 4``
    bytes (0.93 GB for Qwen2.5-1.5B, V = 151936, H = 1536).
    """
    if output_embedding.dim() != 2 or output_embedding.numel() == 0:
        raise ValueError(
            f"EMO needs the full [vocab, hidden] output embedding, got shape {tuple(output_embedding.shape)} "
            "(a weight sharded by DeepSpeed ZeRO-3 or FSDP is not supported)"
        )
    return F.normalize(output_embedding.detach().float(), p=2.0, dim=1).clone()


def emo_token_losses(
    logits: torch.Tensor,
    labels: torch.Tensor,
    cost_embedding: torch.Tensor,
    alpha: float = 1.0,
    ignore_index: int = -100,
) -> TokenCriterionTerms:
    """EMO per target token: ``0.5 * (NLL + sg[NLL / (emo + 1e-10)] * emo)``, interpolated with CE by ``alpha``.

    ``emo_t = 1 - <e_y, E^T q>`` with ``E`` = ``cost_embedding`` (:func:`emo_cost_embedding`) and
    ``q = p - sg[p_y] onehot(y)``: the value has the target's mass removed, the gradient is the full softmax's.
    Since ``<e_y, E^T onehot(y)> = |e_y|^2``, this is computed as ``1 - <e_y, E^T p> + sg[p_y] |e_y|^2`` with no
    ``[N, V]`` one-hot. The forward value of the EMO term equals NLL (up to the 1e-10 guard); only its gradient
    differs. Extra memory over cross-entropy: the softmax ``p`` (``[N, V]`` float32, kept for the backward pass)
    and the ``[N, V] @ [V, H]`` product.
    """
    _check_alpha(alpha)
    safe, mask = _safe_targets(logits, labels, ignore_index)
    vocab_size = logits.shape[-1]
    if cost_embedding.dim() != 2 or cost_embedding.shape[0] != vocab_size:
        raise ValueError(
            f"the EMO cost embedding is {tuple(cost_embedding.shape)} but the logits have {vocab_size} entries: "
            "it must be the [vocab, hidden] output embedding of the same model"
        )
    log_p = torch.log_softmax(logits.float(), dim=-1)
    nll = -log_p.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    p = log_p.exp()
    cost = cost_embedding.to(device=p.device, dtype=p.dtype)
    e_y = cost[safe]  # [..., H]
    expected_embedding = p.reshape(-1, vocab_size) @ cost  # [N, H]
    overlap = (expected_embedding.view(e_y.shape) * e_y).sum(-1)
    target_mass = torch.exp(-nll.detach())
    emo = 1.0 - overlap + target_mass * (e_y * e_y).sum(-1)
    emo_loss = 0.5 * (nll + (nll / (emo + EMO_EPS)).detach() * emo)
    loss = torch.where(mask, (1.0 - alpha) * nll + alpha * emo_loss, 0.0)
    return TokenCriterionTerms(loss, torch.where(mask, nll, 0.0), mask, torch.where(mask, emo, 0.0))


# ---------------------------------------------------------------------------------------------- the registry
@dataclass(frozen=True)
class Param:
    """A criterion's own parameter: config key ``del_<name>``, a finite float within ``bound``."""

    name: str
    default: float
    bound: Bound
    doc: str

    @property
    def key(self) -> str:
        return f"del_{self.name}"

    def check(self, value: Any) -> float:
        return self.bound.check(self.key, value)


@dataclass(frozen=True)
class CriterionSpec:
    """One training criterion. ``kind``: ``"digit"`` terms are added to cross-entropy (``CE + alpha * mean over
        digit targets``), ``"token"`` losses replace it (``alpha`` interpolates, in [0, 1], and must be set), ``"none"``
        is cross-entropy alone.

        ``terms`` computes the per-position term: for a digit criterion ``terms(digits, places, weighting, **params)``
        (zeros off the digit targets), for a token criterion ``terms(logits, labels, alpha=, ignore_index=, **params,
        **state)`` returning :class:`TokenCriterionTerms`. ``prepare(model)`` builds extra state a token criterion needs
        once per run (EMO's cost embedding). ``formula`` is the loss as the docs table shows it; ``place_keys`` are the
    place-weight keys it reads (:class:`~del_plugin.core.places.PlaceWeighting`). Adding a criterion is one function
    and one entry in :data:`CRITERIA`: the config fields, their validation, the dispatch, the docs table and the
    ablation configs follow from it."""

    name: str
    kind: Literal["digit", "token", "none"]
    formula: str
    terms: Callable[..., Any] | None = None
    params: tuple[Param, ...] = ()
    place_keys: tuple[str, ...] = ()
    prepare: Callable[[Any], dict] | None = None

    def check_params(self, params: dict) -> dict[str, float]:
        """Every parameter of this criterion, checked, with defaults filled in."""
        own = {p.name: p for p in self.params}
        unknown = sorted(set(params) - set(own))
        if unknown:
            raise TypeError(
                f"criterion {self.name!r} takes no parameter {', '.join(unknown)} "
                f"(its parameters: {', '.join(own) or 'none'})"
            )
        return {name: p.check(params.get(name, p.default)) for name, p in own.items()}


def _del_terms(digits, places, weighting):
    return del_token_losses(digits, place_weights(places, weighting))


def _del_centered_terms(digits, places, weighting):
    return del_centered_token_losses(digits, place_weights(places, weighting))


def _del_dist_terms(digits, places, weighting):
    return del_dist_token_losses(digits, place_weights(places, weighting))


def _dist2_terms(digits, places, weighting, dist2_tau):
    return dist2_token_losses(digits, dist2_place_weights(places, weighting.enabled), dist2_tau)


def _emo_terms(logits, labels, *, alpha, ignore_index, cost_embedding=None):
    if cost_embedding is None:
        raise ValueError(
            "emo needs its cost embedding: state={'cost_embedding': "
            "emo_cost_embedding(model.get_output_embeddings().weight)}, as CRITERIA['emo'].prepare builds"
        )
    return emo_token_losses(logits, labels, cost_embedding, alpha, ignore_index)


def _emo_state(model) -> dict:
    head = model.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        raise ValueError(f"EMO needs the model's output embedding; {type(model).__name__} has none")
    return {"cost_embedding": emo_cost_embedding(head.weight)}


_DEL_PLACE_KEYS = ("del_place_weighting", "del_integer_slope", "del_decimal_base")

CRITERIA: dict[str, CriterionSpec] = {
    spec.name: spec
    for spec in (
        CriterionSpec("mle", "none", "`CE`"),
        CriterionSpec(
            "mixce",
            "token",
            "`mean_tokens [(1 - alpha) NLL_t + alpha MixCE_t]`",
            lambda logits, labels, *, alpha, ignore_index, mixce_eta: mixce_token_losses(
                logits, labels, mixce_eta, alpha, ignore_index
            ),
            params=(
                Param(
                    "mixce_eta",
                    0.5,
                    Bound(0.0, 1.0, "eta weighs the forward cross-entropy against the reverse one"),
                    "MixCE mixing ratio eta: eta * NLL + (1 - eta) * sg[exp(-NLL)] * NLL (1 is plain cross-entropy)",
                ),
            ),
        ),
        CriterionSpec(
            "emo", "token", "`mean_tokens [(1 - alpha) NLL_t + alpha EMO_t]`", _emo_terms, prepare=_emo_state
        ),
        CriterionSpec(
            "ntl_was",
            "digit",
            "`CE + alpha * mean_digits sum_k p_hat_k abs(y - k)`",
            lambda digits, places, weighting: ntl_was_token_losses(digits),
        ),
        CriterionSpec(
            "ntl_mse",
            "digit",
            "`CE + alpha * mean_digits (sum_k p_hat_k k - y)^2`",
            lambda digits, places, weighting: ntl_mse_token_losses(digits),
        ),
        CriterionSpec(
            "dist2",
            "digit",
            "`CE + alpha * mean_digits w_t KL(q_t ‖ p_hat)`, `q_t = softmax_k(-(y - k)^2 / tau)`",
            _dist2_terms,
            place_keys=("del_place_weighting",),
            params=(
                Param(
                    "dist2_tau",
                    1.0,
                    Bound(
                        0.01, 100.0, "tau scales the squared digit distance; far outside this q is one-hot or uniform"
                    ),
                    "DIST2 temperature tau of the target q = softmax_k(-(y - k)^2 / tau) (paper: 1)",
                ),
            ),
        ),
        CriterionSpec(
            "del",
            "digit",
            "`CE + alpha * mean_digits u_t mean_k(p_hat_k BCE_k)`",
            _del_terms,
            place_keys=_DEL_PLACE_KEYS,
        ),
        CriterionSpec(
            "del_centered",
            "digit",
            "`CE + alpha * mean_digits u_t mean_k(p_hat_k BCE(z_k - mean_j z_j, onehot(y)_k))`",
            _del_centered_terms,
            place_keys=_DEL_PLACE_KEYS,
        ),
        CriterionSpec(
            "del_dist",
            "digit",
            "`CE + alpha * mean_digits u_t mean_k(p_hat_k BCE_k) * sum_k p_hat_k abs(y - k)`",
            _del_dist_terms,
            place_keys=_DEL_PLACE_KEYS,
        ),
    )
}
DIGIT_CRITERIA: tuple[str, ...] = tuple(n for n, c in CRITERIA.items() if c.kind == "digit")
TOKEN_CRITERIA: tuple[str, ...] = tuple(n for n, c in CRITERIA.items() if c.kind == "token")


def criterion_spec(name: str) -> CriterionSpec:
    try:
        return CRITERIA[name]
    except KeyError:
        raise ValueError(f"unknown criterion {name!r}; choose one of {', '.join(CRITERIA)}") from None


# ---------------------------------------------------------------------------------------------- dispatch
def digit_criterion_terms(
    criterion: str,
    digits: DigitTargets,
    places: torch.Tensor,
    *,
    weighting: PlaceWeighting = PlaceWeighting(),
    **params: float,
) -> torch.Tensor:
    """The per-position term of a criterion (float32, 0 off the digit targets); zeros for ``mle`` and the token
    criteria, which add no digit term. ``places`` are aligned with ``digits`` (:func:`next_token_places`)."""
    spec = criterion_spec(criterion)
    checked = spec.check_params(params)
    if spec.kind != "digit":
        return torch.zeros(digits.mask.shape, dtype=digits.logits.dtype, device=digits.logits.device)
    return spec.terms(digits, places, weighting, **checked)


def digit_criterion_loss(
    criterion: str,
    digits: DigitTargets,
    places: torch.Tensor,
    *,
    alpha: float = 1.0,
    reduction: Reduction = "mean",
    weighting: PlaceWeighting = PlaceWeighting(),
    **params: float,
) -> torch.Tensor:
    """``alpha`` times a digit criterion on :class:`DigitTargets` (from logits, hidden states or a capture) and
    the aligned ``places``: the mean over digit targets (0 when there is none), the sum, or per position."""
    per_token = digit_criterion_terms(criterion, digits, places, weighting=weighting, **params)
    return reduce_token_losses(per_token, digits.mask, reduction, alpha)


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
