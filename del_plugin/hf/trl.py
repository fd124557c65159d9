"""DEL with TRL's ``SFTTrainer``: its collator (padded or padding-free packing), ``completion_only_loss``, and its
loss paths (``nll``, ``chunked_nll``, ``dft``, Liger) are kept; the mixin adds the digit term and its metrics.

    trainer = DELSFTTrainer(model=model, args=SFTConfig(...), train_dataset=data,
                            del_settings=DELSettings(alpha=0.3))

What SFTTrainer brings, and what DEL does with it (tested with TRL 1.14.1, the version Axolotl 0.21 pins, and with
TRL 1.16.0 on the newest-hosts test lane, which deprecates ``compute_loss_func`` and ``return_outputs``, reads
``chunked_nll`` as ``nll`` and refuses Liger's fused linear cross-entropy: docs/hosts.md, "Versions tested"):

* ``DataCollatorForLanguageModeling`` is wrapped like any collator. With ``padding_free=True`` or BFD packing it
  returns one flattened row with ``position_ids`` that restart at 0 for each sample (and the first label of each
  sample masked); numbers are read per sample, never across two packed samples.
* ``completion_only_loss`` and ``assistant_only_loss`` mask labels when the dataset is prepared; DEL reads the
  same labels, so digits in prompts are not digit targets.
* ``loss_type``: DEL reads its digit logits from the final hidden states, so the digit term is the same under
  ``"nll"``, ``"chunked_nll"`` (TRL 1.14's default, whose patched forward returns no logits), ``"dft"`` (a
  ``compute_loss_func``; the logged ``ce_loss`` is then the DFT loss) and Liger's fused loss. A token criterion
  (one that replaces cross-entropy, such as MixCE) replaces the loss with one computed from the full logits, so it
  needs ``loss_type="nll"`` without Liger; the other combinations are refused when DEL is set up. Its loss goes
  through ``transformers.Trainer.compute_loss`` with the Trainer's ``compute_loss_func``, never through TRL's
  (:meth:`DELSFTTrainer._host_compute_loss`).
"""

from __future__ import annotations

from trl import SFTTrainer

from ..core.compatibility import RULES
from .settings import DELSettings
from .trainer import DELTrainerMixin

__all__ = ["DELSFTTrainer"]


class DELSFTTrainer(DELTrainerMixin, SFTTrainer):
    """``trl.SFTTrainer`` with a DEL criterion (see :class:`~del_plugin.hf.trainer.DELTrainerMixin`)."""

    def setup_del(self, settings: DELSettings, vocab=None) -> None:
        check_sft_loss(settings, self.args)
        super().setup_del(settings, vocab)

    def _host_compute_loss(self, model, inputs, return_outputs: bool, num_items_in_batch):
        """A token criterion's loss through ``transformers.Trainer.compute_loss`` (which applies the Trainer's
        ``compute_loss_func`` to the model's logits), not through ``SFTTrainer.compute_loss``: TRL 1.16 deprecates
        handing it a ``compute_loss_func`` (2.0 removes it: TRL's own loss would then train instead, silently) and
        computes its cross-entropy in a fused forward. TRL's entropy and token-accuracy metrics are not logged then;
        DEL logs ``ce_loss`` beside the criterion's loss."""
        if self.del_settings.spec.kind != "token":
            return super()._host_compute_loss(model, inputs, return_outputs, num_items_in_batch)
        from transformers import Trainer

        inputs = {**inputs, "use_cache": False}  # as SFTTrainer does: no KV cache in training
        result = Trainer.compute_loss(
            self, model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        return result if return_outputs else (result, None)


def check_sft_loss(settings: DELSettings, args) -> None:
    """Refuse a criterion that replaces the cross-entropy from the full ``[B, T, V]`` logits (as the Trainer's
    ``compute_loss_func``) beside an SFT loss it cannot replace."""
    if not settings.spec.needs_full_logits:
        return
    criterion, loss_type = settings.criterion, getattr(args, "loss_type", None)
    if getattr(args, "use_liger_kernel", False):
        raise ValueError(RULES["full_logits_vs_trl_liger"].message(criterion=criterion))
    if loss_type == "dft":
        raise ValueError(RULES["full_logits_vs_trl_dft"].message(criterion=criterion))
    if loss_type != "nll":
        raise ValueError(RULES["full_logits_vs_trl_chunked"].message(criterion=criterion, loss_type=loss_type))
