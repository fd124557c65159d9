"""The host synchronisations of a training step, reported by CUDA itself and told apart by whose code made them.

Under ``torch.cuda.set_sync_debug_mode("warn")`` every operation that makes the host wait for the GPU (a value
read with ``.item()``, an output whose size depends on the data, a blocking copy) raises a warning. The counter
takes each one while the Python stack that made it is still live (torch hands a C++ warning to Python before the
call returns) and charges it to DEL when the innermost frame outside torch, Triton, the standard library and
generated code lies in the ``del_plugin`` package: by where the code lives, not by any of DEL's names, so a renamed
or moved function of DEL's is still counted as DEL's. Autograd reports the synchronisations of the backward pass
when ``backward()`` returns, with the trainer's stack: they count for the step, not for DEL, and the comparison of
a DEL run's steps with the run without DEL covers them.

Two checks keep a count of 0 from meaning "nothing was measured": :meth:`SyncCounter.self_check` makes known
synchronisations before the run, one from a frame of the ``del_plugin`` package and one from outside it, and
raises unless each is counted once and charged to its side (a torch that stops reporting, or a package that moved,
fails there); and :meth:`SyncCounter.per_step` raises when the counted function was never called in the steps it
is asked about.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

SYNC_WARNING = "synchronizing CUDA operation"  # what set_sync_debug_mode("warn") says
# one known synchronisation, made in the probe's own frame: on CUDA, .item() copies the value to the host and waits
SYNC_PROBE = "def probe(x):\n    return x.item()\n"
THIS_FILE = os.path.realpath(__file__)


def package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    return Path(spec.origin).resolve().parent if spec and spec.origin else None


@contextlib.contextmanager
def cuda_sync_reports() -> Iterator[None]:
    """CUDA's own report of each host synchronisation, as a warning."""
    before = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(before)


@dataclass
class SyncTally:
    """Synchronisations seen: all of them, and DEL's per place in its code (``path:line`` from the package's
    parent folder)."""

    total: int = 0
    del_sites: dict[str, int] = field(default_factory=dict)

    @property
    def by_del(self) -> int:
        return sum(self.del_sites.values())


class SyncCounter:
    """Counts the host synchronisations of the calls of functions wrapped with :meth:`counted` while ``counting``
    (see the module's docstring). ``reports`` turns the device's reports on (CUDA's sync debug mode), ``message``
    is the text of a report and ``del_root`` the package charged as DEL's: the defaults measure a CUDA run; a test
    on a machine without CUDA swaps the first two for a CPU operation's C++ warning that travels the same path."""

    def __init__(
        self,
        enabled: bool = True,
        reports: Callable[[], contextlib.AbstractContextManager] = cuda_sync_reports,
        message: str = SYNC_WARNING,
        del_root: Path | None = None,
    ):
        self.enabled, self.counting = enabled, False
        self.reports, self.message = reports, message
        self.del_root = del_root or package_dir("del_plugin")
        self.tally = SyncTally()
        self.calls = 0  # calls counted (while counting)
        self._machinery = machinery_dirs()

    # ------------------------------------------------------------------------------------------ counting
    def counted(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not (self.enabled and self.counting):
                return fn(*args, **kwargs)
            self.calls += 1
            with self.watching(self.tally):
                return fn(*args, **kwargs)

        return wrapper

    @contextlib.contextmanager
    def watching(self, tally: SyncTally) -> Iterator[SyncTally]:
        """Adds the synchronisations made inside the block to ``tally`` (other warnings raised there are dropped:
        under the "always" filter a step's own warnings would repeat at every step)."""

        def on_warning(message, category, filename, lineno, file=None, line=None):
            if self.message in str(message):
                tally.total += 1
                site = self.del_site(sys._getframe(1))
                if site:
                    tally.del_sites[site] = tally.del_sites.get(site, 0) + 1

        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = on_warning
            with self.reports():
                yield tally

    def del_site(self, frame) -> str | None:
        """``path:line`` of DEL's code that made the call reported at ``frame`` (the innermost frame outside the
        machinery), or None when someone else's code made it."""
        while frame is not None and self.is_machinery(resolved(frame.f_code.co_filename)):
            frame = frame.f_back
        if frame is None or self.del_root is None:
            return None
        path = Path(resolved(frame.f_code.co_filename))
        if not path.is_relative_to(self.del_root):
            return None
        return f"{path.relative_to(self.del_root.parent)}:{frame.f_lineno}"

    def is_machinery(self, filename: str) -> bool:
        """torch, Triton, the standard library, this module and generated code: what runs an operation on behalf of
        the code that asked for it (``filename`` resolved)."""
        if filename.startswith("<") or "torchinductor" in filename or filename == THIS_FILE:
            return True
        stdlib, libraries = self._machinery
        if filename.startswith(libraries):
            return True
        return filename.startswith(stdlib) and "-packages" not in filename

    def per_step(self, steps: int) -> dict | None:
        """Synchronisations per counted step, all and DEL's, with DEL's places; None when counting is off."""
        if not self.enabled or not steps:
            return None
        if not self.calls:
            raise RuntimeError(
                "gpu_check: the synchronisation count wraps trainer.training_step, which was never called in the "
                f"{steps} timed steps: the trainer no longer calls it, and a count of 0 would mean nothing"
            )
        return {
            "syncs_per_step": self.tally.total / steps,
            "del_syncs_per_step": self.tally.by_del / steps,
            "del_sync_sites": dict(self.tally.del_sites),
        }

    # ------------------------------------------------------------------------------------------ self-check
    def self_check(self, sample: torch.Tensor, probe: str = SYNC_PROBE) -> dict[str, SyncTally]:
        """Runs ``probe`` (the source of ``def probe(x)``, one synchronisation on ``sample``) once as if it were a
        module of the ``del_plugin`` package and once as a module beside this one; raises unless each call is
        counted once and only the first is DEL's. Returns the two tallies."""
        if self.del_root is None:
            raise RuntimeError("gpu_check: del_plugin is not importable, so no synchronisation can be charged to it")
        places = {
            "del_plugin": self.del_root / "_gpu_check_sync_probe.py",
            "outside": Path(THIS_FILE).with_name("probe.py"),
        }
        tallies = {}
        for side, filename in places.items():
            namespace: dict = {"torch": torch}
            exec(compile(probe, str(filename), "exec"), namespace)
            with self.watching(SyncTally()) as tally:
                namespace["probe"](sample)
            tallies[side] = tally
        seen = {side: (t.total, t.by_del) for side, t in tallies.items()}
        if seen != {"del_plugin": (1, 1), "outside": (1, 0)}:
            raise RuntimeError(
                "gpu_check: the synchronisation count failed its self-check: a known synchronisation made from "
                f"del_plugin ({places['del_plugin']}) and one made outside it counted (all, DEL's) {seen}, not "
                "(1, 1) and (1, 0); the device no longer reports synchronisations as "
                f"{self.message!r} warnings, or DEL's code is no longer told apart, and the counts would be wrong"
            )
        return tallies


def resolved(filename: str) -> str:
    """A frame's file name with links resolved; generated code's names ("<string>", "<eval_with_key>") as they are."""
    return filename if filename.startswith("<") else os.path.realpath(filename)


def machinery_dirs() -> tuple[str, tuple[str, ...]]:
    """(the standard library's folder, the folders of torch and Triton), as prefixes of frames' file names."""
    libraries = tuple(f"{d}{os.sep}" for name in ("torch", "triton") if (d := package_dir(name)) is not None)
    return os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep, libraries
