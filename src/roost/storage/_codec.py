"""The CBOR codec for payloads and stored records: cbor2 plus one dedicated cattrs converter.

What round-trips exactly: None, bool, int (any size), float, str, bytes, list, dict (keys of
any encodable, hashable type), aware datetimes, ``uuid.UUID``, ``roost.Pid``, ``roost.Error``
and attrs classes registered with :func:`record` or :meth:`Codec.register`. Deliberate
conversions, all documented here rather than surprising later:

- tuples come back as lists (a tuple used as a dict key comes back as a tuple);
- subclasses of str, int, float, bytes, dict and list come back as the base type (a
  ``StrEnum`` member comes back as its plain ``str`` value);
- an aware datetime comes back with a fixed UTC offset (``timezone(offset)``): the same
  instant, but a ``ZoneInfo`` zone name is not kept (an offset that is not a whole number of
  minutes, such as a historical local mean time, is refused: convert to UTC first);
- an ``Error`` keeps kind, message, retryable and details; roost's own subclasses
  (``NondeterminismError``, ``ChannelClosed``) come back as themselves, any other subclass
  as a plain ``Error``; the traceback, cause and ``pid`` are not stored;
- inside a registered record, typed fields are rebuilt by cattrs from their annotations, so
  a ``tuple[int, ...]``, ``set[str]`` or enum field comes back with its declared type.

Everything else (sets, Decimal, dates, naive datetimes, arbitrary objects, ...) is refused with
a ``roost.Error`` of kind Invalid that names the type and where it sits in the value, e.g.
``payload["items"][2]: cannot encode object of type 'set' (use a list)``.

Plain JSON-like payloads never go through cattrs: a quick type scan accepts them and cbor2
encodes them in one call. Pids, Errors and records reach cbor2's ``default`` hook and are
written under private semantic tags; only when the scan or the hook rejects something does
the slow path walk the value again to say exactly what and where. Decoding relies on cbor2 6's
``semantic_decoders`` (mutable tag contents), so cbor2 >= 6 is required.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple, TypeVar, get_args

import attrs
import cattrs
import cbor2
from cattrs.cols import is_any_set, iterable_unstructure_factory
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from roost._errors import ChannelClosed, Error, ErrorKind, NondeterminismError, invalid
from roost._pid import Pid
from roost.storage._record_fns import checked_fields, fast_structure, fast_unstructure

__all__ = ["TAG_ERROR", "TAG_PID", "TAG_RECORD", "Codec", "Migrate", "record"]

# Private semantic tags of roost's storage format; never reuse or renumber them.
TAG_PID: Final = 39001
TAG_ERROR: Final = 39002
TAG_RECORD: Final = 39003

# Encoded tag heads (major type 6, two-byte argument) of the tags above.
_TAG_RECORD_HEAD: Final = b"\xd9" + TAG_RECORD.to_bytes(2, "big")
_PID_HEADER: Final = b"\xd9" + TAG_PID.to_bytes(2, "big")

Migrate = Callable[[int, dict[str, Any]], dict[str, Any]]
"""A schema migration hook: ``migrate(stored_version, fields) -> fields`` for the current
version. It receives the stored field map (already decoded) and returns the new one."""

_C = TypeVar("_C", bound=type)

_SCALARS: Final = frozenset({str, int, float, bool, bytes, type(None)})
_LEAVES: Final = frozenset({Pid, uuid.UUID})
_KNOWN_ERRORS: Final[Mapping[str, type[Error]]] = {
    "NondeterminismError": NondeterminismError,
    "ChannelClosed": ChannelClosed,
}
_HINTS: Final = {
    "set": "use a list",
    "frozenset": "use a list",
    "Decimal": "use a str or an int",
    "Fraction": "use a pair of ints",
    "date": "use an aware UTC datetime or an ISO string",
    "time": "use an ISO string",
    "timedelta": "use a number of seconds",
    "complex": "use a pair of floats",
    "bytearray": "use bytes",
    "memoryview": "use bytes",
}


class _Problem(NamedTuple):
    path: str
    reason: str
    type_name: str


class _Unencodable(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """Raised inside cbor2's hook to divert to the slow, diagnosing path."""


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
        "_checked",
        "_fast",
        "_fast_built",
        "_structure",
        "_unstructure",
        "cls",
        "header",
        "migrate",
        "tag",
        "version",
    )

    def __init__(self, cls: type, tag: str, version: int, migrate: Migrate | None) -> None:
        if not isinstance(cls, type) or not attrs.has(cls):
            raise invalid(f"only attrs classes can be records, got {cls!r}")
        if not isinstance(tag, str) or not tag:
            raise invalid(f"a record tag must be a non-empty string, got {tag!r}")
        if type(version) is not int or version < 1:
            raise invalid(f"a record schema version must be an int >= 1, got {version!r}")
        if migrate is not None and not callable(migrate):
            raise invalid(f"migrate must be callable(version, fields) -> fields, got {migrate!r}")
        self.cls = cls
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
        self._checked: tuple[str, ...] | bool | None = False  # False: not built yet

    def unstructure(self, obj: Any) -> dict[str, Any]:
        """Return the field map of ``obj`` (nested records stay objects)."""
        fn = self._unstructure
        if fn is None:
            # Built on first use: forward references are resolvable only once the defining
            # module has finished importing.
            fn = fast_unstructure(self.cls) or make_dict_unstructure_fn(self.cls, _CONVERTER)
            self._unstructure = fn
        return fn(obj)

    def require_encodable(self, fields: dict[str, Any]) -> bool:
        """True when the field map of one instance can be written as is.

        Only fields whose declared type admits values the codec refuses are scanned.
        """
        checked = self._checked
        if checked is False:
            checked = self._checked = checked_fields(self.cls)
        if checked is None or checked is True:
            return _plain(fields)
        for name in checked:
            value = fields[name]
            if type(value) not in _SCALARS and not _plain(value):
                return False
        return True

    def fast_structure(self) -> Callable[[Mapping[str, Any]], Any] | None:
        """The generated constructor for this class, or None when it needs cattrs."""
        if not self._fast_built:
            self._fast, self._fast_built = fast_structure(self.cls), True
        return self._fast

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


def _show_key(key: Any) -> str:
    text = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _plain(value: Any) -> bool:
    """Fast scan: True when cbor2 can encode ``value`` as is (special leaves via the hook)."""
    tp = type(value)
    if tp in _SCALARS or tp in _LEAVES:
        return True
    if tp is dict:
        return _plain_dict(value)
    if tp is list or tp is tuple:
        return _plain_items(value)
    if tp is dt.datetime:
        offset = value.utcoffset()
        return offset is not None and not (offset.seconds % 60 or offset.microseconds)
    # Subclasses of scalars (StrEnum, IntEnum values in records) encode as the scalar.
    return isinstance(value, _SCALAR_BASES | Error) or hasattr(tp, "__attrs_attrs__")


_SCALAR_BASES = str | int | float | bytes


def _plain_dict(value: dict[Any, Any]) -> bool:
    # Loops, not all(genexpr): this runs for every event written and is measurably faster.
    for k, v in value.items():
        if (type(k) not in _SCALARS and not _plain(k)) or (
            type(v) not in _SCALARS and not _plain(v)
        ):
            return False
    return True


def _plain_items(value: list[Any] | tuple[Any, ...]) -> bool:
    for v in value:  # noqa: SIM110 - hot path: a plain loop beats all(genexpr)
        if type(v) not in _SCALARS and not _plain(v):
            return False
    return True


class Codec:
    """Encodes payloads and records to CBOR bytes and back.

    A codec knows the records registered with :func:`record` (at any time, also after it was
    created) plus those registered on itself with :meth:`register`. It holds no per-call
    state, so one instance can be shared by every task and thread.
    """

    def __init__(self) -> None:
        self._local = _Registry()
        self._decoders: dict[int, Callable[[Any, bool], Any]] = {
            TAG_PID: _decode_pid,
            TAG_ERROR: _decode_error,
            TAG_RECORD: self._decode_record,
        }
        # tag -> (schema version, generated constructor) of records that need no cattrs;
        # valid while no record is registered anywhere (see _REGISTRATIONS).
        self._fast_tags: dict[str, tuple[int, Callable[[Mapping[str, Any]], Any]]] = {}
        self._fast_gen = _REGISTRATIONS[0]
        self._types: dict[type, _RecordType] = {}  # record class -> its type, same validity
        self._types_gen = _REGISTRATIONS[0]

    def register(
        self, cls: type, tag: str, version: int = 1, *, migrate: Migrate | None = None
    ) -> None:
        """Register an attrs class as a record known to this codec only.

        Args:
            cls: the attrs class.
            tag: its stable type tag (unique among this codec's and the default records).
            version: its current schema version.
            migrate: ``migrate(stored_version, fields) -> fields`` for older versions.

        Raises:
            roost.Error: kind Invalid for a non-attrs class or a tag already taken.
        """
        self._local.add(_RecordType(cls, tag, version, migrate), _DEFAULT_REGISTRY)

    def encode(self, value: Any, *, what: str = "payload") -> bytes:
        """Encode a value to CBOR bytes.

        Args:
            value: the payload (see the module docstring for what is accepted).
            what: how error messages name the value, e.g. ``"args[0]"``.

        Returns:
            The CBOR encoding.

        Raises:
            roost.Error: kind Invalid, naming the offending type and its path in ``value``.
        """
        try:
            if _plain(value):
                return cbor2.dumps(value, default=self._default)
        except (_Unencodable, RecursionError):
            pass
        return self._encode_checked(value, what)

    def decode(self, data: bytes | bytearray | memoryview) -> Any:
        """Decode CBOR bytes written by :meth:`encode`.

        Raises:
            roost.Error: kind Internal for corrupt data, an unknown record tag (named in the
                message) or a record that cannot be rebuilt; kind Invalid when ``data`` is
                not bytes.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise invalid(f"decode() takes bytes, got {type(data).__name__}")
        try:
            return cbor2.loads(data, semantic_decoders=self._decoders, tag_hook=_unknown_tag)
        except cbor2.CBORDecodeError as exc:
            cause = exc.__cause__
            if isinstance(cause, Error):
                raise cause from None
            raise Error(
                f"cannot decode stored value: {exc}"
                + (f" ({type(cause).__name__}: {cause})" if cause is not None else ""),
                kind=ErrorKind.INTERNAL,
                retryable=False,
            ) from exc

    def _lookup_class(self, cls: type) -> _RecordType | None:
        return self._local.by_class.get(cls) or _DEFAULT_REGISTRY.by_class.get(cls)

    def _lookup_tag(self, tag: Any) -> _RecordType | None:
        if not isinstance(tag, str):
            return None
        return self._local.by_tag.get(tag) or _DEFAULT_REGISTRY.by_tag.get(tag)

    def _default(self, encoder: cbor2.CBOREncoder, value: Any) -> None:
        """cbor2's hook for the types it does not know: records, Pids and Errors.

        Writes the tag and array headers itself: the same bytes as a ``CBORTag``, without
        building one per value (this runs for every record of every workflow step).
        """
        rtype = self._record_type(type(value))
        if rtype is not None:
            try:
                fields_map = rtype.unstructure(value)
            except Exception as exc:
                raise _Unencodable from exc
            if not rtype.require_encodable(fields_map) and (
                self._find_problem(fields_map, "", set()) is not None
            ):
                raise _Unencodable
            encoder.write(rtype.header)
            encoder.encode_map(fields_map)
            return
        if isinstance(value, Pid):
            encoder.write(_PID_HEADER)
            encoder.encode_array([value.node, value.host, value.id])
            return
        if isinstance(value, Error):
            name = type(value).__name__
            known = name if _KNOWN_ERRORS.get(name) is type(value) else None
            fields = [value.kind.value, value.message, value.retryable, value.details, known]
            self._require_encodable(fields)
            encoder.encode(cbor2.CBORTag(TAG_ERROR, fields))
            return
        raise _Unencodable

    def _record_type(self, cls: type) -> _RecordType | None:
        if self._types_gen != _REGISTRATIONS[0]:
            self._types.clear()
            self._types_gen = _REGISTRATIONS[0]
        rtype = self._types.get(cls)
        if rtype is None:
            rtype = self._lookup_class(cls)
            if rtype is not None:
                self._types[cls] = rtype
        return rtype

    def _require_encodable(self, value: Any) -> None:
        if not _plain(value) and self._find_problem(value, "", set()) is not None:
            raise _Unencodable

    def _encode_checked(self, value: Any, what: str) -> bytes:
        """The slow path: find the exact problem, or encode what the quick scan doubted."""
        try:
            problem = self._find_problem(value, what, set())
        except RecursionError:
            raise invalid(f"{what}: the value is nested too deeply to encode") from None
        if problem is not None:
            path, reason, type_name = problem
            raise invalid(f"{path}: {reason}", path=path, type=type_name)
        try:
            return cbor2.dumps(value, default=self._default)
        except (_Unencodable, cbor2.CBOREncodeError, RecursionError) as exc:
            raise invalid(f"{what}: cannot encode the value ({type(exc).__name__})") from exc

    def _find_problem(self, value: Any, path: str, active: set[int]) -> _Problem | None:
        """Return the first unencodable part of ``value`` (with its path), or None."""
        if value is None or isinstance(value, str | bytes | int | float | uuid.UUID | Pid):
            return None
        if isinstance(value, dict | list | tuple):
            if id(value) in active:
                reason = "the value contains itself (a reference cycle)"
                return _Problem(path, reason, type(value).__name__)
            active.add(id(value))
            try:
                return self._find_in_container(value, path, active)
            finally:
                active.discard(id(value))
        if isinstance(value, dt.datetime):
            return _datetime_problem(value, path)
        if isinstance(value, Error):
            return self._find_problem(
                value.message, f"{path}.message", active
            ) or self._find_problem(value.details, f"{path}.details", active)
        return self._record_problem(value, path, active)

    def _find_in_container(
        self, value: dict[Any, Any] | list[Any] | tuple[Any, ...], path: str, active: set[int]
    ) -> _Problem | None:
        if isinstance(value, dict):
            for k, v in value.items():
                where = f"{path}[{_show_key(k)}]"
                found = self._find_problem(k, f"{where} (the key)", active)
                found = found or self._find_problem(v, where, active)
                if found is not None:
                    return found
            return None
        for i, v in enumerate(value):
            found = self._find_problem(v, f"{path}[{i}]", active)
            if found is not None:
                return found
        return None

    def _record_problem(self, value: Any, path: str, active: set[int]) -> _Problem | None:
        tp = type(value)
        name = tp.__name__
        rtype = self._lookup_class(tp)
        if rtype is None:
            if attrs.has(tp):
                hint = 'it is an attrs class: register it with @roost.storage.record("some-tag")'
            else:
                hint = _HINTS.get(name, "")
            reason = f"cannot encode object of type {name!r}" + (f" ({hint})" if hint else "")
            return _Problem(path, reason, name)
        try:
            fields = rtype.unstructure(value)
        except Exception as exc:  # noqa: BLE001 - any unstructure failure is the answer itself
            return _Problem(path, f"cannot unstructure {name!r}: {type(exc).__name__}: {exc}", name)
        for field_name, field_value in fields.items():
            found = self._find_problem(field_value, f"{path}.{field_name}", active)
            if found is not None:
                return found
        return None

    def _decode_record(self, value: Any, _immutable: bool) -> Any:
        try:
            tag, version, fields = value
            hit = self._fast_tags.get(tag)
        except (TypeError, ValueError):
            raise _corrupt("record", value) from None
        if hit is not None and hit[0] == version and self._fast_gen == _REGISTRATIONS[0]:
            try:
                return hit[1](fields)
            except Exception:  # noqa: BLE001, S110 - the full path below explains the problem
                pass
        rtype = self._lookup_tag(tag)
        if rtype is None:
            raise Error(
                f"cannot decode record type {tag!r} (schema version {version!r}): no attrs "
                f"class is registered under that tag; import the module that defines it, or "
                f"register it with @roost.storage.record({tag!r})",
                kind=ErrorKind.INTERNAL,
                retryable=False,
                details={"tag": tag, "version": version},
            )
        if not isinstance(fields, Mapping):
            raise _corrupt(f"record {tag!r}", value)
        loaded = rtype.load(version, fields)
        self._cache_fast(rtype)
        return loaded

    def _cache_fast(self, rtype: _RecordType) -> None:
        if self._fast_gen != _REGISTRATIONS[0]:
            self._fast_tags.clear()
            self._fast_gen = _REGISTRATIONS[0]
        fast = rtype.fast_structure()
        if fast is not None:
            self._fast_tags[rtype.tag] = (rtype.version, fast)


def _datetime_problem(value: dt.datetime, path: str) -> _Problem | None:
    offset = value.utcoffset()
    if offset is None:
        reason = (
            "cannot encode a naive datetime (it has no tzinfo): use an aware UTC datetime, "
            "e.g. datetime.now(timezone.utc)"
        )
    elif offset.seconds % 60 or offset.microseconds:
        # CBOR (RFC 3339) offsets have minute precision; cbor2 would write an unreadable one.
        reason = (
            f"cannot encode a datetime whose UTC offset {offset} is not a whole number of "
            "minutes: use an aware UTC datetime, e.g. value.astimezone(timezone.utc)"
        )
    else:
        return None
    return _Problem(path, reason, "datetime")


def _corrupt(what: str, value: Any) -> Error:
    return Error(
        f"cannot decode stored {what}: malformed value {value!r:.80}",
        kind=ErrorKind.INTERNAL,
        retryable=False,
    )


def _decode_pid(value: Any, _immutable: bool) -> Pid:
    # Parts that were a valid PID when written are trusted: re-validating every stored PID
    # was a measurable share of replay and recovery. Only their types are checked.
    try:
        node, host, ident = value
    except (TypeError, ValueError):
        raise _corrupt("Pid", value) from None
    if type(node) is not str or type(host) is not str or type(ident) is not str:
        raise _corrupt("Pid", value)
    return Pid.trusted(node, host, ident)


def _decode_error(value: Any, _immutable: bool) -> Error:
    try:
        kind_text, message, retryable, details, name = value
    except (TypeError, ValueError):
        raise _corrupt("Error", value) from None
    try:
        kind = ErrorKind(kind_text)
    except ValueError:
        # A kind added by a later roost version: keep the error readable.
        kind = ErrorKind.UNKNOWN
    cls = _KNOWN_ERRORS.get(name, Error) if isinstance(name, str) else Error
    err = cls.__new__(cls)
    Error.__init__(err, message, kind=kind, retryable=retryable, details=details)
    return err


def _unknown_tag(tag: cbor2.CBORTag, _immutable: bool) -> Any:
    raise Error(
        f"cannot decode stored value: unknown CBOR tag {tag.tag} (not written by roost's codec)",
        kind=ErrorKind.INTERNAL,
        retryable=False,
        details={"cbor_tag": tag.tag},
    )
