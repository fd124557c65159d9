"""Number tokens (Llama-3): CE + DEL against CE alone at Llama-3-8B's LM head, beside a single-digit tokenizer.

Llama-3's tokenizer cuts numbers into tokens of 1-3 digits ('1234' as '123' '4'); DEL reads each digit of such a
target as a *slot* whose ten logits are logsumexp marginals over the 10, 100 or 1,000 number tokens of its length,
read from the hidden states at the positions whose target is a number token (``number_logits_from_hidden``: 1,110
head rows). This benchmark measures what that costs in the loss step of ``bench/loss_step.py`` (hidden states ->
LM head -> cross-entropy, forward + backward; plain and Axolotl's chunked CE; frozen and trainable head; the
logits API beside them), at Llama-3-8B's head: V = 128,256 logits, H = 4,096, bfloat16 hidden states and head.

Labels are real text: GSM8K train solutions tokenised by the case's tokenizer, packed back to back with their
Alpaca prompts masked (``loss_step.gsm8k_labels``), so the share of number-token targets is the data's. Two
tokenizers on the same text, at the same shape: ``llama-bpe`` (Llama-3, number tokens of 1-3 digits) and, for
comparison, ``llama-spm`` (Llama-2's SentencePiece, one digit per token: DEL's single-digit path; its 32,000 ids
use the first rows of the 128,256-row head).

Each tokenizer runs in its own process (``loss_step.py --worker``). By default with glibc's default allocator:
with ``STEADY_STATE_MALLOC`` (what ``loss_step.py`` uses) the heap fragments to several times the ~3.5 GB that is
live at this shape, more than the memory this shared machine can give a benchmark; the price is the kernel's work
of faulting in fresh pages every step, which is system time, so the tables give each ratio in user CPU time
beside process CPU time. Peak memory does not depend on the allocator: it is the exact peak of live tensor bytes
(``benchlib.memory_profile``).

``python bench/number_tokens.py`` writes ``bench/results/number_tokens.json`` and ``.md``; ``--help`` for options.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import loss_step  # noqa: E402

import benchlib  # noqa: E402
import loss_step_cases  # noqa: E402
import loss_step_tables  # noqa: E402

LLAMA3_VOCAB = 128_256  # Llama-3-8B's logits
LLAMA3_HIDDEN = 4_096  # Llama-3-8B's hidden size
DEFAULT_TOKENIZERS = ("llama-bpe", "llama-spm")
MiB = 2**20


def worker_command(args, tokenizer: str, out: Path) -> list[str]:
    shape = f"{args.tokens}x{args.vocab}"
    cmd = [
        sys.executable,
        str(Path(loss_step.__file__).resolve()),
        "--worker",
        "--shapes",
        shape,
        "--all-shapes",
        shape,
        "--hidden",
        str(args.hidden),
        "--dtype",
        args.dtype,
        "--labels",
        "gsm8k",
        "--tokenizer",
        tokenizer,
        "--rounds",
        str(args.rounds),
        "--threads",
        str(args.threads),
        "--device",
        args.device,
        "--no-extras",
        "--out",
        str(out),
    ]
    return cmd + (["--quiet"] if args.quiet else [])


def run(args) -> dict:
    env = dict(os.environ)
    if args.malloc == "steady":
        env.update(loss_step.STEADY_STATE_MALLOC)
    merged = None
    with tempfile.TemporaryDirectory() as tmp:
        for tokenizer in args.tokenizers:
            out = Path(tmp) / f"{tokenizer}.json"
            proc = subprocess.run(worker_command(args, tokenizer, out), env=env)
            if proc.returncode != 0:
                raise RuntimeError(f"the loss step for {tokenizer} failed (exit {proc.returncode})")
            part = json.loads(out.read_text())
            if merged is None:
                merged = part
                merged["machine"] = {
                    **benchlib.machine_info(),
                    "device": part["machine"]["device"],
                    "torch_threads": part["machine"]["torch_threads"],
                    "malloc": args.malloc,
                    "malloc_env": loss_step.STEADY_STATE_MALLOC if args.malloc == "steady" else None,
                }
                merged["worker_memory_validation"] = [part["memory_validation"]]
            else:
                merged["cases"] += part["cases"]
                merged["skipped"] += part["skipped"]
                merged["worker_memory_validation"].append(part["memory_validation"])
    if not merged["cases"]:
        raise RuntimeError(f"nothing was measured: {merged['skipped']}")
    merged["targets"] = targets(merged)
    return merged


def del_rows(results: dict):
    """(case, CE+DEL method, CE method) per tokenizer, CE kind and head."""
    yield from loss_step_tables.del_rows(results)


def targets(results: dict) -> dict:
    out = loss_step.evaluate_targets(results)
    for case in results["cases"]:
        rows = [(m, ce) for c, m, ce in del_rows(results) if c is case]
        alone = case["term_only"]["del"]
        tok = case["tokenizer"]
        out[f"{tok}_memory_ratio_max"] = max(m["memory_ratio"] for m, _ in rows)
        out[f"{tok}_memory_le_1.02"] = all(m["memory_ratio"] <= 1.02 for m, _ in rows)
        out[f"{tok}_del_alone_over_ce_cpu_max"] = max(alone["median_cpu_s"] / ce["median_cpu_s"] for _, ce in rows)
        out[f"{tok}_del_alone_over_ce_user_max"] = max(alone["median_user_s"] / ce["median_user_s"] for _, ce in rows)
    return out


def _mib(n: float) -> str:
    return f"{n / MiB:,.1f}"


def tables(results: dict) -> str:
    return (
        f"{shape_line(results)}\n\n{step_table(results)}\n\nThe labels (GSM8K train solutions, packed):\n\n"
        f"{labels_table(results)}\n\n"
        f"DEL's term alone (forward + backward from the hidden states, frozen head; launches and host syncs as "
        f"`op_census.op_census` counts them):\n\n{term_alone_table(results)}\n\n"
        f"The logits API beside it (plain CE, frozen head):\n\n{logits_api_table(results)}\n\n"
        "What DEL adds to the live tensors at the step's peak (MiB, where it was allocated):\n\n"
        + "\n".join(peak_breakdown(results))
        + "\n"
    )


def shape_line(results: dict) -> str:
    """The measured shape (of the first case), and what the last column of the step table counts."""
    case0 = results["cases"][0]
    shape = (
        f"N x V = {case0['tokens']:,} x {case0['vocab_size']:,}, H = {case0['hidden_size']:,}, {results['dtype']}, "
        f"{case0['rounds']} rounds"
    )
    logits_sized = {case0["tokens"] * case0["vocab_size"] * e for e in (2, 4)}
    if case0["head_bytes"] in logits_sized:
        shape += (
            f"; a [V, H] tensor ({case0['head_bytes']:,} bytes) has the size of a logits-sized buffer here, so the "
            "last column counts both (equal counts: DEL adds no allocation of that size)"
        )
    return shape


def step_table(results: dict) -> str:
    """CE + DEL against CE per tokenizer, CE kind and head: time, the term alone, peak memory."""
    rows = []
    for case, m, ce in del_rows(results):
        alone = case["term_only"]["del"]
        rows.append(
            [
                case["tokenizer"],
                m["ce"],
                m["head"],
                f"{ce['median_cpu_s'] * 1e3:,.0f}",
                f"{m['median_cpu_s'] * 1e3:,.0f}",
                f"{m['time_ratio_cpu']:.3f}",
                f"{m['time_ratio_user']:.3f}",
                f"**{alone['median_cpu_s'] / ce['median_cpu_s']:.2%}**",
                f"{alone['median_user_s'] / ce['median_user_s']:.2%}",
                _mib(ce["peak_bytes"]),
                _mib(m["peak_bytes"]),
                f"+{m['extra_peak_bytes'] / MiB:,.2f}",
                f"**{m['memory_ratio']:.4f}**",
                f"{ce['head_sized_allocations']} / {m['head_sized_allocations']}",
            ]
        )
    return benchlib.markdown_table(
        [
            "tokenizer",
            "CE",
            "head",
            "CE CPU ms",
            "CE+DEL CPU ms",
            "step / CE (CPU)",
            "(user CPU)",
            "DEL alone / CE (CPU)",
            "(user CPU)",
            "CE peak MiB",
            "CE+DEL peak MiB",
            "DEL adds MiB",
            "memory / CE",
            "[V, H]-sized allocations CE / CE+DEL",
        ],
        rows,
    )


def labels_table(results: dict) -> str:
    rows = []
    for case in results["cases"]:
        by = case["targets_by_digits"]
        rows.append(
            [
                case["tokenizer"],
                f"{case['label_targets']:,}",
                f"{sum(by[1:]):,} ({sum(by[1:]) / case['label_targets']:.1%})",
                " / ".join(f"{n:,}" for n in by[1:]),
                f"{case['digit_targets']:,}",
            ]
        )
    return benchlib.markdown_table(
        ["tokenizer", "label targets", "number-token targets", "of 1 / 2 / 3 digits", "digit targets (slots)"], rows
    )


def term_alone_table(results: dict) -> str:
    rows = []
    for case in results["cases"]:
        alone = case["term_only"]["del"]
        rows.append(
            [
                case["tokenizer"],
                f"{alone['median_cpu_s'] * 1e3:,.1f}",
                f"{alone['median_user_s'] * 1e3:,.1f}",
                f"{alone['median_wall_s'] * 1e3:,.1f}",
                _mib(alone["peak_bytes"]),
                _mib(alone["allocated_bytes"]),
                alone.get("launches", ""),
                alone.get("host_syncs", ""),
            ]
        )
    return benchlib.markdown_table(
        ["tokenizer", "DEL alone CPU ms", "user ms", "wall ms", "peak MiB", "allocated MiB", "launches", "host syncs"],
        rows,
    )


def logits_api_table(results: dict) -> str:
    rows = []
    for case in results["cases"]:
        api = case["methods"][loss_step.method_name("plain", "frozen", "ce+del (logits API)")]
        rows.append(
            [
                case["tokenizer"],
                f"{api['time_ratio_cpu']:.3f}",
                f"{api['time_ratio_user']:.3f}",
                f"+{api['extra_peak_bytes'] / MiB:,.1f}",
                f"{api['memory_ratio']:.4f}",
            ]
        )
    return benchlib.markdown_table(
        ["tokenizer", "CE + DEL (logits API) / CE (CPU)", "(user CPU)", "adds MiB", "memory / CE"], rows
    )


def peak_breakdown(results: dict) -> list[str]:
    """One line per case, CE kind and head (and DEL alone): the largest tensors DEL adds at the step's peak."""
    lines = []
    for case in results["cases"]:
        for kind in loss_step_cases.CE_KINDS:
            for head in loss_step_cases.HEADS:
                m = case["methods"][loss_step.method_name(kind, head, "ce+del")]
                # CE's loss scalar is not live at CE + DEL's peak (4 bytes); anything larger: the peak moved
                moved_bytes = sum(a["bytes"] for a in m["baseline_live_not_at_peak"])
                moved = " (CE's peak is at another point of the step)" if moved_bytes > 2**16 else ""
                items = "; ".join(f"{_mib(a['bytes'])} {a['where']}" for a in m["extra_live_at_peak"][:6])
                lines.append(f"- {case['tokenizer']}, {kind} CE, {head} head{moved}: {items}")
        items = "; ".join(f"{_mib(a['bytes'])} {a['where']}" for a in case["term_only"]["del"]["live_at_peak"][:6])
        lines.append(f"- {case['tokenizer']}, DEL alone, at its own peak: {items}")
    return lines


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--tokens", type=int, default=2048, help=f"N, a multiple of {loss_step.SEQ_LEN} (default %(default)s)"
    )
    parser.add_argument("--vocab", type=int, default=LLAMA3_VOCAB, help="logits V (default %(default)s)")
    parser.add_argument("--hidden", type=int, default=LLAMA3_HIDDEN, help="hidden size H (default %(default)s)")
    parser.add_argument("--dtype", default="bfloat16", help="hidden states and head (default %(default)s)")
    parser.add_argument("--tokenizers", nargs="+", default=list(DEFAULT_TOKENIZERS))
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="CPU intra-op threads (default %(default)s)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--malloc",
        choices=("default", "steady"),
        default="default",
        help="glibc's default allocator, or loss_step's STEADY_STATE_MALLOC (fragments to several times the live "
        "memory at this shape)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "number_tokens.json")
    args = parser.parse_args(argv)
    if args.tokens <= 0 or args.tokens % loss_step.SEQ_LEN:
        parser.error(f"--tokens must be a positive multiple of {loss_step.SEQ_LEN}")
    return benchlib.publish(args.out, run(args), tables)


if __name__ == "__main__":
    main()
