"""Generated field getters and constructors for records whose fields need no conversion.

cattrs' generated functions are general: they copy every list and dict field and run a hook
per field. Records roost writes on every workflow step (activations, run records, tasks) have
fields that CBOR already round-trips as their declared types, so encoding only needs the
field map and decoding only needs the constructor call. These functions are generated once
per class and produce exactly the field map cattrs would (the codec's tests compare the
bytes); a class with a field they cannot handle (a set, a nested typed container, ...) gets
``None`` and stays on cattrs.
"""

from __future__ import annotations

import datetime as dt
import enum
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from roost._errors import Error
from roost._pid import Pid

__all__ = ["fast_structure", "fast_unstructure"]

# Types whose decoded CBOR value already is the declared type (records are rebuilt by the
# decoder's tag handler before their parent is).
_AS_IS: frozenset[Any] = frozenset({str, int, bool, bytes, Pid, Error, dt.datetime, uuid.UUID})
_SETS = (set, frozenset)


def _hints(cls: type) -> dict[str, Any] | None:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: leave the class to cattrs
        return None


def _as_is(tp: Any) -> bool:
    """True when a decoded value of type ``tp`` needs no conversion at all."""
    if tp is Any or tp in _AS_IS:
        return True
    if isinstance(tp, type):
        return attrs.has(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return all(a is type(None) or _as_is(a) for a in args)
    if origin is list:
        return not args or _as_is(args[0])
    if origin is dict:
        return not args or (_as_is(args[0]) and _as_is(args[1]))
    return False


def _converter(tp: Any, enums: list[type]) -> str | None:
    """A template turning ``{v}`` into a value of ``tp`` (``"{v}"``: none needed), or None.

    Enum classes the template refers to are appended to ``enums`` (``_t[i]`` in the text).
    """
    if _as_is(tp):
        return "{v}"
    if tp is float:
        return "float({v})"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        enums.append(tp)
        return f"_t[{len(enums) - 1}]({{v}})"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner = _converter(next(a for a in args if a is not type(None)), enums)
        if inner is not None:
            return f"(None if {{v}} is None else {inner})"
    return None


def _fields(cls: type) -> tuple[attrs.Attribute[Any], ...] | None:
    if not attrs.has(cls):
        return None
    return tuple(attrs.fields(cls))


def fast_unstructure(cls: type) -> Callable[[Any], dict[str, Any]] | None:
    """A function returning ``cls``'s field map, or None if a field needs cattrs."""
    fields, hints = _fields(cls), _hints(cls)
    if fields is None or hints is None:
        return None
    for field in fields:
        tp = hints.get(field.name, Any)
        if tp in _SETS or typing.get_origin(tp) in _SETS:
            return None  # cattrs stores declared sets as lists
    items = ", ".join(f"{f.name!r}: o.{f.name}" for f in fields)
    source = f"def unstructure(o):\n    return {{{items}}}\n"
    namespace: dict[str, Any] = {}
    exec(compile(source, f"<roost record unstructure {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - generated from attrs field names
    return namespace["unstructure"]  # type: ignore[no-any-return]


def fast_structure(cls: type) -> Callable[[Mapping[str, Any]], Any] | None:
    """A function building ``cls`` from a decoded field map, or None if a field needs cattrs.

    The function raises KeyError when a field is missing (data from an older schema, whose
    defaults cattrs fills in): the caller falls back to cattrs then.
    """
    fields, hints = _fields(cls), _hints(cls)
    if fields is None or hints is None:
        return None
    enums: list[type] = []
    args: list[str] = []
    for field in fields:
        if not field.init:
            continue
        template = _converter(hints.get(field.name, Any), enums)
        if template is None:
            return None
        args.append(f"{field.alias}=" + template.format(v=f"d[{field.name!r}]"))
    source = "def structure(d):\n    return _cls(" + ", ".join(args) + ")\n"
    namespace: dict[str, Any] = {"_cls": cls, "_t": enums}
    exec(compile(source, f"<roost record structure {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - generated from attrs field names
    return namespace["structure"]  # type: ignore[no-any-return]
