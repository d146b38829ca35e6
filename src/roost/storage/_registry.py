"""Storable records: the registry of attrs classes by tag, and the quick encodability scan.

The codec (``_codec``) encodes with what this module knows; the storage format's tag
numbers live here because a record type writes its own header bytes.
"""

from __future__ import annotations

import datetime as dt
import importlib
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, get_args

import attrs
import cattrs
import cbor2
from cattrs.cols import is_any_set, iterable_unstructure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.storage._record_fns import (
    PositionalFns,
    fast_structure,
    fast_unstructure,
    positional_fns,
)
from roost.storage._rows import TAG_PID
from roost.storage._schema import Schema, schema

__all__ = ["TAG_ERROR", "TAG_PID", "TAG_RECORD", "Migrate", "record"]

TAG_ERROR: Final = 39002
TAG_RECORD: Final = 39003

# Encoded tag heads (major type 6, two-byte argument) of the tags above.
_TAG_RECORD_HEAD: Final = b"\xd9" + TAG_RECORD.to_bytes(2, "big")

Migrate = Callable[[int, dict[str, Any]], dict[str, Any]]
"""A schema migration hook: ``migrate(stored_version, fields) -> fields`` for the current
version. It receives the stored field map (already decoded) and returns the new one."""

_C = TypeVar("_C", bound=type)


def _identity(value: Any) -> Any:
    return value


def _passthrough(value: Any, _type: Any) -> Any:
    return value


def _is_opaque(tp: Any) -> bool:
    # Values the codec itself tags: cattrs must hand them over untouched when structuring.
    return isinstance(tp, type) and issubclass(tp, Pid | Error | uuid.UUID | dt.datetime)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter()
    # Nested attrs instances stay objects, so cbor2's hook tags each with its own type and
    # schema version (instead of cattrs flattening them into untyped dicts).
    conv.register_unstructure_hook_func(attrs.has, _identity)
    # A field declared as a set is stored as a list and rebuilt as a set from its annotation;
    # an undeclared (Any) set stays a set and is refused like any other payload set.
    conv.register_unstructure_hook_factory(
        lambda tp: is_any_set(tp) and bool(get_args(tp)),
        lambda tp: iterable_unstructure_factory(tp, conv, unstructure_to=list),
    )
    conv.register_structure_hook_func(_is_opaque, _passthrough)

    def attrs_factory(tp: Any) -> Callable[[Any, Any], Any]:
        from_dict = make_dict_structure_fn(tp, conv)

        def structure(value: Any, _type: Any) -> Any:
            # Nested records were already rebuilt by the decoder's tag handler.
            return value if isinstance(value, tp) else from_dict(value, tp)

        return structure

    conv.register_structure_hook_factory(attrs.has, attrs_factory)
    return conv


_CONVERTER: Final = _make_converter()


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class _RecordType:
    """One registered attrs class: its tag, schema version and (lazily built) cattrs fns."""

    __slots__ = (
        "_fast",
        "_fast_built",
        "_positional",
        "_positional_built",
        "_schema",
        "_schema_built",
        "_structure",
        "_unstructure",
        "boxed",
        "cls",
        "envelope",
        "header",
        "migrate",
        "tag",
        "version",
    )

    def __init__(
        self,
        cls: type,
        tag: str,
        version: int,
        migrate: Migrate | None,
        *,
        positional: bool = False,
    ) -> None:
        if not isinstance(cls, type) or not attrs.has(cls):
            raise invalid(f"only attrs classes can be records, got {cls!r}")
        self._setup(cls, tag, version, migrate, positional=positional)

    def _setup(
        self,
        cls: type,
        tag: str,
        version: int,
        migrate: Migrate | None,
        *,
        positional: bool = False,
    ) -> None:
        if not isinstance(tag, str) or not tag:
            raise invalid(f"a record tag must be a non-empty string, got {tag!r}")
        if type(version) is not int or version < 1:
            raise invalid(f"a record schema version must be an int >= 1, got {version!r}")
        if migrate is not None and not callable(migrate):
            raise invalid(f"migrate must be callable(version, fields) -> fields, got {migrate!r}")
        self.cls = cls
        # Whether cbor2 may write instances natively, never asking the codec's hook (a
        # NamedTuple, an IntEnum, a Decimal with a converter): the codec boxes them first.
        self.boxed = False
        # roost's own records carry payloads into the store: a top-level one may hold a
        # payload of the full payload depth (see the codec's ENVELOPE_DEPTH).
        self.envelope = cls.__module__.split(".", 1)[0] == "roost"
        self.tag = tag
        self.version = version
        self.migrate = migrate
        # Tag TAG_RECORD, an array of 3, the type tag and the version: what precedes the
        # field map in every stored instance.
        self.header = _TAG_RECORD_HEAD + b"\x83" + cbor2.dumps(tag) + cbor2.dumps(version)
        self._unstructure: Callable[[Any], dict[str, Any]] | None = None
        self._structure: Callable[[Mapping[str, Any], Any], Any] | None = None
        # None when the class needs cattrs (see _record_fns).
        self._fast: Callable[[Mapping[str, Any]], Any] | None = None
        self._fast_built = False
        self._schema: Schema | None = None
        self._schema_built = False
        # Stored as a list of field values (see _record_fns.positional_fns), built on first
        # use. Only roost's own records are positional: their fields are appended to only.
        if positional and (not self.envelope or migrate is not None):
            # Only roost's own records, whose fields are only ever appended (no migrate).
            raise invalid(
                f"{_qualname(cls)}: only roost's own records without migrate are positional"
            )
        self._positional: PositionalFns | None = None
        self._positional_built = not positional

    def unstructure(self, obj: Any) -> dict[str, Any]:
        """Return the field map of ``obj`` (nested records stay objects)."""
        fn = self._unstructure
        if fn is None:
            # Built on first use: forward references are resolvable only once the defining
            # module has finished importing.
            fn = fast_unstructure(self.cls) or make_dict_unstructure_fn(self.cls, _CONVERTER)
            self._unstructure = fn
        return fn(obj)

    def fast_structure(self) -> Callable[[Mapping[str, Any]], Any] | None:
        """The generated constructor for this class, or None when it needs cattrs."""
        if not self._fast_built:
            self._fast, self._fast_built = fast_structure(self.cls), True
        return self._fast

    def positional(self) -> PositionalFns | None:
        """How this record is stored as a list of its field values, or None (a field map)."""
        if not self._positional_built:
            self._positional, self._positional_built = positional_fns(self.cls), True
        return self._positional

    def load_values(self, version: Any, values: list[Any]) -> Any:
        """Rebuild an instance from a stored list of field values (a positional record)."""
        fns = self.positional()
        if fns is None or type(version) is not int or version > self.version:
            raise Error(
                f"cannot decode record {self.tag!r} (schema version {version!r}): it is "
                f"stored as a list of field values, which {_qualname(self.cls)} at version "
                f"{self.version} does not read; run the roost version that wrote this store",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            )
        if len(values) > len(fns.names):
            raise Error(
                f"cannot decode record {self.tag!r}: stored with {len(values)} fields, "
                f"{_qualname(self.cls)} has {len(fns.names)}; it was written by a newer "
                "version: run that version on this data dir",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "stored": len(values), "known": len(fns.names)},
            )
        try:
            return fns.build(values)
        except Exception as exc:  # noqa: BLE001 - any misfit of a stored value: the row is bad
            raise Error(
                f"cannot decode record {self.tag!r} (schema version {version}) into "
                f"{_qualname(self.cls)}: a stored value does not fit its field "
                f"({type(exc).__name__}: {exc})",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            ) from None

    def schema(self) -> Schema | None:
        """How the codec checks this record, if it is one of roost's own (see ``_schema``).

        None for any other record: the codec walks all its fields.
        """
        if not self._schema_built:
            self._schema = schema(self.cls) if self.envelope else None
            self._schema_built = True
        return self._schema

    def load(self, version: Any, fields: Mapping[str, Any]) -> Any:
        """Rebuild an instance from a stored field map, migrating older schema versions."""
        if type(version) is not int or version > self.version:
            raise Error(
                f"record {self.tag!r} was stored with schema version {version!r}, but "
                f"{_qualname(self.cls)} is at version {self.version}: upgrade the application",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            )
        if version < self.version and self.migrate is not None:
            data: Mapping[str, Any] = self._migrate(version, dict(fields))
        else:
            data = fields
            fast = self.fast_structure()
            if fast is not None:
                try:
                    return fast(data)
                except Exception:  # noqa: BLE001, S110 - cattrs below fills in defaults of
                    pass  # fields added since this was stored, or explains what is wrong
        fn = self._structure
        if fn is None:
            fn = self._structure = make_dict_structure_fn(self.cls, _CONVERTER)
        try:
            return fn(data, self.cls)
        except Exception as exc:
            if isinstance(exc, cattrs.BaseValidationError):
                reason = "; ".join(cattrs.transform_error(exc))
            else:
                reason = f"{type(exc).__name__}: {exc}"
            raise Error(
                f"cannot decode record {self.tag!r} (schema version {version}) into "
                f"{_qualname(self.cls)}: {reason}; if the class changed, register it "
                "with a migrate hook",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            ) from exc

    def _migrate(self, version: int, data: dict[str, Any]) -> dict[str, Any]:
        assert self.migrate is not None
        try:
            migrated = self.migrate(version, data)
        except Error:
            raise
        except Exception as exc:
            raise Error(
                f"migrating record {self.tag!r} from schema version {version} to "
                f"{self.version} failed: {type(exc).__name__}: {exc}",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": self.tag, "version": version},
            ) from exc
        if not isinstance(migrated, Mapping):
            raise Error(
                f"the migrate hook of record {self.tag!r} must return a field mapping, "
                f"got {type(migrated).__name__}",
                kind=ErrorKind.INTERNAL,
                retryable=False,
            )
        return dict(migrated)


# Bumped by every registration anywhere, so codecs know when their tag caches are stale.
_REGISTRATIONS: Final = [0]


class _Registry:
    """Record types by tag and by class."""

    def __init__(self) -> None:
        self.by_tag: dict[str, _RecordType] = {}
        self.by_class: dict[type, _RecordType] = {}

    def add(self, rtype: _RecordType, *others: _Registry) -> None:
        for registry in (self, *others):
            registry.check_free(rtype)
        _REGISTRATIONS[0] += 1  # invalidates every codec's decoder cache
        stale = self.by_tag.get(rtype.tag)
        if stale is not None:
            self.by_class.pop(stale.cls, None)
        self.by_tag[rtype.tag] = rtype
        self.by_class[rtype.cls] = rtype

    def check_free(self, rtype: _RecordType) -> None:
        old = self.by_tag.get(rtype.tag)
        # The same class re-registered (or re-created by a module reload) just replaces itself.
        if old is not None and _qualname(old.cls) != _qualname(rtype.cls):
            raise invalid(
                f"record tag {rtype.tag!r} is already used by {_qualname(old.cls)}; "
                f"give {_qualname(rtype.cls)} another tag",
                tag=rtype.tag,
            )
        old = self.by_class.get(rtype.cls)
        if old is not None and old.tag != rtype.tag:
            raise invalid(
                f"{_qualname(rtype.cls)} is already registered as record {old.tag!r}; "
                "a class has exactly one tag",
                tag=rtype.tag,
            )


_DEFAULT_REGISTRY: Final = _Registry()

# The modules that define roost's own record types (workflow histories, queue messages).
# ``roost/__init__`` names them, and the first decode of a tag nobody registered imports
# them: a stored record reads back before the module of its type was needed otherwise.
_RECORD_MODULES: list[str] = []


def record_modules(*modules: str) -> None:
    """Import ``modules`` (they register record types) before a decode gives up on a tag."""
    _RECORD_MODULES.extend(m for m in modules if m not in _RECORD_MODULES)


def load_record_modules() -> bool:
    """Import the modules named by ``record_modules`` not imported yet; whether there were any."""
    if not _RECORD_MODULES:
        return False
    while _RECORD_MODULES:
        module = _RECORD_MODULES[0]
        importlib.import_module(module)  # a failed import stays pending, and is retried
        if _RECORD_MODULES and _RECORD_MODULES[0] == module:  # (a nested call may have taken it)
            del _RECORD_MODULES[0]
    return True


def record(tag: str, version: int = 1, *, migrate: Migrate | None = None) -> Callable[[_C], _C]:
    """Register an attrs class as a storable record in the registry every `Codec` knows.

    Args:
        tag: the stable type tag written with each instance; never reuse it for another class.
        version: the current schema version (bump it when fields change incompatibly).
        migrate: ``migrate(stored_version, fields) -> fields``, called when an instance
            stored with an older version is decoded.

    Returns:
        A class decorator that returns the class unchanged.

    Raises:
        roost.Error: kind Invalid for a non-attrs class or a tag already taken.
    """

    def decorate(cls: _C) -> _C:
        _DEFAULT_REGISTRY.add(_RecordType(cls, tag, version, migrate))
        return cls

    return decorate


def positional_record(tag: str, version: int) -> Callable[[_C], _C]:
    """Register one of roost's own records, stored as the list of its field values.

    Its fields are only ever added at the end (a shorter stored row gets the defaults of
    the rest); a row stored as a field map, before the class was positional, still reads.
    """

    def decorate(cls: _C) -> _C:
        _DEFAULT_REGISTRY.add(_RecordType(cls, tag, version, None, positional=True))
        return cls

    return decorate
