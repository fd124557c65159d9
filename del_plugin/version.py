"""The package's version, in a module of its own (ground floor): the report, the lm-eval tasks and the model card
stamp it without importing ``del_plugin``'s ``__init__``, whose lazy ``DELPlugin`` reaches the axolotl room."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
