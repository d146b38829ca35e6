"""Before LMDB maps a store: refuse a file it could not read without killing the process.

LMDB cannot survive its own file being damaged: a torn or overwritten page can make it fail
an assertion (SIGABRT) or read outside its map (SIGSEGV), and a truncated file makes any
read of a page past the new end a SIGBUS. So ``open_lmdb_store`` first reads the file with
``roost.storage._lmdb_file`` (plain reads, every page checked):

- ``refuse_empty``: a 0-byte ``data.mdb`` where the directory shows an earlier store.
- ``inspect_before_open``: damaged meta pages, a file shorter than its meta pages say, or a
  damaged page in one of its trees (the free list, the table of tables, any table).

Each is refused with a ``roost.Error`` of kind Unavailable that names the damage and the two
commands that deal with it. A store that passes never shows LMDB a damaged page (unless the
file is damaged later, while open: LMDB's own errors are then turned into the same kind of
error by the transaction wrappers, for the one call that met them).

With ``salvage=True`` (a node's open, under the lock) damaged pages and one damaged meta page
are not refused but returned (``Found``), for ``roost.storage._care.salvage_at_open`` to read
around; still refused are a file cut short, two damaged meta pages, and damage that leaves
nothing of a core table readable (``unsalvageable``).

A deep walk reads every page in use once (tens of microseconds a page), so it runs whenever
this process holds the directory's lock. Beside a running node (a read-only open while the
lock names a live process) only the meta pages and the file size are checked: that node
walked the file when it opened, and its writes would race a walk made without LMDB's reader
registration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Final

import attrs
import cbor2

from roost._errors import Error, ErrorKind
from roost.storage._datadir import LOCK_FILE
from roost.storage._lmdb_file import (
    FREE_TABLE,
    MAIN_TABLE,
    NO_PAGE,
    Damage,
    DbRecord,
    LmdbFile,
    Meta,
    Metas,
    read_metas,
)
from roost.storage._store import TABLES, care_hint

__all__ = [
    "CORE_TABLES",
    "DATA_FILE",
    "Found",
    "damaged",
    "describe",
    "holder_alive",
    "inspect_before_open",
    "refuse_empty",
    "walk_all",
]

DATA_FILE: Final = "data.mdb"
_SHOWN: Final = 5  # damaged pages a refusal names
# The tables a workflow resumes from, and the store's own bookkeeping: one whose root page
# cannot be read leaves nothing to resume from (or forgets what is quarantined), so a
# salvage at open refuses it. A lost root of any other table loses that table's records,
# which the salvage report names.
CORE_TABLES: Final = ("runs", "histories", "inbox", "tasks", "timers", "meta", "quarantine")


@attrs.frozen
class Found:
    """Damage a salvage at open can read around: the meta page to read, the damaged pages."""

    meta: Meta
    damage: tuple[Damage, ...]
    problems: tuple[str, ...]  # the damaged meta page, if one is


def damaged(path: str, what: str, details: dict[str, Any] | None = None) -> Error:
    """The Unavailable error for a damaged store in ``path``."""
    return Error(
        f"the store in {path} is damaged: {what}; roost does not open it, so nothing "
        f"more is lost; {care_hint(path)}",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"path": path, **(details or {})},
    )


def holder_alive(path: str) -> bool:
    """True if the directory's lock file names a process that is still running."""
    try:
        with open(os.path.join(path, LOCK_FILE), "rb") as f:
            text = f.read(32).decode("ascii", "replace").strip()
    except OSError:
        return False
    if not text.isdigit():
        return False
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def refuse_empty(path: str) -> None:
    """Refuse a 0-byte ``data.mdb`` in a directory that shows an earlier store.

    A store that has been opened once has a non-empty ``data.mdb`` (LMDB writes its meta
    pages at creation) and a ``roost.lock``; an empty file beside that lock is a store that
    was wiped (a failed copy, a disk that lost it), and opening it would start a new, empty
    store over it: every run gone, silently.

    Raises:
        roost.Error: kind Unavailable.
    """
    data = os.path.join(path, DATA_FILE)
    try:
        size = os.path.getsize(data)
    except OSError:
        return
    if size:
        return
    signs = [name for name in (LOCK_FILE, "admin.json") if os.path.exists(os.path.join(path, name))]
    if signs:
        raise Error(
            f"the store in {path} is empty: {DATA_FILE} holds 0 bytes, but the directory held "
            f"a store before ({', '.join(signs)} is there), so its records were lost outside "
            "roost; the node does not open it as a new store. Restore data.mdb from a backup "
            '(docs/operating.md, "Store care"), or, to start over with no records, '
            f"delete {data} and the directory's lock.mdb",
            kind=ErrorKind.UNAVAILABLE,
            retryable=False,
            details={"path": path, "file": data},
        )


def _check_metas(path: str, metas: Metas) -> None:
    if metas.problems:
        raise damaged(path, "; ".join(metas.problems), {"problems": list(metas.problems)})
    meta = metas.current
    assert meta is not None
    if metas.short:
        raise damaged(
            path,
            f"{DATA_FILE} holds {metas.size} bytes, but its meta page says its pages run to "
            f"{meta.needed_size} bytes (page {meta.last_pg} of {meta.psize} bytes): the file "
            "was cut short, and reading past its end would kill the process (SIGBUS)",
            {"size": metas.size, "needed": meta.needed_size},
        )


def inspect_before_open(path: str, *, locked: bool, salvage: bool = False) -> Found | None:
    """Refuse a store whose file LMDB could not read safely; see the module docstring.

    Args:
        path: the data directory (with its ``data.mdb``; a missing file is a new store).
        locked: this process holds the directory's lock. Without it, every tree is walked
            only if no live process holds the lock (else just the meta pages and the size).
        salvage: return damage a salvage can read around instead of refusing it.

    Returns:
        None for a sound file; with ``salvage``, the damage to read around.

    Raises:
        roost.Error: kind Unavailable naming the damage, ``roost store check`` and
            ``roost store salvage``.
    """
    data = os.path.join(path, DATA_FILE)
    try:
        if os.path.getsize(data) == 0:
            return None  # a new store (refuse_empty ran before the directory was locked)
        metas = read_metas(data)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise damaged(path, f"{DATA_FILE} cannot be read ({exc})") from exc
    one_meta_left = salvage and metas.current is not None and not metas.short
    if not one_meta_left:
        _check_metas(path, metas)
    if not locked and holder_alive(path):
        return None
    meta = metas.current
    assert meta is not None
    with LmdbFile(data, meta) as file:
        damage = [d for _table, d, _n in walk_all(file, decode=False) if isinstance(d, Damage)]
        tables = file.tables()[0] if damage else {}
    if not damage and not metas.problems:
        return None
    if salvage:
        refused = unsalvageable(damage, tables)
        if refused is None:
            return Found(meta=meta, damage=tuple(damage), problems=metas.problems)
        raise damaged(
            path,
            f"{refused}, so a node cannot open it by salvaging the rest",
            {"tables": sorted({d.table for d in damage}), "pages": [d.page for d in damage]},
        )
    shown = "; ".join(describe(d) for d in damage[:_SHOWN])
    more = f" (and {len(damage) - _SHOWN} more)" if len(damage) > _SHOWN else ""
    names = sorted({d.table for d in damage})
    raise damaged(
        path,
        f"{len(damage)} page(s) cannot be read, in the {', '.join(names)} table(s): {shown}{more}",
        {"tables": names, "pages": [d.page for d in damage]},
    )


def unsalvageable(damage: list[Damage], tables: dict[str, DbRecord]) -> str | None:
    """Why no salvage can open a store with this ``damage`` (None: one can).

    The table of tables damaged hides whole tables; a core table whose root page (or
    record) is damaged has nothing left to read.
    """
    for d in damage:
        if d.table == MAIN_TABLE:
            return f"the table of tables is damaged ({d.reason})"
        record = tables.get(d.table)
        if d.table in CORE_TABLES and (record is None or d.page in (record.root, NO_PAGE)):
            return (
                f"the root of the core {d.table} table cannot be read ({d.reason}): "
                "none of its records can be"
            )
    return None


def describe(damage: Damage) -> str:
    """One damaged page, for a message."""
    where = f" (after the key {damage.after!r:.80})" if damage.after is not None else ""
    return f"{damage.table}: {damage.reason}{where}"


def walk_all(
    file: LmdbFile, *, decode: bool
) -> Iterator[tuple[str, Damage | tuple[bytes, bytes], str | None]]:
    """Every tree's records and damage: ``(table, record or damage, decode problem)``."""
    tables, damage_found = file.tables()
    for damage in damage_found:
        yield damage.table if damage.table in TABLES else MAIN_TABLE, damage, None
    for name in sorted(set(tables) - set(TABLES)):
        # A byte flipped in a table's name would otherwise let LMDB create the table anew,
        # empty, and every record of the real one would be gone from sight.
        reason = f"it names a table roost does not have: {name!r:.60}"
        yield MAIN_TABLE, Damage(table=MAIN_TABLE, page=NO_PAGE, reason=reason), None
    for name in sorted(tables):
        for item in file.walk(name, tables[name]):
            problem = None
            if decode and not isinstance(item, Damage):
                problem = _cbor_problem(item[1])
            yield name, item, problem
    for damage in file.check_free_list():  # last: it needs the pages the tables use
        yield FREE_TABLE, damage, None


def _cbor_problem(value: bytes) -> str | None:
    if len(value) == 8 and value[0] == 0:  # a big-endian u64 counter (the meta table's)
        return None
    try:
        cbor2.loads(value, tag_hook=lambda _decoder, tag: tag)
    except Exception as exc:  # noqa: BLE001 - any failure of the parser means unreadable
        return f"{type(exc).__name__}: {exc}"
    return None
