"""Plain Python classes as payloads: dataclasses, enums, NamedTuples, pydantic models, converters.

Each such class is a record of the codec under the tag ``"<module>:<qualname>"`` (schema
version 1), so it round-trips as itself wherever it sits in a payload. A class becomes known:

- from the annotations of entries registered on an ``App`` (parameters and result, walked
  through containers, ``Optional`` and unions, and through the fields of the classes found);
  this also covers ``StrEnum``/``IntEnum`` members and attrs classes, which are otherwise
  written as their plain value or refused;
- the first time a dataclass, a ``NamedTuple``, a plain ``Enum`` member or a pydantic model is
  encoded, if its class is not one of roost's own;
- when a stored value of a tag not known yet is decoded and its module is already imported
  (a module is never imported because stored data names it);
- with ``App.converter(cls, encode, decode)`` for any other class.

Stored fields: a dataclass's and a NamedTuple's fields by name (nested values stay typed
values), an enum's ``value``, a pydantic model's ``model_dump(mode="json")``, a converter's
``encode(obj)``. Decoding rebuilds typed fields from the class's annotations, so a
``tuple[int, ...]`` field comes back as a tuple. ``structure`` turns plain data (a dict from
JSON, a list stored for a tuple) into an annotated type, for entry arguments and results.

This module is pure: it imports no trio.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs
import cattrs

from roost._errors import Error, ErrorKind, invalid, safe_text, shown
from roost.storage._registry import (
    _CONVERTER,
    _DEFAULT_REGISTRY,
    _RecordType,
)

__all__ = [
    "EntryTypes",
    "add_converter",
    "auto_value_type",
    "entry_types",
    "needs_structure",
    "plain_data",
    "register_annotation",
    "result_of",
    "structure",
    "value_type_for_tag",
    "wrap_entry",
]

# Builtin types cbor2 writes natively: a value class deriving from one of them (a NamedTuple,
# an IntEnum) is never handed to the codec's hook, so the codec boxes it (see _walk).
NATIVE_BASES: Final = (tuple, list, dict, int, float, str, bytes)
# How many registered value classes are boxed (see Codec.encode_checked).
NATIVE_COUNT: Final = [0]


def _is_namedtuple(cls: type) -> bool:
    return issubclass(cls, tuple) and hasattr(cls, "_fields") and hasattr(cls, "_asdict")


def _is_pydantic(cls: type) -> bool:
    pydantic = sys.modules.get("pydantic")  # a model's class means pydantic is imported
    return pydantic is not None and issubclass(cls, pydantic.BaseModel)


def _is_roosts(cls: type) -> bool:
    return str(getattr(cls, "__module__", "")).split(".", 1)[0] == "roost"


def _kind(cls: object) -> str | None:  # noqa: PLR0911 - one arm per kind
    """Which kind of value class ``cls`` is, or None."""
    if not isinstance(cls, type):
        return None
    if issubclass(cls, enum.Enum):
        return "enum"
    if _is_namedtuple(cls):
        return "namedtuple"
    if dataclasses.is_dataclass(cls):
        return "dataclass"
    if _is_pydantic(cls):
        return "pydantic"
    if attrs.has(cls):
        return "attrs"
    return None


def tag_of(cls: type) -> str:
    """The tag a value class is stored under: ``"<module>:<qualname>"``."""
    return f"{cls.__module__}:{cls.__qualname__}"


def _hints(cls: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: those fields stay as stored
        return {}


class _ValueType(_RecordType):
    """A plain Python class as a codec record: how its fields are written and rebuilt."""

    __slots__ = ("_from_data", "_from_fields", "_to_fields", "kind")

    def __init__(
        self,
        cls: type,
        kind: str,
        to_fields: Callable[[Any], dict[str, Any]],
        from_fields: Callable[[Mapping[str, Any]], Any],
        from_data: Callable[[Any], Any],
        *,
        tag: str | None = None,
    ) -> None:
        self._setup(cls, tag or tag_of(cls), 1, None)
        self.kind = kind
        # cbor2 knows no dataclass or pydantic model, but many other classes (tuples,
        # ints, Decimal, sets, ...): those are boxed for the hook (see _walk.Walk.rewrite).
        self.boxed = kind not in ("dataclass", "pydantic") or issubclass(cls, NATIVE_BASES)
        self._to_fields = to_fields
        self._from_fields = from_fields
        self._from_data = from_data

    def unstructure(self, obj: Any) -> dict[str, Any]:
        """The stored field map of ``obj``."""
        return self._to_fields(obj)

    def fast_structure(self) -> Callable[[Mapping[str, Any]], Any] | None:
        """The constructor from a decoded field map."""
        return self._from_fields

    def schema(self) -> None:
        """None: every field of a value class is walked."""
        return

    def load(self, version: Any, fields: Mapping[str, Any]) -> Any:
        """Rebuild an instance from its stored field map."""
        if type(version) is not int or version > self.version:
            raise Error(
                f"value {self.tag!r} was stored with schema version {version!r}, newer than "
                f"this roost reads ({self.version}): upgrade roost",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            )
        try:
            return self._from_fields(fields)
        except Exception as exc:
            raise Error(
                f"cannot decode stored value {self.tag!r} into {self.tag.replace(':', '.')}: "
                f"{_reason(exc)}; if the class changed incompatibly, keep a converter "
                "(App.converter) that reads the old fields",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag},
            ) from exc

    def from_data(self, value: Any) -> Any:
        """``value`` as an instance: itself if it is one, else built from plain data."""
        if isinstance(value, self.cls):
            return value
        return self._from_data(value)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return f"{type(exc).__name__}: {safe_text(exc, 500)}"


def _field_converter(tp: Any) -> Callable[[Any], Any] | None:
    """How a stored field of type ``tp`` becomes that type, or None when it needs nothing."""
    if tp is Any or not needs_structure(tp):
        return None
    return lambda value: structure(value, tp)


def _by_name(
    cls: type, names: tuple[str, ...], hints: Mapping[str, Any]
) -> Callable[[Mapping[str, Any]], Any]:
    """A constructor taking a field map: fields of ``names`` typed by ``hints``."""
    converters = {n: _field_converter(hints.get(n, Any)) for n in names}

    def build(fields: Mapping[str, Any]) -> Any:
        kwargs = {}
        for name, value in fields.items():
            if name not in converters:
                continue  # a field the class no longer has
            convert = converters[name]
            kwargs[name] = value if convert is None else convert(value)
        return cls(**kwargs)

    return build


def _dataclass_type(cls: type) -> _ValueType:
    fields = tuple(dataclasses.fields(cls))
    names = tuple(f.name for f in fields if f.init)
    hints = _hints(cls)
    sets = tuple(
        f.name
        for f in fields
        if typing.get_origin(hints.get(f.name)) in (set, frozenset)
        or hints.get(f.name) in (set, frozenset)
    )
    every = tuple(f.name for f in fields)

    def to_fields(obj: Any) -> dict[str, Any]:
        out = {name: getattr(obj, name) for name in every}
        for name in sets:  # a declared set is stored as a list and rebuilt from its annotation
            value = out[name]
            if isinstance(value, set | frozenset):
                out[name] = list(value)
        return out

    build = _by_name(cls, names, hints)
    return _ValueType(cls, "dataclass", to_fields, build, _mapping_or_fail(cls, build))


def _namedtuple_type(cls: type) -> _ValueType:
    names = tuple(cls._fields)  # type: ignore[attr-defined]
    hints = _hints(cls)
    build = _by_name(cls, names, hints)

    def from_data(value: Any) -> Any:
        if isinstance(value, list | tuple):
            return build(dict(zip(names, value, strict=False)))
        return _mapping_or_fail(cls, build)(value)

    return _ValueType(cls, "namedtuple", lambda obj: obj._asdict(), build, from_data)


def _enum_type(cls: type[enum.Enum]) -> _ValueType:
    def from_fields(fields: Mapping[str, Any]) -> Any:
        return cls(fields["value"])

    return _ValueType(cls, "enum", lambda obj: {"value": obj.value}, from_fields, cls)


def _pydantic_type(cls: Any) -> _ValueType:
    def to_fields(obj: Any) -> dict[str, Any]:
        data: dict[str, Any] = obj.model_dump(mode="json")
        return data

    return _ValueType(cls, "pydantic", to_fields, cls.model_validate, cls.model_validate)


def _mapping_or_fail(cls: type, build: Callable[[Mapping[str, Any]], Any]) -> Callable[[Any], Any]:
    def from_data(value: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping of {cls.__qualname__}'s fields, got {value!r:.80}")
        return build(value)

    return from_data


def _build(cls: type, kind: str) -> _RecordType:
    if kind == "enum":
        return _enum_type(cls)
    if kind == "namedtuple":
        return _namedtuple_type(cls)
    if kind == "dataclass":
        return _dataclass_type(cls)
    if kind == "pydantic":
        return _pydantic_type(cls)
    return _RecordType(cls, tag_of(cls), 1, None)  # an attrs class no one registered


def _add(rtype: _RecordType) -> None:
    _DEFAULT_REGISTRY.add(rtype)
    if isinstance(rtype, _ValueType):
        # Instances rebuilt by the decoder pass through; plain data is built into one.
        _CONVERTER.register_structure_hook(rtype.cls, lambda value, _tp: rtype.from_data(value))
        if rtype.boxed:
            NATIVE_COUNT[0] += 1


# Classes being registered right now (a class whose fields refer back to it).
_REGISTERING: set[type] = set()


def _register_class(cls: type, kind: str) -> _RecordType | None:
    found = _DEFAULT_REGISTRY.by_class.get(cls)
    if found is not None or cls in _REGISTERING:
        return found
    _REGISTERING.add(cls)
    try:
        # The classes its fields name first: its generated constructor finds their hooks.
        if kind in ("dataclass", "namedtuple", "attrs", "pydantic"):
            for tp in _hints(cls).values():
                register_annotation(tp)
        rtype = _build(cls, kind)
        _add(rtype)
        return rtype
    finally:
        _REGISTERING.discard(cls)


def register_annotation(tp: Any) -> None:
    """Register every value class an annotation names (through containers and unions)."""
    kind = _kind(tp)
    if kind is not None:
        if not _is_roosts(tp):
            _register_class(tp, kind)
        return
    for arg in typing.get_args(tp):
        if isinstance(arg, type) or typing.get_origin(arg) is not None:
            register_annotation(arg)


def auto_value_type(cls: type) -> _RecordType | None:
    """The record type of a value class met in a payload, registering it; None if it is none.

    Dataclasses, NamedTuples, plain enums and pydantic models qualify; ``StrEnum``/``IntEnum``
    members and attrs classes only through annotations or a registration.
    """
    kind = _kind(cls)
    if kind is None or kind == "attrs" or _is_roosts(cls):
        return None
    if kind == "enum" and issubclass(cls, NATIVE_BASES):
        return None  # written as its plain value, as before any annotation named it
    return _register_class(cls, kind)


def value_type_for_tag(tag: str) -> _RecordType | None:
    """The value class stored under ``tag``, if its module is imported; registers it."""
    module_name, sep, qualname = tag.partition(":")
    module = sys.modules.get(module_name) if sep else None
    if module is None:
        return None
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    kind = _kind(obj)
    if kind is None or kind == "attrs" or tag_of(obj) != tag:
        return None
    return _register_class(obj, kind)


def add_converter(
    cls: type, encode: Callable[[Any], Any], decode: Callable[[Any], Any], tag: str | None
) -> None:
    """Store instances of ``cls`` as ``encode(obj)`` and rebuild them with ``decode(data)``.

    Raises:
        roost.Error: kind Invalid for a non-class, non-callable hooks, or a class or tag
            already registered otherwise.
    """
    if not isinstance(cls, type):
        raise invalid(f"a converter is for a class, got {cls!r}")
    if not callable(encode) or not callable(decode):
        raise invalid("a converter takes encode(obj) -> data and decode(data) -> obj callables")
    rtype = _ValueType(
        cls,
        "converter",
        lambda obj: {"value": encode(obj)},
        lambda fields: decode(fields["value"]),
        decode,
        tag=tag,
    )
    old = _DEFAULT_REGISTRY.by_class.get(cls)
    if old is not None and not (isinstance(old, _ValueType) and old.kind == "converter"):
        raise invalid(
            f"{tag_of(cls)} is already stored as record {old.tag!r}; a class has one encoding",
            tag=old.tag,
        )
    if old is not None:
        _DEFAULT_REGISTRY.by_class.pop(cls)
        _DEFAULT_REGISTRY.by_tag.pop(old.tag, None)
    _add(rtype)


def needs_structure(tp: Any) -> bool:  # noqa: PLR0911 - one arm per kind
    """Whether a decoded value of type ``tp`` may need converting into it."""
    if isinstance(tp, type):
        if tp in (tuple, set, frozenset):
            return True
        if _is_roosts(tp):
            return False  # roost's own values (a Request, a CronTick) arrive as themselves
        return _kind(tp) is not None or tp in _DEFAULT_REGISTRY.by_class
    origin = typing.get_origin(tp)
    if origin is None:
        return False
    if origin in (tuple, set, frozenset):
        return True
    if origin is typing.Literal or origin is typing.Annotated:
        return False
    return any(needs_structure(a) for a in typing.get_args(tp))


def structure(value: Any, tp: Any) -> Any:
    """``value`` as an instance of the annotation ``tp`` (plain data converted by cattrs).

    Raises:
        Exception: cattrs' or the class's own error when ``value`` does not fit ``tp``.
    """
    if isinstance(tp, type):
        if isinstance(value, tp) and not issubclass(tp, tuple | set | frozenset):
            return value
        rtype = _DEFAULT_REGISTRY.by_class.get(tp)
        if isinstance(rtype, _ValueType):
            return rtype.from_data(value)
    return _CONVERTER.structure(value, tp)


def plain_data(value: Any) -> Any:
    """``value`` with its dataclasses, NamedTuples, enums and pydantic models as plain data.

    For a channel that carries JSON (a client's start arguments): a dataclass or NamedTuple
    becomes a dict of its fields, an enum member its value, a pydantic model its
    ``model_dump(mode="json")``; the entry's annotations turn them back on arrival.
    """
    return _plain(value, inside=False)


def _plain(value: Any, *, inside: bool) -> Any:  # noqa: PLR0911 - one arm per kind
    kind = _kind(type(value))
    if kind == "enum":
        return _plain(value.value, inside=inside)
    if kind == "pydantic":
        return value.model_dump(mode="json")
    if kind == "namedtuple":
        return {k: _plain(v, inside=True) for k, v in value._asdict().items()}
    if kind == "dataclass":
        fields = dataclasses.fields(value)
        return {f.name: _plain(getattr(value, f.name), inside=True) for f in fields}
    if isinstance(value, list | tuple):
        return [_plain(v, inside=inside) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, inside=inside) for k, v in value.items()}
    if inside and isinstance(value, set | frozenset):  # a field declared as a set
        return [_plain(v, inside=inside) for v in value]
    return value


@attrs.frozen
class EntryTypes:
    """An entry's annotations that convert values: per parameter, and of its result."""

    params: tuple[tuple[str, Any] | None, ...]
    """Positional parameters in order: (name, annotation) when it converts, else None."""
    rest: tuple[str, Any] | None
    """The ``*args`` parameter's, when it converts."""
    result: Any
    """The result's annotation when it converts, else None."""

    @property
    def converts_args(self) -> bool:
        """Whether any argument may need converting."""
        return self.rest is not None or any(p is not None for p in self.params)

    def arguments(self, entry: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """``args`` converted to their parameters' annotations.

        Raises:
            roost.Error: kind Invalid naming the parameter whose argument does not fit.
        """
        out = list(args)
        for i, value in enumerate(args):
            spec = self.params[i] if i < len(self.params) else self.rest
            if spec is None:
                continue
            name, tp = spec
            try:
                out[i] = structure(value, tp)
            except Exception as exc:
                raise invalid(
                    f"{entry}: argument {name!r} ({shown(value)[:80]}) is not a "
                    f"{_type_text(tp)}: {_reason(exc)}",
                    entry=entry,
                    parameter=name,
                ) from exc
        return tuple(out)

    def value(self, value: Any) -> Any:
        """A result converted to the annotated type (unchanged when it does not fit)."""
        if self.result is None:
            return value
        try:
            return structure(value, self.result)
        except Exception:  # noqa: BLE001 - a result is never lost to its annotation
            return value


_NO_TYPES: Final = EntryTypes((), None, None)
_TYPES: dict[Callable[..., Any], EntryTypes] = {}


def _type_text(tp: Any) -> str:
    return tp.__qualname__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def entry_types(fn: Callable[..., Any]) -> EntryTypes | None:
    """The converting annotations of ``fn`` (registering their value classes).

    None while they cannot be resolved yet (a name defined later in its module).
    """
    found = _TYPES.get(fn)
    if found is not None:
        return found
    target = inspect.unwrap(fn)
    try:
        hints = typing.get_type_hints(target)
        sig = inspect.signature(target)
    except (NameError, AttributeError, TypeError, ValueError):
        return None
    except Exception:  # noqa: BLE001 - an annotation that fails to evaluate converts nothing
        _TYPES[fn] = _NO_TYPES
        return _NO_TYPES
    for tp in hints.values():
        register_annotation(tp)
    params: list[tuple[str, Any] | None] = []
    rest = None
    for p in sig.parameters.values():
        tp = hints.get(p.name)
        spec = (p.name, tp) if tp is not None and needs_structure(tp) else None
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            params.append(spec)
        elif p.kind is p.VAR_POSITIONAL:
            rest = spec
    result = hints.get("return")
    result = result if result is not None and needs_structure(result) else None
    found = _TYPES[fn] = EntryTypes(tuple(params), rest, result)
    return found


def result_of(fn: Callable[..., Any], value: Any) -> Any:
    """An entry's result (decoded from the store) as its annotated type."""
    found = entry_types(fn)
    return value if found is None else found.value(value)


def wrap_entry(entry: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or a wrapper converting its arguments to their annotated types.

    An entry's arguments arrive decoded from the store (a tuple as a list) or as plain JSON
    from the command line; the wrapper hands the function what its annotations declare.
    """
    found = entry_types(fn)
    if found is not None and not found.converts_args:
        return fn

    def arguments(args: tuple[Any, ...]) -> tuple[Any, ...]:
        types_ = entry_types(fn)
        if types_ is None or not types_.converts_args:
            return args
        return types_.arguments(entry, args)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any) -> Any:
            return await fn(*arguments(args))

        return run_async

    @functools.wraps(fn)
    def run(*args: Any) -> Any:
        return fn(*arguments(args))

    return run
