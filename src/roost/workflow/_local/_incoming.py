"""Incoming events: staged, committed to a run's inbox, then accepted for its next activation.

Every event a run did not cause itself reaches it here: its first events (the start), the
messages and cancel requests from outside (committed in arrival order by one task, in
batches, so per-sender order survives into the history), and the messages of a run that
continued as new (they follow the workflow id to its current run). ``accept`` is the one
place an event joins a run's ``pending`` list after its commit; what a closed run will
never record has its settled task and timer rows deleted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import trio

from roost._errors import Error
from roost.workflow._history import CancelRequested, MessageArrived, ProcessExited
from roost.workflow._local._forwarding import Moved, Row, put_staged
from roost.workflow._local._records import inbox_key, timer_key
from roost.workflow._local._run import NO_ROW, Pending, Run, Settled
from roost.workflow._local._unread import check_room, counts
from roost.workflow._recorded import as_recorded

if TYPE_CHECKING:
    from roost._pid import Pid
    from roost.actors._events import Exit
    from roost.storage import Codec, WriteTxn
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._forwarding import Forwarding
    from roost.workflow._local._records import RunRecord
    from roost.workflow._local._runs import RunTable

__all__ = ["Incoming"]


class Incoming:
    """The inbox side of a host: stage, commit and accept the events runs did not cause."""

    def __init__(
        self,
        *,
        runs: RunTable,
        codec: Codec,
        forwarding: Forwarding,
        commits: Commits,
        ready: Callable[[Run], None],
        spawn: Callable[..., None],
        stopping: Callable[[], bool],
        unread_limit: int,
        quarantined: set[str],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            runs: the run table (the run an event is for).
            codec: encodes and decodes events.
            forwarding: hand-overs in progress (rows for a run that hands over move).
            commits: commits its rows.
            ready: queues a run that has new events.
            spawn: starts a background task (moving rows, deleting settled ones).
            stopping: whether the node is stopping (nothing is written then).
            unread_limit: how many unread messages a run may hold.
            quarantined: ids whose stored rows are unreadable (their events stay stored).
        """
        self._runs, self._codec, self._forwarding, self._commits = runs, codec, forwarding, commits
        self._ready, self._spawn, self._stopping = ready, spawn, stopping
        self._unread_limit, self._quarantined = unread_limit, quarantined
        # Events from outside (signals, cancels, child exits) in arrival order, committed
        # by ``commit_outside`` in batches: per-sender order survives into the history.
        self._outside: deque[tuple[Run, bytes, bytes, Any, trio.Event]] = deque()
        self._outside_ready = trio.Event()
        # Encoded events by inbox key, from their staging until their run accepts them:
        # the accepted event is decoded from these bytes (what will be recorded).
        self._staged: dict[bytes, bytes] = {}

    def stage(self, run: Run, event: Any) -> tuple[bytes, bytes]:
        """Allocate an inbox key for ``event`` in ``run`` and encode it (not yet written)."""
        k = inbox_key(run.record.run_id, run.draw_inbox_numbers(1))
        data = self._codec.encode(event)
        self._staged[k] = data
        return k, data

    def hold_staged(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        """Keep the bytes of events staged elsewhere (a step's plan) until accepted."""
        self._staged.update(rows)

    def drop_staged(self, keys: Iterable[bytes]) -> None:
        """Forget staged bytes whose rows were not committed (no run will accept them)."""
        staged = self._staged
        for k in keys:
            staged.pop(k, None)

    async def commit(
        self, run: Run, events: list[Any], *, put_record: RunRecord | None = None
    ) -> None:
        """Commit ``events`` to ``run``'s inbox (a start: with its record, timers), accept them."""
        staged = [self.stage(run, event) for event in events]
        record_bytes = self._codec.encode(put_record) if put_record is not None else None
        timers = [(timer_key(t.due, t.run_id, t.seq), self._codec.encode(t)) for t in run.timers]
        # A run already stored may be handing its id over meanwhile (see _forwarding).
        rows: list[Row] | None = None
        if put_record is None:
            rows = [(run, k, v, e) for (k, v), e in zip(staged, events, strict=True)]
            moved: list[Moved] = []
            forwarding, codec = self._forwarding, self._codec

        def write(txn: WriteTxn) -> None:
            if record_bytes is not None:
                txn.put("runs", run.record.workflow_id.encode(), record_bytes)
            for k, v in timers:
                txn.put("timers", k, v)
            if rows is not None:
                moved.clear()
                put_staged(txn, codec, forwarding, rows, moved)
                return
            for k, v in staged:
                txn.put("inbox", k, v)

        arriving = sum(1 for event in events if counts(event))
        run.arrive(arriving)  # in flight: counted by the unread-message limit
        try:
            await self._commits.transact(write)
        except BaseException:  # nothing stored: the staged bytes have no row to wait for
            self.drop_staged(k for k, _ in staged)
            raise
        finally:
            run.arrived(arriving)
        if rows is not None:
            self._forwarding.record(moved)
        self.accept(run, [(k, e) for (k, _), e in zip(staged, events, strict=True)])

    def accept(self, run: Run, items: list[Pending]) -> None:
        """Events committed to ``run``'s inbox: queue them for its next activation.

        If ``run`` has meanwhile continued as new, its messages move to the current run;
        anything else for a closed run is dropped.
        """
        # The workflow gets what was recorded (a tuple comes back a list), so a live run
        # and its replay see identical values.
        items = [(k, self._recorded(k, e)) for k, e in items]
        current = self._runs.get(run.record.workflow_id)
        if current is run:
            run.queue(items)
            self._ready(run)
            return
        # Replies to the old run's calls belong to nobody now (call seqs restart per run);
        # messages and cancel requests are for the workflow, so they follow it.
        moved: list[tuple[bytes, Any]] = [
            (k, e)
            for k, e in items
            if isinstance(k, bytes)
            and (type(e) is CancelRequested or (isinstance(e, MessageArrived) and e.call is None))
        ]
        forwarded, moved = self._forwarding.take(moved)  # a commit moved their rows already
        for target, item in forwarded:
            self.accept(target, [item])
        if current is not None and moved:
            self._spawn(self._rehome, current, moved)
        self.drop_settled(items)

    def drop_settled(self, items: Iterable[Pending]) -> None:
        """Delete the task and timer rows of events no run will record (it has closed)."""
        rows = [k for k, _ in items if isinstance(k, Settled) and k.table != NO_ROW]
        if rows and not self._stopping():

            def write(txn: WriteTxn) -> None:
                for settled in rows:
                    txn.delete(settled.table, settled.row)

            self._spawn(self._commits.retrying, write, "deleting settled task and timer rows")

    def _recorded(self, key: bytes | Settled, event: Any) -> Any:
        data = self._staged.pop(key, None) if isinstance(key, bytes) else None
        return self._codec.decode(data) if data is not None else event

    async def _rehome(self, run: Run, items: list[tuple[bytes, Any]]) -> None:
        staged = [self.stage(run, event) for _, event in items]
        stale = [k for k, _ in items]
        rows: list[Row] = [(run, k, v, e) for (k, v), (_, e) in zip(staged, items, strict=True)]
        moved: list[Moved] = []
        forwarding, codec = self._forwarding, self._codec

        def write(txn: WriteTxn) -> None:
            for k in stale:
                txn.delete("inbox", k)
            moved.clear()
            put_staged(txn, codec, forwarding, rows, moved)

        if await self._commits.retrying(write, f"moving messages to workflow {run.pid.id!r}"):
            self._forwarding.record(moved)
            self.accept(run, [(k, e) for (k, _), (_, e) in zip(staged, items, strict=True)])

    async def signal_many(
        self, run: Run, messages: tuple[tuple[str, Any], ...], sender: Pid | None
    ) -> None:
        """Store start messages for an open run (the id policies let a start signal it).

        They go where ``process.send`` puts its messages to a workflow, behind what the
        same sender sent before (``from_outside``: one sender's messages are recorded in
        the order sent), and this returns once they are durable. As with the receipt of
        a send, a caller cancelled while it waits does not take them back.
        """
        if messages:
            check_room(self._unread_limit, run, len(messages))
            durable = None
            for topic, payload in messages:
                event = MessageArrived(topic=topic, payload=payload, sender=sender)
                durable = self.from_outside(run, event)
            assert durable is not None
            await durable.wait()

    def from_outside(self, run: Run, event: Any) -> trio.Event:
        """Queue ``event`` for ``run``'s inbox; the returned event is set once it is durable.

        Events from outside commit in arrival order, so per-sender order survives.
        """
        done = trio.Event()
        k, data = self.stage(run, event)
        if counts(event):
            run.arrive(1)  # in flight: counted by the unread-message limit
        self._outside.append((run, k, data, event, done))
        self._outside_ready.set()
        return done

    async def commit_outside(self) -> None:
        """The task that commits the events from outside, in batches, in arrival order."""
        while True:
            await self._outside_ready.wait()
            self._outside_ready = trio.Event()
            batch = list(self._outside)
            self._outside.clear()
            # A run that closed for good meanwhile will never read it: store nothing.
            rows: list[Row] = [
                (run, k, data, event) for run, k, data, event, _ in batch if self._has_home(run)
            ]
            moved: list[Moved] = []

            def write(txn: WriteTxn, rows: list[Row] = rows, moved: list[Moved] = moved) -> None:
                moved.clear()  # keyed by the run the store holds, if one is handing over
                put_staged(txn, self._codec, self._forwarding, rows, moved)

            # Senders wait for their receipts meanwhile: a send is acknowledged once durable.
            if not await self._commits.retrying(write, "storing messages sent to workflows"):
                return  # the node stops: unacknowledged, as the senders see
            self._forwarding.record(moved)
            for run, k, _, event, done in batch:  # in arrival order
                self.accept(run, [(k, event)])
                if counts(event):
                    run.arrived(1)  # now in run.pending
                done.set()

    def _has_home(self, run: Run) -> bool:
        # Open, or continued as new (its messages move to the current run).
        return run.record.workflow_id in self._runs

    # -- settled rows and exits: events of tasks and processes a run started --------------

    async def settle(
        self,
        table: str,
        row: bytes,
        task: tuple[str, str],
        event: Any,
        on_unencodable: Callable[[Error], Any] | None = None,
    ) -> None:
        """A task or timer row is done: hand its event to its run's next activation.

        The event goes only to ``task`` (workflow id, run id) if that is still the current
        run; ``on_unencodable`` turns an event that cannot be recorded into one that can.
        The row is deleted in the transaction that records the event in the history (one
        commit instead of two), or at once when no run takes the event.
        """
        if self.settle_now(table, row, task, event, on_unencodable) or table == NO_ROW:
            await trio.lowlevel.checkpoint()
            return
        await self._commits.retrying(
            lambda txn: txn.delete(table, row), f"deleting a settled {table} row"
        )

    def settle_now(
        self,
        table: str,
        row: bytes,
        task: tuple[str, str],
        event: Any,
        on_unencodable: Callable[[Error], Any] | None = None,
    ) -> bool:
        """``settle`` without its commit or checkpoint: False if no run takes the event.

        Then the row must be deleted (``settle`` does that); a caller settling many rows
        in one pass checkpoints once for all of them.
        """
        workflow_id, run_id = task
        if workflow_id in self._quarantined:
            return True  # the row stays with the rest of the quarantined workflow
        run = self._runs.get(workflow_id)
        if run is None or run.record.run_id != run_id:  # closed, or a newer run of the id
            return False
        if not as_recorded(event):
            try:
                data = self._codec.encode(event)
            except Error as exc:
                if on_unencodable is None:
                    raise
                data = self._codec.encode(on_unencodable(exc))
            # The workflow gets what will be recorded (a tuple comes back a list), as on
            # replay; an event of plain values is that already (encoded once, at the commit).
            event = self._codec.decode(data)
        # ``accept`` for one settled row of the current run (checked above): nothing to
        # look up or decode again (a result per activity: the hot path).
        run.queue_one((Settled(table, row), event))
        self._ready(run)
        return True

    def process_exited(self, watcher: Pid, event: Exit) -> None:
        """A process a workflow started ended: record its EXIT in that run's history."""
        run = self._runs.get(watcher.id)
        if (
            run is None
            or event.pid in run.exits_reported
            or self._stopping()  # nothing is written now: the restart reports them lost
            or event.pid not in (run.driver.children if run.driver else run.record.children)
        ):
            # An exit nobody in this run waits for (a child of a run that continued as
            # new, say) is not recorded.
            return
        run.exit_reported(event.pid)
        incoming = ProcessExited(pid=event.pid, value=event.value, error=event.error)
        try:
            # The value is a payload: MAX_DEPTH on its own, not the event's envelope allowance.
            self._codec.check(event.value, what="exit value")
            self._codec.encode(incoming)
        except Error as exc:  # the exit value cannot be recorded: record why instead
            incoming = ProcessExited(pid=event.pid, error=exc)
        self.from_outside(run, incoming)
