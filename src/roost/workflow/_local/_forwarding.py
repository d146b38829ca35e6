"""Inbox rows that follow a workflow id into its next run, inside the transaction.

A cancel, message or terminate request for a workflow is an inbox row keyed by one run
(``inbox_key(run_id, n)``), and recovery reads the inbox of open runs only. The sender
stages it against the run it sees; by the time its write runs, the target's own step may
have handed the id over to a new run (continue-as-new, a retry, the next cron run), in
the same group transaction or an earlier one whose effects have not run yet. Two writes
keep such a row where recovery finds it:

- the sender's (``put_rows``) keys it by the run the store holds as it writes, read in
  its own transaction; a row for a closed run is not written (nobody would read it);
- the hand-over's (``move_inbox``) moves the old run's rows still stored, written before
  it, to the new run in the hand-over's own transaction.

Each row lands once, under one key. The key a row moved to is fed back to memory after
the commit (``Forwarding.record``), so the run that reads the event deletes the row it
is stored as, and nothing is delivered twice (``Forwarding.take``, in ``accept``).

Numbers for moved rows come from a block that ``reserve`` keeps in the new run's inbox
numbering when the hand-over is planned: after its ``Started`` event and the events it
carries, before anything sent to it later, and never a number the run stages itself. The
block's counter is used only inside write transactions, which the store runs one at a
time, so a write running in the store's thread cannot race the trio thread for it.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any, Final

import attrs

from roost.storage import key
from roost.workflow._history import CancelRequested, MessageArrived
from roost.workflow._local._records import InboxItem, TerminateRequest, inbox_key
from roost.workflow._status import RunStatus

if TYPE_CHECKING:
    from roost.storage._codec import Codec
    from roost.storage._store import WriteTxn
    from roost.workflow._local._run import Run

__all__ = [
    "FORWARD_BLOCK",
    "Forwarding",
    "InboxWrites",
    "Successor",
    "follows",
    "move_inbox",
    "put_rows",
    "put_staged",
]

log = logging.getLogger("roost.workflow")

# Inbox numbers a new run keeps for rows moved into it (far more than any run holds).
FORWARD_BLOCK: Final = 1 << 32

# (the key a row was staged as, the run it is stored for, the key it is stored as)
Moved = tuple[bytes, "Run", bytes]
# (the run a row is for, or None to write it as keyed; its key, its bytes, its event)
Row = tuple["Run | None", bytes, bytes, InboxItem]


def follows(event: InboxItem) -> bool:
    """Whether ``event`` is for the workflow (it follows the id), not for one run.

    A reply to a run's call or an EXIT of its child means nothing to the next run.
    """
    kind = type(event)
    if kind is CancelRequested or kind is TerminateRequest:
        return True
    return isinstance(event, MessageArrived) and event.call is None


@attrs.define(eq=False)
class Successor:
    """A run planned to follow another of its id: where rows for the old one go."""

    old_run_id: str
    run: Run
    next_seq: int  # read and advanced only inside write transactions (one at a time)


class Forwarding:
    """The hand-overs in progress of one host, and where their moved rows went."""

    __slots__ = ("_by_new", "_by_old", "_moved")

    def __init__(self) -> None:
        self._by_old: dict[str, Successor] = {}
        self._by_new: dict[str, Successor] = {}
        self._moved: dict[bytes, tuple[Run, bytes]] = {}  # committed, not yet accepted

    def reserve(self, old: Run, new: Run) -> None:
        """``new`` follows ``old`` once its step commits: keep it a block of inbox numbers."""
        succ = Successor(old.record.run_id, new, new.draw_inbox_numbers(FORWARD_BLOCK))
        self._by_old[succ.old_run_id] = succ
        self._by_new[new.record.run_id] = succ

    def forget(self, run: Run) -> None:
        """Rows no longer follow into ``run``: it closed, handed over, or was never stored."""
        succ = self._by_new.pop(run.record.run_id, None)
        if succ is not None and self._by_old.get(succ.old_run_id) is succ:
            del self._by_old[succ.old_run_id]

    def into(self, run_id: str, *, from_run: str) -> Successor | None:
        """The hand-over into run ``run_id``, if it is in progress and follows ``from_run``.

        ``from_run`` may be an earlier run of the chain than the one handing over, as long
        as every hand-over between them is still known.
        """
        succ = step = self._by_new.get(run_id)
        while step is not None:
            if step.old_run_id == from_run:
                return succ
            step = self._by_new.get(step.old_run_id)
        return None

    def after(self, run_id: str) -> Successor | None:
        """The run planned to follow run ``run_id``, if any."""
        return self._by_old.get(run_id)

    def record(self, moved: Iterable[Moved]) -> None:
        """Rows of a committed transaction are stored under other keys than staged."""
        for staged, run, stored in moved:
            self._moved[staged] = (run, stored)

    def take(
        self, items: list[tuple[bytes, InboxItem]]
    ) -> tuple[list[tuple[Run, tuple[bytes, InboxItem]]], list[tuple[bytes, InboxItem]]]:
        """Split ``items`` into those stored for another run (with it), and the rest."""
        if not self._moved:
            return [], items
        moved: list[tuple[Run, tuple[bytes, InboxItem]]] = []
        rest: list[tuple[bytes, InboxItem]] = []
        for k, event in items:
            found = self._moved.pop(k, None)
            if found is None:
                rest.append((k, event))
            else:
                moved.append((found[0], (found[1], event)))
        return moved, rest


def put_rows(
    txn: WriteTxn, codec: Codec, forwarding: Forwarding, rows: Iterable[Row], out: list[Moved]
) -> None:
    """Write event rows into their targets' inboxes, keyed by the run the store holds now.

    A row for a run that has handed its id over goes to the run that followed (``out``
    gets its new key); one for a closed run, or one only that run could read, is not
    written. The caller clears ``out`` before each run of its transaction.
    """
    stored: dict[str, Any] = {}
    for target, k, v, event in rows:
        if target is None:  # a child started in this same step: stored with it
            txn.put("inbox", k, v)
            continue
        record = target.record
        workflow_id = record.workflow_id
        if workflow_id in stored:
            now = stored[workflow_id]
        else:
            data = txn.get("runs", workflow_id.encode())
            now = stored[workflow_id] = codec.decode(data) if data is not None else None
        if now is not None and now.run_id == record.run_id:
            if now.status is RunStatus.RUNNING:
                txn.put("inbox", k, v)
            continue  # closed: nobody reads its inbox again
        succ = None
        if now is not None and now.status is RunStatus.RUNNING:
            succ = forwarding.into(now.run_id, from_run=record.run_id)
        if succ is None:  # the target's start is not stored yet, or is in this transaction
            txn.put("inbox", k, v)
        elif follows(event):  # its id was handed over: the row goes to the run that follows
            moved = inbox_key(now.run_id, succ.next_seq)
            succ.next_seq += 1
            txn.put("inbox", moved, v)
            if type(event) is not TerminateRequest:  # never accepted into memory
                out.append((k, succ.run, moved))


def move_inbox(
    txn: WriteTxn,
    codec: Codec,
    old_run_id: str,
    succ: Successor,
    *,
    keep: Container[bytes],
    out: list[Moved],
) -> None:
    """In the hand-over's transaction: the old run's stored rows go to the new run.

    ``keep``: rows the hand-over itself deletes or carries over. Rows that only the old
    run could read are deleted. ``out`` gets the moved rows that some committer still
    hands to memory (a terminate request never enters memory).
    """
    for k, v in list(txn.prefix("inbox", key(old_run_id))):
        if k in keep:
            continue
        try:
            event = codec.decode(v)
        except Exception:  # noqa: BLE001 - any decoding failure: the row stays where it is
            log.warning("inbox row %r cannot be read: left with run %s", k, old_run_id)
            continue
        txn.delete("inbox", k)
        if not follows(event):
            continue
        moved = inbox_key(succ.run.record.run_id, succ.next_seq)
        succ.next_seq += 1
        txn.put("inbox", moved, v)
        if type(event) is not TerminateRequest:
            out.append((k, succ.run, moved))


def put_staged(
    txn: WriteTxn, codec: Codec, forwarding: Forwarding, rows: Iterable[Row], out: list[Moved]
) -> None:
    """Write rows staged for runs as they are, unless a run has a hand-over under way.

    The runtime's own commits (messages from outside, a re-homed row) stage for the
    current run; only one that is handing over at the time of the write reads the store
    (``put_rows``). The caller clears ``out`` before each run of its transaction.
    """
    for row in rows:
        target, k, v, _ = row
        if target is None or forwarding.after(target.record.run_id) is None:
            txn.put("inbox", k, v)
        else:
            put_rows(txn, codec, forwarding, (row,), out)


class InboxWrites:
    """A step's rows for other runs' inboxes, and its hand-over's move of its own rows."""

    __slots__ = ("codec", "forwarding", "moved", "old_run_id", "rows", "succ")

    def __init__(
        self, codec: Codec, forwarding: Forwarding, rows: list[Row], handing_over: Run | None
    ) -> None:
        self.codec, self.forwarding, self.rows = codec, forwarding, rows
        self.old_run_id = handing_over.record.run_id if handing_over is not None else ""
        self.succ = forwarding.after(self.old_run_id) if handing_over is not None else None
        self.moved: list[Moved] = []  # as of the last run of the transaction

    def write(self, txn: WriteTxn) -> None:
        """In the step's transaction: its rows, then the old run's rows still stored.

        In that order, a row the step writes for its own run moves with the others.
        """
        self.moved.clear()
        if self.rows:
            put_rows(txn, self.codec, self.forwarding, self.rows, self.moved)
        if self.succ is not None:
            move_inbox(txn, self.codec, self.old_run_id, self.succ, keep=(), out=self.moved)
