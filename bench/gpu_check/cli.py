"""The check's arguments: what a user sets, the sizes ``--cpu-smoke`` swaps in, and the hidden ones the parent
passes to a child process."""

from __future__ import annotations

import argparse

from . import __doc__ as DESCRIPTION
from .assets import CHARACTER_TOKENS, NUMBER_STRINGS
from .pairs import PAIRS

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
NUMBERS_VOCAB = 128_256  # Llama-3's logits
SMOKE_NUMBERS_VOCAB = 2048  # room for the 1,110 number tokens
CHILD_ROLES = ("off", "on", "loss-step")  # --child: a training run with DEL off or on, or the loss step
POSITIVE = ("steps", "seq_len", "micro_batch", "grad_accum", "hidden", "layers", "heads", "kv_heads", "rows")


def parse_pairs(text: str) -> list[str]:
    pairs = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in pairs if p not in PAIRS]
    if unknown or not pairs:
        raise argparse.ArgumentTypeError(f"--pairs takes a comma-separated subset of {','.join(PAIRS)}, got {text!r}")
    return list(dict.fromkeys(pairs))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cpu_smoke:
        for key, value in SMOKE_SIZES.items():
            setattr(args, key, value)
        args.numbers_vocab = SMOKE_NUMBERS_VOCAB
        if args.number_tokens:
            args.vocab = SMOKE_NUMBERS_VOCAB
    if args.loss_step is None:
        args.loss_step = not args.cpu_smoke
    refuse_bad_sizes(parser, args)
    return args


def refuse_bad_sizes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Sizes the model or the tokenizer cannot be built with, refused before anything is built."""
    for key in POSITIVE:
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        parser.error("--hidden must be a multiple of --heads, and --heads a multiple of --kv-heads")
    least = CHARACTER_TOKENS + (len(NUMBER_STRINGS) if args.number_tokens else 0)
    if args.vocab < least:
        parser.error(f"--vocab must be at least {least} (the tokens of the synthetic tokenizer)")
    least_numbers = CHARACTER_TOKENS + len(NUMBER_STRINGS)
    if args.numbers_vocab < least_numbers:
        parser.error(f"--numbers-vocab must be at least {least_numbers} (the tokens of its tokenizer)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_check", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_run_shape(parser)
    add_model_shape(parser)
    add_schedule(parser)
    parser.add_argument("--child", choices=CHILD_ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--pair", choices=tuple(PAIRS), default="plain", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    return parser


def add_run_shape(parser: argparse.ArgumentParser) -> None:
    """The steps of each run and the tokens of each step."""
    parser.add_argument("--steps", type=int, default=10, help="timed optimizer steps per run (default 10)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--seq-len", type=int, default=1024, help="packed row length (default 1024)")
    parser.add_argument("--micro-batch", type=int, default=4, help="packed rows per micro-batch (default 4)")
    parser.add_argument("--grad-accum", type=int, default=2, help="micro-batches per optimizer step (default 2)")
    parser.add_argument("--rows", type=int, default=2000, help="synthetic training rows (default 2000)")
    parser.add_argument("--del-alpha", type=float, default=1.0)


def add_model_shape(parser: argparse.ArgumentParser) -> None:
    """The random Llama and its synthetic tokenizer."""
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=2816)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000, help="vocabulary size, padded (default 32000)")
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


def add_schedule(parser: argparse.ArgumentParser) -> None:
    """What runs, and the time it may take."""
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
        help="test this check without a GPU: tiny models, GPU-only features off, the plain and numbers pairs, no "
        "loss step; no real numbers",
    )
