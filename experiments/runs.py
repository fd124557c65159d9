"""The bookkeeping of a run folder, shared by the sweep (``python -m experiments sweep``) and the paper's regime
(``python -m experiments paper``): a run's setting (``criterion:alpha``), its ``run.json`` record and the state read
from it, the data files every run of a folder shares, and copies of the results into a published folder.

A run keeps ``RUN/run.json``: the spec it was planned with (what its training depends on), its state (``new``,
``trained``, ``done``), then its timing and metrics. Nothing here trains, evaluates or imports torch.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "RUN_FILE",
    "Setting",
    "SweepMismatch",
    "parse_setting",
    "publish_files",
    "read_record",
    "record_done",
    "replace_atomically",
    "run_state",
    "sha256_of",
    "write_once",
    "write_record",
]

RUN_FILE = "run.json"


class SweepMismatch(RuntimeError):
    """A run folder holds a run made with other settings."""


@dataclass(frozen=True)
class Setting:
    criterion: str
    alpha: float

    @property
    def key(self) -> str:
        """``del:0.1``: the CLI spelling, the table label and (with ':' as '-') the folder name."""
        return f"{self.criterion}:{self.alpha:g}"

    @property
    def folder(self) -> str:
        return self.key.replace(":", "-a")

    def as_dict(self) -> dict:
        return {"label": self.key, "criterion": self.criterion, "alpha": self.alpha}


def parse_setting(text: str) -> Setting:
    criterion, sep, alpha = text.partition(":")
    from del_plugin.core.criteria import DIGIT_CRITERIA

    if not sep or criterion not in DIGIT_CRITERIA:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected CRITERION:ALPHA with CRITERION one of {', '.join(DIGIT_CRITERIA)} (e.g. del:0.3)"
        )
    try:
        value = float(alpha)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: {alpha!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: del_alpha must be >= 0")
    return Setting(criterion, value)


def run_state(run_dir: Path, spec: dict, eval_spec: dict | None = None) -> str:
    """``done`` (trained and evaluated), ``trained`` (trained, evaluation missing, unfinished or made with another
    ``eval_spec``) or ``new`` (nothing usable: absent, or stopped during training). What a trained run leaves is the
    record's ``artefact`` (a path in ``run_dir``; a LoRA adapter's ``adapter/adapter_config.json`` by default).
    Raises :class:`SweepMismatch` when ``run_dir`` holds a run with another spec."""
    path = run_dir / RUN_FILE
    if not path.is_file():
        return "new"
    record = json.loads(path.read_text(encoding="utf-8"))
    if record.get("spec") != spec:
        old = record.get("spec") or {}
        changed = sorted(k for k in old.keys() | spec.keys() if old.get(k) != spec.get(k))
        differences = ", ".join(f"{k}: {old.get(k)!r} -> {spec.get(k)!r}" for k in changed)
        raise SweepMismatch(
            f"{run_dir} holds a run made with other settings ({differences}); give another --out, or "
            "delete that folder to redo it"
        )
    state = record.get("state")
    evaluated = (run_dir / "eval" / "report.json").is_file() and (
        eval_spec is None or record.get("evaluated_with") == eval_spec
    )
    if state == "done" and evaluated:
        return "done"
    artefact = record.get("artefact", "adapter/adapter_config.json")
    if state in ("done", "trained") and (spec.get("train") is None or (run_dir / artefact).is_file()):
        return "trained"
    return "new"


def write_record(run_dir: Path, record: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (RUN_FILE + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run_dir / RUN_FILE)


def record_done(run_dir: Path, timing: dict, metrics: dict, **extra) -> None:
    """Marks the run in ``run_dir`` evaluated: its timing, its metrics, where its generations are, when."""
    write_record(
        run_dir,
        read_record(run_dir)
        | {
            "state": "done",
            "timing": timing,
            "metrics": metrics,
            "generations": "eval/generations.jsonl",
            "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        | extra,
    )


def read_record(run_dir: Path) -> dict:
    return json.loads((run_dir / RUN_FILE).read_text(encoding="utf-8"))


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_once(path: Path, write) -> Path:
    """``write(tmp)``, then move it to ``path``; if ``path`` exists it must hold the same bytes (the runs of a
    sweep folder all use one data set; a sweep running there may be reading it)."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    write(tmp)
    if path.is_file():
        same = sha256_of(path) == sha256_of(tmp)
        tmp.unlink()
        if not same:
            raise SweepMismatch(
                f"{path} holds other problems than these settings generate (another --steps, "
                "--micro-batch-size, --eval-size or --data-seed?); give another --out"
            )
        return path
    os.replace(tmp, path)
    return path


def replace_atomically(path: Path, write) -> None:
    """``write(tmp)``, then move it to ``path``: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    write(tmp)
    os.replace(tmp, path)


def publish_files(files: list[Path], folder: Path) -> list[Path]:
    """Copy ``files`` into ``folder`` (made if missing, same names); the copies' paths."""
    folder.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, folder / path.name)
    return [folder / path.name for path in files]
