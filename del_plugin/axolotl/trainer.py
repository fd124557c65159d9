"""The Axolotl trainer: the DEL mixin on ``AxolotlTrainer``, configured from the Axolotl config's ``del_*`` keys."""

from __future__ import annotations

from axolotl.core.trainers.base import AxolotlTrainer

from ..hf.settings import DELSettings
from ..hf.trainer import DELTrainerMixin
from .logs import LOG

__all__ = ["DELTrainer"]


class DELTrainer(DELTrainerMixin, AxolotlTrainer):
    """``AxolotlTrainer`` whose loss is ``CE + del_alpha * L_num`` (or another ``del_criterion``)."""

    del_log = LOG  # Axolotl's console shows it (del_plugin/axolotl/logs.py)

    def post_set_axolotl_cfg(self):
        super().post_set_axolotl_cfg()
        self.setup_del(DELSettings.from_config(self.axolotl_cfg))

    def create_model_card(self, *args, **kwargs):
        """Axolotl's model card (README.md in output_dir, what ``hub_model_id`` pushes) with a DEL section: the
        criterion, its weight and the tokenizer's digits (the scores of ``del_eval_benchmarks`` join it later)."""
        super().create_model_card(*args, **kwargs)
        if self.is_world_process_zero() and self.del_settings is not None:
            from .evaluation import card_section, write_card_section

            write_card_section(self.args.output_dir, card_section(self.del_settings, self.del_vocab.describe()))
