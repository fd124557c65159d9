"""The check from start to end: refuse a machine without a GPU, build the model(s) and rows once, run each pair's
two processes and the loss step in order within the budget, print the table, and exit 1 on any problem."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .assets import build_model_dir, write_arithmetic_rows
from .cli import parse_args
from .pairs import MODEL, NUMBERS_MODEL, PAIR_TITLES, PAIRS, pair_model, unavailable
from .protocol import launch, run_loss_step
from .report import print_loss_step, print_table, problems

EXIT_NO_GPU = 2
DEFAULT_BUDGET_S = 480
FUSED_PAIRS = ("liger", "cce")  # the loss step runs before the first of them


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print(
            "gpu_check: needs a CUDA GPU, and torch.cuda.is_available() is False here (a CPU-only machine or a "
            "CPU build of PyTorch); run it on a machine with an NVIDIA GPU and CUDA PyTorch.",
            file=sys.stderr,
        )
        return EXIT_NO_GPU
    if args.child:
        return run_as_child(args)
    if importlib.util.find_spec("bitsandbytes") is None:
        print("gpu_check: needs bitsandbytes for the 4-bit QLoRA steps; pip install bitsandbytes", file=sys.stderr)
        return 1
    requested = args.pairs or list(PAIRS)
    skipped = {pair: reason for pair in requested if (reason := unavailable(pair, args))}
    for pair, reason in skipped.items():
        print(f"gpu_check: skipping the {PAIR_TITLES[pair]} pair: {reason}", flush=True)
    pairs = [pair for pair in requested if pair not in skipped]
    if not pairs:
        print("gpu_check: no pair left to run", file=sys.stderr)
        return 1
    schedule = Schedule(args, skipped)
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        workdir = Path(tmp)
        print_setup(args, pairs, build_assets(args, pairs, workdir))
        schedule.run(pairs, workdir)
    return schedule.finish()


def run_as_child(args: argparse.Namespace) -> int:
    """--child: one training run, or the loss step, in this process (imported here: Axolotl is heavy)."""
    if args.child == "loss-step":
        from .loss_step_child import run_loss_step_child

        run_loss_step_child(args)
    else:
        from .child import run_child

        run_child(args)
    return 0


def build_assets(args: argparse.Namespace, pairs: list[str], workdir: Path) -> dict[str, int]:
    """Each model the pairs train, once (its parameter count per folder), and the training rows."""
    models: dict[str, int] = {}
    for pair in pairs:
        folder, model_args = pair_model(args, pair)
        if folder not in models:
            models[folder] = build_model_dir(model_args, workdir / folder)
    write_arithmetic_rows(workdir / "rows.jsonl", args.rows)
    return models


def print_setup(args: argparse.Namespace, pairs: list[str], models: dict[str, int]) -> None:
    if args.cpu_smoke:
        device = "CPU (--cpu-smoke: timings mean nothing)"
    else:
        device = f"{torch.cuda.get_device_name(0)} (sm_{''.join(map(str, torch.cuda.get_device_capability(0)))})"
    print(f"gpu_check on {device}, torch {torch.__version__}")
    n_params = models.get(MODEL, models.get(NUMBERS_MODEL, 0))
    numbers = (
        f"; numbers: {models[NUMBERS_MODEL] / 1e6:.1f}M parameters, vocabulary {args.numbers_vocab}"
        if NUMBERS_MODEL in models
        else ""
    )
    print(
        f"model: random Llama, {n_params / 1e6:.1f}M parameters ({args.layers} layers, hidden {args.hidden}, "
        f"vocabulary {args.vocab}), 4-bit NF4 QLoRA r=32; {args.micro_batch} x {args.seq_len} tokens x "
        f"{args.grad_accum} micro-batches per step; {args.warmup} warm-up + {args.steps} timed steps; "
        f"pairs: {', '.join(pairs)}{numbers}",
        flush=True,
    )


@dataclass
class Schedule:
    """The pairs' runs and the loss step in order, each started only when it can end within the budget (a pair's
    two runs estimated as long as the longest run so far)."""

    args: argparse.Namespace
    skipped: dict[str, str]
    results: dict[str, dict] = field(default_factory=dict)
    loss_step: dict | None = None
    longest: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    @property
    def budget(self) -> int | None:
        if self.args.budget is not None:
            return self.args.budget
        return None if self.args.cpu_smoke else DEFAULT_BUDGET_S

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def run(self, pairs: list[str], workdir: Path) -> None:
        loss_step_at = next((i for i, p in enumerate(pairs) if p in FUSED_PAIRS), len(pairs))
        for index, pair in enumerate(pairs + [None]):
            if index == loss_step_at and self.args.loss_step:
                self.run_loss_step(workdir)
            if pair is None:
                break
            elapsed = self.elapsed()
            if self.budget is not None and self.longest and elapsed + 2 * self.longest > self.budget:
                self.skipped[pair] = (
                    f"its two runs (~{2 * self.longest:.0f} s, as long as the longest so far) would end past "
                    f"the --budget of {self.budget} s ({elapsed:.0f} s used)"
                )
                print(f"gpu_check: skipping the {PAIR_TITLES[pair]} pair: {self.skipped[pair]}", flush=True)
                continue
            self.run_pair(pair, workdir)

    def run_loss_step(self, workdir: Path) -> None:
        elapsed, timeout = self.elapsed(), self.args.loss_step_timeout
        if self.budget is not None and elapsed + timeout > self.budget:
            self.loss_step = {
                "error": f"skipped: its --loss-step-timeout of {timeout} s would end past "
                f"the --budget of {self.budget} s ({elapsed:.0f} s used)"
            }
            return
        print("running the loss step at 7-8B heads ...", flush=True)
        self.loss_step = run_loss_step(self.args, workdir)
        print(f"  {self.elapsed() - elapsed:.0f} s", flush=True)

    def run_pair(self, pair: str, workdir: Path) -> None:
        self.results[pair] = {}
        for variant in ("off", "on"):
            print(f"running {PAIR_TITLES[pair]}, DEL {variant} ...", flush=True)
            run = launch(self.args, workdir, pair, variant)
            self.longest = max(self.longest, run["wall_s"])
            print(f"  {run['wall_s']:.0f} s", flush=True)
            if "error" in run:
                print(f"gpu_check: {run['error']}", file=sys.stderr, flush=True)
                self.results[pair] = {"error": run["error"]}  # the other run of the pair would tell nothing
                return
            self.results[pair][variant] = run

    def finish(self) -> int:
        """Prints the summary and every problem; the exit status."""
        ran = [runs for runs in self.results.values() if "error" not in runs]
        print(
            f"attention: {ran[0]['on']['attention'] if ran else 'n/a'}; "
            f"{sum(len(r) for r in ran)} runs in {self.elapsed():.0f} s"
        )
        print_table(self.results, self.skipped)
        if self.loss_step is not None:
            print_loss_step(self.loss_step)
        found = problems(self.results, self.loss_step, self.args)
        for problem in found:
            print(f"gpu_check: FAILED: {problem}", file=sys.stderr)
        return 1 if found else 0
