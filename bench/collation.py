"""Collation benchmark: Axolotl's host collators alone and wrapped by NumberSpanCollator, on GSM8K.

GSM8K train problems (carried by the clone in ``tools/data/gsm8k/``, read by
``tools.assets.gsm8k_train_rows``) are tokenised with a real tokenizer (Llama-2's SentencePiece,
``llama-spm``) in the Alpaca format Axolotl's ``type: alpaca`` uses, the prompt masked with -100 in the labels.
Two collators, as Axolotl configures them:

* padded: ``DataCollatorForSeq2Seq`` (``pad_to_multiple_of=64``), micro-batches of 8 samples;
* packed: ``V2BatchSamplerDataCollatorForSeq2Seq`` (``pad_to_multiple_of=sequence_len``), micro-batches of 2
  packs of up to 2,048 tokens, samples packed first-fit as the multipack sampler does.

Every batch is collated by the plain and the wrapped collator back to back (the order alternating), from its own
fresh copy of the features (Axolotl's collator pads the feature lists in place), over several passes. One torch
thread, as in a DataLoader worker. Overhead = total time wrapped / total time plain - 1.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from tqdm import tqdm  # noqa: E402

import benchlib  # noqa: E402

ALPACA_PROMPT = (
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
    "### Instruction:\n{instruction}\n\n### Response:\n"
)


def tokenize(rows: list[dict], tokenizer, max_len: int) -> list[dict]:
    """Alpaca prompt (masked) + answer + EOS, as features with input_ids, attention_mask, labels, position_ids."""
    features = []
    for row in rows:
        prompt = tokenizer(ALPACA_PROMPT.format(instruction=row["question"]), add_special_tokens=False)["input_ids"]
        answer = tokenizer(row["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        ids = ([tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []) + prompt + answer
        ids = ids[:max_len]
        labels = ([-100] * (len(ids) - len(answer)) + answer)[:max_len]
        features.append(
            {
                "input_ids": ids,
                "attention_mask": [1] * len(ids),
                "labels": labels,
                "position_ids": list(range(len(ids))),
            }
        )
    return features


def pack(features: list[dict], capacity: int) -> list[list[dict]]:
    """First-fit packing into bins of ``capacity`` tokens (what Axolotl's multipack sampler produces)."""
    bins: list[list[dict]] = []
    room: list[int] = []
    for feature in sorted(features, key=lambda f: -len(f["input_ids"])):
        n = len(feature["input_ids"])
        for i, free in enumerate(room):
            if n <= free:
                bins[i].append(feature)
                room[i] -= n
                break
        else:
            bins.append([feature])
            room.append(capacity - n)
    return bins


def padded_micro_batches(features: list[dict], size: int) -> list[list[dict]]:
    """Micro-batches of ``size`` samples for the padding collator (no position ids)."""
    return [
        [{k: v for k, v in f.items() if k != "position_ids"} for f in features[i : i + size]]
        for i in range(0, len(features), size)
    ]


def packed_micro_batches(features: list[dict], capacity: int, packs_per_batch: int) -> list[list[list[dict]]]:
    """Micro-batches of ``packs_per_batch`` packs of up to ``capacity`` tokens, for the packing collator."""
    packs = pack(features, capacity)
    return [packs[i : i + packs_per_batch] for i in range(0, len(packs), packs_per_batch)]


def bench_collator(name, plain, wrapped, batches, passes: int, bar) -> dict:
    """Alternate plain / wrapped on each batch; every call gets its own deep copy, made outside the timing."""
    times = {"plain": {"wall": [], "cpu": []}, "wrapped": {"wall": [], "cpu": []}}
    tokens = 0
    for p in range(passes):
        for i, batch in enumerate(batches):
            order = [("plain", plain), ("wrapped", wrapped)]
            if (i + p) % 2:
                order.reverse()
            for kind, collator in order:
                features = copy.deepcopy(batch)
                wall0, cpu0 = time.perf_counter(), time.process_time()
                out = collator(features)
                times[kind]["cpu"].append(time.process_time() - cpu0)
                times[kind]["wall"].append(time.perf_counter() - wall0)
                if kind == "wrapped" and p == 0:
                    if "del_target_places" not in out:
                        raise AssertionError("NumberSpanCollator did not add del_target_places")
                    tokens += out["labels"].numel()
        bar.update(1)
    result = {"collator": name, "batches": len(batches), "passes": passes, "padded_tokens_per_pass": tokens}
    for kind in ("plain", "wrapped"):
        total = sum(times[kind]["cpu"])
        result[kind] = {
            "total_cpu_s": total,
            "total_wall_s": sum(times[kind]["wall"]),
            "median_batch_ms_cpu": statistics.median(times[kind]["cpu"]) * 1e3,
            "batches_per_s_cpu": len(times[kind]["cpu"]) / total,
            "tokens_per_s_cpu": tokens * passes / total,
        }
    result["overhead_cpu"] = result["wrapped"]["total_cpu_s"] / result["plain"]["total_cpu_s"] - 1
    result["overhead_wall"] = result["wrapped"]["total_wall_s"] / result["plain"]["total_wall_s"] - 1
    result["overhead_median_batch_ratio_cpu"] = (
        statistics.median(w / p for w, p in zip(times["wrapped"]["cpu"], times["plain"]["cpu"])) - 1
    )
    return result


def micro_batch_parts(tokenizer_name: str, rows: int, seq_len: int, batches: int, passes: int) -> dict:
    """What ``NumberSpanCollator`` adds to one packed micro-batch of ``rows`` x ``seq_len`` tokens (process CPU
    time, median over batches and passes): the host collator makes the batch (timed on its own, for scale), then
    the wrapper runs on it alone (a stub collator hands it over), with the caches as the host collator leaves them;
    with number tokens also the wrapper without the positions (as before they were sent), each variant after its
    own host collation, in alternating order. Then its parts again, warm: the places of the digit targets, and
    where the number tokens are per number group."""
    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_name)
    vocab = DigitVocab.from_tokenizer(tokenizer, name=tokenizer_name)
    groups = gsm8k_full_micro_batches(tokenizer, rows, seq_len, batches)
    times = time_micro_batch_parts(tokenizer, vocab, groups, seq_len, passes)
    return {
        "tokenizer": tokenizer_name,
        "rows": rows,
        "sequence_len": seq_len,
        "batches": len(groups) * passes,
        "median_ms": {k: statistics.median(v) * 1e3 for k, v in times.items() if v},
    }


def gsm8k_full_micro_batches(tokenizer, rows: int, seq_len: int, batches: int) -> list[list[list[dict]]]:
    """Up to ``batches`` full micro-batches of ``rows`` packs of ``seq_len`` tokens each, from GSM8K train problems."""
    from tools.assets import gsm8k_train_rows

    features = tokenize(gsm8k_train_rows(max(64, rows * seq_len * batches // 100)), tokenizer, seq_len)
    packs = pack(features, seq_len)
    return [packs[i : i + rows] for i in range(0, len(packs) - rows + 1, rows)][:batches]


def time_micro_batch_parts(tokenizer, vocab, groups, seq_len: int, passes: int) -> dict[str, list[float]]:
    """Process CPU seconds of each part, per micro-batch and pass (see ``micro_batch_parts``)."""
    from axolotl.utils.collators import V2BatchSamplerDataCollatorForSeq2Seq

    from del_plugin.core import next_token_places, shift_to_next_token
    from del_plugin.core.digits import number_target_positions
    from del_plugin.hf.collator import NumberSpanCollator

    host = V2BatchSamplerDataCollatorForSeq2Seq(
        tokenizer, padding=True, pad_to_multiple_of=seq_len, return_tensors="pt"
    )
    times: dict[str, list[float]] = {
        "host collator": [],
        "NumberSpanCollator": [],
        "without positions": [],
        "places": [],
        "positions": [],
    }

    def timed(name, fn):
        start = time.process_time()
        out = fn()
        times[name].append(time.process_time() - start)
        return out

    variants = {"NumberSpanCollator": {}}
    if vocab.max_digits > 1:  # the wrapper as it was before it sent the positions: places only
        variants["without positions"] = {"number_positions": False}
    for p in range(passes):
        for i, group in enumerate(groups):
            # each variant right after its own host collation (as in training: the caches as the host leaves them)
            names = list(variants) if (i + p) % 2 else list(reversed(variants))
            for name in names:
                batch = timed("host collator", lambda group=group: host(copy.deepcopy(group)))
                wrapped = NumberSpanCollator(lambda _, batch=batch: dict(batch), vocab, **variants[name])
                timed(name, lambda wrapped=wrapped: wrapped(None))
            labels, position_ids = batch["labels"], batch.get("position_ids")
            timed("places", partial(next_token_places, labels, vocab, position_ids))
            if vocab.max_digits > 1:
                timed(
                    "positions", lambda labels=labels: number_target_positions(shift_to_next_token(labels, -100), vocab)
                )
    return times


def all_micro_batch_parts(args) -> list[dict]:
    """``micro_batch_parts`` for each of ``--parts-tokenizers``."""
    return [
        micro_batch_parts(name, args.parts_rows, args.parts_sequence_len, args.parts_batches, args.passes)
        for name in args.parts_tokenizers
    ]


def machine() -> dict:
    return {**benchlib.machine_info(), "torch_threads": torch.get_num_threads()}


def run(args) -> dict:
    torch.set_num_threads(1)
    if args.parts_only:
        parts = all_micro_batch_parts(args)
        share = max(p["median_ms"]["NumberSpanCollator"] / p["median_ms"]["host collator"] for p in parts)
        return {
            "machine": machine(),
            "micro_batch_parts": parts,
            "targets": {"wrapper_over_host_collator_max": share},
        }
    results = compare_collators(args)
    results["micro_batch_parts"] = all_micro_batch_parts(args)
    results["targets"] = {
        "overhead_le_5pct": all(c["overhead_cpu"] <= 0.05 for c in results["collators"]),
        "max_overhead_cpu": max(c["overhead_cpu"] for c in results["collators"]),
    }
    return results


def count_targets(features: list[dict], vocab) -> tuple[int, int]:
    """(digit targets, label targets) of the features. Digits, not tokens: a number token of m digits ('123',
    Llama-3) is m digit targets."""
    from del_plugin.core import number_places
    from del_plugin.core.places import NOT_A_DIGIT

    digit_targets = sum(int((number_places(torch.tensor(f["labels"]), vocab) != NOT_A_DIGIT).sum()) for f in features)
    label_targets = sum(sum(1 for t in f["labels"] if t != -100) for f in features)
    return digit_targets, label_targets


def compare_collators(args) -> dict:
    """Axolotl's padded and packed collators, each alone and wrapped by ``NumberSpanCollator``."""
    from axolotl.utils.collators import DataCollatorForSeq2Seq, V2BatchSamplerDataCollatorForSeq2Seq

    from del_plugin.core import DigitVocab
    from del_plugin.hf.collator import NumberSpanCollator
    from tools.assets import gsm8k_train_rows, load_tokenizer

    tokenizer = load_tokenizer(args.tokenizer)
    vocab = DigitVocab.from_tokenizer(tokenizer, name=args.tokenizer)
    features = tokenize(gsm8k_train_rows(args.samples), tokenizer, args.sequence_len)
    digit_targets, label_targets = count_targets(features, vocab)
    padded_batches = padded_micro_batches(features, args.micro_batch_size)
    packed_batches = packed_micro_batches(features, args.sequence_len, args.packs_per_batch)
    padded = DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=64, return_tensors="pt")
    packed = V2BatchSamplerDataCollatorForSeq2Seq(
        tokenizer, padding=True, pad_to_multiple_of=args.sequence_len, return_tensors="pt"
    )
    padded_name = f"padded: DataCollatorForSeq2Seq, {args.micro_batch_size} samples/batch"
    packed_name = (
        f"packed: V2BatchSamplerDataCollatorForSeq2Seq, {args.packs_per_batch} packs of "
        f"<= {args.sequence_len} tokens/batch"
    )
    bar = tqdm(total=2 * args.passes, desc="collation", unit="pass", file=sys.stdout, disable=args.quiet)
    results = {
        "machine": machine(),
        "tokenizer": args.tokenizer,
        "samples": len(features),
        "sequence_len": args.sequence_len,
        "label_targets": label_targets,
        "digit_targets": digit_targets,
        "digit_share_of_targets": round(digit_targets / max(label_targets, 1), 4),
        "collators": [
            bench_collator(padded_name, padded, NumberSpanCollator(padded, vocab), padded_batches, args.passes, bar),
            bench_collator(packed_name, packed, NumberSpanCollator(packed, vocab), packed_batches, args.passes, bar),
        ],
    }
    bar.close()
    return results


def tables(results: dict) -> str:
    if "collators" not in results:
        return parts_table(results["micro_batch_parts"])
    rows = []
    for c in results["collators"]:
        rows.append(
            [
                c["collator"],
                c["batches"] * c["passes"],
                f"{c['plain']['median_batch_ms_cpu']:.2f}",
                f"{c['wrapped']['median_batch_ms_cpu']:.2f}",
                f"{c['plain']['tokens_per_s_cpu']:,.0f}",
                f"{c['wrapped']['tokens_per_s_cpu']:,.0f}",
                f"**{c['overhead_cpu']:+.1%}**",
                f"{c['overhead_wall']:+.1%}",
            ]
        )
    return (
        benchlib.markdown_table(
            [
                "collator",
                "batches timed",
                "plain ms/batch",
                "wrapped ms/batch",
                "plain tokens/s",
                "wrapped tokens/s",
                "overhead (CPU)",
                "overhead (wall)",
            ],
            rows,
        )
        + (
            f"\n\n{results['samples']:,} GSM8K train problems, {results['tokenizer']}; "
            f"{results['digit_targets']:,} digits among {results['label_targets']:,} label targets.\n"
        )
        + parts_table(results.get("micro_batch_parts", []))
    )


def parts_table(parts: list[dict]) -> str:
    if not parts:
        return ""
    rows = []
    for p in parts:
        ms = p["median_ms"]
        rows.append(
            [
                p["tokenizer"],
                f"{p['rows']} x {p['sequence_len']:,}",
                p["batches"],
                f"{ms['host collator']:.2f}",
                f"**{ms['NumberSpanCollator']:.3f}**",
                f"{ms['without positions']:.3f}" if "without positions" in ms else "-",
                f"{ms['places']:.3f}",
                f"{ms['positions']:.3f}" if "positions" in ms else "-",
                f"{ms['NumberSpanCollator'] / ms['host collator']:.1%}",
            ]
        )
    table = benchlib.markdown_table(
        [
            "tokenizer",
            "micro-batch (packed)",
            "batches timed",
            "host collator ms",
            "NumberSpanCollator ms",
            "without the positions (before) ms",
            "places ms (warm)",
            "positions ms (warm)",
            "wrapper / host",
        ],
        rows,
    )
    return (
        "\nWhat NumberSpanCollator adds to one packed micro-batch (process CPU time, median; the wrapper alone, on the "
        f"host collator's batch, then its parts):\n\n{table}\n"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=2048, help="GSM8K problems (default %(default)s)")
    parser.add_argument("--tokenizer", default="llama-spm")
    parser.add_argument("--sequence-len", type=int, default=2048)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--packs-per-batch", type=int, default=2)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument(
        "--parts-tokenizers",
        nargs="*",
        default=["llama-spm", "llama-bpe"],
        help="tokenizers of the micro-batch parts table (default %(default)s; none: not measured)",
    )
    parser.add_argument("--parts-only", action="store_true", help="only the micro-batch parts table")
    parser.add_argument("--parts-rows", type=int, default=4, help="packed rows per micro-batch (default %(default)s)")
    parser.add_argument("--parts-sequence-len", type=int, default=1024, help="tokens per row (default %(default)s)")
    parser.add_argument("--parts-batches", type=int, default=64, help="micro-batches per pass (default %(default)s)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "collation.json")
    args = parser.parse_args(argv)
    results = run(args)
    return benchlib.publish(args.out, results, tables)


if __name__ == "__main__":
    main()
