"""Axolotl hooks: register the config keys and hand Axolotl the DEL trainer when the plugin is listed."""

from __future__ import annotations

from axolotl.integrations.base import BasePlugin
from axolotl.utils.logging import get_logger

from .args import plugin_enabled

LOG = get_logger(__name__)


class DELPlugin(BasePlugin):
    """Digit Entropy Loss for supervised fine-tuning: ``plugins: [del_plugin.DELPlugin]`` and ``del_alpha``."""

    def get_input_args(self) -> str:
        return "del_plugin.args.DELArgs"

    def get_trainer_cls(self, cfg):
        if not plugin_enabled(cfg) or cfg.rl or cfg.reward_model or cfg.process_reward_model:
            return None  # the args validator has already refused DEL with RL / reward modelling
        from .trainer import DELTrainer

        return DELTrainer
