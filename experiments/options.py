"""The training and evaluation options the demo (``python -m experiments``) and its sweep (``python -m experiments
sweep``) share."""

from __future__ import annotations

import argparse

__all__ = ["add_run_options"]


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The training and evaluation options shared by the demo and its sweep (``python -m experiments sweep``)."""
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps per fine-tune (default 100)")
    parser.add_argument("--micro-batch-size", type=int, default=4, help="training rows per step (default 4)")
    parser.add_argument("--learning-rate", type=float, default=1e-3, help="LoRA learning rate (default 1e-3)")
    parser.add_argument("--eval-size", type=int, default=150, help="held-out problems (default 150)")
    parser.add_argument(
        "--max-new-tokens", type=int, default=32, help="longest generated answer, in tokens (default 32)"
    )
    parser.add_argument("--eval-batch-size", type=int, default=50, help="problems generated at once (default 50)")
