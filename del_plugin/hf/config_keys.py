"""The rules on DEL's own keys in a host's YAML config (a mapping), written once for every host that reads one:
Axolotl's validator (:mod:`del_plugin.axolotl.config_rules`) and LLaMA-Factory's entry point
(:mod:`del_plugin.llamafactory.config`). Each returns what it finds as text without a host's prefix, so that a host
reports every problem at once, in its own words.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

from ..core.criteria import CRITERIA
from ..core.places import PLACE_WEIGHT_BOUNDS
from .settings import TRAINING_KEYS, DELSettings

__all__ = [
    "NUMBER_KEYS",
    "NUMBER_PARAMS",
    "TRAINING_KEYS",
    "configured_criterion",
    "criterion_settings_problem",
    "other_criteria_warnings",
    "read_as_strings",
    "unknown_keys_problem",
    "yaml_string_problems",
]

# a number in exponent form that YAML 1.1 reads as a string (no dot, or an unsigned exponent): 1e9, 3e-2, 1.5E3
_EXPONENT = re.compile(r"([+-]?)(\d+)(?:\.(\d*))?[eE]([+-]?)(\d+)")
# the criterion parameters that are numbers (the others are switches, true or false)
NUMBER_PARAMS = tuple(param.key for spec in CRITERIA.values() for param in spec.params if not param.is_switch)
# every key whose value is a number: the weight, the place weights (PLACE_WEIGHT_BOUNDS) and the number parameters
NUMBER_KEYS = ("del_alpha", *(f"del_{name}" for name in PLACE_WEIGHT_BOUNDS), *NUMBER_PARAMS)


def configured_criterion(data: Any) -> str | None:
    """The configured criterion, or None when it is not one (the ``del_criterion`` key then says so)."""
    criterion = data.get("del_criterion") or DELSettings.criterion
    return criterion if criterion in CRITERIA else None


def read_as_strings(data: Any) -> dict[str, str]:
    """The number keys whose value YAML read as a string in exponent form (``del_alpha: 3e-2``)."""
    return {
        key: value
        for key in NUMBER_KEYS
        if isinstance(value := data.get(key), str) and _EXPONENT.fullmatch(value.strip())
    }


def yaml_string_problems(data: Any) -> list[str]:
    """YAML 1.1 (PyYAML, which Axolotl and LLaMA-Factory read configs with) takes a float only with a dot and a
    signed exponent: ``1e9`` and ``3e-2`` are strings, and would be refused as "not a number" without saying why."""
    problems = []
    for key, value in read_as_strings(data).items():
        sign, whole, fraction, exponent_sign, exponent = _EXPONENT.fullmatch(value.strip()).groups()
        written = f"{sign}{whole}.{fraction or '0'}e{exponent_sign or '+'}{exponent}"
        problems.append(
            f"`{key}: {value}` is read by YAML as the string {value!r}, not a number (YAML needs a dot and a "
            f"signed exponent); write `{key}: {written}`"
        )
    return problems


def criterion_settings_problem(data: Any) -> str | None:
    """The criterion, its weight and parameters and the place weights, with the reason for each bound."""
    if configured_criterion(data) is None or read_as_strings(data):
        return None  # an unknown criterion, or a number YAML read as a string: each refused by its own rule
    try:
        DELSettings.from_config(data)
    except (TypeError, ValueError) as err:
        return str(err)
    return None


def unknown_keys_problem(data: Any, known: Iterable[str]) -> str | None:
    """A misspelled ``del_`` key would otherwise be dropped silently and its default used."""
    known = sorted(known)
    unknown = sorted(k for k in data if isinstance(k, str) and k.startswith("del_") and k not in known)
    if not unknown:
        return None
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, known, n=1)
        hints.append(f"`{key}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
    return f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; the DEL keys are {', '.join(known)}"


def other_criteria_warnings(data: Any) -> list[str]:
    """A criterion's own key set beside another criterion is not used: said, not silently ignored."""
    criterion = configured_criterion(data)
    if criterion is None:
        return []
    warnings = []
    for spec in CRITERIA.values():
        for param in spec.params:
            # (a switch of another criterion turned on is refused: DELSettings.from_config)
            refused = param.is_switch and data.get(param.key) not in (None, param.default)
            if data.get(param.key) is not None and spec.name != criterion and not refused:
                warnings.append(
                    f"del_plugin: `{param.key}` only applies to `del_criterion: {spec.name}`; it is not used with "
                    f"`{criterion}`"
                )
    if CRITERIA[criterion].kind == "none" and data.get("del_alpha") not in (None, 0, 0.0):
        warnings.append(
            f"del_plugin: `del_criterion: {criterion}` trains with cross-entropy alone; `del_alpha` is not used"
        )
    return warnings
