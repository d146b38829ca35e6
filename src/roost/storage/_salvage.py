"""Salvage: every readable record of a damaged LMDB file copied into a new store.

``copy_readable`` walks the file with ``roost.storage._lmdb_file`` (plain reads, never a
map) and writes what it reads into a store; ``roost store salvage`` uses it for a new data
directory (``roost.storage._care``), and a node opening a damaged store for a new file in
place (``salvage_at_open``). ``earlier_salvages`` lists what those kept and lost.
"""

from __future__ import annotations

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
from roost.storage._damage import DATA_FILE, Found, damaged, describe, walk_all
from roost.storage._datadir import prepare_dir
from roost.storage._lmdb_file import FREE_TABLE, Damage, LmdbFile
from roost.storage._quarantine import Quarantine, write_quarantine
from roost.storage._store import TABLES, Store, WriteTxn, care_hint

__all__ = [
    "DAMAGED_DIR",
    "SalvageReport",
    "copy_readable",
    "damage_json",
    "earlier_salvages",
    "salvage_at_open",
]

log = logging.getLogger("roost.storage")

# Where a salvage at open keeps the damaged file and its report, inside the data directory.
DAMAGED_DIR: Final = "damaged"


def damage_json(damage: Damage) -> dict[str, Any]:
    return {
        "page": damage.page,
        "reason": damage.reason,
        "after": damage.after.hex() if damage.after is not None else None,
    }


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


def copy_readable(file: LmdbFile, store: Store, report: SalvageReport, batch: int = 1000) -> None:
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
            lost = {"table": table, **damage_json(item), "before": None}
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


def salvage_at_open(
    path: str, found: Found, *, open_store: Callable[[str], Store]
) -> SalvageReport:
    """Replace the damaged ``data.mdb`` in ``path`` by a new file holding every readable record.

    Called by a node's open, under the directory's lock, when the walk before LMDB maps the
    file found damage it can read around (``found``); ``open_store`` opens the new store
    (``open_lmdb_store``, given by its caller). Steps, each safe to be killed in:

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
        store = open_store(tmp)
        try:
            with LmdbFile(data, found.meta) as file:
                copy_readable(file, store, report)
            entry = _store_entry(path, kept, now=now, stamp=stamp, found=found, report=report)
            store.transact_sync(functools.partial(write_quarantine, codec=Codec(), entry=entry))
        finally:
            store.close()
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
