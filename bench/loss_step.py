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
with its kernel launches and host synchronisations (``op_census.op_census``; on a GPU it also runs once under
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
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import benchlib  # noqa: E402
from loss_step_cases import (  # noqa: E402
    ALPHA,
    DEFAULT_FRACTION,
    DEFAULT_HIDDEN,
    DEFAULT_SHAPES,
    LABELS,
    SEQ_LEN,
    TOKENIZER_FOR_VOCAB,
    Case,
    axolotl_chunked_ce_loss,
    gsm8k_labels,
    method_name,
    plain_ce_loss,
    synthetic_labels,
    word_token_ids,
)
from loss_step_measure import check_same_terms, method_row, profile_methods, term_only  # noqa: E402
from loss_step_tables import evaluate_targets, tables  # noqa: E402


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
STEADY_STATE_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(4 * 2**30), "MALLOC_TRIM_THRESHOLD_": str(64 * 2**30)}


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
