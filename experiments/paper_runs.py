"""The runs of a ``python -m experiments paper`` profile: each with its spec (what its training depends on) and its
evaluation spec (what its scoring depends on), its folder under ``--out``, its first record. Nothing here imports
torch or Axolotl."""

from __future__ import annotations

from pathlib import Path

from .paper_plan import REGIMES, Profile, planned_runs
from .runs import Setting, parse_setting

__all__ = ["eval_sets", "eval_spec_for", "new_record", "plan_runs", "run_dir", "run_label"]


def eval_sets(benchmark_dir: str | None) -> list[str]:
    """The paper's seven benchmarks in its order; SimulEq and SAT (not shipped: no licence could be checked) only
    when ``--benchmark-dir`` names a folder holding the user's copies."""
    from del_plugin.evaluation import BENCHMARK_NAMES, BENCHMARKS

    return [name for name in BENCHMARK_NAMES if BENCHMARKS[name].shipped or benchmark_dir is not None]


def eval_spec_for(profile: Profile, benchmark_dir: str | None) -> dict:
    """What a run's scoring depends on: a change rescores the runs, never retrains them."""
    return {
        "sets": eval_sets(benchmark_dir),
        "benchmark_dir": benchmark_dir,
        "limit": profile.eval_limit,
        "max_new_tokens": profile.max_new_tokens,
        "batch_size": profile.eval_batch_size,
        "dtype": profile.eval_dtype,
    }


def plan_runs(profile: Profile, model_name: str, data_seed: int, train_sha256: str, eval_spec: dict) -> list[dict]:
    """Every run of the profile, the base model's evaluation first, each with its spec (what its training depends
    on) and evaluation spec."""
    train = {
        "device": profile.device,
        "epochs": profile.epochs,
        "sequence_len": profile.sequence_len,
        "micro_batch_size": profile.micro_batch_size,
        "gradient_accumulation_steps": profile.gradient_accumulation_steps,
    }
    model = {"model": model_name}
    runs = [
        {
            "regime": None,
            "setting": None,
            "seed": None,
            "spec": {**model, "regime": None, "criterion": None, "alpha": None, "seed": None, "train": None},
            "eval_spec": eval_spec,
        }
    ]
    for regime, text, seed in planned_runs(profile):
        setting = parse_setting(text)
        spec = {
            **model,
            "regime": regime,
            "criterion": setting.criterion,
            "alpha": setting.alpha,
            "seed": seed,
            "train": train | _regime_keys(regime, profile.device),
            "data_seed": data_seed,
            "train_sha256": train_sha256,
        }
        runs.append({"regime": regime, "setting": setting, "seed": seed, "spec": spec, "eval_spec": eval_spec})
    return runs


def _regime_keys(regime: str, device: str) -> dict:
    """What the regime sets in a run's training, in its spec: a changed regime is a new run."""
    r = REGIMES[regime].on(device)
    return {"adapter": r.adapter, "learning_rate": r.learning_rate} | (
        {"lora_r": r.lora_r, "lora_alpha": r.lora_alpha} if r.adapter else {}
    )


def new_record(run: dict) -> dict:
    """The ``run.json`` of a planned run (:func:`plan_runs`) before it is trained."""
    return {
        "regime": run["regime"],
        "setting": "base" if run["setting"] is None else run["setting"].key,
        "seed": run["seed"],
        "spec": run["spec"],
        "eval_spec": run["eval_spec"],
        "state": "new",
    }


def run_dir(out: Path, regime: str | None, setting: Setting | None, seed: int | None) -> Path:
    if setting is None:
        return out / "runs" / "base"
    return out / "runs" / regime / setting.folder / f"seed{seed}"


def run_label(run: dict) -> str:
    return "base model" if run["setting"] is None else f"{run['regime']} {run['setting'].key} seed {run['seed']}"
