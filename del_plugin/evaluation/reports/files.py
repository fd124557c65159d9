"""A report folder's files by name, and reading its ``report.json`` (schema ``del-eval/2``, see
``docs/evaluation.md``) back: what :mod:`.run_report` writes, :mod:`.resume` resumes and ``del-eval compare``
puts side by side."""

from __future__ import annotations

from pathlib import Path

from ..errors import decode_text, json_value, read_input_bytes

__all__ = [
    "FOREST_PLOT",
    "GENERATIONS_FILE",
    "PLOT_FILES",
    "READABLE_SCHEMAS",
    "SCHEMA",
    "STAGING_DIR",
    "load_report",
]

SCHEMA = "del-eval/2"
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
