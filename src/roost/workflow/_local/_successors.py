"""A workflow's lineage in the local host: new runs, hand-overs, and its children at a close."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roost import _telemetry as telemetry
from roost._pid import Pid
from roost.actors._app import Entry
from roost.workflow._history import Started
from roost.workflow._local._phases import PhaseEvent
from roost.workflow._local._plan import build_run, plan_successor
from roost.workflow._local._records import RunRecord
from roost.workflow._local._run import Run, Settled
from roost.workflow._plan_start import SYSTEM_SEQ, start_fields
from roost.workflow._planner import NextRun, OpenChild, plan_children

if TYPE_CHECKING:
    from roost.workflow._local._host import RunHost

__all__ = [
    "SYSTEM_SEQ",
    "apply_close_policies",
    "follow",
    "hand_over",
    "new_run",
    "record_for_start",
]


def record_for_start(
    options: dict[str, Any], *, parent: Pid | None, at: dt.datetime
) -> dict[str, Any]:
    """RunRecord fields for a workflow starting now with these (checked) start options."""
    return start_fields(options, parent=parent, at=at)


def new_run(
    *,
    entry: Entry,
    pid: Pid,
    args: Sequence[Any],
    context: dict[str, Any],
    at: dt.datetime,
    inherit: RunRecord | None = None,
    **fields: Any,
) -> tuple[Run, Started]:
    """A run about to begin (not yet stored) and its ``Started`` event (see ``build_run``)."""
    return build_run(
        entry=entry,
        pid=pid,
        args=args,
        context=context,
        at=at,
        rand=os.urandom(16),
        tracing=telemetry.tracing,
        inherit=inherit,
        **fields,
    )


def follow(
    m: RunHost, run: Run, at: dt.datetime, old: RunRecord, nxt: NextRun
) -> tuple[Run, list[tuple[bytes, bytes, Any]]]:
    """The run the planner says follows ``run`` (closing as ``old``), its inbox reserved.

    For a close from outside (``_closing``); a step's own close is planned with it.
    """
    new, rows = plan_successor(run, old, nxt, at, m.routes)
    m.hold_staged((k, v) for k, v, _ in rows)
    m.forwarding.reserve(run, new)  # rows still stored for ``run`` move to ``new`` (_forwarding)
    return new, rows


def hand_over(
    m: RunHost,
    old: Run,
    new: Run,
    staged: list[tuple[bytes, bytes, Any]],
    *,
    moved: set[bytes | Settled],
) -> None:
    """After the commit: the new run takes the id, PID, watchers, links and waiters.

    Rows the commit moved from the old run's inbox (``Forwarding.record``, before this)
    reach the new run under their new keys as their committers hand them on.
    """
    if telemetry.tracing:
        telemetry.run_closed(old.record, new.record)
    new.watchers, new.links, new.exit_chans = old.watchers, old.links, old.exit_chans
    m.forwarding.forget(old)  # handed over: rows for it follow into ``new`` now
    m.runs.add(new)
    m.runs.forget_driver(old)
    m.runs.move(old, PhaseEvent.CLOSED)
    late = [(k, e) for k, e in old.pending if k not in moved]
    old.pending = []
    m.arm(new)
    m.accept(new, [(k, event) for k, _, event in staged])
    m.accept(old, late)  # arrived during the hand-over's commit: re-homed
    apply_close_policies(m, old)  # the old run's children, as at any close


def apply_close_policies(m: RunHost, run: Run) -> None:
    record = run.record
    open_runs = {
        child_id: OpenChild(run_id=child.record.run_id, parent=child.record.parent)
        for child_id in record.child_policies
        if (child := m.runs.get(child_id)) is not None
    }
    for action in plan_children(run.pid, record.child_policies, record.child_runs, open_runs):
        child = m.runs[action.child_id]
        if action.action == "terminate":
            m.terminate(child.pid)
        else:
            m.cancel(child.pid, f"parent {run.pid} closed")
