r"""Order-preserving binary keys for LMDB tables.

LMDB compares keys as raw bytes, so every key is built to make byte order equal the logical
order of its parts:

- an ``int`` part is 8 bytes, unsigned big-endian (0 <= n < 2**64), so numbers sort
  numerically;
- a ``bytes`` part is written with every ``0x00`` byte escaped as ``0x00 0xFF`` and is then
  terminated by ``0x00 0x01``; a ``str`` part is its UTF-8 encoding, written the same way.

The terminator is not a prefix of the escape, so the encoding is prefix-free: ``key(b"wf-1")``
is a prefix of every key whose first part is ``b"wf-1"``, and of no other key (not of
``key(b"wf-10")``, nor of ``key(b"wf-1\x00")``). And because the terminator sorts below both the
escape and every other byte, ``b"a"`` sorts before ``b"a\x00"`` and ``b"ab"`` (the ordered-code
scheme of Bigtable-style stores). Parts carry no type marker, so one table must always use the
same sequence of part kinds; ``unpack_key`` is told that sequence to decode a key again.
"""

from __future__ import annotations

import struct
from typing import Final

from roost._errors import invalid
from roost._text import utf8

__all__ = ["U64_MAX", "from_u64", "key", "prefix_end", "u64", "unpack_key"]

U64_MAX: Final = 2**64 - 1
_U64: Final = struct.Struct(">Q")
_ESCAPED_NUL: Final = b"\x00\xff"
_TERMINATOR: Final = b"\x00\x01"

KeyPart = bytes | str | int


def u64(n: int) -> bytes:
    """Encode an unsigned 64-bit integer as 8 big-endian bytes.

    Raises:
        roost.Error: kind Invalid when ``n`` is not an int in ``[0, 2**64)``.
    """
    if type(n) is not int or not 0 <= n <= U64_MAX:
        raise invalid(f"a u64 key part must be an int in [0, 2**64), got {n!r}", value=repr(n))
    return _U64.pack(n)


def from_u64(data: bytes, offset: int = 0) -> int:
    """Decode 8 big-endian bytes at ``offset`` (the inverse of :func:`u64`).

    Raises:
        roost.Error: kind Invalid when fewer than 8 bytes are available.
    """
    if len(data) - offset < 8:
        raise invalid(f"a u64 needs 8 bytes at offset {offset}, the key has {len(data)}")
    value: int = _U64.unpack_from(data, offset)[0]
    return value


def key(*parts: KeyPart) -> bytes:
    """Build a composite key whose byte order is the order of its parts, left to right.

    Args:
        *parts: ``int`` (u64), ``bytes`` or ``str`` values; see the module docstring.

    Returns:
        The encoded key. ``key(a)`` is a prefix of ``key(a, b)`` for any ``b``.

    Raises:
        roost.Error: kind Invalid for a part of another type or an int out of range.
    """
    out = bytearray()
    for part in parts:
        if type(part) is int:
            out += u64(part)
        elif isinstance(part, bytes):
            out += part.replace(b"\x00", _ESCAPED_NUL)
            out += _TERMINATOR
        elif isinstance(part, str):
            out += utf8(part, "a key part").replace(b"\x00", _ESCAPED_NUL)
            out += _TERMINATOR
        else:
            raise invalid(
                f"key parts must be int, bytes or str, got {type(part).__name__!r}",
                value=repr(part),
            )
    return bytes(out)


def unpack_key(data: bytes, *kinds: type[KeyPart]) -> tuple[KeyPart, ...]:
    """Decode a key built by :func:`key` from the sequence of its part kinds.

    Args:
        data: the key.
        *kinds: ``int``, ``bytes`` or ``str`` for each part, in order.

    Returns:
        The decoded parts.

    Raises:
        roost.Error: kind Invalid when the key does not match ``kinds`` exactly.
    """
    parts: list[KeyPart] = []
    pos = 0
    for kind in kinds:
        if kind is int:
            parts.append(from_u64(data, pos))
            pos += 8
        elif kind is bytes or kind is str:
            raw, pos = _read_escaped(data, pos)
            parts.append(raw.decode("utf-8") if kind is str else raw)
        else:
            raise invalid(f"key part kinds must be int, bytes or str, got {kind!r}")
    if pos != len(data):
        raise invalid(f"key {data!r} has {len(data) - pos} bytes left after {len(kinds)} parts")
    return tuple(parts)


def _read_escaped(data: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while True:
        end = data.find(b"\x00", pos)
        if end < 0:
            raise invalid(f"key {data!r} has an unterminated bytes/str part at offset {pos}")
        out += data[pos:end]
        marker = data[end + 1 : end + 2]
        if marker == b"\x01":
            return bytes(out), end + 2
        if marker != b"\xff":
            raise invalid(f"key {data!r} has a malformed bytes/str part at offset {pos}")
        out.append(0)
        pos = end + 2


def prefix_end(prefix: bytes) -> bytes | None:
    """Return the smallest key greater than every key that starts with ``prefix``.

    Use it as the exclusive ``stop`` of a range scan over a prefix. Returns None when no
    such key exists (an empty prefix, or one made only of ``0xFF`` bytes): scan to the end.
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
