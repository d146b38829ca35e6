"""How an activation is stored in ``histories``: format v2 written, v1 and v2 read.

Format v1 is the ``Activation`` record as the codec writes any record: a tagged field map
whose events and commands are tagged field maps too, ``at`` an RFC 3339 string.

Format v2, the one written, is one CBOR array per row::

    [2, index, at, [event, ...], [command, ...]]

``2`` is the row's format version; ``at`` is integer microseconds since the Unix epoch
(UTC); each event or command is an array ``[kind, field, ...]``: a small integer naming its
class (``_KINDS``), then its fields in declaration order. No field names, no record tags,
no datetime text. User payloads (arguments, results, signal payloads, errors, PIDs) sit in
their fields as the codec writes them. A row is written piece by piece
(``roost.storage._rows``): its arrays and the fields roost fills (kind, seq, ids, PIDs) by
hand, each payload through the codec's walk and cbor2, the bytes one cbor2 call over the
row would write. A row that path does not take is encoded as one value walking only its
payload fields (``Codec.encode_typed``), and a refusal re-encodes the activation through
the full walk for its message.

A v1 row starts with the codec's record tag, a v2 row with an array: ``decode_activation``
reads both, so data dirs written before v2 need no migration. An activation comes back
with ``at`` in UTC (``datetime.timezone.utc``), as v1 rows do.

Evolution rule (the rows stored stay readable by every later version): a new field of an
event or command class goes only at the END of its field list in ``_KINDS`` (and of the
class), with a default. A stored array shorter than the class's fields is read with the
defaults of its missing trailing fields; a longer one (written by a newer version) is
refused with an Internal error naming the kind. Removing, renaming, retyping or
reordering a field is not an evolution of the kind: it needs a new class with a new kind
number (the old number stays readable, never reused).
"""

from __future__ import annotations

import datetime as dt
import reprlib
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind, invalid
from roost.storage._codec import STORED_DEPTH, Codec
from roost.storage._rows import field_lines, head, write_leaf, writer_namespace
from roost.storage._schema import leaf_types, schema
from roost.storage._walk import Walk
from roost.workflow._history import (
    Activation,
    ActivityResolved,
    CancelActivity,
    CancelRequested,
    Command,
    Complete,
    ContinueAsNew,
    Event,
    Fail,
    MessageArrived,
    ProcessExited,
    ScheduleActivity,
    SendMessage,
    SpawnProcess,
    StartChild,
    Started,
    StartTimer,
    StopProcess,
    TimerFired,
    UpsertAttributes,
    VersionMarker,
)

__all__ = ["FORMAT", "decode_activation", "encode_activation", "read_activation"]

FORMAT: Final = 2
"""The history format version written (the first item of every v2 row)."""

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO: Final = dt.timedelta(microseconds=1)

# The kind number of every event and command class, and its fields in stored order. The
# numbers are the format: never reuse or renumber one (a new class gets a new number).
_KINDS: Final[dict[type, tuple[int, tuple[str, ...]]]] = {
    Started: (
        1,
        (
            "workflow_id",
            "run_id",
            "workflow_type",
            "args",
            "seed",
            "context",
            "task_queue",
            "parent",
            "attempt",
        ),
    ),
    ActivityResolved: (2, ("seq", "value", "error")),
    TimerFired: (3, ("seq",)),
    MessageArrived: (4, ("topic", "payload", "sender", "call")),
    CancelRequested: (5, ("reason",)),
    ProcessExited: (6, ("pid", "value", "error")),
    ScheduleActivity: (16, ("seq", "entry", "args", "options")),
    CancelActivity: (17, ("seq", "activity")),
    StartTimer: (18, ("seq", "seconds")),
    SendMessage: (19, ("seq", "dest", "topic", "payload", "reply_to")),
    StopProcess: (20, ("seq", "dest", "reason", "hard")),
    SpawnProcess: (21, ("seq", "entry", "args", "pid")),
    Complete: (22, ("seq", "value")),
    Fail: (23, ("seq", "error")),
    VersionMarker: (24, ("seq", "change_id", "version")),
    UpsertAttributes: (25, ("seq", "search", "memo")),
    StartChild: (26, ("seq", "entry", "args", "workflow_id", "parent_close_policy", "options")),
    ContinueAsNew: (27, ("seq", "entry", "args")),
}


def _generate(
    kinds: dict[type, tuple[int, tuple[str, ...]]],
) -> tuple[dict[type, Callable[[Any], list[Any]]], dict[int, Callable[[list[Any]], Any]]]:
    """Per class of ``kinds``, the function writing its array and the one rebuilding it.

    Generated rather than driven by a field loop: this runs for every event of every
    replayed activation, and a call with the fields spelled out is several times cheaper.
    """
    packers: dict[type, Callable[[Any], list[Any]]] = {}
    builders: dict[int, Callable[[list[Any]], Any]] = {}
    for cls, (kind, fields) in kinds.items():
        # float(): a timer's seconds may have been given as an int; v1 stored it as a float.
        conv = {"seconds": "float(seconds)"}
        # The stored length checked first: a row of an older shape takes the slow path.
        source = (
            f"def pack(o):\n    return [{kind}, {', '.join(f'o.{f}' for f in fields)}]\n"
            f"def build(row):\n"
            f"    if len(row) != {len(fields) + 1}:\n"
            f"        return _other_length(_cls, {kind}, _fields, row)\n"
            f"    _, {', '.join(fields)} = row\n"
            f"    return _cls({', '.join(f'{f}={conv.get(f, f)}' for f in fields)})\n"
        )
        namespace: dict[str, Any] = {
            "_cls": cls,
            "_fields": fields,
            "_other_length": _other_length,
        }
        exec(compile(source, f"<roost history v2 {cls.__name__}>", "exec"), namespace)  # noqa: S102 - generated from the fixed field lists above
        packers[cls] = namespace["pack"]
        builders[kind] = namespace["build"]
    return packers, builders


def _other_length(cls: type, kind: int, fields: tuple[str, ...], row: list[Any]) -> Any:
    """A stored event or command array not of the class's length (see the evolution rule).

    Raises:
        roost.Error: kind Internal when the array has more fields than the class (written
            by a newer version), or misses a field that has no default.
    """
    stored = len(row) - 1
    name = cls.__name__
    if stored > len(fields):
        raise Error(
            f"cannot decode stored activation: a {name} (kind {kind}) stored with {stored} "
            f"fields, this version knows {len(fields)}; it was written by a newer roost: "
            "run that version on this data dir",
            kind=ErrorKind.INTERNAL,
            retryable=False,
            details={"kind": kind, "class": name, "stored": stored, "known": len(fields)},
        )
    defaults = {a.name: a.default for a in attrs.fields(cls)}
    missing = [f for f in fields[stored:] if defaults.get(f, attrs.NOTHING) is attrs.NOTHING]
    if missing:
        raise Error(
            f"cannot decode stored activation: a {name} (kind {kind}) stored without "
            f"field(s) {', '.join(missing)}, which have no default",
            kind=ErrorKind.INTERNAL,
            retryable=False,
            details={"kind": kind, "class": name, "missing": missing},
        )
    values = dict(zip(fields, row[1:], strict=False))
    if "seconds" in values:
        values["seconds"] = float(values["seconds"])
    return cls(**values)  # the missing trailing fields take their defaults


_PACK, _BUILD = _generate(_KINDS)  # once, at import

# A written row's head ([FORMAT, ... of 5 items) and the heads of short arrays.
_ROW_HEAD: Final = head(4, 5) + head(0, FORMAT)
_INT: Final = frozenset({int})
_SHORT: Final = 24  # arrays this long or longer take a longer header
_ARRAYS: Final = tuple(head(4, n) for n in range(_SHORT))

Writer = Callable[[Any, bytearray, Walk, int], None]


def _writers(kinds: dict[type, tuple[int, tuple[str, ...]]]) -> dict[type, Writer]:
    """Per class of ``kinds``, the function appending its array to a row being written.

    Its leaf fields are tested and written by hand, its payload fields walked and written
    by cbor2 (``roost.storage._rows``): the bytes ``pack`` and one cbor2 call would write.
    Generated: this runs for every event and command of every activation.
    """
    writers: dict[type, Writer] = {}
    for cls, (kind, fields) in kinds.items():
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: every field is walked
            hints = {}
        namespace = writer_namespace()
        namespace["_head"] = head(4, 1 + len(fields)) + head(0, kind)
        lines = ["def write(o, out, walk, limit):", "    out += _head"]
        for i, name in enumerate(fields):
            leaves = leaf_types(hints.get(name, Any))
            namespace[f"_t{i}"] = leaves
            lines += field_lines(f"o.{name}", leaves, f"_t{i}")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<roost history v2 writer {cls.__name__}>", "exec"), namespace)  # noqa: S102 - generated from the fixed field lists above
        writers[cls] = namespace["write"]
    return writers


_WRITERS: Final = _writers(_KINDS)


def _schemas() -> dict[int, tuple[Callable[[list[Any]], bool], tuple[int, ...]]]:
    """Per kind, the type test of its leaf fields and the positions of the walked ones."""
    found: dict[int, tuple[Callable[[list[Any]], bool], tuple[int, ...]]] = {}
    for cls, (kind, fields) in _KINDS.items():
        checked = schema(cls, fields, by_index=True)
        found[kind] = (checked.check, tuple(1 + fields.index(n) for n in checked.walked))
    return found


_SCHEMAS: Final = _schemas()
# Levels of the row above a field of an event or command: the row, its list, the item.
_ROW_LEVELS: Final = 3


def encode_activation(codec: Codec, act: Activation) -> bytes:
    """The stored bytes of ``act``: a format v2 row, encoded (and checked) by ``codec``.

    Written piece by piece (``_WRITERS``); a row that does not take that path (a leaf of
    another type, a payload the walk refuses or must rewrite) is encoded as a whole.

    Raises:
        roost.Error: kind Invalid when a payload inside cannot be encoded (the codec's
            message names it), or an event or command is not a history record.
    """
    writers = _WRITERS
    events, commands = act.events, act.commands
    try:
        out = bytearray(_ROW_HEAD)
        write_leaf(out, act.index, _INT)
        write_leaf(out, (act.at - _EPOCH) // _MICRO, _INT)
        walk, limit = codec.payload_walk(), STORED_DEPTH - _ROW_LEVELS
        n = len(events)
        out += _ARRAYS[n] if n < _SHORT else head(4, n)
        for item in events:
            writers[type(item)](item, out, walk, limit)
        n = len(commands)
        out += _ARRAYS[n] if n < _SHORT else head(4, n)
        for item in commands:
            writers[type(item)](item, out, walk, limit)
    except (Exception, SystemExit, GeneratorExit):  # noqa: BLE001 - any refusal, or a value's own method raising: the whole row's encoding names it
        return _encode_whole(codec, act)
    return bytes(out)


def _encode_whole(codec: Codec, act: Activation) -> bytes:
    """``encode_activation`` of a row the piecewise writers did not take."""
    pack = _PACK
    try:
        events = [pack[type(e)](e) for e in act.events]
        commands = [pack[type(c)](c) for c in act.commands]
    except KeyError as exc:
        raise invalid(
            f"activation {act.index}: {exc.args[0].__name__} is not a history event or command"
        ) from None
    at = (act.at - _EPOCH) // _MICRO
    row = [FORMAT, act.index, at, events, commands]
    data = codec.encode_typed(row, _walked(events, commands), inner=_ROW_LEVELS)
    if data is not None:
        return data
    try:
        return codec.encode(row, what="activation", envelope=True)
    except Error:
        # The same checks on the record form name the part by its field, as in
        # "activation.events[0].payload", not by its position in the row.
        codec.encode(act, what="activation")
        raise


def _walked(events: list[list[Any]], commands: list[list[Any]]) -> list[Any] | None:
    """The fields of a row's items to walk, or None if a leaf field has a wrong type."""
    schemas = _SCHEMAS
    walked: list[Any] = []
    for item in (*events, *commands):
        check, positions = schemas[item[0]]
        if not check(item):
            return None
        walked += [item[i] for i in positions]
    return walked


def read_activation(
    codec: Codec, data: bytes | bytearray | memoryview
) -> tuple[int, dt.datetime, list[Event], list[Command]]:
    """A stored activation row (format v1 or v2) as ``(index, at, events, commands)``.

    Raises:
        roost.Error: kind Internal when the row is not an activation of either format.
    """
    value = codec.decode(data)
    if type(value) is list and len(value) == 5 and value[0] == FORMAT and type(value[1]) is int:
        _, index, at, events, commands = value
        build = _BUILD
        try:
            return (
                index,
                _EPOCH + _MICRO * at,  # exact (an int multiple), faster than timedelta()
                [build[e[0]](e) for e in events],
                [build[c[0]](c) for c in commands],
            )
        except Error:  # a kind of another length that cannot be read: says why
            raise
        except Exception:  # noqa: BLE001 - a wrong shape anywhere: the row is unreadable
            raise _malformed(value) from None
    if type(value) is Activation:  # format v1
        return value.index, value.at, value.events, value.commands
    raise _malformed(value)


def decode_activation(codec: Codec, data: bytes | bytearray | memoryview) -> Activation:
    """A stored activation row (format v1 or v2) as an ``Activation``.

    Raises:
        roost.Error: kind Internal when the row is not an activation of either format.
    """
    index, at, events, commands = read_activation(codec, data)
    return Activation(index=index, at=at, events=events, commands=commands)


# Shows the start of a malformed row without building the repr of all of it (a row may
# hold megabytes of payloads).
_SHORT_REPR: Final = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxtuple = _SHORT_REPR.maxlist = _SHORT_REPR.maxdict = _SHORT_REPR.maxset = 4
_SHORT_REPR.maxstring = _SHORT_REPR.maxlong = _SHORT_REPR.maxother = 40


def _malformed(value: Any) -> Error:
    try:
        shown = _SHORT_REPR.repr(value)
    except Exception:  # noqa: BLE001 - a decoded record's repr is the codec's, still guarded
        shown = f"<{type(value).__name__}>"
    return Error(
        f"cannot decode stored activation: not a history row of format 1 or {FORMAT} ({shown:.80})",
        kind=ErrorKind.INTERNAL,
        retryable=False,
    )
