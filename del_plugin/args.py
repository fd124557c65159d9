"""Config keys of the DEL plugin, validated with the rest of the Axolotl config (before any model is loaded)."""

from __future__ import annotations

import json
import re
from typing import Any

from axolotl.utils.logging import get_logger
from pydantic import BaseModel, Field, model_validator

from .core.criteria import TOKEN_CRITERIA, Criterion

LOG = get_logger(__name__)

PLUGIN_NAME = "del_plugin.DELPlugin"


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
        return re.fullmatch(targets, "lm_head") is not None or targets == "lm_head"
    return any(str(t) == "lm_head" or str(t).endswith(".lm_head") for t in targets or [])


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
        return int(stage) if isinstance(stage, (int, float, str)) and str(stage).isdigit() else None
    return None


class DELArgs(BaseModel):
    """Input args for the Digit Entropy Loss."""

    del_alpha: float = Field(
        default=0.1,
        ge=0.0,
        json_schema_extra={
            "description": "Weight of the digit loss: L = CE + del_alpha * L_num, with L_num the mean over all "
            "digit targets of an optimizer step (all micro-batches and GPUs). 0 trains with cross-entropy alone "
            "and still logs the digit metrics. To reproduce the reference scripts, see the README's conversion."
        },
    )
    del_place_weighting: bool = Field(
        default=True,
        json_schema_extra={
            "description": "Weight each digit by its place in the number (u = slope*(i+1) for integer place i, "
            "base**(i-1) for decimal places). false: every digit weighs 1."
        },
    )
    del_integer_slope: float = Field(
        default=2.0,
        gt=0.0,
        json_schema_extra={"description": "Slope of the integer-place weight u = slope*(i+1) (paper: 2)."},
    )
    del_decimal_base: float = Field(
        default=1.02,
        gt=0.0,
        json_schema_extra={"description": "Base of the decimal-place weight u = base**(i-1) (paper: 1.02)."},
    )
    del_criterion: Criterion = Field(
        default="del",
        json_schema_extra={
            "description": "Training criterion (the DEL paper's ablation, see docs/criteria.md). Digit criteria "
            "(ntl_was, ntl_mse, dist2, del, del_dist): L = CE + del_alpha * mean over digit targets. mixce and emo "
            "replace cross-entropy: per token (1 - del_alpha) * NLL + del_alpha * criterion (del_alpha: 1 is the "
            "published criterion; must be set explicitly, in [0, 1]). mle: cross-entropy alone (del_alpha unused); "
            "every criterion logs the same digit metrics."
        },
    )
    del_mixce_eta: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        json_schema_extra={
            "description": "MixCE mixing ratio eta in [0, 1]: eta * NLL + (1 - eta) * sg[exp(-NLL)] * NLL "
            "(del_criterion: mixce only; 1 is plain cross-entropy)."
        },
    )
    del_dist2_tau: float = Field(
        default=1.0,
        gt=0.0,
        json_schema_extra={
            "description": "DIST2 temperature tau > 0 of the target q = softmax_k(-(y - k)^2 / tau) "
            "(del_criterion: dist2 only; paper: 1)."
        },
    )

    @model_validator(mode="before")
    @classmethod
    def check_criterion_keys(cls, data: Any) -> Any:
        """Criterion-specific rules that a field's own bounds cannot express."""
        if not isinstance(data, dict) or not plugin_enabled(data):
            return data
        criterion = data.get("del_criterion") or "del"
        problems = []
        if criterion in TOKEN_CRITERIA:
            alpha = data.get("del_alpha")
            if alpha is None:
                problems.append(
                    f"`del_criterion: {criterion}` replaces cross-entropy and reads `del_alpha` as the interpolation "
                    f"(1 - del_alpha) * CE + del_alpha * {criterion}; set it explicitly (`del_alpha: 1.0` trains "
                    f"with {criterion} as published) instead of inheriting DEL's default"
                )
            elif isinstance(alpha, (int, float)) and not 0.0 <= float(alpha) <= 1.0:
                problems.append(
                    f"`del_alpha: {alpha}` is outside [0, 1]; with `del_criterion: {criterion}` it interpolates "
                    f"(1 - del_alpha) * CE + del_alpha * {criterion}"
                )
            if data.get("label_smoothing_factor"):
                problems.append(
                    f"`label_smoothing_factor` and `del_criterion: {criterion}` both replace the cross-entropy; "
                    "remove one"
                )
            for key in ("use_dft", "use_eaft"):
                if data.get(key):
                    problems.append(
                        f"`{key}: true` installs its own loss function, as `del_criterion: {criterion}` does; "
                        "use one"
                    )
        if problems:
            raise ValueError(f"{PLUGIN_NAME}: " + "; ".join(problems) + ".")
        for key, owner in (("del_mixce_eta", "mixce"), ("del_dist2_tau", "dist2")):
            if data.get(key) is not None and criterion != owner:
                LOG.warning("del_plugin: `%s` only applies to `del_criterion: %s`; it is ignored with `%s`",
                            key, owner, criterion)
        if criterion == "mle" and data.get("del_alpha") not in (None, 0, 0.0):
            LOG.warning("del_plugin: `del_criterion: mle` trains with cross-entropy alone; `del_alpha` is ignored")
        return data

    @model_validator(mode="before")
    @classmethod
    def check_compatible_with_del(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not plugin_enabled(data):
            return data
        problems = []
        criterion = data.get("del_criterion") or "del"
        fused = fused_cross_entropy(data)
        if criterion in TOKEN_CRITERIA:
            for key in fused + [k for k in ("liger_cross_entropy", "chunked_cross_entropy") if data.get(k)]:
                problems.append(
                    f"`del_criterion: {criterion}` replaces the cross-entropy with a loss on the full softmax over "
                    f"the vocabulary, so `{key}` would not run (and a fused kernel's memory saving would be lost); "
                    "use a digit criterion (del, del_dist, ntl_was, ntl_mse, dist2, mle) with it, or remove it"
                )
        if fused and lora_targets_head(data.get("lora_target_modules")):
            problems.append(
                f"a LoRA adapter on lm_head (`lora_target_modules`) with {' and '.join(f'`{k}`' for k in fused)}: "
                "the fused kernel reads lm_head.weight, which is the base weight without the adapter, so the "
                "cross-entropy would train without it while DEL and evaluation see it; train the head with "
                "`lora_modules_to_save: [lm_head]` instead, or use plain cross-entropy"
            )
        if zero_stage(data.get("deepspeed")) == 3:
            problems.append(
                "DeepSpeed ZeRO-3 partitions the LM head weight, and DEL reads ten of its rows in the forward pass; "
                "use ZeRO-2 (`deepspeed: deepspeed_configs/zero2.json`) or FSDP"
            )
        if data.get("rl") or data.get("reward_model") or data.get("process_reward_model"):
            kind = "rl: " + str(data.get("rl")) if data.get("rl") else "reward modelling"
            problems.append(f"DEL applies to supervised fine-tuning only, but this config trains with {kind}")
        if data.get("kd_trainer"):
            problems.append("DEL and knowledge distillation (`kd_trainer`) each need their own trainer; use one")
        if data.get("trainer_cls"):
            problems.append(
                f"`trainer_cls: {data['trainer_cls']}` would be replaced by DEL's trainer; remove it or the plugin"
            )
        if (data.get("context_parallel_size") or 1) > 1 or (data.get("sequence_parallel_degree") or 1) > 1:
            problems.append("DEL does not support sequence/context parallelism; set context_parallel_size: 1")
        if data.get("orpo_alpha"):
            problems.append("DEL does not support ORPO (`orpo_alpha`)")
        if problems:
            raise ValueError(f"{PLUGIN_NAME}: " + "; ".join(problems) + ".")
        return data

    @model_validator(mode="after")
    def check_model_architecture(self):
        """Refuse, before the model loads, an architecture whose digit logits are not the head on the final norm."""
        if not plugin_enabled(self):
            return self
        source = getattr(self, "base_model_config", None) or getattr(self, "base_model", None)
        if source:
            from .source_checks import check_model_source

            check_model_source(
                str(source),
                trust_remote_code=bool(getattr(self, "trust_remote_code", False)),
                revision=getattr(self, "revision_of_model", None),
            )
        return self

    @model_validator(mode="after")
    def check_tokenizer_digits(self):
        """Refuse a tokenizer without single-digit tokens now, not after the model is loaded."""
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
