"""Killing a del-eval or demo process at a chosen point and reading what it left, as a user's next command would
(tests/evaluation/test_eval_lifecycle.py, tests/experiments/test_paper_worker.py).

The action runs in a child forked from the test's process, so that the child starts with the libraries already
imported; a trigger (a wrapper around the write or rename it stops at) is the only thing replaced in the child."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path


def stopped_progress_monitor() -> Iterator[None]:
    """tqdm's monitor thread takes tqdm's lock now and then; a child forked at that instant would wait for it for
    ever. Stopped (and not restarted) while the caller's tests fork: a module fixture's body."""
    from tqdm import tqdm

    interval, tqdm.monitor_interval = tqdm.monitor_interval, 0
    if tqdm.monitor is not None:
        tqdm.monitor.exit()
        tqdm.monitor = None
    yield
    tqdm.monitor_interval = interval


def forked(action, stderr: Path | None = None, first=None) -> int:
    """Run ``action()`` in a forked child (its stdout dropped, its stderr to ``stderr``); the child's wait status.
    One torch thread in the child: the parent's thread pool does not survive a fork. ``first()`` runs before the
    child starts any thread."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) if stderr else null, 2)
            sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)  # not pytest's capture
            if first is not None:
                first()
            import faulthandler

            import torch

            faulthandler.dump_traceback_later(300, exit=True)  # a child that hangs fails the test, not the suite
            os.environ["OMP_NUM_THREADS"] = "1"  # the demo's worker sets its threads from it
            torch.set_num_threads(1)
            code = action()
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 98)
    _, status = os.waitpid(pid, 0)
    return status


def exit_code(status: int) -> int | str:
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else f"signal {os.WTERMSIG(status)}"


def kill_self() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at_rename(number: int | None = None, target: str | None = None):
    """A trigger: SIGKILL just before the ``number``-th rename of this process (or the first onto ``target``), its
    temporary file written and not yet renamed."""

    def arm() -> None:
        real, calls = os.replace, [0]

        def replace(src, dst, *args, **kwargs):
            calls[0] += 1
            if calls[0] == number or (target is not None and Path(dst).name == target):
                kill_self()
            return real(src, dst, *args, **kwargs)

        os.replace = replace

    return arm


def kill_after_generation(number: int, torn: bool = False):
    """A trigger: SIGKILL after the ``number``-th generation line of this process is written, or (``torn``) half-way
    through writing it, as when the kill lands between two writes of a long line."""

    def arm() -> None:
        from del_plugin.evaluation.output import JsonlAppender

        real, count = JsonlAppender.write, [0]

        def write(self, record):
            count[0] += 1
            if count[0] == number and torn:
                line = (json.dumps(record) + "\n").encode()
                os.write(self._fd, line[: len(line) // 2])
                kill_self()
            real(self, record)
            if count[0] == number:
                kill_self()

        JsonlAppender.write = write

    return arm


def note_generations(path: Path):
    """Not a trigger: each generation line this process writes, its set's name noted in ``path``."""

    def arm() -> None:
        from del_plugin.evaluation.output import JsonlAppender

        real = JsonlAppender.write

        def write(self, record):
            with open(path, "a") as handle:
                handle.write(record["dataset"] + "\n")
            real(self, record)

        JsonlAppender.write = write

    return arm


def lines_of(path: Path) -> list[str]:
    """The lines of ``path``, a cut last one included."""
    return [line for line in path.read_text().split("\n") if line] if path.is_file() else []


def whole_records(path: Path) -> list[dict]:
    """The records of a generations file, checking that every line but a cut last one is JSON."""
    lines = lines_of(path)
    records = []
    for i, line in enumerate(lines):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            assert i == len(lines) - 1, f"{path}:{i + 1} is not JSON"
    return records
