"""The report of one run: ``report.json`` (schema ``del-eval/2``, see ``docs/evaluation.md``), written only by
:class:`RunReport`, with its ``generations.jsonl``, its markdown table (:mod:`.tables`) and plots. Reading reports
back is :mod:`.report_files`; putting several side by side, :mod:`.comparison`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..version import __version__
from .comparison import compare_reports
from .comparison_tables import comparison_markdown
from .eval_extra import require_eval_extra
from .math_verify_scoring import MISSING_NOTE, math_verify_available
from .metrics import GenerationMetrics
from .output import (
    JsonlAppender,
    lock_folder,
    prepare_output_dir,
    publish_files,
    read_jsonl,
    unlock_folder,
    write_json_atomic,
    write_text_atomic,
)
from .report_files import GENERATIONS_FILE, PLOT_FILES, SCHEMA, STAGING_DIR, load_report
from .report_resume import where_to_write
from .report_summary import coverage_warning, dataset_entry, macc, pooled
from .tables import benchmark_accuracies, report_markdown
from .teacher_forced import TeacherForcedStats

LOG = logging.getLogger(__name__)

__all__ = [
    "GENERATIONS_FILE",
    "PLOT_FILES",
    "SCHEMA",
    "STAGING_DIR",
    "RunReport",
    "compare_reports",
    "comparison_markdown",
    "load_report",
    "macc",
    "report_markdown",
    "require_eval_extra",
    "write_json_atomic",
]

# warnings of the run as a whole that describe what the scored sets hold (a resume that loads no model, all of
# them scored, would not say them again)
_WARNINGS_OF_KEPT_SETS = ("teacher-forced digit metrics skipped",)


class RunReport:
    """The report of one run, and the one writer of its files: ``report.json`` after every change, ``generations.jsonl``
    line by line, and at :meth:`finish` ``report.md`` and the plots; every file written whole (by rename, or a whole
    line appended: :mod:`.output`). A plot that fails is a warning in the report, never a report left saying
    ``running``.

    The run writes in ``out_dir`` itself, except when it replaces the report of another run (``overwrite``): then
    it writes in ``out_dir``/.del-eval-new and moves its files into ``out_dir`` once complete, so that the earlier
    report stays whole until then, whatever stops the run. ``out_dir`` is locked while the report is open."""

    def __init__(
        self,
        out_dir: Path,
        data: dict,
        kept_generations: Sequence[str] = (),
        *,
        write_dir: Path | None = None,
        lock: int | None = None,
    ):
        self.out_dir = out_dir
        self.dir = write_dir or out_dir
        self.data = data
        self.json_path = self.dir / "report.json"
        self._generations: JsonlAppender | None = None
        self._kept = set(kept_generations)
        self._lock = lock

    @property
    def staged(self) -> bool:
        """Whether this run replaces another run's report (and writes in the staging folder until complete)."""
        return self.dir != self.out_dir

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
        """A new report in ``out_dir`` (made when missing; a file, or a folder that cannot be written, is an
        :class:`~.errors.OutputError`). The report already there is resumed when it was written by the same run
        (``resume_key``, and its complete sets are among ``tasks``): its complete sets, with the same source files,
        are kept with their generations. A report of another run is an OutputError, unless ``overwrite``: then it
        is replaced once this run is complete. A report in which nothing was scored yet is replaced."""
        out_dir = prepare_output_dir(out_dir)
        lock = lock_folder(out_dir)
        try:
            write_dir, previous = where_to_write(out_dir, resume_key, tasks, overwrite)
            data = _new_report(command, name, model, settings, resume_key, tasks)
            kept = _keep_scored_sets(data, previous) if previous is not None else []
            report = cls(out_dir, data, kept, write_dir=write_dir, lock=lock)
            report._opening_warnings(previous, kept)
            report._open_generations()
            report.save()
        except BaseException:
            unlock_folder(lock)
            raise
        return report

    def _opening_warnings(self, previous: dict | None, kept: Sequence[str]) -> None:
        """The warnings a report starts with: partial coverage, math-verify missing, and those of a resumed report
        about the sets it keeps."""
        warning = coverage_warning(self.data["datasets"])
        if warning:
            self.warn(warning)
        if not math_verify_available():
            self.warn(MISSING_NOTE)
        if previous is not None:  # the kept sets' warnings, and the run's own about what they hold
            self.data["warnings"] += [
                w
                for w in previous.get("warnings", [])
                if w.split(":")[0] in kept or (kept and w.split(":")[0] in _WARNINGS_OF_KEPT_SETS)
            ]

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
        self._entry(task.name).update(status="running", generation=None, math_verify=None, teacher_forced=None)
        self.save()

    def set_teacher_forced(self, name: str, stats: TeacherForcedStats) -> None:
        self._entry(name)["teacher_forced"] = stats.as_dict()
        self.save()

    def set_generation(self, name: str, metrics: GenerationMetrics) -> None:
        self._entry(name)["generation"] = metrics.as_dict() if metrics.n or metrics.programs else None
        self._entry(name)["math_verify"] = metrics.math_verify_summary()
        self.save()

    def complete_task(self, name: str) -> None:
        self._entry(name)["status"] = "complete"
        self.save()

    def write_generation(self, record: dict) -> None:
        self._generations.write(record)

    def mark_complete(self) -> None:
        self.data["status"] = "complete"

    @contextmanager
    def scoring(self) -> Iterator[RunReport]:
        """The run's work in a ``with`` block: the report is complete when the block ends, partial (with the error)
        when anything stops it, a Ctrl-C too (the error goes on), and written either way."""
        try:
            yield self
            self.mark_complete()
        except BaseException as err:  # noqa: BLE001 - save what is done, then stop as asked
            self.mark_stopped(err)
            raise
        finally:
            self.finish()

    def mark_stopped(self, err: BaseException) -> None:
        self.data["status"] = "partial"
        self.data["error"] = f"{type(err).__name__}: {err}"
        LOG.error("evaluation stopped (%s); writing the partial report", self.data["error"])
        if self.staged:
            LOG.error(
                "the report already in %s is kept; this run's partial report is in %s (the same command, with "
                "--overwrite, resumes it)",
                self.out_dir,
                self.dir,
            )

    # ---------------------------------------------------------------------------------------- files

    def _open_generations(self) -> None:
        """generations.jsonl with the lines of the kept sets only (a stopped set is redone from its start)."""
        path = self.dir / GENERATIONS_FILE
        kept = [r for r in read_jsonl(path) if r.get("dataset") in self._kept] if self._kept else []
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        self._generations = JsonlAppender(path)

    def _refresh(self) -> None:
        self.data["macc"] = macc(self.data["datasets"])
        self.data["overall"] = pooled(self.data["datasets"])

    def save(self) -> None:
        """report.json as it stands (after every batch: even a hard kill leaves the numbers so far)."""
        self._refresh()
        write_json_atomic(self.json_path, self.data)

    def finish(self) -> dict:
        """Close generations.jsonl, write report.md, the plots and report.json (and, replacing another run's
        report, move them into ``out_dir`` once complete); returns the report."""
        try:
            if self._generations is not None:
                self._generations.close()
                self._generations = None
            self._refresh()
            self.data["files"]["markdown"] = "report.md"
            plots: list[str] = []
            try:
                plots = [p.name for p in _plots(self.data, self.dir) if p is not None]
            except Exception as err:  # noqa: BLE001 - a plot must never cost the report
                self.warn(f"plots skipped: {type(err).__name__}: {err}")
            self.data["files"]["plots"] = plots
            stale = [name for name in PLOT_FILES if name not in plots]  # an earlier run's, or one that failed now
            for name in stale:
                (self.dir / name).unlink(missing_ok=True)
            write_text_atomic(self.dir / "report.md", report_markdown(self.data))
            write_json_atomic(self.json_path, self.data)
            if self.staged and self.data["status"] == "complete":
                publish_files(self.dir, self.out_dir, [GENERATIONS_FILE, "report.md", *plots, "report.json"], stale)
                self.dir, self.json_path = self.out_dir, self.out_dir / "report.json"
        finally:
            unlock_folder(self._lock)
            self._lock = None
        return self.data


def _new_report(command: str, name: str, model: dict, settings: dict, resume_key: dict, tasks: Sequence) -> dict:
    """The report of a run that starts: ``running``, its sets pending."""
    return {
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
        "datasets": [dataset_entry(t) for t in tasks],
        "macc": None,
        "overall": {"generation": None, "teacher_forced": None},
        "timing": {},
    }


def _keep_scored_sets(data: dict, previous: dict) -> list[str]:
    """Put the complete sets of the resumed report ``previous`` into ``data`` (those whose source file is unchanged),
    and its model once loaded; returns their names."""
    kept = []
    done = {d["name"]: d for d in previous["datasets"] if d.get("status") == "complete" and d.get("source")}
    for i, entry in enumerate(data["datasets"]):
        old = done.get(entry["name"])
        if old is None:
            continue
        if old["source"].get("sha256") != entry["source"]["sha256"]:
            LOG.warning("%s: %s changed since it was scored; scored again", entry["name"], entry["path"])
            continue
        data["datasets"][i] = old | {"coverage": entry["coverage"]}
        kept.append(entry["name"])
    if previous.get("model", {}).get("base"):
        data["model"] = previous["model"]
    return kept


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
