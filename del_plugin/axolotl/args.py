"""Config keys of the DEL plugin, validated with the rest of the Axolotl config, before any model is loaded.

:class:`DELArgs` declares DEL's own keys; each criterion parameter of the registry
(:data:`~del_plugin.core.criteria.CRITERIA`, e.g. ``del_mixce_eta``) gets a field from its entry
(:class:`CriterionParamArgs`), so a new criterion needs no edit here. Defaults and bounds live with
:class:`~del_plugin.core.places.PlaceWeighting` and :class:`~del_plugin.hf.settings.DELSettings`; each validator
below checks one rule and is named for it.
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import json
import re
from typing import Any

from pydantic import Field, ValidationError, create_model, field_validator, model_validator

from ..core.criteria import CRITERIA, criteria_names, criterion_spec
from ..core.places import PlaceWeighting
from ..evaluation.benchmarks.sets import BENCHMARK_NAMES, resolve_benchmark_names
from ..evaluation.runner import EvalSettings
from ..hf.settings import DEFAULT_ALPHA, DELSettings
from .logs import LOG

PLUGIN_NAME = "del_plugin.DELPlugin"
# a number in exponent form that YAML 1.1 reads as a string (no dot, or an unsigned exponent): 1e9, 3e-2, 1.5E3
_EXPONENT = re.compile(r"([+-]?)(\d+)(?:\.(\d*))?[eE]([+-]?)(\d+)")


def plugin_enabled(cfg: Any) -> bool:
    """Whether this config lists the plugin. The PluginManager is a process-wide singleton that keeps every plugin
    it ever registered, so each hook must check the config it is given."""
    plugins = cfg.get("plugins") if hasattr(cfg, "get") else getattr(cfg, "plugins", None)
    return any(str(p).replace(":", ".") == PLUGIN_NAME for p in plugins or [])


def fused_cross_entropy(data: dict) -> list[str]:
    """The config keys that switch on a cross-entropy kernel which never materialises the logits."""
    keys = ["liger_fused_linear_cross_entropy"] if data.get("liger_fused_linear_cross_entropy") else []
    plugins = [str(p) for p in data.get("plugins") or []]
    if any("cut_cross_entropy" in p for p in plugins) and data.get("cut_cross_entropy", True):
        keys.append("cut_cross_entropy")
    return keys


def lora_targets_head(targets: Any) -> bool:
    """Whether ``lora_target_modules`` (a list of names, or one regex as PEFT reads it) selects ``lm_head``."""
    if isinstance(targets, str):
        return re.fullmatch(targets, "lm_head") is not None
    return any(str(t) == "lm_head" or str(t).endswith(".lm_head") for t in targets or [])


def cce_folds_lora_head() -> bool | None:
    """Whether the installed Cut Cross Entropy folds a LoRA adapter on ``lm_head`` into its loss: Axolotl's fork does
    since it hands the patched forwards the head module (``cut_cross_entropy.transformers.utils.apply_lce_lm_head``,
    which appends ``scaling * A(dropout(h))`` to the hidden states and ``B`` to the classifier, calling ``lora_A``
    as the head would); earlier forks pass ``lm_head.weight``, the base weight. None: no fork installed (Axolotl's
    plugin then refuses the run with its install line)."""
    import importlib

    try:
        utils = importlib.import_module("cut_cross_entropy.transformers.utils")
    except ImportError:
        return None
    return hasattr(utils, "apply_lce_lm_head")


def zero_stage(deepspeed: Any) -> int | None:
    """The ZeRO stage of Axolotl's ``deepspeed`` key (a JSON path or a dict), None if unknown or unset."""
    if isinstance(deepspeed, str):
        try:
            with open(deepspeed, encoding="utf-8") as handle:
                deepspeed = json.load(handle)
        except (OSError, ValueError):
            return 3 if "zero3" in deepspeed.replace("_", "").lower() else None
    if isinstance(deepspeed, dict):
        stage = (deepspeed.get("zero_optimization") or {}).get("stage")
        return int(stage) if str(stage).isdigit() else None
    return None


# the evaluation's settings, which need del_eval_benchmarks
EVAL_SETTING_KEYS = ("del_eval_limit", "del_eval_benchmark_dir", "del_eval_max_new_tokens", "del_eval_allow_modified")


def _eval_names(value: Any) -> list[str] | None:
    """The sets ``del_eval_benchmarks`` names, None when unset or not valid (pydantic runs the before-validators in
    reverse order, so a rule may see a value another rule refuses)."""
    if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
        return None
    try:
        return resolve_benchmark_names(value)
    except ValueError:
        return None


def _refuse(problem: str) -> None:
    raise ValueError(f"{PLUGIN_NAME}: {problem}.")


def _criterion(data: dict) -> str | None:
    """The configured criterion, or None when it is not one (the ``del_criterion`` field then says so)."""
    criterion = data.get("del_criterion") or DELSettings.criterion
    return criterion if criterion in CRITERIA else None


# the refusals of the rules run so far in this validation (DELArgs.report_every_refusal_at_once), else None
_REFUSALS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("del_plugin_refusals", default=None)


def _when_enabled(rule):
    """A before-validator's rule, run only on a raw config (a dict) that lists the plugin: the PluginManager is a
    process-wide singleton, so configs without the plugin reach these validators too. The rule raises or passes;
    the data goes on unchanged. A refusal is kept, so that the next rules run too and every refusal is reported at
    once (:meth:`DELArgs.report_every_refusal_at_once`)."""

    @functools.wraps(rule)
    def checked(cls, data: Any) -> Any:
        if isinstance(data, dict) and plugin_enabled(data):
            refusals = _REFUSALS.get()
            try:
                rule(cls, data)
            except ValueError as err:
                if refusals is None:
                    raise
                refusals.append(str(err))
        return data

    return checked


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


def _read_as_strings(data: dict) -> dict[str, str]:
    """The number keys whose value YAML read as a string in exponent form (``del_alpha: 3e-2``)."""
    keys = ("del_alpha", "del_integer_slope", "del_decimal_base", *_NUMBER_PARAMS)
    return {
        key: value for key in keys if isinstance(value := data.get(key), str) and _EXPONENT.fullmatch(value.strip())
    }


def _finite(description: str) -> Any:
    return Field(default=None, allow_inf_nan=False, json_schema_extra={"description": description})


def _plugin_line_missing(data: dict) -> list[str]:
    """The ``del_`` keys set in a config that does not list the plugin."""
    return sorted(k for k in data if isinstance(k, str) and k.startswith("del_") and data[k] is not None)


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
# the criterion parameters that are numbers (the others are switches, true or false)
_NUMBER_PARAMS = tuple(param.key for spec in CRITERIA.values() for param in spec.params if not param.is_switch)

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
        f"optimizer step (all micro-batches and GPUs), in [0, 100], default {DEFAULT_ALPHA} (choosing it: "
        "docs/choosing-del-alpha.md); 0 trains with cross-entropy alone and still logs the digit metrics. For a "
        "criterion that replaces cross-entropy ("
        + criteria_names(needs_full_logits=True)
        + "): the interpolation (1 - del_alpha) * CE + del_alpha * criterion, in [0, 1], required."
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
        f"Slope of the integer-place weight u = slope*(i+1), in (0, 100]; default {PlaceWeighting.integer_slope} "
        "(the paper's)."
    )
    del_decimal_base: float | None = _finite(
        f"Base of the decimal-place weight u = base**(i-1), in [1, 10]; default {PlaceWeighting.decimal_base} "
        "(the paper's)."
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
            "description": f"Longest generation of the evaluation (default {EvalSettings.max_new_tokens}, as "
            "del-eval run's; the paper allows 1500)."
        },
    )

    @model_validator(mode="before")
    @classmethod
    def refuse_del_keys_without_the_plugin(cls, data: Any) -> Any:
        """Axolotl 0.21 discovers the installed plugin and validates every config with its keys; a config that sets
        ``del_`` keys without listing the plugin would train plain cross-entropy."""
        if isinstance(data, dict) and not plugin_enabled(data):
            keys = _plugin_line_missing(data)
            if keys:
                _refuse(
                    f"{', '.join(f'`{k}`' for k in keys)} set, but the plugin is not listed, so the run would "
                    f"train without DEL; add it to the config:\nplugins:\n  - {PLUGIN_NAME}\n(or remove the del_ "
                    "keys)"
                )
        return data

    @field_validator("del_criterion", mode="before")
    @classmethod
    def check_criterion_name(cls, value: Any) -> Any:
        """An unknown criterion, with the closest name (``del_centred`` -> ``del_centered``)."""
        if value is None:
            return value
        try:
            criterion_spec(value)
        except ValueError as err:
            _refuse(f"del_criterion: {err}")
        return value

    @field_validator("del_alpha", "del_integer_slope", "del_decimal_base", *_NUMBER_PARAMS, mode="before")
    @classmethod
    def refuse_booleans_as_numbers(cls, value: Any, info) -> Any:
        """YAML's ``true`` would otherwise pass as the number 1."""
        if isinstance(value, bool):
            raise ValueError(f"`{info.field_name}` must be a number, not a boolean ({value})")
        return value

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_unknown_del_keys(cls, data: dict) -> None:
        """A misspelled ``del_`` key would otherwise be dropped silently and its default used."""
        known = set(DELArgs.model_fields)
        unknown = sorted(k for k in data if isinstance(k, str) and k.startswith("del_") and k not in known)
        if unknown:
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hints.append(f"`{key}`" + (f" (did you mean `{close[0]}`?)" if close else ""))
            _refuse(
                f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; the DEL keys are "
                f"{', '.join(sorted(known))}"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def check_criterion_settings(cls, data: dict) -> None:
        """The criterion, its weight and parameters and the place weights, with the reason for each bound."""
        criterion = _criterion(data)
        if criterion is None or _read_as_strings(data):
            return  # an unknown criterion, or a number YAML read as a string: each refused by its own rule
        try:
            DELSettings.from_config(data)
        except (TypeError, ValueError) as err:
            _refuse(str(err))

    # defined after check_criterion_settings: pydantic runs "before" model validators last-defined first, and this
    # one must name the cause before that one refuses the string as "not a number"
    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_numbers_yaml_reads_as_strings(cls, data: dict) -> None:
        """YAML 1.1, which Axolotl's loader (PyYAML) reads, takes a float only with a dot and a signed exponent:
        ``1e9`` and ``3e-2`` are strings, and would be refused as "not a number" without saying why."""
        for key, value in _read_as_strings(data).items():
            match = _EXPONENT.fullmatch(value.strip())
            if match:
                sign, whole, fraction, exponent_sign, exponent = match.groups()
                written = f"{sign}{whole}.{fraction or '0'}e{exponent_sign or '+'}{exponent}"
                _refuse(
                    f"`{key}: {value}` is read by YAML as the string {value!r}, not a number (YAML needs a dot and a "
                    f"signed exponent); write `{key}: {written}`"
                )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def warn_keys_of_other_criteria(cls, data: dict) -> None:
        """A criterion's own key set beside another criterion is not used: said, not silently ignored."""
        criterion = _criterion(data)
        if criterion is None:
            return
        for spec in CRITERIA.values():
            for param in spec.params:
                # (a switch of another criterion turned on is refused: DELSettings.from_config)
                refused = param.is_switch and data.get(param.key) not in (None, param.default)
                if data.get(param.key) is not None and spec.name != criterion and not refused:
                    LOG.warning(
                        "del_plugin: `%s` only applies to `del_criterion: %s`; it is not used with `%s`",
                        param.key,
                        spec.name,
                        criterion,
                    )
        if CRITERIA[criterion].kind == "none" and data.get("del_alpha") not in (None, 0, 0.0):
            LOG.warning(
                "del_plugin: `del_criterion: %s` trains with cross-entropy alone; `del_alpha` is not used", criterion
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_other_losses_with_full_logit_criteria(cls, data: dict) -> None:
        """A criterion that replaces the cross-entropy from the full logits: another replacement, or a kernel that
        never builds the logits, is refused."""
        criterion = _criterion(data)
        if criterion is None or not CRITERIA[criterion].needs_full_logits:
            return
        if data.get("label_smoothing_factor"):
            _refuse(
                f"`label_smoothing_factor` and `del_criterion: {criterion}` both replace the cross-entropy; remove one"
            )
        for key in ("use_dft", "use_eaft"):
            if data.get(key):
                _refuse(f"`{key}: true` installs its own loss function, as `del_criterion: {criterion}` does; use one")
        kernels = fused_cross_entropy(data) + [
            k for k in ("liger_cross_entropy", "chunked_cross_entropy") if data.get(k)
        ]
        if kernels:
            _refuse(
                f"`del_criterion: {criterion}` replaces the cross-entropy with a loss on the full softmax over "
                f"the vocabulary, so {', '.join(f'`{k}`' for k in kernels)} would not run (and a fused kernel's "
                f"memory saving would be lost); use a criterion that works beside it "
                f"({criteria_names(needs_full_logits=False)}), or remove it"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_lora_head_with_liger_fused_loss(cls, data: dict) -> None:
        """Liger's fused linear cross-entropy reads ``lm_head.weight`` (the base weight): a LoRA adapter on the head
        would not train. (Axolotl 0.21's Cut Cross Entropy folds such adapters into its loss:
        :func:`cce_folds_lora_head`, checked when the model loads.)"""
        if data.get("liger_fused_linear_cross_entropy") and lora_targets_head(data.get("lora_target_modules")):
            _refuse(
                "a LoRA adapter on lm_head (`lora_target_modules`) with `liger_fused_linear_cross_entropy`: Liger's "
                "kernel reads lm_head.weight, the base weight without the adapter, so the cross-entropy would "
                "train without it while DEL and evaluation see it; train the head with "
                "`lora_modules_to_save: [lm_head]` instead, use Cut Cross Entropy (Axolotl's fork folds the adapter "
                "into its loss), or plain cross-entropy"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_fused_cross_entropy_under_deepspeed_zero3(cls, data: dict) -> None:
        """ZeRO-3 gathers the head's weight only inside the head's own forward, where DEL then reads its digit rows
        (del_plugin/core/capture.py); a fused cross-entropy kernel reads ``lm_head.weight`` without calling the head.
        """
        kernels = fused_cross_entropy(data)
        if kernels and zero_stage(data.get("deepspeed")) == 3:
            _refuse(
                f"{', '.join(f'`{k}`' for k in kernels)} with DeepSpeed ZeRO-3 (`deepspeed`, stage 3): ZeRO-3 "
                "partitions lm_head.weight and gathers it only inside the head's own forward, where DEL reads its "
                "digit rows, and the fused kernel reads the weight without calling the head. Under ZeRO-3 train with "
                "plain cross-entropy (remove the key), or keep the kernel and shard with FSDP2 (the fsdp_config of "
                "examples/*/paper-full-fsdp.yml, docs/distributed.md)"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_whole_head_criteria_under_deepspeed_zero3(cls, data: dict) -> None:
        """A criterion that prepares state from the whole head when the trainer is built (EMO's cost embedding)
        would find it partitioned: ZeRO-3 loads the model already split across the ranks."""
        criterion = _criterion(data)
        if criterion and CRITERIA[criterion].prepare is not None and zero_stage(data.get("deepspeed")) == 3:
            _refuse(
                f"`del_criterion: {criterion}` with DeepSpeed ZeRO-3 (`deepspeed`, stage 3): it copies the whole "
                "lm_head.weight when the trainer is built, and ZeRO-3 has partitioned it across the ranks by then. "
                "Train it with ZeRO-1 or -2 (deepspeed_configs/zero2.json), FSDP2 or one GPU, or use a digit "
                f"criterion under ZeRO-3 ({criteria_names(needs_full_logits=False)})"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_modes_other_than_sft(cls, data: dict) -> None:
        """DEL's trainer does supervised fine-tuning; other modes would silently run without it."""
        if data.get("rl") or data.get("reward_model") or data.get("process_reward_model"):
            kind = "rl: " + str(data.get("rl")) if data.get("rl") else "reward modelling"
            _refuse(f"DEL applies to supervised fine-tuning only, but this config trains with {kind}")
        if data.get("kd_trainer"):
            _refuse("DEL and knowledge distillation (`kd_trainer`) each need their own trainer; use one")
        if data.get("trainer_cls"):
            _refuse(f"`trainer_cls: {data['trainer_cls']}` would be replaced by DEL's trainer; remove it or the plugin")
        if (data.get("context_parallel_size") or 1) > 1 or (data.get("sequence_parallel_degree") or 1) > 1:
            _refuse("DEL does not support sequence/context parallelism; set context_parallel_size: 1")
        if data.get("orpo_alpha"):
            _refuse("DEL does not support ORPO (`orpo_alpha`)")

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def refuse_eval_settings_without_benchmarks(cls, data: dict) -> None:
        """``del_eval_limit``, ``del_eval_benchmark_dir`` or ``del_eval_max_new_tokens`` without
        ``del_eval_benchmarks`` would evaluate nothing."""
        keys = [k for k in EVAL_SETTING_KEYS if data.get(k) not in (None, False)]
        if keys and data.get("del_eval_benchmarks") is None:
            _refuse(
                f"{', '.join(f'`{k}`' for k in keys)} set without `del_eval_benchmarks`, so nothing would be "
                "evaluated; add `del_eval_benchmarks: all` (or a list of sets), or remove them"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def check_eval_benchmark_names(cls, data: dict) -> None:
        """``del_eval_benchmarks``: ``all`` or known set names (the closest one named for a typo)."""
        value = data.get("del_eval_benchmarks")
        if value is None:
            return
        if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
            _refuse(f"`del_eval_benchmarks` must be `all` or a list of set names, got {value!r}")
        try:
            resolve_benchmark_names(value)
        except ValueError as err:
            _refuse(f"`del_eval_benchmarks`: {err}")

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def check_eval_counts(cls, data: dict) -> None:
        """``del_eval_limit`` and ``del_eval_max_new_tokens`` are whole numbers >= 1."""
        bad = [
            f"`{key}` must be a whole number >= 1, got {value!r}"
            for key in ("del_eval_limit", "del_eval_max_new_tokens")
            if (value := data.get(key)) is not None
            and (isinstance(value, bool) or not isinstance(value, int) or value < 1)
        ]
        if bad:
            _refuse("; ".join(bad))

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def check_eval_sets_are_readable(cls, data: dict) -> None:
        """Every set ``del_eval_benchmarks`` names is found and read now, not after training: SimulEq and SAT from
        ``del_eval_benchmark_dir``."""
        names = _eval_names(data.get("del_eval_benchmarks"))
        if not names:
            return  # nothing asked, or names that check_eval_benchmark_names refuses
        from ..evaluation.benchmarks.sets import BENCHMARKS, load_benchmark, missing_benchmarks
        from ..evaluation.tasks import modified_set_error

        directory = data.get("del_eval_benchmark_dir")
        unreadable = []
        missing = missing_benchmarks(
            names,
            directory,
            dir_option="`del_eval_benchmark_dir`",
            run_instead=lambda available: f"`del_eval_benchmarks: [{', '.join(available)}]`",
        )
        if missing is not None:
            unreadable.append(f"`del_eval_benchmarks` names sets that are not here: {missing}")
        for name in names:
            try:
                if not BENCHMARKS[name].shipped:
                    loaded = load_benchmark(name, directory)
                    if not loaded.verified and not data.get("del_eval_allow_modified"):
                        fix = "set `del_eval_allow_modified: true` to score it"
                        raise modified_set_error(name, loaded.path, loaded.sha256, loaded.benchmark.sha256, fix)
            except (FileNotFoundError, ValueError) as err:
                if isinstance(err, FileNotFoundError) and missing is not None:
                    continue  # named with every other missing set above
                fix = (
                    str(err)
                    .replace("pass --benchmark-dir DIR", "set `del_eval_benchmark_dir: DIR`")
                    .replace("--benchmark-dir", "del_eval_benchmark_dir")
                )
                unreadable.append(f"`del_eval_benchmarks` names {name}: {fix}")
        if unreadable:
            _refuse(";\n".join(unreadable))
        if directory is not None and all(BENCHMARKS[n].shipped for n in names):
            LOG.warning(
                "del_plugin: `del_eval_benchmark_dir` is not used: `del_eval_benchmarks` names no set read from it "
                "(simuleq, sat)"
            )

    @model_validator(mode="before")
    @classmethod
    @_when_enabled
    def check_eval_extra_installed(cls, data: dict) -> None:
        """The evaluation's packages (``del-plugin[eval]``), checked before training rather than after it."""
        if data.get("del_eval_benchmarks") is None:
            return
        from ..evaluation.report import require_eval_extra

        try:
            require_eval_extra()
        except ImportError as err:
            _refuse(f"`del_eval_benchmarks`: {err}")

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

    # defined last, so that it wraps every validator above: pydantic stops at the first before-validator that
    # raises, and a user would otherwise fix one refusal per run
    @model_validator(mode="wrap")
    @classmethod
    def report_every_refusal_at_once(cls, data: Any, handler):
        """Every rule runs, and all their refusals are raised together, with the other errors of the validation
        (a field that is not a number, an unknown tokenizer)."""
        refusals: list[str] = []
        token = _REFUSALS.set(refusals)
        try:
            result = handler(data)
        except ValidationError as err:
            if not refusals:
                raise
            raise _refusal_error(cls.__name__, refusals, err) from None
        finally:
            _REFUSALS.reset(token)
        if refusals:
            raise _refusal_error(cls.__name__, refusals, None)
        return result
