"""Training-step benchmark: an in-process Axolotl LoRA fine-tune on the CPU, steps per second with DEL off and on.

Both trainers are built once in this process from the same config (the only difference: ``plugins:
[del_plugin.DELPlugin]`` and ``del_alpha: 0.3``), on GSM8K in the Alpaca format, with a small random Llama that
uses Llama-2's tokenizer (``tools.assets.tiny_model_dir``, hidden size 256, 4 layers: big enough that the
step is not all Python overhead, small enough for a CPU). ``trainer.train()`` is then called on each in turn,
several rounds, the order rotating; a callback times every optimizer step from the end of the previous one (so
fetching and collating the batch count) and the first steps of every call (optimizer state, data-loader start)
are dropped. Ratio = median over rounds of (steps/s on) / (steps/s off).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("AXOLOTL_DO_NOT_TRACK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tools.assets import gsm8k_train_rows  # noqa: E402
from tools.cpu import alpaca_lora_config, write_alpaca_jsonl  # noqa: E402

import benchlib  # noqa: E402


def base_config(work: Path, model_dir: Path, dataset: Path, args) -> dict:
    return alpaca_lora_config(
        model_dir,
        dataset,
        work,
        sequence_len=args.sequence_len,
        sample_packing=False,
        micro_batch_size=args.micro_batch_size,
        gradient_accumulation_steps=1,
        max_steps=args.steps_per_call,
        learning_rate=1e-4,
        logging_steps=4,
    )


def build_trainer(cfg: dict):
    from axolotl.cli.config import load_cfg
    from axolotl.common.datasets import load_datasets
    from axolotl.train import setup_model_and_trainer
    from axolotl.utils.dict import DictDefault

    loaded = load_cfg(DictDefault(cfg))
    meta = load_datasets(cfg=loaded)
    trainer = setup_model_and_trainer(loaded, meta)[0]
    return trainer


class StepTimer:
    """A TrainerCallback that records the interval between consecutive optimizer-step ends: the whole step,
    including fetching and collating its batch (HF's ``on_step_begin`` comes after the batch is fetched)."""

    def __init__(self):
        from transformers import TrainerCallback

        timer = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                timer.ends.append((time.perf_counter(), time.process_time()))

        self.callback = _Callback()
        self.ends: list[tuple[float, float]] = []

    def reset(self):
        self.ends = []

    def intervals(self, drop: int) -> tuple[list[float], list[float]]:
        """Wall and CPU seconds of the steps after the first ``drop`` (the first step has no start mark)."""
        pairs = list(zip(self.ends, self.ends[1:]))[max(drop - 1, 0) :]
        return [b[0] - a[0] for a, b in pairs], [b[1] - a[1] for a, b in pairs]


ARMS = ("off", "on")


def run(args) -> dict:
    import torch

    from tools.assets import tiny_model_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = tiny_model_dir("llama-spm", hidden_size=args.hidden_size, layers=args.layers)
    results = {
        "machine": {**benchlib.machine_info(), "torch_threads": torch.get_num_threads()},
        "model": f"random Llama, llama-spm tokenizer (V=32,000), hidden {args.hidden_size}, {args.layers} layers",
        "micro_batch_size": args.micro_batch_size,
        "sequence_len": args.sequence_len,
        "steps_per_call": args.steps_per_call,
        "dropped_per_call": args.warmup_steps,
        "rounds": args.rounds,
    }
    with tempfile.TemporaryDirectory(prefix="del_bench_train_") as tmp:
        trainers = build_trainers(Path(tmp), model_dir, args)
        per_round = time_rounds(trainers, args)
        logs = [h for h in trainers["on"].state.log_history if "del_loss" in h]
    results.update(summarize(per_round))
    results["del_logged"] = logs[-1] if logs else None
    results["targets"] = {"steps_per_s_ratio_ge_0.97": results["on_over_off_steps_per_s_cpu"] >= 0.97}
    return results


def build_trainers(work: Path, model_dir: Path, args) -> dict:
    """The two arms from one config: DEL off, and on (the plugin and ``del_alpha: 0.3`` added)."""
    dataset = write_alpaca_jsonl(work / "gsm8k_alpaca.jsonl", gsm8k_train_rows(args.samples))
    cfg = base_config(work, model_dir, dataset, args)
    trainers = {
        "off": build_trainer({**cfg, "output_dir": str(work / "out_off")}),
        "on": build_trainer(
            {**cfg, "output_dir": str(work / "out_on"), "plugins": ["del_plugin.DELPlugin"], "del_alpha": 0.3}
        ),
    }
    if type(trainers["on"]).__name__ != "DELTrainer" or type(trainers["off"]).__name__ == "DELTrainer":
        raise RuntimeError(f"unexpected trainers: {[type(t).__name__ for t in trainers.values()]}")
    return trainers


def time_rounds(trainers: dict, args) -> list[dict]:
    """``trainer.train()`` on each arm per round, the order rotating; the median step of each call."""
    from tqdm import tqdm

    timer = StepTimer()
    for trainer in trainers.values():
        trainer.add_callback(timer.callback)
    per_round: list[dict] = []
    bar = tqdm(total=args.rounds * len(ARMS), desc="train step", unit="run", file=sys.stdout, disable=args.quiet)
    for r in range(args.rounds):
        order = ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]
        entry = {}
        for name in order:
            timer.reset()
            trainers[name].train()
            kept_wall, kept_cpu = timer.intervals(args.warmup_steps)
            entry[name] = {
                "median_step_s_wall": statistics.median(kept_wall),
                "median_step_s_cpu": statistics.median(kept_cpu),
                "steps_timed": len(kept_wall),
                "step_s_wall": kept_wall,
            }
            bar.update(1)
        per_round.append(entry)
    bar.close()
    return per_round


def summarize(per_round: list[dict]) -> dict:
    """Steps per second of each arm (median over rounds) and the on / off ratios (median over rounds)."""
    ratio_cpu = [e["off"]["median_step_s_cpu"] / e["on"]["median_step_s_cpu"] for e in per_round]
    ratio_wall = [e["off"]["median_step_s_wall"] / e["on"]["median_step_s_wall"] for e in per_round]
    summary = {}
    for name in ARMS:
        steps_cpu = [s for e in per_round for s in [e[name]["median_step_s_cpu"]]]
        steps_wall = [s for e in per_round for s in [e[name]["median_step_s_wall"]]]
        summary[name] = {
            "steps_per_s_cpu": 1 / statistics.median(steps_cpu),
            "steps_per_s_wall": 1 / statistics.median(steps_wall),
        }
    return {
        "rounds_detail": per_round,
        "summary": summary,
        "on_over_off_steps_per_s_cpu": statistics.median(ratio_cpu),
        "on_over_off_steps_per_s_wall": statistics.median(ratio_wall),
        "per_round_ratio_cpu": ratio_cpu,
        "arms": list(ARMS),
    }


def tables(results: dict) -> str:
    s = results["summary"]
    rows = []
    for name in results["arms"]:
        ratio = "1" if name == "off" else f"**{results['on_over_off_steps_per_s_cpu']:.3f}**"
        rows.append([name, f"{s[name]['steps_per_s_cpu']:.3f}", f"{s[name]['steps_per_s_wall']:.3f}", ratio])
    table = benchlib.markdown_table(["DEL", "steps/s (CPU time)", "steps/s (wall)", "steps/s / off (CPU)"], rows)
    return (
        f"{table}\n\non / off steps per second: **{results['on_over_off_steps_per_s_cpu']:.3f}** (CPU time), "
        f"{results['on_over_off_steps_per_s_wall']:.3f} (wall); per round (CPU): "
        f"{', '.join(f'{r:.3f}' for r in results['per_round_ratio_cpu'])}\n\n{results['model']}, LoRA r=8 on all "
        f"linear layers, micro-batch {results['micro_batch_size']} GSM8K samples (padded), "
        f"{results['rounds']} rounds x {results['steps_per_call']} steps per arm "
        f"(first {results['dropped_per_call']} of each call dropped).\n"
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--hidden-size", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--sequence-len", type=int, default=512)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--steps-per-call", type=int, default=8)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--out", type=Path, default=benchlib.RESULTS_DIR / "train_step.json")
    args = parser.parse_args(argv)
    if args.steps_per_call <= args.warmup_steps:
        parser.error("--steps-per-call must exceed --warmup-steps")
    results = run(args)
    return benchlib.publish(args.out, results, tables)


if __name__ == "__main__":
    main()
