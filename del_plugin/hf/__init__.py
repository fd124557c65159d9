"""DEL for Hugging Face trainers, without Axolotl: the :class:`DELTrainerMixin` for any ``transformers.Trainer``
subclass, :class:`DELSettings`, and :class:`~del_plugin.hf.trl.DELSFTTrainer` for TRL's ``SFTTrainer``."""

from .metrics import DigitMetrics
from .settings import DELSettings
from .trainer import DELTrainerMixin, TokenCriterionLoss

__all__ = ["DELSFTTrainer", "DELSettings", "DELTrainerMixin", "DigitMetrics", "TokenCriterionLoss"]


def __getattr__(name: str):
    if name == "DELSFTTrainer":  # TRL is imported only when asked for
        from .trl import DELSFTTrainer

        return DELSFTTrainer
    raise AttributeError(f"module 'del_plugin.hf' has no attribute {name!r}")
