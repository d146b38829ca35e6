"""Reading an LMDB ``data.mdb`` page by page in Python, to find damage before LMDB maps it.

LMDB trusts its file. A page overwritten with random bytes can make it raise
``MDB_CORRUPTED``, but also fail one of its own assertions (SIGABRT), follow a child page
number out of the map (SIGSEGV), or touch a page past the end of a truncated file (SIGBUS):
none of these can be caught in the process. This module reads the same file with ordinary
bounds-checked reads instead, so that damage is found, and named, where nothing can crash:

- ``read_metas``: the two meta pages (page 0 and 1) and which one LMDB would use (the valid
  one with the higher transaction id); a file shorter than what that meta says it holds
  (``(mm_last_pg + 1) * psize`` bytes) is short.
- ``LmdbFile.walk``: one B-tree (the free list, the main table of table names, or a named
  table) from its root, depth first in key order, checking every page on the way (its own
  page number, its type for its depth, the bounds of its node table, each node's key and
  value sizes, overflow pages, key order). It yields each readable ``(key, value)`` and, for a
  page that fails a check, one ``Damage`` in its place, and goes on with the page's siblings:
  every record on an undamaged page that an undamaged path reaches is found.

The layout (LMDB 0.9, 64-bit): a page starts with a 16-byte header (``mp_pgno`` u64,
``mp_pad`` u16, ``mp_flags`` u16, then ``mp_lower``/``mp_upper`` u16 each, or an overflow
page's page count u32), followed by the u16 offsets of its nodes. A node is ``mn_lo``,
``mn_hi``, ``mn_flags``, ``mn_ksize`` (u16 each), then the key and the value: on a branch
page ``lo | hi << 16 | flags << 32`` is the child's page number; on a leaf ``lo | hi << 16`` is
the value's size, and a ``F_BIGDATA`` node's value is the u64 number of its first overflow
page. A meta page holds ``mm_magic``, ``mm_version``, ``mm_address``, ``mm_mapsize``, the free
list's and the main table's ``MDB_db`` records, ``mm_last_pg`` and ``mm_txnid``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Final

import attrs

__all__ = [
    "FREE_TABLE",
    "MAIN_TABLE",
    "Damage",
    "DbRecord",
    "LmdbFile",
    "Meta",
    "Metas",
    "read_metas",
]

MAGIC: Final = 0xBEEFC0DE
DATA_VERSION: Final = 1
HEADER: Final = 16  # PAGEHDRSZ
NODE: Final = 8  # NODESIZE
NO_PAGE: Final = 2**64 - 1  # P_INVALID: the root of an empty table
P_BRANCH: Final = 0x01
P_LEAF: Final = 0x02
P_OVERFLOW: Final = 0x04
P_META: Final = 0x08
P_LEAF2: Final = 0x20
F_BIGDATA: Final = 0x01
F_SUBDATA: Final = 0x02
F_DUPDATA: Final = 0x04
DB_RECORD_SIZE: Final = 48
MAX_DEPTH: Final = 32  # far past any real tree: a bigger depth is a damaged record
PAGE_SIZES: Final = (4096, 8192, 16384, 32768, 65536, 512, 1024, 2048)
# Names the walk gives the two trees LMDB keeps for itself.
FREE_TABLE: Final = "(free list)"
MAIN_TABLE: Final = "(table of tables)"

_PAGE_HEAD = struct.Struct("<QHHHH")
_NODE_HEAD = struct.Struct("<HHHH")
_DB = struct.Struct("<IHHQQQQQ")
_META = struct.Struct("<II")
_U64 = struct.Struct("<Q")


@attrs.frozen
class DbRecord:
    """An ``MDB_db`` record: one B-tree's shape and where its root is."""

    flags: int
    depth: int
    entries: int
    root: int

    @classmethod
    def parse(cls, data: bytes | memoryview) -> DbRecord:
        """Parse the 48 bytes of an ``MDB_db``."""
        _pad, flags, depth, _branch, _leaf, _overflow, entries, root = _DB.unpack_from(data)
        return cls(flags=flags, depth=depth, entries=entries, root=root)


@attrs.frozen
class Meta:
    """One meta page: the page size, the last page in use, and the two roots it points to."""

    page: int
    psize: int
    last_pg: int
    txnid: int
    free: DbRecord
    main: DbRecord

    @property
    def needed_size(self) -> int:
        """The bytes the file must hold for every page this meta refers to."""
        return (self.last_pg + 1) * self.psize


@attrs.frozen
class Metas:
    """Both meta pages of a file (None where one cannot be read, with why in ``problems``)."""

    size: int
    metas: tuple[Meta | None, Meta | None]
    problems: tuple[str, ...]

    @property
    def current(self) -> Meta | None:
        """The meta LMDB opens the file with: the valid one with the higher txnid."""
        valid = [m for m in self.metas if m is not None]
        return max(valid, key=lambda m: m.txnid) if valid else None

    @property
    def short(self) -> bool:
        """The file ends before the last page the current meta uses."""
        meta = self.current
        return meta is not None and self.size < meta.needed_size


def _parse_meta(data: bytes, page: int) -> Meta | str:  # noqa: PLR0911 - one return a check
    if len(data) < 152:
        return f"meta page {page} is cut off (the file ends inside it)"
    pgno, _pad, flags, _lower, _upper = _PAGE_HEAD.unpack_from(data)
    magic, version = _META.unpack_from(data, HEADER)
    if not flags & P_META or pgno != page:
        return f"meta page {page} is not a meta page (its header is damaged)"
    if magic != MAGIC:
        return f"meta page {page} has no LMDB magic number (it is damaged, or not LMDB's)"
    if version != DATA_VERSION:
        return f"meta page {page} has LMDB data version {version}, not {DATA_VERSION}"
    psize = _DB.unpack_from(data, 40)[0]
    if psize not in PAGE_SIZES:
        return f"meta page {page} gives a page size of {psize} bytes (damaged)"
    last_pg, txnid = struct.unpack_from("<QQ", data, 136)
    free, main = DbRecord.parse(data[40:88]), DbRecord.parse(data[88:136])
    if last_pg < 1 or last_pg > 2**48:
        return f"meta page {page} gives a last page of {last_pg} (damaged)"
    return Meta(page=page, psize=psize, last_pg=last_pg, txnid=txnid, free=free, main=main)


def read_metas(path: str) -> Metas:
    """Read both meta pages of the LMDB file at ``path``.

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        first = _parse_meta(f.read(152), 0)
        problems: list[str] = []
        sizes = (first.psize,) if isinstance(first, Meta) else PAGE_SIZES
        second: Meta | str = "meta page 1 cannot be found"
        for psize in sizes:  # meta page 1 sits one page in: try each page size LMDB allows
            f.seek(psize)
            found = _parse_meta(f.read(152), 1)
            if isinstance(found, Meta) and found.psize == psize:
                second = found
                break
            if len(sizes) == 1:
                second = found
    metas: list[Meta | None] = []
    for parsed in (first, second):
        if isinstance(parsed, str):
            problems.append(parsed)
            metas.append(None)
        else:
            metas.append(parsed)
    if metas[0] is not None and metas[1] is not None and metas[0].psize != metas[1].psize:
        problems.append("the two meta pages give different page sizes")
    return Metas(size=size, metas=(metas[0], metas[1]), problems=tuple(problems))


@attrs.frozen
class Damage:
    """A page (and the subtree under it) that cannot be read, in the walk's key order.

    Attributes:
        table: the tree's table name (or ``FREE_TABLE``/``MAIN_TABLE``).
        page: the damaged page's number.
        reason: what is wrong with it.
        after: the last key the walk read before it (None: none before).
    """

    table: str
    page: int
    reason: str
    after: bytes | None = None


class _Bad(Exception):  # noqa: N818 - private control flow: one page fails a check
    pass


@attrs.frozen
class _Entry:
    key: bytes
    value: bytes
    flags: int
    overflow: int | None = None  # the first overflow page of a big value
    path: tuple[int, ...] = ()  # the pages from the root down to its leaf


class LmdbFile:
    """An LMDB data file, read with plain reads (never mapped): see the module docstring.

    Args:
        path: the ``data.mdb`` file.
        meta: the meta page to read the trees of (default: the current one).

    Raises:
        OSError: the file cannot be read.
        ValueError: neither meta page can be read.
    """

    def __init__(self, path: str, meta: Meta | None = None) -> None:
        self.metas = read_metas(path)
        chosen = meta or self.metas.current
        if chosen is None:
            raise ValueError("; ".join(self.metas.problems))
        self.meta = chosen
        self.psize = chosen.psize
        # Plain reads, not a map: a file cut short (even while this reads it) ends a read
        # early instead of raising SIGBUS.
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.pages_read = 0
        # One byte a page: set for every page a walk read (overflow spans included).
        self._visited = bytearray(chosen.last_pg + 1)

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LmdbFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, start: int, size: int) -> bytes:
        data = os.pread(self._fd, size, start)
        if len(data) < size:
            raise _Bad("it lies past the end of the file (the file is short)")
        return data

    def _page(self, pgno: int) -> memoryview:
        if not 2 <= pgno <= self.meta.last_pg:
            raise _Bad(f"page number {pgno} is outside the file's pages 2..{self.meta.last_pg}")
        try:
            data = self._read(pgno * self.psize, self.psize)
        except _Bad:
            raise _Bad(f"page {pgno} lies past the end of the file (the file is short)") from None
        self.pages_read += 1
        self._visited[pgno] = 1
        return memoryview(data)

    def tables(self) -> tuple[dict[str, DbRecord], list[Damage]]:
        """The named tables (from the main tree) and the damage found reading that tree."""
        found: dict[str, DbRecord] = {}
        damage: list[Damage] = []
        for item in self._walk(MAIN_TABLE, self.meta.main):
            if isinstance(item, Damage):
                damage.append(item)
            elif not item.flags & F_SUBDATA or len(item.value) != DB_RECORD_SIZE:
                # roost keeps nothing but tables here: anything else is a damaged record,
                # and LMDB would create that table anew, empty.
                name = item.key.decode("utf-8", "replace")
                reason = "its record in the table of tables is damaged"
                damage.append(Damage(table=name, page=item.path[-1], reason=reason))
            else:
                record = DbRecord.parse(item.value)
                problem = self._check_record(record)
                if problem is None:
                    found[item.key.decode("utf-8", "replace")] = record
                else:
                    name = item.key.decode("utf-8", "replace")
                    damage.append(Damage(table=name, page=NO_PAGE, reason=problem))
        return found, damage

    def _check_record(self, record: DbRecord) -> str | None:
        if record.root == NO_PAGE:
            return None if record.depth == 0 else "its record has a depth but no root page"
        if not 2 <= record.root <= self.meta.last_pg:
            return f"its root page {record.root} is outside the file's pages"
        if not 1 <= record.depth <= MAX_DEPTH:
            return f"its record gives a depth of {record.depth}"
        return None

    def walk(self, table: str, record: DbRecord) -> Iterator[tuple[bytes, bytes] | Damage]:
        """Every readable ``(key, value)`` of one tree in key order, and a `Damage` per bad page."""
        for item in self._walk(table, record):
            yield item if isinstance(item, Damage) else (item.key, item.value)

    def pages_of(self, table: str, record: DbRecord) -> dict[bytes, tuple[int, ...]]:
        """Each readable record's key with the pages it is read from.

        The pages from the root down to its leaf, then its overflow pages (if any).
        """
        out: dict[bytes, tuple[int, ...]] = {}
        for item in self._walk(table, record):
            if isinstance(item, _Entry):
                pages = item.path
                if item.overflow is not None:
                    span = max(1, -(-(HEADER + len(item.value)) // self.psize))
                    pages += tuple(range(item.overflow, item.overflow + span))
                out[item.key] = pages
        return out

    def check_free_list(self) -> list[Damage]:
        """The damage in the free list: its tree, and page numbers it must not hold.

        A free page LMDB reuses is overwritten: one outside the file, or one a tree still
        uses, would spread the damage. Pages in use are the ones walked so far, so walk the
        tables first.
        """
        damage: list[Damage] = []
        listed: set[int] = set()
        for item in self._walk(FREE_TABLE, self.meta.free):
            if isinstance(item, Damage):
                damage.append(item)
                continue
            value = item.value
            count = _U64.unpack_from(value)[0] if len(value) >= 8 else -1
            if len(value) % 8 or count != len(value) // 8 - 1:
                damage.append(Damage(FREE_TABLE, NO_PAGE, "a free-list entry is malformed"))
                continue
            pages = {p for (p,) in _U64.iter_unpack(value[8:])}
            if any(not 2 <= p <= self.meta.last_pg for p in pages):
                reason = "the free list names pages outside the file's pages"
                damage.append(Damage(FREE_TABLE, NO_PAGE, reason))
            listed |= pages
        used = sorted(p for p in listed if p < len(self._visited) and self._visited[p])
        if used:
            reason = f"the free list names {len(used)} page(s) a tree uses (from page {used[0]})"
            damage.append(Damage(FREE_TABLE, used[0], reason))
        return damage

    def _walk(self, table: str, record: DbRecord) -> Iterator[_Entry | Damage]:
        problem = self._check_record(record)
        if problem is not None:
            yield Damage(table=table, page=record.root, reason=problem)
            return
        if record.root == NO_PAGE:
            return
        last: list[bytes | None] = [None]
        yield from self._visit(table, record.root, record.depth, last, ())

    def _visit(
        self, table: str, pgno: int, levels: int, last: list[bytes | None], path: tuple[int, ...]
    ) -> Iterator[_Entry | Damage]:
        # ``levels`` counts this page: 1 is a leaf. ``last`` holds the last key yielded.
        try:
            page = self._page(pgno)
            nodes = self._nodes(page, pgno, leaf=levels == 1)
        except _Bad as exc:
            yield Damage(table=table, page=pgno, reason=str(exc), after=last[0])
            return
        if levels > 1:
            for _key, child in nodes:
                yield from self._visit(table, child, levels - 1, last, (*path, pgno))
            return
        try:
            entries = self._leaf_entries(page, nodes, last[0])
        except _Bad as exc:
            yield Damage(table=table, page=pgno, reason=f"page {pgno}: {exc}", after=last[0])
            return
        for entry in entries:
            last[0] = entry.key
            yield attrs.evolve(entry, path=(*path, pgno))

    def _nodes(self, page: memoryview, pgno: int, *, leaf: bool) -> list[tuple[int, int]]:
        """The page's node offsets with (on a branch) each child's page number."""
        own, _pad, flags, lower, upper = _PAGE_HEAD.unpack_from(page)
        if own != pgno:
            raise _Bad(f"page {pgno} says it is page {own} (its header is damaged)")
        want = P_LEAF if leaf else P_BRANCH
        if flags & (P_BRANCH | P_LEAF | P_OVERFLOW | P_META | P_LEAF2) != want:
            kind = "leaf" if leaf else "branch"
            raise _Bad(f"page {pgno} should be a {kind} page, its flags are {flags:#x}")
        psize = self.psize
        if not HEADER <= lower <= upper <= psize or (lower - HEADER) % 2:
            raise _Bad(f"page {pgno} has a broken node table ({lower}..{upper})")
        count = (lower - HEADER) // 2
        if count == 0:
            raise _Bad(f"page {pgno} holds no nodes")
        out: list[tuple[int, int]] = []
        for (offset,) in struct.iter_unpack("<H", page[HEADER:lower]):
            if not upper <= offset <= psize - NODE:
                raise _Bad(f"page {pgno} has a node offset {offset} outside its node area")
            lo, hi, nflags, ksize = _NODE_HEAD.unpack_from(page, offset)
            if offset + NODE + ksize > psize:
                raise _Bad(f"page {pgno} has a key running past its end")
            child = 0
            if not leaf:
                child = lo | hi << 16 | nflags << 32
                if not 2 <= child <= self.meta.last_pg:
                    raise _Bad(f"page {pgno} points to page {child}, outside the file's pages")
            out.append((offset, child))
        return out

    def _leaf_entries(
        self, page: memoryview, nodes: list[tuple[int, int]], previous: bytes | None
    ) -> list[_Entry]:
        entries = [self._leaf_entry(page, offset) for offset, _ in nodes]
        for entry in entries:
            if previous is not None and entry.key <= previous:
                raise _Bad(f"its keys are out of order (at {entry.key!r:.60})")
            previous = entry.key
        return entries

    def _leaf_entry(self, page: memoryview, offset: int) -> _Entry:
        lo, hi, flags, ksize = _NODE_HEAD.unpack_from(page, offset)
        size = lo | hi << 16
        start = offset + NODE
        key = bytes(page[start : start + ksize])
        if not key:
            raise _Bad("it holds an empty key")
        if flags & F_DUPDATA:
            raise _Bad("it holds a duplicate-key node (roost never writes one)")
        if not flags & F_BIGDATA:
            if start + ksize + size > self.psize:
                raise _Bad("a value runs past the page's end")
            return _Entry(key, bytes(page[start + ksize : start + ksize + size]), flags)
        if start + ksize + 8 > self.psize:
            raise _Bad("an overflow reference runs past the page's end")
        first = _U64.unpack_from(page, start + ksize)[0]
        return _Entry(key, self._overflow(first, size), flags, overflow=first)

    def _overflow(self, pgno: int, size: int) -> bytes:
        head = self._page(pgno)
        own, _pad, flags = struct.unpack_from("<QHH", head)
        pages = struct.unpack_from("<I", head, 12)[0]
        if own != pgno or not flags & P_OVERFLOW:
            raise _Bad(f"its value's overflow page {pgno} is damaged")
        if pages < 1 or pgno + pages - 1 > self.meta.last_pg or HEADER + size > pages * self.psize:
            raise _Bad(f"its value's overflow page {pgno} gives a wrong length")
        if size <= self.psize - HEADER:
            return bytes(head[HEADER : HEADER + size])
        try:
            data = self._read(pgno * self.psize + HEADER, size)
        except _Bad:
            raise _Bad(
                f"its value's overflow pages from {pgno} lie past the end of the file"
            ) from None
        self.pages_read += pages - 1
        self._visited[pgno + 1 : pgno + pages] = b"\x01" * (pages - 1)
        return data
