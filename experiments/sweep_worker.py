"""One run of ``python -m experiments sweep``, in the child process the sweep starts for it (``--worker RUN``):
trained (unless its adapter is there) and evaluated, its record updated."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from .runs import SweepMismatch, read_record, record_done, run_state, sha256_of, write_record

__all__ = ["work"]


def work(run_dir: Path) -> int:
    """Child process: train (unless the adapter is there) and evaluate the run in ``run_dir``."""
    import torch

    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm
    from tools.assets import smollm2_dir

    stop_cleanly_on_sigterm()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    record = read_record(run_dir)
    spec = record["spec"]
    out = run_dir.parents[2] if spec["train"] else run_dir.parents[1]
    train_file, eval_file = out / "data" / "train.jsonl", out / "data" / "heldout.jsonl"
    if sha256_of(train_file) != spec["train_sha256"] or sha256_of(eval_file) != spec["heldout_sha256"]:
        raise SweepMismatch(f"{out / 'data'} changed since {run_dir} was planned")
    model_dir = smollm2_dir()
    timing = dict(record.get("timing") or {})
    adapter = None
    if spec["train"] is not None:
        adapter = _train(run_dir, record, model_dir, train_file, timing)
    _evaluate(run_dir, record, model_dir, eval_file, adapter, timing)
    return 0


def _train(run_dir: Path, record: dict, model_dir: Path, train_file: Path, timing: dict) -> Path:
    """The run's LoRA adapter: trained unless a finished training left it; ``timing`` gets ``train_s``."""
    from .training import TrainSettings, axolotl_config, train_lora

    spec = record["spec"]
    adapter = run_dir / "adapter"
    if run_state(run_dir, spec) != "new":
        return adapter
    for stale in ("adapter", "prepared", "eval"):
        shutil.rmtree(run_dir / stale, ignore_errors=True)
    started = time.perf_counter()
    config = axolotl_config(
        model_dir, train_file, run_dir, spec["alpha"], TrainSettings(**spec["train"]), criterion=spec["criterion"]
    )
    adapter, _ = train_lora(config, run_dir)
    timing["train_s"] = round(time.perf_counter() - started, 1)
    write_record(run_dir, record | {"state": "trained", "timing": timing})
    shutil.rmtree(run_dir / "prepared", ignore_errors=True)  # the tokenised data; the next run redoes it
    return adapter


def _evaluate(run_dir: Path, record: dict, model_dir: Path, eval_file: Path, adapter: Path | None, timing: dict):
    """del-eval on the held-out problems, from scratch; the run marked done with its metrics."""
    from del_plugin.evaluation import EvalSettings, evaluate

    from .efficacy import run_metrics

    spec = record["spec"]
    eval_dir = run_dir / "eval"
    shutil.rmtree(eval_dir, ignore_errors=True)
    started = time.perf_counter()
    settings = EvalSettings(
        batch_size=spec["eval_batch_size"], max_new_tokens=spec["max_new_tokens"], prompt_format="chat"
    )
    report = evaluate(model_dir, [eval_file], eval_dir, adapter=adapter, name=record["setting"], settings=settings)
    if report["status"] != "complete":
        raise RuntimeError(f"del-eval did not finish: {report['error']}")
    timing["eval_s"] = round(time.perf_counter() - started, 1)
    record_done(run_dir, timing, run_metrics(report))
