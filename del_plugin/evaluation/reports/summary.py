"""What a report's numbers add up to: a set's entry as a run opens it, which problems of a benchmark it scores
(:func:`coverage`), the mean accuracy over the paper's benchmarks (:func:`macc`) and every set pooled
(:func:`pooled`)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..benchmarks.names import BENCHMARK_NAMES
from ..scoring.metrics import GenerationMetrics, NumericMetrics
from ..scoring.teacher_forced import TeacherForcedStats
from .tables import is_partial

__all__ = ["coverage", "coverage_warning", "dataset_entry", "macc", "pooled"]


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


def dataset_entry(task) -> dict:
    """A set's entry in a report as a run opens it: where it was read from, what was skipped, nothing scored yet."""
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
