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
from typing import Any, Final

import attrs

from roost._errors import Error
from roost._pid import Pid
from roost.storage._schema import leaf_types

__all__ = ["fast_structure", "fast_unstructure", "positional_fns"]

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


class PositionalFns(typing.NamedTuple):
    """A positional record's generated functions (see ``positional_fns``)."""

    values: Callable[[Any], list[Any]]  # the stored field values, in declaration order
    check: Callable[[list[Any]], bool]  # every leaf value holds one of its types
    walked: tuple[int, ...]  # positions of the values the codec walks
    build: Callable[[list[Any]], Any]  # the instance from stored values
    names: tuple[str, ...]  # the fields, in the order of the values


_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO: Final = dt.timedelta(microseconds=1)


def _packed(tp: Any, enum_name: str) -> tuple[str, str, frozenset[type], type | None] | None:
    """How a positional record stores a field of type ``tp`` in another form, or None.

    Returns the expressions that store and rebuild it (``{v}`` is the value), the types of
    the stored form, and the enum class that ``enum_name`` must name in the namespace of
    the rebuild (None for a datetime). A datetime is stored as microseconds since the
    epoch (an aware one: a naive one makes the store expression raise, and the codec's
    full walk refuses it), a str or int enum member as its value.
    """
    optional = False
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(tp)) != 2:
            return None
        tp, optional = args[0], True
    kinds: set[type]
    cls: type | None
    if tp is dt.datetime:
        store, load, kinds, cls = "(({v} - _E) // _U)", "(_E + _U * {v})", {int}, None
    elif isinstance(tp, type) and issubclass(tp, enum.Enum) and issubclass(tp, str | int):
        kinds = {str} if issubclass(tp, str) else {int}
        store, load, cls = "{v}.value", enum_name + "({v})", tp
    else:
        return None
    if optional:
        store = "(None if {v} is None else " + store + ")"
        load = "(None if {v} is None else " + load + ")"
        kinds.add(type(None))
    return store, load, frozenset(kinds), cls


def positional_fns(cls: type) -> PositionalFns | None:
    """The functions that store ``cls`` as a list of its field values, or None.

    A positional record is written as the values of its fields in declaration order, not as
    a map from field names: the same content in fewer bytes, without a key string per field
    to write and read. Datetimes are stored as microseconds and enum members as their
    values (``_packed``). Fields are only ever added at the end; a row written before a
    field existed is shorter, and ``build`` gives the missing trailing fields their
    defaults. None when a field needs cattrs (the record is stored as a field map then).
    """
    fields, hints = _fields(cls), _hints(cls)
    if fields is None or hints is None or any(not f.init for f in fields):
        return None
    namespace: dict[str, Any] = {"_cls": cls, "_E": _EPOCH, "_U": _MICRO}
    getters: list[str] = []
    tests: list[str] = []
    walked: list[int] = []
    args: list[str] = []
    enums: list[type] = []
    for i, field in enumerate(fields):
        tp = hints.get(field.name, Any)
        packed = _packed(tp, f"_k{i}")
        got = f"o.{field.name}"
        if packed is not None:
            store, load, kinds, enum_cls = packed
            if enum_cls is not None:
                namespace[f"_k{i}"] = enum_cls
            getters.append(store.format(v=got))
            namespace[f"_l{i}"] = kinds
            tests.append(f"type(v[{i}]) in _l{i}")
            value = load.format(v=f"v[{i}]")
        else:
            getters.append(got)
            leaves = leaf_types(tp)
            if leaves is None:
                walked.append(i)
            else:
                namespace[f"_l{i}"] = leaves
                tests.append(f"type(v[{i}]) in _l{i}")
            template = _converter(tp, enums)
            if template is None:
                return None
            value = template.format(v=f"v[{i}]")
        if field.default is attrs.NOTHING:
            args.append(f"{field.alias}={value}")
        elif isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]  # attrs types Factory as a function
            namespace[f"_f{i}"] = field.default.factory  # type: ignore[union-attr]  # a Factory here
            args.append(f"{field.alias}=({value} if n > {i} else _f{i}())")
        else:
            namespace[f"_d{i}"] = field.default
            args.append(f"{field.alias}=({value} if n > {i} else _d{i})")
    namespace["_t"] = enums
    source = f"def values(o):\n    return [{', '.join(getters)}]\n"
    source += f"def check(v):\n    return {' and '.join(tests) or 'True'}\n"
    source += "def build(v):\n    n = len(v)\n    return _cls(" + ", ".join(args) + ")\n"
    exec(compile(source, f"<roost positional record {cls.__qualname__}>", "exec"), namespace)  # noqa: S102 - generated from attrs field names
    names = tuple(f.name for f in fields)
    return PositionalFns(
        namespace["values"], namespace["check"], tuple(walked), namespace["build"], names
    )
