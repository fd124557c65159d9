"""DEL for any ``transformers.Trainer``: a mixin with no Axolotl import.

    class MyTrainer(DELTrainerMixin, Trainer): ...
    trainer = MyTrainer(model=model, args=args, ..., del_settings=DELSettings(alpha=0.3))

Normalisation: the digit term of an optimizer step is ``alpha * sum(l_t) / N``, the sum and the digit count ``N``
(the number count, for a number-level criterion) over *all* micro-batches of the step and all data-parallel ranks.
Each micro-batch contributes ``alpha * sum_micro(l_t) / N``, rescaled for what the Trainer does next (it divides the
loss by the accumulation steps unless the loss is "scaled for GA"; DDP and FSDP average gradients over ranks: the
factors are :func:`~del_plugin.hf.normalisation.step_scales`). The gradient is then the same for any micro-batch
size, accumulation and GPU count.

The mixin's state is five named objects: ``del_settings`` (:class:`DELSettings`), ``del_vocab``, ``del_capture``
(the digit logits read from the final hidden states, whatever computes the cross-entropy), ``del_metrics``
(:class:`DigitMetrics`) and, for a token criterion, the Trainer's own ``compute_loss_func``
(:class:`TokenCriterionLoss`). Two jobs are classes and modules of their own, which the mixin composes: the
collators' wiring (:mod:`~del_plugin.hf.collator_wiring`) and the checks before the first step (``del_startup``,
:mod:`~del_plugin.hf.startup_checks`).
"""

from __future__ import annotations

import torch
from transformers.utils import logging

from ..core.capture import DigitLogitsCapture
from ..core.compatibility import logits_missing_message
from ..core.criteria import digit_criterion_sums, token_criterion_terms
from ..core.places import NOT_A_DIGIT, shift_to_next_token
from ..core.vocab import DigitVocab
from .collator import NUMBER_POSITIONS_KEY, TARGET_PLACES_KEY
from .collator_wiring import prepare_with_positions, wrap_collators
from .metrics import DigitMetrics
from .normalisation import StepScales, step_scales
from .settings import DELSettings
from .startup_checks import HostForwardError, StartupChecks

__all__ = ["DELTrainerMixin", "HostForwardError", "TokenCriterionLoss"]

LOG = logging.get_logger(__name__)


class TokenCriterionLoss:
    """A ``compute_loss_func`` for a token criterion (one that replaces cross-entropy), normalised like
    transformers' causal-LM cross-entropy: the sum over target tokens divided by ``num_items_in_batch`` when given,
    else the token mean.

    ``last_parts`` holds, after each call, the plain cross-entropy on the same normalisation (for logging), the
    number of target tokens and the sums of the criterion's logged extras (``TokenCriterionTerms.extras``)."""

    def __init__(self, settings: DELSettings, state: dict | None = None):
        self.settings = settings
        self.state = state or {}
        self.last_parts: dict[str, torch.Tensor] | None = None

    def __call__(self, outputs, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        if logits is None:
            raise RuntimeError(logits_missing_message(self.settings.criterion))
        targets = shift_to_next_token(labels, -100).to(logits.device)
        state = {k: v.to(logits.device) if isinstance(v, torch.Tensor) else v for k, v in self.state.items()}
        self.state = state
        terms = token_criterion_terms(
            self.settings.criterion, logits, targets, alpha=self.settings.alpha, state=state, **self.settings.params
        )
        if num_items_in_batch is not None:
            denom = torch.as_tensor(num_items_in_batch, device=logits.device).float()
        else:
            denom = terms.mask.sum().clamp(min=1).float()
        self.last_parts = {
            "ce": terms.nll.detach().sum() / denom,
            "tokens": terms.mask.sum(),
            "extras": {name: value.detach().sum() for name, value in terms.extras.items()},
        }
        return terms.loss.sum() / denom


class DELTrainerMixin:
    """Adds a DEL criterion to a ``transformers.Trainer`` subclass (module docstring). ``del_settings`` (and
    optionally ``del_vocab``, else read from the trainer's tokenizer) are given to ``__init__`` or later to
    :meth:`setup_del`. Logs ``ce_loss``, ``del_loss``, ``del_l_num``, ``digit_entropy``, ``digit_accuracy`` and
    ``digit_targets`` for training and evaluation."""

    del_settings: DELSettings | None = None
    # where the start-up lines (criterion and weight, digit layout, the logit check) go; a host whose console shows
    # only its own loggers sets its own (the Axolotl trainer does)
    del_log = LOG

    def __init__(self, *args, del_settings: DELSettings | None = None, del_vocab: DigitVocab | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if del_settings is not None:
            self.setup_del(del_settings, del_vocab)

    # ------------------------------------------------------------------ set-up
    def setup_del(self, settings: DELSettings, vocab: DigitVocab | None = None) -> None:
        """Read the tokenizer's digits, wrap the collators, attach the digit capture to the model."""
        if vocab is None:
            tokenizer = self.processing_class
            vocab = DigitVocab.from_tokenizer(tokenizer, name=getattr(tokenizer, "name_or_path", None))
        self.del_settings, self.del_vocab = settings, vocab
        positions = wrap_collators(self, vocab)
        self.del_capture = DigitLogitsCapture(self.model, vocab, differentiable=settings.digit_alpha > 0)
        self.del_startup = StartupChecks(self.del_capture, vocab, self.del_log)
        self.del_metrics = DigitMetrics()
        spec = settings.spec
        if spec.kind == "token":
            if self.compute_loss_func is not None:
                raise RuntimeError(
                    f"del_plugin: `del_criterion: {settings.criterion}` replaces the loss function, but the trainer "
                    f"already has one ({self.compute_loss_func}); remove it or choose a digit criterion"
                )
            model = self.accelerator.unwrap_model(self.model) if hasattr(self, "accelerator") else self.model
            state = spec.prepare(model) if spec.prepare else {}
            self.compute_loss_func = TokenCriterionLoss(settings, state)
        alone = settings.digit_alpha == 0 and spec.kind != "token"
        self.del_log.info(
            "DEL is on: criterion %s, alpha %s%s%s; tokenizer %s: %s",
            settings.criterion,
            settings.alpha,
            " (cross-entropy alone, digit metrics logged)" if alone else "",
            settings.described_keys(),
            vocab.name,
            vocab.describe(),
        )
        if vocab.max_digits > 1 and not positions:
            LOG.info(
                "DEL: batches are dispatched (an iterable dataset, or accelerator_config.dispatch_batches), so the "
                "collator does not send where the number tokens are; each step finds them on the device, which on "
                "a GPU makes the host wait for it once per number group"
            )

    # ------------------------------------------------------------------ normalisation
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if self.del_settings is not None:
            # the units the criterion is averaged over: digit targets, or numbers for a number-level criterion
            spec = self.del_settings.spec
            digits = torch.zeros((), dtype=torch.long, device=device)
            for batch in batch_samples:
                if TARGET_PLACES_KEY in batch:
                    places = batch[TARGET_PLACES_KEY]
                    units = spec.units(places, places != NOT_A_DIGIT, **self.del_settings.params)
                    digits = digits + units.sum().to(device)
            if self.args.world_size > 1:
                digits = self.accelerator.gather(digits.reshape(1)).sum()
            self.del_metrics.start_step(digits)
        return batch_samples, num_items_in_batch

    def _step_scales(self, num_items_in_batch) -> StepScales:
        """This micro-batch's factors (:func:`~del_plugin.hf.normalisation.step_scales`), from the trainer's state."""
        return step_scales(
            # set by the training loop for each step; an evaluation before the first step has none (and uses
            # only the host-loss factor, which does not depend on it)
            accumulation_steps=getattr(
                self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps
            ),
            num_processes=self.accelerator.num_processes,
            loss_is_scaled_for_ga=getattr(self, "loss_is_scaled_for_ga", None),
            model_accepts_loss_kwargs=bool(self.model_accepts_loss_kwargs),
            compute_loss_func_given=self.compute_loss_func is not None,
            num_items_in_batch_given=num_items_in_batch is not None,
            average_tokens_across_devices=bool(self.args.average_tokens_across_devices),
            tp_size=self.get_tp_size(),
            n_gpu=self.args.n_gpu,
        )

    # ------------------------------------------------------------------ loss
    def _prepare_inputs(self, inputs):
        return prepare_with_positions(inputs, super()._prepare_inputs, self.args.device)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        settings = self.del_settings
        if settings is None:
            raise RuntimeError("del_plugin: setup_del() was not called (pass del_settings to the trainer)")
        places = inputs.pop(TARGET_PLACES_KEY, None)
        positions = inputs.pop(NUMBER_POSITIONS_KEY, None)
        if places is None:
            raise KeyError(
                f"del_plugin: the batch has no `{TARGET_PLACES_KEY}`; the trainer's collator is "
                f"{type(self.data_collator).__name__}, not the NumberSpanCollator that setup_del installs"
            )
        labels = inputs.get("labels")
        targets = inputs.get("shift_labels")
        if targets is None:
            targets = shift_to_next_token(labels, -100)
        elif settings.spec.kind == "token":
            raise RuntimeError(
                f"del_plugin: `{settings.criterion}` reads unshifted labels; this batch has "
                "shift_labels (sequence or context parallelism), which it does not support"
            )
        if positions is not None:
            # to the device before the forward is queued (the batch's own copies are made there too)
            positions = [p.to(targets.device, non_blocking=True) for p in positions]
        if not self.del_startup.done:
            self.del_startup.run(model, inputs, targets, positions)
        with self.del_capture:
            loss, outputs = self._host_compute_loss(model, inputs, return_outputs, num_items_in_batch)
        ce_logged, token_terms = self._token_criterion_parts(loss, num_items_in_batch)
        digits = self.del_capture.digit_targets(targets, positions)
        alpha, metrics = settings.digit_alpha, self.del_metrics
        sums = digit_criterion_sums(
            settings.criterion,
            digits,
            places.to(digits.logits.device),
            weighting=settings.weighting,
            alpha=alpha,
            **settings.params,
        )
        split = "train" if model.training else "eval"
        if split == "train" and metrics.step_digits is not None:
            scales = self._step_scales(num_items_in_batch)
            del_term = sums.term * scales.digit_term / metrics.step_digits.clamp(min=1)
            scale = scales.logged
        else:  # evaluation, or a loop that does not gather the step's batches first: the batch's own mean
            del_term = sums.term / sums.units.clamp(min=1)
            scale = 1.0
        if split == "train":
            metrics.add_train(ce_logged, del_term, scale, self.args.logging_nan_inf_filter)
        else:
            metrics.add_eval(ce_logged, del_term, labels.shape[0])
        metrics.add_digits(split, sums)
        if token_terms is not None:
            metrics.add_token_terms(split, *token_terms)
        if alpha > 0:
            loss = loss + del_term
        return (loss, outputs) if return_outputs else loss

    def _host_compute_loss(self, model, inputs, return_outputs: bool, num_items_in_batch):
        """(loss, outputs or None) of the host's own ``compute_loss`` (with a token criterion, the Trainer's
        ``compute_loss_func`` in it). Outputs only when asked for: a host may run the model again to build them
        (TRL 1.16 does)."""
        result = super().compute_loss(
            model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
        )
        return result if return_outputs else (result, None)

    def _token_criterion_parts(self, loss, num_items_in_batch):
        """(the plain cross-entropy to log, (target tokens, sums of the criterion's logged extras) or None): for a
        token criterion the CE of its NLL, scaled as the Trainer scales the returned loss; else the loss itself."""
        criterion_loss = self.compute_loss_func if isinstance(self.compute_loss_func, TokenCriterionLoss) else None
        if criterion_loss is None or criterion_loss.last_parts is None:
            return loss, None
        parts, criterion_loss.last_parts = criterion_loss.last_parts, None
        scale = self._step_scales(num_items_in_batch).host_loss
        return parts["ce"] * scale, (parts["tokens"], parts["extras"])

    # ------------------------------------------------------------------ logging
    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.del_settings is not None:
            prefix = self.del_metrics.eval_prefix
            split = "train" if "loss" in logs else "eval" if f"{prefix}_loss" in logs else None
            if split is not None:
                reduce = lambda t: self.accelerator.reduce(t, reduction="sum")  # noqa: E731
                logs.update(
                    self.del_metrics.pop_logs(
                        split, "" if split == "train" else f"{prefix}_", self.args.world_size, reduce
                    )
                )
        super().log(logs, start_time)

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval", **gen_kwargs):
        # gen_kwargs: a Seq2SeqTrainer's generation arguments (LLaMA-Factory's SFT passes its generating_args)
        if self.del_settings is not None:
            self.del_metrics.reset("eval")
            self.del_metrics.eval_prefix = metric_key_prefix
        return super().evaluate(
            eval_dataset, ignore_keys=ignore_keys, metric_key_prefix=metric_key_prefix, **gen_kwargs
        )
