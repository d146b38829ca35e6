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
from roost.actors._authorize import check_control, check_relay
from roost.actors._current import reset_current, set_current
from roost.admin._console_format import short
from roost.admin._json import to_jsonable
from roost.admin._views import asked
from roost.workflow._history import (
    ActivityResolved,
    CancelActivity,
    CancelRequested,
    Complete,
    Fail,
    MessageArrived,
    ProcessExited,
    ScheduleActivity,
    SendMessage,
    SpawnProcess,
    StartChild,
    Started,
    StartTimer,
    StopProcess,
    TimerFired,
    WorkflowTask,
)

__all__ = [
    "activity_attempts",
    "activity_rows",
    "cancel_workflow",
    "children",
    "cron_triggers",
    "history_rows",
    "parent_process",
    "parent_workflow",
    "pending_timers",
    "process_info",
    "process_tree",
    "queue_messages",
    "queue_stats",
    "signal_workflow",
    "stop_process",
    "terminate_workflow",
    "timeline_chart",
    "trigger_cron",
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


def _resolved(item: ActivityResolved, names: dict[int, str]) -> str:
    what = names.get(item.seq, "?")
    if item.error is not None:
        return f"#{item.seq} {what} failed: {short(item.error.message, 120)}"
    return f"#{item.seq} {what} returned {short(item.value, 100)}"


def _arrived(item: MessageArrived, _names: dict[int, str]) -> str:
    sender = f" from {item.sender}" if item.sender is not None else ""
    return f"{item.topic!r} {short(item.payload, 100)}{sender}"


def _exited(item: ProcessExited, _names: dict[int, str]) -> str:
    if item.error is not None:
        return f"{item.pid} failed: {short(item.error.message, 100)}"
    return f"{item.pid} exited"


# What the Summary column says of each kind of history item (others: their fields).
_SUMMARIES: dict[type, Callable[[Any, dict[int, str]], str]] = {
    Started: lambda e, _: f"{e.workflow_type} attempt {e.attempt}, input {short(e.args, 120)}",
    ScheduleActivity: lambda e, _: f"#{e.seq} {e.entry}({short(e.args, 100)[1:-1]})",
    ActivityResolved: _resolved,
    StartTimer: lambda e, _: f"#{e.seq} for {e.seconds:g} s",
    TimerFired: lambda e, _: f"#{e.seq} fired",
    MessageArrived: _arrived,
    SendMessage: lambda e, _: f"{e.topic!r} to {e.dest}",
    CancelRequested: lambda e, _: f"reason {e.reason!r}" if e.reason else "no reason given",
    CancelActivity: lambda e, names: f"#{e.activity} {names.get(e.activity, '?')}",
    StartChild: lambda e, _: f"{e.workflow_id} ({e.entry})",
    SpawnProcess: lambda e, _: f"{e.pid} ({e.entry})",
    StopProcess: lambda e, _: f"{'terminate' if e.hard else 'cancel'} {e.dest}",
    ProcessExited: _exited,
    Complete: lambda e, _: f"returned {short(e.value, 120)}",
    Fail: lambda e, _: f"failed: {short(e.error.message, 120)}",
}


def _summary(item: Any, names: dict[int, str]) -> str:
    """One line saying what a history item is about (the table's Summary column)."""
    summarize = _SUMMARIES.get(type(item))
    if summarize is not None:
        return summarize(item, names)
    fields = to_jsonable(item)
    if isinstance(fields, dict):
        fields.pop("$type", None)
        fields.pop("seq", None)
    return short(fields, 160)


def history_rows(history: list[Any]) -> list[dict[str, Any]]:
    """The history as table rows, each with its activation's time and the time since before.

    "Since" is the time since the previous row of its kind (the events of one activation
    share its time: ``+0 s``). An activation's marker is a row of its own (``task``); the
    others have ``n`` (the item's place in the history), ``kind``, ``summary`` and
    ``fields`` (the whole record, shown when the row is expanded).
    """
    names = activity_names(history)
    rows: list[dict[str, Any]] = []
    at: dt.datetime | None = None
    last_event_at: dt.datetime | None = None
    for n, item in enumerate(history):
        if isinstance(item, WorkflowTask):
            since = item.at - at if at is not None else None
            at = item.at
            rows.append(
                {"task": True, "index": item.index, "at": at, "size": item.size, "since": since}
            )
            continue
        fields = to_jsonable(item)
        if isinstance(fields, dict):
            fields.pop("$type", None)
        since = at - last_event_at if at is not None and last_event_at is not None else None
        last_event_at = at
        rows.append(
            {
                "task": False,
                "n": n,
                "at": at,
                "since": since,
                "kind": type(item).__name__,
                "summary": _summary(item, names),
                "fields": fields,
            }
        )
    return rows


def activity_rows(
    history: list[Any],
    pending: list[dict[str, Any]],
    attempts: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Every activity the run scheduled: when, how it ended, how long it took, its attempts.

    A pending one has its attempt, the previous attempt's error and when the next attempt
    may start. ``attempts`` are the recorded failed attempts (``activity_attempts``); each
    row's ``attempts`` lists them, then the attempt that ended it (or runs, or waits).
    """
    rows: dict[int, dict[str, Any]] = {}
    at: dt.datetime | None = None
    for item in history:
        if isinstance(item, WorkflowTask):
            at = item.at
        elif isinstance(item, ScheduleActivity):
            rows[item.seq] = {
                "seq": item.seq,
                "entry": item.entry,
                "args": item.args,
                "scheduled_at": at,
                "closed_at": None,
                "took": None,
                "status": "scheduled",
                "value": None,
                "error": None,
                "attempt": None,
                "next_attempt_at": None,
                "attempts": [],
            }
        elif isinstance(item, ActivityResolved) and item.seq in rows:
            row = rows[item.seq]
            row["closed_at"] = at
            if at is not None and row["scheduled_at"] is not None:
                row["took"] = at - row["scheduled_at"]
            row["status"] = "failed" if item.error is not None else "completed"
            row["value"], row["error"] = item.value, item.error
        elif (
            isinstance(item, CancelActivity)
            and rows.get(item.activity, {}).get("status") == "scheduled"
        ):
            rows[item.activity]["status"] = "canceled"
            rows[item.activity]["closed_at"] = at
    running: dict[int, dict[str, Any]] = {}
    for task in pending:
        waiting = rows.get(task.get("seq", -1))
        if waiting is not None:
            running[waiting["seq"]] = task
            waiting["status"] = "running"
            waiting["attempt"] = task.get("attempt")
            waiting["error"] = task.get("last_error")
            waiting["next_attempt_at"] = task.get("next_attempt_at")
    for failed in sorted(attempts or (), key=lambda a: (a["seq"], a["attempt"])):
        owner = rows.get(failed["seq"])
        if owner is not None:
            took = failed["ended_at"] - failed["started_at"]
            owner["attempts"].append({**failed, "status": "failed", "took": took})
    for row in rows.values():
        row["attempts"].append(_last_attempt(row, running.get(row["seq"])))
    return list(rows.values())


def _last_attempt(row: dict[str, Any], task: dict[str, Any] | None) -> dict[str, Any]:
    """The attempt after the recorded failures: the one that ended the activity, or its next.

    Its start is when it could start (the retry time after the last failure, or the
    scheduling); its end is the activation that recorded its outcome.
    """
    before = row["attempts"][-1] if row["attempts"] else None
    number = before["attempt"] + 1 if before is not None else 1
    started = before["next_attempt_at"] if before is not None else row["scheduled_at"]
    if task is not None:
        number = task.get("attempt") or number
        started = task.get("next_attempt_at") or started
    status = row["status"]
    ended = row["closed_at"] if status in ("completed", "failed", "canceled") else None
    took = ended - started if ended is not None and started is not None else None
    return {
        "seq": row["seq"],
        "attempt": number,
        "started_at": started,
        "ended_at": ended,
        "took": took,
        "status": status,
        "error": row["error"] if status == "failed" else None,
        "next_attempt_at": None,
    }


def activity_attempts(handle: Any, workflow_id: str) -> list[dict[str, Any]]:
    """The failed activity attempts the host keeps (the embedded host's ``attempts``).

    A host that keeps none (Temporal's history holds only the latest failure) gives none:
    the page then shows each activity's outcome only.
    """
    read = getattr(_node(handle).workflows, "activity_attempts", None)
    return list(read(workflow_id)) if read is not None else []


# The chart's width in SVG user units: bars are placed in these (no inline style: the
# console's Content-Security-Policy allows stylesheets only from the console itself).
CHART_WIDTH = 1000


def timeline_chart(
    history: list[Any], closed_at: dt.datetime | None, now: dt.datetime
) -> dict[str, Any]:
    """The run as a compact timeline: one bar per activity, timer, child and message wait.

    Times are activation times (the history's clock). An activity runs from the activation
    that scheduled it to the one that recorded its outcome (or its cancel); a timer from
    its start to its firing; a child from its start to its exit; a message wait from the
    activation before the message to the one that delivered it. What has not ended runs to
    the run's close, or to ``now`` while it is open (``open`` is True). Returns ``start``,
    ``end`` (the shared axis), ``span`` (a timedelta) and ``rows``, each with ``kind``,
    ``label``, ``start``, ``end``, ``took``, ``status``, ``open``, and ``x`` / ``width`` in
    ``CHART_WIDTH`` units.
    """
    chart = _Chart()
    for item in history:
        chart.feed(item)
    at = chart.at
    running_to = now if at is None else max(now, at)
    last = closed_at if closed_at is not None else running_to
    start = next((e.at for e in history if isinstance(e, WorkflowTask)), last)
    for row in chart.rows:
        _place(row, start, last, closed=closed_at is not None)
    return {"start": start, "end": last, "span": last - start, "rows": chart.rows}


class _Chart:
    """The timeline's rows, built by reading a history in order."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.at: dt.datetime | None = None  # the current activation's time
        self.before: dt.datetime | None = None  # the previous activation's time
        self._open: dict[tuple[str, object], dict[str, Any]] = {}

    def feed(self, item: Any) -> None:
        kind = type(item)
        if kind is WorkflowTask:
            self.before, self.at = self.at, item.at
        elif kind is ScheduleActivity:
            self._add("activity", f"#{item.seq} {item.entry}", ("a", item.seq))
        elif kind is ActivityResolved:
            self._end(("a", item.seq), "failed" if item.error is not None else "completed")
        elif kind is CancelActivity:
            self._end(("a", item.activity), "canceled")
        elif kind is StartTimer:
            self._add("timer", f"#{item.seq} sleep {item.seconds:g} s", ("t", item.seq))
        elif kind is TimerFired:
            self._end(("t", item.seq), "completed")
        elif kind is StartChild:
            self._add("child", f"{item.workflow_id} ({item.entry})", ("c", item.workflow_id))
        elif kind is ProcessExited:
            status = "failed" if item.error is not None else "completed"
            self._end(("c", getattr(item.pid, "id", None)), status)
        elif kind is MessageArrived and item.call is None:  # a call's reply waits for nothing
            row = self._add("message", f"message {short(item.topic, 60)}", None)
            row["start"] = self.before if self.before is not None else self.at
            row["end"], row["status"] = self.at, "completed"

    def _add(self, kind: str, label: str, key: tuple[str, object] | None) -> dict[str, Any]:
        row: dict[str, Any] = {
            "kind": kind,
            "label": label,
            "start": self.at,
            "end": None,
            "status": "running",
        }
        self.rows.append(row)
        if key is not None:
            self._open[key] = row
        return row

    def _end(self, key: tuple[str, object], status: str) -> None:
        row = self._open.pop(key, None)
        if row is not None:
            row["end"], row["status"] = self.at, status


def _place(row: dict[str, Any], start: dt.datetime, last: dt.datetime, *, closed: bool) -> None:
    """Give a row its end (if open), duration and place on the axis from ``start`` to ``last``."""
    row["open"] = row["end"] is None
    if row["open"]:
        row["end"] = last
        if closed:
            row["status"] = "unfinished"  # the run closed while it was under way
    began: dt.datetime = row["start"] or start
    ended: dt.datetime = row["end"]
    row["took"] = ended - began
    span = (last - start).total_seconds()
    offset = (began - start).total_seconds()
    length = max((ended - began).total_seconds(), 0.0)
    x = round(CHART_WIDTH * offset / span, 1) if span > 0 else 0.0
    width = round(CHART_WIDTH * length / span, 1) if span > 0 else float(CHART_WIDTH)
    row["x"], row["width"] = x, max(min(width, CHART_WIDTH - x), 2.0)


def temporal_url(handle: Any, workflow_id: str, run_id: Any) -> str | None:
    """The run's page in Temporal's UI, when its host has one (``open_node(temporal_ui=)``)."""
    ui_url = getattr(_node(handle).workflows, "ui_url", None)
    if ui_url is None or not isinstance(run_id, str):
        return None
    url: str | None = ui_url(workflow_id, run_id)
    return url


def parent_workflow(handle: Any, parent: Any) -> str | None:
    """The workflow id of ``parent`` when it is a workflow of this node (else None)."""
    host = _node(handle).workflows
    if not isinstance(parent, Pid) or host is None or parent.host != host.host:
        return None
    return parent.id


def parent_process(handle: Any, parent: Any) -> str | None:
    """``parent`` as a PID string when it is a live plain process of this node (else None)."""
    if not isinstance(parent, Pid):
        return None
    proc = _node(handle).procs.get(parent)
    return str(parent) if proc is not None and proc.alive else None


def activity_names(history: list[Any]) -> dict[int, str]:
    """Activity entry by command seq (the timeline names what an event resolves)."""
    return {e.seq: e.entry for e in history if isinstance(e, ScheduleActivity)}


async def _workflow_pid(handle: Any, workflow_id: str) -> tuple[Any, Pid]:
    host = _node(handle).workflows
    if host is None:
        raise Error("this node has no workflow runtime", kind=ErrorKind.INVALID_STATE)
    # NotFound for an unknown id
    status = (await asked(handle, handle.describe, workflow_id))["status"]
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

    _, pid = await _workflow_pid(handle, workflow_id)
    # The console holds no key ring: a secured workflow takes no message from it.
    check_relay(_node(handle), pid, topic, None)

    async def send() -> None:
        await process.send(pid, topic, payload)

    await _as_process(handle, send)


async def cancel_workflow(handle: Any, workflow_id: str, reason: str | None) -> None:
    """Ask a running workflow to stop; returns once the request is stored."""
    host, pid = await _workflow_pid(handle, workflow_id)
    check_control(_node(handle), pid, "cancel", None)  # as for signal: no ring, no change
    accepted = await asked(handle, host.cancel, pid, reason)
    await accepted.wait()


async def terminate_workflow(handle: Any, workflow_id: str) -> None:
    """Stop a running workflow at once (it closes as terminated)."""
    host, pid = await _workflow_pid(handle, workflow_id)
    check_control(_node(handle), pid, "terminate", None)
    await asked(handle, host.terminate, pid)


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
    """Each cron trigger: expression, entry, catch-up rule, next and last fire (UTC).

    ``last_fire_at`` is the stored last fire time; ``outcome`` how the latest run went (a
    ``CronOutcome``: one under way, or the latest stored, from before a restart too; None
    before the first); ``recent`` the stored runs, oldest first (the latest ten).
    """
    node = _node(handle)
    now = node.now()
    runtime = node.ext.get("cron")
    triggers = []
    for trigger in node.app.declared.get("cron", {}).values():
        try:
            entry = node.app.resolve(trigger.entry).id
        except Error:
            entry = str(trigger.entry)
        triggers.append(
            {
                "id": trigger.id,
                "expression": trigger.schedule.expression,
                "entry": entry,
                "catch_up": trigger.catch_up,
                "next_fire_at": trigger.schedule.next_after(now),
                "last_fire_at": runtime.last_fire(trigger.id) if runtime is not None else None,
                "outcome": runtime.outcomes.get(trigger.id) if runtime is not None else None,
                "recent": list(runtime.recent.get(trigger.id, ())) if runtime is not None else [],
            }
        )
    triggers.sort(key=lambda t: (t["next_fire_at"] is None, t["next_fire_at"] or now))
    return triggers


def trigger_cron(handle: Any, trigger_id: str) -> None:
    """Run a cron trigger's entry once now (its schedule and last fire time stay).

    Raises:
        roost.Error: NotFound for an unknown trigger; InvalidState while it runs.
    """
    runtime = _node(handle).ext.get("cron")
    if runtime is None:
        raise not_found(f"no cron trigger {trigger_id!r}: this node runs none", trigger=trigger_id)
    runtime.trigger_now(trigger_id)


def queue_messages(handle: Any, queue: str, limit: int) -> dict[str, list[Any]]:
    """The messages of ``queue`` waiting (oldest first) and in flight, at most ``limit`` each."""
    state = _queues(handle).states[queue]
    return {
        "waiting": list(state.pending.values())[:limit],
        "in_flight": list(state.running.values())[:limit],
    }


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
            "mailbox": proc.mailbox.unread() if proc.mailbox is not None else 0,
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
                    "mailbox": 0,
                }
            row["parent"] = parent["pid"]
            row["child_id"] = child.key
            parent["children"].append(row)
    roots = [row for row in rows.values() if row["parent"] is None]
    roots.sort(key=lambda r: (r["kind"] != EntryKind.SUPERVISOR.value, r["pid"]))
    return roots, len(node.procs)


def _live_process(handle: Any, pid_text: str) -> Any:
    node = _node(handle)
    pid = Pid.parse(pid_text)  # Invalid for what is no PID
    proc = node.procs.get(pid)
    if proc is None or not proc.alive:
        raise not_found(
            f"no live process {pid_text!r} on this node (it exited, or it is a workflow: "
            "workflows have their own pages)",
            pid=pid_text,
        )
    return proc


def process_info(handle: Any, pid_text: str) -> dict[str, Any]:
    """One live process: entry, names, mailbox length, links, monitors and supervisor.

    Raises:
        roost.Error: Invalid for a malformed PID; NotFound for no live process.
    """
    node = _node(handle)
    proc = _live_process(handle, pid_text)
    supervisor = None
    for sup_pid, state in node.ext.get(_SUPERVISOR_STATES, {}).items():
        if any(child.pid == proc.pid for child in state.children):
            supervisor = str(sup_pid)
    entry = proc.entry
    box = proc.mailbox
    return {
        "pid": str(proc.pid),
        "entry": entry.id if entry is not None else "(attached)",
        "kind": entry.kind.value if entry is not None else "attached",
        "names": sorted(node.registry._by_pid.get(proc.pid, ())),
        "mailbox": box.unread() if box is not None else 0,
        "mailbox_limit": box.limit if box is not None else None,
        "links": sorted(str(p) for p in proc.links or ()),
        "monitoring": sorted(str(p) for p in proc.watching or ()),
        "monitored_by": sorted(str(p) for p in proc.watchers or ()),
        "traps_exits": proc.trap_links,
        "supervisor": supervisor,
        "context": dict(proc.context),
        "attached": entry is None,
    }


def stop_process(handle: Any, pid_text: str, *, hard: bool, reason: str | None) -> None:
    """Cancel (a CANCEL event it may act on) or terminate a live process.

    Raises:
        roost.Error: NotFound for no live process; InvalidState for an attached one (the
            node's own block, a request under way: not the console's to stop).
    """
    proc = _live_process(handle, pid_text)
    if proc.entry is None:
        raise Error(
            f"{pid_text} is an attached process (the node's own block or a request under "
            "way); the console stops only spawned processes",
            kind=ErrorKind.INVALID_STATE,
        )
    _node(handle).stop(proc.pid, reason, hard=hard)


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
