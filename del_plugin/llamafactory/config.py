"""A LLaMA-Factory YAML with DEL's keys: split into LLaMA-Factory's arguments and DEL's settings, with every problem
refused at once, before LLaMA-Factory parses its arguments or loads a model.

DEL's own keys follow the rules every host applies (:mod:`del_plugin.hf.config_keys`); LLaMA-Factory's options are
read against the table of what works with what (:mod:`del_plugin.core.compatibility`). No LLaMA-Factory import
here: the rules run wherever the plugin is installed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..core.compatibility import RULES, lora_targets_head, zero_stage
from ..core.criteria import CRITERIA
from ..hf.config_keys import (
    TRAINING_KEYS,
    configured_criterion,
    criterion_settings_problem,
    other_criteria_warnings,
    unknown_keys_problem,
    yaml_string_problems,
)
from ..hf.settings import DELSettings

__all__ = [
    "LOGGER_NAME",
    "SUPPORTED_LLAMAFACTORY",
    "TESTED_LLAMAFACTORY",
    "DELConfigError",
    "check_llamafactory_version",
    "config_problems",
    "read_config",
]

# a child of LLaMA-Factory's library logger, so that its console handler and verbosity apply to DEL's lines
LOGGER_NAME = "llamafactory.del_plugin"
LOG = logging.getLogger(LOGGER_NAME)
SUPPORTED_LLAMAFACTORY = ">=0.9.5,<0.9.6"
TESTED_LLAMAFACTORY = "0.9.5"
# LLaMA-Factory's switches that train with a trainer or in processes of their own, where DEL's trainer is not built
OTHER_TRAINERS = {
    "use_ray": "Ray runs the training in worker processes of its own",
    "use_mca": "Megatron-Core (mcore_adapter) trains with its own trainer",
    "use_kt": "KTransformers trains with its own trainer",
    "use_hyper_parallel": "hyper_parallel trains with its own trainer",
}


class DELConfigError(ValueError):
    """Every problem of a config, one a line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"del_plugin: {len(problems)} problem(s) in the config, nothing was loaded:\n{lines}")


def _host_problems(config: Mapping[str, Any]) -> list[str]:
    """LLaMA-Factory's options that DEL cannot train beside, each with its fix."""
    problems = []
    stage = config.get("stage", "sft")
    if stage != "sft":
        problems.append(f"`stage: {stage}`: DEL applies to supervised fine-tuning only; set `stage: sft`")
    for key, why in OTHER_TRAINERS.items():
        if config.get(key):
            problems.append(f"`{key}: true`: {why}, not DEL's; remove it to train with DEL")
    for key in RULES["own_loss_vs_llamafactory"].keys:
        if config.get(key):
            problems.append(RULES["own_loss_vs_llamafactory"].message(key=key))
    criterion = configured_criterion(config)
    liger = bool(config.get("enable_liger_kernel"))
    if criterion is not None and CRITERIA[criterion].needs_full_logits:
        if config.get("label_smoothing_factor"):
            problems.append(RULES["full_logits_vs_label_smoothing"].message(criterion=criterion))
        if liger:
            problems.append(
                RULES["full_logits_vs_kernels"].message(criterion=criterion, kernels=["enable_liger_kernel"])
            )
    targets = [t.strip() for t in str(config.get("lora_target") or "").split(",")]
    if liger and config.get("finetuning_type", "lora") == "lora" and lora_targets_head(targets):
        problems.append(RULES["lora_head_vs_llamafactory_liger"].message())
    if zero_stage(config.get("deepspeed")) == 3:
        if liger:
            problems.append(RULES["fused_kernel_vs_zero3"].message(kernels=["enable_liger_kernel"]))
        if criterion is not None and CRITERIA[criterion].prepare is not None:
            problems.append(RULES["whole_head_criterion_vs_zero3"].message(criterion=criterion))
    return problems


def config_problems(config: Mapping[str, Any]) -> list[str]:
    """Every problem of a LLaMA-Factory config with DEL's keys: DEL's own keys (misspelled, YAML strings, out of
    their bounds), then LLaMA-Factory's options that cannot combine with DEL. Warnings (a key of another criterion)
    go to the log."""
    problems = []
    evaluation = sorted(k for k in config if str(k).startswith("del_eval_"))
    if evaluation:
        problems.append(
            f"{', '.join(f'`{k}`' for k in evaluation)}: the evaluation after training is the Axolotl plugin's; "
            "with LLaMA-Factory, score the output folder afterwards: `del-eval run --model OUTPUT_DIR` "
            "(docs/evaluation.md)"
        )
    del_keys = {k: v for k, v in config.items() if str(k).startswith("del_") and k not in evaluation}
    unknown = unknown_keys_problem(del_keys, TRAINING_KEYS)
    problems += [unknown] if unknown else []
    problems += yaml_string_problems(config)
    settings = criterion_settings_problem(config)
    problems += [settings] if settings else []
    problems += _host_problems(config)
    for warning in other_criteria_warnings(config):
        LOG.warning("%s", warning)
    return problems


def read_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], DELSettings]:
    """(LLaMA-Factory's arguments: the config less DEL's keys, DEL's settings); :class:`DELConfigError` with every
    problem otherwise."""
    problems = config_problems(config)
    if problems:
        raise DELConfigError(problems)
    host_args = {k: v for k, v in config.items() if not str(k).startswith("del_")}
    return host_args, DELSettings.from_config(config)


def check_llamafactory_version(installed: str) -> str:
    """Refuse a LLaMA-Factory outside :data:`SUPPORTED_LLAMAFACTORY`: DEL replaces its SFT trainer by name in
    ``llamafactory.train.sft.workflow`` and subclasses ``CustomSeq2SeqTrainer`` as 0.9.5 writes them."""
    from packaging.specifiers import SpecifierSet

    if installed in SpecifierSet(SUPPORTED_LLAMAFACTORY):
        return installed
    raise RuntimeError(
        f"del_plugin needs LLaMA-Factory {SUPPORTED_LLAMAFACTORY} (tested with {TESTED_LLAMAFACTORY}), but "
        f"{installed} is installed: DEL builds LLaMA-Factory's SFT trainer as that release writes it; install "
        f"llamafactory=={TESTED_LLAMAFACTORY} (docs/hosts.md, LLaMA-Factory)"
    )
