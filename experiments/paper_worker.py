"""One run of ``python -m experiments paper``, in the child process the command starts for it (``--worker RUN``):
its Axolotl config (the regime's keys for the profile's device), its training unless it is trained, its scoring on
the evaluation sets with del-eval, its record updated after each."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from .paper_plan import REGIMES
from .runs import SweepMismatch, read_record, record_done, run_state, sha256_of, write_record

__all__ = ["GPU_KEYS", "axolotl_config", "work"]

GPU_KEYS: dict = {
    "tf32": True,
    "attn_implementation": "sdpa",  # flash-attention has no wheel for every CUDA build; sdpa needs none
    "dataloader_num_workers": 0,
    "dataset_num_proc": 1,
}


def axolotl_config(model_dir: Path, train_file: Path, run_dir: Path, spec: dict) -> dict:
    """The run's Axolotl config: the regime's keys for the profile's device, its criterion and weight, its seed."""
    from tools.cpu import CPU_KEYS

    train = spec["train"]
    regime = REGIMES[spec["regime"]].on(train["device"])
    device_keys = dict(CPU_KEYS) if train["device"] == "cpu" else dict(GPU_KEYS)
    config = {
        "base_model": str(model_dir),
        "tokenizer_config": str(model_dir),
        "datasets": [{"path": str(train_file), "ds_type": "json", "type": "alpaca"}],
        "train_on_inputs": False,  # CE and DEL on the answer only, as the paper
        "val_set_size": 0.0,
        "sequence_len": train["sequence_len"],
        "sample_packing": False,  # the paper packs nothing
        "pad_to_sequence_len": False,
        "micro_batch_size": train["micro_batch_size"],
        "gradient_accumulation_steps": train["gradient_accumulation_steps"],
        "num_epochs": train["epochs"],
        "learning_rate": regime.learning_rate,
        "lr_scheduler": "cosine",
        "warmup_ratio": 0.03,
        "weight_decay": 0.0,
        "max_grad_norm": 1.0,
        **device_keys,
        "bf16": True,
        "output_dir": str(run_dir / "trained"),
        "dataset_prepared_path": str(run_dir / "prepared"),
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": spec["seed"],
        "plugins": ["del_plugin.DELPlugin"],
        "del_alpha": spec["alpha"],
    }
    if spec["criterion"] != "del":
        config["del_criterion"] = spec["criterion"]
    if regime.adapter is None or regime.adapter == "lora":
        # float32 weights under bf16 autocast, as the authors' Trainer (experiments/precision.py)
        config["plugins"].append("experiments.precision.Float32MasterWeightsPlugin")
    if regime.adapter is not None:
        config |= {
            "adapter": regime.adapter,
            "lora_r": regime.lora_r,
            "lora_alpha": regime.lora_alpha,
            "lora_dropout": 0.0,
            "lora_target_linear": True,
        }
    if regime.adapter == "qlora":  # as examples/*/qlora-24gb.yml
        config |= {
            "load_in_4bit": True,
            "bnb_config_kwargs": {"bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
            "optimizer": "paged_adamw_8bit",
        }
    elif train["device"] == "cuda":
        config["optimizer"] = "adamw_torch_fused"
    return config


def _out_of(run_dir: Path) -> Path:
    for parent in run_dir.parents:
        if (parent / "plan.json").is_file():
            return parent
    raise FileNotFoundError(f"{run_dir} is not inside a folder written by `python -m experiments paper`")


def _train(run_dir: Path, record: dict, out: Path, model_dir: Path) -> dict:
    from tools.cpu import run_axolotl

    spec = record["spec"]
    for stale in ("trained", "prepared", "eval"):
        shutil.rmtree(run_dir / stale, ignore_errors=True)
    train_file = out / "data" / "train.jsonl"
    if sha256_of(train_file) != spec["train_sha256"]:
        raise SweepMismatch(f"{train_file} changed since {run_dir} was planned")
    config = axolotl_config(model_dir, train_file, run_dir, spec)
    (run_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    started = time.perf_counter()
    trainer = run_axolotl(config)
    wall = time.perf_counter() - started
    history = list(trainer.state.log_history)
    (run_dir / "train_log.json").write_text(json.dumps(history, indent=2) + "\n")
    lengths = [len(ids) for ids in trainer.train_dataset["input_ids"]]
    epochs = spec["train"]["epochs"]
    runtime = next((h["train_runtime"] for h in reversed(history) if "train_runtime" in h), None)
    artefact = "trained/adapter_config.json" if REGIMES[spec["regime"]].adapter else "trained/config.json"
    if not (run_dir / artefact).is_file():
        raise RuntimeError(f"Axolotl finished but wrote no {artefact} in {run_dir}")
    shutil.rmtree(run_dir / "prepared", ignore_errors=True)  # the tokenised rows; a retrain makes them again
    tokens = sum(lengths) * epochs
    return {
        "artefact": artefact,
        "training": {
            "rows": len(lengths),
            "tokens": tokens,
            "tokens_per_row": sum(lengths) / max(1, len(lengths)),
            "steps": trainer.state.global_step,
            "train_runtime_s": runtime,
            "wall_s": round(wall, 1),
            "tokens_per_s": None if not runtime else round(tokens / runtime, 1),
            "last_logs": [h for h in history if "loss" in h][-3:],
        },
    }


def _evaluate(run_dir: Path, record: dict, out: Path, model_dir: Path) -> dict:
    from del_plugin.evaluation import EvalSettings, evaluate

    from .efficacy import run_metrics
    from .paper_metrics import metrics_for

    eval_spec = record["eval_spec"]
    adapter = run_dir / "trained" if record["spec"]["train"] and REGIMES[record["spec"]["regime"]].adapter else None
    model = model_dir if record["spec"]["train"] is None else (model_dir if adapter else run_dir / "trained")
    settings = EvalSettings(
        batch_size=eval_spec["batch_size"],
        max_new_tokens=eval_spec["max_new_tokens"],
        prompt_format="alpaca",  # the prompt every run trained on
        limit=eval_spec["limit"],
        dtype=eval_spec["dtype"],
    )
    started = time.perf_counter()
    # resumes an evaluation stopped (or killed) half-way, keeping its finished sets; an evaluation made with other
    # settings stays until this one is complete, then is replaced
    report = evaluate(
        model,
        out_dir=run_dir / "eval",
        benchmarks=eval_spec["sets"],
        benchmark_dir=eval_spec["benchmark_dir"],
        adapter=adapter,
        name=record["setting"],
        settings=settings,
        overwrite=True,
    )
    if report["status"] != "complete":
        raise RuntimeError(f"del-eval did not finish: {report['error']}")
    return {
        "eval_s": round(time.perf_counter() - started, 1),
        "metrics": run_metrics(report, metrics_for(eval_spec["sets"])),
    }


def work(run_dir: Path, phase: str, model_dir: Path) -> int:
    """Child process: train the run in ``run_dir`` unless it is trained, then (phase ``eval`` / ``all``) score it."""
    import torch

    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm

    stop_cleanly_on_sigterm()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    out = _out_of(run_dir)
    record = read_record(run_dir)
    state = run_state(run_dir, record["spec"], record["eval_spec"])
    timing = dict(record.get("timing") or {})
    if state == "new" and record["spec"]["train"] is not None:
        trained = _train(run_dir, record, out, model_dir)
        timing["train_s"] = trained["training"]["wall_s"]
        record = record | trained | {"state": "trained", "timing": timing}
        write_record(run_dir, record)
    if phase == "train":
        return 0
    scored = _evaluate(run_dir, record, out, model_dir)
    timing["eval_s"] = scored["eval_s"]
    record_done(run_dir, timing, scored["metrics"], evaluated_with=record["eval_spec"])
    return 0
