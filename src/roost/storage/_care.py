"""Store care: finding damage before LMDB maps a file, and checking, salvaging, backing up.

LMDB cannot survive its own file being damaged: a torn or overwritten page can make it fail
an assertion (SIGABRT) or read outside its map (SIGSEGV), and a truncated file makes any
read of a page past the new end a SIGBUS. So a store is read by ``roost.storage._lmdb_file``
(plain reads, every page checked) before LMDB opens it:

- ``inspect_before_open``: a ``data.mdb`` that is empty where the directory shows an earlier
  store, whose meta pages are damaged, that is shorter than its meta pages say, or one of
  whose trees (the free list, the table of tables, any table) has a damaged page, is refused
  with a ``roost.Error`` of kind Unavailable that names the damage and the two commands that
  deal with it. A store that passes never shows LMDB a damaged page (unless the file is
  damaged later, while open: LMDB's own errors are then turned into the same kind of error
  by the transaction wrappers, for the one call that met them).
- ``check_store``: the same walk over every table and record, read-only, each value also
  parsed as CBOR; for ``roost store check``.
- ``salvage_store``: every record the walk can read, copied into a new store; what it cannot
  read is listed (the damaged page, its table, the last key before it). It never maps the
  damaged file, so it works on a truncated one too.
- ``backup_store``: LMDB's compacting copy of a consistent snapshot, beside a running node.

A deep walk reads every page in use once (tens of microseconds a page), so it runs whenever a
process that will write opens the store. Beside a running node (a read-only open while the
directory's lock names a live process) only the meta pages and the file size are checked:
that node walked the file when it opened, and its writes would race a walk without LMDB's
reader registration.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, Final

import attrs
import cbor2

from roost._errors import Error, ErrorKind
from roost.storage._datadir import LOCK_FILE, prepare_dir
from roost.storage._lmdb_file import (
    FREE_TABLE,
    MAIN_TABLE,
    NO_PAGE,
    Damage,
    LmdbFile,
    Metas,
    read_metas,
)
from roost.storage._store import TABLES, care_hint

__all__ = [
    "CORE_TABLES",
    "CheckReport",
    "SalvageReport",
    "TableReport",
    "backup_store",
    "check_store",
    "inspect_before_open",
    "refuse_empty",
    "salvage_store",
]

DATA_FILE: Final = "data.mdb"
# The tables a node cannot open without: the runs and their histories.
CORE_TABLES: Final = frozenset({"runs", "histories", "meta", "quarantine"})
_SHOWN: Final = 5  # damaged pages a refusal names


def _damaged(path: str, what: str, details: dict[str, Any] | None = None) -> Error:
    return Error(
        f"the store in {path} is damaged: {what}; the node does not open it, so nothing "
        f"more is lost; {care_hint(path)}",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"path": path, **(details or {})},
    )


def _holder_alive(path: str) -> bool:
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
            '(docs/operating.md, "Backup and restore"), or, to start over with no records, '
            f"delete {data} and the directory's lock.mdb",
            kind=ErrorKind.UNAVAILABLE,
            retryable=False,
            details={"path": path, "file": data},
        )


def _check_metas(path: str, metas: Metas) -> None:
    if metas.problems:
        raise _damaged(path, "; ".join(metas.problems), {"problems": list(metas.problems)})
    meta = metas.current
    assert meta is not None
    if metas.short:
        raise _damaged(
            path,
            f"{DATA_FILE} holds {metas.size} bytes, but its meta page says its pages run to "
            f"{meta.needed_size} bytes (page {meta.last_pg} of {meta.psize} bytes): the file "
            "was cut short, and reading past its end would kill the process (SIGBUS)",
            {"size": metas.size, "needed": meta.needed_size},
        )


def inspect_before_open(path: str, *, locked: bool) -> None:
    """Refuse a store whose file LMDB could not read safely; see the module docstring.

    Args:
        path: the data directory (with its ``data.mdb``; a missing file is a new store).
        locked: this process holds the directory's lock. Without it, every tree is walked
            only if no live process holds the lock (else just the meta pages and the size).

    Raises:
        roost.Error: kind Unavailable naming the damage, ``roost store check`` and
            ``roost store salvage``.
    """
    data = os.path.join(path, DATA_FILE)
    try:
        if os.path.getsize(data) == 0:
            return  # a new store (refuse_empty ran before the directory was locked)
        metas = read_metas(data)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _damaged(path, f"{DATA_FILE} cannot be read ({exc})") from exc
    _check_metas(path, metas)
    if not locked and _holder_alive(path):
        return
    with LmdbFile(data) as file:
        damage = [d for _table, d, _n in _walk_all(file, decode=False) if isinstance(d, Damage)]
    if damage:
        shown = "; ".join(_describe(d) for d in damage[:_SHOWN])
        more = f" (and {len(damage) - _SHOWN} more)" if len(damage) > _SHOWN else ""
        tables = sorted({d.table for d in damage})
        raise _damaged(
            path,
            f"{len(damage)} page(s) cannot be read, in the {', '.join(tables)} table(s): "
            f"{shown}{more}",
            {"tables": tables, "pages": [d.page for d in damage]},
        )


def _describe(damage: Damage) -> str:
    where = f" (after the key {damage.after!r:.80})" if damage.after is not None else ""
    return f"{damage.table}: {damage.reason}{where}"


def _walk_all(
    file: LmdbFile, *, decode: bool
) -> Iterator[tuple[str, Damage | tuple[bytes, bytes], str | None]]:
    """Every tree's records and damage: ``(table, record or damage, decode problem)``."""
    for damage in file.check_free_list():
        yield FREE_TABLE, damage, None
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


def _cbor_problem(value: bytes) -> str | None:
    if len(value) == 8 and value[0] == 0:  # a big-endian u64 counter (the meta table's)
        return None
    try:
        cbor2.loads(value, tag_hook=lambda _decoder, tag: tag)
    except Exception as exc:  # noqa: BLE001 - any failure of the parser means unreadable
        return f"{type(exc).__name__}: {exc}"
    return None


@attrs.define
class TableReport:
    """What a walk found in one table."""

    records: int = 0
    damaged_pages: list[dict[str, Any]] = attrs.field(factory=list)
    undecodable: list[dict[str, Any]] = attrs.field(factory=list)


@attrs.define
class CheckReport:
    """What ``check_store`` found: per table, and the file itself."""

    path: str
    problems: list[str] = attrs.field(factory=list)
    tables: dict[str, TableReport] = attrs.field(factory=dict)

    @property
    def damaged(self) -> bool:
        """True if anything cannot be read."""
        return bool(self.problems) or any(
            t.damaged_pages or t.undecodable for t in self.tables.values()
        )

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return {
            "path": self.path,
            "damaged": self.damaged,
            "problems": list(self.problems),
            "tables": {name: attrs.asdict(report) for name, report in self.tables.items()},
        }


def _damage_json(damage: Damage) -> dict[str, Any]:
    return {
        "page": damage.page,
        "reason": damage.reason,
        "after": damage.after.hex() if damage.after is not None else None,
    }


def _store_file(path: str) -> str:
    data = os.path.join(path, DATA_FILE)
    if not os.path.isfile(data):
        raise Error(
            f"there is no roost store in {path} (no {DATA_FILE}): check the path",
            kind=ErrorKind.NOT_FOUND,
            retryable=False,
            details={"path": path},
        )
    return data


def _open_file(path: str, data: str, report: CheckReport) -> LmdbFile | None:
    try:
        if os.path.getsize(data) == 0:
            report.problems.append(f"{DATA_FILE} is empty (0 bytes): it holds no store")
            return None
        metas = read_metas(data)
    except OSError as exc:
        report.problems.append(f"{DATA_FILE} cannot be read: {exc}")
        return None
    report.problems += metas.problems
    meta = metas.current
    if meta is None:
        return None
    if metas.short:
        report.problems.append(
            f"{DATA_FILE} holds {metas.size} bytes but its pages run to {meta.needed_size}: "
            "it was cut short; the pages past its end are lost"
        )
    return LmdbFile(data, meta)


def check_store(path: str | os.PathLike[str]) -> CheckReport:
    """Walk every table and record of the store in ``path`` read-only; report the damage.

    Works on a stopped store and beside a running node alike (beside one, a page the node
    rewrites during the walk can show as damaged: run it again to tell).

    Raises:
        roost.Error: NotFound if there is no store there.
    """
    real = os.path.realpath(os.fspath(path))
    data = _store_file(real)
    report = CheckReport(path=real)
    file = _open_file(real, data, report)
    if file is None:
        return report
    with file:
        for table, item, problem in _walk_all(file, decode=True):
            entry = report.tables.setdefault(table, TableReport())
            if isinstance(item, Damage):
                entry.damaged_pages.append(_damage_json(item))
                continue
            entry.records += 1
            if problem is not None:
                entry.undecodable.append({"key": item[0].hex(), "error": problem})
    return report


@attrs.define
class SalvageReport:
    """What ``salvage_store`` copied, by table, and what it could not read."""

    source: str
    dest: str
    problems: list[str] = attrs.field(factory=list)
    copied: dict[str, int] = attrs.field(factory=dict)
    lost: list[dict[str, Any]] = attrs.field(factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return attrs.asdict(self)


def _empty_dest(dest: str) -> None:
    if os.path.exists(os.path.join(dest, DATA_FILE)):
        raise Error(
            f"{dest} already holds a store: salvage writes into a new data directory only; "
            "give a path that does not exist yet (or an empty directory)",
            kind=ErrorKind.INVALID,
            retryable=False,
            details={"path": dest},
        )


def salvage_store(
    source: str | os.PathLike[str], dest: str | os.PathLike[str], *, batch: int = 1000
) -> SalvageReport:
    """Copy every record that can be read from the store in ``source`` into a new store.

    ``source`` is only read, with plain reads (never mapped), so a truncated or damaged
    file is safe to salvage; stop the node that uses it first. Each table's readable
    records go to the same table of the new store in ``dest``, byte for byte (a value that
    does not decode is copied too: a node quarantines it on open, as it would have).

    Returns:
        What was copied, per table, and every damaged page with its table and the last key
        read before it (the records after that key, up to the next readable one, are lost).

    Raises:
        roost.Error: NotFound with no store in ``source``; Invalid if ``dest`` holds one;
            Unavailable if no meta page can be read.
    """
    from roost.storage._lmdb import open_lmdb_store  # noqa: PLC0415 - _lmdb imports this module

    src = os.path.realpath(os.fspath(source))
    out = os.path.realpath(os.fspath(dest))
    data = _store_file(src)
    _empty_dest(out)
    check = CheckReport(path=src)
    file = _open_file(src, data, check)
    if file is None:
        raise _damaged(src, "; ".join(check.problems) + " (nothing can be salvaged from it)")
    report = SalvageReport(source=src, dest=out, problems=list(check.problems))
    store = open_lmdb_store(out)
    try:
        with file:
            pending: list[tuple[str, bytes, bytes]] = []
            for table, item, _problem in _walk_all(file, decode=False):
                if table == FREE_TABLE:
                    continue  # no records: the new store keeps its own
                if isinstance(item, Damage):
                    report.lost.append({"table": table, **_damage_json(item)})
                    continue
                if table not in TABLES:  # its name was damaged: it is reported above
                    continue
                pending.append((table, *item))
                report.copied[table] = report.copied.get(table, 0) + 1
                if len(pending) >= batch:
                    store.transact_sync(_put_rows(pending))
                    pending = []
            if pending:
                store.transact_sync(_put_rows(pending))
    finally:
        store.close()
    return report


def _put_rows(rows: list[tuple[str, bytes, bytes]]) -> Any:

    def put(txn: Any) -> None:
        for table, k, v in rows:
            txn.put(table, k, v)

    return put


def backup_store(data_dir: str | os.PathLike[str], dest: str | os.PathLike[str]) -> str:
    """Write a consistent, compacted copy of the store in ``data_dir`` into ``dest``.

    Uses LMDB's copy of one read snapshot (with compaction: free pages are left out), so it
    is safe beside a running node; the copy is a data directory of its own (0700, its
    ``data.mdb`` 0600) that a node opens as it is.

    Returns:
        The path of the copy's ``data.mdb``.

    Raises:
        roost.Error: NotFound with no store in ``data_dir``; Invalid if ``dest`` holds a
            store already; Unavailable if the store is damaged or the copy fails.
    """
    from roost.storage._lmdb import open_lmdb_store  # noqa: PLC0415 - _lmdb imports this module

    out = os.path.realpath(os.fspath(dest))
    _empty_dest(out)
    store = open_lmdb_store(data_dir, readonly=True, lock=False)
    try:
        try:
            prepare_dir(out)
        except OSError as exc:
            raise Error(
                f"cannot create the backup directory {out}: {exc}",
                kind=ErrorKind.UNAVAILABLE,
                retryable=False,
            ) from exc
        copy = os.path.join(out, DATA_FILE)
        try:
            store.copy_to(out)
        except Error:
            with contextlib.suppress(OSError):
                os.unlink(copy)
            raise
        os.chmod(copy, 0o600)
    finally:
        store.close()
    return copy
