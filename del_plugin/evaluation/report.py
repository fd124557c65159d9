"""Report files: the JSON report (schema ``del-eval/2``, see ``docs/evaluation.md``), written only by
:class:`RunReport`, its markdown table (:mod:`.tables`) and plots, and the side-by-side comparison of several
reports (:func:`compare_reports`)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from .benchmarks.sets import BENCHMARK_NAMES
from .metrics import GenerationMetrics, NumericMetrics
from .tables import OVERALL, benchmark_accuracies, comparison_markdown, dataset_entries, report_markdown
from .teacher_forced import TeacherForcedStats

LOG = logging.getLogger(__name__)

__all__ = [
    "GENERATIONS_FILE",
    "SCHEMA",
    "RunReport",
    "compare_reports",
    "comparison_markdown",
    "load_report",
    "macc",
    "report_markdown",
    "require_eval_extra",
    "write_json_atomic",
]

SCHEMA = "del-eval/2"
READABLE_SCHEMAS = ("del-eval/1", SCHEMA)
GENERATIONS_FILE = "generations.jsonl"
EVAL_EXTRA = ("matplotlib", "tqdm")


def require_eval_extra() -> None:
    """Raise ImportError, naming the extra to install, when a package of ``del-plugin[eval]`` is missing: before
    any work, not at the plot after an hour of generation."""
    import importlib

    missing = []
    for module in EVAL_EXTRA:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(
            f"del-eval needs {', '.join(missing)}: install the evaluation extra, pip install 'del-plugin[eval]'"
        )


def write_json_atomic(path: Path, data: dict) -> None:
    """Write to a temporary file and rename, so an interrupted run never leaves half a report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_report(path: str | Path) -> dict:
    """A report.json (or the folder holding one), schema ``del-eval/1`` or ``/2``."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such report (give report.json files or the folders del-eval wrote)")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    if not isinstance(report, dict) or report.get("schema") not in READABLE_SCHEMAS:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path}: not a del-eval report (schema {found!r}, expected {SCHEMA!r})")
    report.setdefault("_path", str(path))
    return report


def macc(datasets: Sequence[dict]) -> dict | None:
    """The mean accuracy over the benchmarks of ``datasets`` that are complete: ``{value, sets, label,
    complete}``; ``label`` is ``mACC`` over all seven, else says over how many (``mACC (3 of 7 sets)``)."""
    done = {
        d["benchmark"]: d["generation"]["accuracy"]
        for d in datasets
        if d.get("benchmark")
        and d.get("status") == "complete"
        and (d.get("generation") or {}).get("accuracy") is not None
    }
    if not done:
        return None
    sets = [n for n in BENCHMARK_NAMES if n in done]
    complete = len(sets) == len(BENCHMARK_NAMES)
    return {
        "value": sum(done[n] for n in sets) / len(sets),
        "sets": sets,
        "label": "mACC" if complete else f"mACC ({len(sets)} of {len(BENCHMARK_NAMES)} sets)",
        "complete": complete,
    }


def pooled(datasets: Sequence[dict]) -> dict:
    """``{generation, teacher_forced}`` pooled over every set: accuracy over all problems; MAE, log-MAE and
    per-place accuracy over the numeric sets' answers; the teacher-forced metrics over all digit targets."""
    generation = GenerationMetrics("pooled", numeric=NumericMetrics())
    teacher, any_teacher = TeacherForcedStats(), False
    for d in datasets:
        if d.get("generation"):
            generation.merge(GenerationMetrics.from_dict(d["scoring"], d["generation"]))
        if d.get("teacher_forced"):
            teacher.merge(TeacherForcedStats.from_dict(d["teacher_forced"]))
            any_teacher = True
    out = generation.as_dict() if generation.n else None
    if out is not None:
        out.pop("program_of_thought")
    return {"generation": out, "teacher_forced": teacher.as_dict() if any_teacher else None}


def _entry(task) -> dict:
    return {
        "name": task.name,
        "benchmark": None if task.benchmark is None else task.benchmark.name,
        "scoring": task.scoring,
        "source": dict(task.source),
        "path": task.source["path"],
        "status": "pending",
        "lines_read": task.lines_read,
        "evaluated": len(task.problems),
        "skipped": len(task.issues),
        "issues": [issue.as_dict() for issue in task.issues],
        "formats": list(task.formats),
        "generation": None,
        "teacher_forced": None,
    }


class RunReport:
    """The report of one run, and the one writer of its files: ``report.json`` after every change (atomically),
    ``generations.jsonl`` line by line, and at :meth:`finish` ``report.md`` and the plots. A plot that fails is a
    warning in the report, never a report left saying ``running``."""

    def __init__(self, out_dir: Path, data: dict, kept_generations: Sequence[str] = ()):
        self.out_dir = out_dir
        self.data = data
        self.json_path = out_dir / "report.json"
        self._generations = None
        self._kept = set(kept_generations)

    @classmethod
    def open(
        cls,
        out_dir: Path,
        *,
        command: str,
        name: str,
        model: dict,
        settings: dict,
        resume_key: dict,
        tasks: Sequence,
        overwrite: bool = False,
    ) -> RunReport:
        """A new report in ``out_dir``, resuming the one there when it was written by the same run
        (``resume_key``): its complete sets, with the same source files, are kept with their generations."""
        out_dir.mkdir(parents=True, exist_ok=True)
        previous = None if overwrite else _previous_report(out_dir, resume_key)
        data = {
            "schema": SCHEMA,
            "command": command,
            "name": name,
            "status": "running",
            "error": None,
            "warnings": [],
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "del_plugin_version": __version__,
            "run": resume_key,
            "model": {
                "path": model.get("path"),
                "base": None,
                "adapter": model.get("adapter"),
                "predictions": model.get("predictions"),
                "prompt_format": settings.get("prompt_format"),
                "prompt_format_source": None,
                "dtype": settings.get("dtype"),
                "device": settings.get("device"),
            },
            "settings": settings,
            "files": {"generations": GENERATIONS_FILE, "markdown": None, "plots": []},
            "datasets": [_entry(t) for t in tasks],
            "macc": None,
            "overall": {"generation": None, "teacher_forced": None},
            "timing": {},
        }
        kept = []
        if previous is not None:
            done = {d["name"]: d for d in previous["datasets"] if d.get("status") == "complete" and d.get("source")}
            for i, entry in enumerate(data["datasets"]):
                old = done.get(entry["name"])
                if old is not None and old["source"].get("sha256") == entry["source"]["sha256"]:
                    data["datasets"][i] = old
                    kept.append(entry["name"])
            if previous.get("model", {}).get("base"):
                data["model"] = previous["model"]
            data["warnings"] = [w for w in previous.get("warnings", []) if w.split(":")[0] in kept]
        report = cls(out_dir, data, kept)
        report._open_generations()
        report.save()
        return report

    # ---------------------------------------------------------------------------------------- state

    def _entry(self, name: str) -> dict:
        return next(d for d in self.data["datasets"] if d["name"] == name)

    def is_complete(self, name: str) -> bool:
        return self._entry(name)["status"] == "complete"

    def set_model(self, **fields) -> None:
        self.data["model"].update(fields)
        self.save()

    def add_time(self, key: str, seconds: float) -> None:
        timing = self.data["timing"]
        timing[key] = round(timing.get(key, 0.0) + seconds, 2)

    def warn(self, message: str) -> None:
        """Log ``message`` and keep it in the report (once: a resumed run keeps its sets' warnings)."""
        LOG.warning(message)
        if message not in self.data["warnings"]:
            self.data["warnings"].append(message)

    def start_task(self, task) -> None:
        self._entry(task.name).update(status="running", generation=None, teacher_forced=None)
        self.save()

    def set_teacher_forced(self, name: str, stats: TeacherForcedStats) -> None:
        self._entry(name)["teacher_forced"] = stats.as_dict()
        self.save()

    def set_generation(self, name: str, metrics: GenerationMetrics) -> None:
        self._entry(name)["generation"] = metrics.as_dict() if metrics.n or metrics.programs else None
        self.save()

    def complete_task(self, name: str) -> None:
        self._entry(name)["status"] = "complete"
        self.save()

    def write_generation(self, record: dict) -> None:
        self._generations.write(json.dumps(record) + "\n")
        self._generations.flush()

    def mark_complete(self) -> None:
        self.data["status"] = "complete"

    def mark_stopped(self, err: BaseException) -> None:
        self.data["status"] = "partial"
        self.data["error"] = f"{type(err).__name__}: {err}"
        LOG.error("evaluation stopped (%s); writing the partial report", self.data["error"])

    # ---------------------------------------------------------------------------------------- files

    def _open_generations(self) -> None:
        """generations.jsonl with the lines of the kept sets only (a stopped set is redone from its start)."""
        path = self.out_dir / GENERATIONS_FILE
        kept_lines = []
        if self._kept and path.is_file():
            with open(path, encoding="utf-8") as handle:
                kept_lines = [line for line in handle if line.strip() and json.loads(line)["dataset"] in self._kept]
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept_lines), encoding="utf-8")
        os.replace(tmp, path)
        self._generations = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finish()

    def _refresh(self) -> None:
        self.data["macc"] = macc(self.data["datasets"])
        self.data["overall"] = pooled(self.data["datasets"])

    def save(self) -> None:
        """report.json as it stands (after every batch: even a hard kill leaves the numbers so far)."""
        self._refresh()
        write_json_atomic(self.json_path, self.data)

    def finish(self) -> dict:
        """Close generations.jsonl, write report.md, the plots and report.json; returns the report."""
        if self._generations is not None:
            self._generations.close()
            self._generations = None
        self._refresh()
        self.data["files"]["markdown"] = "report.md"
        try:
            self.data["files"]["plots"] = [p.name for p in _plots(self.data, self.out_dir) if p is not None]
        except Exception as err:  # noqa: BLE001 - a plot must never cost the report
            self.warn(f"plots skipped: {type(err).__name__}: {err}")
        (self.out_dir / "report.md").write_text(report_markdown(self.data), encoding="utf-8")
        write_json_atomic(self.json_path, self.data)
        return self.data


def _previous_report(out_dir: Path, resume_key: dict) -> dict | None:
    """The report already in ``out_dir`` when it is this run's (to resume); an error when it is another run's."""
    path = out_dir / "report.json"
    if not path.is_file():
        return None
    try:
        previous = load_report(path)
    except ValueError as err:
        raise ValueError(f"{out_dir} holds a report.json del-eval cannot resume ({err}); pass --overwrite") from None
    if previous.get("run") != resume_key:
        old = previous.get("run") or {}
        differs = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in resume_key.items() if old.get(k) != v]
        raise ValueError(
            f"{out_dir} holds the report of another run ({'; '.join(differs) or 'an older schema'}): give another "
            "--out, or --overwrite to replace it"
        )
    return previous


def _plots(report: dict, out_dir: Path) -> list[Path | None]:
    from .plots import plot_benchmark_accuracy, plot_entropy_histograms, plot_place_accuracy

    entry, title = report["overall"], report.get("name")
    plots = [
        plot_entropy_histograms(
            [(title, entry.get("teacher_forced"))],
            out_dir / "entropy_histogram.png",
            f"Teacher-forced digit entropy: {title}",
        ),
        plot_place_accuracy(
            [(title, entry.get("generation"), entry.get("teacher_forced"))],
            out_dir / "place_accuracy.png",
            f"Per-place digit accuracy: {title}",
        ),
    ]
    if len(benchmark_accuracies(report)) > 1:
        plots.append(
            plot_benchmark_accuracy(
                [(title, benchmark_accuracies(report), (report.get("macc") or {}).get("value"))],
                out_dir / "benchmark_accuracy.png",
                f"The paper's benchmarks: {title}",
            )
        )
    return plots


def compare_reports(reports: Sequence[dict], out_dir: Path, labels: Sequence[str] | None = None) -> dict[str, Path]:
    """comparison.md, comparison.json and overlaid plots for ``reports``; returns the written paths by kind."""
    from .plots import plot_benchmark_accuracy, plot_entropy_histograms, plot_place_accuracy

    if not reports:
        raise ValueError("compare needs at least one report")
    labels = list(labels) if labels else [r.get("name") or f"model {i + 1}" for i, r in enumerate(reports)]
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({i + 1})" for i, label in enumerate(labels)]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {"markdown": out_dir / "comparison.md", "json": out_dir / "comparison.json"}
    written["markdown"].write_text(comparison_markdown(reports, labels), encoding="utf-8")
    data_sets = dataset_entries(reports, labels, benchmarks=False)
    plot_set = OVERALL if OVERALL in data_sets else next(iter(data_sets), None)
    entries = data_sets[plot_set] if plot_set else [(label, r["overall"]) for label, r in zip(labels, reports)]
    plot_name = plot_set or OVERALL
    plots = {
        "entropy_histogram": plot_entropy_histograms(
            [(label, e.get("teacher_forced")) for label, e in entries],
            out_dir / "entropy_histogram.png",
            f"Teacher-forced digit entropy ({plot_name})",
        ),
        "place_accuracy": plot_place_accuracy(
            [(label, e.get("generation"), e.get("teacher_forced")) for label, e in entries],
            out_dir / "place_accuracy.png",
            f"Per-place digit accuracy ({plot_name})",
        ),
    }
    if any(benchmark_accuracies(r) for r in reports):
        plots["benchmark_accuracy"] = plot_benchmark_accuracy(
            [(label, benchmark_accuracies(r), (r.get("macc") or {}).get("value")) for label, r in zip(labels, reports)],
            out_dir / "benchmark_accuracy.png",
            "The paper's benchmarks: accuracy",
        )
    written.update({kind: path for kind, path in plots.items() if path is not None})
    summary = {
        "schema": SCHEMA + "/comparison",
        "models": [
            {
                "label": label,
                "report": r.get("_path"),
                "status": r.get("status"),
                "model": r.get("model"),
                "macc": r.get("macc"),
                "datasets": {
                    d["name"]: {
                        "benchmark": d.get("benchmark"),
                        "generation": d.get("generation"),
                        "teacher_forced": d.get("teacher_forced"),
                    }
                    for d in r["datasets"]
                },
            }
            for label, r in zip(labels, reports)
        ],
    }
    write_json_atomic(written["json"], summary)
    return written
