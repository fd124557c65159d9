"""One training run, in a child process: Axolotl's trainer for the run's config, its optimizer steps timed (the
warm-up steps excepted), its peak GPU memory, the DEL metrics of its last logged step and the host synchronisations
of its timed ``training_step`` calls (bench/gpu_check/syncs.py); printed as one result line."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from .config import axolotl_config
from .protocol import emit_result
from .syncs import SyncCounter


def step_timer(warmup: int, syncs: SyncCounter, cuda: bool):
    """A trainer callback timing each optimizer step (the GPU drained on both sides) and counting the
    synchronisations of the steps after ``warmup`` (the first step holds DEL's start-up check)."""
    from transformers import TrainerCallback

    def drain():
        if cuda:
            torch.cuda.synchronize()

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, *_, **__):
            drain()
            syncs.counting = len(self.times) >= warmup
            self._start = time.perf_counter()

        def on_step_end(self, *_, **__):
            drain()
            self.times.append(time.perf_counter() - self._start)
            syncs.counting = False

    return StepTimer()


def loss_forward(model) -> str:
    """``module.qualname`` of the causal LM's forward: a kernel plugin replaces it (Liger, Cut Cross Entropy)."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    if hasattr(model, "get_base_model"):
        model = model.get_base_model()
    forward = type(model).forward
    return f"{getattr(forward, '__module__', '?')}.{getattr(forward, '__qualname__', '?')}"


def build_trainer(args: argparse.Namespace, with_del: bool):
    """Axolotl's config, data and trainer for this run, as ``axolotl train`` builds them."""
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets
    from axolotl.train import setup_model_and_trainer
    from axolotl.utils.dict import DictDefault

    cfg = load_cfg(DictDefault(axolotl_config(args, Path(args.workdir), with_del, args.pair)))
    meta = load_datasets(cfg=cfg)
    return cfg, setup_model_and_trainer(cfg, meta)[0]


def run_child(args: argparse.Namespace) -> None:
    """One training run in this process; prints one result line for the parent."""
    with_del = args.child == "on"
    cuda = torch.cuda.is_available() and not args.cpu_smoke
    syncs = SyncCounter(enabled=cuda)
    if cuda:  # before anything is measured: a count that cannot see a known synchronisation fails the run here
        syncs.self_check(torch.ones(1, device="cuda"))
    cfg, trainer = build_trainer(args, with_del)
    timer = step_timer(args.warmup, syncs, cuda)
    trainer.add_callback(timer)
    trainer.training_step = syncs.counted(trainer.training_step)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    timed = timer.times[args.warmup :]
    logs = [h for h in trainer.state.log_history if "loss" in h]
    counts = syncs.per_step(len(timed)) or {}
    emit_result(
        {
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
            # host synchronisations per timed step, all and those of DEL's code (None without CUDA)
            "syncs_per_step": counts.get("syncs_per_step"),
            "del_syncs_per_step": counts.get("del_syncs_per_step") if with_del else None,
            "del_sync_sites": counts.get("del_sync_sites", {}) if with_del else {},
        }
    )
