"""Loss-step benchmark: hidden states -> LM head -> cross-entropy, forward + backward, CE alone vs CE + DEL.

The measured step is the end of a training step as the trainer runs it now: final hidden states ``h`` ``[N, H]``
(a leaf that receives the gradient, seen through a ``[B, T, H]`` view as the final norm's output is) through the
LM head ``F.linear(h, W)`` into cross-entropy, then ``backward()``. Two heads: ``W`` frozen (LoRA / QLoRA, where
the head is not trained) and ``W`` a trainable parameter (full fine-tuning: the step also builds its ``[V, H]``
gradient). Two cross-entropy kernels, each exactly as Axolotl's model calls it:

* ``plain``: transformers' ``ForCausalLMLoss`` (``logits.float()``, labels shifted with a pad,
  ``cross_entropy(reduction="sum") / num_items_in_batch``);
* ``chunked``: Axolotl's ``chunked_cross_entropy: true``, the function that
  ``axolotl.monkeypatch.loss.chunked.patch_chunked_ce_loss_fn()`` installs as transformers' causal-LM loss (built
  here by calling that patch and restoring transformers afterwards): 8 chunks, a ``torch.compile``'d float32
  cross-entropy per chunk.

``ce+del`` adds DEL the way ``DELTrainer`` does: the digit logits from the hidden states
(``digit_targets_from_hidden``, computed before the head as the hook on the final norm computes them; with number
tokens at the positions the collator sends), the collator's places, ``digit_criterion_sums`` (the criterion's sum
with the digit statistics the trainer logs; on a GPU compiled, ``del_plugin.core.fused``) divided by the step's
digit count, times alpha = 0.3. Compared at the plain CE with the frozen head, from the logits:

* ``ce+del (logits API)``: ``digit_entropy_loss(logits, ...)``, the API for code that only has logits (a plain
  gather, whose backward allocates a logits-sized gradient);
* ``ce+naive``: what a naive implementation costs, a re-implementation of the authors' per-number loop
  (PolyU-VCLab/DEL) fed from the logits: the shifted logits copied in float32, the ten digit columns indexed out
  of them, the labels brought to the host, numbers grouped in a Python loop, one small loss per number (at the
  smallest shape).

(ntloss is no longer compared: like the logits API it reads the logits, and what that costs, a logits-sized
gradient, is the logits API's row.)

The "term only" rows time the digit term alone (no CE, frozen head), DEL from the hidden states at every shape,
with its kernel launches and host synchronisations (``benchlib.op_census``; on a GPU it also runs once under
``torch.cuda.set_sync_debug_mode("error")``, ``cuda_sync_free``):
its absolute cost, far below the run-to-run noise of a whole step, so the most precise measure of what DEL adds;
at the smallest shape also the plugin's other digit criteria and the naive term from a logits leaf. Labels are
synthetic by default: words (random non-digit ids of the real tokenizer) and numbers of 1-6 digits, a fifth with
1-3 decimals, at the requested share of digit targets. ``--labels gsm8k`` takes real text instead: GSM8K train
solutions tokenised with the case's tokenizer, packed back to back (:func:`gsm8k_labels`), which is what a
tokenizer with number tokens (Llama-3's '123', ``--tokenizer llama-bpe``) needs, since its numbers are cut by the
tokenizer itself; ``bench/number_tokens.py`` runs it at Llama-3-8B's shape.

Run ``python bench/loss_step.py --help``; ``bench/run_all.py`` runs it with the defaults and writes
``bench/results/loss_step.json``.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

import benchlib  # noqa: E402

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
        return ALPHA * digit_criterion_sums(criterion, targets, self.places).loss / self.units[criterion].clamp(min=1)

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
            loss = loss + ALPHA * digit_criterion_sums("del", digits, self.places).loss / self.n_digits.clamp(min=1)
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


# ---------------------------------------------------------------------------------------------------- bench
def parse_shape(text: str) -> tuple[int, int]:
    try:
        tokens, vocab_size = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a shape as TOKENSxVOCAB, e.g. 2048x32000") from None
    if tokens <= 0 or tokens % SEQ_LEN:
        raise argparse.ArgumentTypeError(f"{text}: tokens must be a positive multiple of the sequence length {SEQ_LEN}")
    return tokens, vocab_size


def estimated_need_bytes(tokens: int, vocab_size: int, hidden: int, element_size: int = 4) -> int:
    """What the hungriest method needs on the CPU: the logits (in the step's dtype) and up to four float32 buffers
    of their size (the logits API and the naive term: CE's log-probs and gradient, a logits-sized gather gradient,
    their sum), and the head weight with its gradient; twice that for the heap's fragmentation (see
    STEADY_STATE_MALLOC)."""
    return 2 * (tokens * vocab_size * (element_size + 4 * 4) + 2 * vocab_size * hidden * element_size)


def run(args) -> dict:
    """Every shape of ``args.shapes`` in this process."""
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    results = {
        "machine": benchlib.machine_info(),
        "memory_validation": benchlib.validate_memory_measurement(device),
        "alpha": ALPHA,
        "seq_len": SEQ_LEN,
        "hidden_size": args.hidden,
        "dtype": args.dtype,
        "digit_fraction": args.fraction if args.labels == "synthetic" else None,
        "labels": args.labels,
        "cases": [],
        "skipped": [],
    }
    results["machine"]["device"] = str(device)
    smallest = min(args.all_shapes, key=lambda s: s[0] * s[1])
    ce_losses = {"plain": plain_ce_loss(), "chunked": axolotl_chunked_ce_loss()}
    bar = tqdm(total=len(args.shapes), desc="loss step", unit="shape", file=sys.stdout, disable=args.quiet)
    for tokens, vocab_size in args.shapes:
        tok_name = args.tokenizer or TOKENIZER_FOR_VOCAB.get(vocab_size, "llama-spm")
        reason = memory_shortfall(args, device, dtype, tokens, vocab_size)
        if reason:
            results["skipped"].append({"tokens": tokens, "vocab_size": vocab_size, "reason": reason})
            tqdm.write(f"skipping {tokens}x{vocab_size}: {reason}")
            bar.update(1)
            continue
        case = build_case(args, tok_name, tokens, vocab_size, device, dtype, ce_losses)
        # the naive reference reads single digits only
        extras = (args.extras_all_shapes or (tokens, vocab_size) == smallest) and not args.no_extras
        extras = extras and case.vocab.max_digits == 1
        rounds = args.rounds if (tokens, vocab_size) == smallest else args.rounds_large
        results["cases"].append(bench_case(case, tokens, vocab_size, tok_name, device, rounds, extras, args, bar))
        bar.update(1)
        del case
        gc.collect()
    bar.close()
    return results


def memory_shortfall(args, device: torch.device, dtype: torch.dtype, tokens: int, vocab_size: int) -> str | None:
    """Why a CPU shape is not run (its estimated need past --max-memory-fraction of the available RAM), or None."""
    available = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else benchlib.mem_available_bytes()
    need = estimated_need_bytes(tokens, vocab_size, args.hidden, torch.empty((), dtype=dtype).element_size())
    if device.type == "cpu" and available is not None and need > args.max_memory_fraction * available:
        return (
            f"needs ~{need / 2**30:.0f} GiB (the logits and four float32 buffers of {tokens:,} x "
            f"{vocab_size:,}, fragmented), "
            f"{available / 2**30:.0f} GiB of RAM available"
        )
    return None


def build_case(args, tok_name: str, tokens: int, vocab_size: int, device, dtype, ce_losses: dict) -> Case:
    """The tokenizer's digits and labels (--labels) and random hidden states and head for one shape."""
    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    tokenizer = load_tokenizer(tok_name)
    vocab = DigitVocab.from_tokenizer(tokenizer, name=tok_name)
    digit_ids = list(vocab.family_token_ids[0])
    if args.labels == "gsm8k":
        labels = gsm8k_labels(tokenizer, tokens // SEQ_LEN, SEQ_LEN)
    else:
        words = word_token_ids(tokenizer, digit_ids, vocab.decimal_point_id)
        labels = synthetic_labels(
            tokens // SEQ_LEN, SEQ_LEN, digit_ids, vocab.decimal_point_id, words, args.fraction, seed=1
        )
    # the model's vocabulary can be smaller than the tokenizer's (Llama-3: 128,256 logits, and the GGUF
    # tokenizer's 128,257th token '<|endoftext|>'): what must fit are the ids the step reads
    largest = max(int(labels.max()), max(vocab.number_row_ids))
    if largest >= vocab_size:
        raise ValueError(f"{tok_name}: token id {largest} (a label or a digit row) is outside {vocab_size} logits")
    gen = torch.Generator().manual_seed(0)
    # logits h . W^T of standard deviation ~2, as in the previous logits benchmark
    hidden = torch.randn(tokens, args.hidden, generator=gen).to(device, dtype)
    weight = (torch.randn(vocab_size, args.hidden, generator=gen) * (2 / math.sqrt(args.hidden))).to(device, dtype)
    return Case(hidden, weight, labels, vocab, digit_ids, vocab.decimal_point_id, ce_losses)


def bench_case(case: Case, tokens, vocab_size, tok_name, device, rounds, extras, args, bar) -> dict:
    fns = case.methods(extras)
    label = f"{tokens}x{vocab_size}"
    head_bytes = case.parameter.numel() * case.parameter.element_size()
    # torch.compile of the chunked CE happens on its first call: outside the memory measurement
    bar.set_postfix_str(f"{label} compiling the chunked CE")
    fns[method_name("chunked", "frozen", "ce")]()
    case.clear_grad()
    profiles = profile_methods(case, fns, label, device, head_bytes, bar)
    # each CE + X runs right beside its CE: a per-round ratio compares runs seconds apart
    groups = {}
    for name in fns:
        groups.setdefault(name.split(": ", 1)[0], []).append(name)
    timings = benchlib.interleaved_rounds(
        fns,
        rounds,
        device,
        after_each=case.clear_grad,
        groups=list(groups.values()),
        progress=lambda s: bar.set_postfix_str(f"{label} {s}"),
    )
    # every way of computing DEL must give the same loss, or comparing their cost means nothing
    check_same_terms(profiles["values"], label)
    out = {
        "tokens": tokens,
        "vocab_size": vocab_size,
        "hidden_size": case.hidden.shape[-1],
        "tokenizer": tok_name,
        "digit_share_measured": round(float(case.n_digits) / float(case.num_items), 4),
        "max_token_digits": case.vocab.max_digits,
        "label_targets": int(case.num_items),
        "digit_targets": int(case.n_digits),
        "targets_by_digits": case.targets_by_digits,
        "rounds": rounds,
        "logits_bytes": tokens * vocab_size * case.hidden.element_size(),
        "head_bytes": head_bytes,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "methods": {name: method_row(name, timings, profiles) for name in fns},
    }
    out["term_only"] = term_only(case, label, bar, max(rounds, 5), extras)
    return out


def profile_methods(case: Case, fns: dict, label: str, device, head_bytes: int, bar) -> dict[str, dict]:
    """The first run of each method, profiled for its memory (also the first warm-up: caches, heap growth): per
    kind ("memory", "head_sized", "values", "live"), the value of each method."""
    profiles = {"memory": {}, "head_sized": {}, "values": {}, "live": {}}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} memory {name}")
        box = {}
        profile = benchlib.memory_profile(lambda box=box, fn=fn: box.setdefault("v", fn()), device)
        profiles["memory"][name] = profile.peak
        profiles["live"][name] = profile.live_at_peak
        profiles["head_sized"][name] = (
            sum(1 for s in profile.sizes if s == head_bytes) if device.type == "cpu" else None
        )
        profiles["values"][name] = float(box["v"])
        case.clear_grad()
    return profiles


def method_row(name: str, timings, profiles: dict[str, dict]) -> dict:
    """One method's times and memory, each beside its CE's (same kernel, same head)."""
    memory, live = profiles["memory"], profiles["live"]
    kind, rest = name.split(" CE, ", 1)
    head, loss = rest.split(" head: ", 1)
    baseline = method_name(kind, head, "ce")
    return {
        "ce": kind,
        "head": head,
        "loss": loss,
        "baseline": baseline,
        "median_wall_s": timings.median(name, "wall"),
        "median_cpu_s": timings.median(name, "cpu"),
        "median_user_s": timings.median(name, "user"),
        "time_ratio_wall": timings.ratio(name, baseline, "wall"),
        "time_ratio_cpu": timings.ratio(name, baseline, "cpu"),
        "time_ratio_user": timings.ratio(name, baseline, "user"),
        "peak_bytes": memory[name],
        "memory_ratio": memory[name] / memory[baseline],
        "extra_peak_bytes": memory[name] - memory[baseline],
        "head_sized_allocations": profiles["head_sized"][name],
        # what is live at the peak (CPU): the largest allocations and where they were made; beside CE, the
        # ones this method adds to CE's peak (and CE's that are not live at this one's: the peak moved)
        "live_at_peak": benchlib.summarize_live(live[name]),
        **extra_live(live[name], live[baseline], name == baseline),
        "value": profiles["values"][name],
        "wall_s": timings.wall[name],
        "cpu_s": timings.cpu[name],
        "user_s": timings.user[name],
    }


def extra_live(live: list, baseline: list, is_baseline: bool) -> dict:
    if is_baseline:
        return {}
    added, removed = benchlib.live_difference(live, baseline)
    return {
        "extra_live_at_peak": benchlib.summarize_live(added, top=20),
        "baseline_live_not_at_peak": benchlib.summarize_live(removed, top=5),
    }


def check_same_terms(values: dict[str, float], label: str) -> None:
    """CE + DEL minus CE, for every kernel and head, and the logits-fed DEL terms must agree (to 1e-3; the logits
    API on bfloat16 logits differed from DEL's float32 product by 1.6e-4 at 2,048 x 128,256, H 4,096)."""
    terms = {}
    for name, value in values.items():
        kind, rest = name.split(" CE, ", 1)
        head, loss = rest.split(" head: ", 1)
        if loss in ("ce+del", "ce+del (logits API)", "ce+naive"):
            terms[name] = value - values[method_name(kind, head, "ce")]
    reference = terms[method_name("plain", "frozen", "ce+del")]
    for name, term in terms.items():
        if not math.isclose(term, reference, rel_tol=1e-3, abs_tol=1e-5):
            raise AssertionError(f"{label}: {name} adds {term}, plain CE + DEL from the hidden states {reference}")


def term_only(case: Case, label: str, bar, rounds: int, extras: bool) -> dict:
    logits_leaf = None
    if extras:
        logits_leaf = F.linear(case.hidden.detach(), case.head["frozen"]).view(*case.batch_shape, -1)
        logits_leaf.requires_grad_(True)

    def clear():
        case.clear_grad()
        if logits_leaf is not None:
            logits_leaf.grad = None

    fns = case.term_fns(logits_leaf)
    memory, values, live, allocated = term_memory(fns, case.hidden.device, label, bar, clear)
    # what a GPU would launch and wait for (benchlib.op_census): on a GPU the term is small ops, not arithmetic
    census = {}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} term only, ops {name}")
        census[name] = benchlib.op_census(fn).as_dict()
        clear()
    sync_free = None
    if case.hidden.device.type == "cuda":  # any call that waits for the device raises, forward or backward
        sync_free = cuda_sync_free(fns["del"])
        clear()
    naive = values.get("naive (from logits)", values["del"])
    if not math.isclose(naive, values["del"], rel_tol=1e-4, abs_tol=1e-6):
        raise AssertionError(f"{label}: naive term {naive} != our DEL term {values['del']}")
    # ours costs milliseconds, so one stall of the machine moves its median: at least five rounds
    timings = benchlib.interleaved_rounds(
        fns,
        rounds,
        case.hidden.device,
        after_each=clear,
        progress=lambda s: bar.set_postfix_str(f"{label} term only {s}"),
    )
    out = {
        name: {
            "median_wall_s": timings.median(name, "wall"),
            "median_cpu_s": timings.median(name, "cpu"),
            "median_user_s": timings.median(name, "user"),
            "peak_bytes": memory[name],
            "allocated_bytes": allocated[name],
            "live_at_peak": benchlib.summarize_live(live[name]),
            "value": values[name],
            "launches": census[name]["launches"],
            "host_syncs": census[name]["syncs"] + census[name]["host_reads"],
            "ops": census[name],
        }
        for name in fns
    }
    out["del"]["cuda_sync_free"] = sync_free
    if logits_leaf is not None:
        out["naive_over_ours_cpu"] = timings.ratio("naive (from logits)", "del", "cpu")
        out["naive_over_ours_wall"] = timings.ratio("naive (from logits)", "del", "wall")
        out["naive_over_ours_user"] = timings.ratio("naive (from logits)", "del", "user")
    return out


def term_memory(fns: dict, device, label: str, bar, clear: Callable[[], None]) -> tuple[dict, dict, dict, dict]:
    """Each term's first run, profiled: (peak bytes, value, live at the peak, bytes allocated), per term."""
    memory, values, live, allocated = {}, {}, {}, {}
    for name, fn in fns.items():
        bar.set_postfix_str(f"{label} term only, memory {name}")
        box = {}
        profile = benchlib.memory_profile(lambda box=box, fn=fn: box.setdefault("v", fn()), device)
        memory[name], live[name], allocated[name] = profile.peak, profile.live_at_peak, sum(profile.sizes)
        values[name] = float(box["v"])
        clear()
    return memory, values, live, allocated


def cuda_sync_free(fn: Callable[[], object]) -> bool | str:
    """Run ``fn`` once under ``torch.cuda.set_sync_debug_mode("error")``: True when nothing in it (forward, and the
    backward on autograd's device thread) waited for the device, else the error that named the first wait."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as error:
        if "synchroniz" not in str(error):
            raise
        return str(error).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return True


def del_rows(results: dict):
    """(case, CE+DEL method, CE method) for every shape, CE kind and head."""
    for case in results["cases"]:
        for kind in CE_KINDS:
            for head in HEADS:
                yield (
                    case,
                    case["methods"][method_name(kind, head, "ce+del")],
                    case["methods"][method_name(kind, head, "ce")],
                )


def evaluate_targets(results: dict) -> dict:
    """The targets, judged on process CPU time (see the docs: wall time on a shared machine measures the other
    tenants); user-CPU and wall-time verdicts are reported beside them."""
    rows = list(del_rows(results))
    dels = [m for _, m, _ in rows]
    out = {}
    for kind in CE_KINDS:
        for head in HEADS:
            sel = [m for m in dels if m["ce"] == kind and m["head"] == head]
            key = f"{kind}_{head}"
            out[f"{key}_memory_ratio_max"] = max((m["memory_ratio"] for m in sel), default=None)
            out[f"{key}_time_ratio_cpu_max"] = max((m["time_ratio_cpu"] for m in sel), default=None)
            out[f"{key}_time_ratio_user_max"] = max((m["time_ratio_user"] for m in sel), default=None)
    trainable = [(c, m, ce) for c, m, ce in rows if m["head"] == "trainable"]
    api = [c["methods"][method_name("plain", "frozen", "ce+del (logits API)")] for c in results["cases"]]
    speedups = [
        c["term_only"]["naive_over_ours_cpu"]
        for c in results["cases"]
        if "naive_over_ours_cpu" in c.get("term_only", {})
    ]
    out.update(
        {
            "memory_le_1.02_every_case": bool(dels) and all(m["memory_ratio"] <= 1.02 for m in dels),
            "time_le_1.05_every_case_cpu": bool(dels) and all(m["time_ratio_cpu"] <= 1.05 for m in dels),
            "time_le_1.05_every_case_user": bool(dels) and all(m["time_ratio_user"] <= 1.05 for m in dels),
            "time_le_1.05_every_case_wall": bool(dels) and all(m["time_ratio_wall"] <= 1.05 for m in dels),
            # a trainable head: CE + DEL makes as many [V, H]-sized allocations as CE (its one weight gradient)
            "no_extra_head_sized_allocation": None
            if any(m["head_sized_allocations"] is None for _, m, _ in trainable)
            else bool(trainable)
            and all(m["head_sized_allocations"] == ce["head_sized_allocations"] for _, m, ce in trainable),
            "trainable_head_extra_peak_over_head_bytes_max": max(
                (m["extra_peak_bytes"] / c["head_bytes"] for c, m, _ in trainable), default=None
            ),
            # DEL's own CPU time (timed alone, many rounds) over the CE step's: what it adds, below the steps' noise
            "del_alone_over_ce_cpu_max": max(
                (c["term_only"]["del"]["median_cpu_s"] / ce["median_cpu_s"] for c, _, ce in rows if "term_only" in c),
                default=None,
            ),
            "logits_api_memory_ratio_max": max((m["memory_ratio"] for m in api), default=None),
            "logits_api_time_ratio_cpu_max": max((m["time_ratio_cpu"] for m in api), default=None),
            "naive_term_over_ours_min_cpu": min(speedups, default=None),
            "ten_times_faster_than_naive_cpu": bool(speedups) and min(speedups) >= 10,
            "every_shape_measured": not results["skipped"],
            # on a GPU: the term alone ran under torch.cuda.set_sync_debug_mode("error") without an error
            "term_cuda_sync_free": None
            if all(c["term_only"]["del"].get("cuda_sync_free") is None for c in results["cases"])
            else all(c["term_only"]["del"].get("cuda_sync_free") is True for c in results["cases"]),
        }
    )
    return out


def run_isolated(args, argv: list[str]) -> dict:
    """Each shape in its own process, with STEADY_STATE_MALLOC, merged."""
    import json
    import subprocess
    import tempfile

    env = {**os.environ, **STEADY_STATE_MALLOC}
    merged = None
    with tempfile.TemporaryDirectory() as tmp:
        for tokens, vocab_size in args.shapes:
            out = Path(tmp) / f"{tokens}x{vocab_size}.json"
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                *argv,
                "--worker",
                "--shapes",
                f"{tokens}x{vocab_size}",
                "--all-shapes",
                *[f"{t}x{v}" for t, v in args.shapes],
                "--out",
                str(out),
            ]
            proc = subprocess.run(cmd, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"the loss bench for {tokens}x{vocab_size} failed (exit {proc.returncode})")
            part = json.loads(out.read_text())
            if merged is None:
                worker_machine = part["machine"]
                merged = part
                merged["machine"] = {
                    **benchlib.machine_info(),
                    "device": worker_machine["device"],
                    "torch_threads": worker_machine["torch_threads"],
                    "malloc_env": STEADY_STATE_MALLOC,
                }
            else:
                merged["cases"] += part["cases"]
                merged["skipped"] += part["skipped"]
    return merged


# glibc serves tensors over 32 MiB with mmap and gives them back on free, so every step faults its buffers in
# again and the kernel clears them: system time of 0.7 s per 2,048 x 32,000 step here, and with transparent huge
# pages (THP_MEM_ALLOC_ENABLE=1) 0.1-3.6 s, erratic, as the kernel compacts memory for the other tenants. glibc
# keeps freed memory in its heap below these thresholds (4 GiB per allocation, 64 GiB before trimming), so after
# the first steps every buffer is reused and the system time drops to ~0, as in a long training loop. The price
# is fragmentation: the 2,048 x 151,936 worker's resident set peaks at ~12 GB for ~5 GB of live tensors, and so
# the largest shapes stay off this machine (it fragmented a 16,384 x 32,000 logits run past 22 GB).
MIB = 2**20
STEADY_STATE_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(4 * 2**30), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**30)}


def tables(results: dict) -> str:
    skipped = "".join(f"\n- {s['tokens']:,} x {s['vocab_size']:,}: not run, {s['reason']}" for s in results["skipped"])
    return (
        f"{step_table(results)}\n\nCompared, at the plain CE with the frozen head (terms read from the logits):\n\n"
        f"{comparison_table(results)}\n\nThe digit term alone (forward + backward, no CE, frozen head; launches and "
        f"host syncs as `benchlib.op_census` counts them: what a GPU would launch and wait for):\n\n"
        f"{term_table(results)}\n{skipped}\n"
    )


def shape_cell(case: dict) -> str:
    return f"{case['tokens']:,} x {case['vocab_size']:,}"


def step_table(results: dict) -> str:
    """CE + DEL beside CE, per shape, CE kind and head: time (CPU, user, wall), DEL alone, peak memory."""
    rows = []
    for case, m, ce in del_rows(results):
        alone = case.get("term_only", {}).get("del")
        rows.append(
            [
                shape_cell(case),
                m["ce"],
                m["head"],
                f"{ce['median_cpu_s'] * 1e3:,.0f}",
                f"{m['median_cpu_s'] * 1e3:,.0f}",
                f"**{m['time_ratio_cpu']:.3f}**",
                f"{m['time_ratio_user']:.3f}",
                f"{m['time_ratio_wall']:.3f}",
                "" if alone is None else f"+{alone['median_cpu_s'] / ce['median_cpu_s']:.2%}",
                f"{ce['peak_bytes'] / MIB:,.1f}",
                f"{m['peak_bytes'] / MIB:,.1f}",
                f"**{m['memory_ratio']:.4f}**",
                f"{ce['head_sized_allocations']} / {m['head_sized_allocations']}",
            ]
        )
    header = ["tokens x V", "CE", "head", "CE CPU ms", "CE+DEL CPU ms", "time / CE (CPU)", "(user CPU)", "(wall)"]
    header += [
        "DEL alone / CE (CPU)",
        "CE peak MiB",
        "CE+DEL peak MiB",
        "memory / CE",
        "[V, H] allocations CE / CE+DEL",
    ]
    return benchlib.markdown_table(header, rows)


def comparison_table(results: dict) -> str:
    """Every loss beside the plain CE with the frozen head."""
    rows = [
        [
            shape_cell(case),
            m["loss"],
            f"{m['median_cpu_s'] * 1e3:,.0f}",
            f"{m['time_ratio_cpu']:.3f}",
            f"{m['time_ratio_user']:.3f}",
            f"{m['time_ratio_wall']:.3f}",
            f"{m['peak_bytes'] / MIB:,.1f}",
            f"{m['memory_ratio']:.4f}",
        ]
        for case in results["cases"]
        for m in case["methods"].values()
        if m["ce"] == "plain" and m["head"] == "frozen" and m["loss"] != "ce"
    ]
    header = ["tokens x V", "loss (plain CE, frozen head)", "CPU ms", "time / CE (CPU)", "(user CPU)", "(wall)"]
    return benchlib.markdown_table(header + ["peak MiB", "memory / CE"], rows)


def term_table(results: dict) -> str:
    """Each digit term alone: time, peak memory, launches and host syncs; the naive term over ours."""
    rows = []
    for case in results["cases"]:
        t = case.get("term_only")
        if not t:
            continue
        for name, m in t.items():
            if not isinstance(m, dict):
                continue
            rows.append(
                [
                    shape_cell(case),
                    name,
                    f"{m['median_cpu_s'] * 1e3:,.1f}",
                    f"{m['median_wall_s'] * 1e3:,.1f}",
                    f"{m['peak_bytes'] / MIB:,.1f}",
                    m.get("launches", ""),
                    m.get("host_syncs", ""),
                ]
            )
        if "naive_over_ours_cpu" in t:
            ratios = [f"**{t['naive_over_ours_cpu']:.0f}x**", f"{t['naive_over_ours_wall']:.0f}x"]
            rows.append([shape_cell(case), "naive / del", *ratios, "", "", ""])
    header = ["tokens x V", "term", "CPU ms", "wall ms", "peak MiB", "launches", "host syncs"]
    return benchlib.markdown_table(header, rows)


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    args.all_shapes = args.all_shapes or args.shapes
    if args.worker:
        benchlib.write_json(args.out, run(args))
        return {}
    if args.device == "cpu" and not args.in_process:
        # drop our --shapes/--out: each worker gets its own
        passthrough = _without_options([a for a in argv if a != "--in-process"], ("--shapes", "--out"))
        results = run_isolated(args, passthrough)
    else:
        results = run(args)
    results["targets"] = evaluate_targets(results)
    return benchlib.publish(args.out, results, tables)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_options(parser)
    add_run_options(parser)
    return parser


def add_case_options(parser: argparse.ArgumentParser) -> None:
    """The shapes, the data and the dtype measured."""
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=parse_shape,
        default=[parse_shape(s) for s in DEFAULT_SHAPES],
        help=f"TOKENSxVOCAB, tokens a multiple of {SEQ_LEN} (default: {' '.join(DEFAULT_SHAPES)})",
    )
    parser.add_argument("--hidden", type=int, default=DEFAULT_HIDDEN, help="hidden size H (default %(default)s)")
    parser.add_argument(
        "--fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help="share of digit targets (default %(default)s; DEL's cost does not depend on it)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds at the smallest shape")
    parser.add_argument("--rounds-large", type=int, default=3, help="timed rounds at the other shapes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dtype", default=None, help="hidden states and head dtype (default: bfloat16 on CUDA, float32 on CPU)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU intra-op threads (default 1: on a shared machine, a second thread makes every "
        "small op wait for a time slice; 0 = torch's default)",
    )
    parser.add_argument("--tokenizer", default=None, help="one tokenizer for every shape (default: by vocabulary)")
    parser.add_argument(
        "--labels",
        choices=LABELS,
        default="synthetic",
        help="synthetic words and numbers at --fraction digits (default), or GSM8K train solutions tokenised with "
        "the tokenizer, packed (the data's own share of digits; needed for number tokens)",
    )


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """What else runs, where the results go, and the workers' own options."""
    parser.add_argument(
        "--no-extras",
        action="store_true",
        help="no naive comparison and no other criteria's term-only rows, even at the smallest shape (they are "
        "never run with number tokens: the naive reference reads single digits)",
    )
    parser.add_argument(
        "--extras-all-shapes",
        action="store_true",
        help="the naive comparison and the other criteria's term-only rows at every shape (default: the smallest)",
    )
    parser.add_argument(
        "--max-memory-fraction",
        type=float,
        default=0.85,
        help="skip a CPU shape whose estimated need exceeds this share of MemAvailable",
    )
    parser.add_argument("--in-process", action="store_true", help="all shapes in this process, default malloc")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "loss_step.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--all-shapes", nargs="+", type=parse_shape, default=None, help=argparse.SUPPRESS)


def _without_options(argv: list[str], options: tuple[str, ...]) -> list[str]:
    out, skipping = [], False
    for arg in argv:
        if arg.startswith("--"):
            skipping = arg.split("=")[0] in options
            if skipping:
                continue
        elif skipping:
            continue
        out.append(arg)
    return out


if __name__ == "__main__":
    main()
