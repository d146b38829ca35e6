"""The codec's one pass over a value before cbor2 writes it: what it is, and how deep.

``Walk.depth`` accepts exactly what the codec can write and returns the value's nesting
depth as cbor2's decoder counts it (its ``max_depth``): a scalar or an empty list or dict is
0, a non-empty list or dict is one more than its deepest item (keys included), and a tagged
value is one more than its content (an aware datetime, a UUID and an int outside
``[-2**64, 2**64)`` are 1; a ``Pid`` is 2; a ``roost.Error`` is 2 plus its ``details``; a
record is 2 with no fields, else 3 plus its deepest field). The walk stops as soon as the
value is deeper than allowed, so a hostile, arbitrarily deep value costs only the levels
up to the limit and never a ``RecursionError``.

A refusal is raised as ``Refused``; each level adds its step to ``path`` while unwinding,
so the fast path pays nothing for paths. Records are unstructured once, here: the field
maps are kept in ``fields`` for cbor2's hook to write.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import attrs
import cbor2

from roost._errors import ChannelClosed, Error, NondeterminismError
from roost._pid import Pid
from roost._text import has_utf8
from roost.storage._record_fns import PositionalFns
from roost.storage._registry import TAG_ERROR, _RecordType
from roost.storage._rows import _PID_HEADER

__all__ = [
    "KNOWN_ERRORS",
    "Refused",
    "TooDeep",
    "Unencodable",
    "Walk",
    "find_surrogate",
    "show_key",
]

_BIG: Final = 2**64  # cbor2 writes ints outside [-2**64, 2**64) as bignum tags
# Leaves that add no level. ints are among them on the first walk: a bignum adds at most
# one level, so only a value that measures exactly the limit is walked again, strictly.
_FLAT: Final = frozenset({str, bytes, float, bool, int, type(None)})
_FLAT_STRICT: Final = frozenset({str, bytes, float, bool, type(None)})
KNOWN_ERRORS: Final[Mapping[str, type[Error]]] = {
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


class Refused(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """The value cannot be written; ``path`` (innermost step first) grows while unwinding."""

    def __init__(self, reason: str, type_name: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.type_name = type_name
        self.path: list[str] = []
        self.ids: list[int] = []  # the containers on the path, to tell a cycle from depth


class TooDeep(Refused):
    """The value nests deeper than the walk allows."""


def show_key(key: Any) -> str:
    """A dict key as a path step shows it (JSON-style for strings, shortened).

    A string with a lone surrogate is shown escaped: the message must be storable too.
    """
    text = json.dumps(key, ensure_ascii=not has_utf8(key)) if isinstance(key, str) else repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


def _step(exc: Refused, step: str, container: object) -> Refused:
    exc.path.append(step)
    exc.ids.append(id(container))
    return exc


class Unencodable(Exception):  # noqa: N818 - private control-flow signal, not an error type
    """cbor2's hook met a value the walk did not accept (a bug, reported as Invalid)."""


class Walk:
    """One encode's walk: the records it met (with their field maps), and cbor2's hook.

    Args:
        lookup: the record type of a class, or None.
        strict: count ints outside ``[-2**64, 2**64)`` as the tag they are written as.
    """

    __slots__ = ("flat", "lookup", "native", "records")

    def __init__(
        self, lookup: Callable[[type], _RecordType | None], *, strict: bool = False
    ) -> None:
        self.lookup = lookup
        self.flat = _FLAT_STRICT if strict else _FLAT
        self.records: dict[int, tuple[_RecordType, dict[str, Any] | list[Any]]] = {}
        # Whether a record is of a class cbor2 writes natively (a NamedTuple, an IntEnum,
        # a Decimal with a converter): cbor2 never hands those to the hook, so ``rewrite``
        # boxes them first.
        self.native = False

    def __call__(self, encoder: cbor2.CBOREncoder, value: Any) -> None:
        """cbor2's ``default`` hook, for what cbor2 does not know: records, Pids, Errors.

        It writes the tag and array headers itself: the same bytes as a ``CBORTag``,
        without building one per value (this runs for every record of every workflow step).
        """
        found = self.records.get(id(value))
        if found is not None:
            encoder.write(found[0].header)
            fields = found[1]
            if isinstance(fields, list):  # a positional record's values
                encoder.encode_array(fields)
            else:
                encoder.encode_map(fields)
        elif type(value) is _Boxed:
            encoder.write(value.rtype.header)
            encoder.encode_map(value.fields)
        elif isinstance(value, Pid):
            encoder.write(_PID_HEADER)
            encoder.encode_array([value.node, value.host, value.id])
        elif isinstance(value, Error):
            name = type(value).__name__
            known = name if KNOWN_ERRORS.get(name) is type(value) else None
            fields = [value.kind.value, value.message, value.retryable, value.details, known]
            encoder.encode(cbor2.CBORTag(TAG_ERROR, fields))
        else:
            raise Unencodable

    def depth(self, value: Any, left: int) -> int:  # noqa: PLR0911 - one arm per kind
        """The decoder's nesting depth of ``value``, at most ``left``.

        Raises:
            Refused: the value (or a part of it) cannot be written; TooDeep when it nests
                deeper than ``left``.
        """
        tp = type(value)
        if tp in self.flat:
            return 0
        if tp is int:
            return 0 if -_BIG <= value < _BIG else _tagged(left, 1)
        if tp is list or tp is tuple:
            return self._items(value, left)
        if tp is dict:
            return self._map(value, left)
        if tp is Pid:
            return _tagged(left, 2)
        if tp is dt.datetime:
            return _datetime(value, left)
        if tp is uuid.UUID:
            return _tagged(left, 1)
        return self._other(value, tp, left)

    def _items(self, value: list[Any] | tuple[Any, ...], left: int) -> int:
        if not value:
            return 0
        if left < 1:
            raise TooDeep("", type(value).__name__)
        inner = left - 1
        deepest = 0
        flat = self.flat
        # Plain loops with the common cases inline, no max(): this is the hot path.
        for v in value:
            tp = type(v)
            if tp in flat:
                continue
            try:
                if tp is dict:
                    d = self._map(v, inner)
                elif tp is list:
                    d = self._items(v, inner)
                else:
                    d = self.depth(v, inner)
            except Refused as exc:
                index = next(i for i, item in enumerate(value) if item is v)
                raise _step(exc, f"[{index}]", value) from None
            if d > deepest:  # noqa: PLR1730 - faster than max() here
                deepest = d
        return deepest + 1

    def _map(self, value: dict[Any, Any], left: int) -> int:
        if not value:
            return 0
        if left < 1:
            raise TooDeep("", type(value).__name__)
        inner = left - 1
        deepest = 0
        flat = self.flat
        for k, v in value.items():
            if type(k) not in flat:
                try:
                    d = self.depth(k, inner)
                except Refused as exc:
                    raise _step(exc, f"[{show_key(k)}] (the key)", value) from None
                if d > deepest:  # noqa: PLR1730 - faster than max() here
                    deepest = d
            tp = type(v)
            if tp in flat:
                continue
            try:
                if tp is dict:
                    d = self._map(v, inner)
                elif tp is list:
                    d = self._items(v, inner)
                else:
                    d = self.depth(v, inner)
            except Refused as exc:
                raise _step(exc, f"[{show_key(k)}]", value) from None
            if d > deepest:  # noqa: PLR1730 - faster than max() here
                deepest = d
        return deepest + 1

    def _other(self, value: Any, tp: type, left: int) -> int:  # noqa: PLR0911 - one arm per kind
        rtype = self.lookup(tp)
        if rtype is not None:
            return self._record(value, rtype, left)
        if isinstance(value, str | bytes | float):
            return 0  # a StrEnum member or another subclass: written as the base type
        if isinstance(value, int):
            return 0 if -_BIG <= value < _BIG else _tagged(left, 1)
        if isinstance(value, list | tuple):
            return self._items(value, left)
        if isinstance(value, dict):
            return self._map(value, left)
        if isinstance(value, dt.datetime):
            return _datetime(value, left)
        if isinstance(value, uuid.UUID):
            return _tagged(left, 1)
        if isinstance(value, Error):
            return self._error(value, left)
        name = tp.__name__
        if attrs.has(tp):
            hint = 'it is an attrs class: register it with @roost.storage.record("some-tag")'
        else:
            hint = _HINTS.get(name, "")
        raise Refused(
            f"cannot encode object of type {name!r}" + (f" ({hint})" if hint else ""), name
        )

    def _error(self, value: Error, left: int) -> int:
        if left < 2:
            raise TooDeep("", "Error")
        deepest = 0
        for step, part in ((".message", value.message), (".details", value.details)):
            try:
                deepest = max(deepest, self.depth(part, left - 2))
            except Refused as exc:
                raise _step(exc, step, value) from None
        try:
            deepest = max(deepest, self.depth(value.retryable, left - 2))
        except Refused as exc:
            raise _step(exc, ".retryable", value) from None
        return deepest + 2

    def _record(self, value: Any, rtype: _RecordType, left: int) -> int:
        positional = rtype.positional()
        if positional is not None:
            values = _values_or_none(positional, value)
            if values is not None:
                return self._values(value, rtype, values, left)
        name = type(value).__name__
        try:
            fields = rtype.unstructure(value)
        except Exception as exc:  # noqa: BLE001 - any unstructure failure is the answer itself
            raise Refused(
                f"cannot unstructure {name!r}: {type(exc).__name__}: {exc}", name
            ) from None
        self.records[id(value)] = (rtype, fields)
        if rtype.boxed:
            self.native = True
        if not fields:
            return _tagged(left, 2)
        if left < 3:
            raise TooDeep("", name)
        inner = left - 3
        deepest = 0
        flat = self.flat
        for field_name, v in fields.items():
            if type(v) in flat:
                continue
            try:
                d = self.depth(v, inner)
            except Refused as exc:
                raise _step(exc, f".{field_name}", value) from None
            deepest = max(deepest, d)
        return deepest + 3

    def _values(self, value: Any, rtype: _RecordType, values: list[Any], left: int) -> int:
        """``_record`` for a positional record: its stored values, in field order."""
        self.records[id(value)] = (rtype, values)
        if left < 3:
            raise TooDeep("", type(value).__name__)
        inner = left - 3
        deepest = 0
        flat = self.flat
        for i, v in enumerate(values):
            if type(v) in flat:
                continue
            try:
                d = self.depth(v, inner)
            except Refused as exc:
                name = attrs.fields(type(value))[i].name
                raise _step(exc, f".{name}", value) from None
            deepest = max(deepest, d)
        return deepest + 3

    def rewrite(self, value: Any) -> Any:
        """A copy of the walked ``value`` in which records cbor2 writes natively are boxed.

        Containers on the way are copied (a tuple becomes a list, as cbor2 writes it);
        records' field maps are rewritten in place (they are the walk's own dicts).
        """
        found = self.records.get(id(value))
        if found is not None:
            rtype, fields = found
            if isinstance(fields, list):  # a positional record's values (never boxed)
                fields[:] = [self.rewrite(v) for v in fields]
                return value
            for name, v in fields.items():
                fields[name] = self.rewrite(v)
            return _Boxed(rtype, fields) if rtype.boxed else value
        tp = type(value)
        if tp in self.flat or tp is int:
            return value
        if isinstance(value, list | tuple):
            return [self.rewrite(v) for v in value]
        if isinstance(value, dict):
            # A key that is no record stays as it is (a tuple key must stay hashable).
            records = self.records
            return {
                (self.rewrite(k) if id(k) in records else k): self.rewrite(v)
                for k, v in value.items()
            }
        return value


def _values_or_none(positional: PositionalFns, value: Any) -> list[Any] | None:
    """A positional record's stored values; None if reading them raised (a bad field).

    The field map then finds the bad field, and the walk names it.
    """
    try:
        return positional.values(value)
    except Exception:  # noqa: BLE001 - any failure: the field map's walk reports it
        return None


class _Boxed:
    """A record cbor2 would write natively (a NamedTuple, an IntEnum), for the hook."""

    __slots__ = ("fields", "rtype")

    def __init__(self, rtype: _RecordType, fields: dict[str, Any]) -> None:
        self.rtype = rtype
        self.fields = fields


def _tagged(left: int, levels: int) -> int:
    if left < levels:
        raise TooDeep("", "tag")
    return levels


def _datetime(value: dt.datetime, left: int) -> int:
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
        return _tagged(left, 1)
    raise Refused(reason, "datetime")


def find_surrogate(walk: Walk, value: Any) -> tuple[str, str] | None:
    """The path and text of the first string in ``value`` with a lone surrogate, if any.

    Only called once cbor2 refused such a string, so ``value`` was walked already: its
    records' field maps are in ``walk.records`` and it nests no deeper than the limit.
    """
    for path, text in _strings(walk, value, ""):
        if not has_utf8(text):
            return path, text
    return None


def _strings(walk: Walk, value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(walk, k, f"{path}[{show_key(k)}] (the key)")
            yield from _strings(walk, v, f"{path}[{show_key(k)}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _strings(walk, v, f"{path}[{i}]")
    elif isinstance(value, Pid):
        yield from ((f"{path}.{part}", getattr(value, part)) for part in ("node", "host", "id"))
    elif isinstance(value, Error):
        yield from _strings(walk, value.message, f"{path}.message")
        yield from _strings(walk, value.details, f"{path}.details")
    elif id(value) in walk.records:
        fields = walk.records[id(value)][1]
        if isinstance(fields, list):  # a positional record's values, in field order
            names = [f.name for f in attrs.fields(type(value))]
            for name, v in zip(names, fields, strict=False):
                yield from _strings(walk, v, f"{path}.{name}")
            return
        for name, v in fields.items():
            yield from _strings(walk, v, f"{path}.{name}")
