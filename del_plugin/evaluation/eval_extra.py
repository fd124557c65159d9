"""The packages of the ``del-plugin[eval]`` extra, checked before any work: by del-eval, and by config validation when
a config asks for the evaluation after training (without loading the evaluation itself)."""

from __future__ import annotations

EVAL_EXTRA = ("matplotlib", "tqdm", "scipy")


def require_eval_extra() -> None:
    """Raise ImportError, naming the extra to install, when a package of ``del-plugin[eval]`` is missing: before
    any work, not at the plot after an hour of generation."""
    import importlib

    missing = []
    for module in EVAL_EXTRA:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ImportError(
            f"del-eval needs {', '.join(missing)}: install the evaluation extra, pip install 'del-plugin[eval]'"
        )
