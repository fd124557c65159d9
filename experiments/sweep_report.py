"""The results of ``python -m experiments sweep``: results.md, summary.json, runs.csv and the plot, from the runs
that finished. Nothing here trains or loads a model."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from .jobs import hms
from .runs import Setting, publish_files, read_record, run_state
from .sweep_plan import REFERENCE, Planned, run_dir

__all__ = ["finished_runs", "write_results"]


def finished_runs(out: Path, planned: Planned) -> tuple[list[dict], dict | None]:
    """The records of the finished fine-tunes (their generations' paths made absolute) and the base model's
    metrics (None until it is evaluated)."""
    runs, base = [], None
    for setting, seed, spec in planned:
        folder = run_dir(out, setting, seed)
        if run_state(folder, spec) != "done":
            continue
        record = read_record(folder)
        record["generations"] = str(folder / record["generations"])
        if setting is None:
            base = record["metrics"]
        else:
            runs.append(record)
    return runs, base


def write_results(
    out: Path, args, argv: list[str], settings: list[Setting], planned: Planned, wall: float | None
) -> list[Path]:
    """The sweep's files in ``out`` (and copies in ``--publish``) from the finished runs; [] when none finished."""
    from .efficacy import aggregate, paired_comparisons, results_markdown
    from .efficacy_plots import plot_sweep

    runs, base = finished_runs(out, planned)
    if not runs:
        return []
    command = "python -m experiments sweep" + ("" if not argv else " " + " ".join(argv))
    header = _header(command, args, settings, runs, len(planned) - (0 if args.no_base else 1), wall)
    (out / "results.md").write_text("\n".join(header) + results_markdown(runs, REFERENCE, base), encoding="utf-8")
    summary = {
        "command": command,
        "settings": [s.as_dict() for s in settings],
        "seeds": args.seeds,
        "reference": REFERENCE,
        "base": base,
        "aggregate": {k: {"seeds": v["seeds"], "stats": v["stats"]} for k, v in aggregate(runs).items()},
        "paired": paired_comparisons(runs, REFERENCE),
        "runs": [{k: r[k] for k in ("setting", "seed", "metrics", "timing")} for r in runs],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    _write_csv(out / "runs.csv", runs)
    files = [out / "results.md", out / "summary.json", out / "runs.csv"]
    plot = plot_sweep(runs, [s.as_dict() for s in settings], REFERENCE, out / "metrics_vs_alpha.png", base)
    if plot is not None:
        files.append(plot)
    if args.publish:
        files = publish_files(files, Path(args.publish))
    return files


def _header(command: str, args, settings: list[Setting], runs: list[dict], planned: int, wall: float | None):
    """results.md's title and set-up paragraphs: what wrote it, on what, from how many runs, in how long."""
    train_s, eval_s = (sum((r.get("timing") or {}).get(k) or 0.0 for r in runs) for k in ("train_s", "eval_s"))
    return [
        "# Efficacy sweep on SmolLM2-135M-Instruct: " + ", ".join(s.key for s in settings),
        "",
        f"Written by `{command}` ({platform.machine()}, {os.cpu_count()} CPU cores, torch threads {args.threads}) "
        f"from {len(runs)} of {planned} runs finished; their fine-tunes took "
        f"{hms(train_s)} and their evaluations {hms(eval_s)}, one run at a time"
        + (f"; this invocation's wall time {hms(wall)}" if wall is not None else "")
        + ".",
        "",
        f"Set-up: the demo's (`python -m experiments`): LoRA r 16 on all linear layers, {args.steps} steps x "
        f"{args.micro_batch_size} problems, lr {args.learning_rate} cosine, {args.eval_size} held-out problems, "
        f"greedy, at most {args.max_new_tokens} new tokens. Problems from seed {args.data_seed}; the training seed "
        "sets the LoRA init and the data order, the same for every setting. TF = teacher-forced on the reference "
        "answers. Intervals: 95 % Student t over seeds (with 3 seeds the half-width is 2.48 standard deviations).",
        "",
        "",
    ]


def _write_csv(path: Path, runs: list[dict]) -> None:
    from .efficacy import METRICS

    with open(path, "w", encoding="utf-8") as handle:
        handle.write(
            ",".join(["setting", "criterion", "alpha", "seed"] + [m.key for m in METRICS] + ["train_s", "eval_s"])
            + "\n"
        )
        for r in runs:
            values = [r["setting"], r["spec"]["criterion"], f"{r['spec']['alpha']:g}", str(r["seed"])]
            values += ["" if r["metrics"].get(m.key) is None else repr(r["metrics"][m.key]) for m in METRICS]
            values += [str((r.get("timing") or {}).get(k, "")) for k in ("train_s", "eval_s")]
            handle.write(",".join(values) + "\n")
