"""What a DEL run is configured with: one object, read from any mapping of ``del_*`` keys, defaults written once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..core.bounds import Bound
from ..core.criteria import CRITERIA, CriterionSpec, criterion_spec
from ..core.places import PLACE_WEIGHT_BOUNDS, PlaceWeighting

__all__ = ["ALPHA_BOUNDS", "DEFAULT_ALPHA", "TRAINING_KEYS", "DELSettings", "criteria_table"]

# A digit criterion's weight when none is given: the smallest weight of the efficacy sweep, where DEL cost least
# (docs/efficacy.md; every larger weight cost more accuracy there). The advice's home: docs/choosing-del-alpha.md.
DEFAULT_ALPHA = 0.03
ALPHA_BOUNDS: dict[str, Bound] = {
    "digit": Bound(
        0.0,
        100.0,
        "the digit term is a mean over digits of O(1-10) per digit; above 100 it drowns the "
        "cross-entropy (the largest weight converted from the authors' runs is 2.56)",
    ),
    "token": Bound(0.0, 1.0, "it interpolates (1 - del_alpha) * CE + del_alpha * criterion"),
    "none": Bound(0.0, 100.0, "mle trains with cross-entropy alone; del_alpha is not used"),
}

# the keys DELSettings.from_config reads: what a training run is configured with
TRAINING_KEYS = (
    "del_alpha",
    "del_criterion",
    "del_place_weighting",
    *(f"del_{name}" for name in PLACE_WEIGHT_BOUNDS),
    *(param.key for spec in CRITERIA.values() for param in spec.params),
)


@dataclass(frozen=True)
class DELSettings:
    """A criterion (:data:`~del_plugin.core.criteria.CRITERIA`), its weight and parameters, and DEL's place weights.

    ``alpha`` is the weight of a digit criterion (``CE + alpha * mean over digit targets``, default
    :data:`DEFAULT_ALPHA`) or the interpolation of a token criterion (``(1 - alpha) CE + alpha criterion``, no
    default: it must be given). ``params`` are the criterion's own parameters; missing ones take the registry's
    defaults. Every value is checked here, with the reason for its bounds.
    """

    criterion: str = "del"
    alpha: float | None = None
    weighting: PlaceWeighting = PlaceWeighting()
    params: Mapping[str, float | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        spec = criterion_spec(self.criterion)
        alpha = self.alpha
        if alpha is None:
            if spec.kind == "token":
                raise ValueError(
                    f"del_alpha: `{self.criterion}` replaces cross-entropy and reads del_alpha as the interpolation "
                    f"(1 - del_alpha) * CE + del_alpha * {self.criterion}; set it explicitly (1.0 trains with "
                    f"{self.criterion} as published) instead of inheriting DEL's default"
                )
            alpha = DEFAULT_ALPHA
        object.__setattr__(self, "alpha", ALPHA_BOUNDS[spec.kind].check("del_alpha", alpha))
        object.__setattr__(self, "params", MappingProxyType(spec.check_params(dict(self.params))))

    @property
    def spec(self) -> CriterionSpec:
        return CRITERIA[self.criterion]

    @property
    def digit_alpha(self) -> float:
        """The weight of the digit term added to the loss: ``alpha`` for a digit criterion, else 0."""
        return self.alpha if self.spec.kind == "digit" else 0.0

    def described_keys(self) -> str:
        """The rest of what decides the loss, as the start-up line and del-check show it after the criterion and
        weight: ", place weighting on|off" for a criterion that reads the place keys, then each of the criterion's
        own keys with its value (", del_ntl_float_level true"); "" for a criterion that has neither."""
        parts = [f"place weighting {'on' if self.weighting.enabled else 'off'}"] if self.spec.place_keys else []
        for param in self.spec.params:
            value = self.params[param.name]
            parts.append(f"{param.key} {str(value).lower() if isinstance(value, bool) else f'{value:g}'}")
        return "".join(f", {part}" for part in parts)

    def config_values(self) -> tuple:
        """The :data:`TRAINING_KEYS` and their values as a config validated with these settings holds them (every
        unset key at its default): the key under which :meth:`from_config` finds these settings again."""
        params = {
            p.key: self.params[p.name] if spec is self.spec else p.default
            for spec in CRITERIA.values()
            for p in spec.params
        }
        weights = {f"del_{name}": getattr(self.weighting, name) for name in PLACE_WEIGHT_BOUNDS}
        known = {
            "del_alpha": self.alpha,
            "del_criterion": self.criterion,
            "del_place_weighting": self.weighting.enabled,
            **weights,
            **params,
        }
        return _typed(known)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> DELSettings:
        """Read ``del_alpha``, ``del_criterion``, ``del_place_weighting``, ``del_integer_slope``,
        ``del_decimal_base`` and the criterion's ``del_<param>`` keys; a missing or None key takes its default.

        Built once and carried: a host validates the raw config (Axolotl's validator, del-check) and later hands
        its trainer the validated one, whose unset keys hold their defaults; both find the settings the first
        reading built (:data:`_BUILT`, under the values read and under :meth:`config_values`)."""

        def read(key: str) -> Any:
            return cfg.get(key) if hasattr(cfg, "get") else getattr(cfg, key, None)

        values = _typed({key: read(key) for key in TRAINING_KEYS})
        try:
            carried = _BUILT.get(values)
        except TypeError:  # a value that is no scalar (a list): refused by the reading below, never kept
            return cls._read(read)
        if carried is None:
            carried = cls._read(read)
            if len(_BUILT) >= 64:  # a process reads a handful of configs; never grow without bound
                _BUILT.clear()
            _BUILT[values] = _BUILT[carried.config_values()] = carried
        return carried

    @classmethod
    def _read(cls, read) -> DELSettings:
        def get(key: str, default: Any) -> Any:
            value = read(key)
            return default if value is None else value

        criterion = get("del_criterion", cls.criterion)
        spec = criterion_spec(criterion)
        defaults = PlaceWeighting()
        enabled = get("del_place_weighting", defaults.enabled)
        if not isinstance(enabled, bool):
            raise ValueError(f"`del_place_weighting` must be true or false, got {enabled!r}")
        numbers = {
            name: bound.check(f"del_{name}", get(f"del_{name}", getattr(defaults, name)))
            for name, bound in PLACE_WEIGHT_BOUNDS.items()
        }
        weighting = PlaceWeighting(enabled=enabled, **numbers)
        for other in CRITERIA.values():
            for param in other.params:
                # a switch turned on changes what its criterion is; beside another criterion it is a mistake, not
                # a key without use (those are warned of: args.py; and a validated config holds every default)
                if param.is_switch and other is not spec and get(param.key, param.default) != param.default:
                    raise ValueError(
                        f"`{param.key}` applies only to `del_criterion: {other.name}`, not `{criterion}`; remove it "
                        f"or set `del_criterion: {other.name}`"
                    )
        params = {p.name: get(p.key, p.default) for p in spec.params}
        return cls(criterion=criterion, alpha=get("del_alpha", None), weighting=weighting, params=params)


# the settings read so far: the values of TRAINING_KEYS a config held -> its settings (frozen, so shared)
_BUILT: dict[tuple, DELSettings] = {}


def _typed(values: Mapping[str, Any]) -> tuple:
    """The values of :data:`TRAINING_KEYS` as a key of :data:`_BUILT`, each with its type: ``true`` equals 1 in
    Python, but ``del_alpha: true`` is refused where ``del_alpha: 1`` is not."""
    return tuple((key, type(values[key]).__name__, values[key]) for key in TRAINING_KEYS)


_ALPHA_MEANING = {
    "digit": f"weight of the digit term, in {ALPHA_BOUNDS['digit'].interval} (default {DEFAULT_ALPHA})",
    "token": f"interpolation, in {ALPHA_BOUNDS['token'].interval}, **required**",
    "none": "unused (a warning if set)",
}


def criteria_table() -> str:
    """The markdown table of every criterion, its loss, what ``del_alpha`` means and its own keys (docs/criteria.md
    shows it; a test keeps the two equal)."""
    rows = ["| `del_criterion` | loss | `del_alpha` | own keys |", "|---|---|---|---|"]
    for spec in CRITERIA.values():
        keys = [f"`{p.key}` ({p.allowed})" for p in spec.params]
        keys += [f"`{k}`" for k in spec.place_keys]
        rows.append(f"| `{spec.name}` | {spec.formula} | {_ALPHA_MEANING[spec.kind]} | {', '.join(keys)} |")
    return "\n".join(rows) + "\n"
