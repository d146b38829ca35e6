"""Workflows that lost stored rows to a damaged store: found on open, quarantined, not resumed.

A node that opens a damaged store salvages it (``roost.storage._care.salvage_at_open``) and
records, in a ``quarantine`` entry of unit ``"store"``, the key range each damaged page held
in its table: the records between ``after`` and ``before`` (hex; None: the table's end)
are lost. A workflow whose run record, history, inbox, activity task rows or timers lost a
row must not be resumed from what is left: its replay would diverge from what it did, or
repeat side effects it already had. So recovery takes every open run a range may cover out
of the runtime, as it does for an undecodable row (``_quarantine``), with an error that says
what was lost, where the damaged file is kept, and that ``roost store check`` shows it:

- ``histories``, ``inbox``, ``tasks``: keyed by run id first, so a range covers a run when it
  overlaps the run's key prefix (conservatively: a range ending inside it, or starting there);
- ``runs``: keyed by workflow id; a lost record leaves its history behind, whose ``Started``
  event names the workflow, which is quarantined under its id (``orphans``);
- ``timers``: keyed by due time first, so the runs a range covers are found from their
  histories: a timer started and not fired that has no row any more (``timer_lost``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

import attrs

from roost._errors import Error, ErrorKind
from roost.storage import key, prefix_end, unpack_key
from roost.storage._quarantine import read_quarantine
from roost.workflow._history import Started, StartTimer, TimerFired
from roost.workflow._history_format import read_activation
from roost.workflow._plan_start import SYSTEM_SEQ

if TYPE_CHECKING:
    from roost.storage import Codec, ReadTxn
    from roost.workflow._local._records import RunRecord

__all__ = ["Loss", "lost_error", "orphans", "read_losses", "run_loss", "timer_lost"]

_BY_RUN: Final = ("histories", "inbox", "tasks")


@attrs.frozen
class Loss:
    """One damaged page's lost key range in one table (bounds exclusive; None: unbounded)."""

    table: str
    page: int
    after: bytes | None
    before: bytes | None
    stamp: str  # the salvage's id (its time)
    kept: str  # where the damaged file is kept

    def covers(self, low: bytes, high: bytes | None) -> bool:
        """Whether a lost key may lie in ``[low, high)`` (``high`` None: no upper bound)."""
        below_high = self.after is None or high is None or self.after < high
        above_low = self.before is None or self.before > low
        return below_high and above_low


def _hex(value: Any) -> bytes | None:
    return bytes.fromhex(value) if isinstance(value, str) else None


def read_losses(txn: ReadTxn, codec: Codec) -> list[Loss]:
    """Every lost range the salvages at open recorded (none for a store never damaged)."""
    out: list[Loss] = []
    for entry in read_quarantine(txn, codec, "store"):
        kept = str(entry.info.get("kept", ""))
        for lost in entry.info.get("lost", ()):
            if not isinstance(lost, dict) or not isinstance(lost.get("table"), str):
                continue
            page = lost.get("page")
            out.append(
                Loss(
                    table=lost["table"],
                    page=page if type(page) is int else -1,
                    after=_hex(lost.get("after")),
                    before=_hex(lost.get("before")),
                    stamp=entry.id,
                    kept=kept,
                )
            )
    return out


def run_loss(run_id: str, losses: Iterable[Loss]) -> Loss | None:
    """The first loss that may cover a row of run ``run_id`` in a table keyed by run."""
    low = key(run_id)
    high = prefix_end(low)
    for loss in losses:
        if loss.table in _BY_RUN and loss.covers(low, high):
            return loss
    return None


def orphans(
    txn: ReadTxn, codec: Codec, losses: list[Loss], known: set[str]
) -> list[tuple[str, Started, Loss]]:
    """Workflows whose run record was lost: ``(workflow id, its Started event, the loss)``.

    Found from the histories (and pending inboxes) of run ids no stored record has, whose
    ``Started`` names a workflow id in a lost ``runs`` range; ``known`` are the run ids of
    the stored records.
    """
    lost_runs = [loss for loss in losses if loss.table == "runs"]
    if not lost_runs:
        return []
    found: dict[str, tuple[str, Started, Loss]] = {}
    for table in ("histories", "inbox"):
        seen: set[bytes] = set()
        for k, v in txn.range(table):
            prefix = k[:-8]
            if prefix in seen:
                continue
            seen.add(prefix)
            started = _started(codec, table, k, v)
            if started is None or started.run_id in known or started.workflow_id in found:
                continue
            wid = started.workflow_id.encode("utf-8", "surrogateescape")
            for loss in lost_runs:
                if loss.covers(wid, wid + b"\x00"):
                    found[started.workflow_id] = (started.workflow_id, started, loss)
                    break
    return list(found.values())


def _started(codec: Codec, table: str, k: bytes, v: bytes) -> Started | None:
    try:
        unpack_key(k, str, int)
        if table == "histories":
            events = read_activation(codec, v)[2]
            first = events[0] if events else None
        else:
            first = codec.decode(v)
    except Exception:  # noqa: BLE001 - an unreadable row names nothing; recovery quarantines it
        return None
    return first if isinstance(first, Started) else None


def timer_lost(
    txn: ReadTxn,
    codec: Codec,
    record: RunRecord,
    rows: set[tuple[str, int]],
    pending: Iterable[Any],
) -> bool:
    """Whether a timer ``record``'s run started and has not fired has no ``timers`` row.

    The runtime's own timers count too: an open run with a run timeout or an execution
    deadline has that timer's row until it closes (a delayed start's row goes when it
    fires, so its absence says nothing).

    Args:
        txn: the store.
        codec: decodes its history.
        record: the open run.
        rows: ``(run id, seq)`` of every stored timer row.
        pending: the run's inbox events (a fired timer not yet in its history).
    """
    runtime = []
    if record.options.get("run_timeout"):
        runtime.append(SYSTEM_SEQ["run_timeout"])
    if record.execution_deadline is not None:
        runtime.append(SYSTEM_SEQ["execution_timeout"])
    if any((record.run_id, seq) not in rows for seq in runtime):
        return True
    started: set[int] = set()
    fired = {e.seq for e in pending if type(e) is TimerFired}
    for _, v in txn.prefix("histories", key(record.run_id)):
        try:
            _index, _at, events, commands = read_activation(codec, v)
        except Error:
            return True  # its history does not read: nothing says its timers are whole
        started.update(c.seq for c in commands if type(c) is StartTimer)
        fired.update(e.seq for e in events if type(e) is TimerFired)
    return any((record.run_id, seq) not in rows for seq in started - fired)


def lost_error(workflow_id: str, loss: Loss) -> Error:
    """The error a workflow that lost rows is quarantined with."""
    path = os.path.dirname(os.path.dirname(loss.kept)) or "DATA_DIR"  # DIR/damaged/FILE
    return Error(
        f"workflow {workflow_id} lost stored rows to a damaged store: its {loss.table} rows "
        f"were on a page ({loss.page}) that could not be read when a node opened the store "
        f"({loss.stamp}); it is quarantined rather than resumed from what is left, which "
        f"could diverge from what it did or repeat its side effects. The damaged file is kept "
        f"at {loss.kept}; `roost store check --data-dir {path}` shows what was lost",
        kind=ErrorKind.UNAVAILABLE,
        retryable=False,
        details={"table": loss.table, "page": loss.page, "salvage": loss.stamp},
    )
