"""The program in a model's output: what the paper's harness takes for one."""

from __future__ import annotations

import re

_STOP_AT = ("### Instruction",)
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)


def extract_program(output: str) -> str | None:
    """The program in a model ``output``, or None when it holds none (no ``print(``, as the paper's harness
    decides). The text is cut at a new "### Instruction"; a fenced block (```python ... ```) holding ``print(``
    is taken alone."""
    if "print(" not in output:
        return None
    for stop in _STOP_AT:
        output = output.split(stop)[0]
    for block in _FENCE.findall(output):
        if "print(" in block:
            return block
    return output
