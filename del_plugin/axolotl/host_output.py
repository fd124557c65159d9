"""What the host libraries log and warn while ``del-check`` runs: held back unless ``--verbose``, with Axolotl's own
validation warnings recorded for the card checks."""

from __future__ import annotations

import contextlib
import logging
import warnings


class HostOutput(contextlib.AbstractContextManager):
    """Holds back what the host libraries log and warn (torch's deprecations, bitsandbytes' offline kernel notice,
    Axolotl's validation notes) while del-check runs, unless ``verbose``; keeps the plugin's own warnings, and
    records Axolotl's validation warnings for the card checks either way. The plugin's "checked again when the
    trainer is built" is shown with ``verbose`` only: the report says what was not checked. Every handler's
    ``handle`` decides through :meth:`keep`, so handlers that a library adds while the check runs are held too."""

    def __init__(self, verbose: bool):
        from .logs import LOGGER_NAME

        self.verbose, self.ours = verbose, LOGGER_NAME
        self.held: list[str] = []
        self.axolotl_warnings: list[str] = []

    def keep(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "_del_check_seen", False):  # once per record, whichever handlers it reaches
            record._del_check_seen = True
            message = record.getMessage()
            if record.name.startswith("axolotl.") and record.levelno >= logging.WARNING:
                self.axolotl_warnings.append(message)
            if not record.name.startswith(self.ours) and not self.verbose:
                self.held.append(f"{record.name}: {message}")
        if record.name.startswith(self.ours):
            if "it is checked again when the trainer is built" in record.getMessage():
                return self.verbose  # why a source could not be read; the report says what was not checked
            return record.levelno >= logging.WARNING or self.verbose
        return self.verbose

    def __enter__(self):
        import torch  # noqa: F401 - torch's own log handler exists from here on

        host, self._handle = self, logging.Handler.handle

        def handle(handler: logging.Handler, record: logging.LogRecord):
            return host._handle(handler, record) if host.keep(record) else False

        logging.Handler.handle = handle
        self._warnings = warnings.catch_warnings(record=not self.verbose)
        self._warned = self._warnings.__enter__()
        return self

    def __exit__(self, *exc):
        logging.Handler.handle = self._handle
        self._warnings.__exit__(*exc)
        self.held += [f"{w.category.__name__}: {w.message}" for w in self._warned or []]
        return False
