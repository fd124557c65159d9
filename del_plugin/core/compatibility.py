"""What works with what: the loss kernels, criteria, LoRA targets and engines DEL runs beside, and every rule that
refuses a combination of them, each with the key it names and its fix.

DEL reads its digit logits from the final hidden states, so it runs beside every cross-entropy kernel; what does not
combine is a kernel with a criterion that needs the full ``[B, T, V]`` logits, a kernel that reads the base
``lm_head.weight`` with a LoRA adapter on the head, and a kernel or criterion that reads the whole head under an
engine that partitions it (DeepSpeed ZeRO-3). Each :class:`Rule` below is written once and read by every host that
applies it: the Axolotl validator (:mod:`del_plugin.axolotl.config_rules`), ``del-check``, the Axolotl plugin's
model-load check, the TRL host (:func:`del_plugin.hf.trl.check_sft_loss`), the trainer's runtime error and the
capture's (:func:`del_plugin.core.capture_errors.refuse_fused_kernel`: what a fused kernel skipped, found while
training).

Pure data and small functions: no host library (Axolotl, transformers, TRL) is imported here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .criteria import criteria_names

__all__ = [
    "ENGINES",
    "KERNELS",
    "RULES",
    "Kernel",
    "Rule",
    "cce_enabled",
    "cce_folds_lora_head",
    "cross_entropy_kernels",
    "fused_cross_entropy",
    "kernels_dropping_lora_head",
    "logits_missing_message",
    "lora_targets_head",
    "switched_on",
    "zero_stage",
]


@dataclass(frozen=True)
class Kernel:
    """A cross-entropy kernel an Axolotl config switches on by ``key``. ``fused``: it never builds the logits and
    reads ``lm_head.weight`` without calling the head; ``folds_lora_head``: it trains a LoRA adapter on the head (its
    fork hands the patched forward the head module), so the adapter is not lost beside it."""

    key: str
    fused: bool
    folds_lora_head: bool


KERNELS: dict[str, Kernel] = {
    k.key: k
    for k in (
        Kernel("liger_fused_linear_cross_entropy", fused=True, folds_lora_head=False),
        Kernel("cut_cross_entropy", fused=True, folds_lora_head=True),
        Kernel("liger_cross_entropy", fused=False, folds_lora_head=True),
        Kernel("chunked_cross_entropy", fused=False, folds_lora_head=True),
    )
}
# the engines whose sharding a rule names: DeepSpeed ZeRO-3 gathers lm_head.weight only inside the head's forward
ENGINES = {"zero3": "DeepSpeed ZeRO-3 (`deepspeed`, stage 3)"}


def cce_enabled(data: Any) -> bool:
    """Whether a config switches Cut Cross Entropy on: its plugin listed and ``cut_cross_entropy`` not turned off
    (Axolotl's plugin reads the key as a truth value, default true)."""
    plugins = [str(p) for p in data.get("plugins") or []]
    return any("cut_cross_entropy" in p for p in plugins) and bool(data.get("cut_cross_entropy", True))


def switched_on(data: Any) -> list[str]:
    """The keys of :data:`KERNELS` a config switches on, in the table's order."""
    return [key for key in KERNELS if (cce_enabled(data) if key == "cut_cross_entropy" else data.get(key))]


def fused_cross_entropy(data: Any) -> list[str]:
    """The config keys that switch on a cross-entropy kernel which never materialises the logits."""
    return [key for key in switched_on(data) if KERNELS[key].fused]


def cross_entropy_kernels(data: Any) -> list[str]:
    """The config keys that replace the plain cross-entropy with a kernel of their own: the fused ones, then those
    that build the logits but compute the loss their own way."""
    return fused_cross_entropy(data) + [key for key in switched_on(data) if not KERNELS[key].fused]


def kernels_dropping_lora_head(data: Any) -> list[str]:
    """The config keys that switch on a kernel which reads the base ``lm_head.weight``, so that a LoRA adapter on the
    head would not train through its loss."""
    return [key for key in switched_on(data) if not KERNELS[key].folds_lora_head]


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
    plugin then refuses the run with its install line). The fork is imported only when asked."""
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


def _named(keys) -> str:
    return ", ".join(f"`{k}`" for k in keys)


@dataclass(frozen=True)
class Rule:
    """One refused combination: ``keys`` are the config keys (or host arguments) its refusal names (at least one of
    them in each refusal), ``hosts`` the places that apply it, ``problem`` and ``fix`` the two halves of the message
    (``str.format`` templates of the facts a host passes: ``criterion``, ``kernels``, ``key``, ``loss_type``), joined
    by ``joiner``. ``others`` (the criteria that work beside a kernel) and each engine of :data:`ENGINES`
    (``zero3``) are filled in."""

    name: str
    keys: tuple[str, ...]
    hosts: tuple[str, ...]
    problem: str
    fix: str
    joiner: str = "; "

    def message(self, **facts: Any) -> str:
        if "kernels" in facts:
            facts["kernels"] = _named(facts["kernels"])
        facts.setdefault("others", criteria_names(needs_full_logits=False))
        for engine, words in ENGINES.items():
            facts.setdefault(engine, words)
        return self.problem.format(**facts) + self.joiner + self.fix.format(**facts)


RULES: dict[str, Rule] = {
    r.name: r
    for r in (
        # a criterion that replaces the cross-entropy from the full logits, beside another replacement or a kernel
        Rule(
            "full_logits_vs_label_smoothing",
            ("label_smoothing_factor", "del_criterion"),
            ("axolotl",),
            "`label_smoothing_factor` and `del_criterion: {criterion}` both replace the cross-entropy",
            "remove one",
        ),
        Rule(
            "full_logits_vs_own_loss",
            ("use_dft", "use_eaft", "del_criterion"),
            ("axolotl",),
            "`{key}: true` installs its own loss function, as `del_criterion: {criterion}` does",
            "use one",
        ),
        Rule(
            "full_logits_vs_kernels",
            (*KERNELS, "del_criterion"),
            ("axolotl",),
            "`del_criterion: {criterion}` replaces the cross-entropy with a loss on the full softmax over the "
            "vocabulary, so {kernels} would not run (and a fused kernel's memory saving would be lost)",
            "use a criterion that works beside it ({others}), or remove it",
        ),
        Rule(
            "full_logits_vs_trl_liger",
            ("use_liger_kernel", "loss_type"),
            ("trl",),
            "del_plugin: del_criterion `{criterion}` computes its loss from the full logits, which Liger's fused "
            "cross-entropy (use_liger_kernel=True) never builds",
            "set use_liger_kernel=False and loss_type='nll', or choose a criterion that works with Liger ({others})",
        ),
        Rule(
            "full_logits_vs_trl_dft",
            ("loss_type",),
            ("trl",),
            "del_plugin: del_criterion `{criterion}` and SFTConfig(loss_type='dft') each replace the cross-entropy "
            "with a loss of their own and cannot be combined",
            "use loss_type='nll' to train with `{criterion}`, or keep DFT with a criterion that adds to it ({others})",
        ),
        Rule(
            "full_logits_vs_trl_chunked",
            ("loss_type",),
            ("trl",),
            "del_plugin: del_criterion `{criterion}` computes its loss from the full logits; SFTConfig(loss_type="
            "{loss_type!r}) (TRL 1.14's default) computes the cross-entropy in chunks inside the forward and returns "
            "no logits",
            "Set loss_type='nll'",
            joiner=". ",
        ),
        Rule(
            "full_logits_without_logits",
            (),  # raised while training, where the config's keys are no longer at hand: it names the criterion
            ("trainer",),
            "del_plugin: `{criterion}` needs the model's logits; the forward returned none",
            "(a fused cross-entropy kernel is on)",
            joiner=" ",
        ),
        Rule(
            "own_loss_vs_llamafactory",
            ("use_dft_loss", "use_eaft_loss", "use_asft_loss"),
            ("llamafactory",),
            "`{key}: true` replaces LLaMA-Factory's cross-entropy with a loss of its own, and DEL trains "
            "cross-entropy + del_alpha * L_num (a token criterion replaces the same loss)",
            "remove `{key}` to train with DEL, or train it without DEL (`llamafactory-cli train`)",
        ),
        # a LoRA adapter on lm_head beside a kernel that reads the base weight
        Rule(
            "lora_head_vs_liger_fused",
            ("lora_target_modules", "liger_fused_linear_cross_entropy"),
            ("axolotl",),
            "a LoRA adapter on lm_head (`lora_target_modules`) with `liger_fused_linear_cross_entropy`: Liger's "
            "kernel reads lm_head.weight, the base weight without the adapter, so the cross-entropy would train "
            "without it while DEL and evaluation see it",
            "train the head with `lora_modules_to_save: [lm_head]` instead, use Cut Cross Entropy (Axolotl's fork "
            "folds the adapter into its loss), or plain cross-entropy",
        ),
        Rule(
            "lora_head_vs_llamafactory_liger",
            ("lora_target", "enable_liger_kernel"),
            ("llamafactory",),
            "a LoRA adapter on lm_head (`lora_target`) with `enable_liger_kernel`: LLaMA-Factory's SFT applies "
            "Liger's fused linear cross-entropy, which reads lm_head.weight, the base weight without the adapter, so "
            "the cross-entropy would train without it while DEL and evaluation see it",
            "train the head with `additional_target: lm_head` instead, or remove `enable_liger_kernel`",
        ),
        Rule(
            "lora_head_vs_cce_fork",
            ("lora_target_modules", "cut_cross_entropy"),
            ("axolotl-plugin", "del-check"),
            "a LoRA adapter on lm_head with Cut Cross Entropy, but the installed cut_cross_entropy fork passes "
            "lm_head.weight (the base weight) to its kernel, so the cross-entropy would train without the adapter",
            'install the fork Axolotl names (pip install "cut-cross-entropy[transformers] @ '
            'git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"), whose apply_lce_lm_head folds '
            "it in, or train the head with `lora_modules_to_save: [lm_head]`",
        ),
        # an engine that partitions the head, beside what reads the whole head
        Rule(
            "fused_kernel_vs_zero3",
            ("deepspeed", *(k for k, kernel in KERNELS.items() if kernel.fused)),
            ("axolotl",),
            "{kernels} with {zero3}: ZeRO-3 partitions lm_head.weight and gathers it only inside "
            "the head's own forward, where DEL reads its digit rows, and the fused kernel reads the weight without "
            "calling the head",
            "Under ZeRO-3 train with plain cross-entropy (remove the key), or keep the kernel and shard with FSDP2 "
            "(the fsdp_config of examples/*/paper-full-fsdp.yml, docs/distributed.md)",
            joiner=". ",
        ),
        Rule(
            "whole_head_criterion_vs_zero3",
            ("deepspeed", "del_criterion"),
            ("axolotl",),
            "`del_criterion: {criterion}` with {zero3}: it copies the whole lm_head.weight when "
            "the trainer is built, and ZeRO-3 has partitioned it across the ranks by then",
            "Train it with ZeRO-1 or -2 (deepspeed_configs/zero2.json), FSDP2 or one GPU, or use a digit criterion "
            "under ZeRO-3 ({others})",
            joiner=". ",
        ),
        # what a fused kernel skips by never calling the head, found while training (the capture's refusals: the
        # config's keys are no longer at hand; ``what`` names the module or adapters that did not run)
        Rule(
            "zero3_head_not_run",
            (),
            ("capture",),
            "DeepSpeed ZeRO-3 partitions the LM head, and {what} did not run its forward after the decoder "
            "returned, where DEL reads its digit rows while DeepSpeed has gathered them: a fused cross-entropy "
            "kernel (liger_fused_linear_cross_entropy, cut_cross_entropy) reads lm_head.weight without calling "
            "the head",
            "Under ZeRO-3 use plain cross-entropy, or shard with FSDP2 (examples/*/paper-full-fsdp.yml), "
            "which keeps fused kernels",
            joiner=". ",
        ),
        Rule(
            "lora_head_not_run",
            (),
            ("capture",),
            "the LoRA adapter(s) {what} on the LM head did not run in this forward pass, so the loss was "
            "computed without them (fused cross-entropy kernels read lm_head.weight, the base weight); DEL "
            "would read a different head than the cross-entropy",
            "Use plain cross-entropy, or train the head with modules_to_save instead of LoRA",
            joiner=". ",
        ),
        Rule(
            "fsdp2_head_unit",
            (),
            ("capture",),
            "the LM head weight is still sharded (a DTensor) when the decoder returns, where DEL reads its digit "
            "rows: FSDP2 made lm_head a unit of its own, gathered only inside the head's own forward (which "
            "fused cross-entropy kernels skip)",
            "Keep lm_head in the root FSDP unit: fsdp_config "
            "auto_wrap_policy: TRANSFORMER_BASED_WRAP with transformer_layer_cls_to_wrap set to the decoder "
            "layer class, as examples/*/paper-full-fsdp.yml do (SIZE_BASED_WRAP makes a unit of every module above "
            "min_num_params, the head included)",
            joiner=". ",
        ),
    )
}


def logits_missing_message(criterion: str) -> str:
    """The runtime refusal of a criterion that needs the full logits when the forward returned none (a fused
    cross-entropy kernel that the config checks could not see): for the trainer's loss and the capture."""
    return RULES["full_logits_without_logits"].message(criterion=criterion)
