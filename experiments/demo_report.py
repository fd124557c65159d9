"""What the demo (``python -m experiments``) writes after its runs: results.md (what it found, del-eval compare's
table, the plots) and summary.json, in ``OUT/comparison``. Nothing here trains or loads a model."""

from __future__ import annotations

import argparse
import json
import os
import platform
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # training imports Axolotl
    from .training import TrainSettings

__all__ = ["DemoRun", "minutes", "write_results"]

PLOTS = (
    ("difference_forest.png", "DEL - MLE, accuracy, 95 % interval"),
    ("place_accuracy.png", "Per-place digit accuracy"),
    ("entropy_histogram.png", "Teacher-forced digit entropy"),
    ("training_curves.png", "Training curves"),
)


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


@dataclass(frozen=True)
class DemoRun:
    """One run of the demo, as its report needs it."""

    args: argparse.Namespace  # the demo's options
    argv: list[str]  # as given, for the command line the report quotes
    train_settings: TrainSettings  # both fine-tunes'
    reports: dict[str, dict]  # del-eval's report per model: base, MLE, DEL
    generations: dict[str, Path]  # each model's generations.jsonl
    histories: dict[str, list[dict]]  # the trainer's log history per fine-tune: MLE, DEL
    timing: dict[str, float]  # seconds per stage
    wall: float  # seconds, model set-up excluded
    cpu: float  # CPU seconds of this process and its children
    load: tuple[float, float, float]  # os.getloadavg() at the start
    verdict_refused: str | None = None  # compare's "cannot be tested" line where it refused to pair MLE and DEL

    @property
    def command(self) -> str:
        return "python -m experiments" + ("" if not self.argv else " " + " ".join(self.argv))


def write_results(out: Path, run: DemoRun) -> tuple[list[str], list[Path]]:
    """results.md and summary.json in ``out/comparison`` (beside del-eval compare's files) and the training curves;
    returns what the demo found (sentences) and the files to show and publish."""
    from .findings import findings_text, plot_training_curves

    comparison_dir = out / "comparison"
    findings = findings_text(run.reports, run.generations, run.args.alpha)
    curves = plot_training_curves({k: run.histories[k] for k in ("MLE", "DEL")}, comparison_dir / "training_curves.png")
    end_load = os.getloadavg()[0]
    lines = _results_lines(run, findings, _comparison_table(comparison_dir), end_load)
    lines += [x for png, caption in PLOTS if (comparison_dir / png).exists() for x in (f"![{caption}]({png})", "")]
    (comparison_dir / "results.md").write_text("\n".join(lines), encoding="utf-8")
    (comparison_dir / "summary.json").write_text(json.dumps(_summary(run, findings, end_load), indent=2) + "\n")
    plots = [comparison_dir / png for png, _ in PLOTS if png != "training_curves.png"] + [curves]
    return findings, [comparison_dir / "results.md", comparison_dir / "summary.json"] + [
        p for p in plots if p is not None and p.exists()
    ]


def _comparison_table(comparison_dir: Path) -> str:
    """del-eval compare's comparison.md (the verdict, then the side-by-side tables), less its title; the published
    table names the models, not this machine's asset cache or home folder."""
    from tools.assets import cache_root

    table = (comparison_dir / "comparison.md").read_text(encoding="utf-8").split("\n", 2)[2]
    return table.replace(str(cache_root()), "$DEL_PLUGIN_CACHE").replace(str(Path.home()), "~")


def _results_lines(run: DemoRun, findings: list[str], table: str, end_load: float) -> list[str]:
    args, train = run.args, run.train_settings
    busy = max(run.load[0], end_load) > (os.cpu_count() or 1)
    threads = os.environ.get("OMP_NUM_THREADS") or "default"
    return (
        [
            "# DEL demo: MLE vs DEL on SmolLM2-135M-Instruct",
            "",
            f"Made by `{run.command}` on {datetime.now(UTC):%Y-%m-%d} ({platform.machine()}, {os.cpu_count()} "
            f"CPU cores, torch threads: {threads}).",
            f"Wall time {minutes(run.wall)} (model set-up excluded), CPU time {minutes(run.cpu)}; 1-minute load "
            f"average {run.load[0]:.1f} at the start and {end_load:.1f} at the end"
            + (" (above the core count: other work was competing for the CPU)" if busy else "")
            + ". Stages: "
            + ", ".join(f"{k} {minutes(v)}" for k, v in run.timing.items())
            + ".",
            "",
            f"- Data: {train.examples} generated arithmetic word problems for training (integers and "
            f"decimals, answers as 'The answer is N'), {args.eval_size} held-out problems from the same generator "
            "with no template+operands in common.",
            f"- Fine-tuning: Axolotl LoRA (r {train.lora_r}, all linear layers), SmolLM2 chat template, "
            f"{train.steps} steps x {train.micro_batch_size} problems, lr {train.learning_rate} "
            f"(cosine), seed {train.seed}. MLE: `del_alpha: 0` (cross-entropy only); DEL: "
            f"`del_alpha: {args.alpha}`; same seed, data and order.",
            f"- Evaluation: `del-eval`, greedy, at most {args.max_new_tokens} new tokens, chat template.",
            "",
            "## What it found",
            "",
        ]
        + [f"- {line}" for line in findings]
        + ([] if run.verdict_refused is None else ["", run.verdict_refused])
        + ["", table.strip(), "", "## Plots", ""]
    )


def _summary(run: DemoRun, findings: list[str], end_load: float) -> dict:
    return {
        "command": run.command,
        "wall_s": round(run.wall, 1),
        "cpu_s": round(run.cpu, 1),
        "stages_s": run.timing,
        "cpu_count": os.cpu_count(),
        "load_average_start_end": [round(run.load[0], 2), round(end_load, 2)],
        "settings": {
            "train": asdict(run.train_settings),
            "alpha": run.args.alpha,
            "eval_size": run.args.eval_size,
            "max_new_tokens": run.args.max_new_tokens,
        },
        "findings": findings,
        "verdict_refused": run.verdict_refused,
        "models": {
            k: {
                "generation": r["overall"].get("generation"),
                "teacher_forced": {
                    key: value
                    for key, value in (r["overall"].get("teacher_forced") or {}).items()
                    if key != "entropy_histogram"
                },
            }
            for k, r in run.reports.items()
        },
    }
