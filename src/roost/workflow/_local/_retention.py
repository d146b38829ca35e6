"""Retention: a closed workflow's rows are deleted once it has been closed for long enough.

A closed workflow keeps its run record and its history for ``describe``, ``history`` and
``list_workflows``: with no retention (the default) forever, as Temporal keeps a closed run
for its namespace's retention. With ``open_node(..., retention="7d")`` a background sweep
deletes a workflow whose latest run closed more than that long ago: its ``runs`` record,
its history, and what else is keyed by its run (inbox, task rows, its failed activity
attempts, its progress row). It is
then NotFound, as an id that never existed, and may be started again. LMDB reuses the freed
pages, so ``data.mdb`` (and the pages of it a node maps) stops growing once the rate of
closes and the retention are steady.

The sweep stays off the hot path: it walks the ``runs`` table in key order a few hundred
records per step (one short read snapshot each), deletes what expired in transactions of
bounded size (``max_rows`` history rows, a run or two at the least), and re-checks each
record inside its delete transaction, so a run started meanwhile under the same id is never
touched. After a full pass it waits ``interval`` before the next.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import trio

from roost._errors import Error
from roost.storage import key
from roost.workflow._local._records import ATTEMPTS_TABLE, PROGRESS_TABLE, RunRecord, RunStatus

if TYPE_CHECKING:
    from roost.storage import Codec, WriteTxn
    from roost.workflow._local._commits import Commits

__all__ = ["Retention"]

log = logging.getLogger("roost.workflow")

# Keyed by run id first: a run's rows are one prefix in each.
_BY_RUN: Final = ("histories", "inbox", "tasks", ATTEMPTS_TABLE)


class Retention:
    """Deletes closed workflows older than the retention, a bounded batch at a time."""

    __slots__ = (
        "_codec",
        "_commits",
        "_cursor",
        "_now",
        "deleted",
        "interval",
        "max_rows",
        "retention",
        "scan",
    )

    def __init__(
        self,
        *,
        commits: Commits,
        codec: Codec,
        retention: float,
        now: Callable[[], dt.datetime],
        scan: int = 256,
        max_rows: int = 2_000,
    ) -> None:
        """Build it.

        Args:
            commits: reads and writes the store.
            codec: decodes the run records.
            retention: seconds a workflow stays after its latest run closed.
            now: the node's clock.
            scan: run records read per step.
            max_rows: rows deleted per transaction (at least one whole workflow).
        """
        self._commits, self._codec, self._now = commits, codec, now
        self.retention = retention
        self.scan, self.max_rows = scan, max_rows
        self.interval = min(max(retention / 10, 1.0), 60.0)
        self._cursor: bytes | None = None  # the next runs key to read; None: from the start
        self.deleted = 0  # workflows deleted since the node opened

    async def run(self) -> None:
        """Sweep forever: a pass over the runs table, then ``interval`` of rest."""
        while True:
            try:
                while not await self.step():
                    await trio.lowlevel.checkpoint()
            except Error as exc:  # a full disk, a damaged page: the next pass tries again
                log.warning("the retention sweep failed: %s; it tries again", exc.message)
            await trio.sleep(self.interval)

    async def step(self) -> bool:
        """Read one batch of run records, delete the expired ones; True at the end of a pass."""
        cutoff = self._now() - dt.timedelta(seconds=self.retention)
        expired: list[tuple[bytes, str, int]] = []
        last: bytes | None = None
        read = 0
        with self._commits.read() as txn:
            for k, v in txn.range("runs", self._cursor, limit=self.scan):
                read += 1
                last = k
                try:
                    record = self._codec.decode(v)
                except Error:
                    continue  # quarantined at the next open, not deleted here
                if _expired(record, cutoff):
                    expired.append((k, record.run_id, max(1, record.history_length)))
        done = read < self.scan
        self._cursor = None if done or last is None else last + b"\x00"
        batch: list[tuple[bytes, str]] = []
        rows = 0
        for k, run_id, length in expired:
            if batch and rows + length > self.max_rows:
                await self._delete(batch, cutoff)
                batch, rows = [], 0
            batch.append((k, run_id))
            rows += length
        if batch:
            await self._delete(batch, cutoff)
        return done

    async def _delete(self, batch: list[tuple[bytes, str]], cutoff: dt.datetime) -> None:
        codec = self._codec

        def write(txn: WriteTxn) -> int:
            deleted = 0
            for k, run_id in batch:
                data = txn.get("runs", k)
                if data is None:
                    continue
                try:
                    record = codec.decode(data)
                except Error:
                    continue
                if record.run_id != run_id or not _expired(record, cutoff):
                    continue  # started again meanwhile: the new run is not touched
                for table in _BY_RUN:
                    for row, _ in list(txn.prefix(table, key(run_id))):
                        txn.delete(table, row)
                txn.delete(PROGRESS_TABLE, k)
                txn.delete("runs", k)
                deleted += 1
            return deleted

        self.deleted += await self._commits.transact(write)


def _expired(record: object, cutoff: dt.datetime) -> bool:
    return (
        isinstance(record, RunRecord)
        and record.status is not RunStatus.RUNNING
        and record.closed_at is not None
        and record.closed_at < cutoff
    )
