"""del-eval's errors a user can fix: an input del-eval cannot use (:class:`UnusableInput`, and the FileNotFoundError
/ ValueError the readers raise), a command line that asks for nothing (:class:`UsageError`) and an output folder it
cannot write (:class:`OutputError`).

The exit statuses, :class:`UnusableInput` and the bounded reader of an input file (:func:`read_input_bytes`,
:func:`decode_text`, :func:`json_value`) are del-check's too: they live in :mod:`del_plugin.inputs`, and are
imported here for del-eval's modules."""

from __future__ import annotations

from ..inputs import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_STATUS_HELP,
    EXIT_STATUSES,
    EXIT_TERMINATED,
    EXIT_UNUSABLE_INPUT,
    EXIT_UNWRITABLE_OUTPUT,
    EXIT_USAGE,
    UnusableInput,
    decode_text,
    exit_status_help,
    is_unicode_text,
    json_value,
    read_input_bytes,
)

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


class UsageError(ValueError):
    """A command line that asks for nothing del-eval can do, or for two things that exclude each other (exit
    status 2, as argparse's own errors)."""


class OutputError(OSError):
    """The output folder cannot be used or written (exit status 4): the message names the path and the fix."""


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
