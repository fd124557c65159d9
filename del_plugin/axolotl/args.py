"""Config keys of the DEL plugin, validated with the rest of the Axolotl config, before any model is loaded.

:class:`DELArgs` declares DEL's own keys; each criterion parameter of the registry
(:data:`~del_plugin.core.criteria.CRITERIA`, e.g. ``del_mixce_eta``) gets a field from its entry
(:class:`CriterionParamArgs`), so a new criterion needs no edit here. Defaults and bounds live with
:class:`~del_plugin.core.places.PlaceWeighting` and :class:`~del_plugin.hf.settings.DELSettings`. The rules on a
config that lists the plugin (:mod:`.config_rules`, :mod:`.eval_rules`, the combinations of
:mod:`del_plugin.core.compatibility`) each check one thing and are named for it; one validator runs them in the order
of :data:`RULES` and reports every refusal at once.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from ..core.bounds import refuse_boolean
from ..core.compatibility import cce_folds_lora_head, fused_cross_entropy, lora_targets_head, zero_stage
from ..core.criteria import CRITERIA, criteria_names, criterion_spec
from ..core.places import PLACE_WEIGHT_BOUNDS, PlaceWeighting
from ..evaluation.benchmarks.names import BENCHMARK_NAMES, MAX_NEW_TOKENS
from ..hf.config_keys import NUMBER_KEYS, unknown_keys_problem
from ..hf.settings import ALPHA_BOUNDS, DEFAULT_ALPHA, DELSettings
from .config_rules import (
    COMPATIBILITY_RULES,
    PLUGIN_NAME,
    check_criterion_settings,
    plugin_enabled,
    refuse,
    refuse_modes_other_than_sft,
    refuse_numbers_yaml_reads_as_strings,
    warn_keys_of_other_criteria,
)
from .eval_rules import EVAL_RULES

__all__ = [
    "DEFAULTS",
    "PLUGIN_NAME",
    "RULES",
    "CriterionParamArgs",
    "DELArgs",
    "cce_folds_lora_head",
    "fused_cross_entropy",
    "lora_targets_head",
    "plugin_enabled",
    "zero_stage",
]


def _refusal_error(title: str, refusals: list[str], err: ValidationError | None) -> ValidationError:
    """One ValidationError holding the plugin's refusals and the other errors of the same validation (``err``),
    less those of a key a refusal already names (``del_eval_limit: abc`` is refused once, not twice)."""
    from pydantic_core import InitErrorDetails

    details = [InitErrorDetails(type="value_error", input={}, ctx={"error": ValueError(r)}) for r in refusals]
    for error in err.errors() if err is not None else []:
        key = str(error["loc"][0]) if error["loc"] else ""
        if key.startswith("del_") and any(f"`{key}`" in r for r in refusals):
            continue
        ctx = error.get("ctx") or {}
        details.append(InitErrorDetails(type=error["type"], loc=error["loc"], input=error["input"], ctx=ctx))
    return ValidationError.from_exception_data(title, details)


def _finite(description: str) -> Any:
    return Field(default=None, allow_inf_nan=False, json_schema_extra={"description": description})


CriterionParamArgs = create_model(
    "CriterionParamArgs",
    __doc__="One optional field per criterion parameter of the registry (its config key, default and doc): a float, "
    "or a bool for a switch.",
    **{
        param.key: (
            (bool | None, Field(default=None, json_schema_extra={"description": description}))
            if param.is_switch
            else (float | None, _finite(description))
        )
        for spec in CRITERIA.values()
        for param in spec.params
        for description in (f"{param.doc}; {param.allowed}; del_criterion: {spec.name} only.",)
    },
)

# What an unset key means once the plugin is listed (DELSettings reads the same defaults); the fields themselves
# default to None, so that a config without the plugin carries no del_ key (Axolotl dumps the validated config
# without None values, and Axolotl 0.21 merges a discovered plugin's fields into every config).
DEFAULTS: dict[str, Any] = {
    "del_alpha": DEFAULT_ALPHA,
    "del_criterion": DELSettings.criterion,
    "del_place_weighting": PlaceWeighting.enabled,
    "del_integer_slope": PlaceWeighting.integer_slope,
    "del_decimal_base": PlaceWeighting.decimal_base,
    **{param.key: param.default for spec in CRITERIA.values() for param in spec.params},
}


class DELArgs(CriterionParamArgs):
    """Input args for the Digit Entropy Loss."""

    del_alpha: float | None = _finite(
        "Weight of the digit term: L = CE + del_alpha * L_num, L_num the mean over all digit targets of an "
        f"optimizer step (all micro-batches and GPUs), in {ALPHA_BOUNDS['digit'].interval}, default {DEFAULT_ALPHA} "
        "(choosing it: "
        "docs/choosing-del-alpha.md); 0 trains with cross-entropy alone and still logs the digit metrics. For a "
        "criterion that replaces cross-entropy ("
        + criteria_names(needs_full_logits=True)
        + "): the interpolation (1 - del_alpha) * CE + del_alpha * criterion, in "
        + f"{ALPHA_BOUNDS['token'].interval}, required."
    )
    del_criterion: str | None = Field(
        default=None,
        json_schema_extra={
            "description": f"Training criterion, one of {criteria_names()} (docs/criteria.md); default "
            f"{DELSettings.criterion}.",
            "enum": list(CRITERIA),
        },
    )
    del_place_weighting: bool | None = Field(
        default=None,
        json_schema_extra={
            "description": "Weight each digit by its place in the number (u = slope*(i+1) for integer place i, "
            "base**(i-1) for decimal places). false: every digit weighs 1. Default true."
        },
    )
    del_integer_slope: float | None = _finite(
        "Slope of the integer-place weight u = slope*(i+1), in "
        f"{PLACE_WEIGHT_BOUNDS['integer_slope'].interval}; default {PlaceWeighting.integer_slope} (the paper's)."
    )
    del_decimal_base: float | None = _finite(
        "Base of the decimal-place weight u = base**(i-1), in "
        f"{PLACE_WEIGHT_BOUNDS['decimal_base'].interval}; default {PlaceWeighting.decimal_base} (the paper's)."
    )
    del_eval_benchmarks: list[str] | str | None = Field(
        default=None,
        json_schema_extra={
            "description": "Score the trained model on the paper's benchmarks when training ends (rank 0, the saved "
            f"model, as `del-eval run --model output_dir` does): `all` or a list of {', '.join(BENCHMARK_NAMES)}. "
            "Writes output_dir/del_eval/report.json, logs del_eval/<set>_accuracy and del_eval/macc, and adds the "
            "scores to the model card (docs/evaluation.md)."
        },
    )
    del_eval_limit: int | None = Field(
        default=None,
        json_schema_extra={"description": "Score the first N problems of each set (default: all)."},
    )
    del_eval_benchmark_dir: str | None = Field(
        default=None,
        json_schema_extra={
            "description": "Folder holding simuleq/simuleq.json and sat/sat.json, the two sets not shipped with "
            "del-plugin (needed when del_eval_benchmarks names them)."
        },
    )
    del_eval_allow_modified: bool | None = Field(
        default=None,
        json_schema_extra={
            "description": "Score a SimulEq or SAT file in del_eval_benchmark_dir that is not the authors' (its sha256 "
            "differs; del-eval's --allow-modified). Without it such a file is refused when the config is validated, "
            "since its accuracy is not comparable with the paper's."
        },
    )
    del_eval_max_new_tokens: int | None = Field(
        default=None,
        json_schema_extra={
            "description": f"Longest generation of the evaluation (default {MAX_NEW_TOKENS}, as "
            "del-eval run's; the paper allows 1500)."
        },
    )

    @field_validator("del_criterion", mode="before")
    @classmethod
    def check_criterion_name(cls, value: Any) -> Any:
        """An unknown criterion, with the closest name (``del_centred`` -> ``del_centered``)."""
        if value is None:
            return value
        try:
            criterion_spec(value)
        except ValueError as err:
            refuse(f"del_criterion: {err}")
        return value

    @field_validator(*NUMBER_KEYS, mode="before")
    @classmethod
    def refuse_booleans_as_numbers(cls, value: Any, info) -> Any:
        """YAML's ``true`` would otherwise pass as the number 1 (:meth:`~del_plugin.core.bounds.Bound.check`'s
        refusal, here for a value no rule reads: an unknown criterion's)."""
        refuse_boolean(info.field_name, value)
        return value

    @model_validator(mode="after")
    def fill_defaults(self):
        """A listed plugin's unset keys take their defaults, so the validated config shows what the run uses."""
        if plugin_enabled(self):
            for key, default in DEFAULTS.items():
                if getattr(self, key, None) is None:
                    setattr(self, key, default)
        return self

    @model_validator(mode="after")
    def check_model_architecture(self):
        """Refuse, before the model loads, a config whose logits DEL cannot read exactly (an unknown post-head
        transform); warn for a model type outside the table, which is measured at the first step."""
        if not plugin_enabled(self):
            return self
        source = getattr(self, "base_model_config", None) or getattr(self, "base_model", None)
        if source:
            from .source_checks import check_model_source

            switches = {
                "liger_fused_linear_cross_entropy": getattr(self, "liger_fused_linear_cross_entropy", None),
                "plugins": getattr(self, "plugins", None),
                "cut_cross_entropy": getattr(self, "cut_cross_entropy", True),
            }
            check_model_source(
                str(source),
                trust_remote_code=bool(getattr(self, "trust_remote_code", False)),
                revision=getattr(self, "revision_of_model", None),
                kernels=tuple(fused_cross_entropy(switches)),
            )
        return self

    @model_validator(mode="after")
    def check_tokenizer_digits(self):
        """Refuse a tokenizer whose digits DEL cannot read (no digit tokens, incomplete number tokens) now, not after
        the model is loaded."""
        if not plugin_enabled(self):
            return self
        source = getattr(self, "tokenizer_config", None) or getattr(self, "base_model", None)
        if source:
            from .source_checks import check_tokenizer_source

            check_tokenizer_source(
                str(source),
                use_fast=getattr(self, "tokenizer_use_fast", None),
                trust_remote_code=bool(getattr(self, "trust_remote_code", False)),
                revision=getattr(self, "revision_of_model", None),
            )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def check_the_plugins_rules(cls, data: Any, handler):
        """The plugin's rules (:data:`RULES`, in their order) on the raw config, before its fields are validated.
        Every rule runs, and all their refusals are raised together, with the other errors of the validation (a
        field that is not a number, an unknown tokenizer): pydantic would stop at the first validator that raises,
        and a user would otherwise fix one refusal per run."""
        refusals = _refusals(data)
        try:
            result = handler(data)
        except ValidationError as err:
            if not refusals:
                raise
            raise _refusal_error(cls.__name__, refusals, err) from None
        if refusals:
            raise _refusal_error(cls.__name__, refusals, None)
        return result


def refuse_del_keys_without_the_plugin(data: dict) -> None:
    """Axolotl 0.21 discovers the installed plugin and validates every config with its keys; a config that sets
    ``del_`` keys without listing the plugin would train plain cross-entropy."""
    keys = sorted(k for k in data if isinstance(k, str) and k.startswith("del_") and data[k] is not None)
    if keys:
        refuse(
            f"{', '.join(f'`{k}`' for k in keys)} set, but the plugin is not listed, so the run would train without "
            f"DEL; add it to the config:\nplugins:\n  - {PLUGIN_NAME}\n(or remove the del_ keys)"
        )


def refuse_unknown_del_keys(data: dict) -> None:
    """A misspelled ``del_`` key would otherwise be dropped silently and its default used."""
    problem = unknown_keys_problem(data, DELArgs.model_fields)
    if problem is not None:
        refuse(problem)


# the rules on a config that lists the plugin, in the order they run and their refusals are listed: the keys
# themselves, the criterion's settings, what works with what, the training mode, then the evaluation's keys
RULES = (
    refuse_unknown_del_keys,
    refuse_numbers_yaml_reads_as_strings,
    check_criterion_settings,
    warn_keys_of_other_criteria,
    *COMPATIBILITY_RULES,
    refuse_modes_other_than_sft,
    *EVAL_RULES,
)


def _refusals(data: Any) -> list[str]:
    """The refusals of :data:`RULES` on a raw config (a dict) that lists the plugin. The PluginManager is a
    process-wide singleton, so configs without the plugin reach this validator too: there, ``del_`` keys are refused
    at once (:func:`refuse_del_keys_without_the_plugin`) and nothing else is checked."""
    if not isinstance(data, dict):
        return []
    if not plugin_enabled(data):
        refuse_del_keys_without_the_plugin(data)
        return []
    refusals = []
    for rule in RULES:
        try:
            rule(data)
        except ValueError as err:
            refusals.append(str(err))
    return refusals
