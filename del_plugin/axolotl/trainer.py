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
