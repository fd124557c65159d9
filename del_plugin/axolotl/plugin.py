"""Axolotl hooks: register the config keys and hand Axolotl the DEL trainer when the plugin is listed."""

from __future__ import annotations

import weakref

from axolotl.integrations.base import BasePlugin

from ..core.compatibility import RULES, cce_enabled, cce_folds_lora_head, lora_targets_head
from .config_rules import PLUGIN_NAME, plugin_enabled
from .logs import LOG

# The Axolotl releases this plugin is built and tested on (setup.cfg's `axolotl` extra says the same; a test checks).
SUPPORTED_AXOLOTL = ">=0.21.0,<0.22"
TESTED_AXOLOTL = "0.21.0"


def check_axolotl_version(installed: str | None = None) -> str:
    """Refuse an Axolotl older than :data:`SUPPORTED_AXOLOTL` (DEL's trainer subclasses its ``AxolotlTrainer`` and
    reads its config and plugin API as of 0.21); warn for a newer one, which is untested. Returns the version."""
    from importlib.metadata import version

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    installed = installed or version("axolotl")
    supported = SpecifierSet(SUPPORTED_AXOLOTL)
    if Version(installed) in supported:
        return installed
    if Version(installed) < min(Version(spec.version) for spec in supported if spec.operator.startswith(">")):
        raise RuntimeError(
            f"{PLUGIN_NAME} needs Axolotl {SUPPORTED_AXOLOTL} (tested with {TESTED_AXOLOTL}), but Axolotl {installed} "
            f"is installed; upgrade it (pip install 'axolotl=={TESTED_AXOLOTL}') or remove the plugin from `plugins`"
        )
    LOG.warning(
        "%s was tested with Axolotl %s; Axolotl %s is installed, which may have changed the trainer or plugin API it "
        'uses. Watch the start-up lines ("DEL is on") and the logged del_loss, or install axolotl==%s',
        PLUGIN_NAME,
        TESTED_AXOLOTL,
        installed,
        TESTED_AXOLOTL,
    )
    return installed


def check_lora_head_kernel(cfg) -> None:
    """A LoRA adapter on ``lm_head`` beside Cut Cross Entropy trains only with a fork that folds it into the loss
    (:func:`~del_plugin.core.compatibility.cce_folds_lora_head`); an earlier fork would train the cross-entropy without
    it (DEL would then stop at the first step, its adapter hook not having run)."""
    if cfg.get("adapter") not in ("lora", "qlora") or not lora_targets_head(cfg.get("lora_target_modules")):
        return
    if cce_enabled(cfg) and cce_folds_lora_head() is False:
        raise ValueError(f"{PLUGIN_NAME}: {RULES['lora_head_vs_cce_fork'].message()}")


class DELPlugin(BasePlugin):
    """Digit Entropy Loss for supervised fine-tuning: ``plugins: [del_plugin.DELPlugin]`` and ``del_alpha``."""

    def register(self, cfg):
        if plugin_enabled(cfg):
            check_axolotl_version()

    def _is_first(self) -> bool:
        """Whether this is the first DELPlugin the PluginManager holds: the plugin may be registered twice
        (discovered, and listed under another spelling of its path), and a hook must act once."""
        from axolotl.integrations.base import PluginManager

        first = next((p for p in PluginManager().plugins.values() if isinstance(p, DELPlugin)), self)
        return first is self

    def get_input_args(self) -> str | None:
        # registered twice, Axolotl would merge DELArgs into the config class twice, which Python refuses
        return "del_plugin.axolotl.args.DELArgs" if self._is_first() else None

    def pre_model_load(self, cfg):
        """Check Axolotl's own tokenizer (added tokens and all) before the model is loaded. Config validation
        already checked the tokenizer when it could load it; this also covers the case where it could not."""
        if not plugin_enabled(cfg):
            return
        check_lora_head_kernel(cfg)
        from axolotl.loaders.tokenizer import load_tokenizer

        from ..core import DigitVocab
        from ..core.vocab import DigitVocabError

        try:
            DigitVocab.from_tokenizer(load_tokenizer(cfg), name=cfg.tokenizer_config or cfg.base_model)
        except DigitVocabError as err:
            raise ValueError(f"{PLUGIN_NAME}: {err}") from err

    def get_trainer_cls(self, cfg):
        if not plugin_enabled(cfg) or cfg.rl or cfg.reward_model or cfg.process_reward_model:
            return None  # the args validator has already refused DEL with RL / reward modelling
        from .trainer import DELTrainer

        return DELTrainer

    def post_trainer_create(self, cfg, trainer):
        if plugin_enabled(cfg) and cfg.get("del_eval_benchmarks") and self._is_first():
            # a weak reference: the plugin is process-wide and must not keep a finished run's model alive
            self._eval_trainer = weakref.ref(trainer)
            self._post_train_calls = 0

    def post_train(self, cfg, model):
        """The evaluation of ``del_eval_benchmarks``, at Axolotl's second ``post_train``: after the final save,
        the model card and the end of the process group, on rank 0 (:mod:`.evaluation` says why there)."""
        trainer = getattr(self, "_eval_trainer", lambda: None)()
        if trainer is None or not plugin_enabled(cfg) or not cfg.get("del_eval_benchmarks"):
            return
        self._post_train_calls += 1
        if self._post_train_calls < 2:
            return  # the first call comes right after trainer.train(), before the final save
        self._eval_trainer = lambda: None
        if trainer.is_world_process_zero():
            from .evaluation import evaluate_after_training

            evaluate_after_training(cfg, trainer)
