"""``python -m tools.venv_defaults``: the defaults ``make setup`` gives the clone's ``.venv``, as a ``.pth`` file in
its site-packages (Python runs a ``.pth`` line that starts with ``import`` at every start-up of that environment:
``axolotl``, ``accelerate launch`` and each process they start, whether or not the shell sourced ``activate``).

One default: ``AXOLOTL_DO_NOT_TRACK=1``, set only where the variable is unset (``AXOLOTL_DO_NOT_TRACK=0`` keeps
Axolotl's telemetry on). Axolotl's telemetry is on unless it is set, and offline its PostHog client retries at exit
without end: a config Axolotl refuses never returns to the prompt (docs/cpu.md, "Offline").
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

PTH_NAME = "del-plugin-defaults.pth"
DEFAULTS: dict[str, str] = {"AXOLOTL_DO_NOT_TRACK": "1"}


def pth_text() -> str:
    """The ``.pth`` file: one ``import`` line (a ``.pth`` runs only such lines) setting each of :data:`DEFAULTS`
    that the environment leaves unset."""
    settings = "; ".join(f"os.environ.setdefault({key!r}, {value!r})" for key, value in DEFAULTS.items())
    return f"import os; {settings}\n"


def install_defaults(site_dir: str | Path | None = None) -> Path:
    """Write :data:`PTH_NAME` into ``site_dir`` (default: this interpreter's site-packages); its path."""
    folder = Path(site_dir if site_dir is not None else sysconfig.get_paths()["purelib"])
    path = folder / PTH_NAME
    path.write_text(pth_text(), encoding="utf-8")
    return path


if __name__ == "__main__":
    if sys.prefix == sys.base_prefix:
        sys.exit("error: run it with the virtual environment's python (.venv/bin/python -m tools.venv_defaults)")
    print(f"defaults for this environment: {install_defaults()}")
