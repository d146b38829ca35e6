"""Starting a workflow: input checks, admission, the id policies (``plan_start``), the run."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from roost import _telemetry as telemetry
from roost._entropy import random_bytes
from roost._pid import Pid
from roost._security import SECURITY_KEY, denied, reseal
from roost.actors._app import Entry
from roost.actors._authorize import authorize_sender
from roost.workflow._history import MessageArrived, Started
from roost.workflow._local._plan import build_run
from roost.workflow._local._records import RunRecord
from roost.workflow._local._run import Run
from roost.workflow._options import check_start_options
from roost.workflow._plan_start import start_fields
from roost.workflow._planner import (
    ExistingRun,
    plan_start,
    start_reads_closed_run,
    unloadable_error,
)
from roost.workflow._recorded import is_plain

if TYPE_CHECKING:
    from collections.abc import Callable

    from roost._counters import RuntimeCounters
    from roost._errors import Error
    from roost.actors._process import NodeOps
    from roost.storage import Codec
    from roost.workflow._local._admission import StartGate
    from roost.workflow._local._commits import Commits
    from roost.workflow._local._eager import EagerStarts
    from roost.workflow._local._incoming import Incoming
    from roost.workflow._local._runs import RunTable
    from roost.workflow._local._timers import DurableTimers

__all__ = ["Starts", "check_input", "claim_name", "new_run", "record_for_start"]


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


class Starts:
    """Starts workflows: input checked, admitted, the id's policies, the run, its first step."""

    __slots__ = (
        "_app_name",
        "_codec",
        "_commits",
        "_counters",
        "_eager",
        "_gate",
        "_host",
        "_incoming",
        "_node",
        "_quarantined",
        "_runs",
        "_terminate",
        "_timers",
        "_unloadable",
    )

    def __init__(
        self,
        *,
        codec: Codec,
        host: str,
        node: NodeOps,
        runs: RunTable,
        gate: StartGate,
        commits: Commits,
        incoming: Incoming,
        eager: EagerStarts,
        timers: DurableTimers,
        terminate: Callable[[Run], None],
        quarantined: set[str],
        unloadable: dict[str, Error],
        counters: RuntimeCounters,
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            codec: checks the start's input.
            host: the host of workflow PIDs.
            node: the node's name, app, clock and names (a start may register one).
            runs: the run table (the id's open run, its closing, a staged child).
            gate: admits starts, a bounded number in flight.
            commits: reads a closed run of the id (for the reuse policies).
            incoming: stores a start the normal way, or signals the open run.
            eager: runs a start's first activation in the starter's task.
            timers: arms the timers stored with a start.
            terminate: terminates the open run that ``terminate_existing`` replaces.
            quarantined: ids whose stored rows are unreadable (never started again).
            unloadable: ids whose stored run this app cannot run (their id stays taken).
            counters: runs started, for the metrics.
        """
        self._codec, self._host, self._node, self._runs = codec, host, node, runs
        self._app_name = node.app.name
        self._gate, self._commits, self._incoming, self._eager = gate, commits, incoming, eager
        self._timers, self._terminate = timers, terminate
        self._quarantined, self._unloadable, self._counters = quarantined, unloadable, counters

    async def spawn(
        self,
        parent: Pid,
        *,
        entry: Entry,
        args: tuple[Any, ...],
        options: dict[str, Any],
        messages: tuple[tuple[str, Any], ...],
        context: dict[str, Any],
    ) -> Pid:
        """Start a run, or (per the id policies) return the running one and signal it.

        ``context`` is the run's whole context (the parent's, with the spawn's on top).
        A checkpoint's schedule point, as the host protocol asks (``process.spawn`` adds
        only the cancel point): the start's commit yields, and a start that commits
        nothing (the running workflow returned, without messages) yields once itself.

        Raises:
            roost.Error: AlreadyExists when the id policies refuse; Invalid for a bad
                option or input that cannot be encoded (nothing is stored).
        """
        opts = check_start_options(options)
        workflow_id = opts.get("id") or opts.get("name")
        explicit = workflow_id is not None
        if workflow_id is None:
            workflow_id = f"{self._app_name}-{random_bytes(8).hex()}"
        if SECURITY_KEY in context:  # signed and bound to the workflow (docs/security.md)
            context = dict(reseal(context, workflow_id, self._node.settings.get("keyring")))
        # Every input check comes first: bad input changes nothing, not even a running
        # workflow that terminate_existing would replace, and waits for no admission.
        check_input(self._codec, entry.id, args, opts, messages)
        gate = self._gate
        await gate.enter()
        try:
            pid = await self._make_room(
                workflow_id, explicit=explicit, opts=opts, messages=messages, sender=parent
            )
            if pid is not None:
                if not messages:  # nothing committed: this call's schedule point (see above)
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return pid
            node = self._node
            pid = Pid.trusted(node.name, self._host, workflow_id)
            name = opts.get("name")
            if name is not None:
                claim_name(node, name, pid)
            at = node.now()
            run, started = new_run(
                entry=entry,
                pid=pid,
                args=args,
                context=context,
                at=at,
                **record_for_start(opts, parent=parent, at=at),
            )
            self._runs.add(run)
            events: list[Any] = [started]
            events += [MessageArrived(topic=t, payload=p, sender=parent) for t, p in messages]
            try:
                if self._eager.ok(run):
                    await self._eager.start(run, events)
                else:
                    await self.commit_start(run, events)
            except BaseException:
                if run.next_index == 1:  # not stored (a stored run stays, whatever failed after)
                    self._runs.remove(run)
                    if name is not None:
                        node.registry.unregister(name)
                raise
            self._counters.run_started(entry.id)
            return run.pid
        finally:
            gate.leave()

    async def commit_start(self, run: Run, events: list[Any]) -> None:
        """Store a new run and its first events; an executor activates it (after any delay)."""
        await self._incoming.commit(run, events, put_record=run.record)
        self._timers.arm(run)

    async def _make_room(
        self,
        workflow_id: str,
        *,
        explicit: bool,
        opts: dict[str, Any],
        messages: tuple[tuple[str, Any], ...],
        sender: Pid,
    ) -> Pid | None:
        """Apply the id policies; the running PID to return (use_existing), or None to start.

        Raises:
            roost.Error: AlreadyExists when the policies refuse; InvalidState for a
                quarantined id.
        """
        cause = self._unloadable.get(workflow_id)
        if cause is not None:
            raise unloadable_error(workflow_id, cause)
        replaced = False
        while True:
            if workflow_id not in self._quarantined:
                await self._settled(workflow_id)
            plan = plan_start(
                self._existing(workflow_id, opts, replaced=replaced),
                workflow_id=workflow_id,
                options=opts,
                explicit=explicit,
                quarantined=workflow_id in self._quarantined,
                replaced=replaced,
            )
            if plan.action == "start":
                return None
            if plan.error is not None:
                raise plan.error
            existing = self._runs[workflow_id]
            if plan.deliver_messages:
                if messages and SECURITY_KEY in existing.context:
                    # The messages reach a secured run as process.send would deliver them.
                    self._authorize_starter(sender, "process.send", existing.pid)
                await self._incoming.signal_many(existing, messages, sender)
                return existing.pid
            # terminate_existing: the same path as terminate (watchers and concurrent
            # starts of this id wait for the close), then plan again.
            if SECURITY_KEY in existing.context:
                self._authorize_starter(sender, "process.terminate", existing.pid)
            self._terminate(existing)
            await existing.wait_closed()
            replaced = True

    def _authorize_starter(self, sender: Pid, action: str, target: Pid) -> None:
        """Raise PermissionDenied unless the starter may take ``action`` on ``target``."""
        if self._node.settings.get("keyring") is None:
            raise denied(
                f"workflow {target.id!r} runs under a security context and this node has no "
                "signing keys to admit a start's messages or termination",
                workflow=target.id,
            )

        def context_of(pid: Pid) -> dict[str, Any] | None:
            run = self._runs.get(pid.id) if pid.host == self._host else None
            return run.context if run is not None else None

        authorize_sender(self._node, sender, context_of, action, target)

    async def _settled(self, workflow_id: str) -> None:
        """Wait until no close of the id commits and no uncommitted step's child takes it."""
        runs = self._runs
        while True:
            while (closing := runs.closing(workflow_id)) is not None:  # a terminate commits
                await closing.wait_closed()
            if not runs.child_staged(workflow_id):
                return
            await runs.wait_unstaged(workflow_id)  # then plan with that child open

    def _existing(
        self, workflow_id: str, opts: dict[str, Any], *, replaced: bool
    ) -> ExistingRun | None:
        run = self._runs.get(workflow_id)
        if run is not None:
            return ExistingRun.running(run.pid)
        if replaced or workflow_id in self._quarantined or not start_reads_closed_run(opts):
            return None  # the plan needs no closed run: no store read
        record = self._commits.stored_record(workflow_id)
        return ExistingRun.closed(record.status) if record is not None else None


def claim_name(node: NodeOps, name: str, pid: Pid) -> None:
    """Register ``name`` for ``pid``, taking it over from a dead holder."""
    holder = node.registry.lookup(name)
    if holder is not None and holder != pid and not node.alive(holder):
        node.registry.unregister(name)
    node.registry.register(name, pid)  # AlreadyExists if a live process has it


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
        rand=random_bytes(16),
        tracing=telemetry.tracing,
        inherit=inherit,
        **fields,
    )
