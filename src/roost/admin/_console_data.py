"""What the console reads from a running node, and the changes its buttons make.

The console runs inside the node (on the admin server), so it reads the node's own state:
workflows through the ``NodeHandle`` inspection calls, queues, cron triggers, processes and
supervisors from the runtime's in-memory records. Changes go through the same paths as
process calls (a durable signal, cancel request, terminate; the DLQ's redrive and discard).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from roost._errors import Error, ErrorKind, invalid, not_found
from roost._pid import Pid
from roost.actors._app import EntryKind
from roost.actors._current import reset_current, set_current
from roost.workflow._history import (
    ScheduleActivity,
    StartChild,
    StartTimer,
    TimerFired,
    WorkflowTask,
)

__all__ = [
    "cancel_workflow",
    "children",
    "cron_triggers",
    "pending_timers",
    "process_tree",
    "queue_stats",
    "signal_workflow",
    "terminate_workflow",
]

T = TypeVar("T")
_SUPERVISOR_STATES = "roost.supervisor.states"


def _node(handle: Any) -> Any:
    return handle._node  # the console is part of roost: it reads the node's own records


# -- workflows ---------------------------------------------------------------------------------


def pending_timers(history: list[Any], status: str) -> list[dict[str, Any]]:
    """The durable timers of a running workflow that have not fired: seq and due time."""
    if status != "running":
        return []
    fired = {e.seq for e in history if isinstance(e, TimerFired)}
    at: dt.datetime | None = None
    timers = []
    for item in history:
        if isinstance(item, WorkflowTask):
            at = item.at
        elif isinstance(item, StartTimer) and item.seq not in fired:
            due = at + dt.timedelta(seconds=item.seconds) if at is not None else None
            timers.append({"seq": item.seq, "seconds": item.seconds, "due": due})
    return timers


def children(handle: Any, history: list[Any]) -> list[dict[str, Any]]:
    """The child workflows a run started (from its history), each with its status."""
    found = []
    seen: set[str] = set()
    for item in history:
        if isinstance(item, StartChild) and item.workflow_id not in seen:
            seen.add(item.workflow_id)
            try:
                status = handle.describe(item.workflow_id).get("status")
            except Error:
                status = "unknown"
            found.append({"workflow_id": item.workflow_id, "entry": item.entry, "status": status})
    return found


def activity_names(history: list[Any]) -> dict[int, str]:
    """Activity entry by command seq (the timeline names what an event resolves)."""
    return {e.seq: e.entry for e in history if isinstance(e, ScheduleActivity)}


def _workflow_pid(handle: Any, workflow_id: str) -> tuple[Any, Pid]:
    host = _node(handle).workflows
    if host is None:
        raise Error("this node has no workflow runtime", kind=ErrorKind.INVALID_STATE)
    status = handle.describe(workflow_id)["status"]  # NotFound for an unknown id
    if status != "running":
        raise Error(
            f"workflow {workflow_id!r} is {status}; only a running workflow takes a signal, "
            "a cancel or a terminate",
            kind=ErrorKind.INVALID_STATE,
            details={"workflow_id": workflow_id, "status": status},
        )
    return host, Pid(handle.name, host.host, workflow_id)


async def _as_process(handle: Any, fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` as a short-lived attached process (the sender of what it sends)."""
    node = _node(handle)
    proc = node.attach()
    token = set_current(proc)
    try:
        with proc.scope:
            return await fn()
        raise Error("the console's request was stopped", kind=ErrorKind.CANCELED)
    finally:
        reset_current(token)
        node.exit(proc, None, None)


async def signal_workflow(handle: Any, workflow_id: str, topic: str, payload: Any) -> None:
    """Send ``payload`` on ``topic`` to a running workflow; returns once it is stored."""
    from roost import process  # noqa: PLC0415 - the public call, as a process makes it

    _, pid = _workflow_pid(handle, workflow_id)

    async def send() -> None:
        await process.send(pid, topic, payload)

    await _as_process(handle, send)


async def cancel_workflow(handle: Any, workflow_id: str, reason: str | None) -> None:
    """Ask a running workflow to stop; returns once the request is stored."""
    host, pid = _workflow_pid(handle, workflow_id)
    await host.cancel(pid, reason).wait()


def terminate_workflow(handle: Any, workflow_id: str) -> None:
    """Stop a running workflow at once (it closes as terminated)."""
    host, pid = _workflow_pid(handle, workflow_id)
    host.terminate(pid)


# -- queues and cron ---------------------------------------------------------------------------


def _queues(handle: Any) -> Any:
    runtime = _node(handle).ext.get("queues")
    if runtime is None:
        raise Error("this node runs no queues", kind=ErrorKind.INVALID_STATE)
    return runtime


def queue_stats(handle: Any) -> dict[str, dict[str, int]]:
    """``{queue: {"depth", "in_flight", "dead"}}`` of every declared queue."""
    runtime = _node(handle).ext.get("queues")
    if runtime is None:
        return {}
    stats = {}
    for name in sorted(runtime.specs):
        state = runtime.states[name]
        dead = len(runtime.dlq.list(name, 0, 2**62))
        stats[name] = {"depth": len(state.pending), "in_flight": len(state.running), "dead": dead}
    return stats


def check_queue(handle: Any, queue: str) -> None:
    """Raise NotFound unless ``queue`` is declared."""
    if queue not in _queues(handle).specs:
        raise not_found(f"queue {queue!r} is not declared", queue=queue)


def dead_letters(handle: Any, queue: str, limit: int) -> list[Any]:
    """The oldest ``limit`` dead letters of ``queue``."""
    return list(handle.dlq.list(queue, 0, limit))


def cron_triggers(handle: Any) -> list[dict[str, Any]]:
    """Each cron trigger: expression, entry, catch-up rule and next fire time (UTC)."""
    node = _node(handle)
    now = node.now()
    triggers = []
    for trigger in node.app.declared.get("cron", {}).values():
        try:
            entry = node.app.resolve(trigger.entry).id
        except Error:
            entry = str(trigger.entry)
        triggers.append(
            {
                "expression": trigger.schedule.expression,
                "entry": entry,
                "catch_up": trigger.catch_up,
                "next_fire_at": trigger.schedule.next_after(now),
            }
        )
    triggers.sort(key=lambda t: (t["next_fire_at"] is None, t["next_fire_at"] or now))
    return triggers


# -- processes ---------------------------------------------------------------------------------


def process_tree(handle: Any) -> tuple[list[dict[str, Any]], int]:
    """The live processes as a forest (supervisors hold their children) and their count.

    Each node: ``pid``, ``entry``, ``kind``, ``name`` (registered names), ``parent`` (the
    supervisor), ``status`` (``alive``, or a supervised child that is ``down``), ``links``,
    ``monitors`` and ``children``.
    """
    node = _node(handle)
    states: dict[Pid, Any] = node.ext.get(_SUPERVISOR_STATES, {})
    names = node.registry._by_pid  # names held by each PID
    rows: dict[Pid, dict[str, Any]] = {}
    for pid, proc in node.procs.items():
        entry = proc.entry
        rows[pid] = {
            "pid": str(pid),
            "entry": entry.id if entry is not None else "(attached)",
            "kind": entry.kind.value if entry is not None else "attached",
            "name": ", ".join(sorted(names.get(pid, ()))),
            "parent": None,
            "status": "alive" if proc.alive else "exiting",
            "links": sorted(str(p) for p in proc.links or ()),
            "monitors": sorted(str(p) for p in proc.watching or ()),
            "children": [],
            "child_id": None,
        }
    for sup_pid, state in states.items():
        parent = rows.get(sup_pid)
        if parent is None:
            continue
        for child in state.children:
            row = rows.get(child.pid) if child.pid is not None else None
            if row is None:  # a child that is down (restarting, or stopped for good)
                row = {
                    "pid": "",
                    "entry": child.entry.id,
                    "kind": child.entry.kind.value,
                    "name": "",
                    "parent": None,
                    "status": "down",
                    "links": [],
                    "monitors": [],
                    "children": [],
                    "child_id": None,
                }
            row["parent"] = parent["pid"]
            row["child_id"] = child.key
            parent["children"].append(row)
    roots = [row for row in rows.values() if row["parent"] is None]
    roots.sort(key=lambda r: (r["kind"] != EntryKind.SUPERVISOR.value, r["pid"]))
    return roots, len(node.procs)


def parse_limit(value: str | None, default: int, most: int) -> int:
    """A ``limit`` query parameter: an int from 1 to ``most``.

    Raises:
        roost.Error: Invalid for anything else.
    """
    if value is None or value == "":
        return default
    if not value.isdigit() or not 1 <= int(value) <= most:
        raise invalid(f"limit must be a whole number from 1 to {most}, got {value[:40]!r}")
    return int(value)
