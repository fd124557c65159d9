"""Reading a config's YAML with bounds, so that a hostile file is refused in a moment with one line, not after minutes,
a ``MemoryError`` or a traceback: a file of at most :data:`MAX_YAML_BYTES` (read as every input file is, by
:func:`del_plugin.inputs.read_input_bytes`: a device such as ``/dev/zero`` is no file), at most
:data:`MAX_YAML_NODES` values once every alias is expanded (a "billion laughs" file of nine levels of ten aliases
composes in no time but expands to a billion values), no alias to itself, no integer of more than
:data:`MAX_INT_DIGITS` digits (Python refuses to convert one), and no nesting deeper than Python's recursion allows.
An Axolotl config holds a few hundred values."""

from __future__ import annotations

import yaml

__all__ = ["MAX_INT_DIGITS", "MAX_YAML_BYTES", "MAX_YAML_NODES", "YamlLimitError", "load_yaml"]

MAX_YAML_BYTES = 16 << 20
MAX_YAML_NODES = 100_000
MAX_INT_DIGITS = 4000
_INT_TAG = "tag:yaml.org,2002:int"


class YamlLimitError(ValueError):
    """A YAML file past one of the bounds of this module; the message says which, where, and the fix."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _line(node: yaml.Node) -> str:
    return f"line {node.start_mark.line + 1}"


def _check_bounds(root: yaml.Node) -> None:
    """Count the values of ``root`` with every alias expanded (each node once, memoised: linear in the file) and
    refuse a file past the bounds; a node reached again while it is still open is an alias to itself."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(child)] for child in _children(node))
            if sizes[key] > MAX_YAML_NODES:
                raise YamlLimitError(
                    f"the value at {_line(node)} expands to more than {MAX_YAML_NODES:,} values (aliases of aliases): "
                    "not an Axolotl config; write the values out, or use fewer aliases"
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise YamlLimitError(f"the alias at {_line(node)} holds itself (a recursive anchor): write the value out")
        if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
            raise YamlLimitError(
                f"the integer at {_line(node)} has more than {MAX_INT_DIGITS} digits: not a config value; fix that line"
            )
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)


def load_yaml(text: str):
    """``yaml.safe_load(text)`` within the bounds of the module docs: :class:`YamlLimitError` past them,
    ``yaml.YAMLError`` for text that is not YAML."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlLimitError("values nested too deep to read: not an Axolotl config") from None
        if node is None:
            return None
        _check_bounds(node)
        try:
            return loader.construct_document(node)
        except yaml.YAMLError:
            raise
        except (ArithmeticError, LookupError, TypeError, ValueError) as err:
            # PyYAML's constructors raise these on a tag that does not fit its value (``!!int`` on an empty one)
            raise YamlLimitError(
                f"a value cannot be read ({type(err).__name__}: {err}); look for an explicit tag (!!int, !!float, "
                "!!binary, !!timestamp) on a value that is not one, and remove the tag or fix the value"
            ) from None
    finally:
        loader.dispose()
