"""GPU check: a few QLoRA steps with Axolotl on a small local Llama, DEL plugin off and on, beside each
cross-entropy kernel and with number tokens; then the loss step at 7-8B models' heads.

    python scripts/gpu_check.py                      # 8 QLoRA runs and the loss step: within 8 min on an H200
    python scripts/gpu_check.py --pairs plain,liger  # only some pairs
    python scripts/gpu_check.py --steps 20 --seq-len 2048 --micro-batch 2
    python scripts/gpu_check.py --number-tokens --vocab 128256  # every pair with numbers in 1-3-digit tokens
    python scripts/gpu_check.py --no-loss-step       # the QLoRA runs only

One pair of runs (DEL off, DEL on) per cross-entropy kernel, and one with number tokens:

* ``plain``: the model's own cross-entropy over the logits;
* ``numbers``: the same with a tokenizer that cuts numbers into tokens of 1-3 digits from the left (Llama-3's
  ``\\p{N}{1,3}``), at Llama-3's 128,256 logits (``--numbers-vocab``; a ~440M-parameter model): DEL's
  number-token path;
* ``liger``: Liger's fused linear cross-entropy (``plugins: [axolotl.integrations.liger.LigerPlugin]``,
  ``liger_fused_linear_cross_entropy: true``), which never materialises the logits;
* ``cce``: Cut Cross Entropy (``plugins: [axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin]``,
  ``cut_cross_entropy: true``), which never materialises them either. It needs Axolotl's fork of
  ``cut_cross_entropy`` (``pip install "cut-cross-entropy[transformers] @
  git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"``, not on PyPI); without it the pair is
  skipped with the reason printed.

Prints, per pair, the median step time and the peak GPU memory of each run, their ratio (DEL on / off), the
DEL metrics of the last logged step, and the host synchronisations per timed step, each counted as the warning
``torch.cuda.set_sync_debug_mode("warn")`` raises: of ``training_step`` (DEL on and off) and of DEL's own calls
after the forward (the digit targets, the criterion's sums, the logged parts). It fails when DEL's calls
synchronise at all, or a DEL run's steps more often than the run without DEL. Then the loss step
(``bench/loss_step.py --device cuda``): hidden states -> head -> cross-entropy with and without DEL at H = 4,096,
8,192 tokens of GSM8K, V = 32,000 / 128,256 / 151,936 (Llama-2-7B's, Llama-3-8B's and Qwen2.5-7B's heads; the
128,256 one with Llama-3's number tokens), plain and Axolotl's chunked CE, frozen and trainable head, and DEL's
term alone with its kernel count, run once more under ``set_sync_debug_mode("error")``; it fails when that
raises.

Nothing is downloaded: the model is a randomly initialised Llama built here (Llama-2's 32k vocabulary size, so
the logits weigh what they weigh in the 7B runs), the tokenizer a synthetic one with one token per character, and
the data synthetic arithmetic with integers and decimals. Each run is a separate Python process, so that neither
memory nor Axolotl's plugin registry or kernel patches leak from one into the next. Flash-attention 2 is used when
`flash_attn` is installed, PyTorch's sdpa otherwise; everything else is what examples/*/qlora-24gb.yml uses (4-bit
NF4 with double quantisation, LoRA on all linear layers with Axolotl's fused kernels, sample packing, gradient
checkpointing, paged 8-bit AdamW, bf16 or fp16).

Budget: each run is mostly start-up (imports, model load, data preparation, kernel compilation); the 13 steps
of the default take seconds on an H200. Everything is meant to finish within 8 minutes: a run is stopped after
`--timeout` seconds (default 150), the loss step after `--loss-step-timeout` (default 200); a pair whose two runs
would end past `--budget` seconds (default 480, estimated from the longest run so far) is skipped with the
reason printed, and so is the loss step when its timeout would end past it. The order is plain, numbers, the loss
step, liger, cce. A run that fails or times out is reported in the table (exit status 1) and the rest still runs.

It needs a CUDA GPU and says so in one line (exit status 2) on a machine without one. `--cpu-smoke` runs the
plain and numbers pairs on the CPU with tiny models and the GPU-only features swapped for their CPU equivalents
(the fused kernels are Triton kernels and need a GPU; the loss step and the synchronisation counts need CUDA); it
exists to test this script without a GPU and its timings mean nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

# the del_plugin of this checkout, in this process and in the runs it starts (Axolotl imports the plugin by name)
REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

EXIT_NO_GPU = 2
RESULT_TAG = "GPU_CHECK_RESULT "
DEL_KEYS = ("ce_loss", "del_loss", "del_l_num", "digit_entropy", "digit_accuracy", "digit_targets")
SMOKE_SIZES = {
    "hidden": 64,
    "intermediate": 128,
    "layers": 2,
    "heads": 4,
    "kv_heads": 2,
    "vocab": 512,
    "seq_len": 512,
    "micro_batch": 2,
    "grad_accum": 2,
    "steps": 2,
    "warmup": 1,
    "rows": 400,
}
# cross-entropy kernel -> what it adds to the Axolotl config (besides DEL's own keys)
PAIRS = {
    "plain": {"plugins": [], "cfg": {}},
    "numbers": {"plugins": [], "cfg": {}},  # the plain CE, on a model with number tokens (NUMBERS_MODEL)
    "liger": {"plugins": ["axolotl.integrations.liger.LigerPlugin"], "cfg": {"liger_fused_linear_cross_entropy": True}},
    "cce": {
        "plugins": ["axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"],
        "cfg": {"cut_cross_entropy": True},
    },
}
PAIR_TITLES = {"plain": "plain CE", "numbers": "number tokens", "liger": "Liger FLCE", "cce": "Cut Cross Entropy"}
MODEL, NUMBERS_MODEL = "model", "model-numbers"  # folders in the work directory
NUMBERS_VOCAB = 128_256  # Llama-3's logits
SMOKE_NUMBERS_VOCAB = 2048  # room for the 1,110 number tokens
# the loss step at 7-8B models' heads: Llama-2-7B's, Llama-3-8B's and Qwen2.5-7B's logits, H = 4,096
LOSS_STEP_SHAPES = ("8192x32000", "8192x128256", "8192x151936")
LOSS_STEP_HIDDEN = 4096
SYNC_WARNING = "synchronizing CUDA operation"  # what set_sync_debug_mode("warn") says
CCE_INSTALL = (
    'pip install "cut-cross-entropy[transformers] @ '
    'git+https://github.com/axolotl-ai-cloud/ml-cross-entropy.git@v0.1.1"'
)


def parse_pairs(text: str) -> list[str]:
    pairs = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown or not pairs:
        raise argparse.ArgumentTypeError(f"--pairs takes a comma-separated subset of {','.join(PAIRS)}, got {text!r}")
    return list(dict.fromkeys(pairs))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10, help="timed optimizer steps per run (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--seq-len", type=int, default=1024, help="packed row length (default 1024)")
    parser.add_argument("--micro-batch", type=int, default=4, help="packed rows per micro-batch (default 4)")
    parser.add_argument("--grad-accum", type=int, default=2, help="micro-batches per optimizer step (default 2)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size, padded (default 32000)")
    parser.add_argument("--rows", type=int, default=2000, help="synthetic training rows (default 2000)")
    parser.add_argument("--del-alpha", type=float, default=1.0)
    parser.add_argument(
        "--number-tokens",
        action="store_true",
        help="every pair with a tokenizer that cuts numbers into tokens of 1-3 digits from the left, as Llama-3's "
        "(every 1-, 2- and 3-digit string a token): DEL's number-token path (the numbers pair then adds nothing)",
    )
    parser.add_argument(
        "--numbers-vocab",
        type=int,
        default=NUMBERS_VOCAB,
        help=f"vocabulary size of the numbers pair's model (default {NUMBERS_VOCAB:,}, Llama-3's)",
    )
    parser.add_argument(
        "--pairs",
        type=parse_pairs,
        default=None,
        help=f"pairs to run DEL off and on, comma-separated (default {','.join(PAIRS)}; --cpu-smoke: those "
        "that run on a CPU, plain and numbers)",
    )
    parser.add_argument("--timeout", type=int, default=150, help="seconds allowed per run (default 150)")
    parser.add_argument(
        "--budget",
        type=int,
        default=None,
        help="seconds for everything (default 480; --cpu-smoke: none): a pair is skipped, with the "
        "reason printed, when its two runs would end past it (estimated from the longest run), the loss step "
        "when its timeout would",
    )
    parser.add_argument(
        "--loss-step",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the loss step at 7-8B heads after the numbers pair (default: on with a GPU; --cpu-smoke: off)",
    )
    parser.add_argument(
        "--loss-step-timeout", type=int, default=200, help="seconds allowed for the loss step (default 200)"
    )
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="test this script without a GPU: tiny models, GPU-only features off, the plain and numbers pairs, no "
        "loss step; no real numbers",
    )
    parser.add_argument("--child", choices=("off", "on", "loss-step"), help=argparse.SUPPRESS)
    parser.add_argument("--pair", choices=tuple(PAIRS), default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        for key, value in SMOKE_SIZES.items():
            setattr(args, key, value)
        args.numbers_vocab = SMOKE_NUMBERS_VOCAB
        if args.number_tokens:
            args.vocab = SMOKE_NUMBERS_VOCAB
    if args.loss_step is None:
        args.loss_step = not args.cpu_smoke
    for key in ("steps", "seq_len", "micro_batch", "grad_accum", "hidden", "layers", "heads", "kv_heads", "rows"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        parser.error("--hidden must be a multiple of --heads, and --heads a multiple of --kv-heads")
    least = 128 + (len(NUMBER_STRINGS) if args.number_tokens else 0)
    if args.vocab < least:
        parser.error(f"--vocab must be at least {least} (the tokens of the synthetic tokenizer)")
    if args.numbers_vocab < 128 + len(NUMBER_STRINGS):
        parser.error(f"--numbers-vocab must be at least {128 + len(NUMBER_STRINGS)} (the tokens of its tokenizer)")
    return args


def pair_model(args: argparse.Namespace, pair: str) -> tuple[str, argparse.Namespace]:
    """(the folder of the pair's model in the work directory, the arguments its model and tokenizer are built
    with): the numbers pair's own model with number tokens, every other pair the shared one."""
    if pair != "numbers" or args.number_tokens:
        return MODEL, args
    return NUMBERS_MODEL, argparse.Namespace(**{**vars(args), "number_tokens": True, "vocab": args.numbers_vocab})


# ---------------------------------------------------------------------------------------------------- assets
# every 2- and 3-digit string, the number tokens of --number-tokens (the single digits are characters already)
NUMBER_STRINGS = [str(v).zfill(m) for m in (2, 3) for v in range(10**m)]


def build_tokenizer(vocab_size: int, number_tokens: bool = False):
    """One token per printable ASCII character (so every digit is its own token), padded to `vocab_size`; with
    ``number_tokens``, digit runs are cut into tokens of 1-3 digits from the left instead ('12345' is '123' '45'),
    as Llama-3's ``\\p{N}{1,3}`` does."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    tokens = specials + chars + (NUMBER_STRINGS if number_tokens else [])
    tokens += [f"<unused_{i}>" for i in range(vocab_size - len(tokens))]
    vocab = {token: i for i, token in enumerate(tokens)}
    if number_tokens:  # chunks of 1-3 digits, every other character alone: each piece is a word of the vocabulary
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
        backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[0-9]{1,3}|[^0-9]"), behavior="isolated")
    else:
        backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))  # no merges: one token per char
    backend.decoder = decoders.Fuse()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>"
    )


def build_model_dir(args: argparse.Namespace, out: Path) -> int:
    """A random Llama saved with the synthetic tokenizer; returns its parameter count."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(args.vocab, args.number_tokens)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(2048, args.seq_len),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def write_arithmetic_rows(path: Path, rows: int, seed: int = 0) -> None:
    """Alpaca rows with integer and decimal arithmetic, so that DEL has digits to work on."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(rows):
            a, b = rng.randint(2, 99999), rng.randint(2, 999)
            price = rng.randint(100, 99999) / 100
            question = (
                f"A shop sells {b} boxes of {a} screws and one lamp for ${price:.2f}. "
                f"How many screws is that, and what is {b} times the lamp's price?"
            )
            answer = (
                f"There are {b} * {a} = {a * b} screws.\n"
                f"{b} * {price:.2f} = {b * price:.2f}\n#### {a * b} and {b * price:.2f}"
            )
            handle.write(json.dumps({"instruction": question, "input": "", "output": answer}) + "\n")


# ---------------------------------------------------------------------------------------------------- one run
def axolotl_config(args: argparse.Namespace, workdir: Path, with_del: bool, pair: str = "plain") -> dict:
    use_flash = (not args.cpu_smoke) and importlib.util.find_spec("flash_attn") is not None
    bf16 = (not args.cpu_smoke) and torch.cuda.is_bf16_supported()
    name = f"{pair}-{'on' if with_del else 'off'}"
    model = pair_model(args, pair)[0]
    cfg = {
        "base_model": str(workdir / model),
        "tokenizer_config": str(workdir / model),
        "datasets": [{"path": str(workdir / "rows.jsonl"), "ds_type": "json", "type": "alpaca"}],
        "dataset_prepared_path": str(workdir / f"prepared-{name}"),
        "dataset_num_proc": 1,
        "val_set_size": 0.0,
        "output_dir": str(workdir / f"out-{name}"),
        "save_strategy": "no",
        "load_in_4bit": True,
        "adapter": "qlora",
        "bnb_config_kwargs": {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
        "lora_r": 32,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "lora_target_linear": True,
        "lora_mlp_kernel": not args.cpu_smoke,
        "lora_qkv_kernel": not args.cpu_smoke,
        "lora_o_kernel": not args.cpu_smoke,
        "lora_embedding_kernel": False,
        "sequence_len": args.seq_len,
        "sample_packing": True,
        "pad_to_sequence_len": True,
        "micro_batch_size": args.micro_batch,
        "gradient_accumulation_steps": args.grad_accum,
        "max_steps": args.warmup + args.steps,
        "num_epochs": 100,  # max_steps ends the run
        "learning_rate": 2e-4,
        "lr_scheduler": "constant",
        "optimizer": "adamw_torch" if args.cpu_smoke else "paged_adamw_8bit",
        "bf16": bf16,
        "fp16": (not args.cpu_smoke) and not bf16,
        "tf32": not args.cpu_smoke,
        "attn_implementation": "flash_attention_2" if use_flash else "sdpa",
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"use_reentrant": False},
        "logging_steps": 1,
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": not args.cpu_smoke,
        "seed": 42,
        "plugins": list(PAIRS[pair]["plugins"]),
        **PAIRS[pair]["cfg"],
    }
    if with_del:
        cfg.update({"plugins": cfg["plugins"] + ["del_plugin.DELPlugin"], "del_alpha": args.del_alpha})
    return cfg


def loss_forward(model) -> str:
    """``module.qualname`` of the causal LM's forward: a kernel plugin replaces it (Liger, Cut Cross Entropy)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    forward = type(model).forward
    return f"{getattr(forward, '__module__', '?')}.{getattr(forward, '__qualname__', '?')}"


def run_child(args: argparse.Namespace) -> None:
    """One training run in this process; prints one result line for the parent."""
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets
    from axolotl.train import setup_model_and_trainer
    from axolotl.utils.dict import DictDefault
    from transformers import TrainerCallback

    with_del = args.child == "on"
    workdir = Path(args.workdir)
    cuda = torch.cuda.is_available() and not args.cpu_smoke

    def sync():
        if cuda:
            torch.cuda.synchronize()

    syncs = SyncCounter(enabled=cuda)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, *_, **__):
            sync()
            syncs.counting = len(self.times) >= args.warmup  # the timed steps (the first holds DEL's start-up check)
            self._start = time.perf_counter()

        def on_step_end(self, *_, **__):
            sync()
            self.times.append(time.perf_counter() - self._start)
            syncs.counting = False

    cfg = load_cfg(DictDefault(axolotl_config(args, workdir, with_del, args.pair)))
    meta = load_datasets(cfg=cfg)
    trainer = setup_model_and_trainer(cfg, meta)[0]
    timer = StepTimer()
    trainer.add_callback(timer)
    trainer.training_step = syncs.counted("training_step", trainer.training_step)
    if with_del:
        import del_plugin.hf.trainer as del_trainer

        # DEL's own calls after the forward (the decoder hook's product runs inside the forward; its syncs and
        # those of DEL's backward are the training step's, compared with the run without DEL)
        trainer.del_capture.digit_targets = syncs.counted("del", trainer.del_capture.digit_targets)
        del_trainer.digit_criterion_sums = syncs.counted("del", del_trainer.digit_criterion_sums)
        for name in ("add_train", "add_eval", "add_digits"):
            setattr(trainer.del_metrics, name, syncs.counted("del", getattr(trainer.del_metrics, name)))
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    timed = timer.times[args.warmup :]
    logs = [h for h in trainer.state.log_history if "loss" in h]
    result = {
        "pair": args.pair,
        "del": with_del,
        "trainer": type(trainer).__name__,
        "forward": loss_forward(trainer.model),
        "attention": cfg.attn_implementation,
        "steps": len(timer.times),
        "step_time_s": statistics.median(timed) if timed else None,
        "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
        "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
        "last_log": {k: v for k, v in (logs[-1] if logs else {}).items() if isinstance(v, (int, float))},
        # host synchronisations per timed step (None without CUDA)
        "syncs_per_step": syncs.per_step("training_step", len(timed)),
        "del_syncs_per_step": syncs.per_step("del", len(timed)) if with_del else None,
    }
    print(RESULT_TAG + json.dumps(result), flush=True)


class SyncCounter:
    """Counts the host synchronisations of wrapped calls while ``counting``: each call runs under
    ``torch.cuda.set_sync_debug_mode("warn")``, and every warning it raises (from autograd's device threads too,
    which hand theirs to the caller) is one synchronisation. A counted call inside another is counted under its own
    name and in the outer one's."""

    def __init__(self, enabled: bool):
        self.enabled, self.counting = enabled, False
        self.counts: dict[str, int] = {}
        self._inner: list[int] = []  # per open call, what the calls inside it counted

    def counted(self, name: str, fn):
        import functools
        import warnings

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not (self.enabled and self.counting):
                return fn(*args, **kwargs)
            self._inner.append(0)
            before = torch.cuda.get_sync_debug_mode()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    return fn(*args, **kwargs)
                finally:
                    torch.cuda.set_sync_debug_mode(before)
                    found = sum(SYNC_WARNING in str(w.message) for w in caught) + self._inner.pop()
                    self.counts[name] = self.counts.get(name, 0) + found
                    if self._inner:
                        self._inner[-1] += found

        return wrapper

    def per_step(self, name: str, steps: int) -> float | None:
        return self.counts.get(name, 0) / steps if self.enabled and steps else None


def launch(args: argparse.Namespace, workdir: Path, pair: str, variant: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, "--pair", pair, "--workdir", str(workdir)]
    for key in ("steps", "warmup", "seq_len", "micro_batch", "grad_accum", "del_alpha"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    if args.cpu_smoke:
        cmd.append("--cpu-smoke")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    if args.cpu_smoke:
        env["CUDA_VISIBLE_DEVICES"] = ""  # Axolotl would otherwise put the model on a GPU if there is one
    started = time.perf_counter()
    what = f"the {PAIR_TITLES[pair]}, DEL-{variant} run"
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {
            "error": f"{what} took longer than {args.timeout} s (--timeout)",
            "wall_s": time.perf_counter() - started,
        }
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + "\n" + done.stderr).strip().splitlines()[-40:])
        return {"error": f"{what} failed (exit {done.returncode}):\n{tail}", "wall_s": time.perf_counter() - started}
    result = json.loads(lines[-1][len(RESULT_TAG) :])
    result["wall_s"] = time.perf_counter() - started
    return result


# a word in the module of the causal LM's forward that each kernel's plugin installs
FORWARD_MARKS = {"liger": "liger", "cce": "cut_cross_entropy"}


def check_result(result: dict, args: argparse.Namespace) -> list[str]:
    """What is wrong with a run's result, if anything."""
    problems = []
    name = f"{result.get('pair', 'plain')}, DEL {'on' if result['del'] else 'off'}"
    expected_steps = args.warmup + args.steps
    if result["steps"] != expected_steps:
        problems.append(f"{name}: {result['steps']} steps, not {expected_steps}")
    pair, forward = result.get("pair", "plain"), result.get("forward", "?")
    if not forward.startswith("?."):  # a forward without __module__ (a partial, say) cannot be told apart
        if pair in FORWARD_MARKS and FORWARD_MARKS[pair] not in forward:
            problems.append(f"{name}: the model's forward is {forward}, not the {PAIR_TITLES[pair]} kernel's")
        if pair == "plain" and any(mark in forward for mark in FORWARD_MARKS.values()):
            problems.append(f"{name}: the model's forward is a fused kernel's ({forward})")
    log = result["last_log"]
    if result["del"]:
        if result["trainer"] != "DELTrainer":
            problems.append(f"{name}: Axolotl used {result['trainer']}, not DELTrainer")
        missing = [k for k in DEL_KEYS if k not in log or not math.isfinite(log[k])]
        if missing:
            problems.append(f"{name}: no finite {', '.join(missing)} in the last log {log}")
        elif log["digit_targets"] <= 0:
            problems.append(f"{name}: no digit targets in the last step")
    elif any(k in log for k in DEL_KEYS):
        problems.append(f"{name}: DEL metrics were logged although the plugin was not listed")
    if result.get("del_syncs_per_step"):
        problems.append(
            f"{name}: DEL's calls after the forward made the host wait for the GPU "
            f"{result['del_syncs_per_step']:g} times per step"
        )
    return problems


def check_pair_syncs(pair: str, runs: dict) -> list[str]:
    """A DEL run's steps must not wait for the GPU more often than the run without DEL."""
    on, off = runs["on"].get("syncs_per_step"), runs["off"].get("syncs_per_step")
    if on is None or off is None or on <= off:
        return []
    return [f"{PAIR_TITLES[pair]}: {on:g} host synchronisations per step with DEL, {off:g} without"]


def unavailable(pair: str, args: argparse.Namespace) -> str | None:
    """Why a pair cannot run here (None if it can)."""
    if pair == "plain":
        return None
    if pair == "numbers":
        return "--number-tokens: every pair reads number tokens already" if args.number_tokens else None
    if args.cpu_smoke:
        return "its fused kernels are Triton kernels and need a GPU (--cpu-smoke runs the plain pair only)"
    if pair == "liger" and importlib.util.find_spec("liger_kernel") is None:
        return "liger-kernel is not installed (pip install liger-kernel)"
    if pair == "cce":
        # Axolotl's CutCrossEntropyPlugin raises ImportError in pre_model_load without its fork: check first
        try:
            found = importlib.util.find_spec("cut_cross_entropy.transformers") is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            return f"Axolotl's fork of cut_cross_entropy is not installed (not on PyPI): {CCE_INSTALL}"
        try:
            from cut_cross_entropy.transformers.patch import AXOLOTL_CCE_FORK
        except ImportError as error:
            return f"cut_cross_entropy.transformers.patch does not import ({error}); {CCE_INSTALL}"
        if not AXOLOTL_CCE_FORK:
            return f"the installed cut_cross_entropy is not Axolotl's fork; {CCE_INSTALL}"
    return None


def fmt(value: float | None, unit: str, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f} {unit}".strip()


def ratio(on: float | None, off: float | None) -> str:
    return "n/a" if not on or not off else f"{on / off:.3f}"


# ---------------------------------------------------------------------------------------------------- loss step
def arithmetic_labels(tokenizer, rows_path: Path, batch: int, length: int) -> torch.Tensor:
    """``[batch, length]`` labels of the synthetic arithmetic rows as sample packing lays them out: each row's
    Alpaca prompt masked with -100, its answer + EOS the targets, rows back to back (the numbers of the answers
    are the digit targets, cut by the tokenizer as it cuts them)."""
    from collation import ALPACA_PROMPT  # bench/, on the path in the loss-step child

    need, flat = batch * length, []
    with open(rows_path, encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            masked = tokenizer(ALPACA_PROMPT.format(instruction=row["instruction"]), add_special_tokens=False)
            masked = masked["input_ids"]
            answer = tokenizer(row["output"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            flat += [-100] * len(masked) + answer
            if len(flat) >= need:
                return torch.tensor(flat[:need]).view(batch, length)
    raise ValueError(f"{rows_path} holds fewer than {need} label tokens (--rows)")


def run_loss_step_child(args: argparse.Namespace) -> None:
    """The loss step of bench/loss_step.py on the GPU at 7-8B models' heads (LOSS_STEP_SHAPES, H =
    LOSS_STEP_HIDDEN, bfloat16), with this script's synthetic tokenizers (nothing to download) and arithmetic
    labels: single digits at 32,000 and 151,936 logits, number tokens at 128,256. Prints one result line."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    import loss_step
    from tqdm import tqdm

    from del_plugin.core import DigitVocab

    import benchlib

    device = torch.device("cuda")
    results = {
        "machine": {**benchlib.machine_info(), "device": str(device)},
        "memory_validation": benchlib.validate_memory_measurement(device),
        "alpha": loss_step.ALPHA,
        "seq_len": loss_step.SEQ_LEN,
        "hidden_size": LOSS_STEP_HIDDEN,
        "dtype": "bfloat16",
        "labels": "gpu_check's synthetic arithmetic rows",
        "cases": [],
        "skipped": [],
    }
    ce_losses = {"plain": loss_step.plain_ce_loss(), "chunked": loss_step.axolotl_chunked_ce_loss()}
    for shape in LOSS_STEP_SHAPES:
        tokens, vocab_size = loss_step.parse_shape(shape)
        number_tokens = vocab_size == NUMBERS_VOCAB
        tokenizer = build_tokenizer(vocab_size, number_tokens)
        name = f"synthetic{' number tokens' if number_tokens else ''}"
        vocab = DigitVocab.from_tokenizer(tokenizer, name=name)
        labels = arithmetic_labels(
            tokenizer, Path(args.workdir) / "rows.jsonl", tokens // loss_step.SEQ_LEN, loss_step.SEQ_LEN
        )
        gen = torch.Generator().manual_seed(0)
        hidden = torch.randn(tokens, LOSS_STEP_HIDDEN, generator=gen).to(device, torch.bfloat16)
        weight = torch.randn(vocab_size, LOSS_STEP_HIDDEN, generator=gen) * (2 / math.sqrt(LOSS_STEP_HIDDEN))
        weight = weight.to(device, torch.bfloat16)
        digit_ids = list(vocab.family_token_ids[0])
        case = loss_step.Case(hidden, weight, labels, vocab, digit_ids, vocab.decimal_point_id, ce_losses)
        del hidden, weight
        out = loss_step.bench_case(case, tokens, vocab_size, name, device, 5, False, None, tqdm(disable=True))
        results["cases"].append(out)
        del case
        torch.cuda.empty_cache()
    results["targets"] = loss_step.evaluate_targets(results)
    summary = []
    for case in results["cases"]:
        alone = case["term_only"]["del"]
        fastest = min(m["median_wall_s"] for m in case["methods"].values() if m["loss"] == "ce")
        summary.append(
            {
                "shape": f"{case['tokens']:,} x {case['vocab_size']:,}",
                "tokenizer": case["tokenizer"],
                "term_ms": alone["median_wall_s"] * 1e3,
                "term_over_fastest_ce": alone["median_wall_s"] / fastest,
                "term_kernels": alone.get("launches"),
                "term_sync_free": alone.get("cuda_sync_free"),
            }
        )
    payload = {"tables": loss_step.tables(results), "targets": results["targets"], "summary": summary}
    print(RESULT_TAG + json.dumps(payload), flush=True)


def run_loss_step(args: argparse.Namespace, workdir: Path) -> dict:
    """The loss-step child, in its own process (its own CUDA memory), stopped after --loss-step-timeout."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "loss-step", "--workdir", str(workdir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.loss_step_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the loss step took longer than {args.loss_step_timeout} s (--loss-step-timeout)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if done.returncode != 0 or not lines:
        tail = "\n".join((done.stdout + "\n" + done.stderr).strip().splitlines()[-40:])
        return {"error": f"the loss step failed (exit {done.returncode}):\n{tail}"}
    result = json.loads(lines[-1][len(RESULT_TAG) :])
    result["wall_s"] = time.perf_counter() - started
    return result


def loss_step_problems(result: dict) -> list[str]:
    if "error" in result:
        return [result["error"].splitlines()[0]]
    problems = [
        f"loss step {row['shape']}: DEL's term alone waited for the GPU ({row['term_sync_free']})"
        for row in result["summary"]
        if row["term_sync_free"] is not True
    ]
    if not result["targets"].get("memory_le_1.02_every_case"):
        problems.append("loss step: CE + DEL used more than 1.02x CE's peak memory at some head")
    return problems


def print_loss_step(result: dict) -> None:
    if "error" in result:
        skipped = result["error"].startswith("skipped")
        print(f"loss step: {'' if skipped else 'failed: '}{result['error'].splitlines()[0]}")
        return
    print(
        f"\nloss step at 7-8B heads (bench/loss_step.py, H {LOSS_STEP_HIDDEN:,}, bfloat16), {result['wall_s']:.0f} s:"
    )
    print(result["tables"])
    for row in result["summary"]:
        print(
            f"DEL's term alone at {row['shape']} ({row['tokenizer']}): {row['term_ms']:.3f} ms, "
            f"{row['term_over_fastest_ce']:.1%} of the fastest CE step, {row['term_kernels']} kernels, "
            f"no host synchronisation: {row['term_sync_free']}"
        )


def print_table(results: dict[str, dict], skipped: dict[str, str]) -> None:
    """Per pair: DEL off, DEL on, their ratio; then the DEL metrics of each pair's last logged step."""
    header = f"{'pair':20}{'DEL':8}{'step time (median)':>20}{'peak allocated':>18}{'peak reserved':>16}"
    print(header)
    print("-" * len(header))
    for pair, runs in results.items():
        if "error" in runs:
            print(f"{PAIR_TITLES[pair]:20}failed: {runs['error'].splitlines()[0]}")
            continue
        off, on = runs["off"], runs["on"]
        for name, r in (("off", off), ("on", on)):
            print(
                f"{PAIR_TITLES[pair]:20}{name:8}{fmt(r['step_time_s'], 's'):>20}"
                f"{fmt(r['peak_allocated_gib'], 'GiB', 2):>18}{fmt(r['peak_reserved_gib'], 'GiB', 2):>16}"
            )
        print(
            f"{PAIR_TITLES[pair]:20}{'on/off':8}{ratio(on['step_time_s'], off['step_time_s']):>20}"
            f"{ratio(on['peak_allocated_gib'], off['peak_allocated_gib']):>18}"
            f"{ratio(on['peak_reserved_gib'], off['peak_reserved_gib']):>16}"
        )
    for pair, reason in skipped.items():
        print(f"{PAIR_TITLES[pair]:20}skipped: {reason}")
    done = {pair: runs for pair, runs in results.items() if "error" not in runs}
    for pair, runs in done.items():
        print(f"forward ({pair}): {runs['off']['forward']} (DEL off), {runs['on']['forward']} (DEL on)")
    for pair, runs in done.items():
        log = runs["on"]["last_log"]
        print(f"DEL on, last step ({pair}): " + ", ".join(f"{k}={log[k]:.4g}" for k in DEL_KEYS if k in log))
    for pair, runs in done.items():
        off, on = runs["off"].get("syncs_per_step"), runs["on"].get("syncs_per_step")
        if off is not None and on is not None:
            print(
                f"host synchronisations per step ({pair}): training_step {off:g} (DEL off), {on:g} (DEL on), of "
                f"which in DEL's calls after the forward {runs['on'].get('del_syncs_per_step') or 0:g}"
            )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "gpu_check: needs a CUDA GPU, and torch.cuda.is_available() is False here (a CPU-only machine or a "
            "CPU build of PyTorch); run it on a machine with an NVIDIA GPU and CUDA PyTorch.",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    if args.child == "loss-step":
        run_loss_step_child(args)
        return 0
    if args.child:
        run_child(args)
        return 0
    if importlib.util.find_spec("bitsandbytes") is None:
        print("gpu_check: needs bitsandbytes for the 4-bit QLoRA steps; pip install bitsandbytes", file=sys.stderr)
        return 1
    requested = args.pairs or list(PAIRS)
    skipped = {pair: reason for pair in requested if (reason := unavailable(pair, args))}
    pairs = [pair for pair in requested if pair not in skipped]
    for pair, reason in skipped.items():
        print(f"gpu_check: skipping the {PAIR_TITLES[pair]} pair: {reason}", flush=True)
    if not pairs:
        print("gpu_check: no pair left to run", file=sys.stderr)
        return 1

    started = time.perf_counter()
    loss_step = None
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        workdir = Path(tmp)
        models: dict[str, int] = {}
        for pair in pairs:
            folder, model_args = pair_model(args, pair)
            if folder not in models:
                models[folder] = build_model_dir(model_args, workdir / folder)
        n_params = models.get(MODEL, models.get(NUMBERS_MODEL, 0))
        write_arithmetic_rows(workdir / "rows.jsonl", args.rows)
        device = (
            "CPU (--cpu-smoke: timings mean nothing)"
            if args.cpu_smoke
            else (f"{torch.cuda.get_device_name(0)} (sm_{''.join(map(str, torch.cuda.get_device_capability(0)))})")
        )
        print(f"gpu_check on {device}, torch {torch.__version__}")
        print(
            f"model: random Llama, {n_params / 1e6:.1f}M parameters ({args.layers} layers, hidden {args.hidden}, "
            f"vocabulary {args.vocab}), 4-bit NF4 QLoRA r=32; {args.micro_batch} x {args.seq_len} tokens x "
            f"{args.grad_accum} micro-batches per step; {args.warmup} warm-up + {args.steps} timed steps; "
            f"pairs: {', '.join(pairs)}"
            + (
                f"; numbers: {models[NUMBERS_MODEL] / 1e6:.1f}M parameters, vocabulary {args.numbers_vocab}"
                if NUMBERS_MODEL in models
                else ""
            ),
            flush=True,
        )
        budget = args.budget if args.budget is not None else (None if args.cpu_smoke else 480)
        results: dict[str, dict] = {}
        longest = 0.0
        # the loss step before the first fused kernel's pair (after plain and numbers, in the default order)
        loss_step_at = next((i for i, p in enumerate(pairs) if p in ("liger", "cce")), len(pairs))
        for index, pair in enumerate(pairs + [None]):
            elapsed = time.perf_counter() - started
            if index == loss_step_at and args.loss_step:
                if budget is not None and elapsed + args.loss_step_timeout > budget:
                    loss_step = {
                        "error": f"skipped: its --loss-step-timeout of {args.loss_step_timeout} s would end past "
                        f"the --budget of {budget} s ({elapsed:.0f} s used)"
                    }
                else:
                    print("running the loss step at 7-8B heads ...", flush=True)
                    loss_step = run_loss_step(args, workdir)
                    print(f"  {time.perf_counter() - started - elapsed:.0f} s", flush=True)
                elapsed = time.perf_counter() - started
            if pair is None:
                break
            if budget is not None and longest and elapsed + 2 * longest > budget:
                skipped[pair] = (
                    f"its two runs (~{2 * longest:.0f} s, as long as the longest so far) would end past "
                    f"the --budget of {budget} s ({elapsed:.0f} s used)"
                )
                print(f"gpu_check: skipping the {PAIR_TITLES[pair]} pair: {skipped[pair]}", flush=True)
                continue
            results[pair] = {}
            for variant in ("off", "on"):
                print(f"running {PAIR_TITLES[pair]}, DEL {variant} ...", flush=True)
                run = launch(args, workdir, pair, variant)
                longest = max(longest, run["wall_s"])
                print(f"  {run['wall_s']:.0f} s", flush=True)
                if "error" in run:
                    print(f"gpu_check: {run['error']}", file=sys.stderr, flush=True)
                    results[pair] = {"error": run["error"]}  # the other run of the pair would tell nothing
                    break
                results[pair][variant] = run
    ran = [runs for runs in results.values() if "error" not in runs]
    print(
        f"attention: {ran[0]['on']['attention'] if ran else 'n/a'}; "
        f"{sum(len(r) for r in ran)} runs in {time.perf_counter() - started:.0f} s"
    )
    print_table(results, skipped)
    if loss_step is not None:
        print_loss_step(loss_step)
    problems = [
        f"{PAIR_TITLES[pair]}: {runs['error'].splitlines()[0]}" for pair, runs in results.items() if "error" in runs
    ]
    problems += [p for runs in ran for r in (runs["off"], runs["on"]) for p in check_result(r, args)]
    problems += [p for pair, runs in results.items() if "error" not in runs for p in check_pair_syncs(pair, runs)]
    if loss_step is not None and not loss_step.get("error", "").startswith("skipped"):
        problems += loss_step_problems(loss_step)
    for problem in problems:
        print(f"gpu_check: FAILED: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
