"""Which fields of roost's own records hold user payloads, read from their annotations.

A roost record (a run record, an activity task, a history event) carries user payloads
(arguments, results, message payloads, memo, errors) in a few fields; every other field has
a declared type roost itself fills (ids, counters, PIDs, enums). The codec walks only the
first kind (``Codec.encode``; a history row's items the same way, ``Codec.encode_typed``):

- a *leaf* field (``str``, ``int``, ``bool``, ``float``, ``bytes``, ``None``, ``Pid``, a
  ``str`` or ``int`` enum, or a union of those) gets one exact type test and no walk: its
  depth is fixed by its type. A value of another type (a bug) sends the record down the
  full walk, which refuses it; a lone surrogate in a leaf string makes cbor2 refuse the
  record, which sends it down the full walk too, for the message;
- every other field (``Any``, ``Error``, datetimes, containers, records) is walked as a
  payload is.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from roost._pid import Pid

__all__ = ["Schema", "leaf_types", "schema"]

_LEAVES: Final = frozenset({str, int, bool, float, bytes, type(None), Pid})


def leaf_types(tp: Any) -> frozenset[type] | None:
    """The exact types a field annotated ``tp`` may hold, or None if it is walked.

    Leaves are ``str``, ``int``, ``bool``, ``float``, ``bytes``, ``None``, ``Pid`` and
    ``str`` or ``int`` enums, alone or in a union: each nests at most two levels (a PID; a
    bignum one). Anything else (``Any``, ``Error``, datetimes, containers, records) is
    walked like a payload.
    """
    if tp in _LEAVES:
        return frozenset({tp})
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return frozenset({tp}) if issubclass(tp, str | int) else None
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        found: set[type] = set()
        for arg in typing.get_args(tp):
            leaves = leaf_types(arg)
            if leaves is None:
                return None
            found |= leaves
        return frozenset(found)
    return None


@attrs.frozen
class Schema:
    """How the codec checks one record class: a type test per leaf field, a walk for the rest.

    ``check(values)`` is True when every leaf field holds exactly one of its types;
    ``walked`` names the other fields, in declaration order.
    """

    walked: tuple[str, ...]
    check: Callable[[Any], bool]


def schema(cls: type, fields: tuple[str, ...] | None = None, *, by_index: bool = False) -> Schema:
    """The schema of attrs class ``cls``; a walk of every field if annotations do not resolve.

    Args:
        cls: the attrs class.
        fields: its fields in the order of the checked values (default: declaration order).
        by_index: the checked values are a sequence ``[kind, field, ...]`` (a history row's
            item) rather than a field map.
    """
    names = fields if fields is not None else tuple(f.name for f in attrs.fields(cls))
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: the full walk decides
        hints = {}
    walked: list[str] = []
    tests: list[str] = []
    namespace: dict[str, Any] = {}
    for i, name in enumerate(names):
        leaves = leaf_types(hints.get(name, Any))
        if leaves is None:
            walked.append(name)
            continue
        namespace[f"_t{i}"] = leaves
        part = f"v[{i + 1}]" if by_index else f"v[{name!r}]"
        tests.append(f"type({part}) in _t{i}")
    source = f"def check(v):\n    return {' and '.join(tests) or 'True'}\n"
    exec(compile(source, f"<roost schema {cls.__name__}>", "exec"), namespace)  # noqa: S102 - generated from the class's own field names
    return Schema(tuple(walked), namespace["check"])
