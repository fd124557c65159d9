"""The plugin's rules on a raw Axolotl config (a dict), each a function that raises ``ValueError`` naming the key and
the fix, or passes. :class:`~del_plugin.axolotl.args.DELArgs` runs them, in the order of its ``RULES``, before the
fields are validated; the combinations of kernels, criteria, LoRA targets and engines are refused with the wording of
:mod:`del_plugin.core.compatibility`.
"""

from __future__ import annotations

from typing import Any

from ..core.compatibility import (
    RULES,
    cross_entropy_kernels,
    fused_cross_entropy,
    kernels_dropping_lora_head,
    lora_targets_head,
    zero_stage,
)
from ..core.criteria import CRITERIA
from ..hf.config_keys import (
    configured_criterion,
    criterion_settings_problem,
    other_criteria_warnings,
    yaml_string_problems,
)
from .logs import LOG

__all__ = ["COMPATIBILITY_RULES", "PLUGIN_NAME", "plugin_enabled", "refuse"]

PLUGIN_NAME = "del_plugin.DELPlugin"


def plugin_enabled(cfg: Any) -> bool:
    """Whether this config lists the plugin. The PluginManager is a process-wide singleton that keeps every plugin
    it ever registered, so each hook must check the config it is given."""
    plugins = cfg.get("plugins") if hasattr(cfg, "get") else getattr(cfg, "plugins", None)
    return any(str(p).replace(":", ".") == PLUGIN_NAME for p in plugins or [])


def refuse(problem: str) -> None:
    raise ValueError(f"{PLUGIN_NAME}: {problem}.")


# The rules on DEL's own keys are del_plugin.hf.config_keys' (LLaMA-Factory's entry point applies the same ones).
def refuse_numbers_yaml_reads_as_strings(data: dict) -> None:
    """``del_alpha: 3e-2`` is a string in YAML 1.1 (:func:`~del_plugin.hf.config_keys.yaml_string_problems`)."""
    for problem in yaml_string_problems(data):
        refuse(problem)


def check_criterion_settings(data: dict) -> None:
    """The criterion, its weight and parameters and the place weights, with the reason for each bound."""
    problem = criterion_settings_problem(data)
    if problem is not None:
        refuse(problem)


def warn_keys_of_other_criteria(data: dict) -> None:
    """A criterion's own key set beside another criterion is not used: said, not silently ignored."""
    for warning in other_criteria_warnings(data):
        LOG.warning("%s", warning)


def refuse_other_losses_with_full_logit_criteria(data: dict) -> None:
    """A criterion that replaces the cross-entropy from the full logits: another replacement, or a kernel that
    never builds the logits, is refused."""
    criterion = configured_criterion(data)
    if criterion is None or not CRITERIA[criterion].needs_full_logits:
        return
    if data.get("label_smoothing_factor"):
        refuse(RULES["full_logits_vs_label_smoothing"].message(criterion=criterion))
    for key in ("use_dft", "use_eaft"):
        if data.get(key):
            refuse(RULES["full_logits_vs_own_loss"].message(key=key, criterion=criterion))
    kernels = cross_entropy_kernels(data)
    if kernels:
        refuse(RULES["full_logits_vs_kernels"].message(criterion=criterion, kernels=kernels))


def refuse_lora_head_with_liger_fused_loss(data: dict) -> None:
    """Liger's fused linear cross-entropy reads ``lm_head.weight`` (the base weight): a LoRA adapter on the head
    would not train. (Axolotl 0.21's Cut Cross Entropy folds such adapters into its loss:
    :func:`~del_plugin.core.compatibility.cce_folds_lora_head`, checked when the model loads.)"""
    if kernels_dropping_lora_head(data) and lora_targets_head(data.get("lora_target_modules")):
        refuse(RULES["lora_head_vs_liger_fused"].message())


def refuse_fused_cross_entropy_under_deepspeed_zero3(data: dict) -> None:
    """ZeRO-3 gathers the head's weight only inside the head's own forward, where DEL then reads its digit rows
    (del_plugin/core/capture.py); a fused cross-entropy kernel reads ``lm_head.weight`` without calling the head."""
    kernels = fused_cross_entropy(data)
    if kernels and zero_stage(data.get("deepspeed")) == 3:
        refuse(RULES["fused_kernel_vs_zero3"].message(kernels=kernels))


def refuse_whole_head_criteria_under_deepspeed_zero3(data: dict) -> None:
    """A criterion that prepares state from the whole head when the trainer is built (EMO's cost embedding)
    would find it partitioned: ZeRO-3 loads the model already split across the ranks."""
    criterion = configured_criterion(data)
    if criterion and CRITERIA[criterion].prepare is not None and zero_stage(data.get("deepspeed")) == 3:
        refuse(RULES["whole_head_criterion_vs_zero3"].message(criterion=criterion))


def refuse_modes_other_than_sft(data: dict) -> None:
    """DEL's trainer does supervised fine-tuning; other modes would silently run without it."""
    if data.get("rl") or data.get("reward_model") or data.get("process_reward_model"):
        kind = "rl: " + str(data.get("rl")) if data.get("rl") else "reward modelling"
        refuse(f"DEL applies to supervised fine-tuning only, but this config trains with {kind}")
    if data.get("kd_trainer"):
        refuse("DEL and knowledge distillation (`kd_trainer`) each need their own trainer; use one")
    if data.get("trainer_cls"):
        refuse(f"`trainer_cls: {data['trainer_cls']}` would be replaced by DEL's trainer; remove it or the plugin")
    if (data.get("context_parallel_size") or 1) > 1 or (data.get("sequence_parallel_degree") or 1) > 1:
        refuse("DEL does not support sequence/context parallelism; set context_parallel_size: 1")
    if data.get("orpo_alpha"):
        refuse("DEL does not support ORPO (`orpo_alpha`)")


# the rules of what works with what (del_plugin.core.compatibility), as Axolotl's keys switch them on
COMPATIBILITY_RULES = (
    refuse_other_losses_with_full_logit_criteria,
    refuse_lora_head_with_liger_fused_loss,
    refuse_fused_cross_entropy_under_deepspeed_zero3,
    refuse_whole_head_criteria_under_deepspeed_zero3,
)
