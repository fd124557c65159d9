"""The files of one report's folder, and their one writer: ``report.json`` (written whole after every change),
``generations.jsonl`` (a whole line appended at a time), and at the end ``report.md`` and the plots (:mod:`..output`
writes each file whole). What the report says is :class:`~.run_report.RunReport`'s job; where it is written, this
module's."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path

from ..output import JsonlAppender, publish_files, read_jsonl, unlock_folder, write_json_atomic, write_text_atomic
from .files import GENERATIONS_FILE, PLOT_FILES
from .tables import benchmark_accuracies, report_markdown

__all__ = ["ReportFolder"]


class ReportFolder:
    """Where one run's report is written: ``out_dir`` itself, or, when the run replaces the report of another run,
    the staging folder ``write_dir`` whose files move into ``out_dir`` once the run is complete (so that the earlier
    report stays whole until then). Holds the lock on ``out_dir`` (:func:`~..output.lock_folder`) until
    :meth:`release`."""

    def __init__(self, out_dir: Path, write_dir: Path | None = None, lock: int | None = None):
        self.out_dir = out_dir
        self.dir = write_dir or out_dir
        self._lock = lock
        self._generations: JsonlAppender | None = None

    @property
    def staged(self) -> bool:
        """Whether this run replaces another run's report (and writes in the staging folder until complete)."""
        return self.dir != self.out_dir

    @property
    def json_path(self) -> Path:
        return self.dir / "report.json"

    def open_generations(self, kept_sets: Iterable[str]) -> None:
        """generations.jsonl with the lines of the kept sets only (a stopped set is redone from its start)."""
        kept_sets = set(kept_sets)
        path = self.dir / GENERATIONS_FILE
        kept = [r for r in read_jsonl(path) if r.get("dataset") in kept_sets] if kept_sets else []
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        self._generations = JsonlAppender(path)

    def write_generation(self, record: dict) -> None:
        self._generations.write(record)

    def save(self, data: dict) -> None:
        write_json_atomic(self.json_path, data)

    def write_all(self, data: dict, warn: Callable[[str], None]) -> None:
        """Close generations.jsonl, write report.md, the plots (one that fails is a ``warn``ing in ``data``, never a
        report left unwritten) and report.json, and, replacing another run's report, move them into ``out_dir``
        once complete."""
        if self._generations is not None:
            self._generations.close()
            self._generations = None
        data["files"]["markdown"] = "report.md"
        plots: list[str] = []
        try:
            plots = [p.name for p in _plots(data, self.dir) if p is not None]
        except Exception as err:  # noqa: BLE001 - a plot must never cost the report
            warn(f"plots skipped: {type(err).__name__}: {err}")
        data["files"]["plots"] = plots
        stale = [name for name in PLOT_FILES if name not in plots]  # an earlier run's, or one that failed now
        for name in stale:
            (self.dir / name).unlink(missing_ok=True)
        write_text_atomic(self.dir / "report.md", report_markdown(data))
        write_json_atomic(self.json_path, data)
        if self.staged and data["status"] == "complete":
            publish_files(self.dir, self.out_dir, [GENERATIONS_FILE, "report.md", *plots, "report.json"], stale)
            self.dir = self.out_dir

    def release(self) -> None:
        """Unlock ``out_dir`` (once; the report's files stay as written)."""
        unlock_folder(self._lock)
        self._lock = None


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
