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
from typing import Any, Final, NamedTuple

import attrs
import cbor2

from roost._errors import ChannelClosed, Error, ErrorKind, NondeterminismError, invalid
from roost._pid import Pid
from roost.storage._registry import (
    _DEFAULT_REGISTRY,
    _PID_HEADER,
    _REGISTRATIONS,
    TAG_ERROR,
    TAG_PID,
    TAG_RECORD,
    Migrate,
    _plain,
    _RecordType,
    _Registry,
    record,
)

__all__ = ["TAG_ERROR", "TAG_PID", "TAG_RECORD", "Codec", "Migrate", "record"]

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


def _show_key(key: Any) -> str:
    text = json.dumps(key, ensure_ascii=False) if isinstance(key, str) else repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


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
            # Every field is scanned, whatever its annotation: a value of the wrong type
            # (a set in a str field) would otherwise be written in a form nothing reads.
            self._require_encodable(fields_map)
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
