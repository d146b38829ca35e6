"""Starting a workflow: its new run, its id policies (acting on ``plan_start``), its name."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from roost import _telemetry as telemetry
from roost._pid import Pid
from roost.actors._app import Entry
from roost.workflow._history import Started
from roost.workflow._local._plan import build_run
from roost.workflow._local._records import RunRecord
from roost.workflow._local._run import Run
from roost.workflow._plan_start import start_fields
from roost.workflow._planner import (
    ExistingRun,
    plan_start,
    start_reads_closed_run,
    unloadable_error,
)
from roost.workflow._recorded import is_plain

if TYPE_CHECKING:
    from roost.storage import Codec
    from roost.workflow._local._host import RunHost

__all__ = ["check_input", "claim_name", "make_room", "new_run", "record_for_start"]


def check_input(
    codec: Codec,
    entry_id: str,
    args: tuple[Any, ...],
    opts: dict[str, Any],
    messages: tuple[tuple[str, Any], ...],
) -> None:
    """Check that a start's input, memo and start messages can be stored.

    A plain value (None, bool, int, float, bytes, a UTF-8 str) always encodes: only the
    others are tried, each as a payload with the payload depth.

    Raises:
        roost.Error: kind Invalid naming the value that cannot be encoded.
    """
    for i, arg in enumerate(args):
        if not is_plain(arg):
            codec.encode(arg, what=f"workflow {entry_id!r} input args[{i}]")
    if "memo" in opts:
        codec.encode(opts["memo"], what="memo")
    for topic, payload in messages:
        if not is_plain(payload):
            codec.encode(payload, what=f"start message {topic!r}")


async def make_room(
    m: RunHost,
    workflow_id: str,
    *,
    explicit: bool,
    opts: dict[str, Any],
    messages: tuple[tuple[str, Any], ...],
    sender: Pid,
) -> Pid | None:
    """Apply the id policies; the running PID to return (use_existing), or None to start.

    Raises:
        roost.Error: AlreadyExists when the policies refuse; InvalidState for a quarantined id.
    """
    cause = m.unloadable.get(workflow_id)
    if cause is not None:
        raise unloadable_error(workflow_id, cause)
    replaced = False
    while True:
        if workflow_id not in m.quarantined:
            await _settled(m, workflow_id)
        plan = plan_start(
            _existing(m, workflow_id, opts, replaced=replaced),
            workflow_id=workflow_id,
            options=opts,
            explicit=explicit,
            quarantined=workflow_id in m.quarantined,
            replaced=replaced,
        )
        if plan.action == "start":
            return None
        if plan.error is not None:
            raise plan.error
        existing = m.runs[workflow_id]
        if plan.deliver_messages:
            await m.signal_many(existing, messages, sender)
            return existing.pid
        # terminate_existing: the same path as terminate (watchers and concurrent
        # starts of this id wait for the close), then plan again.
        m.terminate(existing.pid)
        await existing.wait_closed()
        replaced = True


async def _settled(m: RunHost, workflow_id: str) -> None:
    """Wait until no close of ``workflow_id`` commits and no uncommitted step's child takes it."""
    while True:
        while (closing := m.runs.closing(workflow_id)) is not None:  # a terminate commits
            await closing.wait_closed()
        if not m.runs.child_staged(workflow_id):
            return
        await m.runs.wait_unstaged(workflow_id)  # then plan with that child open


def _existing(
    m: RunHost, workflow_id: str, opts: dict[str, Any], *, replaced: bool
) -> ExistingRun | None:
    run = m.runs.get(workflow_id)
    if run is not None:
        return ExistingRun.running(run.pid)
    if replaced or workflow_id in m.quarantined or not start_reads_closed_run(opts):
        return None  # the plan needs no closed run: no store read
    record = m.stored_record(workflow_id)
    return ExistingRun.closed(record.status) if record is not None else None


def claim_name(m: RunHost, name: str, pid: Pid) -> None:
    """Register ``name`` for ``pid``, taking it over from a dead holder."""
    holder = m.node.registry.lookup(name)
    if holder is not None and holder != pid and not m.node.alive(holder):
        m.node.registry.unregister(name)
    m.node.registry.register(name, pid)  # AlreadyExists if a live process has it


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
