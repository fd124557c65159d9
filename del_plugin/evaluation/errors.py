"""del-eval's exit statuses, defined here once (``del-eval --help`` and docs/evaluation.md print this table), and the
errors a user can fix: an input del-eval cannot use (:class:`UnusableInput`, and the FileNotFoundError / ValueError
the readers raise) and an output folder it cannot write (:class:`OutputError`).

Reading an input file goes through :func:`read_input_bytes` and :func:`decode_text`, so that every unreadable file
is refused the same way: one line naming the file (and the line, for text that is not UTF-8) and the fix."""

from __future__ import annotations

import json
import os
import stat
import textwrap
from pathlib import Path

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RUN_FAILED",
    "EXIT_STATUSES",
    "EXIT_STATUS_HELP",
    "EXIT_TERMINATED",
    "EXIT_UNUSABLE_INPUT",
    "EXIT_UNWRITABLE_OUTPUT",
    "EXIT_USAGE",
    "MAX_INPUT_BYTES",
    "OutputError",
    "exit_status_help",
    "UnusableInput",
    "UsageError",
    "decode_text",
    "is_unicode_text",
    "json_value",
    "read_input_bytes",
    "utf8_bytes",
]

MAX_INPUT_BYTES = 256 << 20  # an input file (predictions, lm-eval samples) is read up to this size
EXIT_OK = 0
EXIT_RUN_FAILED = 1
EXIT_USAGE = 2
EXIT_UNUSABLE_INPUT = 3
EXIT_UNWRITABLE_OUTPUT = 4
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM

# (status, meaning): printed by --help, and the table of docs/evaluation.md
EXIT_STATUSES = (
    (EXIT_OK, "done: the report is complete"),
    (
        EXIT_RUN_FAILED,
        "the evaluation stopped on an unexpected error (the traceback says where); the partial report is saved and "
        "the same command resumes it",
    ),
    (
        EXIT_USAGE,
        "the command line is wrong (an unknown option, a missing one, settings that ask for nothing such as "
        "--limit 0), or asks for what cannot be done here as given (--program-of-thought where no sandbox works: "
        "see --unsandboxed-programs; or for a set the paper asks as chain-of-thought)",
    ),
    (
        EXIT_UNUSABLE_INPUT,
        "an input cannot be used, and nothing was evaluated: a file or model that is missing or unreadable, text "
        "that is not UTF-8, bad lines, a SimulEq or SAT file that is not the authors' (without --allow-modified), a "
        "missing package",
    ),
    (
        EXIT_UNWRITABLE_OUTPUT,
        "--out cannot be written: a file, under a file, a folder you cannot write, a folder holding another run's "
        "report (without --overwrite), a full disk; a report already there is kept",
    ),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C); the partial report is saved and the same command resumes it"),
    (EXIT_TERMINATED, "stopped by SIGTERM (kill, a job scheduler); the same as 130"),
)
# lm-eval-tasks and compare write their files in one go from files already on disk: no model, no program, no
# partial report to resume
_OUT_UNWRITABLE = "--out cannot be written: a file, under a file, a folder you cannot write, a full disk"
_WRITER_STATUSES = {
    "lm-eval-tasks": (
        (EXIT_OK, "done: the tasks are written"),
        (EXIT_RUN_FAILED, "stopped on an unexpected error (the traceback says where)"),
        (EXIT_USAGE, "the command line is wrong (an unknown option, a missing one)"),
        (
            EXIT_UNUSABLE_INPUT,
            "a set cannot be used, and nothing was written: a set that is missing (SimulEq and SAT are read from "
            "--benchmark-dir) or unreadable, a SimulEq or SAT file that is not the authors' (without "
            "--allow-modified), a missing package",
        ),
        (EXIT_UNWRITABLE_OUTPUT, _OUT_UNWRITABLE),
        (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
        (EXIT_TERMINATED, "stopped by SIGTERM (kill, a job scheduler)"),
    ),
    "compare": (
        (EXIT_OK, "done: the comparison is written"),
        (EXIT_RUN_FAILED, "stopped on an unexpected error (the traceback says where)"),
        (EXIT_USAGE, "the command line is wrong (an unknown option, a missing one, --labels not one per report)"),
        (
            EXIT_UNUSABLE_INPUT,
            "a report cannot be used, and nothing was written: missing, unreadable, not UTF-8, not a del-eval "
            "report; a missing package",
        ),
        (EXIT_UNWRITABLE_OUTPUT, _OUT_UNWRITABLE),
        (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
        (EXIT_TERMINATED, "stopped by SIGTERM (kill, a job scheduler)"),
    ),
}


def exit_status_help(command: str | None = None) -> str:
    """The "exit status:" epilog of ``del-eval`` and of its ``command``: run and score (:data:`EXIT_STATUSES`),
    lm-eval-tasks and compare (their own: nothing of a model, a sandbox or a resumed report)."""
    statuses = _WRITER_STATUSES.get(command, EXIT_STATUSES)
    return "exit status:\n" + "\n".join(
        textwrap.fill(text, 79, initial_indent=f"  {status:<4} ", subsequent_indent=" " * 7)
        for status, text in statuses
    )


EXIT_STATUS_HELP = exit_status_help()


class UsageError(ValueError):
    """A command line that asks for nothing del-eval can do, or for two things that exclude each other (exit
    status 2, as argparse's own errors)."""


class UnusableInput(ValueError):
    """An input del-eval cannot use (exit status 3): the message names the file or model and the fix."""


class OutputError(OSError):
    """The output folder cannot be used or written (exit status 4): the message names the path and the fix."""


def read_input_bytes(path: str | Path, what: str) -> bytes:
    """The bytes of the input file ``path`` (``what`` it is, e.g. "predictions file"); a missing file, a folder or a
    file that cannot be read is an :class:`UnusableInput` naming it."""
    path = Path(path)
    try:
        if path.is_dir():
            raise UnusableInput(f"{path} is a folder, not a {what}: give the file")
        with open(path, "rb") as handle:
            kind = os.fstat(handle.fileno()).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):  # /dev/zero would be read for ever
                raise UnusableInput(f"{path} is a device, not a {what}: give the file")
            raw = handle.read(MAX_INPUT_BYTES + 1)  # a pipe too, but never more than the limit
    except FileNotFoundError:
        raise UnusableInput(f"{path}: no such {what}") from None
    except OSError as err:
        raise UnusableInput(f"{path}: cannot read this {what} ({err.strerror or err})") from None
    if len(raw) > MAX_INPUT_BYTES:
        raise UnusableInput(
            f"{path}: this {what} is larger than {MAX_INPUT_BYTES >> 20} MiB, more than del-eval reads; split it, "
            "or cut the outputs (an answer is read from an output's end)"
        )
    return raw


def json_value(text: str | bytes):
    """``json.loads(text)``, every way a hostile text makes it fail a ValueError saying why in a few words (for
    the caller to prefix with the file and line): not JSON, nested deeper than Python's recursion limit, an
    integer of more digits than Python converts."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}, column {err.colno}" if err.doc.count("\n") else f"column {err.colno}"
        raise ValueError(f"not valid JSON ({err.msg} at {where})") from None
    except RecursionError:
        raise ValueError("JSON nested too deep to read (more than a few hundred levels)") from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        raise ValueError(f"not usable JSON ({str(err).split(';')[0]})") from None


def is_unicode_text(text: str) -> bool:
    """Whether ``text`` is Unicode text: no lone surrogate (which a JSON ``\\ud800`` escape makes), so that it
    can be written in UTF-8."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def utf8_bytes(text: str) -> bytes:
    """``text`` in UTF-8 for a report file. A name or path that is not UTF-8 (a file name's bytes, which Python
    reads as surrogate escapes) shows U+FFFD for each such byte, and so does a lone surrogate."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "replace")
        return raw.decode("utf-8", "replace").encode("utf-8")


def decode_text(raw: bytes, path: str | Path, what: str) -> str:
    """``raw`` as UTF-8 text; bytes that are not UTF-8 are an :class:`UnusableInput` naming the file, the line and
    the column (a file saved in another encoding: save it as UTF-8)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise UnusableInput(
            f"{path}:{line}: this {what} is not UTF-8 (byte 0x{raw[err.start]:02x} at column {column}); save it as "
            "UTF-8"
        ) from None
