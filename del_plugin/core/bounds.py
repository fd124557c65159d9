"""Bounds of DEL's numeric settings: a finite number in an interval, refused with the reason otherwise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Bound", "refuse_boolean"]


def refuse_boolean(name: str, value: Any) -> None:
    """``ValueError`` naming ``name`` for a boolean: YAML's ``true`` is no number, though Python reads it as 1."""
    if isinstance(value, bool):
        raise ValueError(f"`{name}` must be a number, not a boolean ({value})")


@dataclass(frozen=True)
class Bound:
    """``[low, high]`` (``low`` excluded when ``low_open``) and why a value outside it makes no sense."""

    low: float
    high: float
    reason: str
    low_open: bool = False

    @property
    def interval(self) -> str:
        return f"{'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"

    def check(self, name: str, value: Any) -> float:
        """``value`` as a float, or ``ValueError`` naming ``name``, the value, the interval and the reason.
        Booleans are not numbers here, and neither are infinities or NaN."""
        refuse_boolean(name, value)
        if not isinstance(value, (int, float)):
            raise ValueError(f"`{name}` must be a number, got {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"`{name}` must be a finite number, got {value}")
        if (value <= self.low if self.low_open else value < self.low) or value > self.high:
            raise ValueError(f"`{name}: {value:g}` is outside {self.interval}: {self.reason}")
        return value
