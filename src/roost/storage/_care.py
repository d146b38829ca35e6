"""Store care: ``roost store check``, ``salvage`` and ``backup``.

- ``check_store``: the walk of ``roost.storage._damage`` over every table and record,
  read-only, each value also parsed as CBOR.
- ``salvage_store``: every record the walk can read, copied into a new store; what it cannot
  read is listed (the damaged page, its table, the last key before it). It never maps the
  damaged file, so it works on a truncated one too.
- ``backup_store``: LMDB's compacting copy of a consistent snapshot, beside a running node.
- a node opening a damaged store salvages it in place (``roost.storage._salvage``), and
  ``check_store`` lists those salvages.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import attrs

from roost._errors import Error, ErrorKind
from roost.storage._damage import DATA_FILE, damaged, holder_alive, walk_all
from roost.storage._datadir import prepare_dir
from roost.storage._lmdb import open_lmdb_store
from roost.storage._lmdb_file import Damage, LmdbFile, read_metas
from roost.storage._salvage import SalvageReport, copy_readable, damage_json, earlier_salvages

__all__ = [
    "CheckReport",
    "SalvageReport",
    "TableReport",
    "backup_store",
    "check_store",
    "salvage_store",
]


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
    earlier: list[dict[str, Any]] = attrs.field(factory=list)  # salvages at open, kept files

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
            "earlier_salvages": list(self.earlier),
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
    if metas.problems:
        # The other meta page may be the one of the last commit: its records are then
        # read as they were one commit before.
        report.problems.append(
            f"the trees are read from meta page {meta.page} (transaction {meta.txnid}): if "
            "the damaged one was newer, the records are as of the commit before it"
        )
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
    report = CheckReport(path=real, earlier=earlier_salvages(real))
    file = _open_file(real, data, report)
    if file is None:
        return report
    with file:
        for table, item, problem in walk_all(file, decode=True):
            entry = report.tables.setdefault(table, TableReport())
            if isinstance(item, Damage):
                entry.damaged_pages.append(damage_json(item))
                continue
            entry.records += 1
            if problem is not None:
                entry.undecodable.append({"key": item[0].hex(), "error": problem})
    return report


def _empty_dest(dest: str, command: str) -> None:
    if os.path.exists(os.path.join(dest, DATA_FILE)):
        raise Error(
            f"{dest} already holds a store: {command} writes into a new data directory only; "
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
            InvalidState while a live process holds ``source``; Unavailable if no meta
            page can be read.
    """
    src = os.path.realpath(os.fspath(source))
    out = os.path.realpath(os.fspath(dest))
    data = _store_file(src)
    _empty_dest(out, "salvage")
    if holder_alive(src):
        raise Error(
            f"a process still holds {src} (its roost.lock names a live process): salvage "
            "reads the file without LMDB, so a node writing it meanwhile would tear the copy; "
            "stop the node first, or take a consistent copy with `roost store backup`",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
            details={"path": src},
        )
    check = CheckReport(path=src)
    file = _open_file(src, data, check)
    if file is None:
        raise damaged(src, "; ".join(check.problems) + " (nothing can be salvaged from it)")
    report = SalvageReport(source=src, dest=out, problems=list(check.problems))
    store = open_lmdb_store(out)
    try:
        with file:
            copy_readable(file, store, report, batch)
    finally:
        store.close()
    return report


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
    out = os.path.realpath(os.fspath(dest))
    _empty_dest(out, "backup")
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
