"""Workflows with a stored row that cannot be decoded: out of the runtime, kept, visible.

A workflow is quarantined when its ``runs`` record, a row of its history, a pending inbox
event, an activity task or a timer of it cannot be decoded (see ``roost.storage._quarantine``).
The unreadable row and the workflow's ``runs`` record move to the ``quarantine`` table, raw;
its other rows stay where they are, keyed by its run id, and nothing touches them: the run
is not loaded, its tasks and timers are not run, and its id is not started again (a start
or a child start of that id is refused with InvalidState) while the entry exists. Runs and
history rows are checked as they are read: runs, inbox, tasks and timers when the node
opens, history rows when the run is rebuilt (at once on open for a run with work pending,
otherwise when its next event arrives).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from roost._errors import Error
from roost.storage._quarantine import Quarantine, QuarantinedRow, write_quarantine

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Callable

    from roost.actors._registry import Registry
    from roost.storage import Codec, WriteTxn
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._records import RunRecord
    from roost.workflow._local._run import Run
    from roost.workflow._local._runs import RunTable

__all__ = ["Quarantines", "RunQuarantined"]

log = logging.getLogger("roost.workflow")


class RunQuarantined(Exception):  # noqa: N818 - a control-flow signal of rebuild, not an error
    """A row of a run's history cannot be decoded; raised by ``rebuild``."""

    def __init__(self, row: QuarantinedRow) -> None:
        super().__init__(row.error.message if row.error is not None else "")
        self.row = row


class Quarantines:
    """Sets aside workflows whose stored rows cannot be read, and stores why."""

    __slots__ = ("_codec", "_commits", "_now", "_quarantined", "_registry", "_runs")

    def __init__(
        self,
        *,
        codec: Codec,
        commits: Commits,
        runs: RunTable,
        registry: Registry,
        quarantined: set[str],
        now: Callable[[], dt.datetime],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            codec: encodes the quarantine entries.
            commits: stores them.
            runs: the run table (a loaded run leaves it).
            registry: names (a quarantined run's name is released).
            quarantined: the ids set aside, which every part consults (its one writer).
            now: the node's clock.
        """
        self._codec, self._commits, self._runs, self._registry = codec, commits, runs, registry
        self._quarantined, self._now = quarantined, now

    def entry(
        self, workflow_id: str, rows: list[QuarantinedRow], record: RunRecord | None
    ) -> Quarantine:
        """The quarantine entry of one workflow; ``record`` is its run record when it decodes."""
        first = next(row.error for row in rows if row.error is not None)
        info: dict[str, Any] = {}
        if record is not None:
            info = {
                "workflow_type": record.workflow_type,
                "run_id": record.run_id,
                "status": record.status.value,
            }
        return Quarantine(
            unit="workflow", id=workflow_id, error=first, at=self._now(), rows=rows, info=info
        )

    def _writer(self, entries: list[Quarantine]) -> Callable[[WriteTxn], None]:
        codec = self._codec

        def write(txn: WriteTxn) -> None:
            for entry in entries:
                keep = [("runs", entry.id.encode())] if entry.unit == "workflow" else []
                write_quarantine(txn, codec, entry, keep)

        return write

    def commit_now(self, entries: list[Quarantine]) -> None:
        """Store ``entries`` now (on open, before anything runs), and log each at ERROR."""
        if not entries:
            return
        for entry in entries:
            _announce(entry)
            if entry.unit == "workflow":
                self._quarantined.add(entry.id)
        try:
            self._commits.transact_sync(self._writer(entries))
        except Error as exc:  # kept out of this node all the same; the next open tries again
            log.exception("storing the quarantine entries failed: %s", exc.message)

    async def quarantine_run(self, run: Run, exc: RunQuarantined) -> None:
        """Take a loaded ``run`` out of the runtime because a row of its history is unreadable."""
        record = run.record
        workflow_id = record.workflow_id
        self._quarantined.add(workflow_id)
        self._runs.remove(run)
        self._runs.forget_driver(run)
        if record.name is not None:
            self._registry.unregister(record.name)
        entry = self.entry(workflow_id, [exc.row], record)
        _announce(entry)
        try:
            await self._commits.transact(self._writer([entry]))
        except Error as failure:  # kept out of this node all the same; the next open tries again
            log.exception(
                "storing the quarantine of workflow %s failed: %s", workflow_id, failure.message
            )


def _announce(entry: Quarantine) -> None:
    log.error(
        "%s %s quarantined: %s; its rows are kept, raw, in the quarantine table "
        "(roost.storage.quarantined lists them) and the node goes on without it",
        entry.unit.replace("_", " "),
        entry.id,
        entry.error.message,
    )
