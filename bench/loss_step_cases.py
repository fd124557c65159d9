"""bench/loss_step.py's cases: the labels (synthetic or GSM8K), the cross-entropy kernels Axolotl runs and the
naive re-implementation of the authors' term, and :class:`Case`, the hidden states, head and labels of one shape with
every method it times."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

ALPHA = 0.3  # the weight of the added term (DEL's and NTL's recommended order of magnitude)
SEQ_LEN = 2048
# Hidden size. DEL's product (N x H x 10F) and the head's (N x H x V) both scale with H, so their ratio is 10F/V
# whatever H is. What H changes is the share of CE's per-logit softmax in the baseline: with a real model's H
# (896-8192) the head's product dominates the step and DEL's fixed per-position work (a few ms of small ops)
# weighs even less. A small H is therefore the stricter case, and it keeps the benchmark inside its CPU budget.
DEFAULT_HIDDEN = 128
# vocabulary size -> the tokenizer of models with that many logits (Llama-2/Mistral; Qwen2/2.5)
TOKENIZER_FOR_VOCAB = {32_000: "llama-spm", 128_256: "llama-bpe", 151_936: "qwen2"}
DEFAULT_SHAPES = ["2048x32000", "8192x32000", "2048x151936"]
DEFAULT_FRACTION = 0.3
CE_KINDS = ("plain", "chunked")
LABELS = ("synthetic", "gsm8k")
HEADS = ("frozen", "trainable")


# ---------------------------------------------------------------------------------------------------- data
def synthetic_labels(
    batch: int, length: int, digit_ids: list[int], dot_id: int, word_ids: torch.Tensor, fraction: float, seed: int
) -> torch.Tensor:
    """``[batch, length]`` labels: words and numbers, numbers added while the digit share is under ``fraction``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(batch):
        row: list[int] = []
        digits = 0
        while len(row) < length:
            if digits < fraction * (len(row) + 1):
                integer = [rng.choice(digit_ids[1:])] + [rng.choice(digit_ids) for _ in range(rng.randint(0, 5))]
                number = integer
                if rng.random() < 0.2:
                    number = integer + [dot_id] + [rng.choice(digit_ids) for _ in range(rng.randint(1, 3))]
                row.extend(number)
                digits += sum(1 for t in number if t != dot_id)
            # at least one word after every number keeps numbers apart
            row.extend(word_ids[rng.randrange(len(word_ids))].item() for _ in range(rng.randint(1, 3)))
        rows.append(row[:length])
    return torch.tensor(rows, dtype=torch.long)


def gsm8k_labels(tokenizer, batch: int, length: int) -> torch.Tensor:
    """``[batch, length]`` labels of GSM8K train problems as sample packing lays them out: each problem's Alpaca
    prompt masked with -100, its solution + EOS the targets (``bench/collation.py``'s ``tokenize``, the format
    Axolotl's ``type: alpaca`` gives), problems in file order, back to back; a row ends with the problem that
    does not fit, cut, and the next row starts with the next problem. The share of digit and number-token targets
    is the data's, whatever the tokenizer."""
    import collation

    from tools.assets import gsm8k_train_rows

    need = batch * length
    wanted = max(16, need // 100)
    while True:
        features = collation.tokenize(gsm8k_train_rows(wanted), tokenizer, length)
        if sum(len(f["labels"]) for f in features) >= need + length or len(features) < wanted:
            break
        wanted *= 2
    rows, k = [], 0
    for _ in range(batch):
        row: list[int] = []
        while len(row) < length:
            if k == len(features):
                raise ValueError(f"GSM8K has too few problems for {batch} x {length} labels")
            row.extend(features[k]["labels"])
            k += 1
        rows.append(row[:length])
    return torch.tensor(rows, dtype=torch.long)


def word_token_ids(tokenizer, digit_ids: list[int], dot_id: int | None) -> torch.Tensor:
    """Ordinary tokens: no digit, no special token, no '.' (so no token can read as a decimal point, such as
    ')$.' before digits: the naive re-implementation knows only the bare '.')."""
    special = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    ids = [
        i
        for tok, i in vocab.items()
        if i not in special
        and i != dot_id
        and "." not in tok
        and not any(ch.isdigit() for ch in tok)
        and i not in digit_ids
    ]
    return torch.tensor(sorted(ids)[:20000])


# ---------------------------------------------------------------------------------------------------- losses
def plain_ce_loss() -> Callable:
    """transformers' causal-LM loss as a model without any loss patch calls it."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    return ForCausalLMLoss


def axolotl_chunked_ce_loss() -> Callable:
    """The causal-LM loss Axolotl installs for ``chunked_cross_entropy: true`` (PatchManager calls
    ``patch_chunked_ce_loss_fn()`` without a chunk count unless ``chunked_cross_entropy_num_chunks`` is set): the
    patch is applied, the installed function taken, and transformers restored."""
    import transformers.loss.loss_utils as loss_utils
    from axolotl.monkeypatch.loss.chunked import patch_chunked_ce_loss_fn

    saved = loss_utils.ForCausalLMLoss, loss_utils.LOSS_MAPPING["ForCausalLM"]
    try:
        patch_chunked_ce_loss_fn()
        installed = loss_utils.LOSS_MAPPING["ForCausalLM"]
    finally:
        loss_utils.ForCausalLMLoss, loss_utils.LOSS_MAPPING["ForCausalLM"] = saved
    if installed is saved[1] or installed.__name__ != "for_causal_lm_chunked_loss":
        raise RuntimeError(f"patch_chunked_ce_loss_fn installed {installed!r}, not Axolotl's chunked loss")
    return installed


def naive_reference_term(
    logits: torch.Tensor,
    labels: torch.Tensor,
    digit_ids: list[int],
    dot_id: int,
    integer_slope: float = 2.0,
    decimal_base: float = 1.02,
) -> torch.Tensor:
    """The authors' approach, re-implemented: full float copy, per-number Python loop, host synchronisation.

    Same loss as ours (``mean over digit targets of u_t * mean_k(p_k * BCE_k)``), computed number by number.
    Numbers are read on the unshifted labels (a number that starts at position 0 keeps its places) and the
    digit at label position t is predicted by the logits at t - 1.
    """
    shift_logits = logits[..., :-1, :].contiguous().float()  # full-size copy of the logits
    digit_logits = shift_logits[..., digit_ids]  # its backward scatters into a full-size zero gradient
    rows = labels.tolist()  # host synchronisation
    value_of = {token: d for d, token in enumerate(digit_ids)}
    per_number = []
    for b, row in enumerate(rows):
        t = 0
        while t < len(row):
            if row[t] not in value_of:
                t += 1
                continue
            positions, values, point = [], [], None
            while t < len(row) and (
                row[t] in value_of
                or (row[t] == dot_id and point is None and t + 1 < len(row) and row[t + 1] in value_of)
            ):
                if row[t] == dot_id:
                    point = len(positions)
                else:
                    positions.append(t)
                    values.append(value_of[row[t]])
                t += 1
            anchor = len(positions) if point is None else point  # digits before the decimal point
            places = [anchor - 1 - i for i in range(len(positions))]  # units 0, tens 1, first decimal -1
            weights = [integer_slope * (p + 1) if p >= 0 else decimal_base ** (p - 1) for p in places]
            if positions[0] == 0:  # the first label has no logit predicting it
                positions, values, weights = positions[1:], values[1:], weights[1:]
                if not positions:
                    continue
            z = digit_logits[b, [p - 1 for p in positions]]
            target = F.one_hot(torch.tensor(values, device=z.device), 10).to(z.dtype)
            bce = F.binary_cross_entropy_with_logits(z, target, reduction="none")
            loss = (torch.softmax(z, -1) * bce).mean(-1) * torch.tensor(weights, device=z.device)
            per_number.append(loss)
    if not per_number:
        return shift_logits.sum() * 0.0
    per_digit = torch.cat(per_number)
    return ALPHA * per_digit.sum() / per_digit.numel()


# ---------------------------------------------------------------------------------------------------- the step
class Case:
    """One shape: hidden states, head weight, labels, built once, and a closure per method.

    ``hidden`` is the ``[N, H]`` leaf that receives the gradient; every step reads it through a ``[B, T, H]`` view
    (a non-leaf, as the final norm's output is). ``head["trainable"]`` is an ``nn.Parameter`` (a leaf, as a
    model's head weight is: DEL's rows are then added in place into its gradient); ``head["frozen"]`` is the same
    values without gradient.
    """

    def __init__(
        self,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        vocab,
        digit_ids,
        dot_id,
        ce_losses: dict[str, Callable],
    ):
        from del_plugin.core import next_token_places, shift_to_next_token
        from del_plugin.core.places import NOT_A_DIGIT

        self.hidden = hidden.requires_grad_(True)
        self.parameter = torch.nn.Parameter(weight)
        self.head = {"frozen": self.parameter.detach(), "trainable": self.parameter}
        self.labels = labels.to(hidden.device)
        self.batch_shape = tuple(labels.shape)
        self.aligned = shift_to_next_token(self.labels, -100)
        # what NumberSpanCollator and DELTrainer.get_batch_samples hand to the step (computed off the step)
        self.places = next_token_places(labels, vocab).to(hidden.device)
        self.num_items = (self.aligned != -100).sum()
        is_digit = self.places != NOT_A_DIGIT
        self.n_digits = is_digit.sum()  # digit targets; with number tokens, digit slots
        # the units each criterion is averaged over (digits; numbers for a number-level criterion), counted as
        # DELTrainer.get_batch_samples counts them, off the step
        from del_plugin.core.criteria import CRITERIA

        self.units = {name: spec.units(self.places, is_digit).sum() for name, spec in CRITERIA.items()}
        # targets by the digits they hold (index 0: no digit), and the targets that are number tokens
        per_target = is_digit.sum(-1) if is_digit.dim() == 3 else is_digit.long()
        self.targets_by_digits = torch.bincount(
            per_target[self.aligned != -100].reshape(-1), minlength=vocab.max_digits + 1
        ).tolist()
        self.vocab, self.digit_ids, self.dot_id = vocab, digit_ids, dot_id
        self.ce_losses = ce_losses
        # with number tokens, where they are (NumberSpanCollator reads them on the host, off the step)
        self.positions = None
        if vocab.max_digits > 1:
            from del_plugin.core.digits import number_target_positions

            self.positions = [p.to(hidden.device) for p in number_target_positions(self.aligned.cpu(), vocab)]

    @property
    def vocab_size(self) -> int:
        return self.parameter.shape[0]

    def hidden_view(self) -> torch.Tensor:
        return self.hidden.view(*self.batch_shape, self.hidden.shape[-1])

    def ce(self, kind: str, logits: torch.Tensor) -> torch.Tensor:
        return self.ce_losses[kind](logits, self.labels, vocab_size=self.vocab_size, num_items_in_batch=self.num_items)

    def del_from_hidden(self, hidden: torch.Tensor, weight: torch.Tensor, criterion: str = "del") -> torch.Tensor:
        """The trainer's digit term: digit logits from the hidden states, the criterion's per-position losses,
        ``alpha * sum / digit count`` (number count for a number-level criterion)."""
        from del_plugin.core import digit_targets_from_hidden
        from del_plugin.core.criteria import digit_criterion_sums

        targets = digit_targets_from_hidden(hidden, weight, self.aligned, self.vocab, self.positions)
        sums = digit_criterion_sums(criterion, targets, self.places, alpha=ALPHA)
        return sums.term / self.units[criterion].clamp(min=1)

    def del_logits_api(self, logits: torch.Tensor) -> torch.Tensor:
        from del_plugin.core import digit_entropy_loss

        return digit_entropy_loss(logits, self.aligned, self.places, self.vocab, alpha=ALPHA, reduction="mean")

    def naive(self, logits: torch.Tensor) -> torch.Tensor:
        return naive_reference_term(logits, self.labels, self.digit_ids, self.dot_id)

    def step(self, kind: str, head: str, added: str | None = None) -> torch.Tensor:
        """One forward + backward: ``added`` is None (CE alone), "del" (from the hidden states, as the trainer
        computes it) or a term read from the logits ("del (logits API)" or "naive")."""
        from del_plugin.core import digit_targets_from_hidden
        from del_plugin.core.criteria import digit_criterion_sums

        weight = self.head[head]
        hidden = self.hidden_view()
        digits = None
        if added == "del":  # DigitLogitsCapture's hook runs on the final norm, before the head
            digits = digit_targets_from_hidden(hidden, weight, self.aligned, self.vocab, self.positions)
        logits = F.linear(hidden, weight)
        loss = self.ce(kind, logits)
        if digits is not None:  # the trainer's sum, with the statistics it logs
            sums = digit_criterion_sums("del", digits, self.places, alpha=ALPHA)
            loss = loss + sums.term / self.n_digits.clamp(min=1)
        elif added == "del (logits API)":
            loss = loss + self.del_logits_api(logits)
        elif added == "naive":
            loss = loss + self.naive(logits)
        elif added is not None:
            raise ValueError(f"unknown term {added!r}")
        del logits
        loss.backward()
        return loss.detach()

    def methods(self, extras: bool) -> dict[str, Callable[[], torch.Tensor]]:
        """``"<ce kind>, <head> head: <loss>"`` -> step; comparisons at the plain CE with the frozen head."""
        fns = {}
        for kind in CE_KINDS:
            for head in HEADS:
                fns[method_name(kind, head, "ce")] = partial(self.step, kind, head)
                fns[method_name(kind, head, "ce+del")] = partial(self.step, kind, head, "del")
        fns[method_name("plain", "frozen", "ce+del (logits API)")] = partial(
            self.step, "plain", "frozen", "del (logits API)"
        )
        if extras:
            fns[method_name("plain", "frozen", "ce+naive")] = partial(self.step, "plain", "frozen", "naive")
        return fns

    def term_fns(self, logits_leaf: torch.Tensor | None) -> dict[str, Callable[[], torch.Tensor]]:
        """Each digit term alone, forward + backward, frozen head: DEL from the hidden states; with a
        ``logits_leaf``, also the plugin's other digit criteria and the naive term from that leaf."""
        from del_plugin.core.criteria import DIGIT_CRITERIA

        def ours(criterion):
            loss = self.del_from_hidden(self.hidden_view(), self.head["frozen"], criterion)
            loss.backward()
            return loss.detach()

        def naive():
            loss = self.naive(logits_leaf)
            loss.backward()
            return loss.detach()

        fns = {"del": partial(ours, "del")}
        if logits_leaf is not None:
            fns.update({f"{c} (plugin)": partial(ours, c) for c in DIGIT_CRITERIA if c != "del"})
            fns["naive (from logits)"] = naive
        return fns

    def clear_grad(self) -> None:
        self.hidden.grad = None
        self.parameter.grad = None


def method_name(kind: str, head: str, loss: str) -> str:
    return f"{kind} CE, {head} head: {loss}"
