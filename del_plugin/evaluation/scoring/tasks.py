"""What one evaluation runs: a list of :class:`EvalTask`, one per set, each a JSONL file of ``--data`` or one of the
paper's benchmarks, with its problems, its scorer and where it came from. All of it is read and checked before a
model loads (:func:`plan_tasks`): a missing or unreadable set stops the run there."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path

from ..benchmarks.answers import extract_answer, is_correct, to_float
from ..benchmarks.names import missing_benchmarks, resolve_benchmark_names
from ..benchmarks.own_sets import DataIssue, check_files_exist, read_eval_set, require_problems
from ..benchmarks.readers import Verdict, canonical_number
from ..benchmarks.sets import (
    PROGRAM_SUFFIX,
    Benchmark,
    ModifiedBenchmarkError,
    Problem,
    load_benchmark,
    modified_set_error,
)
from .math_verify_scoring import math_verify_available, math_verify_check

__all__ = [
    "EvalTask",
    "ModifiedBenchmarkError",
    "benchmark_task",
    "data_file_task",
    "generation_record",
    "plan_tasks",
    "refuse_modified_sets",
    "score_tolerance",
]


def score_tolerance(output: str, reference: str) -> Verdict:
    """The ``--data`` files' rule (:mod:`..benchmarks.answers`): the answer read as the paper's GSM8K reader reads
    it, correct when it rounds to an integer reference or is within 4% of another one."""
    found = extract_answer(output)
    if found is None:
        return Verdict(None, False)
    return Verdict(canonical_number(found.value), is_correct(found.value, Decimal(reference)), found.value)


@dataclass
class EvalTask:
    """One set to evaluate. ``scoring``: ``numeric``, ``latex``, ``choice`` (the benchmarks) or
    ``numeric-tolerance`` (``--data`` files). ``source``: ``{path, sha256, expected_sha256, verified}``.
    ``lines``: for a data file, the file line of each problem id."""

    name: str
    problems: list[Problem]
    scoring: str
    source: dict
    benchmark: Benchmark | None = None
    issues: list[DataIssue] = field(default_factory=list)
    lines_read: int | None = None
    formats: list[str] = field(default_factory=list)
    lines: dict[int, int] = field(default_factory=dict)

    def score(self, output: str, problem: Problem) -> Verdict:
        """The paper's verdict on ``output`` (the set's reader: :mod:`..benchmarks.readers`, or the ``--data``
        rule), with math-verify's on the same text beside it (``math_verify``, None without math-verify)."""
        if self.benchmark is None:
            verdict = score_tolerance(output, problem.reference)
        else:
            verdict = self.benchmark.score(output, problem.reference)
        letters = "" if self.benchmark is None else self.benchmark.letters
        equivalent = math_verify_check(output, problem.reference, self.scoring, letters, problem.solution)
        if equivalent is None:
            return verdict
        return replace(verdict, math_verify=equivalent.correct, math_verify_note=equivalent.over_budget)

    def no_answer(self) -> Verdict:
        """The verdict on an output that gives no answer at all (a program that failed), by both scorers."""
        return Verdict(None, False, math_verify=False if math_verify_available() else None)

    @property
    def response_prefix(self) -> str:
        return "" if self.benchmark is None else self.benchmark.response_prefix

    @property
    def runs_program_of_thought(self) -> bool:
        """Whether the paper runs this set as program-of-thought (GSM8K, MATH, SVAMP, SimulEq)."""
        return self.benchmark is not None and self.benchmark.program_of_thought

    def program_question(self, problem: Problem) -> str:
        return problem.question + PROGRAM_SUFFIX

    def source_warning(self) -> str | None:
        """The warning a benchmark read from a file that is not the authors' must carry, else None."""
        if self.source.get("verified") is not False:
            return None
        return (
            f"{self.name}: {self.source['path']} is not the authors' file (sha256 {self.source['sha256']}, "
            f"expected {self.source['expected_sha256']}): its accuracy is not comparable with the paper's"
        )

    @property
    def has_solutions(self) -> bool:
        return any(p.solution for p in self.problems)


def data_file_task(path: str | Path, name: str, limit: int | None) -> EvalTask:
    """A ``--data`` JSONL file (:mod:`..benchmarks.own_sets`): problem ids are the 0-based line indices."""
    eval_set = read_eval_set(path, limit, name)
    require_problems(eval_set)
    problems = [Problem(e.line - 1, e.question, canonical_number(e.reference), e.solution) for e in eval_set.examples]
    return EvalTask(
        name=name,
        problems=problems,
        scoring="numeric-tolerance",
        source={
            "path": eval_set.path,
            "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
            "expected_sha256": None,
            "verified": None,
        },
        issues=list(eval_set.issues),
        lines_read=eval_set.lines_read,
        formats=sorted({e.format for e in eval_set.examples}),
        lines={e.line - 1: e.line for e in eval_set.examples},
    )


def benchmark_task(name: str, benchmark_dir: str | Path | None, limit: int | None) -> EvalTask:
    """One of the paper's benchmarks (:mod:`..benchmarks.sets`), its first ``limit`` problems."""
    loaded = load_benchmark(name, benchmark_dir, limit)
    return EvalTask(
        name=name,
        problems=loaded.problems,
        scoring=loaded.benchmark.scoring,
        source={
            "path": loaded.path,
            "sha256": loaded.sha256,
            "expected_sha256": loaded.benchmark.sha256,
            "verified": loaded.verified,
        },
        benchmark=loaded.benchmark,
        lines_read=loaded.total,
    )


def _unique_names(paths: Sequence[str | Path], taken: set[str]) -> list[str]:
    names = [Path(p).stem for p in paths]
    names = [
        f"{Path(p).parent.name}/{Path(p).stem}" if names.count(n) > 1 or n in taken else n for p, n in zip(paths, names)
    ]
    return names


def plan_tasks(
    data: Sequence[str | Path] = (),
    benchmarks: str | Sequence[str] = (),
    benchmark_dir: str | Path | None = None,
    limit: int | None = None,
    *,
    allow_modified: bool = False,
) -> list[EvalTask]:
    """The sets of one run, read and checked: the benchmarks (in the paper's order), then the data files. Raises
    FileNotFoundError or ValueError, naming the set and the path, for anything missing or unreadable (and for a
    user's benchmark file that is not the authors', unless ``allow_modified``)."""
    names = resolve_benchmark_names(benchmarks) if benchmarks else []
    if not names and not data:
        raise ValueError("nothing to evaluate: give --data files and/or --benchmarks")
    check_files_exist(list(data))
    missing = missing_benchmarks(names, benchmark_dir)
    if missing is not None:
        raise missing
    tasks = [benchmark_task(n, benchmark_dir, limit) for n in names]
    refuse_modified_sets(tasks, allow_modified)
    tasks += [data_file_task(p, n, limit) for p, n in zip(data, _unique_names(data, set(names)))]
    return tasks


def refuse_modified_sets(tasks: Sequence[EvalTask], allow_modified: bool) -> None:
    """A :class:`ModifiedBenchmarkError` for the first benchmark read from a file that is not the authors', unless
    ``allow_modified``: its accuracy would not be comparable with the paper's, and a script must notice (a warning
    and a mark in the report are easy to miss)."""
    for task in tasks:
        if task.source.get("verified") is False and not allow_modified:
            source = task.source
            raise modified_set_error(task.name, source["path"], source["sha256"], source["expected_sha256"])


def generation_record(
    task: EvalTask,
    problem: Problem,
    verdict: Verdict,
    text: str,
    *,
    mode: str,
    new_tokens: int | None = None,
    finished: bool | None = None,
    program: dict | None = None,
    teacher_forced: tuple[int, int, float] | None = None,
) -> dict:
    """One line of generations.jsonl (the keys are documented in docs/evaluation.md)."""
    abs_error = None if verdict.value is None else to_float(abs(verdict.value - Decimal(problem.reference)))
    tf = teacher_forced
    return {
        "dataset": task.name,
        "id": problem.id,
        "line": task.lines.get(problem.id),
        "question": problem.question,
        "reference": problem.reference,
        "generation": text,
        "prediction": verdict.prediction,
        "correct": verdict.correct,
        "math_verify_correct": verdict.math_verify,
        "math_verify_note": verdict.math_verify_note,
        "defaulted": verdict.defaulted,
        "abs_error": abs_error,
        "new_tokens": new_tokens,
        "finished": finished,
        "mode": mode,
        "program": program,
        "tf_digits": None if tf is None else tf[0],
        "tf_digits_correct": None if tf is None else tf[1],
        "tf_entropy_sum": None if tf is None else tf[2],
    }
