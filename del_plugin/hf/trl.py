"""DEL with TRL's ``SFTTrainer``: its collator (padded or padding-free packing), ``completion_only_loss``, and its
loss paths (``nll``, ``chunked_nll``, ``dft``, Liger) are kept; the mixin adds the digit term and its metrics.

    trainer = DELSFTTrainer(model=model, args=SFTConfig(...), train_dataset=data,
                            del_settings=DELSettings(alpha=0.3))
"""

from __future__ import annotations

from trl import SFTTrainer

from .trainer import DELTrainerMixin

__all__ = ["DELSFTTrainer"]


class DELSFTTrainer(DELTrainerMixin, SFTTrainer):
    """``trl.SFTTrainer`` with a DEL criterion (see :class:`~del_plugin.hf.trainer.DELTrainerMixin`)."""
