"""LLaMA-Factory's SFT trainer with DEL: :class:`DELSeq2SeqTrainer` is ``CustomSeq2SeqTrainer`` (a
``transformers.Seq2SeqTrainer``) under :class:`~del_plugin.hf.trainer.DELTrainerMixin`, and :func:`del_sft_trainer`
makes LLaMA-Factory's SFT workflow build it in place of its own, for one ``run_exp``.

Why here: LLaMA-Factory 0.9.5 has no loss hook (its ``use_dft_loss`` / ``use_eaft_loss`` switches pick a fixed
``compute_loss_func``; its plugins cover data, model and trainer plumbing, not the loss), and ``run_sft``
(``llamafactory/train/sft/workflow.py``) builds ``CustomSeq2SeqTrainer`` by the name it imported. Replacing that one
name keeps everything else LLaMA-Factory does: its argument parsing and checks, templates, dataset processing and
packing, model loading (LoRA, QLoRA, freeze, full; Liger), its collator (wrapped by DEL's), callbacks, saving.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from llamafactory.extras.logging import get_logger
from llamafactory.train.sft import workflow
from llamafactory.train.sft.trainer import CustomSeq2SeqTrainer

from ..hf.settings import DELSettings
from ..hf.trainer import DELTrainerMixin
from .config import LOGGER_NAME

__all__ = ["DELSeq2SeqTrainer", "del_sft_trainer"]


class DELSeq2SeqTrainer(DELTrainerMixin, CustomSeq2SeqTrainer):
    """LLaMA-Factory's ``CustomSeq2SeqTrainer`` with a DEL criterion (``del_settings=``); its start-up lines go to
    LLaMA-Factory's console."""

    del_log = get_logger(LOGGER_NAME)


@contextmanager
def del_sft_trainer(settings: DELSettings, trainer_class: type = DELSeq2SeqTrainer) -> Iterator[None]:
    """Within the block, LLaMA-Factory's SFT workflow builds ``trainer_class`` with ``settings``; its own trainer is
    put back after."""
    original = workflow.CustomSeq2SeqTrainer
    workflow.CustomSeq2SeqTrainer = functools.partial(trainer_class, del_settings=settings)
    try:
        yield
    finally:
        workflow.CustomSeq2SeqTrainer = original
