"""``del-check``'s third check: the loss kernels a config switches on, against Axolotl's own support table for the
model type, and a LoRA adapter on ``lm_head`` beside Cut Cross Entropy against the installed fork
(:data:`~del_plugin.core.compatibility.RULES`' ``lora_head_vs_cce_fork``, as the plugin applies it when the model
loads)."""

from __future__ import annotations

from ..core.compatibility import RULES, cce_enabled, cce_folds_lora_head, lora_targets_head


def kernel_verdict(cfg, model_type: str | None) -> tuple[bool | None, str]:
    """(passed: True, False, or None when it cannot be checked here; what was checked, or why it failed) for the
    validated config ``cfg`` and its model type (None: not read)."""
    from axolotl.integrations.liger.plugin import LIGER_FLAGS
    from axolotl.model_support import check_capability, get_model_support

    cce = cce_enabled(cfg)
    liger = [flag for flag in LIGER_FLAGS if cfg.get(flag)]
    used = (["cut_cross_entropy"] if cce else []) + liger
    if not used:
        return True, "plain cross-entropy (no Cut Cross Entropy, no Liger)"
    if model_type is not None:
        support = get_model_support(model_type)
        try:
            if cce:
                check_capability(support, "cut_cross_entropy", model_type)
            if liger:
                check_capability(support, "liger", model_type, feature="Liger")
        except ValueError as err:
            return False, f"{', '.join(used)}: {err}"
    head_lora = cfg.adapter in ("lora", "qlora") and lora_targets_head(cfg.lora_target_modules)
    detail = f"{', '.join(used)}" + (f" with model_type {model_type!r}" if model_type else "")
    if cce and head_lora:
        folds = cce_folds_lora_head()
        if folds is None:
            return None, (
                f"{detail}; a LoRA adapter on lm_head needs Axolotl's Cut Cross Entropy fork with apply_lce_lm_head, "
                "which is not installed here (the training machine needs it; docs/examples.md)"
            )
        if folds is False:
            return False, f"{detail}: {RULES['lora_head_vs_cce_fork'].message()}"
    return True, detail
