"""State update ops: parse paths, validate ops, apply them to a value (sans-IO, no trio).

An update is a list of op dicts in iii's tagged format::

    {"type": "set",       "path": ..., "value": v}
    {"type": "merge",     "path": ..., "value": {...}}      # shallow merge of a dict
    {"type": "increment", "path": ..., "by": 1}
    {"type": "decrement", "path": ..., "by": 1}
    {"type": "append",    "path": ..., "value": v}
    {"type": "remove",    "path": ...}

A path is a list (or tuple) of string keys, or one string whose ``/`` separates the keys:
``["steps", "payment"]`` and ``"steps/payment"`` are the same path. A dot is *not* a
separator (as in iii): ``"steps.payment"`` is one key named ``steps.payment``. No path, None,
``""`` or ``[]`` is the root (the whole value); ``remove`` needs a non-empty path.

Semantics, on a value built from dicts, lists, strings and numbers:

- ``set`` writes ``value`` at the path, creating missing dicts on the way (an empty path
  replaces the whole value);
- ``merge`` shallow-merges the dict ``value`` into the dict at the path (a missing target
  starts as ``{}``);
- ``increment`` / ``decrement`` add / subtract ``by`` (an int or float, default 1) to the
  number at the path; a missing number starts at 0;
- ``append`` pushes ``value`` onto the list at the path, or concatenates a string onto the
  string there; a missing target becomes ``[value]``;
- ``remove`` deletes the key at the end of the path; a missing key (or a missing dict on the
  way) is a no-op.

:func:`apply_ops` is all-or-nothing and copy-on-write: it never mutates its input (every
container on a written path is copied), so when an op in the middle of a list fails, the
caller still holds the untouched original. Every problem is a ``roost.Error`` of kind
Invalid that names the op, its index and its path, and says how to fix it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, cast

import attrs

from roost._errors import Error, invalid

__all__ = ["MAX_PATH_DEPTH", "OP_TYPES", "Op", "OpType", "apply_ops", "parse_ops", "parse_path"]

OpType = Literal["set", "merge", "increment", "decrement", "append", "remove"]

# The fields each op type takes besides "type"; the first ones listed are required.
_FIELDS: Final[Mapping[str, tuple[str, ...]]] = {
    "set": ("path", "value"),
    "merge": ("path", "value"),
    "increment": ("path", "by"),
    "decrement": ("path", "by"),
    "append": ("path", "value"),
    "remove": ("path",),
}
_NEEDS_VALUE: Final = frozenset({"set", "merge", "append"})
OP_TYPES: Final[tuple[str, ...]] = tuple(_FIELDS)

MAX_PATH_DEPTH: Final = 32
"""The most keys a path may have (iii's limit too)."""

Path = tuple[str, ...]


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_MISSING: Final = _Marker("MISSING")  # what a leaf function gets for an absent key
_UNCHANGED: Final = _Marker("UNCHANGED")  # a leaf function leaves its parent as it is
_DELETE: Final = _Marker("DELETE")  # a leaf function removes its key


@attrs.frozen
class Op:
    """One validated update op.

    Attributes:
        type: the op name.
        path: the keys from the root to the target (empty for the root).
        value: the op's value (set, merge, append).
        by: the amount (increment, decrement).
        index: the op's position in its update, for error messages.
    """

    type: OpType
    path: Path = ()
    value: Any = None
    by: int | float = 1
    index: int = 0

    def where(self) -> str:
        """How error messages name this op: ``op 2 (increment) at path ['a', 'b']``."""
        shown = list(self.path) if self.path else "root"
        return f"state update op {self.index} ({self.type}) at path {shown}"


def parse_path(path: Any, *, what: str = "path") -> Path:
    """Turn a path argument into a tuple of keys.

    Args:
        path: None, a ``/``-separated string, or a list / tuple of string keys. A dot is
            not a separator: ``"a.b"`` is the one key ``a.b``.
        what: how error messages name the path.

    Returns:
        The keys, root first; ``()`` for the root (None, ``""``, ``[]``).

    Raises:
        roost.Error: kind Invalid for another type, a non-string key, an empty segment in a
            string path (``"a//b"``, ``"/a"``) or more than ``MAX_PATH_DEPTH`` keys.
    """
    if path is None or path == "":
        return ()
    if isinstance(path, str):
        keys: tuple[Any, ...] = tuple(path.split("/"))
        if "" in keys:
            raise invalid(
                f"{what} {path!r} has an empty segment: write keys separated by single '/' "
                "with no leading or trailing '/' (e.g. 'steps/payment'), or pass a list of "
                "keys",
                path=path,
            )
    elif isinstance(path, list | tuple):
        keys = tuple(path)
        for key in keys:
            if not isinstance(key, str):
                raise invalid(
                    f"{what} {list(keys)!r} has a key of type {type(key).__name__}: path "
                    "keys must be strings (state paths address dict keys)",
                    path=repr(path),
                )
    else:
        raise invalid(
            f"{what} must be a list of string keys or a '/'-separated string, got "
            f"{type(path).__name__} {path!r}",
            path=repr(path),
        )
    if len(keys) > MAX_PATH_DEPTH:
        raise invalid(
            f"{what} has {len(keys)} keys; a state path has at most {MAX_PATH_DEPTH}",
            path=repr(path),
        )
    return cast(Path, keys)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _parse_op(index: int, raw: Any) -> Op:
    if not isinstance(raw, Mapping):
        raise invalid(
            f"state update op {index} must be a dict like {{'type': 'set', 'path': "
            f"['status'], 'value': 'paid'}}, got {type(raw).__name__}",
            op_index=index,
        )
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in _FIELDS:
        raise invalid(
            f"state update op {index} has type {kind!r}; the op types are {', '.join(OP_TYPES)}",
            op_index=index,
        )
    fields = _FIELDS[kind]
    unknown = sorted(str(name) for name in raw if name != "type" and name not in fields)
    if unknown:
        raise invalid(
            f"state update op {index} ({kind}) has unknown field(s) {', '.join(unknown)}; "
            f"a {kind} op takes {', '.join(fields)}",
            op_index=index,
        )
    where = f"state update op {index} ({kind})"
    path = parse_path(raw.get("path"), what=f"{where} path")
    if kind in _NEEDS_VALUE and "value" not in raw:
        raise invalid(f"{where} needs a 'value'", op_index=index)
    value = raw.get("value")
    if kind == "merge" and not isinstance(value, Mapping):
        raise invalid(
            f"{where} value must be a dict to merge in, got {type(value).__name__}; use a "
            "'set' op to replace a value",
            op_index=index,
        )
    if kind == "remove" and not path:
        raise invalid(
            f"{where} needs a non-empty path; to remove the whole value use "
            "roost.state.delete(scope, key)",
            op_index=index,
        )
    by = raw.get("by", 1)
    if not _is_number(by) or (isinstance(by, float) and not math.isfinite(by)):
        raise invalid(
            f"{where} 'by' must be a finite int or float (default 1), got {by!r}",
            op_index=index,
        )
    return Op(cast(OpType, kind), path, value, by, index)


def parse_ops(ops: Any) -> list[Op]:
    """Validate a list of op dicts (see the module docstring) before anything is applied.

    Raises:
        roost.Error: kind Invalid for anything but a list or tuple of valid op dicts.
    """
    if not isinstance(ops, list | tuple):
        raise invalid(
            "state update ops must be a list of op dicts, e.g. [{'type': 'increment', "
            f"'path': ['attempts'], 'by': 1}}], got {type(ops).__name__}"
        )
    return [_parse_op(index, raw) for index, raw in enumerate(ops)]


def apply_ops(value: Any, ops: Sequence[Op]) -> Any:
    """Apply ``ops`` in order to ``value`` and return the new value; ``value`` is untouched.

    All or nothing: when an op fails, the error propagates and no partial result exists
    (the input was never mutated).

    Raises:
        roost.Error: kind Invalid when an op does not fit the value (a path through a
            non-dict, increment of a non-number, append to a dict, ...).
    """
    for op in ops:
        value = _apply(value, op)
    return value


def _apply(root: Any, op: Op) -> Any:
    leaf = _LEAVES[op.type]
    new = _modify(root, op, 0, lambda old: leaf(op, old))
    return root if new is _UNCHANGED else new


def _modify(node: Any, op: Op, depth: int, leaf: Callable[[Any], Any]) -> Any:
    """Return a copy of ``node`` with ``leaf`` applied at ``op.path[depth:]``.

    Returns ``_UNCHANGED`` when nothing changes (a remove of a missing key).
    """
    if depth == len(op.path):
        return leaf(node)
    if not isinstance(node, dict):
        raise _not_a_dict(op, depth, node)
    name = op.path[depth]
    if depth + 1 == len(op.path):
        new = leaf(node.get(name, _MISSING))
    elif name in node:
        new = _modify(node[name], op, depth + 1, leaf)
    elif op.type == "remove":
        new = _UNCHANGED  # nothing there to remove
    else:
        new = _modify({}, op, depth + 1, leaf)
    if new is _UNCHANGED:
        return _UNCHANGED
    out = dict(node)
    if new is _DELETE:
        del out[name]
    else:
        out[name] = new
    return out


def _not_a_dict(op: Op, depth: int, node: Any) -> Error:
    at = list(op.path[:depth]) if depth else "the root"
    return invalid(
        f"{op.where()}: the value at {at} is a {type(node).__name__}, not a dict, so the "
        f"path cannot go through it; set {at} to a dict first or use another path",
        op_index=op.index,
        path=list(op.path),
    )


def _set(op: Op, _old: Any) -> Any:
    return op.value


def _merge(op: Op, old: Any) -> Any:
    if old is _MISSING:
        return dict(op.value)
    if not isinstance(old, dict):
        raise invalid(
            f"{op.where()}: cannot merge into a {type(old).__name__}; merge needs a dict "
            "there (use a 'set' op to replace it)",
            op_index=op.index,
            path=list(op.path),
        )
    return {**old, **op.value}


def _increment(op: Op, old: Any) -> Any:
    by = op.by if op.type == "increment" else -op.by
    if old is _MISSING:
        return by
    if not _is_number(old):
        raise invalid(
            f"{op.where()}: cannot {op.type} a {type(old).__name__} ({old!r}); the value "
            "there must be an int or a float (or missing, to start at 0)",
            op_index=op.index,
            path=list(op.path),
        )
    return old + by


def _append(op: Op, old: Any) -> Any:
    if old is _MISSING:
        return [op.value]
    if isinstance(old, list):
        return [*old, op.value]
    if isinstance(old, str):
        if not isinstance(op.value, str):
            raise invalid(
                f"{op.where()}: the target is a string, so the appended value must be a "
                f"string too, got {type(op.value).__name__}",
                op_index=op.index,
                path=list(op.path),
            )
        return old + op.value
    raise invalid(
        f"{op.where()}: cannot append to a {type(old).__name__}; append needs a list, a "
        "string, or nothing there",
        op_index=op.index,
        path=list(op.path),
    )


def _remove(_op: Op, old: Any) -> Any:
    return _UNCHANGED if old is _MISSING else _DELETE


_LEAVES: Final[Mapping[str, Callable[[Op, Any], Any]]] = {
    "set": _set,
    "merge": _merge,
    "increment": _increment,
    "decrement": _increment,
    "append": _append,
    "remove": _remove,
}
