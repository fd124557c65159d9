"""The report of one run: ``report.json`` (schema ``del-eval/2``, see ``docs/evaluation.md``), filled only by
:class:`RunReport`, with its ``generations.jsonl``, its markdown table (:mod:`.tables`) and plots, which its
:class:`~.store.ReportFolder` writes. Reading reports back is :mod:`.files`; putting several side by side,
:mod:`~del_plugin.evaluation.compare.comparison`."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ...version import __version__
from ..output import lock_folder, prepare_output_dir, unlock_folder
from ..scoring.math_verify_scoring import MISSING_NOTE, math_verify_available
from ..scoring.metrics import GenerationMetrics
from ..scoring.teacher_forced import TeacherForcedStats
from .files import GENERATIONS_FILE, SCHEMA
from .resume import keep_scored_sets, where_to_write
from .store import ReportFolder
from .summary import coverage_warning, dataset_entry, macc, pooled

LOG = logging.getLogger(__name__)

__all__ = ["RunReport"]

# warnings of the run as a whole that describe what the scored sets hold (a resume that loads no model, all of
# them scored, would not say them again)
_WARNINGS_OF_KEPT_SETS = ("teacher-forced digit metrics skipped",)


class RunReport:
    """The report of one run as the run fills it: its sets' status and metrics, its warnings, timings and model,
    saved after every change and written whole at :meth:`finish` by :attr:`folder` (a
    :class:`~.store.ReportFolder`: ``report.json``, ``generations.jsonl`` line by line, ``report.md`` and the
    plots). A plot that fails is a warning in the report, never a report left saying ``running``.

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
        self.data = data
        self.folder = ReportFolder(out_dir, write_dir, lock)
        self._kept = set(kept_generations)

    @property
    def out_dir(self) -> Path:
        return self.folder.out_dir

    @property
    def dir(self) -> Path:
        """Where the report is written now (:attr:`.store.ReportFolder.dir`)."""
        return self.folder.dir

    @property
    def json_path(self) -> Path:
        return self.folder.json_path

    @property
    def staged(self) -> bool:
        return self.folder.staged

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
        :class:`~..errors.OutputError`). The report already there is resumed when it was written by the same run
        (``resume_key``, and its complete sets are among ``tasks``): its complete sets, with the same source files,
        are kept with their generations. A report of another run is an OutputError, unless ``overwrite``: then it
        is replaced once this run is complete. A report in which nothing was scored yet is replaced."""
        out_dir = prepare_output_dir(out_dir)
        lock = lock_folder(out_dir)
        try:
            write_dir, previous = where_to_write(out_dir, resume_key, tasks, overwrite)
            data = _new_report(command, name, model, settings, resume_key, tasks)
            kept = keep_scored_sets(data, previous) if previous is not None else []
            report = cls(out_dir, data, kept, write_dir=write_dir, lock=lock)
            report._opening_warnings(previous, kept)
            report.folder.open_generations(report._kept)
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
        self.folder.write_generation(record)

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

    def _refresh(self) -> None:
        self.data["macc"] = macc(self.data["datasets"])
        self.data["overall"] = pooled(self.data["datasets"])

    def save(self) -> None:
        """report.json as it stands (after every batch: even a hard kill leaves the numbers so far)."""
        self._refresh()
        self.folder.save(self.data)

    def finish(self) -> dict:
        """Write the report's files whole (:meth:`.store.ReportFolder.write_all`: report.md, the plots, report.json,
        moved into ``out_dir`` when replacing another run's report once complete) and unlock the folder; returns the
        report."""
        try:
            self._refresh()
            self.folder.write_all(self.data, self.warn)
        finally:
            self.folder.release()
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
