"""Place computation alone, three implementations, timed where the collator runs them: right after the host collator.

For each GSM8K batch (the batches of ``bench/collation.py``), the host collator (Axolotl's, padded or packed) runs
first, untimed by this script's totals, then one of the implementations computes ``next_token_places`` of its
labels (the implementation rotating from batch to batch), timed in process CPU time:

* ``torch, previous``: the implementation before the NumPy path, kept as the tests' oracle
  (``tests/helpers/places_oracle.py``): ~65 torch operations (cumulative sums, scatters);
* ``torch, one pass``: ``del_plugin.core.places._places_torch``, the path of tensors on other devices, here on the
  CPU: classes, a running maximum and a backward running minimum (~30 torch operations);
* ``numpy``: ``next_token_places`` itself, the path of CPU tensors (~20 NumPy operations).

Reports the median per batch and its ratio to the median host-collator time. Run after the host collator, every
operation meets cold caches, which costs more than its data; ``--warm`` also times each implementation on the
same batch again right away (the cost on warm caches, for comparison). One torch thread.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "tests" / "helpers"))

import collation  # noqa: E402
import torch  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1024, help="GSM8K problems (default %(default)s)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="also time each implementation a second time")
    args = parser.parse_args(argv)

    from axolotl.utils.collators import DataCollatorForSeq2Seq, V2BatchSamplerDataCollatorForSeq2Seq

    from del_plugin.core import DigitVocab, next_token_places, shift_to_next_token
    from del_plugin.core.places import NOT_A_DIGIT, _places_torch
    from del_plugin.evaluation.gsm8k import gsm8k_rows
    from tools.assets import load_tokenizer

    from places_oracle import oracle_next_token_places

    torch.set_num_threads(1)
    tokenizer = load_tokenizer("llama-spm")
    vocab = DigitVocab.from_tokenizer(tokenizer, name="llama-spm")
    features = collation.tokenize(gsm8k_rows(args.samples), tokenizer, 2048)
    padded = [
        [{k: v for k, v in f.items() if k != "position_ids"} for f in features[i : i + 8]]
        for i in range(0, len(features), 8)
    ]
    packs = collation.pack(features, 2048)
    packed = [packs[i : i + 2] for i in range(0, len(packs), 2)]
    hosts = {
        "padded": (DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=64, return_tensors="pt"), padded),
        "packed": (
            V2BatchSamplerDataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=2048, return_tensors="pt"),
            packed,
        ),
    }
    paths = {
        "torch, previous": lambda b: oracle_next_token_places(b["labels"], vocab, b.get("position_ids")),
        "torch, one pass": lambda b: shift_to_next_token(
            _places_torch(b["labels"], vocab, b.get("position_ids")), NOT_A_DIGIT
        ),
        "numpy": lambda b: next_token_places(b["labels"], vocab, b.get("position_ids")),
    }
    names = list(paths)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for host_name, (host, batches) in hosts.items():
        for batch in batches[:8]:  # the three agree exactly
            out = host(copy.deepcopy(batch))
            results = [paths[name](out) for name in names]
            assert all(torch.equal(results[0], r) for r in results[1:])
        host_times, cold, warm = [], {n: [] for n in names}, {n: [] for n in names}
        for p in range(args.passes):
            for i, batch in enumerate(batches):
                features_copy = copy.deepcopy(batch)
                t0 = time.process_time()
                out = host(features_copy)
                t1 = time.process_time()
                host_times.append(t1 - t0)
                name = names[(i + p) % len(names)]
                paths[name](out)
                t2 = time.process_time()
                cold[name].append(t2 - t1)
                if args.warm:
                    paths[name](out)
                    warm[name].append(time.process_time() - t2)
        host_ms = statistics.median(host_times) * 1e3
        print(
            f"\n{host_name}: {len(batches)} batches x {args.passes} passes, e.g. {tuple(out['labels'].shape)}; "
            f"host collator {host_ms:.2f} ms/batch (median)"
        )
        for name in names:
            ms = statistics.median(cold[name]) * 1e3
            line = f"  {name:16s} {ms:6.3f} ms/batch = {ms / host_ms:6.1%} of the host collator"
            if args.warm:
                line += f"; warm {statistics.median(warm[name]) * 1e3:.3f} ms"
            print(line)


if __name__ == "__main__":
    main()
