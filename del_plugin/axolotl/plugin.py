"""Axolotl hooks: register the config keys and hand Axolotl the DEL trainer when the plugin is listed."""

from __future__ import annotations

from axolotl.integrations.base import BasePlugin

from .args import plugin_enabled


class DELPlugin(BasePlugin):
    """Digit Entropy Loss for supervised fine-tuning: ``plugins: [del_plugin.DELPlugin]`` and ``del_alpha``."""

    def get_input_args(self) -> str:
        return "del_plugin.axolotl.args.DELArgs"

    def pre_model_load(self, cfg):
        """Check Axolotl's own tokenizer (added tokens and all) before the model is loaded. Config validation
        already checked the tokenizer when it could load it; this also covers the case where it could not."""
        if not plugin_enabled(cfg):
            return
        from axolotl.loaders.tokenizer import load_tokenizer

        from ..core import DigitVocab
        from ..core.vocab import DigitVocabError

        try:
            DigitVocab.from_tokenizer(load_tokenizer(cfg), name=cfg.tokenizer_config or cfg.base_model)
        except DigitVocabError as err:
            raise ValueError(f"del_plugin.DELPlugin: {err}") from err

    def get_trainer_cls(self, cfg):
        if not plugin_enabled(cfg) or cfg.rl or cfg.reward_model or cfg.process_reward_model:
            return None  # the args validator has already refused DEL with RL / reward modelling
        from .trainer import DELTrainer

        return DELTrainer
