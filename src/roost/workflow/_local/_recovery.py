"""A node starting on a data directory: resume every open run where it stopped.

A stored row that cannot be decoded does not stop this: its workflow is quarantined (see
``_quarantine``) and recovery goes on with the rest.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import attrs

from roost import _telemetry as telemetry
from roost._errors import Error, invalid
from roost._pid import Pid
from roost.actors._app import EntryKind
from roost.actors._events import Exit
from roost.storage import ReadTxn, unpack_key
from roost.storage._quarantine import (
    Quarantine,
    QuarantinedRow,
    decode_error,
    read_quarantine,
)
from roost.workflow._history import ProcessExited, Started, TimerFired
from roost.workflow._local._delivery import lost_error as lost_child_error
from roost.workflow._local._lost import (
    Loss,
    lost_error,
    orphans,
    read_losses,
    run_loss,
    timer_lost,
)
from roost.workflow._local._pending import read_open
from roost.workflow._local._phases import RunPhase
from roost.workflow._local._records import (
    PROGRESS_TABLE,
    ActivityTask,
    InboxItem,
    RunRecord,
    RunStatus,
    TerminateRequest,
    TimerTask,
    with_progress,
)
from roost.workflow._local._run import Run

if TYPE_CHECKING:
    import datetime as dt

    from roost.actors._app import App
    from roost.actors._registry import Registry
    from roost.storage import Codec
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._quarantine import Quarantines
    from roost.workflow._local._runs import RunTable
    from roost.workflow._local._timers import DurableTimers

__all__ = ["Recovery"]

log = logging.getLogger("roost.workflow")

_BAD: Any = object()  # what ``_Unreadable.decode`` returns for a row it could not decode


class _Unreadable:
    """The rows recovery could not decode, by the workflow (or lone row) they belong to."""

    def __init__(self, codec: Codec, quarantines: Quarantines, at: dt.datetime) -> None:
        self.codec, self.quarantines, self.at = codec, quarantines, at
        self.workflows: dict[str, list[QuarantinedRow]] = {}
        self.records: dict[str, RunRecord] = {}  # run records that decode, of those workflows
        self.lone: list[Quarantine] = []
        self.lost: list[Quarantine] = []  # workflows that lost rows to a damaged store

    def decode(
        self, table: str, k: bytes, v: bytes, owner: Callable[[bytes], RunRecord | str | None]
    ) -> Any:
        """``v`` decoded, or ``_BAD`` after noting the row under the workflow ``owner`` names."""
        try:
            return self.codec.decode(v)
        except Exception as exc:  # noqa: BLE001 - whatever the decoder raises, the row is unreadable
            row = QuarantinedRow(table=table, key=k, data=v, error=decode_error(exc, table, k))
        found = owner(k)
        if found is None:
            assert row.error is not None
            entry = Quarantine(unit="row", id=f"{table}:{k.hex()}", error=row.error, at=self.at)
            self.lone.append(attrs.evolve(entry, rows=[row]))
            return _BAD
        if isinstance(found, str):
            workflow_id = found
        else:
            workflow_id = found.workflow_id
            self.records[workflow_id] = found
        self.workflows.setdefault(workflow_id, []).append(row)
        return _BAD

    def entries(self) -> list[Quarantine]:
        entries = [
            self.quarantines.entry(workflow_id, rows, self.records.get(workflow_id))
            for workflow_id, rows in self.workflows.items()
        ]
        return entries + self.lost + self.lone

    def note_lost(self, workflow_id: str, loss: Loss, info: dict[str, Any]) -> None:
        """Quarantine ``workflow_id``, which lost rows to a damaged store (``_lost``)."""
        entry = Quarantine(
            unit="workflow", id=workflow_id, error=lost_error(workflow_id, loss), at=self.at
        )
        self.lost.append(attrs.evolve(entry, info=info))


def _info(record: RunRecord | Started) -> dict[str, Any]:
    info: dict[str, Any] = {"workflow_type": record.workflow_type, "run_id": record.run_id}
    if isinstance(record, RunRecord):
        info["status"] = record.status.value
    return info


def _owner_by_run(
    runs: dict[str, RunRecord], *kinds: type[Any], at: int
) -> Callable[[bytes], RunRecord | None]:
    def owner(k: bytes) -> RunRecord | None:
        try:
            run_id = unpack_key(k, *kinds)[at]
        except Error:
            return None
        record = runs.get(str(run_id))
        # A row of a closed run is a leftover: it goes alone, the closed run stays as it is.
        return record if record is not None and record.status is RunStatus.RUNNING else None

    return owner


def _read_inbox(
    txn: ReadTxn, bad: _Unreadable, resumable: dict[str, RunRecord]
) -> tuple[dict[str, list[tuple[bytes, InboxItem]]], set[str]]:
    """The pending events of the ``resumable`` runs, by run id, and the runs with a bad one.

    Rows of other runs (closed, quarantined, unknown) are left alone, undecoded.
    """
    inbox: dict[str, list[tuple[bytes, InboxItem]]] = {}
    unreadable: set[str] = set()
    prefix, record = b"", None
    for k, v in txn.range("inbox"):
        if k[:-8] != prefix:  # the rows of one run are next to each other, in seq order
            prefix = k[:-8]
            try:
                record = resumable.get(str(unpack_key(k, str, int)[0]))
            except Error:
                record = None  # a key of no run's shape: nobody reads it
        if record is None or record.run_id in unreadable:
            continue
        event = bad.decode("inbox", k, v, functools.partial(_same, record))
        if event is _BAD:
            unreadable.add(record.run_id)  # the run stays stored, unloaded (quarantined)
            continue
        inbox.setdefault(record.run_id, []).append((k, event))
    return inbox, unreadable


def _same(record: RunRecord, _k: bytes) -> RunRecord:
    return record


class Recovery:
    """A node's start on its data directory: every open run resumes where it stopped."""

    __slots__ = (
        "_app",
        "_codec",
        "_commits",
        "_host",
        "_node_name",
        "_now",
        "_process_exited",
        "_quarantined",
        "_quarantines",
        "_ready",
        "_registry",
        "_runs",
        "_settle_now",
        "_submit",
        "_terminate",
        "_timers",
        "_unloadable",
    )

    def __init__(
        self,
        *,
        codec: Codec,
        commits: Commits,
        runs: RunTable,
        app: App,
        registry: Registry,
        node_name: str,
        host: str,
        now: Callable[[], dt.datetime],
        quarantined: set[str],
        unloadable: dict[str, Error],
        quarantines: Quarantines,
        timers: DurableTimers,
        submit: Callable[..., None],
        settle_now: Callable[..., bool],
        process_exited: Callable[[Pid, Exit], None],
        ready: Callable[[Run], None],
        terminate: Callable[[Run], None],
    ) -> None:
        """Build it from the collaborators it uses: recovery touches every kind of row.

        Args:
            codec: decodes the stored rows.
            commits: reads the store, and the records of closed children.
            runs: the run table, which it fills.
            app: resolves each run's entry.
            registry: the names of named runs.
            node_name: the node part of workflow PIDs.
            host: the host of workflow PIDs.
            now: the node's clock.
            quarantined: ids set aside (read from the quarantine table first).
            unloadable: ids whose stored run this app cannot run (it fills them in).
            quarantines: sets aside what cannot be decoded.
            timers: arms the stored timers.
            submit: runs an activity task again (``ActivityWorker.submit``).
            settle_now: settles a timer that fell due while the node was down.
            process_exited: records the exit of a child that ended meanwhile.
            ready: queues a run with pending events.
            terminate: terminates a run whose terminate request is stored.
        """
        self._codec, self._commits, self._runs, self._app = codec, commits, runs, app
        self._registry, self._node_name, self._host, self._now = registry, node_name, host, now
        self._quarantined, self._unloadable = quarantined, unloadable
        self._quarantines, self._timers, self._submit = quarantines, timers, submit
        self._settle_now, self._process_exited = settle_now, process_exited
        self._ready, self._terminate = ready, terminate

    def _read(
        self, txn: ReadTxn, bad: _Unreadable
    ) -> tuple[list[tuple[ActivityTask, bool]], list[tuple[bytes, Any]]]:
        """Load the open runs; return the activity tasks and the (row, timer) pairs to arm.

        Each table is read in one scan, whatever the number of runs: a run's progress row and
        pending inbox events are found by key in that scan, not looked up run by run.
        """
        self._quarantined.update(
            entry.id for entry in read_quarantine(txn, self._codec, "workflow")
        )
        progress = dict(txn.range(PROGRESS_TABLE))
        records: list[RunRecord] = []
        for k, v in txn.range("runs"):
            record = bad.decode("runs", k, v, lambda k: k.decode("utf-8", "replace"))
            if record is _BAD:
                continue
            if record.status is RunStatus.RUNNING and k in progress:
                record = self._with_progress(record, progress[k])
            records.append(record)
        by_run = {record.run_id: record for record in records}
        resumable = {
            record.run_id: record
            for record in records
            if record.status is RunStatus.RUNNING and record.workflow_id not in self._quarantined
        }
        inbox, unreadable = _read_inbox(txn, bad, resumable)
        losses = read_losses(txn, self._codec)
        if losses:
            unreadable |= self._lost_rows(
                txn, bad, losses, records=records, resumable=resumable, inbox=inbox
            )
        for run_id, record in resumable.items():
            if run_id not in unreadable:
                self._resume(record, inbox.get(run_id, ()))
        for run in self._runs.values():  # its close deletes the row
            run.found_progress_row(run.record.workflow_id.encode() in progress)
        task_owner = _owner_by_run(by_run, str, int, at=0)
        rows = [bad.decode("tasks", k, v, task_owner) for k, v in txn.range("tasks")]
        timer_owner = _owner_by_run(by_run, int, str, int, at=1)
        timers = [(k, bad.decode("timers", k, v, timer_owner)) for k, v in txn.range("timers")]
        tasks = self._pending_tasks(txn, [t for t in rows if t is not _BAD])
        return tasks, [(k, t) for k, t in timers if t is not _BAD]

    def _lost_rows(
        self,
        txn: ReadTxn,
        bad: _Unreadable,
        losses: list[Loss],
        *,
        records: list[RunRecord],
        resumable: dict[str, RunRecord],
        inbox: dict[str, list[tuple[bytes, InboxItem]]],
    ) -> set[str]:
        """The open runs that lost rows to a damaged store (see ``_lost``), noted in ``bad``."""
        lost: set[str] = set()
        timer_losses = [loss for loss in losses if loss.table == "timers"]
        timer_rows: set[tuple[str, int]] = set()
        if timer_losses:
            for k, _ in txn.range("timers"):
                try:
                    _due, run_id, seq = unpack_key(k, int, str, int)
                except Error:
                    continue
                timer_rows.add((str(run_id), int(seq)))
        for run_id, record in resumable.items():
            loss = run_loss(run_id, losses)
            if loss is None and timer_losses:
                events = [event for _, event in inbox.get(run_id, ())]
                if timer_lost(txn, self._codec, record, timer_rows, events):
                    loss = timer_losses[0]
            if loss is not None:
                lost.add(run_id)
                bad.note_lost(record.workflow_id, loss, _info(record))
        stored = {record.workflow_id for record in records} | self._quarantined
        known = {record.run_id for record in records}
        for workflow_id, started, loss in orphans(txn, self._codec, losses, known):
            if workflow_id not in stored:
                bad.note_lost(workflow_id, loss, _info(started))
        return lost

    def _pending_tasks(
        self, txn: ReadTxn, rows: list[ActivityTask]
    ) -> list[tuple[ActivityTask, bool]]:
        """The activity tasks to run again, each with whether it has a row in ``tasks``.

        A loaded run's are read from its history (``_pending``), with its rows (attempts after
        a failure) standing for theirs; the same read gives the run's counters. Other rows (of
        a closed run, say) go to the worker as they are, which deletes the row of a run that
        is not open.
        """
        by_run: dict[str, dict[int, ActivityTask]] = {}
        for row in rows:
            by_run.setdefault(row.run_id, {})[row.seq] = row
        tasks: list[tuple[ActivityTask, bool]] = []
        loaded = {run.record.run_id: run for run in self._runs.values()}
        for run_id, run in loaded.items():
            stored = by_run.get(run_id, {})
            events = [event for _, event in run.pending]
            record, found = read_open(txn, self._codec, run.record, rows=stored, resolved=events)
            if record is not run.record:  # steps after its stored counters: the history's
                run.resume_at(record)
            tasks += [(task, task.seq in stored) for task in found]
        tasks += [
            (row, True)
            for run_id, run_rows in by_run.items()
            if run_id not in loaded
            for row in run_rows.values()
        ]
        return tasks

    def _with_progress(self, record: RunRecord, data: bytes) -> RunRecord:
        try:
            progress = self._codec.decode(data)
        except Exception:  # noqa: BLE001 - derived data: the record's own counters stand
            return record
        return with_progress(record, progress)

    def _resume(self, record: RunRecord, pending: Iterable[tuple[bytes, InboxItem]]) -> None:
        try:
            run = self._load(record)
        except Error as exc:
            self._unloadable[record.workflow_id] = exc  # its id stays taken; describe shows why
            log.error(  # noqa: TRY400 - an expected condition: the message says all there is
                "workflow %s of type %s cannot resume: %s; "
                "it stays stored, untouched, until a node whose app declares that workflow opens",
                record.workflow_id,
                record.workflow_type,
                exc.message,
            )
            return
        for k, event in pending:
            run.restore_pending(k, event)

    def recover(self) -> None:
        """Load open runs with their pending events, re-arm tasks and timers, report lost children.

        Rows that cannot be decoded quarantine their workflow (or themselves, if no workflow
        owns them); the rest recovers as if they were not there.
        """
        bad = _Unreadable(self._codec, self._quarantines, self._now())
        with self._commits.read() as txn:
            tasks, timers = self._read(txn, bad)
        for workflow_id in bad.workflows:
            self._unload(workflow_id)
        self._quarantines.commit_now(bad.entries())
        for run in list(self._runs.values()):
            if any(type(event) is TerminateRequest for _, event in run.pending):
                self._terminate(run)  # committed by another workflow; its close was not
                continue
            self._ready(run)
            self._report_children(run)
        for task, stored in tasks:
            if task.workflow_id not in self._quarantined:
                self._submit(task, stored=stored)
        self._arm(timers)
        telemetry.log_recovered(len(self._runs), len(tasks), len(timers), len(bad.workflows))

    def _arm(self, timers: list[tuple[bytes, TimerTask]]) -> None:
        """Arm the stored timers; a workflow timer that fell due while down fires at once.

        Fired here, it is settled into its run's pending events directly, so that the run's
        first activation after the restart records it: no timer task, heap entry or wake-up
        each. What settles nowhere (the row of a run no longer open) is armed, and its firing
        deletes the row.
        """
        now = self._now()
        later: list[TimerTask] = []
        for row, timer in timers:
            if timer.workflow_id in self._quarantined:
                continue
            if timer.kind == "timer" and timer.due <= now:
                task = (timer.workflow_id, timer.run_id)
                if self._settle_now("timers", row, task, TimerFired(seq=timer.seq)):
                    continue
            later.append(timer)
        self._timers.add_all(later)

    def _unload(self, workflow_id: str) -> None:
        run = self._runs.get(workflow_id)
        if run is not None:
            self._runs.remove(run)
        if run is not None and run.record.name is not None:
            self._registry.unregister(run.record.name)

    def _report_children(self, run: Run) -> None:
        reported = {e.pid for _, e in run.pending if isinstance(e, ProcessExited)}
        for pid in run.record.children:
            if pid in reported:
                continue
            if pid.host != self._host:  # plain processes do not survive a restart
                self._process_exited(run.pid, Exit(pid, None, lost_child_error(pid), self._now()))
                continue
            if pid.id in self._quarantined:  # not closed: the parent keeps waiting for it
                continue
            child = self._commits.stored_record(
                pid.id
            )  # a child workflow that closed just before a crash
            if child is not None and child.status is not RunStatus.RUNNING:
                self._process_exited(run.pid, Exit(pid, child.result, child.error, self._now()))

    def _load(self, record: RunRecord) -> Run:
        entry = self._app.resolve(record.workflow_type)
        if entry.kind is not EntryKind.WORKFLOW:  # stored by hand (a CLI start with no node)
            raise invalid(
                f"{record.workflow_type!r} is declared as {entry.kind.value!r} by this app, "
                "not as a workflow",
                entry=record.workflow_type,
            )
        pid = Pid.trusted(self._node_name, self._host, record.workflow_id)
        held = record.not_before is not None and record.not_before > self._now()
        # Its next activation follows those its record counts (see Run).
        run = Run(
            record=record,
            entry=entry,
            pid=pid,
            context={},
            phase=RunPhase.HELD if held else RunPhase.IDLE,
        )
        if record.parent is not None and record.parent.host == self._host:
            run.watch(record.parent)  # a child workflow reports to its parent
        self._runs.add(run)
        if record.name is not None:
            self._registry.register(record.name, pid)
        return run
