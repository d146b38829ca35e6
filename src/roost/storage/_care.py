"""Store care: ``roost store check``, ``salvage`` and ``backup``.

- ``check_store``: the walk of ``roost.storage._damage`` over every table and record,
  read-only, each value also parsed as CBOR.
- ``salvage_store``: every record the walk can read, copied into a new store; what it cannot
  read is listed (the damaged page, its table, the last key before it). It never maps the
  damaged file, so it works on a truncated one too.
- ``backup_store``: LMDB's compacting copy of a consistent snapshot, beside a running node.
- ``salvage_at_open``: a node opening a damaged store salvages it in place (see its docstring);
  ``earlier_salvages`` lists what those salvages kept and lost, for ``roost store check``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind
from roost.storage._codec import Codec
from roost.storage._damage import DATA_FILE, Found, damaged, describe, holder_alive, walk_all
from roost.storage._datadir import prepare_dir
from roost.storage._lmdb import LmdbStore, open_lmdb_store
from roost.storage._lmdb_file import FREE_TABLE, Damage, LmdbFile, read_metas
from roost.storage._quarantine import Quarantine, write_quarantine
from roost.storage._store import TABLES, WriteTxn, care_hint

__all__ = [
    "DAMAGED_DIR",
    "CheckReport",
    "SalvageReport",
    "TableReport",
    "backup_store",
    "check_store",
    "earlier_salvages",
    "salvage_at_open",
    "salvage_store",
]

log = logging.getLogger("roost.storage")

# Where a salvage at open keeps the damaged file and its report, inside the data directory.
DAMAGED_DIR: Final = "damaged"


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
    records_lost: dict[str, int] = attrs.field(factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values."""
        return attrs.asdict(self)


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
            _copy_readable(file, store, report, batch)
    finally:
        store.close()
    return report


def _copy_readable(file: LmdbFile, store: LmdbStore, report: SalvageReport, batch: int) -> None:
    """Copy every readable record of ``file`` into ``store``; note each damaged page's range.

    Each entry of ``report.lost`` gets the last key read before the damage (``after``) and
    the first one after it (``before``): the lost records of that table lie between them.
    """
    pending: list[tuple[str, bytes, bytes]] = []
    open_ranges: list[dict[str, Any]] = []  # lost ranges still waiting for their ``before``
    for table, item, _problem in walk_all(file, decode=False):
        if table == FREE_TABLE:
            continue  # no records: the new store keeps its own
        if isinstance(item, Damage):
            lost = {"table": table, **_damage_json(item), "before": None}
            report.lost.append(lost)
            open_ranges.append(lost)
            continue
        if table not in TABLES:  # its name was damaged: it is reported above
            continue
        for lost in open_ranges:
            if lost["table"] == table:
                lost["before"] = item[0].hex()
        open_ranges = [lost for lost in open_ranges if lost["table"] != table]
        pending.append((table, *item))
        report.copied[table] = report.copied.get(table, 0) + 1
        if len(pending) >= batch:
            store.transact_sync(_put_rows(pending))
            pending = []
    if pending:
        store.transact_sync(_put_rows(pending))
    for name, record in file.tables()[0].items():
        missing = record.entries - report.copied.get(name, 0)
        if name in TABLES and missing > 0:
            report.records_lost[name] = missing


def _put_rows(rows: list[tuple[str, bytes, bytes]]) -> Callable[[WriteTxn], None]:

    def put(txn: WriteTxn) -> None:
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


def salvage_at_open(path: str, found: Found) -> SalvageReport:
    """Replace the damaged ``data.mdb`` in ``path`` by a new file holding every readable record.

    Called by a node's open, under the directory's lock, when the walk before LMDB maps the
    file found damage it can read around (``found``). Steps, each safe to be killed in:

    1. every readable record is copied into a new store in ``damaged/salvage-TS.tmp``, with
       one more record in its ``quarantine`` table (unit ``"store"``, id ``TS``): the damaged
       pages, the key range each lost (``after``/``before``, hex), the file kept and the
       report, which recovery reads to quarantine the workflows that lost rows;
    2. the damaged file is kept as ``damaged/data.mdb.TS`` (a hard link: no copy), 0600;
    3. the new file replaces ``data.mdb`` in one rename (a kill before it leaves the damaged
       file in place, and the next open salvages it again);
    4. the report goes to ``damaged/data.mdb.TS.json`` and a WARNING names it and
       ``roost store check``.

    Returns:
        The salvage report (``dest`` is the data directory itself).

    Raises:
        roost.Error: Unavailable if the salvage cannot be written (the damaged file then
            stays in place, untouched).
    """
    data = os.path.join(path, DATA_FILE)
    keep_dir = os.path.join(path, DAMAGED_DIR)
    now = dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y%m%dT%H%M%S.%fZ")
    kept = os.path.join(keep_dir, f"{DATA_FILE}.{stamp}")
    tmp = os.path.join(keep_dir, f"salvage-{stamp}.tmp")
    report = SalvageReport(source=kept, dest=path, problems=list(found.problems))
    try:
        prepare_dir(keep_dir)
        for name in os.listdir(keep_dir):  # a salvage killed before its rename
            if name.endswith(".tmp"):
                shutil.rmtree(os.path.join(keep_dir, name), ignore_errors=True)
        store = open_lmdb_store(tmp, durability="fast")
        try:
            with LmdbFile(data, found.meta) as file:
                _copy_readable(file, store, report, 1000)
            entry = _store_entry(path, kept, now=now, stamp=stamp, found=found, report=report)
            store.transact_sync(functools.partial(write_quarantine, codec=Codec(), entry=entry))
        finally:
            store.close()  # durability "fast": the close syncs the file
        try:
            os.link(data, kept)
        except OSError:  # a file system without hard links
            shutil.copyfile(data, kept)
        os.chmod(kept, 0o600)
        os.replace(os.path.join(tmp, DATA_FILE), data)
        _sync_dir(path)
        _write_report(f"{kept}.json", report)
        shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise damaged(path, f"it could not be salvaged at open ({exc})") from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    lost = sum(report.records_lost.values())
    log.warning(
        "the store in %s was damaged: %d page(s) could not be read (%s); the node salvaged "
        "every readable record into a new %s and opens that (%d record(s) lost: %s); "
        "workflows that lost rows are quarantined, not resumed. The damaged file is kept at "
        "%s, the report at %s.json; `roost store check --data-dir %s` shows them",
        path,
        len(found.damage),
        "; ".join(describe(d) for d in found.damage[:5]) or "; ".join(found.problems),
        DATA_FILE,
        lost,
        ", ".join(f"{t} {n}" for t, n in sorted(report.records_lost.items())) or "none",
        kept,
        kept,
        path,
    )
    return report


def _store_entry(
    path: str, kept: str, *, now: dt.datetime, stamp: str, found: Found, report: SalvageReport
) -> Quarantine:
    lost = len(found.damage)
    what = f"{lost} damaged page(s)" if lost else "a damaged meta page"
    error = Error(
        f"the store in {path} had {what} when a node opened it at {stamp}; every readable "
        f"record was salvaged, the damaged file is kept at {kept}, and the records on the "
        f"damaged pages are lost ({care_hint(path)})",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"path": path, "kept": kept},
    )
    info = {
        "kept": kept,
        "report": f"{kept}.json",
        "problems": list(report.problems),
        "lost": [dict(item) for item in report.lost],
        "records_lost": dict(report.records_lost),
    }
    return Quarantine(unit="store", id=stamp, error=error, at=now, info=info)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_report(path: str, report: SalvageReport) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(report.to_json(), f, indent=2, sort_keys=True)


def earlier_salvages(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The reports of the salvages nodes made at open in the data directory ``path``, oldest first.

    Each is a salvage report (``source``: the damaged file kept, ``lost``, ``records_lost``,
    ``copied``) with ``report``, the path of its file.
    """
    keep_dir = os.path.join(os.fspath(path), DAMAGED_DIR)
    try:
        names = sorted(n for n in os.listdir(keep_dir) if n.endswith(".json"))
    except OSError:
        return []
    out: list[dict[str, Any]] = []
    for name in names:
        file = os.path.join(keep_dir, name)
        try:
            with open(file, encoding="utf-8") as f:
                found = json.load(f)
        except (OSError, ValueError) as exc:
            found = {"problems": [f"the report cannot be read: {exc}"]}
        out.append({**found, "report": file})
    return out
