"""Report files: the JSON report (schema ``del-eval/2``, see ``docs/evaluation.md``), written only by
:class:`RunReport`, its markdown table (:mod:`.tables`) and plots, and the side-by-side comparison of several
reports (:func:`compare_reports`)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from .. import __version__
from .benchmarks.sets import BENCHMARK_NAMES
from .errors import OutputError, decode_text, json_value, read_input_bytes
from .eval_extra import require_eval_extra
from .math_verify_scoring import MISSING_NOTE, math_verify_available
from .metrics import GenerationMetrics, NumericMetrics
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
from .tables import (
    OVERALL,
    benchmark_accuracies,
    comparison_markdown,
    comparison_warnings,
    dataset_entries,
    is_partial,
    report_markdown,
)
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

SCHEMA = "del-eval/2"
# warnings of the run as a whole that describe what the scored sets hold (a resume that loads no model, all of
# them scored, would not say them again)
_WARNINGS_OF_KEPT_SETS = ("teacher-forced digit metrics skipped",)
READABLE_SCHEMAS = ("del-eval/1", SCHEMA)
GENERATIONS_FILE = "generations.jsonl"
PLOT_FILES = ("entropy_histogram.png", "place_accuracy.png", "benchmark_accuracy.png")
# where a run that replaces another run's report (--overwrite) writes until it is complete
STAGING_DIR = ".del-eval-new"
FOREST_PLOT = "difference_forest.png"


def load_report(path: str | Path) -> dict:
    """A report.json (or the folder holding one), schema ``del-eval/1`` or ``/2``."""
    path = Path(path)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such report (give report.json files or the folders del-eval wrote)")
    try:
        report = json_value(decode_text(read_input_bytes(path, "report"), path, "report"))
    except ValueError as err:  # not JSON, nested too deep, an integer too long: not a report del-eval wrote
        raise ValueError(f"{path}: {err}") from None
    if not isinstance(report, dict) or report.get("schema") not in READABLE_SCHEMAS:
        found = report.get("schema") if isinstance(report, dict) else type(report).__name__
        raise ValueError(f"{path}: not a del-eval report (schema {found!r}, expected {SCHEMA!r})")
    report.setdefault("_path", str(path))
    return report


def macc(datasets: Sequence[dict]) -> dict | None:
    """The mean accuracy over the benchmarks of ``datasets`` that are complete: ``{value, sets, label, complete,
    partial}``. ``partial`` names the sets scored on part of their problems (``--limit``, or ``score`` given some
    ids); ``complete`` is all seven sets, each whole, and only then is ``label`` plain ``mACC``; else it says what
    it is over (``mACC (3 of 7 sets)``, ``mACC (partial coverage)``)."""
    done = {
        d["benchmark"]: d
        for d in datasets
        if d.get("benchmark")
        and d.get("status") == "complete"
        and (d.get("generation") or {}).get("accuracy") is not None
    }
    if not done:
        return None
    sets = [n for n in BENCHMARK_NAMES if n in done]
    partial = [n for n in sets if is_partial(done[n])]
    qualifiers = [f"{len(sets)} of {len(BENCHMARK_NAMES)} sets"] if len(sets) < len(BENCHMARK_NAMES) else []
    qualifiers += ["partial coverage"] if partial else []
    equivalent = [(done[n].get("math_verify") or {}).get("accuracy") for n in sets]
    return {
        "value": sum(done[n]["generation"]["accuracy"] for n in sets) / len(sets),
        "math_verify": None if None in equivalent else sum(equivalent) / len(sets),
        "sets": sets,
        "label": "mACC" + (f" ({', '.join(qualifiers)})" if qualifiers else ""),
        "complete": not qualifiers,
        "partial": partial,
    }


def coverage(task) -> dict | None:
    """Which problems of a benchmark a run scores: ``{problems, total, ids_sha256}`` (the count, the set's size,
    and a digest of the ids, so that two reports can tell whether they scored the same problems); None for a
    ``--data`` file."""
    if task.benchmark is None:
        return None
    ids = sorted(p.id for p in task.problems)
    return {
        "problems": len(ids),
        "total": task.lines_read,
        "ids_sha256": hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest(),
    }


def coverage_warning(entries: Sequence[dict]) -> str | None:
    """The warning a report carries when some of its benchmarks are scored on part of their problems."""
    partial = [d for d in entries if is_partial(d)]
    if not partial:
        return None
    sets = ", ".join(f"{d['name']} {d['coverage']['problems']:,} of {d['coverage']['total']:,}" for d in partial)
    return f"partial coverage: {sets} problems scored; their accuracies, and mACC, are over those problems only"


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
        "coverage": coverage(task),
        "generation": None,
        "math_verify": None,
        "teacher_forced": None,
    }


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
            write_dir, previous = _where_to_write(out_dir, resume_key, tasks, overwrite)
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
                    if old is None:
                        continue
                    if old["source"].get("sha256") != entry["source"]["sha256"]:
                        LOG.warning("%s: %s changed since it was scored; scored again", entry["name"], entry["path"])
                        continue
                    data["datasets"][i] = old | {"coverage": entry["coverage"]}
                    kept.append(entry["name"])
                if previous.get("model", {}).get("base"):
                    data["model"] = previous["model"]
            report = cls(out_dir, data, kept, write_dir=write_dir, lock=lock)
            warning = coverage_warning(data["datasets"])
            if warning:
                report.warn(warning)
            if not math_verify_available():
                report.warn(MISSING_NOTE)
            if previous is not None:  # the kept sets' warnings, and the run's own about what they hold
                report.data["warnings"] += [
                    w
                    for w in previous.get("warnings", [])
                    if w.split(":")[0] in kept or (kept and w.split(":")[0] in _WARNINGS_OF_KEPT_SETS)
                ]
            report._open_generations()
            report.save()
        except BaseException:
            unlock_folder(lock)
            raise
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


def _holds_results(report: dict) -> bool:
    return any(
        d.get("status") == "complete" or d.get("generation") or d.get("teacher_forced")
        for d in report.get("datasets") or []
    )


def _report_in(folder: Path) -> tuple[dict | None, str | None]:
    """The report in ``folder`` (None when there is none) or why it cannot be read."""
    path = folder / "report.json"
    if not path.is_file():
        return None, None
    try:
        return load_report(path), None
    except ValueError as err:
        return None, f"its report.json cannot be read: {err}"


def _why_not_resumable(previous: dict, resume_key: dict, tasks: Sequence) -> str | None:
    """Why the report ``previous`` is another run's (None when this run resumes it): other settings, or complete
    sets this run does not have (resuming would drop them)."""
    if previous.get("run") != resume_key:
        old = previous.get("run") or {}
        differs = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in resume_key.items() if old.get(k) != v]
        return "; ".join(differs) or "an older schema"
    names = {t.name for t in tasks}
    dropped = [
        d["name"] for d in previous.get("datasets") or [] if d.get("status") == "complete" and d["name"] not in names
    ]
    if dropped:
        return f"its sets {', '.join(dropped)} are not in this run"
    return None


def _where_to_write(out_dir: Path, resume_key: dict, tasks: Sequence, overwrite: bool) -> tuple[Path, dict | None]:
    """The folder this run writes in (``out_dir``, or the staging folder when it replaces another run's report) and
    the report it resumes (None: it starts afresh)."""
    staging = out_dir / STAGING_DIR
    previous, unreadable = _report_in(out_dir)
    if previous is not None and not _holds_results(previous):
        LOG.info("%s: its report holds no results yet; replaced", out_dir)
        previous = None
    if previous is None and unreadable is None:
        shutil.rmtree(staging, ignore_errors=True)
        return out_dir, None
    why = unreadable or _why_not_resumable(previous, resume_key, tasks)
    if why is None:
        shutil.rmtree(staging, ignore_errors=True)  # a replacement that was published, or given up
        return out_dir, previous
    if not overwrite:
        hint = ""
        if (staging / "report.json").is_file():
            hint = f" (a stopped run that was replacing it left its partial report in {staging})"
        raise OutputError(
            f"{out_dir} holds the report of another run ({why}): give another --out, or --overwrite to replace it"
            + hint
        )
    staged, _ = _report_in(staging)
    if staged is not None and _why_not_resumable(staged, resume_key, tasks) is None:
        return staging, staged
    shutil.rmtree(staging, ignore_errors=True)
    try:
        staging.mkdir()
    except OSError as err:
        raise OutputError(f"{staging}: cannot be made ({err.strerror or err}); give another --out") from None
    return staging, None


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


def compare_reports(
    reports: Sequence[dict],
    out_dir: Path,
    labels: Sequence[str] | None = None,
    *,
    arms: tuple[Sequence[int], Sequence[int]] | None = None,
    arm_labels: Sequence[str] | None = None,
    scorer: str = "paper",
    resamples: int | None = None,
    seed: int | None = None,
) -> dict[str, Path]:
    """comparison.md, comparison.json and overlaid plots for ``reports``; returns the written paths by kind.

    With two reports (baseline first), or ``arms`` (the indices of the baseline's runs and of the candidate's, one
    run per seed), the verdict comes first (:func:`.verdict.compare_arms`, with its forest plot); ``arm_labels``
    names the two arms (default: the reports' labels with one run an arm, else the name the arm's runs share)."""
    from .plots import plot_benchmark_accuracy, plot_entropy_histograms, plot_place_accuracy
    from .stats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
    from .verdict import compare_arms, plot_forest, verdict_markdown

    if not reports:
        raise ValueError("compare needs at least one report")
    labels = list(labels) if labels else [r.get("name") or f"model {i + 1}" for i, r in enumerate(reports)]
    if len(labels) != len(reports):
        raise ValueError(f"{len(labels)} labels for {len(reports)} reports")
    if len(set(labels)) != len(labels):
        labels = [f"{label} ({i + 1})" for i, label in enumerate(labels)]
    if arms is None and len(reports) == 2:
        arms = ([0], [1])
    verdict = None
    if arms is not None:
        baseline, candidate = ([reports[i] for i in arm] for arm in arms)
        if not (baseline and candidate):
            raise ValueError("a verdict needs at least one baseline run and one candidate run")
        if arm_labels is None:
            single = len(baseline) == len(candidate) == 1
            arm_labels = (
                (labels[arms[0][0]], labels[arms[1][0]])
                if single
                else (_arm_name(baseline, "baseline"), _arm_name(candidate, "candidate"))
            )
        verdict = compare_arms(
            baseline,
            candidate,
            tuple(arm_labels),
            scorer=scorer,
            resamples=BOOTSTRAP_RESAMPLES if resamples is None else resamples,
            seed=BOOTSTRAP_SEED if seed is None else seed,
        )
        LOG.info("verdict: %s", verdict["line"])
    out_dir = prepare_output_dir(out_dir)
    warnings = comparison_warnings(reports, labels)
    for warning in warnings:
        LOG.warning(warning)
    written = {"markdown": out_dir / "comparison.md", "json": out_dir / "comparison.json"}
    verdict_lines: list[str] = []
    if verdict is not None:
        forest = plot_forest(verdict, out_dir / FOREST_PLOT)
        if forest is not None:
            written["forest"] = forest
        verdict_lines = verdict_markdown(verdict, forest.name if forest is not None else None)
    elif len(reports) > 2:
        verdict_lines = [
            "No verdict: give two reports, or two arms (--baseline RUN ... --candidate RUN ...), for the paired "
            "test; nothing below is in bold.",
            "",
        ]
    winners = (verdict or {}).get("winners", {})
    write_text_atomic(written["markdown"], comparison_markdown(reports, labels, verdict_lines, winners))
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
    for name in (*PLOT_FILES, FOREST_PLOT):  # an earlier comparison's plot this one does not have
        if out_dir / name not in written.values():
            (out_dir / name).unlink(missing_ok=True)
    summary = {
        "schema": SCHEMA + "/comparison",
        "warnings": warnings,
        "verdict": verdict,
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
                        "coverage": d.get("coverage"),
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


def _arm_name(reports: Sequence[dict], fallback: str) -> str:
    """An arm's label: the name its runs share, else ``fallback``."""
    names = {r.get("name") for r in reports}
    return names.pop() if len(names) == 1 and None not in names else fallback
