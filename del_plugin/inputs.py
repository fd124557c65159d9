"""What both commands, ``del-eval`` and ``del-check``, say to a user about their inputs and how they end: the one
:class:`UnusableInput`, the one table of exit statuses (each code named once here; ``--help`` of either command
prints its rows, and docs/evaluation.md the rows of ``del-eval``), and the one bounded reader of an input file.

Reading an input file goes through :func:`read_input_bytes` (and :func:`decode_text`, :func:`json_value` for text
and JSON), so that every file a command cannot use is refused the same way: one line naming the file (and the
line, for text that is not UTF-8) and the fix, never a traceback, a ``MemoryError`` or a read that never ends.

This module stands on the ground floor of the package: it imports nothing of ``del_plugin``'s."""

from __future__ import annotations

import argparse
import json
import os
import stat
import textwrap
from pathlib import Path

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PARTLY_CHECKED",
    "EXIT_RUN_FAILED",
    "EXIT_STATUSES",
    "EXIT_STATUS_HELP",
    "EXIT_STATUS_TABLES",
    "EXIT_TERMINATED",
    "EXIT_UNUSABLE_INPUT",
    "EXIT_UNWRITABLE_OUTPUT",
    "EXIT_USAGE",
    "MAX_INPUT_BYTES",
    "ExitStatusHelpFormatter",
    "UnusableInput",
    "decode_text",
    "exit_status_help",
    "is_unicode_text",
    "json_value",
    "read_input_bytes",
    "utf8_error_position",
]

MAX_INPUT_BYTES = 256 << 20  # an input file (predictions, lm-eval samples) is read up to this size

# The exit statuses. 0 and 3 mean the same to both commands; 1 and 2 do not: del-eval's 2 is argparse's usage
# error, while del-check answers a wrong command line with 3 ("nothing checked") and keeps 1 and 2 for its verdict.
EXIT_OK = 0
EXIT_RUN_FAILED = 1  # del-eval
EXIT_USAGE = 2  # del-eval
EXIT_CHECK_FAILED = 1  # del-check
EXIT_PARTLY_CHECKED = 2  # del-check
EXIT_UNUSABLE_INPUT = 3
EXIT_UNWRITABLE_OUTPUT = 4  # del-eval
EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM

# (status, meaning) of del-eval run and score: printed by their --help, and the table of docs/evaluation.md
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
_SIGNALS = (
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
    (EXIT_TERMINATED, "stopped by SIGTERM (kill, a job scheduler)"),
)
# the rows each command's --help prints, by (program, subcommand); a subcommand without rows of its own has its
# program's
EXIT_STATUS_TABLES = {
    ("del-eval", None): EXIT_STATUSES,
    ("del-eval", "lm-eval-tasks"): (
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
        *_SIGNALS,
    ),
    ("del-eval", "compare"): (
        (EXIT_OK, "done: the comparison is written"),
        (EXIT_RUN_FAILED, "stopped on an unexpected error (the traceback says where)"),
        (
            EXIT_USAGE,
            "the command line is wrong (an unknown option, a missing one, --labels not one per report), or asks "
            "for a verdict that cannot be made as given: runs that scored different problems (without "
            "--intersection), the same run twice, --scorer math-verify on reports without its verdicts",
        ),
        (
            EXIT_UNUSABLE_INPUT,
            "a report cannot be used, and nothing was written: missing, unreadable, not UTF-8, not a del-eval "
            "report (a bad record, a problem twice, NaN, a file outside its folder), sets scored on different "
            "files; a missing package",
        ),
        (EXIT_UNWRITABLE_OUTPUT, _OUT_UNWRITABLE),
        *_SIGNALS,
    ),
    # del-check's `warning` line (a key no schema knows) and `note` line (what would stop the run on this machine)
    # leave its status as it is
    ("del-check", None): (
        (EXIT_OK, "all checked and passed"),
        (EXIT_CHECK_FAILED, "a check failed: its line names the key and the fix"),
        (
            EXIT_PARTLY_CHECKED,
            "passed, but something could not be checked here (a hub id with no local folder: see --local)",
        ),
        (
            EXIT_UNUSABLE_INPUT,
            "nothing checked: the command line or the file cannot be used (no such file, a folder, not UTF-8, not "
            "YAML, not a config, YAML past del-check's bounds), with a one-line error",
        ),
    ),
}


def exit_status_help(command: str | None = None, *, program: str = "del-eval") -> str:
    """The "exit status:" epilog of ``program`` (``del-eval``, ``del-check``) and of its subcommand ``command``, as
    :data:`EXIT_STATUS_TABLES` holds it: del-eval's run and score list :data:`EXIT_STATUSES`; lm-eval-tasks and
    compare their own (nothing of a model, a sandbox or a resumed report)."""
    statuses = EXIT_STATUS_TABLES.get((program, command)) or EXIT_STATUS_TABLES[(program, None)]
    return "exit status:\n" + "\n".join(
        textwrap.fill(text, 79, initial_indent=f"  {status:<4} ", subsequent_indent=" " * 7)
        for status, text in statuses
    )


EXIT_STATUS_HELP = exit_status_help()


class ExitStatusHelpFormatter(argparse.HelpFormatter):
    """argparse's help, its description filled as usual, and an :func:`exit_status_help` epilog kept as written
    (one status a row)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("exit status:\n"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class UnusableInput(ValueError):
    """An input a command cannot use (exit status 3): the message names the file or model and the fix."""


def read_input_bytes(
    path: str | Path,
    what: str,
    *,
    limit: int | None = None,
    fix: str = "",
    past_limit: str = "more than del-eval reads; split it, or cut the outputs (an answer is read from an output's end)",
) -> bytes:
    """The bytes of the input file ``path`` (``what`` it is, e.g. "predictions file"), at most ``limit`` of them
    (default :data:`MAX_INPUT_BYTES`, read when called); a pipe is read, up to the limit. A missing file, a folder, a
    device or a file that cannot be read is an :class:`UnusableInput` naming it and ``fix``, what to pass instead
    (for a folder or a device: the file, when not given); a larger one names the limit, then ``past_limit``."""
    path = Path(path)
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        if path.is_dir():
            raise UnusableInput(f"{path} is a folder, not a {what}: {fix or 'give the file'}")
        with open(path, "rb") as handle:
            kind = os.fstat(handle.fileno()).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):  # /dev/zero would be read for ever
                raise UnusableInput(f"{path} is a device, not a {what}: {fix or 'give the file'}")
            raw = handle.read(limit + 1)  # a pipe too, but never more than the limit
    except FileNotFoundError:
        raise UnusableInput(f"{path}: no such {what}" + (f"; {fix}" if fix else "")) from None
    except OSError as err:
        permissions = "; check its permissions" if isinstance(err, PermissionError) else ""
        raise UnusableInput(f"{path}: cannot read this {what} ({err.strerror or err}){permissions}") from None
    if len(raw) > limit:
        raise UnusableInput(f"{path}: this {what} is larger than {limit >> 20} MiB, {past_limit}")
    return raw


def utf8_error_position(raw: bytes, err: UnicodeDecodeError) -> tuple[int, int]:
    """The (line, column) of the byte of ``raw`` that ``err`` (from ``raw.decode("utf-8")``) stopped at, from 1."""
    line = raw.count(b"\n", 0, err.start) + 1
    column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
    return line, column


def decode_text(raw: bytes, path: str | Path, what: str) -> str:
    """``raw`` as UTF-8 text; bytes that are not UTF-8 are an :class:`UnusableInput` naming the file, the line and
    the column (a file saved in another encoding: save it as UTF-8)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line, column = utf8_error_position(raw, err)
        raise UnusableInput(
            f"{path}:{line}: this {what} is not UTF-8 (byte 0x{raw[err.start]:02x} at column {column}); save it as "
            "UTF-8"
        ) from None


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
