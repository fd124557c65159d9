"""The demo: generate arithmetic word problems, fine-tune SmolLM2-135M-Instruct with LoRA twice through Axolotl
(MLE: cross-entropy only; DEL: cross-entropy + Digit Entropy Loss), evaluate the base model and both fine-tunes on
a held-out set with del-eval, and write a side-by-side table, plots and what was found.

Everything runs offline on a CPU. Defaults are sized to finish in under 15 minutes on 2 dedicated cores (model
set-up excluded); ``--steps``, ``--eval-size`` and ``--max-new-tokens`` trade time for signal.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import sys
import textwrap
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from del_plugin.hf.settings import DEFAULT_ALPHA  # the DEL run uses the plugin's default weight (docs/efficacy.md)

__all__ = ["main", "DEFAULT_ALPHA"]


def publish_files(files: list[Path], folder: Path) -> list[Path]:
    """Copy ``files`` into ``folder`` (made if missing, same names); the copies' paths."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, folder / path.name)
    return [folder / path.name for path in files]


def _cpu_seconds() -> float:
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


class _Stages:
    def __init__(self, total: int):
        self.total, self.done, self.timing = total, 0, {}
        self._start = None
        self._name = None

    def start(self, name: str, title: str) -> None:
        self.finish()
        self.done += 1
        self._name, self._start = name, time.perf_counter()
        print(f"\n=== [{self.done}/{self.total}] {title} ===", flush=True)

    def finish(self) -> None:
        if self._name is not None:
            elapsed = time.perf_counter() - self._start
            self.timing[self._name] = round(elapsed, 1)
            print(f"--- {self._name}: {_minutes(elapsed)}", flush=True)
            self._name = None


COMMANDS = {
    "sweep": "the efficacy sweep: the demo's fine-tune over del_alpha settings and seeds, with intervals "
    "(docs/efficacy.md, set-ups 1-2)",
    "paper": "the paper's regime (full fine-tune at lr 5e-6) beside the LoRA one, on GSM8K, scored on the "
    "paper's benchmarks (docs/efficacy.md, set-up 3)",
}


def build_parser() -> argparse.ArgumentParser:
    indent = " " * 6
    commands = "\n".join(
        f"  python -m experiments {name} [--help]\n"
        + textwrap.fill(text, 100, initial_indent=indent, subsequent_indent=indent)
        for name, text in COMMANDS.items()
    )
    parser = argparse.ArgumentParser(
        prog="python -m experiments",
        usage="python -m experiments [sweep | paper] [options]",
        description=__doc__,
        epilog=f"commands (each with its own options):\n{commands}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        default="runs/demo",
        help="working folder for data, adapters and reports (default: runs/demo, git-ignored)",
    )
    parser.add_argument(
        "--publish",
        help="also copy the table, findings, plots and summary into this folder "
        "(the committed results live in docs/demo)",
    )
    add_run_options(parser)
    parser.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help=f"del_alpha of the DEL run (default: the plugin's, {DEFAULT_ALPHA:g})",
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of the problems, the LoRA init and the data order")
    return parser


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


def _write_results(out: Path, args, argv, train_settings, reports, generations, histories, timing, wall, cpu, load):
    from .findings import findings_text, plot_training_curves

    comparison_dir = out / "comparison"
    findings = findings_text(reports, generations, args.alpha)
    curves = plot_training_curves({k: histories[k] for k in ("MLE", "DEL")}, comparison_dir / "training_curves.png")
    # the published table names the models, not this machine's asset cache or home folder
    from tools.assets import cache_root

    # del-eval compare's comparison.md (the verdict, then the side-by-side tables), less its title
    table = (comparison_dir / "comparison.md").read_text(encoding="utf-8").split("\n", 2)[2]
    table = table.replace(str(cache_root()), "$DEL_PLUGIN_CACHE").replace(str(Path.home()), "~")
    command = "python -m experiments" + ("" if not argv else " " + " ".join(argv))
    end_load = os.getloadavg()[0]
    busy = max(load[0], end_load) > (os.cpu_count() or 1)
    threads = os.environ.get("OMP_NUM_THREADS") or "default"
    lines = (
        [
            "# DEL demo: MLE vs DEL on SmolLM2-135M-Instruct",
            "",
            f"Made by `{command}` on {datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, {os.cpu_count()} "
            f"CPU cores, torch threads: {threads}).",
            f"Wall time {_minutes(wall)} (model set-up excluded), CPU time {_minutes(cpu)}; 1-minute load average "
            f"{load[0]:.1f} at the start and {end_load:.1f} at the end"
            + (" (above the core count: other work was competing for the CPU)" if busy else "")
            + ". Stages: "
            + ", ".join(f"{k} {_minutes(v)}" for k, v in timing.items())
            + ".",
            "",
            f"- Data: {train_settings.examples} generated arithmetic word problems for training (integers and "
            f"decimals, answers as 'The answer is N'), {args.eval_size} held-out problems from the same generator "
            "with no template+operands in common.",
            f"- Fine-tuning: Axolotl LoRA (r {train_settings.lora_r}, all linear layers), SmolLM2 chat template, "
            f"{train_settings.steps} steps x {train_settings.micro_batch_size} problems, "
            f"lr {train_settings.learning_rate} "
            f"(cosine), seed {train_settings.seed}. MLE: `del_alpha: 0` (cross-entropy only); DEL: "
            f"`del_alpha: {args.alpha}`; same seed, data and order.",
            f"- Evaluation: `del-eval`, greedy, at most {args.max_new_tokens} new tokens, chat template.",
            "",
            "## What it found",
            "",
        ]
        + [f"- {line}" for line in findings]
        + ["", table.strip(), "", "## Plots", ""]
    )
    for png, caption in (
        ("difference_forest.png", "DEL - MLE, accuracy, 95 % interval"),
        ("place_accuracy.png", "Per-place digit accuracy"),
        ("entropy_histogram.png", "Teacher-forced digit entropy"),
        ("training_curves.png", "Training curves"),
    ):
        if (comparison_dir / png).exists():
            lines.append(f"![{caption}]({png})")
            lines.append("")
    (comparison_dir / "results.md").write_text("\n".join(lines), encoding="utf-8")
    summary = {
        "command": command,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "stages_s": timing,
        "cpu_count": os.cpu_count(),
        "load_average_start_end": [round(load[0], 2), round(end_load, 2)],
        "settings": {
            "train": asdict(train_settings),
            "alpha": args.alpha,
            "eval_size": args.eval_size,
            "max_new_tokens": args.max_new_tokens,
        },
        "findings": findings,
        "models": {
            k: {
                "generation": r["overall"].get("generation"),
                "teacher_forced": {
                    key: value
                    for key, value in (r["overall"].get("teacher_forced") or {}).items()
                    if key != "entropy_histogram"
                },
            }
            for k, r in reports.items()
        },
    }
    (comparison_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return findings, [comparison_dir / "results.md", comparison_dir / "summary.json"] + [
        p
        for p in (
            comparison_dir / "difference_forest.png",
            comparison_dir / "place_accuracy.png",
            comparison_dir / "entropy_histogram.png",
            curves,
        )
        if p is not None and p.exists()
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.steps < 1 or args.eval_size < 1 or args.micro_batch_size < 1:
        raise SystemExit("error: --steps, --eval-size and --micro-batch-size must be >= 1")

    from del_plugin.evaluation.cli import stop_cleanly_on_sigterm
    from tools.assets import smollm2_dir

    stop_cleanly_on_sigterm()

    print("Setting up SmolLM2-135M-Instruct (fetched and dequantised once, then cached) ...", flush=True)
    model_dir = smollm2_dir()

    from del_plugin.evaluation import EvalSettings, compare_reports, evaluate

    from .problems import make_splits, write_chat_jsonl, write_eval_jsonl
    from .training import TrainSettings, axolotl_config, train_lora

    started, cpu_started, load = time.perf_counter(), _cpu_seconds(), os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stages = _Stages(total=7)
    train_settings = TrainSettings(
        steps=args.steps, micro_batch_size=args.micro_batch_size, learning_rate=args.learning_rate, seed=args.seed
    )
    eval_settings = EvalSettings(
        batch_size=args.eval_batch_size, max_new_tokens=args.max_new_tokens, prompt_format="chat"
    )

    stages.start("data", "generating the problems")
    train, held_out = make_splits(train_settings.examples, args.eval_size, seed=args.seed)
    train_file = write_chat_jsonl(out / "data" / "train.jsonl", train)
    eval_file = write_eval_jsonl(out / "data" / "heldout.jsonl", held_out)
    print(f"{len(train)} training problems -> {train_file}\n{len(held_out)} held-out problems -> {eval_file}")
    print(f"e.g. {train[0].question!r} -> {train[0].answer_text!r}")

    reports: dict[str, dict] = {}
    generations: dict[str, Path] = {}
    histories: dict[str, list[dict]] = {}

    def run_eval(label: str, model: Path) -> None:
        eval_dir = out / "eval" / label
        shutil.rmtree(eval_dir, ignore_errors=True)
        reports[label] = evaluate(model, [eval_file], eval_dir, name=label, settings=eval_settings)
        reports[label]["_path"] = str(eval_dir / "report.json")  # where compare's verdict finds its generations
        generations[label] = eval_dir / "generations.jsonl"

    stages.start("eval base", "del-eval on the base model")
    run_eval("base", model_dir)
    for label, alpha in (("MLE", 0.0), ("DEL", args.alpha)):
        run_dir = out / "runs" / label.lower()
        shutil.rmtree(run_dir, ignore_errors=True)
        stages.start(f"train {label}", f"Axolotl LoRA fine-tune, {label} (del_alpha: {alpha})")
        adapter, histories[label] = train_lora(
            axolotl_config(model_dir, train_file, run_dir, alpha, train_settings), run_dir
        )
        stages.start(f"eval {label}", f"del-eval on the {label} fine-tune")
        run_eval(label, adapter)

    stages.start("compare", "the verdict, the side-by-side table and plots")
    labels = list(reports)
    arms = ([labels.index("MLE")], [labels.index("DEL")])
    written = compare_reports([reports[k] for k in labels], out / "comparison", labels, arms=arms)
    stages.finish()
    wall, cpu = time.perf_counter() - started, _cpu_seconds() - cpu_started
    findings, files = _write_results(
        out, args, argv, train_settings, reports, generations, histories, stages.timing, wall, cpu, load
    )
    if args.publish:
        files = publish_files(files, Path(args.publish))

    print("\n" + written["markdown"].read_text(encoding="utf-8"))
    print("What the demo found:")
    for line in findings:
        print(f"  - {line}")
    print(f"\nWall time {_minutes(wall)} (set-up excluded); CPU time {_minutes(cpu)}.")
    print("Results:")
    for path in files:
        print(f"  {path}")
    print(f"Per-model reports and generations: {out / 'eval'}/<base|MLE|DEL>/")
    return 0
