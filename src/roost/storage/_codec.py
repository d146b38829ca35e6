"""The CBOR codec for payloads and stored records: cbor2 plus one dedicated cattrs converter.

What round-trips exactly: None, bool, int (any size), float, str, bytes, list, dict (keys of
any encodable, hashable type), aware datetimes, ``uuid.UUID``, ``roost.Pid``, ``roost.Error``,
attrs classes registered with :func:`record` or :meth:`Codec.register`, and dataclasses,
enums, NamedTuples, pydantic models and classes with a converter (``roost.storage._values``).
Deliberate
conversions, all documented here rather than surprising later:

- tuples come back as lists (a tuple used as a dict key comes back as a tuple);
- subclasses of str, int, float, bytes, dict and list come back as the base type (a
  ``StrEnum`` member comes back as its plain ``str`` value, unless an entry's annotation
  names its class);
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

So is a string with a lone surrogate (it has no UTF-8 form), and a value that nests deeper
than ``MAX_DEPTH`` levels: cbor2's decoder stops at a fixed depth, and the encoder refuses
what the decoder could not read back, counting levels the same way.

One walk over the value (``roost.storage._walk``) checks all of that, measures the depth
and unstructures records (of roost's own records only the fields that may hold payloads
are walked, see ``roost.storage._schema``); cbor2 then encodes it in one call, its
``default`` hook writing Pids, Errors and records under private semantic tags. Decoding
relies on cbor2 6's ``semantic_decoders`` (mutable tag contents), so cbor2 >= 6 is required.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import cbor2

from roost._errors import Error, ErrorKind, invalid, safe_text, type_name
from roost._pid import Pid
from roost._text import surrogate_error
from roost.storage._registry import (
    _DEFAULT_REGISTRY,
    _REGISTRATIONS,
    TAG_ERROR,
    TAG_PID,
    TAG_RECORD,
    Migrate,
    _RecordType,
    _Registry,
    load_record_modules,
    record,
)
from roost.storage._values import NATIVE_COUNT, auto_value_type, value_type_for_tag
from roost.storage._walk import KNOWN_ERRORS, Refused, TooDeep, Unencodable, Walk, find_surrogate

__all__ = [
    "ENVELOPE_DEPTH",
    "MAX_DEPTH",
    "STORED_DEPTH",
    "TAG_ERROR",
    "TAG_PID",
    "TAG_RECORD",
    "Codec",
    "Migrate",
    "record",
]


MAX_DEPTH: Final = 256
"""How deep a payload may nest, counted as cbor2's decoder counts (see ``roost.storage._walk``):
each non-empty list, tuple or dict is one level, a datetime, UUID or big int one, a Pid two,
an Error two plus its details, a record three plus its fields."""
ENVELOPE_DEPTH: Final = 32
"""The levels roost's own records may add around a payload (a history event inside an
activation, a start message inside a start event, ...); the deepest adds fewer than 16."""
STORED_DEPTH: Final = MAX_DEPTH + ENVELOPE_DEPTH
"""The deepest value ever written or read: the decoder's ``max_depth``, and the encoder's
limit for roost's own records (a value that is not one of them gets ``MAX_DEPTH``)."""


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
        # class -> its record type (None: not a record), valid as long as _fast_tags
        self._types: dict[type, _RecordType | None] = {}
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

    def encode(self, value: Any, *, what: str = "payload", envelope: bool | None = None) -> bytes:
        """Encode a value to CBOR bytes.

        Args:
            value: the payload (see the module docstring for what is accepted).
            what: how error messages name the value, e.g. ``"args[0]"``.
            envelope: whether ``value`` is a stored record around payloads, allowed
                ``STORED_DEPTH`` levels instead of ``MAX_DEPTH``; by default, when it is
                one of roost's own records.

        Returns:
            The CBOR encoding.

        Raises:
            roost.Error: kind Invalid, naming the offending part and its path in ``value``:
                an unencodable type, a string with a lone surrogate, or nesting deeper than
                the limit.
        """
        if envelope is None:
            tp = type(value)
            rtype = None if tp is dict or tp is list else self._record_type(tp)
            envelope = rtype is not None and rtype.envelope
            if envelope:
                assert rtype is not None
                data = self._encode_typed(value, rtype)
                if data is not None:
                    return data
        return self._encode_walked(value, what, STORED_DEPTH if envelope else MAX_DEPTH)

    def encode_typed(
        self, value: Any, payloads: Iterable[Any] | None, *, inner: int
    ) -> bytes | None:
        """Encode ``value``, walking only ``payloads``: the user payloads it holds.

        For a stored row roost builds itself (a history row) whose parts other than
        ``payloads`` are of types roost fills (see ``roost.storage._schema``): those parts
        are not walked. Each payload is allowed ``STORED_DEPTH - inner`` levels, ``inner``
        being the levels of the row above it, so the row fits the decoder's depth.

        Returns:
            The CBOR encoding, or None when a check or cbor2 refused something: then
            :meth:`encode` of the same value (the full walk) names the problem. None
            too when ``payloads`` is None (the caller found a part of the wrong type).
        """
        if payloads is None:
            return None
        walk = Walk(self._record_type)
        return _dump_typed(value, walk, payloads, STORED_DEPTH - inner)

    def payload_walk(self) -> Walk:
        """A walk for one stored row's payloads (``roost.storage._rows.write_payload``)."""
        return Walk(self._record_type)

    def encode_checked(self, value: Any) -> bytes:
        """Encode one of roost's records whose payloads were walked already.

        For a record whose payload fields hold the very objects another row of the same
        write checked at the same allowance (an activity task's arguments and options, in
        the history row that schedules it): its typed fields are checked, the payloads not
        walked again. Anything the quick path does not take (a record inside a payload, a
        field of the wrong type) goes through :meth:`encode`, which reports a problem.

        Raises:
            roost.Error: kind Invalid, as :meth:`encode`.
        """
        rtype = self._record_type(type(value))
        positional = rtype.positional() if rtype is not None else None
        if rtype is not None and positional is not None:
            try:
                values = positional.values(value)
                if positional.check(values) and not (
                    NATIVE_COUNT[0]
                    and any(type(values[i]) not in _SCALARS for i in positional.walked)
                ):
                    return rtype.header + cbor2.dumps(values, default=Walk(self._record_type))
            except (Exception, SystemExit, GeneratorExit):  # noqa: BLE001, S110 - as below
                pass
            return self.encode(value)
        found = rtype.schema() if rtype is not None and rtype.envelope else None
        if rtype is not None and found is not None:
            try:
                fields = rtype.unstructure(value)
                if found.check(fields) and not (NATIVE_COUNT[0] and _holds_data(fields, found)):
                    return rtype.header + cbor2.dumps(fields, default=Walk(self._record_type))
            except (Exception, SystemExit, GeneratorExit):  # noqa: BLE001, S110 - as the value's own methods may raise; the full encode below names the problem
                pass
        return self.encode(value)

    def _encode_typed(self, value: Any, rtype: _RecordType) -> bytes | None:
        # One of roost's records: its typed fields are written as they are, its payload
        # fields walked (each as deep as the full walk would allow it, below the record).
        # A positional record's are its values in field order, a field map's by name.
        positional = rtype.positional()
        found = rtype.schema() if positional is None else None
        try:
            if positional is not None:
                fields: Any = positional.values(value)
                checked = positional.check(fields)
                walked = [fields[i] for i in positional.walked]
            elif found is not None:
                fields = rtype.unstructure(value)
                checked = found.check(fields)
                walked = [fields[n] for n in found.walked] if checked else []
            else:
                return None
        except (Exception, SystemExit, GeneratorExit):  # noqa: BLE001 - the full walk reports it
            return None
        if not checked:
            return None
        # The record's header, then its fields: the bytes the walk's hook writes for a
        # record, without cbor2 first looking the record's class up among its encoders.
        data = _dump_typed(fields, Walk(self._record_type), walked, STORED_DEPTH - 3)
        return None if data is None else rtype.header + data

    def _encode_walked(self, value: Any, what: str, limit: int) -> bytes:
        walk = self._walk(value, what, limit)
        try:
            return cbor2.dumps(walk.rewrite(value) if walk.native else value, default=walk)
        except UnicodeEncodeError:
            found = find_surrogate(walk, value)
            if found is None:
                raise invalid(f"{what}: a string in the value has no UTF-8 form") from None
            path, text = found
            raise surrogate_error(f"{what}{path}", text) from None
        except (Unencodable, cbor2.CBOREncodeError, RecursionError) as exc:
            raise invalid(f"{what}: cannot encode the value ({type(exc).__name__})") from exc
        except (Error, MemoryError):
            raise
        except (Exception, SystemExit, GeneratorExit) as exc:  # the value's own methods raised
            raise _reading_failed(what, exc) from exc

    def check(self, value: Any, *, what: str = "payload") -> None:
        """Check that ``value`` is a storable payload, without encoding it.

        It checks the types and the depth (``MAX_DEPTH``), the part a payload stored inside
        one of roost's own records must pass on its own; a lone surrogate is found when the
        record is encoded.

        Raises:
            roost.Error: kind Invalid, naming the offending part and its path in ``value``.
        """
        self._walk(value, what, MAX_DEPTH)

    def _walk(self, value: Any, what: str, limit: int) -> Walk:
        lookup = self._record_type
        walk = Walk(lookup)
        try:
            if walk.depth(value, limit) == limit:
                Walk(lookup, strict=True).depth(value, limit)
        except Refused as exc:
            raise _refusal(exc, what, limit, value) from None
        except (Error, MemoryError):
            raise
        except (Exception, SystemExit, GeneratorExit) as exc:  # the value's own methods raised
            raise _reading_failed(what, exc) from exc
        return walk

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
            return cbor2.loads(
                data,
                semantic_decoders=self._decoders,
                tag_hook=_unknown_tag,
                max_depth=STORED_DEPTH,
            )
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
        found = self._local.by_class.get(cls) or _DEFAULT_REGISTRY.by_class.get(cls)
        return found if found is not None else auto_value_type(cls)

    def _lookup_tag(self, tag: Any) -> _RecordType | None:
        if not isinstance(tag, str):
            return None
        found = self._local.by_tag.get(tag) or _DEFAULT_REGISTRY.by_tag.get(tag)
        if found is None and load_record_modules():
            found = _DEFAULT_REGISTRY.by_tag.get(tag)
        return found if found is not None else value_type_for_tag(tag)

    def _record_type(self, cls: type) -> _RecordType | None:
        if self._types_gen != _REGISTRATIONS[0]:
            self._types.clear()
            self._types_gen = _REGISTRATIONS[0]
        try:
            return self._types[cls]
        except KeyError:
            rtype = self._types[cls] = self._lookup_class(cls)
            return rtype

    def _decode_record(self, value: Any, _immutable: bool) -> Any:
        try:
            tag, version, fields = value
            hit = self._fast_tags.get(tag)
        except (TypeError, ValueError):
            raise _corrupt("record", value) from None
        positional = type(fields) is list or type(fields) is tuple
        if (
            hit is not None
            and not positional
            and hit[0] == version
            and self._fast_gen == _REGISTRATIONS[0]
        ):
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
        if positional:  # a positional record's values
            return rtype.load_values(version, list(fields))
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


def _holds_data(fields: Mapping[str, Any], found: Any) -> bool:
    """Whether a payload field holds more than a scalar (it may hold a boxed value then).

    With a class cbor2 writes natively registered (a NamedTuple, an IntEnum), only a walk
    finds its instances, which cbor2 alone would write as plain lists or ints.
    """
    return any(type(fields[name]) not in _SCALARS for name in found.walked)


_SCALARS: Final = frozenset({str, bytes, float, bool, int, type(None)})


def _dump_typed(value: Any, walk: Walk, payloads: Iterable[Any], limit: int) -> bytes | None:
    """cbor2's bytes of ``value`` once each of ``payloads`` is walked; None if refused."""
    flat = walk.flat
    try:
        for v in payloads:
            tp = type(v)
            if tp in flat or ((tp is dict or tp is list) and not v):  # never a user __bool__
                continue
            # A payload at exactly the limit may hold a bignum: the full walk decides.
            if walk.depth(v, limit) >= limit:
                return None
        if walk.native:  # a value cbor2 would write natively: the full walk rewrites it
            return None
        return cbor2.dumps(value, default=walk)
    except (Exception, SystemExit, GeneratorExit):  # noqa: BLE001 - any refusal, or a value's own method raising: the full walk names it
        return None


def _refusal(exc: Refused, what: str, limit: int, value: Any) -> Error:
    steps = exc.path[::-1]
    ids = exc.ids[::-1]
    if isinstance(exc, TooDeep):
        seen: set[int] = {id(value)}
        for n, ident in enumerate(ids[1:], start=1):
            if ident in seen:  # the walk went round a loop, not down a deep value
                path = _show_path(what, steps[:n])
                return invalid(
                    f"{path}: the value contains itself (a reference cycle)",
                    path=path,
                    type=exc.type_name,
                )
            seen.add(ident)
        path = _show_path(what, steps)
        return invalid(
            f"{path}: the value nests deeper than {limit} levels (each non-empty list or "
            f"dict counts one); flatten it, or store the deep part as bytes or a string",
            path=path,
            type=exc.type_name,
            max_depth=limit,
        )
    path = _show_path(what, steps)
    return invalid(f"{path}: {exc.reason}", path=path, type=exc.type_name)


def _reading_failed(what: str, exc: BaseException) -> Error:
    """The refusal of a value whose own methods (``__len__``, ``__iter__``, ...) raised."""
    kind = type_name(exc)
    text = safe_text(exc, 1000)
    return invalid(
        f"{what}: reading the value raised {kind}: {text} (a list, dict or other container "
        f"subclass whose methods fail cannot be stored; pass plain data)",
        path=what,
        exception=kind,
        raised=text,
    )


def _show_path(what: str, steps: list[str]) -> str:
    path = what + "".join(steps)
    if len(path) <= 120:
        return path
    return f"{what}{''.join(steps[:8])}...({len(steps) - 12} more)...{''.join(steps[-4:])}"


def _corrupt(what: str, value: Any) -> Error:
    return Error(
        f"cannot decode stored {what}: malformed value {value!r:.80}",
        kind=ErrorKind.INTERNAL,
        retryable=False,
    )


def _decode_pid(value: Any, _immutable: bool) -> Pid:
    # Parts that were a valid PID when written are trusted: re-validating every stored PID
    # costs a measurable share of replay and recovery. Only their types are checked.
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
    cls = KNOWN_ERRORS.get(name, Error) if isinstance(name, str) else Error
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
