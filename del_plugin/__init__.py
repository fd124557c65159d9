"""DEL: Digit Entropy Loss for numerical learning of LLMs, as an Axolotl plugin.

``del_plugin.core`` holds the maths and imports no Axolotl. ``DELPlugin`` (the Axolotl entry point) is imported
lazily, so ``import del_plugin.core`` works without Axolotl installed.
"""

from __future__ import annotations

from .version import __version__

__all__ = ["DELPlugin", "__version__"]


def __getattr__(name: str):
    if name == "DELPlugin":
        from .axolotl.plugin import DELPlugin

        return DELPlugin
    raise AttributeError(f"module 'del_plugin' has no attribute {name!r}")
