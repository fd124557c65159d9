"""``del-check CONFIG``: check an Axolotl config that uses the DEL plugin without a GPU and without the network.

What it checks, in order, and stops at the first failure of the first two:

1. the config: Axolotl's own validation of the whole config, with the plugin's keys and rules (bounds, a misspelled
   ``del_`` key, criteria beside kernels, a LoRA head beside Liger's fused kernel, a fused kernel under ZeRO-3,
   training modes), for the hardware the config is meant for (``--gpus``, ``--compute-capability``; the local GPU
   when there is one);
2. the tokenizer's digit layout, read from the tokenizer files (one token per digit, or complete 1-3-digit number
   tokens), and the model type from the model's ``config.json`` (in DEL's architecture table, or measured at the
   first step), from a local folder: ``--local HUB_ID=FOLDER`` stands a folder in for a hub id the config names
   (a model already in the Hugging Face cache is read from there);
3. the kernels the config switches on: Axolotl's own support table for the model type (Cut Cross Entropy, Liger),
   and for a LoRA adapter on ``lm_head`` beside Cut Cross Entropy, whether the installed fork folds it in.

Exit status: 0 everything checked and passed; 1 a check failed (the message names the key and the fix); 2 nothing
failed but something could not be checked here (a hub id with no local folder); the report says which.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

import yaml

# before anything imports huggingface_hub or transformers: read local files and the cache only
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")

SOURCE_KEYS = ("base_model", "base_model_config", "tokenizer_config")
OK, FAILED, SKIPPED = "ok", "FAILED", "not checked"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="del-check",
        description="Check an Axolotl config that uses the DEL plugin, offline: its keys (Axolotl's validation), "
        "the tokenizer's digit layout and the model type (from local folders), and the loss kernels it switches on.",
        epilog="Exit status: 0 all checked and passed, 1 a check failed, 2 passed but something could not be checked.",
    )
    parser.add_argument("config", type=Path, help="the Axolotl YAML")
    parser.add_argument(
        "--local",
        action="append",
        default=[],
        metavar="HUB_ID=FOLDER",
        help="read the model or tokenizer the config names as HUB_ID from FOLDER (config.json, tokenizer files); "
        "repeatable",
    )
    parser.add_argument(
        "--gpus", type=int, default=None, help="GPUs the run is for (default: the local count, else 1; 8 for FSDP)"
    )
    parser.add_argument(
        "--compute-capability",
        default="sm_90",
        help="the training GPUs' compute capability when this machine has none (default sm_90: bf16, tf32)",
    )
    args = parser.parse_args(argv)
    args.mapping = {}
    for item in args.local:
        hub_id, sep, folder = item.partition("=")
        if not sep or not hub_id or not folder:
            parser.error(f"--local {item!r}: expected HUB_ID=FOLDER")
        if not Path(folder).is_dir():
            parser.error(f"--local {item!r}: {folder} is not a folder")
        args.mapping[hub_id] = str(Path(folder).resolve())
    return args


def hardware(args: argparse.Namespace, cfg: dict) -> tuple[dict, dict, str]:
    """Axolotl's (capabilities, env_capabilities) and a sentence saying what they describe."""
    import torch

    env = {"torch_version": torch.__version__.split("+")[0]}
    if torch.cuda.is_available():
        from axolotl.cli.config import gpu_capabilities

        capabilities, env = gpu_capabilities()
        if args.gpus:
            capabilities["n_gpu"] = args.gpus
        gpu = capabilities["compute_capability"]
        return capabilities, env, f"this machine's GPU ({gpu}), {capabilities['n_gpu']} GPU(s)"
    gpus = args.gpus or (8 if cfg.get("fsdp_config") or cfg.get("fsdp") else 1)
    major = int(args.compute_capability.removeprefix("sm_")[:-1] or 0)
    capabilities = {
        "bf16": major >= 8,
        "fp8": major >= 9,
        "tf32": major >= 8,
        "n_gpu": gpus,
        "compute_capability": args.compute_capability,
    }
    described = f"{gpus} GPU(s) of compute capability {args.compute_capability} (--gpus, --compute-capability)"
    return capabilities, env, described


def reasons(err: Exception) -> str:
    """A validation error's messages, without pydantic's echo of the whole input."""
    from pydantic import ValidationError

    messages = (
        [e["msg"].removeprefix("Value error, ") for e in err.errors()]
        if isinstance(err, ValidationError)
        else [str(err)]
    )
    return "\n".join("  " + line for message in messages for line in message.splitlines())


class _Postponed(logging.Filter):
    """Drops the plugin's "checked again when the trainer is built": here the report says what was not checked."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "it is checked again when the trainer is built" not in record.getMessage()


class Report:
    def __init__(self):
        self.lines: list[tuple[str, str, str]] = []

    def add(self, status: str, what: str, detail: str) -> None:
        self.lines.append((status, what, detail))
        print(f"{status:<12} {what}: {detail}", flush=True)

    def status(self) -> int:
        statuses = {status for status, _, _ in self.lines}
        return 1 if FAILED in statuses else 2 if SKIPPED in statuses else 0


def check(args: argparse.Namespace) -> Report:
    from .args import PLUGIN_NAME, cce_folds_lora_head, fused_cross_entropy, lora_targets_head, plugin_enabled

    report = Report()
    with open(args.config, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle) or {}
    if not isinstance(raw, dict):
        report.add(FAILED, "config", f"{args.config} is not a YAML mapping")
        return report
    for key in SOURCE_KEYS:
        if raw.get(key) in args.mapping:
            raw[key] = args.mapping[raw[key]]
    if not plugin_enabled(raw) and not any(str(k).startswith("del_") for k in raw):
        report.add(FAILED, "plugin", f"{args.config} does not list {PLUGIN_NAME} in `plugins`; DEL would not run")
        return report

    # 1. the keys, by Axolotl's own validation (the plugin's validators run inside it)
    from axolotl.utils.config import prepare_plugins, validate_config
    from axolotl.utils.dict import DictDefault

    capabilities, env, described = hardware(args, raw)
    cfg = DictDefault(raw)
    try:
        # as Axolotl 0.21 does for an installed plugin (entry point), so that del_ keys without the plugin line are
        # refused here too
        from axolotl.integrations.base import PluginManager

        PluginManager.get_instance().register(PLUGIN_NAME)
        prepare_plugins(cfg)
        cfg = validate_config(cfg, capabilities=capabilities, env_capabilities=env)
    except Exception as err:  # noqa: BLE001 - pydantic's ValidationError, ValueError, ImportError: all a refusal
        report.add(FAILED, "validation", f"Axolotl's validation for {described} refused the config:\n{reasons(err)}")
        return report
    from ..hf.settings import DELSettings

    settings = DELSettings.from_config(cfg)
    report.add(
        OK,
        "validation",
        f"Axolotl's validation for {described} passed; DEL: criterion {settings.criterion}, del_alpha "
        f"{settings.alpha}, place weighting {'on' if settings.weighting.enabled else 'off'}",
    )

    # 2. the tokenizer and the model type, from what validation loaded (cached), or why not
    from .source_checks import check_model_source, check_tokenizer_source

    trust, revision = bool(cfg.trust_remote_code), cfg.revision_of_model
    hint = "not a local folder, nor in the Hugging Face cache; pass --local {source}=FOLDER"
    tokenizer_source = str(cfg.tokenizer_config or cfg.base_model)
    vocab = check_tokenizer_source(
        tokenizer_source, use_fast=cfg.tokenizer_use_fast, trust_remote_code=trust, revision=revision
    )
    if vocab is None:
        report.add(SKIPPED, "tokenizer", f"{tokenizer_source}: " + hint.format(source=tokenizer_source))
    else:
        point = "" if vocab.decimal_point_id is not None else "; no '.' token, so no decimal places"
        report.add(OK, "tokenizer", f"{tokenizer_source}: {vocab.describe()}{point}")
    kernels = tuple(fused_cross_entropy(cfg))
    model_source = str(cfg.base_model_config or cfg.base_model)
    model_type = check_model_source(model_source, trust_remote_code=trust, revision=revision, kernels=kernels)
    if model_type is None:
        report.add(SKIPPED, "model type", f"{model_source}: " + hint.format(source=model_source))
    else:
        from ..core.architectures import ARCHITECTURES

        known = (
            "in DEL's architecture table (its digit logits are read exactly)"
            if model_type in ARCHITECTURES
            else "outside DEL's architecture table: its digit logits are measured against the model's own at the "
            "first step, and the run stops there if they differ (docs/architectures.md)"
        )
        report.add(OK, "model type", f"{model_type!r}, {known}")

    # 3. the loss kernels
    check_kernels(report, cfg, model_type, cce_folds_lora_head, lora_targets_head)
    return report


def check_kernels(report: Report, cfg, model_type, cce_folds_lora_head, lora_targets_head) -> None:
    from axolotl.integrations.liger.plugin import LIGER_FLAGS
    from axolotl.model_support import check_capability, get_model_support

    cce = any("cut_cross_entropy" in str(p) for p in cfg.plugins or []) and cfg.cut_cross_entropy is not False
    liger = [flag for flag in LIGER_FLAGS if cfg.get(flag)]
    used = (["cut_cross_entropy"] if cce else []) + liger
    if not used:
        report.add(OK, "kernels", "plain cross-entropy (no Cut Cross Entropy, no Liger)")
        return
    if model_type is not None:
        support = get_model_support(model_type)
        try:
            if cce:
                check_capability(support, "cut_cross_entropy", model_type)
            if liger:
                check_capability(support, "liger", model_type, feature="Liger")
        except ValueError as err:
            report.add(FAILED, "kernels", f"{', '.join(used)}: {err}")
            return
    head_lora = cfg.adapter in ("lora", "qlora") and lora_targets_head(cfg.lora_target_modules)
    detail = f"{', '.join(used)}" + (f" with model_type {model_type!r}" if model_type else "")
    if cce and head_lora:
        folds = cce_folds_lora_head()
        if folds is None:
            report.add(
                SKIPPED,
                "kernels",
                f"{detail}; a LoRA adapter on lm_head needs Axolotl's Cut Cross Entropy fork with "
                "apply_lce_lm_head, which is not installed here (the training machine needs it; docs/examples.md)",
            )
            return
        if folds is False:
            report.add(FAILED, "kernels", f"{detail}; the installed fork drops a LoRA adapter on lm_head")
            return
    report.add(OK, "kernels", detail)


def main(argv: list[str] | None = None) -> int:
    from .logs import LOGGER_NAME

    args = parse_args(argv)
    postponed = _Postponed()
    logging.getLogger(LOGGER_NAME).addFilter(postponed)
    try:
        report = check(args)
    finally:
        logging.getLogger(LOGGER_NAME).removeFilter(postponed)
    verdict = {0: "passed", 1: "failed", 2: "passed what could be checked here"}[report.status()]
    print(f"del-check {args.config}: {verdict}", flush=True)
    return report.status()


if __name__ == "__main__":
    sys.exit(main())
