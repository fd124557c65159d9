"""Loss-step benchmark: forward + backward of the loss from logits that require grad, CE alone vs CE + X.

Baseline: cross-entropy exactly as Axolotl gets it from transformers (``ForCausalLMLoss``: ``logits.float()``, labels
shifted with a pad, ``cross_entropy(reduction="sum") / num_items_in_batch``). Compared, each added to that CE:

* ``del``: DEL as ``DELTrainer`` computes it (``gather_digit_targets(..., gradient="in_place")``, the collator's
  places, ``place_weights``, ``del_token_losses``, divided by the step's digit count); ``del, sparse gradient``:
  the same with the standalone default ``gradient="sparse"`` (the trainer's path before commit 8316db9);
* ``ntl_was`` / ``ntl_mse``: ``ntloss.NTLoss`` / ``NTLossDotProduct`` (``digit_level=True, reweigh=False``) with the
  real tokenizer of that vocabulary;
* ``naive``: a re-implementation of the reference code's approach (the authors' code is not public; this follows
  the issue's description of it): the shifted logits copied in float32, the ten digit columns indexed out of the
  full logits, the labels brought to the host, numbers grouped in a Python loop, one small loss per number;
* every criterion of ``del_plugin.core.criteria`` when that module exists (see :func:`plugin_criteria`).

The "term only" rows time the digit term alone (no CE) for ours and the naive one: what each adds to CE.
Labels are synthetic: words (random non-digit ids of the real tokenizer) and numbers of 1-6 digits, a fifth with
1-3 decimals, at the requested fraction of digit targets.

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
from functools import partial
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from tqdm import tqdm  # noqa: E402

import benchlib  # noqa: E402

ALPHA = 0.3  # the weight of the added term (DEL's and NTL's recommended order of magnitude)
SEQ_LEN = 2048
# vocabulary size -> the tokenizer of models with that many logits (Llama-2/Mistral; Qwen2/2.5)
TOKENIZER_FOR_VOCAB = {32_000: "llama-spm", 151_936: "qwen2"}
DEFAULT_SHAPES = ["4096x32000", "16384x32000", "4096x151936", "16384x151936"]
DEFAULT_FRACTIONS = [0.1, 0.3]


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


def word_token_ids(tokenizer, digit_ids: list[int], dot_id: int | None) -> torch.Tensor:
    """Ordinary tokens: no digit, no special token, no '.' (so no token can read as a decimal point, such as
    ')$.' before digits: the naive re-implementation knows only the bare '.')."""
    special = set(tokenizer.all_special_ids)
    vocab = tokenizer.get_vocab()
    ids = [
        i for tok, i in vocab.items()
        if i not in special and i != dot_id and "." not in tok and not any(ch.isdigit() for ch in tok)
        and i not in digit_ids
    ]
    return torch.tensor(sorted(ids)[:20000])


# ---------------------------------------------------------------------------------------------------- losses
def ce_loss(logits: torch.Tensor, labels: torch.Tensor, num_items: torch.Tensor) -> torch.Tensor:
    """Cross-entropy the way Axolotl's model computes it (transformers' ForCausalLMLoss)."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    return ForCausalLMLoss(logits, labels, vocab_size=logits.shape[-1], num_items_in_batch=num_items)


def del_term(logits, aligned, places, vocab, n_digits, gradient: str = "in_place") -> torch.Tensor:
    """DEL exactly as DELTrainer.compute_loss adds it (places come from the collator, off the step).

    ``gradient="in_place"`` is the trainer's path (DEL's gradient scatter-added into CE's); ``"sparse"`` is the
    default of ``gather_digit_targets`` for DEL on its own, and the trainer's path before commit 8316db9.
    """
    from del_plugin.core import PlaceWeighting, del_token_losses, gather_digit_targets, place_weights

    targets = gather_digit_targets(logits, aligned, vocab, gradient=gradient)
    weights = place_weights(places, PlaceWeighting())
    return ALPHA * del_token_losses(targets, weights).sum() / n_digits.clamp(min=1)


def naive_reference_term(
    logits: torch.Tensor, labels: torch.Tensor, digit_ids: list[int], dot_id: int,
    integer_slope: float = 2.0, decimal_base: float = 1.02,
) -> torch.Tensor:
    """The reference approach: full float copy, per-number Python loop, host synchronisation per batch.

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
            while t < len(row) and (row[t] in value_of or (row[t] == dot_id and point is None
                                                           and t + 1 < len(row) and row[t + 1] in value_of)):
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


# ---------------------------------------------------------------------------------------------------- criteria
# hidden size of a small model with that vocabulary (TinyLlama-1.1B; Qwen2.5-0.5B): EMO's cost embedding is [V, H]
EMO_HIDDEN = {32_000: 2048, 151_936: 896}


def plugin_criteria(vocab, vocab_size: int) -> tuple[dict[str, Callable], dict[str, Callable]]:
    """The plugin's other criteria, from the registry of ``del_plugin.core.criteria`` when that module exists.

    Returns (digit terms added to CE: ``term(logits, aligned, places, n_digits)``, token losses that replace CE:
    ``loss(logits, aligned, num_items)``). ``del`` has its own row and ``mle`` is CE itself, so both are left out.
    """
    try:
        from del_plugin.core import criteria as module
    except ImportError:
        return {}, {}
    from del_plugin.core import gather_digit_targets

    digit: dict[str, Callable] = {}
    if hasattr(module, "digit_criterion_token_losses"):
        for name in getattr(module, "DIGIT_CRITERIA", ()):
            if name == "del":
                continue

            def term(logits, aligned, places, n_digits, name=name):
                targets = gather_digit_targets(logits, aligned, vocab)
                per_token = module.digit_criterion_token_losses(name, targets, places)
                return ALPHA * per_token.sum() / n_digits.clamp(min=1)

            digit[name] = term
    token: dict[str, Callable] = {}
    if hasattr(module, "criterion_token_losses"):
        for name in getattr(module, "TOKEN_CRITERIA", ()):
            kwargs = {}
            if name == "emo":
                hidden = EMO_HIDDEN.get(vocab_size, 1024)
                gen = torch.Generator().manual_seed(0)
                kwargs["cost_embedding"] = module.emo_cost_embedding(torch.randn(vocab_size, hidden, generator=gen))

            def loss(logits, aligned, num_items, name=name, kwargs=kwargs):
                # alpha = 1: the criterion as published, in place of cross-entropy
                terms = module.criterion_token_losses(name, logits, aligned, alpha=1.0, **kwargs)
                return terms.loss.sum() / num_items

            token[name] = loss
    return digit, token


# ---------------------------------------------------------------------------------------------------- bench
def parse_shape(text: str) -> tuple[int, int]:
    try:
        tokens, vocab_size = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a shape as TOKENSxVOCAB, e.g. 4096x32000") from None
    if tokens <= 0 or tokens % SEQ_LEN:
        raise argparse.ArgumentTypeError(f"{text}: tokens must be a positive multiple of the sequence length {SEQ_LEN}")
    return tokens, vocab_size


def estimated_need_bytes(tokens: int, vocab_size: int) -> int:
    """What the hungriest method needs on the CPU: the logits and up to five more float32 buffers of their size
    (naive: float copy, full-size index gradient, CE's log-probs and gradient; measured below in each case)."""
    return 6 * tokens * vocab_size * 4


class Case:
    """One shape and digit fraction: the inputs, built once, and a closure per method.

    ``leaf`` is the ``[B, T, V]`` tensor that receives the gradient. Every step starts from ``leaf.view(...)``, a
    non-leaf tensor as the LM head's output is, so that gradients meet in the same kind of autograd buffer as in
    training. The "term only" runs use the leaf itself (DEL's sparse gradient cannot flow back through a view).
    """

    def __init__(self, leaf, labels, vocab, digit_ids, dot_id, ntl_losses, digit_criteria, token_criteria):
        from del_plugin.core import NOT_A_DIGIT, next_token_places, shift_to_next_token

        self.leaf = leaf
        self.labels = labels.to(leaf.device)
        self.aligned = shift_to_next_token(self.labels, -100)
        # what NumberSpanCollator and DELTrainer.get_batch_samples hand to the step (computed off the step)
        self.places = next_token_places(labels, vocab).to(leaf.device)
        self.num_items = (self.aligned != -100).sum()
        self.n_digits = (self.places != NOT_A_DIGIT).sum()
        self.vocab, self.digit_ids, self.dot_id = vocab, digit_ids, dot_id
        self.ntl, self.digit_criteria, self.token_criteria = ntl_losses, digit_criteria, token_criteria

    def ce(self, logits):
        return ce_loss(logits, self.labels, self.num_items)

    def ours(self, logits):
        return del_term(logits, self.aligned, self.places, self.vocab, self.n_digits)

    def ours_sparse(self, logits):
        return del_term(logits, self.aligned, self.places, self.vocab, self.n_digits, gradient="sparse")

    def naive(self, logits):
        return naive_reference_term(logits, self.labels, self.digit_ids, self.dot_id)

    def _step(self, loss_fn: Callable[[torch.Tensor], torch.Tensor], *, from_leaf: bool = False) -> torch.Tensor:
        logits = self.leaf if from_leaf else self.leaf.view(self.leaf.shape)
        loss = loss_fn(logits)
        loss.backward()
        return loss.detach()

    def step_fns(self, with_criteria: bool) -> dict[str, Callable[[], torch.Tensor]]:
        added = {"del": self.ours, "naive": self.naive}
        for name, ntl in self.ntl.items():
            added[name] = lambda logits, ntl=ntl: ALPHA * ntl(logits, self.aligned)
        if with_criteria:
            for name, term in self.digit_criteria.items():
                added[f"{name} (plugin)"] = lambda logits, term=term: term(
                    logits, self.aligned, self.places, self.n_digits)
        added["del, sparse gradient"] = self.ours_sparse
        fns = {"ce": partial(self._step, self.ce)}
        for name, term in added.items():
            fns[f"ce+{name}"] = partial(self._step, lambda logits, term=term: self.ce(logits) + term(logits))
        return fns

    def token_criterion_fns(self) -> dict[str, Callable[[], torch.Tensor]]:
        return {f"{name} (plugin, replaces CE)": partial(
                    self._step, lambda logits, loss=loss: loss(logits, self.aligned, self.num_items))
                for name, loss in self.token_criteria.items()}

    def term_fns(self) -> dict[str, Callable[[], torch.Tensor]]:
        # DEL alone: the sparse path (the in-place one needs another loss's gradient on the logits to add into)
        return {"del term only": partial(self._step, self.ours_sparse, from_leaf=True),
                "naive term only": partial(self._step, self.naive, from_leaf=True)}

    def clear_grad(self):
        self.leaf.grad = None


def accumulation_check(vocab, digit_ids, dot_id, words, vocab_size: int) -> dict:
    """How autograd adds DEL's gradient to CE's, per logits dtype: counts the logits-sized additions.

    The logits are a non-leaf ``[B, T, V]`` tensor (as the LM head's output is). ForCausalLMLoss flattens them with
    ``.view``; for float32 ``logits.float()`` is the same tensor, so CE's gradient reaches the logits as a *view*,
    which autograd never reuses in place: it allocates ``dense + sparse`` anew (a full copy). For bfloat16 the
    ``.float()`` copy's backward hands over a fresh tensor and the sparse gradient is added in place. The
    trainer's ``gradient="in_place"`` path adds with ``scatter_add_`` into CE's gradient (no ``add`` at all).
    """
    from torch.profiler import ProfilerActivity, profile

    batch, length = 2, 256
    labels = synthetic_labels(batch, length, digit_ids, dot_id, words, 0.3, seed=2)
    full = [[batch, length, vocab_size], [batch * length, vocab_size]]
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        leaf = torch.randn(batch, length, vocab_size).to(dtype).requires_grad_(True)
        case = Case(leaf, labels, vocab, digit_ids, dot_id, {}, {}, {})
        fns = case.step_fns(False)
        for name in ("ce+del", "ce+del, sparse gradient"):
            fns[name]()
            case.clear_grad()
            prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True)
            with benchlib.quiet_native_stderr():
                prof.start()
            try:
                fns[name]()
            finally:
                with benchlib.quiet_native_stderr():
                    prof.stop()
            case.clear_grad()
            counts = {"out_of_place_full_add": 0, "in_place_full_add": 0, "full_size_copies": 0}
            for event in prof.events():
                shapes = event.input_shapes or []
                nested = event.cpu_parent is not None and event.cpu_parent.name in ("aten::add", "aten::add_")
                if not shapes or shapes[0] not in full or nested:
                    continue
                if event.name == "aten::add":
                    counts["out_of_place_full_add"] += 1
                elif event.name == "aten::add_":
                    counts["in_place_full_add"] += 1
            counts["full_size_copies"] = sum(
                1 for e in prof.events() if e.name == "aten::copy_" and e.input_shapes and e.input_shapes[0] in full)
            out[f"{str(dtype).removeprefix('torch.')}, {name}"] = counts
    return out


def run(args) -> dict:
    """Every shape of ``args.shapes`` in this process."""
    from del_plugin.assets import load_tokenizer
    from del_plugin.core import DigitVocab

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    if device.type == "cpu" and args.threads:
        torch.set_num_threads(args.threads)
    results = {"machine": benchlib.machine_info(), "memory_validation": benchlib.validate_memory_measurement(device),
               "alpha": ALPHA, "seq_len": SEQ_LEN, "logits_dtype": args.dtype, "cases": [], "skipped": []}
    results["machine"]["device"] = str(device)
    smallest = min(t for t, _ in args.all_shapes)
    smallest_vocab = min(v for _, v in args.all_shapes)
    by_vocab: dict[int, list[int]] = {}
    for tokens, vocab_size in args.shapes:
        by_vocab.setdefault(vocab_size, []).append(tokens)
    bar = tqdm(total=len(args.shapes) * len(args.fractions), desc="loss step", unit="case", file=sys.stdout,
               disable=args.quiet)
    for vocab_size, token_counts in by_vocab.items():
        tok_name = args.tokenizer or TOKENIZER_FOR_VOCAB.get(vocab_size, "llama-spm")
        tokenizer = load_tokenizer(tok_name)
        if len(tokenizer) > vocab_size:
            raise ValueError(f"{tok_name} has {len(tokenizer)} tokens, more than the {vocab_size} logits")
        vocab = DigitVocab.from_tokenizer(tokenizer, name=tok_name)
        digit_ids = list(vocab.family_token_ids[0])
        words = word_token_ids(tokenizer, digit_ids, vocab.decimal_point_id)
        ntl_losses = ntl_criteria(tokenizer, vocab_size, tok_name)
        digit_criteria, token_criteria = ({}, {}) if args.no_criteria else plugin_criteria(vocab, vocab_size)
        if "accumulation" not in results and device.type == "cpu":
            results["accumulation"] = accumulation_check(
                vocab, digit_ids, vocab.decimal_point_id, words, vocab_size)
        for tokens in token_counts:
            available = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else benchlib.mem_available_bytes()
            need = estimated_need_bytes(tokens, vocab_size)
            if device.type == "cpu" and available is not None and need > args.max_memory_fraction * available:
                reason = (f"needs ~{need / 2**30:.0f} GiB (six float32 buffers of {tokens:,} x {vocab_size:,}), "
                          f"{available / 2**30:.0f} GiB of RAM available")
                for fraction in args.fractions:
                    results["skipped"].append(
                        {"tokens": tokens, "vocab_size": vocab_size, "digit_fraction": fraction, "reason": reason})
                    bar.update(1)
                tqdm.write(f"skipping {tokens}x{vocab_size}: {reason}")
                continue
            gen = torch.Generator().manual_seed(0)
            logits = torch.randn(tokens // SEQ_LEN, SEQ_LEN, vocab_size, generator=gen).mul_(2).to(device, dtype)
            logits.requires_grad_(True)
            for i, fraction in enumerate(args.fractions):
                labels = synthetic_labels(
                    tokens // SEQ_LEN, SEQ_LEN, digit_ids, vocab.decimal_point_id, words, fraction, seed=1)
                case = Case(logits, labels, vocab, digit_ids, vocab.decimal_point_id, ntl_losses, digit_criteria,
                            token_criteria)
                with_criteria = args.criteria_all_shapes or (tokens == smallest and vocab_size == smallest_vocab)
                with_token_criteria = args.criteria_all_shapes or (
                    tokens == smallest and vocab_size == smallest_vocab and i == 0)
                small = tokens * vocab_size <= 2e8
                results["cases"].append(bench_case(
                    case, tokens, vocab_size, fraction, tok_name, device,
                    args.rounds if small else args.rounds_large, with_criteria, with_token_criteria,
                    args.token_rounds, bar, warmup=small))
                bar.update(1)
                del case
                gc.collect()
            del logits
            gc.collect()
    bar.close()
    return results


def ntl_criteria(tokenizer, vocab_size: int, tok_name: str) -> dict[str, Callable]:
    import logging

    from ntloss import NTLoss, NTLossDotProduct

    logging.getLogger("ntloss").setLevel(logging.ERROR)
    out = {}
    for name, cls in (("ntl_was", NTLoss), ("ntl_mse", NTLossDotProduct)):
        size_before = len(tokenizer)
        loss = cls(tokenizer=tokenizer, vocab_size=vocab_size, digit_level=True, reweigh=False)
        # ntloss adds '0'..'9' to a tokenizer that lacks them; these tokenizers have them, so nothing changes
        if len(tokenizer) != size_before or int(loss.is_number_token.sum()) != 10:
            raise RuntimeError(f"ntloss did not find exactly the ten digit tokens of {tok_name}")
        out[name] = loss
    return out


def bench_case(case: Case, tokens, vocab_size, fraction, tok_name, device, rounds, with_criteria,
               with_token_criteria, token_rounds, bar, warmup: bool = True) -> dict:
    fns = case.step_fns(with_criteria)
    term_fns = case.term_fns() if fraction >= 0.3 else {}
    token_fns = case.token_criterion_fns() if with_token_criteria else {}
    label = f"{tokens}x{vocab_size} {fraction:.0%}"
    memory, values = {}, {}
    # first run of each method, profiled for its memory: also the first warm-up (caches, heap growth)
    for name, fn in {**fns, **term_fns, **token_fns}.items():
        bar.set_postfix_str(f"{label} memory {name}")
        box = {}
        memory[name] = benchlib.peak_live_bytes(lambda: box.setdefault("v", fn()), device)
        values[name] = float(box["v"])
        case.clear_grad()
    if warmup:
        benchlib.interleaved_rounds({**fns, **term_fns}, 1, device, after_each=case.clear_grad, seed=1)
    timings = benchlib.interleaved_rounds(
        fns, rounds, device, after_each=case.clear_grad,
        progress=lambda s: bar.set_postfix_str(f"{label} {s}"),
    )
    if token_fns:
        # far costlier than CE (EMO multiplies [N, V] by [V, H]); timed against a CE run of the same round
        bar.set_postfix_str(f"{label} token criteria")
        token_timings = benchlib.interleaved_rounds(
            {"ce": fns["ce"], **token_fns}, token_rounds, device, after_each=case.clear_grad, seed=2)
    # the naive and our DEL must be the same loss, or comparing their speed means nothing
    ours, naive = values["ce+del"] - values["ce"], values["ce+naive"] - values["ce"]
    if not math.isclose(ours, naive, rel_tol=1e-4, abs_tol=1e-6):
        raise AssertionError(f"{label}: naive term {naive} != our DEL term {ours}")
    methods = {}
    for name in [*fns, *token_fns]:
        t = timings if name in fns else token_timings
        methods[name] = {
            "median_wall_s": t.median(name, "wall"),
            "median_cpu_s": t.median(name, "cpu"),
            "time_ratio_wall": t.ratio(name, "ce", "wall"),
            "time_ratio_cpu": t.ratio(name, "ce", "cpu"),
            "time_ratio_user": t.ratio(name, "ce", "user"),
            "median_user_s": t.median(name, "user"),
            "peak_bytes": memory[name],
            "memory_ratio": memory[name] / memory["ce"],
            "loss": values[name],
            "wall_s": t.wall[name],
            "cpu_s": t.cpu[name],
            "user_s": t.user[name],
        }
    out = {
        "tokens": tokens, "vocab_size": vocab_size, "tokenizer": tok_name, "digit_fraction": fraction,
        "digit_share_measured": round(float(case.n_digits) / float(case.num_items), 4), "rounds": rounds,
        "logits_bytes": case.leaf.numel() * case.leaf.element_size(),
        "load_average_after": [round(x, 2) for x in os.getloadavg()], "methods": methods,
    }
    if term_fns:
        # ours costs milliseconds, so one stall of the machine moves its median: at least five rounds
        term_timings = benchlib.interleaved_rounds(term_fns, max(rounds, 5), device, after_each=case.clear_grad)
        out["term_only"] = {
            name: {"median_wall_s": term_timings.median(name, "wall"),
                   "median_cpu_s": term_timings.median(name, "cpu"), "peak_bytes": memory[name]}
            for name in term_fns
        }
        out["term_only"]["naive_over_ours_wall"] = term_timings.ratio("naive term only", "del term only", "wall")
        out["term_only"]["naive_over_ours_cpu"] = term_timings.ratio("naive term only", "del term only", "cpu")
    return out


def evaluate_targets(results: dict) -> dict:
    """The issue's targets, judged on process CPU time (see the docs: wall time on a shared machine measures the
    other tenants); wall-time verdicts are reported beside them."""
    cases = results["cases"]
    dels = [c["methods"]["ce+del"] for c in cases]
    speedups = [c["term_only"]["naive_over_ours_cpu"] for c in cases if "term_only" in c]
    speedups_wall = [c["term_only"]["naive_over_ours_wall"] for c in cases if "term_only" in c]
    step_speedups = [c["methods"]["ce+naive"]["median_cpu_s"] / c["methods"]["ce+del"]["median_cpu_s"] for c in cases]
    return {
        "del_time_ratio_cpu_max": max((m["time_ratio_cpu"] for m in dels), default=None),
        "del_time_ratio_wall_max": max((m["time_ratio_wall"] for m in dels), default=None),
        "del_memory_ratio_max": max((m["memory_ratio"] for m in dels), default=None),
        "time_le_1.05_every_measured_shape_cpu": bool(dels) and all(m["time_ratio_cpu"] <= 1.05 for m in dels),
        "time_le_1.05_every_measured_shape_wall": bool(dels) and all(m["time_ratio_wall"] <= 1.05 for m in dels),
        "del_time_ratio_user_max": max((m["time_ratio_user"] for m in dels), default=None),
        "time_le_1.05_every_measured_shape_user": bool(dels) and all(m["time_ratio_user"] <= 1.05 for m in dels),
        "sparse_path_time_ratio_cpu_max": max(
            (c["methods"]["ce+del, sparse gradient"]["time_ratio_cpu"] for c in cases), default=None),
        "memory_le_1.02_every_measured_shape": bool(dels) and all(m["memory_ratio"] <= 1.02 for m in dels),
        "naive_term_over_ours_min_cpu": min(speedups, default=None),
        "naive_term_over_ours_min_wall": min(speedups_wall, default=None),
        "naive_step_over_ours_step_min_cpu": min(step_speedups, default=None),
        "ten_times_faster_than_naive_cpu": bool(speedups) and min(speedups) >= 10,
        "every_shape_measured": not results["skipped"],
    }


def run_isolated(args, argv: list[str]) -> dict:
    """Each shape in its own process, with glibc keeping freed memory (see STEADY_STATE_MALLOC), merged."""
    import json
    import subprocess
    import tempfile

    env = {**os.environ, **STEADY_STATE_MALLOC}
    merged = None
    with tempfile.TemporaryDirectory() as tmp:
        for tokens, vocab_size in args.shapes:
            out = Path(tmp) / f"{tokens}x{vocab_size}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--worker", "--shapes",
                   f"{tokens}x{vocab_size}", "--all-shapes", *[f"{t}x{v}" for t, v in args.shapes], "--out", str(out)]
            proc = subprocess.run(cmd, env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"the loss bench for {tokens}x{vocab_size} failed (exit {proc.returncode})")
            part = json.loads(out.read_text())
            if merged is None:
                worker_machine = part["machine"]
                merged = part
                merged["machine"] = {**benchlib.machine_info(), "device": worker_machine["device"],
                                     "torch_threads": worker_machine["torch_threads"],
                                     "malloc_env": STEADY_STATE_MALLOC}
            else:
                merged["cases"] += part["cases"]
                merged["skipped"] += part["skipped"]
    return merged


# glibc serves tensors over 32 MiB with mmap and gives them back on free, so every step faults its buffers in
# again, 4 KiB at a time (1-2 s per 2 GB here, and erratic under memory pressure). Transparent huge pages for
# torch's allocations (a PyTorch switch) cut the faults 512-fold; the page clearing stays, as it would in a CPU
# training loop. (Keeping the memory in the heap instead, MALLOC_MMAP_MAX_=0, fragments it: the 16,384 x 32,000
# case grew past 22 GB and was OOM-killed.)
STEADY_STATE_MALLOC = {"THP_MEM_ALLOC_ENABLE": "1"}


def tables(results: dict) -> str:
    rows = []
    for case in results["cases"]:
        for name, m in case["methods"].items():
            rows.append([
                f"{case['tokens']:,} x {case['vocab_size']:,}", f"{case['digit_share_measured']:.0%}", name,
                f"{m['median_cpu_s'] * 1e3:,.0f}", f"{m['median_wall_s'] * 1e3:,.0f}",
                f"**{m['time_ratio_cpu']:.3f}**" if name == "ce+del" else f"{m['time_ratio_cpu']:.3f}",
                f"{m['time_ratio_user']:.3f}", f"{m['time_ratio_wall']:.3f}", f"{m['peak_bytes'] / 2**20:,.1f}",
                f"**{m['memory_ratio']:.4f}**" if name == "ce+del" else f"{m['memory_ratio']:.4f}",
            ])
    main = benchlib.markdown_table(
        ["tokens x V", "digits", "loss", "CPU ms", "wall ms", "time / CE (CPU)", "time / CE (user CPU)",
         "time / CE (wall)", "peak MiB", "memory / CE"], rows)
    term_rows = []
    for case in results["cases"]:
        t = case.get("term_only")
        if t:
            ours, naive = t["del term only"], t["naive term only"]
            term_rows.append([
                f"{case['tokens']:,} x {case['vocab_size']:,}", f"{case['digit_share_measured']:.0%}",
                f"{ours['median_cpu_s'] * 1e3:,.1f}", f"{naive['median_cpu_s'] * 1e3:,.0f}",
                f"**{t['naive_over_ours_cpu']:.0f}x**", f"{t['naive_over_ours_wall']:.0f}x",
                f"{ours['peak_bytes'] / 2**20:,.1f}", f"{naive['peak_bytes'] / 2**20:,.0f}",
            ])
    term = benchlib.markdown_table(
        ["tokens x V", "digits", "ours CPU ms", "naive CPU ms", "naive / ours (CPU)", "naive / ours (wall)",
         "ours peak MiB", "naive peak MiB"], term_rows)
    skipped = "".join(
        f"\n- {s['tokens']:,} x {s['vocab_size']:,}, {s['digit_fraction']:.0%} digits: not run, {s['reason']}"
        for s in results["skipped"]
    )
    accumulation = ""
    if results.get("accumulation"):
        accumulation = "\n\nFull-size additions of DEL's gradient into CE's (profiled, 2 x 256 tokens):\n\n" + \
            benchlib.markdown_table(["logits, loss path", "out-of-place (a new full-size tensor)", "in place"], [
                [name, c["out_of_place_full_add"], c["in_place_full_add"]] for name, c in results["accumulation"].items()
            ])
    return (f"{main}\n\nThe digit term alone (forward + backward, no CE), number-dense batches:\n\n{term}\n"
            f"{skipped}{accumulation}\n")


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", type=parse_shape, default=[parse_shape(s) for s in DEFAULT_SHAPES],
                        help=f"TOKENSxVOCAB, tokens a multiple of {SEQ_LEN} (default: {' '.join(DEFAULT_SHAPES)})")
    parser.add_argument("--fractions", nargs="+", type=float, default=DEFAULT_FRACTIONS,
                        help="fractions of digit targets (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds at shapes up to 2e8 logits")
    parser.add_argument("--rounds-large", type=int, default=3, help="timed rounds at larger shapes")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="logits dtype (default: bfloat16 on CUDA, float32 on CPU)")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU intra-op threads (default 1: on a shared machine, a second thread makes every "
                             "small op wait for a time slice; 0 = torch's default)")
    parser.add_argument("--tokenizer", default=None, help="one tokenizer for every shape (default: by vocabulary)")
    parser.add_argument("--no-criteria", action="store_true", help="leave out del_plugin.core.criteria")
    parser.add_argument("--criteria-all-shapes", action="store_true",
                        help="the plugin's criteria at every case (default: digit criteria at the fewest tokens and "
                             "smallest vocabulary; mixce and emo there too, first fraction only)")
    parser.add_argument("--token-rounds", type=int, default=1,
                        help="timed rounds of mixce/emo (each EMO run costs ~100 CE runs on the CPU)")
    parser.add_argument("--max-memory-fraction", type=float, default=0.85,
                        help="skip a CPU shape whose estimated need exceeds this share of MemAvailable")
    parser.add_argument("--in-process", action="store_true", help="all shapes in this process, default malloc")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "loss_step.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--all-shapes", nargs="+", type=parse_shape, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dtype is None:
        args.dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    args.all_shapes = args.all_shapes or args.shapes
    if args.worker:
        benchlib.write_json(args.out, run(args))
        return {}
    if args.device == "cpu" and not args.in_process:
        passthrough = [a for a in argv if a != "--in-process"]
        # drop our --shapes/--out: each worker gets its own
        passthrough = _without_options(passthrough, ("--shapes", "--out"))
        results = run_isolated(args, passthrough)
    else:
        results = run(args)
    results["targets"] = evaluate_targets(results)
    return benchlib.publish(args.out, results, tables)


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
