"""Place computation alone, three implementations, timed where the collator runs them: right after the host collator.

For each GSM8K batch (the batches of ``bench/collation.py``), the host collator (Axolotl's, padded or packed) runs
first, untimed by this script's totals, then one of the implementations computes ``next_token_places`` of its
labels (the implementation rotating from batch to batch), timed in process CPU time:

* ``torch, previous``: the implementation before the NumPy path, kept as the tests' oracle
  (``bench/oracles.py``): ~65 torch operations (cumulative sums, scatters);
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

import collation  # noqa: E402
import torch  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1024, help="GSM8K problems (default %(default)s)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warm", action="store_true", help="also time each implementation a second time")
    args = parser.parse_args(argv)

    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer("llama-spm")
    vocab = DigitVocab.from_tokenizer(tokenizer, name="llama-spm")
    hosts = host_collators(tokenizer, args.samples)
    paths = place_paths(vocab)
    print(f"load average {os.getloadavg()[0]:.2f}")
    for host_name, (host, batches) in hosts.items():
        check_paths_agree(host, batches[:8], paths)
        host_times, cold, warm, shape = time_paths(host, batches, paths, args.passes, args.warm)
        host_ms = statistics.median(host_times) * 1e3
        print(
            f"\n{host_name}: {len(batches)} batches x {args.passes} passes, e.g. {shape}; "
            f"host collator {host_ms:.2f} ms/batch (median)"
        )
        for name in paths:
            ms = statistics.median(cold[name]) * 1e3
            line = f"  {name:16s} {ms:6.3f} ms/batch = {ms / host_ms:6.1%} of the host collator"
            if args.warm:
                line += f"; warm {statistics.median(warm[name]) * 1e3:.3f} ms"
            print(line)


def host_collators(tokenizer, samples: int) -> dict:
    """Axolotl's padded and packed collators, each with its GSM8K batches (those of ``bench/collation.py``)."""
    from axolotl.utils.collators import DataCollatorForSeq2Seq, V2BatchSamplerDataCollatorForSeq2Seq

    from tools.assets import gsm8k_train_rows

    features = collation.tokenize(gsm8k_train_rows(samples), tokenizer, 2048)
    padded = collation.padded_micro_batches(features, 8)
    packed = collation.packed_micro_batches(features, 2048, 2)
    return {
        "padded": (DataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=64, return_tensors="pt"), padded),
        "packed": (
            V2BatchSamplerDataCollatorForSeq2Seq(tokenizer, padding=True, pad_to_multiple_of=2048, return_tensors="pt"),
            packed,
        ),
    }


def place_paths(vocab) -> dict:
    """The three implementations, each a function of a collated batch."""
    from del_plugin.core import next_token_places, shift_to_next_token
    from del_plugin.core.places import NOT_A_DIGIT, _places_torch

    from oracles import oracle_next_token_places

    return {
        "torch, previous": lambda b: oracle_next_token_places(b["labels"], vocab, b.get("position_ids")),
        "torch, one pass": lambda b: shift_to_next_token(
            _places_torch(b["labels"], vocab, b.get("position_ids")), NOT_A_DIGIT
        ),
        "numpy": lambda b: next_token_places(b["labels"], vocab, b.get("position_ids")),
    }


def check_paths_agree(host, batches, paths: dict) -> None:
    """The three give exactly the same places."""
    for batch in batches:
        out = host(copy.deepcopy(batch))
        results = [path(out) for path in paths.values()]
        assert all(torch.equal(results[0], r) for r in results[1:])


def time_paths(host, batches, paths: dict, passes: int, warm_too: bool):
    """Process CPU seconds of the host collator on every batch, then of one implementation (rotating) on its
    output, cold and (``warm_too``) again right away; and the shape of the last batch's labels."""
    names = list(paths)
    host_times, cold, warm = [], {n: [] for n in names}, {n: [] for n in names}
    for p in range(passes):
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
            if warm_too:
                paths[name](out)
                warm[name].append(time.process_time() - t2)
    return host_times, cold, warm, tuple(out["labels"].shape)


if __name__ == "__main__":
    main()
