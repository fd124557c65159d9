"""Axolotl trainer with the Digit Entropy Loss added to the causal-LM cross-entropy.

Normalisation: the DEL term of an optimizer step is ``alpha * sum(l_t) / N``, where the sum and the digit count N
run over *all* micro-batches of the step and all data-parallel ranks. Each micro-batch therefore contributes
``alpha * sum_micro(l_t) / N``, rescaled for what the HF Trainer does afterwards (divide by the accumulation
steps when the loss is not "scaled for GA"; DDP/FSDP average gradients over ranks). The gradient is then the same
for any micro-batch size, accumulation and GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from axolotl.core.trainers.base import AxolotlTrainer
from axolotl.utils.logging import get_logger

from .collator import TARGET_PLACES_KEY, NumberSpanCollator
from .core import (
    DIGIT_CRITERIA,
    NOT_A_DIGIT,
    TOKEN_CRITERIA,
    DigitLogitsCapture,
    DigitVocab,
    PlaceWeighting,
    criterion_token_losses,
    digit_correct,
    digit_criterion_token_losses,
    digit_entropy,
    emo_cost_embedding,
    shift_to_next_token,
)

LOG = get_logger(__name__)


@dataclass(frozen=True)
class DELSettings:
    alpha: float = 0.1
    weighting: PlaceWeighting = PlaceWeighting()
    criterion: str = "del"  # see del_plugin.core.criteria and docs/criteria.md
    mixce_eta: float = 0.5
    dist2_tau: float = 1.0

    @property
    def digit_alpha(self) -> float:
        """Weight of the digit term added to the loss: alpha for digit criteria, 0 for mle / mixce / emo (whose
        alpha, if any, acts inside the token criterion)."""
        return self.alpha if self.criterion in DIGIT_CRITERIA else 0.0

    @classmethod
    def from_cfg(cls, cfg) -> "DELSettings":
        return cls(
            alpha=float(cfg.del_alpha if cfg.del_alpha is not None else 0.1),
            weighting=PlaceWeighting(
                enabled=cfg.del_place_weighting is not False,
                integer_slope=float(cfg.del_integer_slope or 2.0),
                decimal_base=float(cfg.del_decimal_base or 1.02),
            ),
            criterion=str(cfg.del_criterion or "del"),
            mixce_eta=float(cfg.del_mixce_eta if cfg.del_mixce_eta is not None else 0.5),
            dist2_tau=float(cfg.del_dist2_tau if cfg.del_dist2_tau is not None else 1.0),
        )


class DELTrainer(AxolotlTrainer):
    """``AxolotlTrainer`` whose loss is ``CE + alpha * L_num``; logs ``ce_loss``, ``del_loss``, ``del_l_num``,
    ``digit_entropy`` and ``digit_accuracy`` for train and eval. ``del_criterion`` swaps DEL for one of the paper's
    baselines (docs/criteria.md): another digit term, or (mixce, emo) a replacement of the cross-entropy."""

    del_settings: DELSettings = DELSettings()
    del_vocab: DigitVocab | None = None

    # ------------------------------------------------------------------ set-up
    def post_set_axolotl_cfg(self):
        super().post_set_axolotl_cfg()
        self.setup_del(DELSettings.from_cfg(self.axolotl_cfg))

    def setup_del(self, settings: DELSettings, vocab: DigitVocab | None = None) -> None:
        """Read the digits of the trainer's tokenizer and wrap the train and eval collators."""
        if vocab is None:
            tokenizer = self.processing_class
            vocab = DigitVocab.from_tokenizer(tokenizer, name=getattr(tokenizer, "name_or_path", None))
        self.del_settings = settings
        self.del_vocab = vocab
        # DEL reads its digit logits from the final hidden states, so it works with any cross-entropy kernel
        # (plain, chunked, Liger, Cut Cross Entropy), whether or not the forward returns logits
        self._del_capture = DigitLogitsCapture(self.model, vocab, differentiable=settings.digit_alpha > 0)
        self.data_collator = NumberSpanCollator(self.data_collator, vocab)
        self.train_data_collator = self.data_collator
        if self.eval_data_collator is not None:
            self.eval_data_collator = NumberSpanCollator(self.eval_data_collator, vocab)
        self._del_sums = {"train": {}, "eval": {}}
        self._del_eval_weight = None
        self._del_step_digits = None
        self._del_last_logged_step = self.state.global_step
        self._del_eval_prefix = "eval"
        self._del_setup_criterion()
        LOG.info(
            "DEL: criterion %s, alpha=%s, place weighting %s, %d digit famil%s in %s",
            settings.criterion,
            settings.alpha,
            "on" if settings.weighting.enabled else "off",
            vocab.num_families,
            "y" if vocab.num_families == 1 else "ies",
            vocab.name,
        )

    # ------------------------------------------------------------------ normalisation
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        digits = sum(
            (b[TARGET_PLACES_KEY] != NOT_A_DIGIT).sum().to(device) for b in batch_samples if TARGET_PLACES_KEY in b
        )
        digits = torch.as_tensor(digits, device=device)
        if self.args.world_size > 1:
            digits = self.accelerator.gather(digits.reshape(1)).sum()
        self._del_step_digits = digits
        return batch_samples, num_items_in_batch

    def _loss_is_scaled_for_ga(self, num_items_in_batch) -> bool:
        # mirrors Trainer.training_step's decision to divide the returned loss by the accumulation steps
        if getattr(self, "loss_is_scaled_for_ga", None) is not None:
            return bool(self.loss_is_scaled_for_ga)
        return bool(
            (self.model_accepts_loss_kwargs and num_items_in_batch is not None) or self.compute_loss_func is not None
        )

    # ------------------------------------------------------------------ loss
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.del_vocab is None:
            raise RuntimeError("DELTrainer.setup_del() was not called; list del_plugin.DELPlugin in `plugins`")
        places = inputs.pop(TARGET_PLACES_KEY, None)
        if places is None:
            raise KeyError(
                f"del_plugin: the batch has no `{TARGET_PLACES_KEY}`; the trainer's collator is "
                f"{type(self.data_collator).__name__}, not the NumberSpanCollator the plugin installs"
            )
        labels = inputs.get("labels")
        aligned = inputs.get("shift_labels")
        if aligned is None:
            aligned = shift_to_next_token(labels, -100)
        self._del_token_labels = aligned  # read by _del_token_criterion_loss (mixce / emo)
        with self._del_capture:
            ce, outputs = super().compute_loss(
                model, inputs, return_outputs=True, num_items_in_batch=num_items_in_batch
            )
        ce_logged, extra_sums = self._del_pop_token_criterion_parts(ce, num_items_in_batch)
        targets = self._del_capture.digit_targets(aligned)
        alpha = self.del_settings.digit_alpha
        training = model.training
        l_sum = self._del_digit_terms(targets, places.to(targets.logits.device)).sum()
        if training and self._del_step_digits is not None:
            world = self.accelerator.num_processes
            ga = 1 if self._loss_is_scaled_for_ga(num_items_in_batch) else self.current_gradient_accumulation_steps
            del_term = alpha * l_sum * (world * ga) / self._del_step_digits.clamp(min=1)
            report_scale = 1.0 / ga  # what Trainer's tr_loss adds for this micro-batch
        else:
            del_term = alpha * l_sum / targets.mask.sum().clamp(min=1)
            report_scale = 1.0
        loss = ce + del_term if alpha > 0 else ce
        self._del_accumulate(
            "train" if training else "eval", ce_logged, del_term, l_sum, targets, report_scale, labels, extra_sums
        )
        return (loss, outputs) if return_outputs else loss

    # ------------------------------------------------------------------ criteria (docs/criteria.md)
    def _del_digit_terms(self, targets, places):
        """Per-position digit term of the configured criterion (zeros for mle / mixce / emo)."""
        settings = self.del_settings
        return digit_criterion_token_losses(
            settings.criterion, targets, places, weighting=settings.weighting, dist2_tau=settings.dist2_tau
        )

    def _del_setup_criterion(self) -> None:
        """mixce / emo replace cross-entropy: install them as the Trainer's ``compute_loss_func``, so the model
        computes no CE of its own and transformers applies its usual token-average and GA bookkeeping."""
        self._del_token_labels = None
        self._del_token_parts = None
        self._del_emo_cost = None
        criterion = self.del_settings.criterion
        if criterion not in TOKEN_CRITERIA:
            return
        own = self._del_token_criterion_loss
        if self.compute_loss_func is not None and self.compute_loss_func != own:
            raise RuntimeError(
                f"del_plugin: `del_criterion: {criterion}` replaces the loss function, but the trainer already has "
                f"one ({self.compute_loss_func}); remove `use_dft` / `use_eaft` or choose a digit criterion"
            )
        self.compute_loss_func = own
        if criterion == "emo":
            model = self.accelerator.unwrap_model(self.model)
            head = model.get_output_embeddings()
            if head is None or getattr(head, "weight", None) is None:
                raise RuntimeError(
                    f"del_plugin: EMO needs the model's output embedding; {type(model).__name__} has none"
                )
            self._del_emo_cost = emo_cost_embedding(head.weight)
            LOG.info(
                "DEL: EMO cost embedding %s float32 (%.2f GB), a frozen copy of the initial output embedding",
                tuple(self._del_emo_cost.shape),
                self._del_emo_cost.numel() * 4 / 1e9,
            )

    def _del_token_criterion_loss(self, outputs, labels, num_items_in_batch=None):
        """``compute_loss_func`` for mixce / emo, normalised like transformers' causal-LM cross-entropy: the sum
        over target tokens divided by ``num_items_in_batch`` when given, else the token mean."""
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        aligned = self._del_token_labels
        if aligned is None or aligned.shape != logits.shape[:-1]:
            aligned = shift_to_next_token(labels, -100)
        aligned = aligned.to(logits.device)
        settings = self.del_settings
        cost = self._del_emo_cost
        if cost is not None and cost.device != logits.device:
            cost = self._del_emo_cost = cost.to(logits.device)
        terms = criterion_token_losses(
            settings.criterion, logits, aligned, alpha=settings.alpha, mixce_eta=settings.mixce_eta,
            cost_embedding=cost,
        )
        if num_items_in_batch is not None:
            denom = torch.as_tensor(num_items_in_batch, device=logits.device).float()
        else:
            denom = terms.mask.sum().clamp(min=1).float()
        self._del_token_parts = {
            "ce": terms.nll.detach().sum() / denom,
            "cost": terms.cost.detach().sum(),
            "tokens": terms.mask.sum(),
        }
        return terms.loss.sum() / denom

    def _del_pop_token_criterion_parts(self, loss, num_items_in_batch):
        """(the plain cross-entropy to log, extra sums): for mixce / emo the CE from their NLL, scaled as
        transformers scales the returned loss; for the other criteria the model's CE unchanged."""
        parts, self._del_token_parts = getattr(self, "_del_token_parts", None), None
        if parts is None:
            return loss, {}
        scale = 1
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # mirrors Trainer.compute_loss's factor for losses normalised by num_items_in_batch
            scale = self.accelerator.num_processes // self.get_tp_size() if self.args.n_gpu <= 1 else self.args.n_gpu
        extra = {"target_tokens": parts["tokens"]}
        if self.del_settings.criterion == "emo":
            extra["emo_cost"] = parts["cost"]
        return parts["ce"] * scale, extra

    # ------------------------------------------------------------------ metrics
    @torch.no_grad()
    def _del_accumulate(self, split, ce, del_term, l_sum, targets, report_scale, labels, extra_sums=None):
        mask = targets.mask
        if split == "eval":
            # Trainer's eval_loss is the mean of per-batch losses weighted by batch size
            report_scale = float(labels.shape[0])
            self._del_add(split, "weight", torch.tensor(report_scale, device=ce.device))
        self._del_add(split, "ce", ce.detach().float() * report_scale)
        self._del_add(split, "del", del_term.detach().float() * report_scale)
        self._del_add(split, "l_num", l_sum.detach())
        self._del_add(split, "digits", mask.sum())
        self._del_add(split, "entropy", torch.where(mask, digit_entropy(targets.logits.detach()), 0.0).sum())
        self._del_add(split, "correct", digit_correct(targets).sum())
        for key, value in (extra_sums or {}).items():
            self._del_add(split, key, value.detach())

    def _del_add(self, split, key, value):
        sums = self._del_sums[split]
        sums[key] = value if key not in sums else sums[key] + value

    def _del_reduced(self, split) -> dict[str, float] | None:
        sums = self._del_sums.get(split) or {}
        if not sums:
            return None
        keys = sorted(sums)
        stacked = torch.stack([sums[k].float().reshape(()) for k in keys])
        if self.args.world_size > 1:
            stacked = self.accelerator.reduce(stacked, reduction="sum")
        values = dict(zip(keys, stacked.tolist()))
        self._del_sums[split] = {}
        return values

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.del_vocab is not None:
            if "loss" in logs:
                self._del_add_logs(logs, "train", "")
            elif f"{self._del_eval_prefix}_loss" in logs:
                self._del_add_logs(logs, "eval", f"{self._del_eval_prefix}_")
        super().log(logs, start_time)

    def _del_add_logs(self, logs, split, prefix):
        values = self._del_reduced(split)
        if values is None:
            return
        world = max(self.args.world_size, 1)
        if split == "train":
            steps = max(self.state.global_step - self._del_last_logged_step, 1)
            self._del_last_logged_step = self.state.global_step
            denom = steps * world  # tr_loss is averaged over ranks, then over steps
        else:
            denom = max(values.get("weight", 1.0), 1.0)
        digits = values["digits"]
        logs[f"{prefix}ce_loss"] = values["ce"] / denom
        logs[f"{prefix}del_loss"] = values["del"] / denom
        logs[f"{prefix}del_l_num"] = values["l_num"] / digits if digits else 0.0
        logs[f"{prefix}digit_entropy"] = values["entropy"] / digits if digits else 0.0
        logs[f"{prefix}digit_accuracy"] = values["correct"] / digits if digits else 0.0
        logs[f"{prefix}digit_targets"] = digits
        if values.get("target_tokens") and "emo_cost" in values:
            logs[f"{prefix}emo_cost"] = values["emo_cost"] / values["target_tokens"]

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
        if self.del_vocab is not None:
            self._del_sums["eval"] = {}
            self._del_eval_prefix = metric_key_prefix
        return super().evaluate(eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix)
