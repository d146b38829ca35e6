"""CBOR written piece by piece for rows roost lays out itself (a history row).

cbor2 costs about as much per container it writes (a cycle check, a type probe) as per
scalar: most of a small history row's encoding time is its five fixed arrays. A row whose
shape roost decides is written here instead: the array headers and roost's own scalars
(kinds, sequence numbers, ids, PIDs) by hand, each user payload through cbor2 with the
codec's hook once the codec's walk accepted it. The bytes are those one cbor2 call over
the whole row writes: cbor2 writes each item of an array independently (no value sharing,
no string references), and the scalars here follow its encoding (the shortest integer
header, UTF-8 text). Anything else (a float, an enum, a big integer) goes to cbor2 too.

``Slow`` means: this piece is not for the quick path (a leaf of another type, a payload
deeper than allowed, a value cbor2 writes natively that the walk must rewrite); the caller
then encodes the row through the codec's full walk, which names any problem.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any, Final

import cbor2

from roost._pid import Pid

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "TAG_PID",
    "Slow",
    "field_lines",
    "head",
    "write_leaf",
    "write_payload",
    "write_text",
    "writer_namespace",
]

_B: Final = struct.Struct(">BB")
_H: Final = struct.Struct(">BH")
_I: Final = struct.Struct(">BI")
_Q: Final = struct.Struct(">BQ")
TAG_PID: Final = 39001  # a Pid's CBOR tag
_PID_HEADER: Final = b"\xd9" + TAG_PID.to_bytes(2, "big")  # its head: major type 6, 2 bytes
_BIG: Final = 2**64  # cbor2 writes ints outside [-2**64, 2**64) as bignum tags


class Slow(Exception):  # noqa: N818 - a control-flow signal: take the full walk instead
    """This row is not for the quick path (see the module docstring)."""


def head(major: int, n: int) -> bytes:
    """The CBOR header of major type ``major`` (0-7) with argument ``n`` (>= 0), shortest."""
    base = major << 5
    if n < 24:
        return bytes((base | n,))
    if n < 0x100:
        return _B.pack(base | 24, n)
    if n < 0x10000:
        return _H.pack(base | 25, n)
    if n < 0x100000000:
        return _I.pack(base | 26, n)
    return _Q.pack(base | 27, n)


def _int(out: bytearray, v: int) -> None:
    if 0 <= v < 24:
        out.append(v)
    elif 0 <= v < _BIG:
        out += head(0, v)
    elif -_BIG <= v < 0:
        out += head(1, -1 - v)
    else:  # a bignum: cbor2's tag
        out += cbor2.dumps(v)


def write_text(out: bytearray, v: str) -> None:
    """Append str ``v`` as UTF-8 text (a lone surrogate raises UnicodeEncodeError)."""
    data = v.encode()  # cbor2 refuses a lone surrogate too (the full walk says so)
    n = len(data)
    if n < 24:
        out.append(0x60 | n)
    else:
        out += head(3, n)
    out += data


def _bytes(out: bytearray, v: bytes) -> None:
    out += head(2, len(v))
    out += v


def _pid(out: bytearray, v: Pid) -> None:
    # What the codec's hook writes for a Pid: its tag, then [node, host, id].
    out += _PID_HEADER
    out.append(0x83)
    write_text(out, v.node)
    write_text(out, v.host)
    write_text(out, v.id)


def _none(out: bytearray, _: None) -> None:
    out.append(0xF6)


def _bool(out: bytearray, v: bool) -> None:
    out.append(0xF5 if v else 0xF4)


def _float(out: bytearray, v: float) -> None:
    out += cbor2.dumps(v)  # cbor2's own choice of width


# By exact type: a subclass (an enum, a bool's int) is cbor2's to write.
_SCALARS: Final[dict[type, Callable[[bytearray, Any], None]]] = {
    int: _int,
    str: write_text,
    type(None): _none,
    bool: _bool,
    float: _float,
    bytes: _bytes,
    Pid: _pid,
}


def write_leaf(out: bytearray, v: Any, allowed: frozenset[type]) -> None:
    """Append leaf field ``v``, one of the ``allowed`` types (``roost.storage._schema``).

    Raises:
        Slow: ``v`` is of another type.
    """
    tp = type(v)
    if tp not in allowed:
        raise Slow
    writer = _SCALARS.get(tp)
    if writer is None:  # an enum: written as cbor2 writes it
        out += cbor2.dumps(v)
    else:
        writer(out, v)


def write_payload(out: bytearray, v: Any, walk: Any, limit: int) -> None:
    """Append user payload ``v``, allowed ``limit`` levels (see ``Codec.encode_typed``).

    ``walk`` is the row's ``roost.storage._walk.Walk`` (``Codec.payload_walk``), which
    imports this module: the walk of the payloads, and cbor2's hook.

    Raises:
        Slow: the walk refused ``v`` or found a value it must rewrite for cbor2.
        Exception: whatever the walk, cbor2 or the value's own methods raised.
    """
    tp = type(v)
    writer = _SCALARS.get(tp)
    if writer is not None:
        writer(out, v)
        return
    if tp is list:  # most often arguments: a few scalars, written here too
        mark = len(out)
        out += head(4, len(v))
        for item in v:
            item_writer = _SCALARS.get(type(item))
            if item_writer is None:
                del out[mark:]
                break
            item_writer(out, item)
        else:
            return
    if tp is dict and not v:
        out.append(0xA0)
        return
    # A payload at exactly the limit may hold a bignum: the full walk decides.
    if walk.depth(v, limit) >= limit or walk.native:
        raise Slow
    out += cbor2.dumps(v, default=walk)


def field_lines(expr: str, leaves: frozenset[type] | None, name: str) -> list[str]:
    """Source lines (a generated writer's body) appending the value of ``expr`` to ``out``.

    ``leaves``: the types a leaf field may hold (``roost.storage._schema.leaf_types``);
    None for a payload (written by ``write_payload`` with ``walk`` and ``limit``). A leaf's
    set is looked up as ``name`` in the writer's namespace (see ``writer_namespace``). The
    common values (a small int, a str, None) are written inline.
    """
    lines = [f"    v = {expr}"]
    if leaves is None:
        return [
            *lines,
            "    if type(v) is int and 0 <= v < 24:",
            "        out.append(v)",
            "    elif v is None:",
            "        out.append(0xF6)",
            "    else:",
            "        _payload(out, v, walk, limit)",
        ]
    branches = []
    if int in leaves:
        branches += ["type(v) is int and 0 <= v < 24:", "    out.append(v)"]
    if str in leaves:
        branches += ["type(v) is str:", "    _text(out, v)"]
    if type(None) in leaves:
        branches += ["v is None:", "    out.append(0xF6)"]
    for i in range(0, len(branches), 2):
        lines.append(f"    {'if' if i == 0 else 'elif'} {branches[i]}")
        lines.append(f"    {branches[i + 1]}")
    indent = "        " if branches else "    "
    if branches:
        lines.append("    else:")
    lines.append(f"{indent}_leaf(out, v, {name})")
    return lines


def writer_namespace() -> dict[str, Any]:
    """The names ``field_lines``' source refers to."""
    return {"_leaf": write_leaf, "_payload": write_payload, "_text": write_text}
