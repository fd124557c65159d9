"""The light registry of the paper's seven sets: their names, files and checksums, where each file is found, and the
generation length a run of them uses by default. Config validation reads it without loading the evaluation's
runner, generation or sandbox; :mod:`.sets` builds each set's reader and scorer on these entries.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "BENCHMARK_NAMES",
    "DATA_DIR",
    "MAX_NEW_TOKENS",
    "SET_FILES",
    "SHIPPED_NAMES",
    "MissingBenchmarksError",
    "SetFile",
    "benchmark_path",
    "missing_benchmarks",
    "resolve_benchmark_names",
]

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
MAX_NEW_TOKENS = 256  # the longest generation by default, in every way of scoring (the paper allows 1,500)


@dataclass(frozen=True)
class SetFile:
    """One of the paper's sets as a file: its ``name`` (``gsm8k``), ``title`` in tables (``GSM8K``), its file under
    ``folder/`` and that file's sha256 (the authors' copy), and whether it is ``shipped`` in the package."""

    name: str
    title: str
    folder: str
    file: str
    sha256: str
    shipped: bool

    def relative_path(self) -> str:
        return f"{self.folder}/{self.file}"


# in the paper's column order
SET_FILES: dict[str, SetFile] = {
    s.name: s
    for s in (
        SetFile(
            "gsm8k",
            "GSM8K",
            "gsm8k",
            "test.jsonl",
            "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
            True,
        ),
        SetFile(
            "math",
            "MATH",
            "math",
            "test.jsonl",
            "8cc15aa963adb8339396ac09040fb8759bb0d311a532771ae0023f759a51f1df",
            True,
        ),
        SetFile(
            "svamp",
            "SVAMP",
            "svamp",
            "SVAMP.json",
            "5be77703a6d891ae476d7c082787ad361392aa02453b132516cdd5f4e7934e3e",
            True,
        ),
        SetFile(
            "simuleq",
            "SimulEq",
            "simuleq",
            "simuleq.json",
            "2fdc97194c641c7c969866a2a25f01e6c6ae36b00391467d33e15a1a7d4e75e1",
            False,
        ),
        SetFile(
            "aqua",
            "AQuA",
            "aqua",
            "AQuA.json",
            "de41581881ef95c5588c44ddc701c77fd480839241dd422a0d181262af24520c",
            True,
        ),
        SetFile(
            "sat", "SAT", "sat", "sat.json", "8e551d655828c4162e3f098c7c8fa560f8ba4bc7b6f24a9caa205f23bcd861d9", False
        ),
        SetFile(
            "mmlu_math",
            "MMLU-math",
            "mmlu-math",
            "mathematics.json",
            "4d07b027d398890e5bc1bbee5ed568fd4b3ba9bb4539d076fe082107d0e9d8bf",
            True,
        ),
    )
}
BENCHMARK_NAMES: tuple[str, ...] = tuple(SET_FILES)
# the sets in the package (gsm8k, math, svamp, aqua, mmlu_math): what runs without --benchmark-dir
SHIPPED_NAMES: tuple[str, ...] = tuple(n for n, s in SET_FILES.items() if s.shipped)


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
    unknown = [n for n in wanted if n not in SET_FILES]
    if unknown:
        hints = [
            f"{n!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(n, SET_FILES, 1)) else repr(n)
            for n in unknown
        ]
        raise ValueError(f"unknown benchmark {', '.join(hints)}; choose from all, {', '.join(BENCHMARK_NAMES)}")
    return [n for n in BENCHMARK_NAMES if n in wanted]


def benchmark_path(benchmark: SetFile, benchmark_dir: str | Path | None) -> Path:
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
        benchmark = SET_FILES[name]
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
