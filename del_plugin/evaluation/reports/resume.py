"""Where a run writes its report: in ``--out`` itself, resuming the report of the same run found there (its
complete sets kept), or, replacing the report of another run (``--overwrite``), in a staging folder until it is
complete (:class:`~.run_report.RunReport`), and what of the resumed report a run keeps."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..errors import OutputError
from .files import STAGING_DIR, load_report

LOG = logging.getLogger(__name__)

__all__ = ["keep_scored_sets", "where_to_write"]


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


def where_to_write(out_dir: Path, resume_key: dict, tasks: Sequence, overwrite: bool) -> tuple[Path, dict | None]:
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


def keep_scored_sets(data: dict, previous: dict) -> list[str]:
    """Put the complete sets of the resumed report ``previous`` into ``data`` (those whose source file is unchanged),
    and its model once loaded; returns their names."""
    kept = []
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
    return kept
