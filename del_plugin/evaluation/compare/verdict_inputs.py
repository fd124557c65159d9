"""What ``del-eval compare`` reads, read strictly, so that a report it cannot pair honestly is refused in one line
(exit status 3, or 2 where the fix is on the command line) before anything is written:

* :func:`checked_report`: a report.json's structure (its sets a list of objects with names, each part of the
  type the tables read), no NaN or Infinity anywhere (they would reach comparison.json as tokens JSON lacks);
* :func:`problem_records`: a run's ``generations.jsonl``, from inside the report's folder only, one record per
  problem, ``correct`` a boolean, ids normalised (``5`` and ``"5"`` are the same problem), a scorer's missing
  verdict refused;
* :func:`refuse_unpairable_runs`: the same run given twice (the same folder, or identical generations), and sets
  whose files differ between runs (their sha256: a modified SimulEq against another)."""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from ..errors import UnusableInput, UsageError, decode_text, json_value, read_input_bytes

LOG = logging.getLogger(__name__)

__all__ = ["SCORERS", "checked_report", "problem_records", "refuse_unpairable_runs"]

# the scorer of --scorer -> the field of a generations.jsonl record that holds its verdict
SCORERS = {"paper": "correct", "math-verify": "math_verify_correct"}
_DICT_OR_NULL = ("model", "settings", "macc", "files", "overall")
_SET_PARTS = ("generation", "teacher_forced", "coverage", "source", "math_verify")
# a part's count and the total it is a part of (both whole numbers, the count at most the total)
_COUNTS = {
    "generation": ("correct", "n"),
    "teacher_forced": ("correct", "digits"),
    "coverage": ("problems", "total"),
    "math_verify": ("correct", "n"),
}
# the numbers the side-by-side tables compute with: a number or null
_NUMBERS = {
    "generation": ("n", "correct", "accuracy", "mae", "log_mae", "answered_rate"),
    "teacher_forced": ("digits", "correct", "digit_accuracy", "mean_entropy"),
    "coverage": ("problems", "total"),
    "math_verify": ("n", "correct", "accuracy"),
}


def _kind(value) -> str:
    return "null" if value is None else type(value).__name__


def _non_finite(value, where: str) -> str | None:
    """The path of the first NaN or Infinity in ``value``, else None."""
    if isinstance(value, float) and not math.isfinite(value):
        return where
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")
        if found:
            return found
    return None


def _check_set(entry, where: str, path: str) -> None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise UnusableInput(f"{path}: {where} is not a set of a del-eval report (an object with a name)")
    if not isinstance(entry.get("benchmark"), (str, type(None))):
        raise UnusableInput(f"{path}: {where}.benchmark is a {_kind(entry['benchmark'])}, not a name or null")
    for part in _SET_PARTS:
        value = entry.get(part)
        if not isinstance(value, (dict, type(None))):
            raise UnusableInput(f"{path}: {where}.{part} is a {_kind(value)}, not an object or null")
        for key in _NUMBERS.get(part, ()):
            number = (value or {}).get(key)
            if isinstance(number, bool) or not isinstance(number, (int, float, type(None))):
                raise UnusableInput(f"{path}: {where}.{part}.{key} is a {_kind(number)}, not a number or null")
        if value:
            _check_counts(value, f"{where}.{part}", path, *_COUNTS.get(part, ()))
    coverage = entry.get("coverage")
    if coverage and not isinstance(coverage.get("ids_sha256"), str):
        raise UnusableInput(f"{path}: {where}.coverage.ids_sha256 is a {_kind(coverage.get('ids_sha256'))}, not a hash")


def _check_counts(part: dict, where: str, path: str, count: str | None = None, total: str | None = None) -> None:
    """A part's count of ``count`` (right answers, problems scored) among ``total`` (problems, digits): whole
    numbers, at most ``total``; its ``accuracy`` a share. A count outside these is no tally a run made."""
    if count is None:
        return
    whole = [key for key in (count, total) if not isinstance(part.get(key), int) or part[key] < 0]
    if whole:
        raise UnusableInput(f"{path}: {where}.{whole[0]} is {part.get(whole[0])!r}, not a count of a del-eval run")
    if part[count] > part[total]:
        raise UnusableInput(f"{path}: {where}.{count} ({part[count]}) is more than {where}.{total} ({part[total]})")
    accuracy = part.get("accuracy")
    if accuracy is not None and not 0 <= accuracy <= 1:
        raise UnusableInput(f"{path}: {where}.accuracy ({accuracy}) is not a share between 0 and 1")


def _check_macc(macc, path: str) -> None:
    """The fields of ``macc`` (:func:`..reports.summary.macc`) the side-by-side tables read."""
    if not macc:
        return
    sets, value, label = macc.get("sets"), macc.get("value"), macc.get("label")
    if not isinstance(sets, list) or not all(isinstance(name, str) for name in sets):
        raise UnusableInput(f"{path}: macc.sets is a {_kind(sets)}, not a list of set names")
    if isinstance(value, bool) or not isinstance(value, (int, float, type(None))):
        raise UnusableInput(f"{path}: macc.value is a {_kind(value)}, not a number or null")
    if not isinstance(label, (str, type(None))):
        raise UnusableInput(f"{path}: macc.label is a {_kind(label)}, not a string")


def checked_report(report: dict) -> dict:
    """``report`` (as :func:`..reports.files.load_report` read it) when compare can use it; else an
    :class:`UnusableInput` naming the file and the key. Adds the empty ``overall`` an old report may lack."""
    path = report.get("_path", "report")
    bad = _non_finite({k: v for k, v in report.items() if k != "_path"}, "report")
    if bad:
        raise UnusableInput(f"{path}: {bad} is NaN or Infinity, which del-eval never writes; not a del-eval report")
    if not isinstance(report.get("name"), (str, type(None))):
        raise UnusableInput(f"{path}: its name is a {_kind(report['name'])}, not a string")
    for key in _DICT_OR_NULL:
        if not isinstance(report.get(key), (dict, type(None))):
            raise UnusableInput(f"{path}: its {key!r} is a {_kind(report[key])}, not an object")
    _check_macc(report.get("macc"), path)
    if not isinstance(report.get("datasets"), list):
        raise UnusableInput(f"{path}: it has no list of sets ('datasets'); not a report del-eval wrote")
    for i, entry in enumerate(report["datasets"]):
        _check_set(entry, f"datasets[{i}]", path)
    for key in ("generation", "teacher_forced"):
        if not isinstance((report.get("overall") or {}).get(key), (dict, type(None))):
            raise UnusableInput(f"{path}: overall.{key} is not an object or null")
    report["overall"] = report.get("overall") or {"generation": None, "teacher_forced": None}
    return report


def generations_path(report: dict) -> Path | None:
    """The run's generations.jsonl: ``files.generations`` of its report, which must stay inside its folder."""
    path = report.get("_path")
    if not path:
        return None
    folder = Path(path).parent
    name = (report.get("files") or {}).get("generations") or "generations.jsonl"
    if not isinstance(name, str) or Path(name).is_absolute() or not _inside(folder / name, folder):
        raise UnusableInput(
            f"{path}: files.generations ({name!r}) points outside the report's folder; del-eval reads a run's "
            "generations.jsonl from beside its report.json only"
        )
    return folder / name


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def _problem_id(value, where: str):
    """A problem id, normalised: an integer and its decimal string are the same id."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise UnusableInput(f"{where}: its id is a {_kind(value)}, not an integer or a string")


def _verdict(record: dict, scorer: str, where: str) -> bool:
    field = SCORERS[scorer]
    if field not in record or (scorer != "paper" and record[field] is None):
        why = "was scored without math-verify installed" if field in record else "was written by an older del-eval"
        raise UsageError(
            f"{where}: its problems carry no {scorer} verdict ({field!r}): the report {why}; re-score it with the "
            "current del-eval (run the same del-eval run or score command again, with --overwrite, math-verify "
            "installed), or compare with --scorer paper"
        )
    if not isinstance(record[field], bool):
        raise UnusableInput(f"{where}: {field!r} is {record[field]!r}, not true or false; not a del-eval record")
    return record[field]


def _lines(path: Path) -> list[tuple[int, object]]:
    """The (line number, JSON value) of each line of ``path``; a cut last line (a stopped run) is left out."""
    text = decode_text(read_input_bytes(path, "generations file"), path, "generations file")
    lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip()]
    out = []
    for k, (number, line) in enumerate(lines):
        try:
            out.append((number, json_value(line)))
        except ValueError as err:
            if k < len(lines) - 1:
                raise UnusableInput(f"{path}:{number}: {err}; this file was not written by del-eval") from None
            LOG.warning("%s: its last line was cut by a stopped run; left out", path)
    return out


def problem_records(report: dict, scorer: str) -> tuple[dict[str, dict[str, tuple[bool, dict]]], Path]:
    """``{set name: {problem id: (right under scorer, record)}}`` of one run, and its generations file
    (FileNotFoundError naming it when missing)."""
    path = generations_path(report)
    if path is None or not path.is_file():
        raise FileNotFoundError(str(path or report.get("name")))
    out: dict[str, dict[str, tuple[bool, dict]]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for number, record in _lines(path):
        where = f"{path}:{number}"
        if not isinstance(record, dict) or not isinstance(record.get("dataset"), str):
            raise UnusableInput(f"{where}: not a record of del-eval (an object with a 'dataset' name and an 'id')")
        key = (record["dataset"], _problem_id(record.get("id"), where))
        if key in first_line:
            raise UnusableInput(
                f"{where}: problem {key[1]} of {key[0]} again (first on line {first_line[key]}); a run scores a "
                "problem once: remove the repeated record, or score the run again"
            )
        first_line[key] = number
        out.setdefault(key[0], {})[key[1]] = (_verdict(record, scorer, where), record)
    return out, path


def refuse_unpairable_runs(runs: Sequence[dict], paths: Sequence[Path]) -> None:
    """The same run twice (one folder, or identical generations files: UsageError) and a set whose file differs
    between runs (its sha256, or a sha256 some runs' reports lack: UnusableInput) cannot be paired."""
    seen: dict[str, str] = {}
    for report, path in zip(runs, paths):
        raw = path.read_bytes()
        folder = str(path.parent.resolve())
        for key in (folder, hashlib.sha256(raw).hexdigest()) if raw.strip() else (folder,):  # empty: nothing to pair
            if key in seen:
                raise UsageError(
                    f"{report.get('_path')}: the same run as {seen[key]} (the same folder or identical "
                    "generations): each run counts once; give each seed's own run"
                )
            seen[key] = str(report.get("_path"))
    files: dict[str, tuple[str, str]] = {}
    unknown: dict[str, str] = {}  # set name: a run whose report does not say which file it scored
    for report in runs:
        for entry in report["datasets"]:
            sha = (entry.get("source") or {}).get("sha256")
            name = entry["name"]
            if not isinstance(sha, str):
                unknown.setdefault(name, str(report.get("_path")))
                continue
            if name in files and files[name][0] != sha:
                raise UnusableInput(
                    f"{report.get('_path')}: its {name} file (sha256 {sha[:12]}) is not the one of "
                    f"{files[name][1]} (sha256 {files[name][0][:12]}): runs scored on different files cannot be "
                    "paired; score both on the same file"
                )
            files.setdefault(name, (sha, str(report.get("_path"))))
    for name in unknown.keys() & files.keys():  # one side unchecked would make the check above optional
        raise UnusableInput(
            f"{unknown[name]}: its {name} entry has no source.sha256, while {files[name][1]}'s does: it cannot be "
            "told whether both scored the same file; score it again with this del-eval"
        )
