"""Changing stored workflows with no node running: the rows a node's runtime would write.

``roost workflow start / signal / cancel / terminate`` on a stopped data directory write
exactly what the runtime commits for the same request, and nothing runs: a start stores
the run record, its runtime timers and its ``Started`` inbox row (``commit_start``); a
signal, cancel or terminate stores one inbox row of the open run (``MessageArrived``,
``CancelRequested``, ``TerminateRequest``). The next node's recovery loads the run with its
pending inbox rows and acts on them as if they had arrived while it ran.

Each function runs inside one write transaction of the store (the caller holds the data
directory's lock for it), so a refused request stores nothing.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from typing import Any

from roost._errors import Error, ErrorKind, invalid, not_found
from roost._pid import Pid
from roost._security import (
    SECURITY_KEY,
    KeyRing,
    control_error,
    denied,
    envelope_payload,
    ticket_error,
)
from roost.actors._app import _check_name as check_name
from roost.storage import Codec, ReadTxn, WriteTxn, key, unpack_key
from roost.storage._quarantine import QUARANTINE_TABLE, quarantine_key
from roost.workflow._history import CancelRequested, MessageArrived, Started
from roost.workflow._history_format import read_activation
from roost.workflow._local._inspect import run_key
from roost.workflow._local._records import (
    InboxItem,
    RunRecord,
    RunStatus,
    TerminateRequest,
    TimerTask,
    history_key,
    inbox_key,
    timer_key,
)
from roost.workflow._local._starting import check_input
from roost.workflow._options import check_start_options, check_workflow_id
from roost.workflow._plan_start import plan_new_run, start_fields
from roost.workflow._planner import ExistingRun, plan_start

__all__ = [
    "cancel_offline",
    "check_start",
    "signal_offline",
    "start_offline",
    "terminate_offline",
]

# The node name of ``open_node``'s default: only the id policies see this PID.
_NODE = "local"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _workflow_pid(app_name: str, workflow_id: str) -> Pid:
    return Pid.trusted(_NODE, f"{app_name}:workflows", workflow_id)


def _record(txn: ReadTxn, codec: Codec, workflow_id: str) -> RunRecord | None:
    row = run_key(workflow_id)
    data = None if row is None else txn.get("runs", row)
    if data is None:
        return None
    record: RunRecord = codec.decode(data)
    return record


def _quarantined(txn: ReadTxn, workflow_id: str) -> bool:
    return txn.get(QUARANTINE_TABLE, quarantine_key("workflow", workflow_id)) is not None


def check_start(
    codec: Codec,
    entry: str,
    args: list[Any],
    workflow_id: str | None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Check a start before anything is opened or stored; return its checked options.

    ``options`` are further start options (``task_queue``, ``execution_timeout``, ...).

    Raises:
        roost.Error: Invalid for an entry that is not ``app:name`` (or whose names an app
            cannot have), an id that cannot be stored, or input that cannot be encoded.
    """
    app_name, _, name = entry.partition(":")
    if not app_name or not name:
        raise invalid(
            f"a workflow entry is 'app:name' (the app's name, then the workflow's), got {entry!r}",
            entry=entry,
        )
    # The names an App accepts: an entry no app can declare is never stored.
    check_name("app name", app_name)
    check_name("entry name", name)
    # An explicit id is refused if it runs already, with or without a node (the admin API's
    # policy): a start never silently returns a workflow someone else started.
    asked = dict(options or {})
    if workflow_id is not None:
        asked = {"id_conflict_policy": "fail", **asked, "id": workflow_id}
    opts = check_start_options(asked)
    workflow_id = opts.get("id", workflow_id)
    if workflow_id is not None and run_key(workflow_id) is None:
        raise invalid(f"workflow id {workflow_id!r} cannot be stored: use 1 to 511 UTF-8 bytes")
    check_input(codec, entry, tuple(args), opts, ())
    return opts


def start_offline(
    txn: WriteTxn,
    codec: Codec,
    entry: str,
    args: list[Any],
    *,
    workflow_id: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """Store a start of ``entry`` with ``args``; return the workflow id (the next node runs it).

    The id policies are the admin API's: an explicit id of an open run is refused
    (``id_conflict_policy="fail"``, unless ``options`` name another); a closed one is
    started again. ``options`` are further start options, checked as a spawn checks them.

    Raises:
        roost.Error: Invalid for an entry that is not ``app:name`` or input that cannot be
            stored; AlreadyExists for the id of a running workflow; InvalidState for a
            quarantined id.
    """
    opts = check_start(codec, entry, args, workflow_id, options)
    app_name = entry.partition(":")[0]
    workflow_id = opts.get("id", workflow_id)
    explicit = workflow_id is not None
    if workflow_id is None:
        workflow_id = check_workflow_id(f"{app_name}-{os.urandom(8).hex()}")
    record = _record(txn, codec, workflow_id)
    existing = None
    if record is not None:
        existing = (
            ExistingRun.running(_workflow_pid(app_name, workflow_id))
            if record.status is RunStatus.RUNNING
            else ExistingRun.closed(record.status)
        )
    plan = plan_start(
        existing,
        workflow_id=workflow_id,
        options=opts,
        explicit=explicit,
        quarantined=_quarantined(txn, workflow_id),
    )
    if plan.action == "use_existing":
        return workflow_id
    if plan.action != "start":
        assert plan.error is not None
        raise plan.error
    at = _now()
    rand = os.urandom(16)  # as new_run: the run id's 8 bytes, then the seed's
    planned = plan_new_run(
        workflow_id=workflow_id,
        workflow_type=entry,
        run_id=rand[:8].hex(),
        seed=int.from_bytes(rand[8:], "big"),
        args=args,
        context={},
        at=at,
        fields=start_fields(opts, parent=None, at=at),
    )
    new = RunRecord(**planned.record)
    txn.put("runs", workflow_id.encode(), codec.encode(new))
    for timer in planned.timers:
        task = TimerTask(
            workflow_id=workflow_id,
            run_id=new.run_id,
            seq=timer.seq,
            due=timer.due,
            kind=timer.kind,
        )
        txn.put("timers", timer_key(timer.due, new.run_id, timer.seq), codec.encode(task))
    txn.put("inbox", inbox_key(new.run_id, 1), codec.encode(Started(**planned.started)))
    return workflow_id


def _open_run(txn: ReadTxn, codec: Codec, workflow_id: str) -> RunRecord:
    if not isinstance(workflow_id, str) or run_key(workflow_id) is None:
        raise not_found(f"workflow {workflow_id!r} is not running", workflow_id=workflow_id)
    if _quarantined(txn, workflow_id):
        raise Error(
            f"workflow {workflow_id!r} is quarantined: nothing is delivered to it; "
            "roost.storage.quarantined lists its rows",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
            details={"workflow_id": workflow_id},
        )
    record = _record(txn, codec, workflow_id)
    if record is None or record.status is not RunStatus.RUNNING:
        raise not_found(f"workflow {workflow_id!r} is not running", workflow_id=workflow_id)
    return record


def _verifies(ring: KeyRing, sec: object) -> bool:
    """Whether ``ring`` verifies the sealed envelope ``sec``."""
    if not isinstance(sec, Mapping) or not isinstance(sec.get("addressee"), str):
        return False
    payload = envelope_payload(sec.get("actor"), sec.get("policies"), sec["addressee"])
    return ring.verify(sec.get("key_id"), payload, sec.get("sig"))


def _start_context(txn: ReadTxn, codec: Codec, record: RunRecord) -> dict[str, Any]:
    """The context values of ``record``'s run, from its ``Started`` event (stored or pending)."""
    data = txn.get("histories", history_key(record.run_id, 1))
    if data is not None:
        events = read_activation(codec, data)[2]
        if events and isinstance(events[0], Started):
            return events[0].context
    for _, raw in txn.prefix("inbox", key(record.run_id), limit=1):
        event = codec.decode(raw)
        if isinstance(event, Started):
            return event.context
    return {}


def _append(txn: WriteTxn, codec: Codec, record: RunRecord, event: InboxItem) -> None:
    # After the run's last pending row, as the runtime numbers them (recovery resumes
    # its count from the highest stored one).
    last = 0
    for k, _ in txn.prefix("inbox", key(record.run_id), reverse=True, limit=1):
        last = int(unpack_key(k, str, int)[1])
    txn.put("inbox", inbox_key(record.run_id, last + 1), codec.encode(event))


def signal_offline(
    txn: WriteTxn,
    codec: Codec,
    workflow_id: str,
    topic: str,
    payload: Any,
    *,
    ticket: Mapping[str, Any] | None = None,
    ring: KeyRing | None = None,
) -> None:
    """Store a message for an open workflow (it reads it once a node runs it).

    A workflow running under a security context takes it only with a relay ticket that
    ``ring`` verifies (the command line signs with the ring it was given).

    Raises:
        roost.Error: NotFound if no run of that id is open; Invalid for a bad topic or a
            payload that cannot be encoded; PermissionDenied for a secured workflow
            without a valid ticket (nothing is stored).
    """
    if not isinstance(topic, str) or not topic:
        raise invalid(f"a message topic is a non-empty string, got {topic!r}")
    record = _open_run(txn, codec, workflow_id)
    _check_signed(txn, codec, record, ring, ticket_error(ticket, workflow_id, topic, ring))
    codec.encode(payload, what=f"payload of message {topic!r}")
    _append(txn, codec, record, MessageArrived(topic=topic, payload=payload, sender=None))


def _check_signed(
    txn: ReadTxn, codec: Codec, record: RunRecord, ring: KeyRing | None, refused: Error | None
) -> None:
    """Raise PermissionDenied if ``record``'s run is secured and the change is not signed.

    ``refused`` is why the change's ticket does not verify (None: it does). Any ring
    verifies its own tickets: it must also verify the run's envelope, which only the
    node's signing keys made (a self-made key file does not).
    """
    sec = _start_context(txn, codec, record).get(SECURITY_KEY)
    if sec is None:
        return
    if refused is not None:
        raise refused
    if ring is None or not _verifies(ring, sec):
        raise denied(
            f"the key ring given does not verify workflow {record.workflow_id!r}'s envelope: "
            "it is not the node's ring (give the node's key file or ROOST_SIGNING_KEYS)",
            workflow=record.workflow_id,
        )


def cancel_offline(
    txn: WriteTxn,
    codec: Codec,
    workflow_id: str,
    reason: str | None,
    *,
    ticket: Mapping[str, Any] | None = None,
    ring: KeyRing | None = None,
) -> None:
    """Store a cancel request for an open workflow (it decides what to do once it runs).

    A workflow running under a security context takes it only with a control ticket that
    ``ring`` verifies, from a ring that verifies the run's envelope.

    Raises:
        roost.Error: NotFound if no run of that id is open; PermissionDenied for a
            secured workflow without a valid ticket (nothing is stored).
    """
    record = _open_run(txn, codec, workflow_id)
    _check_signed(txn, codec, record, ring, control_error(ticket, workflow_id, "cancel", ring))
    _append(txn, codec, record, CancelRequested(reason=reason))


def terminate_offline(
    txn: WriteTxn,
    codec: Codec,
    workflow_id: str,
    *,
    ticket: Mapping[str, Any] | None = None,
    ring: KeyRing | None = None,
) -> None:
    """Store a terminate of an open workflow: the next node closes it at open, unrun.

    A secured workflow takes it only signed, as ``cancel_offline`` says.

    Raises:
        roost.Error: NotFound if no run of that id is open; PermissionDenied for a
            secured workflow without a valid ticket (nothing is stored).
    """
    record = _open_run(txn, codec, workflow_id)
    _check_signed(txn, codec, record, ring, control_error(ticket, workflow_id, "terminate", ring))
    _append(txn, codec, record, TerminateRequest())
