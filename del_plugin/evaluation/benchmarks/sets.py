"""The paper's seven benchmarks: where each file lives, how its problems are read, how its answers are scored.

GSM8K, MATH, SVAMP, AQuA and MMLU-math ship in the package (``del_plugin/evaluation/data/``, gzipped, each with its
licence). SimulEq and SAT are read from a folder the user names (``benchmark_dir``), laid out as the authors'
copies are: ``simuleq/simuleq.json`` and ``sat/sat.json``. Every file's sha256 is checked against the authors'
file: a shipped file that differs is an error (the package is damaged); a user's file that differs is read, and
its :class:`BenchmarkSet` says so (``verified`` False), since its accuracy is then not comparable with the paper's
(del-eval refuses it unless ``--allow-modified``: :func:`~del_plugin.evaluation.scoring.tasks.refuse_modified_sets`).

Questions are written as the authors' harness writes them: SVAMP's ``Body`` + " " + ``Question``; AQuA's and
MMLU's options appended as ``Answer Choices: (A) … (B) …``; SAT's already inline. The id of a problem is its
0-based index in its file.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnusableInput, decode_text, json_value, read_input_bytes
from .answers import ANSWER_MARKER, GSM8K_MARKERS
from .latex import last_boxed, normalize_math_answer
from .names import (
    BENCHMARK_NAMES,
    DATA_DIR,
    SET_FILES,
    SHIPPED_NAMES,
    MissingBenchmarksError,
    SetFile,
    benchmark_path,
    missing_benchmarks,
    resolve_benchmark_names,
)
from .readers import Verdict, reference_number, score_choice, score_math, score_number

__all__ = [
    "BENCHMARKS",
    "BENCHMARK_NAMES",
    "CHOICE_RESPONSE_PREFIX",
    "DATA_DIR",
    "PROGRAM_SUFFIX",
    "SHIPPED_NAMES",
    "Benchmark",
    "BenchmarkSet",
    "MissingBenchmarksError",
    "ModifiedBenchmarkError",
    "Problem",
    "load_benchmark",
    "missing_benchmarks",
    "modified_set_error",
    "resolve_benchmark_names",
]

# what the authors' harness appends to a question to ask for a program (program-of-thought), and the start of the
# response it gives a multiple-choice question
PROGRAM_SUFFIX = " Let's write a program."
CHOICE_RESPONSE_PREFIX = "Let's solve the multi-choice question step by step.\n"


@dataclass(frozen=True)
class Problem:
    """One problem: ``id`` (0-based index in its file), the ``question`` as prompted, the ``reference`` answer in
    the form its scorer compares (a canonical number, a normalised LaTeX answer, a letter), and the reference
    ``solution`` where the set has one (read by the teacher-forced digit metrics)."""

    id: int
    question: str
    reference: str
    solution: str | None = None


class BenchmarkFileError(UnusableInput):
    """A benchmark file that cannot be read as its set's layout."""


class ModifiedBenchmarkError(UnusableInput):
    """A user's copy of SimulEq or SAT that is not the authors' file (its sha256 differs), not allowed; ``problem``
    says what is wrong, without the fix (which depends on the command)."""

    def __init__(self, problem: str, fix: str):
        super().__init__(f"{problem}: {fix}")
        self.problem = problem


def modified_set_error(
    name: str, path: str, sha256: str, expected: str, fix: str = "pass --allow-modified to score this file"
) -> ModifiedBenchmarkError:
    """The error for a benchmark read from a file that is not the authors' (``fix``: how to score it anyway)."""
    return ModifiedBenchmarkError(
        f"{name}: {path} is not the authors' file (sha256 {sha256}, expected {expected}), so its accuracy would not "
        "be comparable with the paper's",
        f"use the authors' copy (docs/evaluation.md says where), or {fix} (the report then marks it)",
    )


def _rows(raw: bytes, path: str, layout: str) -> list:
    text = decode_text(raw, path, "benchmark file")
    if layout == "array":
        try:
            rows = json_value(text)
        except ValueError as err:  # not JSON, nested too deep, an integer too long
            raise BenchmarkFileError(f"{path}: {err}") from None
        if not isinstance(rows, list):
            raise BenchmarkFileError(f"{path}: expected a JSON array of problems, got {type(rows).__name__}")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json_value(line))
            except ValueError as err:
                raise BenchmarkFileError(f"{path}:{number}: {err}") from None
    return rows


def _field(row: object, key: str, kind: type | tuple[type, ...], path: str, index: int):
    if not isinstance(row, dict):
        raise BenchmarkFileError(f"{path}: problem {index}: expected a JSON object, got {type(row).__name__}")
    if key not in row:
        raise BenchmarkFileError(f"{path}: problem {index}: no `{key}` (keys: {', '.join(sorted(row))})")
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise BenchmarkFileError(f"{path}: problem {index}: `{key}` is {type(value).__name__}, not {kind}")
    return value


def _number(text: str, path: str, index: int) -> str:
    try:
        return reference_number(text)
    except ValueError as err:
        raise BenchmarkFileError(f"{path}: problem {index}: the reference answer is {err}") from None


def _gsm8k(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "lines")):
        answer = _field(row, "answer", str, path, i)
        if "####" not in answer:
            raise BenchmarkFileError(f"{path}: problem {i}: the answer has no '#### N'")
        reference = _number(answer.rsplit("####", 1)[1], path, i)
        problems.append(Problem(i, _field(row, "question", str, path, i).strip(), reference, answer))
    return problems


def _math(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "lines")):
        solution = _field(row, "solution", str, path, i)
        boxed = last_boxed(solution)
        if boxed is None:
            raise BenchmarkFileError(f"{path}: problem {i}: the solution has no \\boxed{{...}} answer")
        problems.append(Problem(i, _field(row, "problem", str, path, i), normalize_math_answer(boxed), solution))
    return problems


def _svamp(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "array")):
        body, question = _field(row, "Body", str, path, i), _field(row, "Question", str, path, i)
        answer = _field(row, "Answer", (int, float), path, i)
        problems.append(Problem(i, body.strip() + " " + question.strip(), _number(str(answer), path, i)))
    return problems


def _simuleq(raw: bytes, path: str) -> list[Problem]:
    return [
        Problem(
            i,
            _field(row, "question", str, path, i),
            _number(str(_field(row, "answer", (str, int, float), path, i)), path, i),
        )
        for i, row in enumerate(_rows(raw, path, "array"))
    ]


def _options(letters_and_texts: Sequence[tuple[str, str]]) -> str:
    return "Answer Choices: " + " ".join(f"({letter}) {text}" for letter, text in letters_and_texts)


def _aqua(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "lines")):
        options = _field(row, "options", list, path, i)
        parsed = []
        for option in options:
            letter, sep, text = str(option).partition(")")
            if not sep or letter not in "ABCDE" or len(letter) != 1:
                raise BenchmarkFileError(f"{path}: problem {i}: option {option!r} is not written 'A)…'")
            parsed.append((letter, text.strip()))
        correct = _field(row, "correct", str, path, i)
        question = _field(row, "question", str, path, i).strip() + "\n" + _options(parsed)
        problems.append(Problem(i, question, correct.strip(), _field(row, "rationale", str, path, i)))
    return problems


def _sat(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "array")):
        question, answer = _field(row, "question", str, path, i), _field(row, "answer", str, path, i).strip()
        if answer not in ("A", "B", "C", "D"):
            raise BenchmarkFileError(f"{path}: problem {i}: the answer {answer!r} is not a letter A-D")
        problems.append(Problem(i, question, answer))
    return problems


def _mmlu_math(raw: bytes, path: str) -> list[Problem]:
    problems = []
    for i, row in enumerate(_rows(raw, path, "array")):
        choices = _field(row, "choices", list, path, i)
        answer = _field(row, "answer", int, path, i)
        if len(choices) != 4 or not 0 <= answer < 4:
            raise BenchmarkFileError(f"{path}: problem {i}: expected 4 choices and an answer index 0-3")
        question = _field(row, "question", str, path, i) + "\n" + _options(list(zip("ABCD", map(str, choices))))
        problems.append(Problem(i, question, "ABCD"[answer]))
    return problems


@dataclass(frozen=True)
class Benchmark(SetFile):
    """One of the paper's sets: its file (:class:`~.names.SetFile`: name, title, folder, file, sha256, shipped), its
    ``scoring`` (``numeric``, ``latex`` or ``choice``) and whether the paper runs it as ``program_of_thought``."""

    scoring: str
    program_of_thought: bool
    parse: Callable[[bytes, str], list[Problem]]
    letters: str = ""
    markers: tuple[str, ...] = ()

    def score(self, output: str, reference: str) -> Verdict:
        """The verdict on one model output against a problem's ``reference`` (see :mod:`.readers`)."""
        if self.scoring == "numeric":
            return score_number(output, reference, self.markers)
        if self.scoring == "latex":
            return score_math(output, reference)
        return score_choice(output, reference, self.letters)

    @property
    def response_prefix(self) -> str:
        return CHOICE_RESPONSE_PREFIX if self.scoring == "choice" else ""


def _benchmark(name: str, scoring: str, program_of_thought: bool, parse, **extra) -> Benchmark:
    return Benchmark(
        **vars(SET_FILES[name]), scoring=scoring, program_of_thought=program_of_thought, parse=parse, **extra
    )


_NUMBER_MARKERS = (ANSWER_MARKER,)
# in the paper's column order, as BENCHMARK_NAMES
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        _benchmark("gsm8k", "numeric", True, _gsm8k, markers=GSM8K_MARKERS),
        _benchmark("math", "latex", True, _math),
        _benchmark("svamp", "numeric", True, _svamp, markers=_NUMBER_MARKERS),
        _benchmark("simuleq", "numeric", True, _simuleq, markers=_NUMBER_MARKERS),
        _benchmark("aqua", "choice", False, _aqua, letters="ABCDE"),
        _benchmark("sat", "choice", False, _sat, letters="ABCD"),
        _benchmark("mmlu_math", "choice", False, _mmlu_math, letters="ABCD"),
    )
}


@dataclass
class BenchmarkSet:
    """A benchmark read from its file: the ``problems`` (the first ``limit`` of them when a limit was given),
    how many the file holds, where it was read and whether its sha256 is the authors' (``verified``)."""

    benchmark: Benchmark
    problems: list[Problem]
    total: int
    path: str
    sha256: str

    @property
    def verified(self) -> bool:
        return self.sha256 == self.benchmark.sha256

    @property
    def name(self) -> str:
        return self.benchmark.name


def load_benchmark(name: str, benchmark_dir: str | Path | None = None, limit: int | None = None) -> BenchmarkSet:
    """Read benchmark ``name`` (its first ``limit`` problems when given) and check its sha256. Raises
    FileNotFoundError (a missing file, see :func:`benchmark_path`) or ValueError (an unknown name, a file that
    is not UTF-8 or not the set's layout, a damaged shipped file)."""
    (name,) = resolve_benchmark_names([name])
    benchmark = BENCHMARKS[name]
    path = benchmark_path(benchmark, benchmark_dir)
    raw = read_input_bytes(path, "benchmark file")
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    digest = hashlib.sha256(raw).hexdigest()
    if benchmark.shipped and digest != benchmark.sha256:
        raise ValueError(
            f"{name}: {path} is damaged (sha256 {digest}, expected {benchmark.sha256}); reinstall del-plugin"
        )
    problems = benchmark.parse(raw, str(path))
    if not problems:
        raise BenchmarkFileError(f"{path}: no problems")
    total = len(problems)
    return BenchmarkSet(benchmark, problems[:limit] if limit is not None else problems, total, str(path), digest)
