"""The registry of training criteria: one :class:`CriterionSpec` per criterion in :data:`CRITERIA` holds everything
the rest of the package needs to know of it (kind, formula, parameters, place keys, extra state, logged extras,
whether it needs the full logits), so that adding a criterion is one function and one entry here: the config
fields, their validation, the dispatch (:mod:`~del_plugin.core.criteria.dispatch`), the logs, the refusals, the docs
table and the ablation configs follow from it. No criterion is named anywhere else.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch

from ..bounds import Bound
from ..places import place_weights
from .digit import (
    del_centered_token_losses,
    del_dist_token_losses,
    del_token_losses,
    dist2_place_weights,
    dist2_token_losses,
    ntl_mse_token_losses,
    ntl_was_token_losses,
)
from .number import ntl_number_terms_and_starts, number_starts
from .token import emo_cost_embedding, emo_token_losses, mixce_token_losses

__all__ = [
    "CRITERIA",
    "DIGIT_CRITERIA",
    "TOKEN_CRITERIA",
    "CriterionSpec",
    "Param",
    "criteria_names",
    "criterion_spec",
]


@dataclass(frozen=True)
class Param:
    """A criterion's own parameter: config key ``key`` (``del_<name>``), a finite float within ``bound``, or a
    switch (``bound=None``: true or false, its default a bool); the criterion's ``terms`` receive it as ``name``."""

    key: str
    default: float | bool
    bound: Bound | None
    doc: str

    def __post_init__(self) -> None:
        if not self.key.startswith("del_"):
            raise ValueError(f"a criterion parameter's config key starts with 'del_', got {self.key!r}")
        if (self.bound is None) != isinstance(self.default, bool):
            raise ValueError(f"{self.key}: a switch, and only a switch, has a bool default and no bound")

    @property
    def name(self) -> str:
        return self.key.removeprefix("del_")

    @property
    def is_switch(self) -> bool:
        return self.bound is None

    @property
    def allowed(self) -> str:
        """What the docs say of its values: the interval and default, or true / false and the default."""
        if self.is_switch:
            return f"true or false, default {str(self.default).lower()}"
        return f"in {self.bound.interval}, default {self.default:g}"

    def check(self, value: Any) -> float | bool:
        if self.is_switch:
            if not isinstance(value, bool):
                raise ValueError(f"`{self.key}` must be true or false, got {value!r}")
            return value
        return self.bound.check(self.key, value)


@dataclass(frozen=True)
class CriterionSpec:
    """One training criterion.

    ``kind``: ``"digit"`` terms are added to cross-entropy (``CE + alpha * mean over digit targets``), ``"token"``
    losses replace it (``alpha`` interpolates, in [0, 1], and must be set), ``"none"`` is cross-entropy alone.
    ``terms`` computes the per-position term: for a digit criterion ``terms(digits, places, weighting, **params)``
    (zeros off the digit targets), for a token criterion ``terms(logits, labels, alpha=, ignore_index=, **params,
    **state)`` returning :class:`~del_plugin.core.criteria.token.TokenCriterionTerms`, whose ``extras`` are logged
    under their names. ``prepare(model)`` builds extra state a criterion needs once per run (EMO's cost embedding).
    ``formula`` is the loss as the docs table shows it; ``place_keys`` are the place-weight keys it reads
    (:class:`~del_plugin.core.places.PlaceWeighting`). A token criterion reads the full ``[..., V]`` logits
    (:attr:`needs_full_logits`): fused cross-entropy kernels, which never build them, are refused beside it.
    ``unit`` is what a digit criterion is averaged over: digit targets, or numbers (its term then sits at each
    number's first digit, :meth:`units`); a number-level criterion's ``terms_and_units`` gives its terms and where
    its numbers start from one reading of the numbers, and its ``starts(places, mask, **params)`` where they start
    alone.
    """

    name: str
    kind: Literal["digit", "token", "none"]
    formula: str
    terms: Callable[..., Any] | None = None
    params: tuple[Param, ...] = ()
    place_keys: tuple[str, ...] = ()
    prepare: Callable[[Any], dict] | None = None
    unit: Literal["digit", "number"] = "digit"
    terms_and_units: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    starts: Callable[..., torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if not (self.unit == "number") == (self.terms_and_units is not None) == (self.starts is not None):
            raise ValueError(
                f"criterion {self.name!r}: a number-level criterion, and only one, has terms_and_units and starts"
            )

    def units(self, places: torch.Tensor, mask: torch.Tensor, **params: float | bool) -> torch.Tensor:
        """Where the units that a digit criterion's term is averaged over are: its digit targets (``mask``), or
        for a number-level criterion (``unit="number"``) the first digit of each number in ``places``, as its
        ``params`` (checked, defaults filled in) read the numbers."""
        return self.starts(places, mask, **self.check_params(params)) if self.unit == "number" else mask

    @property
    def needs_full_logits(self) -> bool:
        """Whether the criterion computes its loss from the full ``[..., V]`` logits (it replaces cross-entropy)."""
        return self.kind == "token"

    def check_params(self, params: dict) -> dict[str, float | bool]:
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


def _ntl_number_terms_and_units(digits, places, weighting, ntl_float_level):
    return ntl_number_terms_and_starts(digits, places, ntl_float_level)


def _ntl_number_terms(digits, places, weighting, ntl_float_level):
    return ntl_number_terms_and_starts(digits, places, ntl_float_level)[0]


def _ntl_number_starts(places, mask, ntl_float_level):
    return number_starts(places, mask, ntl_float_level)


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
                    "del_mixce_eta",
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
                    "del_dist2_tau",
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
        CriterionSpec(
            "ntl_number",
            "digit",
            "`CE + alpha * mean_numbers abs(y_hat - y) / (abs(y_hat) + abs(y) + eps)`, "
            "`y_hat = sum_digits 10^i sum_k p_hat_k k`",
            _ntl_number_terms,
            params=(
                Param(
                    "del_ntl_float_level",
                    False,
                    None,
                    "ntloss's float_level: a decimal part one '.' after a digit is in that digit's number (12.34 is "
                    "one number, read as 1234) instead of a number of its own (12 and 34)",
                ),
            ),
            unit="number",
            terms_and_units=_ntl_number_terms_and_units,
            starts=_ntl_number_starts,
        ),
    )
}
DIGIT_CRITERIA: tuple[str, ...] = tuple(n for n, c in CRITERIA.items() if c.kind == "digit")
TOKEN_CRITERIA: tuple[str, ...] = tuple(n for n, c in CRITERIA.items() if c.kind == "token")


def criterion_spec(name: str) -> CriterionSpec:
    try:
        return CRITERIA[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), list(CRITERIA), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown criterion {name!r}{hint}; choose one of {', '.join(CRITERIA)}") from None


def criteria_names(*, needs_full_logits: bool | None = None, kind: str | None = None) -> str:
    """The registered criteria's names, comma-separated, optionally only those that do (or do not) need the full
    logits, or of one kind: what error messages list, so that no message types the list out."""
    return ", ".join(
        name
        for name, spec in CRITERIA.items()
        if (needs_full_logits is None or spec.needs_full_logits == needs_full_logits)
        and (kind is None or spec.kind == kind)
    )
