"""The paper's seven benchmarks: where each file lives, how its problems are read, how its answers are scored.

GSM8K, MATH, SVAMP, AQuA and MMLU-math ship in the package (``del_plugin/evaluation/data/``, gzipped, each with its
licence). SimulEq and SAT are read from a folder the user names (``benchmark_dir``), laid out as the authors'
copies are: ``simuleq/simuleq.json`` and ``sat/sat.json``. Every file's sha256 is checked against the authors'
file: a shipped file that differs is an error (the package is damaged); a user's file that differs is read, and
its :class:`BenchmarkSet` says so (``verified`` False), since its accuracy is then not comparable with the paper's
(del-eval refuses it unless ``--allow-modified``: :func:`~del_plugin.evaluation.tasks.refuse_modified_sets`).

Questions are written as the authors' harness writes them: SVAMP's ``Body`` + " " + ``Question``; AQuA's and
MMLU's options appended as ``Answer Choices: (A) … (B) …``; SAT's already inline. The id of a problem is its
0-based index in its file.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import UnusableInput, decode_text, json_value, read_input_bytes
from .latex import last_boxed, normalize_math_answer
from .readers import ANSWER_MARKER, GSM8K_MARKERS, Verdict, reference_number, score_choice, score_math, score_number

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
    "Problem",
    "load_benchmark",
    "missing_benchmarks",
    "resolve_benchmark_names",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
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
class Benchmark:
    """One of the paper's sets: its ``name`` (``gsm8k``), ``title`` in tables (``GSM8K``), its file under
    ``folder/`` and that file's sha256 (the authors' copy), whether it ``shipped`` in the package, its ``scoring``
    (``numeric``, ``latex`` or ``choice``) and whether the paper runs it as ``program_of_thought``."""

    name: str
    title: str
    folder: str
    file: str
    sha256: str
    shipped: bool
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

    def relative_path(self) -> str:
        return f"{self.folder}/{self.file}"


_NUMBER_MARKERS = (ANSWER_MARKER,)
BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark(
            "gsm8k",
            "GSM8K",
            "gsm8k",
            "test.jsonl",
            "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
            True,
            "numeric",
            True,
            _gsm8k,
            markers=GSM8K_MARKERS,
        ),
        Benchmark(
            "math",
            "MATH",
            "math",
            "test.jsonl",
            "8cc15aa963adb8339396ac09040fb8759bb0d311a532771ae0023f759a51f1df",
            True,
            "latex",
            True,
            _math,
        ),
        Benchmark(
            "svamp",
            "SVAMP",
            "svamp",
            "SVAMP.json",
            "5be77703a6d891ae476d7c082787ad361392aa02453b132516cdd5f4e7934e3e",
            True,
            "numeric",
            True,
            _svamp,
            markers=_NUMBER_MARKERS,
        ),
        Benchmark(
            "simuleq",
            "SimulEq",
            "simuleq",
            "simuleq.json",
            "2fdc97194c641c7c969866a2a25f01e6c6ae36b00391467d33e15a1a7d4e75e1",
            False,
            "numeric",
            True,
            _simuleq,
            markers=_NUMBER_MARKERS,
        ),
        Benchmark(
            "aqua",
            "AQuA",
            "aqua",
            "AQuA.json",
            "de41581881ef95c5588c44ddc701c77fd480839241dd422a0d181262af24520c",
            True,
            "choice",
            False,
            _aqua,
            letters="ABCDE",
        ),
        Benchmark(
            "sat",
            "SAT",
            "sat",
            "sat.json",
            "8e551d655828c4162e3f098c7c8fa560f8ba4bc7b6f24a9caa205f23bcd861d9",
            False,
            "choice",
            False,
            _sat,
            letters="ABCD",
        ),
        Benchmark(
            "mmlu_math",
            "MMLU-math",
            "mmlu-math",
            "mathematics.json",
            "4d07b027d398890e5bc1bbee5ed568fd4b3ba9bb4539d076fe082107d0e9d8bf",
            True,
            "choice",
            False,
            _mmlu_math,
            letters="ABCD",
        ),
    )
}
# the paper's column order
BENCHMARK_NAMES: tuple[str, ...] = tuple(BENCHMARKS)
# the sets in the package (gsm8k, math, svamp, aqua, mmlu_math): what runs without --benchmark-dir
SHIPPED_NAMES: tuple[str, ...] = tuple(n for n, b in BENCHMARKS.items() if b.shipped)


def resolve_benchmark_names(names: str | Sequence[str]) -> list[str]:
    """``"all"``, ``"gsm8k,math"`` or a list of names -> the names, without repeats, in the paper's column order.
    An unknown name is a ValueError that lists the known ones."""
    if isinstance(names, str):
        names = [n for n in names.split(",")]
    wanted = [n.strip().lower().replace("-", "_") for n in names if n.strip()]
    if not wanted:
        raise ValueError(f"no benchmark named; choose from all, {', '.join(BENCHMARK_NAMES)}")
    if "all" in wanted:
        return list(BENCHMARK_NAMES)
    unknown = [n for n in wanted if n not in BENCHMARKS]
    if unknown:
        hints = [
            f"{n!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(n, BENCHMARKS, 1)) else repr(n)
            for n in unknown
        ]
        raise ValueError(f"unknown benchmark {', '.join(hints)}; choose from all, {', '.join(BENCHMARK_NAMES)}")
    return [n for n in BENCHMARK_NAMES if n in wanted]


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


def benchmark_path(benchmark: Benchmark, benchmark_dir: str | Path | None) -> Path:
    """Where ``benchmark``'s file is read: the package for a shipped set, else ``benchmark_dir``. A missing file
    is a FileNotFoundError that names the set, the path looked at and the fix."""
    if benchmark.shipped:
        path = DATA_DIR / benchmark.folder / (benchmark.file + ".gz")
        if not path.is_file():
            raise FileNotFoundError(f"{benchmark.name}: {path} is missing from the package; reinstall del-plugin")
        return path
    needed = f"{benchmark.folder}/{benchmark.file}"
    if benchmark_dir is None:
        raise FileNotFoundError(
            f"{benchmark.name} ({benchmark.title}) is not shipped with del-plugin (no licence could be checked): "
            f"pass --benchmark-dir DIR, a folder holding {needed} (the layout is in docs/evaluation.md)"
        )
    path = Path(benchmark_dir) / needed
    if not path.is_file():
        raise FileNotFoundError(
            f"{benchmark.name} ({benchmark.title}): {path} not found; --benchmark-dir {benchmark_dir} must hold "
            f"{needed} (the layout is in docs/evaluation.md)"
        )
    return path


class MissingBenchmarksError(FileNotFoundError):
    """Sets asked for whose files are not here, all named in one message, with the fix and how to run the sets
    that are (``available``, in the paper's order)."""

    def __init__(self, message: str, missing: Sequence[str], available: Sequence[str]):
        super().__init__(message)
        self.missing = list(missing)
        self.available = list(available)


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def missing_benchmarks(
    names: Sequence[str],
    benchmark_dir: str | Path | None,
    *,
    dir_option: str = "--benchmark-dir",
    run_instead: Callable[[list[str]], str] = lambda names: "--benchmarks " + ",".join(names),
) -> MissingBenchmarksError | None:
    """The error for every set of ``names`` whose file is not here (None when all are), naming each one, the
    fix (``dir_option``, how a caller names the folder of SimulEq and SAT) and ``run_instead(the sets that are
    here)``, how to run those alone: checked before anything is read, so that one attempt names every set."""
    unshipped, damaged, available = [], [], []
    for name in names:
        benchmark = BENCHMARKS[name]
        try:
            benchmark_path(benchmark, benchmark_dir)
        except FileNotFoundError as err:
            (damaged if benchmark.shipped else unshipped).append((benchmark, str(err)))
        else:
            available.append(name)
    if not (unshipped or damaged):
        return None
    parts = [message for _, message in damaged]
    if unshipped:
        sets = _listed([f"{b.name} ({b.title})" for b, _ in unshipped])
        files = _listed([b.relative_path() for b, _ in unshipped])
        if benchmark_dir is None:
            verb = "is" if len(unshipped) == 1 else "are"
            parts.append(
                f"{sets} {verb} not shipped with del-plugin (no licence could be checked): set {dir_option} to a "
                f"folder holding {files} (the layout is in docs/evaluation.md)"
            )
        else:
            looked = _listed([str(Path(benchmark_dir) / b.relative_path()) for b, _ in unshipped])
            parts.append(
                f"{sets}: {looked} not found; {dir_option} must be a folder holding {files} (the layout is in "
                "docs/evaluation.md)"
            )
    if available:
        parts.append(f"or run the sets that are here without them: {run_instead(available)}")
    missing = [b.name for b, _ in damaged + unshipped]
    return MissingBenchmarksError("; ".join(parts), missing, available)


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
