"""DEL's kernel launches and host synchronisations in one training step, counted on the CPU.

On a GPU the digit term is small work (ten logits per position, a few rows of the head) cut into many small ops:
what it costs there is kernel launches and the times the host waits for the device, not arithmetic. Neither
needs a GPU to be counted. The step is :class:`~del_plugin.hf.trainer.DELTrainerMixin`'s as a
``transformers.Trainer`` runs it: ``get_batch_samples`` (the step's digit count), ``compute_loss`` (the model's
forward with the capture's hook, the digit targets, the criterion, the metrics) and ``backward()``, on a tiny
random Llama with a real tokenizer and one packed micro-batch of GSM8K train problems (Axolotl's
``V2BatchSamplerDataCollatorForSeq2Seq``, wrapped by ``NumberSpanCollator``, as Axolotl collates). DEL's share
is the census of that step minus the census of the same step with a plain ``Trainer``: the model's and the
cross-entropy's ops cancel. The first step is run before (it holds the start-up check of the digit logits, which
may read values on the host, and compiles what is compiled).

The census (``op_census.op_census``): kernel launches as the profiler's leaf aten ops (views and allocations
excepted) plus the kernels of compiled graphs; host synchronisations as the aten ops that wait for the device on
CUDA (``aten::_local_scalar_dense`` of ``.item()`` and ``bool()``, ``aten::nonzero`` of boolean indexing and
``nonzero()``, ``aten::masked_select``, ``unique`` ...) and the Python-level reads the profiler does not record
(``.tolist()``, ``.cpu()``, ``.numpy()``, ``torch.tensor(host data)``). Two tokenizers: ``llama-spm`` (Llama-2,
one token per digit) and ``llama-bpe`` (Llama-3, number tokens of 1-3 digits); two heads: frozen (LoRA, QLoRA)
and trainable (full fine-tuning: the digit rows' gradient is added into the head's).

Then the digit term alone at a 7-8B model's head (``loss_step.term_only``: forward + backward from the hidden
states, frozen head, 8,192 tokens of GSM8K, H = 4,096, V = 32,000 with ``llama-spm`` and 128,256 with ``llama-bpe``,
float32 on the CPU): its time, memory, launches and host synchronisations. Everything twice: DEL's small ops one
by one (``DEL_PLUGIN_COMPILE=0``, the CPU's default) and compiled (``=1``, what a CUDA device gets by default,
:mod:`del_plugin.core.fused`). On a CPU the compiled programs are Inductor's C++ kernels, counted as launches as
a GPU's Triton kernels would be; their times here say nothing of a GPU's.

``python bench/step_ops.py`` writes ``bench/results/step_ops.json`` and ``.md``; ``--help`` for options.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import benchlib  # noqa: E402
import op_census  # noqa: E402

DEFAULT_TOKENIZERS = ("llama-spm", "llama-bpe")
HEADS = ("frozen", "trainable")
# the term alone at a 7-8B model's head: Llama-2-7B's vocabulary (single digits), Llama-3-8B's (number tokens)
TERM_SHAPES = (("llama-spm", 32_000), ("llama-bpe", 128_256))


def packed_batch(tokenizer, vocab, rows: int, seq_len: int) -> dict:
    """One micro-batch of ``rows`` packs of GSM8K train problems, ``seq_len`` tokens each, as Axolotl collates
    it with sample packing, wrapped by ``NumberSpanCollator``."""
    import collation
    from axolotl.utils.collators import V2BatchSamplerDataCollatorForSeq2Seq

    from del_plugin.hf.collator import NumberSpanCollator
    from tools.assets import gsm8k_train_rows

    features = collation.tokenize(gsm8k_train_rows(max(16, rows * seq_len // 100)), tokenizer, seq_len)
    packs = collation.pack(features, seq_len)[:rows]
    if len(packs) < rows:
        raise ValueError(f"too few GSM8K problems for {rows} packs of {seq_len} tokens")
    collator = V2BatchSamplerDataCollatorForSeq2Seq(
        tokenizer, padding=True, pad_to_multiple_of=seq_len, return_tensors="pt"
    )
    return dict(NumberSpanCollator(collator, vocab)(packs))


def build_trainer(model, tokenizer, vocab, with_del: bool, rows: int, out_dir: str):
    from transformers import Trainer, TrainingArguments

    from del_plugin.hf import DELSettings, DELTrainerMixin

    class DELTrainer(DELTrainerMixin, Trainer):
        pass

    args = TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=rows,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
    )
    if not with_del:
        return Trainer(model=model, args=args, processing_class=tokenizer)
    return DELTrainer(
        model=model, args=args, processing_class=tokenizer, del_settings=DELSettings(alpha=0.3), del_vocab=vocab
    )


def train_step(trainer, batch: dict) -> None:
    """What the Trainer's loop does with one micro-batch, DEL's part included: gather the step's batches (the
    digit count), the loss, its backward."""
    inputs = dict(batch)
    samples, num_items = trainer.get_batch_samples(iter([inputs]), 1, torch.device("cpu"))
    loss = trainer.compute_loss(trainer.model, samples[0], num_items_in_batch=num_items)
    loss.backward()
    trainer.model.zero_grad(set_to_none=True)


def census_case(tokenizer_name: str, head: str, rows: int, seq_len: int, number_positions: bool = True) -> dict:
    """DEL's census in one training step: the step with DEL minus the step without. ``number_positions=False``
    leaves the collator's number-token positions out of the batch (as for dispatched batches)."""
    from transformers import AutoModelForCausalLM

    from del_plugin.core import DigitVocab
    from del_plugin.core.places import NOT_A_DIGIT
    from del_plugin.hf.collator import NUMBER_POSITIONS_KEY, TARGET_PLACES_KEY
    from tools.assets import load_tokenizer, tiny_model_dir

    tokenizer = load_tokenizer(tokenizer_name)
    vocab = DigitVocab.from_tokenizer(tokenizer, name=tokenizer_name)
    batch = packed_batch(tokenizer, vocab, rows, seq_len)
    if not number_positions:
        batch.pop(NUMBER_POSITIONS_KEY, None)
    census = {}
    with tempfile.TemporaryDirectory() as tmp:
        for with_del in (False, True):
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_pretrained(tiny_model_dir(tokenizer_name))
            model.get_output_embeddings().weight.requires_grad_(head == "trainable")
            model.train()
            trainer = build_trainer(model, tokenizer, vocab, with_del, rows, tmp)
            plain = {k: v for k, v in batch.items() if not k.startswith("del_")}  # the collator's own keys
            step_batch = batch if with_del else plain
            train_step(trainer, step_batch)  # the first step: start-up check, caches, compilation
            census["on" if with_del else "off"] = op_census.op_census(partial(train_step, trainer, step_batch))
    places = batch[TARGET_PLACES_KEY]
    digits = places != NOT_A_DIGIT
    per_target = digits.sum(-1) if digits.dim() == 3 else digits.long()
    return {
        "tokenizer": tokenizer_name,
        "head": head,
        "tokens": rows * seq_len,
        "number_token_digits": vocab.max_digits,
        "digit_targets": int(digits.sum()),
        "targets_by_digits": torch.bincount(per_target.reshape(-1), minlength=vocab.max_digits + 1).tolist(),
        "step_without_del": census["off"].as_dict(),
        "step_with_del": census["on"].as_dict(),
        "del": census["on"].minus(census["off"]).as_dict(),
    }


def term_case(tokenizer_name: str, vocab_size: int, tokens: int, hidden: int, rounds: int) -> dict:
    """The digit term alone (``loss_step.term_only``: forward + backward from the hidden states, frozen head) at
    a 7-8B model's head, on GSM8K labels: its time, memory, launches and host synchronisations."""
    import loss_step
    from tqdm import tqdm

    from del_plugin.core import DigitVocab
    from tools.assets import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_name)
    vocab = DigitVocab.from_tokenizer(tokenizer, name=tokenizer_name)
    labels = loss_step.gsm8k_labels(tokenizer, tokens // loss_step.SEQ_LEN, loss_step.SEQ_LEN)
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, generator=gen)
    weight = torch.randn(vocab_size, hidden, generator=gen) * (2 / hidden**0.5)
    digit_ids = list(vocab.family_token_ids[0])
    case = loss_step.Case(h, weight, labels, vocab, digit_ids, vocab.decimal_point_id, {})
    del h, weight
    out = loss_step.term_only(case, f"{tokens}x{vocab_size}", tqdm(disable=True), rounds, False)["del"]
    return {
        "tokenizer": tokenizer_name,
        "tokens": tokens,
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "digit_targets": int(case.n_digits),
        "targets_by_digits": case.targets_by_digits,
        **out,
    }


@contextlib.contextmanager
def compile_mode(mode: str):
    """``eager``: DEL's small ops one by one (the CPU's default); ``compiled``: as one program each
    (``DEL_PLUGIN_COMPILE=1``, what a CUDA device gets by default); ``as is``: the environment unchanged (a
    library without ``del_plugin.core.fused``)."""
    saved = os.environ.get("DEL_PLUGIN_COMPILE")
    if mode != "as is":
        os.environ["DEL_PLUGIN_COMPILE"] = {"eager": "0", "compiled": "1"}[mode]
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("DEL_PLUGIN_COMPILE", None)
        else:
            os.environ["DEL_PLUGIN_COMPILE"] = saved


def run(args) -> dict:
    torch.set_num_threads(args.threads)
    results = {
        "machine": {**benchlib.machine_info(), "torch_threads": torch.get_num_threads()},
        "rows": args.rows,
        "seq_len": args.seq_len,
        "cases": [],
        "term_cases": [],
    }
    for mode in args.modes:
        for tokenizer_name in args.tokenizers if "step" in args.parts else ():
            for head in HEADS:
                if not args.quiet:
                    print(f"step ops ({mode}): {tokenizer_name}, {head} head", flush=True)
                with compile_mode(mode):
                    case = census_case(tokenizer_name, head, args.rows, args.seq_len)
                results["cases"].append({"mode": mode, **case})
        for tokenizer_name, vocab_size in TERM_SHAPES:
            if tokenizer_name in args.tokenizers and args.term_tokens and "term" in args.parts:
                if not args.quiet:
                    print(f"step ops ({mode}): the term alone, {tokenizer_name}, {args.term_tokens} x {vocab_size}")
                with compile_mode(mode):
                    term = term_case(tokenizer_name, vocab_size, args.term_tokens, args.term_hidden, args.rounds)
                results["term_cases"].append({"mode": mode, **term})
    results["targets"] = {
        "no_host_sync_in_dels_path": all(
            c["del"]["syncs"] <= 0 and c["del"]["host_reads"] <= 0 for c in results["cases"]
        )
        and all(t["host_syncs"] == 0 for t in results["term_cases"]),
    }
    for mode in args.modes:
        results["targets"][f"del_launches_max_{mode}"] = max(
            (c["del"]["launches"] for c in results["cases"] if c["mode"] == mode), default=None
        )
        results["targets"][f"term_launches_max_{mode}"] = max(
            (t["launches"] for t in results["term_cases"] if t["mode"] == mode), default=None
        )
    return results


def _ops(counts: dict[str, int], limit: int = 8) -> str:
    items = sorted(counts.items(), key=lambda kv: (-abs(kv[1]), kv[0]))
    text = ", ".join(f"{name.removeprefix('aten::')} {n:+d}" for name, n in items[:limit])
    return text + (f", {len(items) - limit} more" if len(items) > limit else "")


def tables(results: dict) -> str:
    parts = []
    if results["cases"]:
        parts.append(step_section(results))
    if results["term_cases"]:
        parts.append(term_section(results))
    return "\n".join(parts)


def step_section(results: dict) -> str:
    """The training step's census: DEL's launches and host synchronisations per mode, tokenizer and head."""
    rows, sync_lines = [], []
    for c in results["cases"]:
        d = c["del"]
        rows.append(
            [
                c.get("mode", "as is"),
                c["tokenizer"],
                c["head"],
                f"{c['step_without_del']['launches']:,}",
                f"{c['step_with_del']['launches']:,}",
                f"**{d['launches']:+,}**",
                f"**{d['syncs'] + d['host_reads']}**",
                d["cpu_only_checks"],
            ]
        )
        sync_lines += sync_sites(c)
    table = benchlib.markdown_table(
        [
            "DEL's small ops",
            "tokenizer",
            "head",
            "launches, step without DEL",
            "with DEL",
            "DEL's launches",
            "DEL's host syncs (on CUDA)",
            "CPU-only host checks",
        ],
        rows,
    )
    ops = [
        f"- {c.get('mode', 'as is')}, {c['tokenizer']}, {c['head']} head: {_ops(c['del']['by_op'])}"
        for c in results["cases"]
    ]
    c0 = results["cases"][0]
    return (
        f"One training step (get_batch_samples, compute_loss, backward) of a tiny Llama, {results['rows']} "
        f"packed rows x {results['seq_len']} tokens of GSM8K; DEL's share = the step with DEL minus the step "
        f"without.\n\n{table}\n\nHost synchronisations in DEL's path:\n\n"
        + ("\n".join(sync_lines) if sync_lines else "- none")
        + "\n\nDEL's launches by op (the largest differences):\n\n"
        + "\n".join(ops)
        + f"\n\n(first case: {c0['digit_targets']:,} digit targets; targets by digits held "
        f"{c0['targets_by_digits']})\n"
    )


def sync_sites(case: dict) -> list[str]:
    """The lines naming one case's host synchronisations (on CUDA), then its CPU-only host checks."""
    d, lines = case["del"], []
    where = f"{case.get('mode', 'as is')}, {case['tokenizer']}, {case['head']} head"
    found = {**d["sync_ops"], **d["host_read_calls"]}
    if found:
        lines.append(f"- {where}: " + "; ".join(f"{n} x {k}" for k, n in found.items()))
    if d["cpu_only_check_ops"]:
        lines.append(f"- {where}, CPU only: " + "; ".join(f"{n} x {k}" for k, n in d["cpu_only_check_ops"].items()))
    return lines


def term_section(results: dict) -> str:
    """The digit term alone at a 7-8B model's head: time, memory, launches and host synchronisations."""
    term_rows = [
        [
            t.get("mode", "as is"),
            t["tokenizer"],
            f"{t['tokens']:,} x {t['vocab_size']:,}, H {t['hidden_size']:,}",
            f"{t['digit_targets']:,}",
            f"{t['median_cpu_s'] * 1e3:,.1f}",
            f"{t['median_wall_s'] * 1e3:,.1f}",
            f"{t['peak_bytes'] / 2**20:,.1f}",
            f"**{t['launches']}**",
            f"**{t['host_syncs']}**",
        ]
        for t in results["term_cases"]
    ]
    term = benchlib.markdown_table(
        [
            "DEL's small ops",
            "tokenizer",
            "tokens x V",
            "digit targets",
            "CPU ms",
            "wall ms",
            "peak MiB",
            "launches",
            "host syncs",
        ],
        term_rows,
    )
    return (
        "The digit term alone at a 7-8B model's head (forward + backward from the hidden states, frozen head, "
        "GSM8K labels, float32 on this CPU; `loss_step.term_only`: the trainer's term, with the statistics it "
        f"logs):\n\n{term}\n"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizers", nargs="+", default=list(DEFAULT_TOKENIZERS))
    parser.add_argument("--rows", type=int, default=4, help="packed rows per micro-batch (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=512, help="tokens per row (default %(default)s)")
    parser.add_argument(
        "--term-tokens", type=int, default=8192, help="the term alone: tokens (default %(default)s; 0: not measured)"
    )
    parser.add_argument("--term-hidden", type=int, default=4096, help="the term alone: H (default %(default)s)")
    parser.add_argument("--rounds", type=int, default=7, help="the term alone: timed rounds (default %(default)s)")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("eager", "compiled", "as is"),
        default=["eager", "compiled"],
        help="DEL's small ops one by one (the CPU's default) and/or compiled (CUDA's default) (default: both)",
    )
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("step", "term"),
        default=["step", "term"],
        help="the training step's census and/or the term alone (default: both)",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "step_ops.json")
    args = parser.parse_args(argv)
    return benchlib.publish(args.out, run(args), tables)


if __name__ == "__main__":
    main()
