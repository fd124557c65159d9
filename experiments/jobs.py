"""Runs of a sweep, one at a time, each in a child process of its own: progress lines with the time left, a failed
run reported and the next one started, an interrupted one stopping them all. Shared by ``python -m experiments
sweep`` and ``python -m experiments paper``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .runs import read_record

__all__ = ["Job", "hms", "run_jobs"]


@dataclass(frozen=True)
class Job:
    """One run for :func:`run_jobs`: ``argv`` trains and/or evaluates the run in ``run_dir`` (its ``run.json``
    holds the metrics afterwards)."""

    name: str
    run_dir: Path
    argv: list[str]
    action: str  # what the progress line says it does
    trains: bool  # counted in the time-left estimate
    goal: str = "done"  # the state the run is in when the job succeeded


def hms(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 60} min {seconds % 60:02d} s"


def _stop_with_parent(parent: int):
    """What a job's child runs before its program (Linux): a SIGTERM when ``parent`` dies, so that a sweep killed
    hard (SIGKILL) does not leave its run going on unseen beside the next invocation's; the run then writes its
    partial report and stops, and the next invocation resumes it."""
    if not sys.platform.startswith("linux"):
        return None

    def arm() -> None:
        import ctypes
        import signal

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def run_jobs(jobs: list[Job], env: dict, after_each=None) -> list[str]:
    """Runs each job in a child process of its own, one after the other, printing progress and an estimate of the
    time left; a failed job is reported and the next one runs, an interrupted one stops them all. ``after_each()``
    runs after every successful job (e.g. to rewrite the tables). Returns the names of the failed jobs."""
    started = time.perf_counter()
    durations: list[float] = []
    failed: list[str] = []
    for k, job in enumerate(jobs, 1):
        eta = ""
        trainings = sum(1 for j in jobs[k - 1 :] if j.trains)
        if durations and trainings:
            eta = f"; about {hms(sum(durations) / len(durations) * trainings)} left"
        print(
            f"\n##### [{k}/{len(jobs)}] {job.name}: {job.action} "
            f"(elapsed {hms(time.perf_counter() - started)}{eta}) #####",
            flush=True,
        )
        run_started = time.perf_counter()
        rc = subprocess.call(job.argv, env=env, preexec_fn=_stop_with_parent(os.getpid()))
        elapsed = time.perf_counter() - run_started
        if rc != 0:
            failed.append(job.name)
            print(f"##### {job.name} FAILED (exit status {rc}) after {hms(elapsed)}; going on #####", flush=True)
            if rc in (-2, 130, 143, -15):  # interrupted: stop the sweep too
                break
            continue
        if job.trains:
            durations.append(elapsed)
        metrics = read_record(job.run_dir).get("metrics") or {}
        print(
            f"##### {job.name} {job.goal} in {hms(elapsed)}"
            + (": " + ", ".join(f"{key} {value:.4g}" for key, value in metrics.items() if value is not None))
            * bool(metrics and job.goal == "done")
            + " #####",
            flush=True,
        )
        if after_each is not None:
            after_each()
    return failed
