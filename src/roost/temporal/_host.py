"""The node side: ``TemporalHost``, the ``roost.workflow.WorkflowHost`` over a Temporal client.

The node calls the host on its trio thread; temporalio runs on the host's asyncio thread
(``_bridge``). What the protocol lets wait (``spawn``, ``wait_exit``, a ``Durable``'s
``wait``) awaits the asyncio side without blocking trio. The synchronous inspection calls
(``describe``, ``list_workflows``, ``history``) and ``terminate`` and ``running``, which
must answer before they return, block the node's thread on one RPC (a few milliseconds on
a reachable server; ``Unavailable`` after ``Bridge.blocking``'s timeout).

A node serves two task queues: the app's (every node running the app is a worker for its
workflows and activities) and its own, ``roost-node-<name>``, where workflows deliver
messages to the node's plain processes. A second live node of the same name is refused:
its queue has pollers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import logging
import os
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final

import attrs
import temporalio.activity
import temporalio.api.enums.v1
import temporalio.api.taskqueue.v1
import temporalio.api.workflowservice.v1 as wsv1
import temporalio.client
import temporalio.exceptions
import temporalio.service
import temporalio.worker
import trio

from roost._counters import RuntimeCounters
from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost._security import SECURITY_KEY, reseal
from roost.actors._app import Entry
from roost.actors._contain import must_propagate
from roost.actors._events import Exit, ExitResult
from roost.actors._node_types import noproc_error
from roost.temporal import _client
from roost.temporal._activity import ContextCarrier, activity_function
from roost.temporal._bridge import BLOCKING_TIMEOUT, Bridge
from roost.temporal._counting import RunCounting
from roost.temporal._cron import CronFire, ensure_schedules
from roost.temporal._failures import UNSUPPORTED, application_error, error_of
from roost.temporal._options import CONTEXT_MEMO, OWNER_MEMO, PARENT_MEMO, TRACE_MEMO
from roost.temporal._tracing import RunTracing, start_trace
from roost.temporal._workflow import (
    CANCEL_SIGNAL,
    DELIVER_ACTIVITY,
    EXIT_ACTIVITY,
    PING_ACTIVITY,
    PROBE_WORKFLOW,
    PROCESS_ACTIVITY,
    REPLY_SIGNAL,
    SPAWNED_SIGNAL,
    STOP_ACTIVITY,
    TERMINATE_ACTIVITY,
    UNWATCH_SIGNAL,
    WATCH_UPDATE,
    WORKFLOW_NODE,
    ExitNotice,
    NodeProbe,
    RoostWorkflow,
    apps,
    node_queue,
    replies_host,
    reply_target,
    reply_ticket,
    unpack_watchers,
)
from roost.workflow._host_protocol import (
    FIRES_CRON,
    NodeServices,
    WorkflowHost,
    WorkflowHostFactory,
)

__all__ = ["TemporalHost", "temporal_host"]

log = logging.getLogger("roost.temporal")

# What a wait for a workflow's outcome asks again after, with a backoff from the first to
# the last delay (seconds): the server is down or overloaded, not the workflow gone.
_TRANSIENT: Final = frozenset(
    {
        temporalio.service.RPCStatusCode.UNAVAILABLE,
        temporalio.service.RPCStatusCode.DEADLINE_EXCEEDED,
        temporalio.service.RPCStatusCode.RESOURCE_EXHAUSTED,
        temporalio.service.RPCStatusCode.ABORTED,
        temporalio.service.RPCStatusCode.CANCELLED,
    }
)
_RETRY_FIRST: Final = 0.1
_RETRY_MAX: Final = 2.0
# A poller seen this recently on a node's queue is a live node of that name (seconds):
# a worker's long poll is renewed at least once a minute.
_LIVE_POLLER: Final = 70.0
# A node running a workflow's plain process heartbeats its activity this often (seconds).
_PROCESS_BEAT: Final = 2.0
SWEEP_INTERVAL = 30.0
"""How often a node that watches workflows asks which of them closed without a push (one
list query for all of them, seconds; read at each sweep)."""
_SWEEP_CHUNK: Final = 50  # workflow ids per list query


class _Accepted:
    """The ``Durable`` of a signal: set once the server accepted it (raises its refusal)."""

    __slots__ = ("_bridge", "future")

    def __init__(self, bridge: Bridge, future: concurrent.futures.Future[None]) -> None:
        self._bridge = bridge
        self.future = future

    def is_set(self) -> bool:
        future = self.future
        return future.done() and not future.cancelled() and future.exception() is None

    async def wait(self) -> None:
        await self._bridge.wait(self.future)


class _Health:
    """Whether the node's workers still run; why not, once one has ended on its own.

    Written on the asyncio thread (a worker task's done-callback), read on the trio thread.
    """

    __slots__ = ("failed", "stopping")

    def __init__(self) -> None:
        self.failed: Error | None = None
        self.stopping = False

    def watch(self, task: asyncio.Task[None], queue: str) -> None:
        """Note it if ``task``, the worker of ``queue``, ends before the node stops it."""

        def ended(done: asyncio.Task[None]) -> None:
            if self.stopping:
                return
            if done.cancelled():
                why = "its task was cancelled"
            else:
                error = done.exception()
                why = "it returned" if error is None else f"{type(error).__name__}: {error}"
            log.error(
                "roost.temporal: the worker of task queue %r stopped: %s; this node starts "
                "no more workflows",
                queue,
                why,
            )
            if self.failed is None:
                self.failed = Error(
                    f"the node's Temporal worker of task queue {queue!r} stopped ({why}): "
                    "this node starts no more workflows; close it and open it again",
                    kind=ErrorKind.UNAVAILABLE,
                    details={"task_queue": queue},
                )

        task.add_done_callback(ended)


class _Exits:
    """The EXITs the node's process activities wait for, by the process's PID.

    ``expect`` and ``exited`` run on the trio thread; the future is settled on the asyncio
    loop that waits for it.
    """

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[Pid, tuple[asyncio.AbstractEventLoop, asyncio.Future[Exit]]] = {}

    def expect(
        self, pid: Pid, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Exit]
    ) -> None:
        """``future`` gets the EXIT of ``pid``."""
        self._waiting[pid] = (loop, future)

    def forget(self, pid: Pid) -> None:
        """No EXIT of ``pid`` is waited for any more."""
        self._waiting.pop(pid, None)

    def exited(self, event: Exit) -> bool:
        """Hand ``event`` to its waiter; False when nobody waits for it."""
        found = self._waiting.pop(event.pid, None)
        if found is None:
            return False
        loop, future = found
        loop.call_soon_threadsafe(_settle, future, event)
        return True


def _settle(future: asyncio.Future[Exit], event: Exit) -> None:
    if not future.done():
        future.set_result(event)


@attrs.define
class _Watch:
    """The plain processes of this node watching one workflow, by kind."""

    monitors: set[Pid] = attrs.field(factory=set)
    links: set[Pid] = attrs.field(factory=set)
    # The wait for the workflow's outcome, when its close cannot be pushed (a retry or
    # cron run follows, the watch could not be registered): cancelled with the watch.
    scope: trio.CancelScope | None = None


class _Watches:
    """Which of this node's plain processes get which workflow's EXIT (the trio thread).

    A watch is registered with the workflow (``TemporalHost.monitor``); at its close the
    workflow pushes the EXITs here (``pushed``, the ``@roost.exit`` activity). This node's
    record decides who still gets one: a process that unwatched meanwhile gets none.

    A close that runs no workflow code (a terminate from Temporal's own UI or CLI, a run
    or execution timeout) pushes nothing: while this node watches workflows, a sweep asks
    every ``SWEEP_INTERVAL`` seconds, in one list query for all of them, which have closed.
    """

    def __init__(self, services: NodeServices, nursery: trio.Nursery) -> None:
        self._services = services
        self._nursery = nursery
        self._by_pid: dict[Pid, _Watch] = {}
        self._sweeping = False
        # The workflow's outcome once it has closed for good, the wait for one run's close
        # to be recorded, and which of some workflows have closed for good (set by the host).
        self.outcome: Callable[[Pid], Awaitable[ExitResult]] | None = None
        self.recorded: Callable[[Pid, str], Awaitable[None]] | None = None
        self.closed_among: Callable[[list[Pid]], Awaitable[list[Pid]]] | None = None

    def add(self, pid: Pid, watcher: Pid, kind: str) -> bool:
        """``watcher`` watches ``pid`` (``kind``: monitor or link); False if it already did."""
        watch = self._by_pid.setdefault(pid, _Watch())
        held = watch.monitors if kind == "monitor" else watch.links
        if watcher in held:
            return False
        held.add(watcher)
        if not self._sweeping:
            self._sweeping = True
            self._nursery.start_soon(self._sweep)
        return True

    async def _sweep(self) -> None:
        """Find the watched workflows that closed without a push, while any is watched."""
        try:
            while self._by_pid:
                await trio.sleep(SWEEP_INTERVAL)
                assert self.closed_among is not None
                try:
                    closed = await self.closed_among(list(self._by_pid))
                except Error as exc:
                    log.warning("roost.temporal: the sweep of watched workflows failed: %s", exc)
                    continue
                except Exception:  # logged, never raised: it runs in the host's nursery
                    log.exception("roost.temporal: the sweep of watched workflows failed")
                    continue
                for pid in closed:
                    self.wait_for(pid)  # closed for good: the outcome comes at once
        finally:
            self._sweeping = False

    def drop(self, pid: Pid, watcher: Pid) -> bool:
        """``watcher`` no longer watches ``pid``; False if it did not."""
        watch = self._by_pid.get(pid)
        if watch is None or (watcher not in watch.monitors and watcher not in watch.links):
            return False
        watch.monitors.discard(watcher)
        watch.links.discard(watcher)
        if not watch.monitors and not watch.links:
            self._forget(pid, watch)
        return True

    def count(self) -> int:
        """The watches this node holds (monitors and links)."""
        return sum(len(w.monitors) + len(w.links) for w in self._by_pid.values())

    def _forget(self, pid: Pid, watch: _Watch) -> None:
        if self._by_pid.get(pid) is watch:
            del self._by_pid[pid]
        if watch.scope is not None:
            watch.scope.cancel()

    def pushed(
        self,
        pid: Pid,
        run_id: str,
        watchers: Mapping[Pid, set[str]],
        value: Any,
        error: Error | None,
        *,
        final: bool,
    ) -> None:
        """The run ``run_id`` of ``pid`` is closing: EXITs to ``watchers`` once it has.

        The run pushes before its close is recorded (a run runs no code after it), so
        the EXITs wait for that: a watcher that gets one finds the workflow closed, as on
        the embedded host. Not ``final``: a retry or cron run follows, so this node waits
        for the workflow's outcome instead.
        """
        if pid not in self._by_pid:
            return
        if not final:
            self.wait_for(pid)
            return
        self._nursery.start_soon(
            self._deliver_recorded, pid, run_id, dict(watchers), ExitResult(value, error)
        )

    async def _deliver_recorded(
        self, pid: Pid, run_id: str, watchers: dict[Pid, set[str]], outcome: ExitResult
    ) -> None:
        assert self.recorded is not None
        try:
            await self.recorded(pid, run_id)
        except Exception as exc:  # noqa: BLE001 - the close is pushed: given even if the wait failed
            log.warning("roost.temporal: the close of %s was not seen recorded: %s", pid, exc)
        watch = self._by_pid.get(pid)
        if watch is None:
            return
        mine = _Watch(
            {w for w in watchers if w in watch.monitors}, {w for w in watchers if w in watch.links}
        )
        watch.monitors -= mine.monitors
        watch.links -= mine.links
        if not watch.monitors and not watch.links:
            self._forget(pid, watch)
        self._deliver(pid, mine, outcome)

    def closed(self, pid: Pid, outcome: ExitResult) -> None:
        """The workflow ``pid`` has closed for good: EXITs to all that watch it here."""
        watch = self._by_pid.get(pid)
        if watch is not None:
            self._forget(pid, watch)
            self._deliver(pid, watch, outcome)

    def _deliver(self, pid: Pid, watch: _Watch, outcome: ExitResult) -> None:
        at = self._services.now()
        services = self._services
        for watcher in sorted(watch.monitors, key=str):
            exit_event = Exit(pid, outcome.value, outcome.error, at)
            _each(services.post_exit, watcher, exit_event, what=f"the EXIT of {pid}")
        if outcome.error is not None:
            for linked in sorted(watch.links, key=str):
                _each(
                    services.link_down,
                    linked,
                    pid,
                    outcome.error,
                    at,
                    what=f"the LINK_DOWN of {pid}",
                )

    def wait_for(self, pid: Pid) -> None:
        """Wait for ``pid``'s outcome (once per watch), then give it to its watchers here."""
        watch = self._by_pid.get(pid)
        if watch is None or watch.scope is not None:
            return
        watch.scope = trio.CancelScope()
        self._nursery.start_soon(self._wait_and_announce, pid, watch.scope)

    async def _wait_and_announce(self, pid: Pid, scope: trio.CancelScope) -> None:
        """The wait of ``wait_for``, in the host's nursery: what fails is logged, not raised."""
        try:
            with scope:
                outcome = await self._wait(pid)
                self.closed(pid, outcome)
        except BaseException as exc:
            if must_propagate(exc):
                raise
            log.exception("roost.temporal: the exit of workflow %s was not announced", pid)

    async def _wait(self, pid: Pid) -> ExitResult:
        assert self.outcome is not None
        while True:
            try:
                return await self.outcome(pid)
            except Error as exc:  # a refusal other than an outage: asked again, slowly
                log.warning(
                    "roost.temporal: cannot wait for workflow %s (asking again in %gs): %s",
                    pid.id,
                    _RETRY_MAX,
                    exc,
                )
                await trio.sleep(_RETRY_MAX)


class TemporalHost:
    """The node's workflow host on a Temporal cluster (see the module docstring)."""

    def __init__(
        self,
        services: NodeServices,
        client: temporalio.client.Client,
        bridge: Bridge,
        nursery: trio.Nursery,
        *,
        health: _Health,
        exits: _Exits,
        watches: _Watches,
        counters: RuntimeCounters,
        workers: tuple[temporalio.worker.Worker, ...],
        ui: str | None = None,
    ) -> None:
        self._services = services
        self._health = health
        self._exits = exits
        self._workers = workers  # the node's; stopped by the factory
        self._client = client
        self._bridge = bridge
        self._nursery = nursery
        self._app = services.app
        self._host = f"{self._app.name}:workflows"
        self._replies = replies_host(self._app.name)
        self._pid_hosts = frozenset({self._host, self._replies})
        self._watches = watches
        self._counters = counters
        self._ui = ui
        watches.outcome = self._final_outcome
        watches.recorded = self._recorded
        watches.closed_among = self._closed_among
        # The last signal to each workflow id, so that signals are sent in the order given.
        self._tails: dict[str, Any] = {}

    @property
    def host(self) -> str:
        """``"<app>:workflows"``."""
        return self._host

    @property
    def pid_hosts(self) -> frozenset[str]:
        """The workflow host, and that of the reply addresses of workflows' calls."""
        return self._pid_hosts

    @property
    def counters(self) -> RuntimeCounters:
        """What this node's workers ran: workflows started and closed, activity attempts.

        The counters the embedded host keeps, under the same metric names (``/metrics``);
        a run counts on the node whose worker ran the task that started or closed it.
        """
        return self._counters

    def ui_url(self, workflow_id: str, run_id: str) -> str | None:
        """The page of that run in the cluster's Temporal UI; None without ``ui=``."""
        if self._ui is None:
            return None
        namespace = urllib.parse.quote(self._client.namespace, safe="")
        workflow = urllib.parse.quote(workflow_id, safe="")
        run = urllib.parse.quote(run_id, safe="")
        return f"{self._ui}/namespaces/{namespace}/workflows/{workflow}/{run}/history"

    @property
    def client(self) -> temporalio.client.Client:
        """The temporalio client (its calls run on the host's asyncio thread)."""
        return self._client

    def _pid(self, workflow_id: str) -> Pid:
        return Pid.trusted(WORKFLOW_NODE, self._host, workflow_id)

    # -- start ---------------------------------------------------------------------------

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
        """Start a Temporal workflow of ``entry`` (roost's id policies chosen here).

        Raises:
            roost.Error: Unavailable once a worker of this node has stopped on its own.
        """
        if self._health.failed is not None:
            raise self._health.failed.clone()
        default_id = f"{self._app.name}-{os.urandom(8).hex()}"
        if SECURITY_KEY in context:  # signed and bound to the workflow (docs/security.md)
            workflow_id = options.get("id") or options.get("name") or default_id
            if isinstance(workflow_id, str):  # another type: the start refuses the option
                context = dict(reseal(context, workflow_id, self._services.keyring))
        _check(context, "context")
        memo: dict[str, Any] = {PARENT_MEMO: parent, OWNER_MEMO: self._services.name}
        if context:
            memo[CONTEXT_MEMO] = context
        traced = start_trace()
        if traced is not None:
            memo[TRACE_MEMO] = traced
        return await self._bridge.run(
            _client.start(
                self._client,
                entry.id,
                args,
                options=options,
                default_queue=self._app.name,
                memo=memo,
                messages=messages,
                sender=parent,
                host=self._host,
                default_id=default_id,
            )
        )

    # -- messages, cancel, terminate -------------------------------------------------------

    def signal(
        self,
        sender: Pid | None,
        pid: Pid,
        topic: str,
        payload: Any,
        ticket: Mapping[str, Any] | None = None,
    ) -> _Accepted:
        """Signal the workflow: the RPC's success is the durable receipt.

        ``ticket`` travels with the message: a secured workflow checks it when the signal
        arrives and drops a message whose ticket does not verify (docs/temporal.md).
        """
        _check(payload, f"payload of message {topic!r}")
        if pid.host == self._replies:  # a reply to a workflow's call
            workflow_id, run_id, seq = reply_target(pid)
            reply: list[Any] = [run_id, seq, topic, payload, sender]
            ring = self._services.keyring
            if ring is not None and sender is not None:  # the caller's worker checks it
                reply.append(reply_ticket(ring, workflow_id, run_id, seq, topic, sender))
            return self._signal(workflow_id, REPLY_SIGNAL, reply)
        args = [payload, sender] if ticket is None else [payload, sender, dict(ticket)]
        return self._signal(pid.id, topic, args)

    def cancel(self, pid: Pid, reason: str | None) -> _Accepted:
        """A ``Cancel`` event with ``reason``, as roost's own signal (Temporal's has none).

        Blocks the node's thread until the server accepted the signal, so that a cancel of
        a workflow that is not running raises at the call, as the protocol says.

        Raises:
            roost.Error: NotFound when the workflow is not running; Unavailable when the
                server gives no answer within ``BLOCKING_TIMEOUT`` seconds.
        """
        accepted = self._signal(pid.id, CANCEL_SIGNAL, [reason])
        try:
            accepted.future.result(BLOCKING_TIMEOUT)
        except concurrent.futures.TimeoutError:
            accepted.future.cancel()
            raise Error(
                f"the Temporal server gave no answer within {BLOCKING_TIMEOUT:g}s to the cancel "
                f"of workflow {pid.id!r}: check that it is running and reachable",
                kind=ErrorKind.UNAVAILABLE,
                details={"workflow_id": pid.id},
            ) from None
        return accepted

    def _signal(self, workflow_id: str, name: str, args: list[Any]) -> _Accepted:
        future = self._bridge.submit(self._send_signal(workflow_id, name, args))
        future.add_done_callback(_log_refusal(workflow_id, name))
        return _Accepted(self._bridge, future)

    async def _send_signal(self, workflow_id: str, name: str, args: list[Any]) -> None:
        handle = self._client.get_workflow_handle(workflow_id)
        await self._in_order(workflow_id, handle.signal(name, args=args))

    async def _send_watch(self, workflow_id: str, args: list[Any]) -> None:
        """The ``@roost.watch`` update, in order with the signals to that workflow.

        Raises:
            roost.Error: NotFound when the workflow has closed, is closing or never existed.
        """
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            await self._in_order(workflow_id, handle.execute_update(WATCH_UPDATE, args=args))
        except temporalio.client.WorkflowUpdateFailedError as exc:
            raise error_of(exc.cause) from None
        except temporalio.client.WorkflowUpdateRPCTimeoutOrCancelledError:
            raise Error(
                f"no worker took the watch of workflow {workflow_id!r} in time",
                kind=ErrorKind.UNAVAILABLE,
                details={"workflow_id": workflow_id},
            ) from None

    async def _in_order(self, workflow_id: str, send: Coroutine[Any, Any, Any]) -> None:
        """Run ``send`` once the one asked before it to the same workflow is done.

        Runs on the asyncio thread in the order the node asked.

        Raises:
            roost.Error: the RPC failed (as ``_client.rpc_error`` names it).
        """
        before = self._tails.get(workflow_id)
        me = asyncio.current_task()
        self._tails[workflow_id] = me
        try:
            if before is not None:
                try:
                    await asyncio.wait([before])
                except BaseException:
                    send.close()  # never started: no "never awaited" warning
                    raise
            try:
                await send
            except temporalio.service.RPCError as exc:
                raise _client.rpc_error(exc, workflow_id) from None
        finally:
            if self._tails.get(workflow_id) is me:
                del self._tails[workflow_id]

    async def call(
        self,
        caller: Pid,
        pid: Pid,
        topic: str,
        payload: Any,
        ticket: Mapping[str, Any] | None = None,
    ) -> tuple[str, Any]:
        """``process.call`` as a Temporal update from ``caller``: the workflow's final reply.

        The update is sent after the signals asked before it to the same workflow (and
        before those asked after), so a call sees what its caller sent first.

        Raises:
            roost.Error: NotFound when the workflow is not running or closed before it
                replied; Invalid for a payload roost's codec cannot encode.
        """
        _check(payload, f"payload of call {topic!r}")
        args = [payload, caller] if ticket is None else [payload, caller, dict(ticket)]
        answer: list[Any] = await self._bridge.run(self._update(pid.id, topic, args))
        return answer[0], answer[1]

    async def _update(self, workflow_id: str, topic: str, args: list[Any]) -> Any:
        handle = self._client.get_workflow_handle(workflow_id)
        before = self._tails.get(workflow_id)

        async def accept() -> temporalio.client.WorkflowUpdateHandle[Any]:
            if before is not None:
                await asyncio.wait([before])
            return await handle.start_update(
                topic,
                args=args,
                wait_for_stage=temporalio.client.WorkflowUpdateStage.ACCEPTED,
            )

        accepted = asyncio.ensure_future(accept())
        self._tails[workflow_id] = accepted

        def untail(done: asyncio.Future[Any]) -> None:
            if self._tails.get(workflow_id) is done:
                del self._tails[workflow_id]

        accepted.add_done_callback(untail)
        try:
            update = await accepted
            return await update.result()
        except temporalio.client.WorkflowUpdateFailedError as exc:
            raise error_of(exc.cause) from None
        except temporalio.service.RPCError as exc:
            raise _client.rpc_error(exc, workflow_id) from None

    def terminate(self, pid: Pid) -> None:
        """Terminate the workflow (blocks the calling thread on the one RPC).

        Its watchers are told afterwards, off the calling thread (``notify_terminated``).
        """
        self._blocking(_client.terminate_run(self._client, pid.id))
        self._bridge.submit(_client.notify_terminated(self._client, pid.id))

    def running(self, pid: Pid) -> bool:
        """Whether the workflow is open (blocks on a describe)."""
        try:
            status: str = self.describe(pid.id)["status"]
        except Error as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return False
            raise
        return status == "running"

    # -- exits -----------------------------------------------------------------------------

    async def _outcome(self, pid: Pid, *, give_up_after: float | None) -> ExitResult:
        """The workflow's result or error once it closes for good (following its runs).

        A server that cannot be reached (or answers with a transient error) is asked again,
        with a bounded backoff: an outage is not the workflow's exit. Only ``NOT_FOUND``
        means there is no such workflow (noproc).

        Raises:
            roost.Error: Unavailable when the server stayed unreachable for
                ``give_up_after`` seconds (never, for None); the mapped error of any other
                refusal.
        """
        handle = self._client.get_workflow_handle(pid.id)
        loop = asyncio.get_running_loop()
        began = loop.time()
        delay = _RETRY_FIRST
        while True:
            try:
                value = await handle.result()
            except temporalio.client.WorkflowFailureError as exc:
                return ExitResult(None, error_of(exc.cause))
            except temporalio.service.RPCError as exc:
                if exc.status == temporalio.service.RPCStatusCode.NOT_FOUND:
                    return ExitResult(None, noproc_error(pid))
                if exc.status not in _TRANSIENT:
                    raise _client.rpc_error(exc, pid.id) from None
                if give_up_after is not None and loop.time() - began >= give_up_after:
                    raise Error(
                        f"the Temporal server gave no outcome of workflow {pid.id!r} for "
                        f"{give_up_after:g}s ({exc.message}): check that it is running and "
                        "reachable, and wait again",
                        kind=ErrorKind.UNAVAILABLE,
                        retryable=True,
                        details={"workflow_id": pid.id},
                    ) from None
                log.info(
                    "roost.temporal: waiting for workflow %s: %s; asking again in %gs",
                    pid.id,
                    exc.message,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
            except Exception as exc:  # noqa: BLE001 - a result that cannot be read is its error
                return ExitResult(None, error_of(exc))
            else:
                return ExitResult(value, None)

    async def wait_exit(self, pid: Pid) -> ExitResult:
        """Wait until the workflow closes for good; its result or error.

        Raises:
            roost.Error: Unavailable when the server stays unreachable for
                ``BLOCKING_TIMEOUT`` seconds; the mapped error of another refusal.
        """
        return await self._bridge.run(self._outcome(pid, give_up_after=BLOCKING_TIMEOUT))

    def monitor(self, watcher: Pid, pid: Pid) -> None:
        """One EXIT to ``watcher`` when the workflow closes (at once if it has).

        The watch is a ``@roost.watch`` update, recorded in the workflow's history: at its
        close the workflow pushes the EXIT to this node. A workflow that has closed (or
        never existed, or is closing) refuses it, and its outcome is the EXIT.
        """
        self._register(watcher, pid, "monitor")

    def link(self, proc: Pid, pid: Pid) -> None:
        """LINK_DOWN to ``proc`` if the workflow closes with an error (pushed, as a monitor)."""
        self._register(proc, pid, "link")

    def unwatch(self, proc: Pid, pid: Pid) -> None:
        """Drop ``proc``'s monitor and link of the workflow (and tell the workflow)."""
        if self._watches.drop(pid, proc) and pid.host == self._host:
            self._signal(pid.id, UNWATCH_SIGNAL, [proc])

    def _register(self, watcher: Pid, pid: Pid, kind: str) -> None:
        if not self._watches.add(pid, watcher, kind):
            return
        if pid.host != self._host:  # a reply address: never an open workflow
            self._nursery.start_soon(self._announce_closed, pid)
            return
        future = self._bridge.submit(self._send_watch(pid.id, [watcher, kind]))
        self._nursery.start_soon(self._registered, pid, _Accepted(self._bridge, future))

    async def _registered(self, pid: Pid, accepted: _Accepted) -> None:
        """Once the watch signal is answered: nothing more, or the EXIT if it was refused."""
        try:
            await accepted.wait()
        except Error as exc:
            if exc.kind is ErrorKind.NOT_FOUND:  # closed (or never was): its outcome now
                await self._announce_closed(pid)
                return
            why: object = exc
        except BaseException as exc:
            if must_propagate(exc):
                raise
            why = f"{type(exc).__name__}: {exc}"
        else:
            return
        # Not registered (an outage, no worker in time): this node waits for the outcome.
        log.warning(
            "roost.temporal: the watch of workflow %s was not registered (%s); "
            "waiting for its outcome instead",
            pid.id,
            why,
        )
        self._watches.wait_for(pid)

    async def _announce_closed(self, pid: Pid) -> None:
        try:
            outcome = await self._final_outcome(pid, give_up_after=BLOCKING_TIMEOUT)
        except Error:
            self._watches.wait_for(pid)
            return
        self._watches.closed(pid, outcome)

    async def _closed_among(self, pids: list[Pid]) -> list[Pid]:
        """Which of the workflows ``pids`` have closed for good (their latest run closed).

        One visibility query per ``_SWEEP_CHUNK`` ids finds the candidates (any run of the
        id closed, other than by continue-as-new); a describe of each candidate's latest
        run confirms it (a retry or cron run may follow a closed one).

        Raises:
            roost.Error: Unavailable when the server does not answer.
        """
        by_id = {pid.id: pid for pid in pids if pid.host == self._host}
        try:
            return await self._bridge.run(_closed_workflows(self._client, by_id))
        except temporalio.service.RPCError as exc:
            raise Error(
                f"the sweep of watched workflows failed: {exc.message}",
                kind=ErrorKind.UNAVAILABLE,
            ) from None

    async def _recorded(self, pid: Pid, run_id: str) -> None:
        """Return once the close of run ``run_id`` of ``pid`` is in its history.

        Raises:
            roost.Error: Unavailable when the server gives no answer in ``BLOCKING_TIMEOUT``.
        """

        async def closed() -> None:
            handle = self._client.get_workflow_handle(pid.id, run_id=run_id)
            with contextlib.suppress(temporalio.client.WorkflowFailureError):
                await handle.result(follow_runs=False)

        try:
            await self._bridge.run(asyncio.wait_for(closed(), BLOCKING_TIMEOUT))
        except (TimeoutError, temporalio.service.RPCError) as exc:
            raise Error(
                f"the close of workflow {pid.id!r} was not seen recorded: {exc}",
                kind=ErrorKind.UNAVAILABLE,
            ) from None

    async def _final_outcome(self, pid: Pid, give_up_after: float | None = None) -> ExitResult:
        if pid.host != self._host:
            return ExitResult(None, noproc_error(pid))
        return await self._bridge.run(self._outcome(pid, give_up_after=give_up_after))

    def process_exited(self, watcher: Pid, event: Exit) -> None:
        """The EXIT of a process a workflow spawned here: its activity's result."""
        if not self._exits.exited(event):
            log.debug("roost.temporal: EXIT of %s for %s: nobody waits for it", event.pid, watcher)

    # -- inspection ------------------------------------------------------------------------

    def _blocking(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self._bridge.blocking(coro)

    def describe(self, workflow_id: str) -> dict[str, Any]:
        """The latest run of ``workflow_id`` (blocks on the RPC)."""
        return self._blocking(_client.describe(self._client, workflow_id))  # type: ignore[no-any-return]

    def list_workflows(self, query: str | None) -> list[dict[str, Any]]:
        """``describe`` of the workflows Temporal's visibility ``query`` matches."""
        return self._blocking(_client.list_workflows(self._client, query))  # type: ignore[no-any-return]

    def history(self, workflow_id: str) -> list[Any]:
        """Refused, naming the commands that export and show the run's Temporal history.

        A Temporal-hosted run's history is Temporal's events, not roost's events and
        commands: ``roost history export --temporal`` writes it to a file ``roost replay``
        checks against new code.
        """
        target = self._client.service_client.config.target_host
        namespace = self._client.namespace
        raise Error(
            f"node.history({workflow_id!r}) {UNSUPPORTED}: a Temporal-hosted run's history is "
            f"Temporal's events; export it with `roost history export {workflow_id} FILE "
            f"--temporal {target} --namespace {namespace}` (roost replay checks the file "
            f"against new code) or show it with `roost workflow show {workflow_id} "
            f"--temporal {target} --namespace {namespace}`",
            kind=ErrorKind.INVALID_STATE,
            retryable=False,
            details={"workflow_id": workflow_id},
        )


async def _closed_workflows(
    client: temporalio.client.Client, by_id: Mapping[str, Pid]
) -> list[Pid]:
    """The workflows of ``by_id`` whose latest run has closed (see ``_closed_among``)."""
    ids = sorted(by_id)
    quotable = [i for i in ids if "'" not in i and "\\" not in i]
    candidates = set(ids) - set(quotable)  # not expressible in a query: each described
    for start in range(0, len(quotable), _SWEEP_CHUNK):
        listed = ", ".join(f"'{i}'" for i in quotable[start : start + _SWEEP_CHUNK])
        query = (
            f"WorkflowId IN ({listed}) AND ExecutionStatus != 'Running' "
            "AND ExecutionStatus != 'ContinuedAsNew'"
        )
        async for execution in client.list_workflows(query):
            candidates.add(execution.id)
    closed = []
    for workflow_id in sorted(candidates):
        try:
            latest = await client.get_workflow_handle(workflow_id).describe()
        except temporalio.service.RPCError as exc:
            if exc.status != temporalio.service.RPCStatusCode.NOT_FOUND:
                raise
            closed.append(by_id[workflow_id])  # gone: its watchers get "noproc"
            continue
        if latest.status != temporalio.client.WorkflowExecutionStatus.RUNNING:
            closed.append(by_id[workflow_id])
    return closed


def _each(fn: Callable[..., None], to: Pid, *args: Any, what: str) -> None:
    """``fn(to, *args)``; an error is logged, so that one watcher's failure spares the rest."""
    try:
        fn(to, *args)
    except Exception:
        log.exception("roost.temporal: %s to %s failed", what, to)


_check = _client.check_value


def _log_refusal(workflow_id: str, name: str) -> Callable[[concurrent.futures.Future[None]], None]:
    def logged(future: concurrent.futures.Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            log.warning(
                "roost.temporal: signal %r to %r refused: %s", name, workflow_id, future.exception()
            )

    return logged


# -- the factory -------------------------------------------------------------------------


async def _pollers(client: temporalio.client.Client, name: str) -> list[Any]:
    """The pollers Temporal lists on the queue of node ``name`` (live or stopped lately)."""
    request = wsv1.DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=temporalio.api.taskqueue.v1.TaskQueue(name=node_queue(name)),
        task_queue_type=temporalio.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    )
    response = await client.workflow_service.describe_task_queue(request)
    return list(response.pollers)


async def _name_taken(client: temporalio.client.Client, name: str, queue: str) -> bool:
    """Whether a live node already serves the queue of node ``name``.

    A queue nobody polled lately is free. Temporal lists a worker's pollers for minutes
    after it stopped, so a queue with recent pollers is probed: a ping on it that a live
    node takes in time means the name is taken.
    """
    now = dt.datetime.now(dt.UTC)
    recent = any(
        (now - p.last_access_time.ToDatetime().replace(tzinfo=dt.UTC)).total_seconds()
        < _LIVE_POLLER
        for p in await _pollers(client, name)
    )
    if not recent:
        return False
    answered: bool = await client.execute_workflow(
        PROBE_WORKFLOW,
        name,
        id=f"{PROBE_WORKFLOW}-{name}-{os.urandom(6).hex()}",
        task_queue=queue,
    )
    return answered


async def _claimed(client: temporalio.client.Client, name: str, identity: str) -> None:
    """Wait until Temporal lists this node's poller on its queue: the name is its own."""
    for _ in range(200):
        if any(p.identity == identity for p in await _pollers(client, name)):
            return
        await asyncio.sleep(0.01)
    log.warning("roost.temporal: the poller of node %r is not listed yet", name)


def temporal_host(
    target: str,
    *,
    namespace: str = "default",
    max_cached_workflows: int = 1000,
    ui: str | None = None,
) -> WorkflowHostFactory:
    """A ``workflow_host=`` factory: the node's workflows on the Temporal server ``target``.

    ``open_node(app, temporal="HOST:PORT", temporal_namespace=NS)`` is the same as
    ``open_node(app, workflow_host=roost.temporal.temporal_host("HOST:PORT", namespace=NS))``.

    Args:
        target: the server's ``host:port``.
        namespace: the Temporal namespace.
        max_cached_workflows: runs the node's worker keeps in memory; 0 replays every
            workflow task from the history.
        ui: the base address of the cluster's Temporal UI (``"http://127.0.0.1:8233"``):
            the admin console links each hosted run to its page there. None: no links.

    Raises:
        roost.Error: kind Invalid for a bad argument.
    """
    if not isinstance(target, str) or ":" not in target:
        raise invalid(f"temporal must be 'host:port' of a Temporal server, got {target!r}")
    if not isinstance(namespace, str) or not namespace:
        raise invalid(f"temporal_namespace must be a non-empty string, got {namespace!r}")
    if isinstance(max_cached_workflows, bool) or not isinstance(max_cached_workflows, int):
        raise invalid(f"max_cached_workflows must be an int >= 0, got {max_cached_workflows!r}")
    ui_base = _ui_base(ui)

    @contextlib.asynccontextmanager
    async def factory(services: NodeServices) -> AsyncIterator[WorkflowHost]:
        bridge = Bridge()
        threads = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="roost.activity")
        health = _Health()
        exits = _Exits()
        refused: Error | None = None  # raised once the nursery is left: not in a group
        async with trio.open_nursery() as nursery:
            watches = _Watches(services, nursery)
            counters = RuntimeCounters()
            await bridge.start(nursery)
            apps.add(services.app, services.keyring)
            try:
                try:
                    opened = await bridge.run(
                        _open(
                            services,
                            target,
                            namespace,
                            max_cached=max_cached_workflows,
                            bridge=bridge,
                            threads=threads,
                            health=health,
                            exits=exits,
                            watches=watches,
                            counters=counters,
                        )
                    )
                except Error as exc:
                    refused = exc
                else:
                    try:
                        yield TemporalHost(
                            services,
                            opened.client,
                            bridge,
                            nursery,
                            health=health,
                            exits=exits,
                            watches=watches,
                            counters=counters,
                            workers=opened.workers,
                            ui=ui_base,
                        )
                    finally:
                        health.stopping = True
                        with trio.CancelScope(shield=True):
                            await bridge.run(_shutdown(opened))
            finally:
                health.stopping = True
                apps.remove(services.app)
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await bridge.stop()
                threads.shutdown(wait=False, cancel_futures=True)
        if refused is not None:
            raise refused

    setattr(factory, FIRES_CRON, True)  # the node's own cron service stays idle
    return factory


def _ui_base(ui: str | None) -> str | None:
    """``ui`` without its trailing slash, checked to be an http(s) address."""
    if ui is None:
        return None
    parsed = urllib.parse.urlsplit(ui) if isinstance(ui, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise invalid(
            f"temporal_ui must be the http(s) address of the Temporal UI, such as "
            f"'http://127.0.0.1:8233', got {ui!r}"
        )
    return ui.rstrip("/")


@attrs.frozen
class _Opened:
    """A connected client and the node's running workers (with their tasks)."""

    client: temporalio.client.Client
    workers: tuple[temporalio.worker.Worker, ...]
    tasks: tuple[asyncio.Task[None], ...]


async def _open(
    services: NodeServices,
    target: str,
    namespace: str,
    *,
    max_cached: int,
    bridge: Bridge,
    threads: concurrent.futures.Executor,
    health: _Health,
    exits: _Exits,
    watches: _Watches,
    counters: RuntimeCounters,
) -> _Opened:
    """Connect, refuse a taken node name, and start the node's two workers (on asyncio).

    Raises:
        roost.Error: Unavailable when the server cannot be reached or refuses; NotFound
            when it has no such namespace; InvalidState when the node's name is taken.
    """
    try:
        return await _open_workers(
            services,
            target,
            namespace,
            max_cached=max_cached,
            bridge=bridge,
            threads=threads,
            health=health,
            exits=exits,
            watches=watches,
            counters=counters,
        )
    except temporalio.service.RPCError as exc:
        raise Error(
            f"the Temporal server at {target!r} (namespace {namespace!r}) refused the node's "
            f"start: {exc.message}; check that it is running and reachable, and that this "
            "client may use the namespace",
            kind=ErrorKind.UNAVAILABLE,
            details={"namespace": namespace},
        ) from None


async def _open_workers(
    services: NodeServices,
    target: str,
    namespace: str,
    *,
    max_cached: int,
    bridge: Bridge,
    threads: concurrent.futures.Executor,
    health: _Health,
    exits: _Exits,
    watches: _Watches,
    counters: RuntimeCounters,
) -> _Opened:
    app = services.app
    # The namespace is checked here: a worker would only find it missing in its own task.
    client = await _client.connect(target, namespace)
    app_worker = temporalio.worker.Worker(
        client,
        task_queue=app.name,
        workflows=[RoostWorkflow, NodeProbe, CronFire, ExitNotice],
        activities=[
            activity_function(services, bridge, threads, counters),
            _terminator(client),
        ],
        interceptors=[ContextCarrier(), RunCounting(counters), RunTracing()],
        max_cached_workflows=max_cached,
    )
    loop = asyncio.get_running_loop()
    running = [loop.create_task(app_worker.run())]
    health.watch(running[0], app.name)
    if await _name_taken(client, services.name, app.name):
        health.stopping = True
        await _shutdown(_Opened(client, (app_worker,), tuple(running)))
        raise Error(
            f"a live node named {services.name!r} already serves this Temporal cluster "
            f"(namespace {namespace!r}): node names must be unique in a cluster; open this "
            "node with another name=",
            kind=ErrorKind.INVALID_STATE,
            details={"name": services.name},
        )
    identity = f"roost-node {services.name} {os.getpid()}-{os.urandom(4).hex()}"
    node_worker = temporalio.worker.Worker(
        client,
        task_queue=node_queue(services.name),
        activities=[*_node_activities(services, bridge, exits, watches, client)],
        identity=identity,
    )
    running.append(loop.create_task(node_worker.run()))
    health.watch(running[-1], node_queue(services.name))
    await _claimed(client, services.name, identity)
    opened = _Opened(client, (node_worker, app_worker), tuple(running))
    try:
        await ensure_schedules(client, app)  # app.cron: once per cluster
    except Error:
        health.stopping = True
        await _shutdown(opened)
        raise
    return _Opened(client, (node_worker, app_worker), tuple(running))


async def _shutdown(opened: _Opened) -> None:
    """Stop the workers (running activities are cancelled) and wait for their tasks."""
    for worker in opened.workers:
        with contextlib.suppress(Exception):
            await worker.shutdown()
    await asyncio.gather(*opened.tasks, return_exceptions=True)


def _node_activities(
    services: NodeServices,
    bridge: Bridge,
    exits: _Exits,
    watches: _Watches,
    client: temporalio.client.Client,
) -> list[Callable[..., Any]]:
    """The node queue's activities: a workflow's messages, stops and processes here; a ping."""

    async def deliver_here(dest: Pid, messages: list[list[Any]]) -> None:
        # Every message is offered, in order; the first refusal is the activity's error.
        refused: Error | None = None
        for topic, payload, sender in messages:
            try:
                services.send(sender, dest, topic, payload)
            except Error as exc:
                refused = refused or exc
        if refused is not None:
            raise refused

    @temporalio.activity.defn(name=DELIVER_ACTIVITY)
    async def deliver(dest: Pid, messages: list[list[Any]]) -> None:
        try:
            await bridge.to_trio(deliver_here, dest, messages)
        except Error as exc:
            raise application_error(exc) from None

    async def stop_here(dest: Pid, reason: str | None, hard: bool) -> None:
        services.stop(dest, reason, hard=hard)

    @temporalio.activity.defn(name=STOP_ACTIVITY)
    async def stop(dest: Pid, reason: str | None, hard: bool) -> None:
        try:
            await bridge.to_trio(stop_here, dest, reason, hard)
        except Error as exc:
            raise application_error(exc) from None

    @temporalio.activity.defn(name=PROCESS_ACTIVITY)
    async def run_process(
        entry: str,
        args: list[Any],
        pid: Pid,
        watcher: Pid,
        context: dict[str, Any],
    ) -> list[Any]:
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[Exit] = loop.create_future()

        async def spawn_here() -> None:
            exits.expect(pid, loop, exited)  # first: a process may end at once
            try:
                services.spawn(entry, tuple(args), pid=pid, watcher=watcher, context=context)
            except BaseException:
                exits.forget(pid)
                raise

        try:
            await bridge.to_trio(spawn_here)
        except Error as exc:
            raise application_error(exc) from None
        # Started: the workflow's sends to it may go now (they wait for this signal).
        try:
            await client.get_workflow_handle(watcher.id).signal(SPAWNED_SIGNAL, pid)
        except temporalio.service.RPCError as exc:  # the workflow is gone; the process lives
            log.warning("roost.temporal: %s started, but %s was not told: %s", pid, watcher, exc)
        while not exited.done():  # alive: the heartbeat tells the workflow this node is too
            await asyncio.wait([exited], timeout=_PROCESS_BEAT)
            temporalio.activity.heartbeat()
        event = exited.result()
        return [event.value, event.error]

    @temporalio.activity.defn(name=PING_ACTIVITY)
    async def ping() -> str:
        return services.name

    return [deliver, stop, run_process, _exit_activity(bridge, watches), ping]


def _exit_activity(bridge: Bridge, watches: _Watches) -> Callable[..., Any]:
    """The node queue's activity by which a closing workflow pushes its EXITs here."""

    @temporalio.activity.defn(name=EXIT_ACTIVITY)
    async def exit_pushed(  # noqa: PLR0917 - the activity's arguments
        pid: Pid,
        run_id: str,
        watchers: list[list[Any]],
        value: Any,
        error: Error | None,
        final: bool,
    ) -> None:
        async def push() -> None:  # on the trio thread, where the watches are kept
            watches.pushed(pid, run_id, unpack_watchers(watchers), value, error, final=final)

        try:
            await bridge.to_trio(push)
        except Error as exc:
            raise application_error(exc) from None

    return exit_pushed


def _terminator(client: temporalio.client.Client) -> Callable[..., Any]:
    """The app queue's activity that terminates a workflow for workflow code."""

    @temporalio.activity.defn(name=TERMINATE_ACTIVITY)
    async def terminate(workflow_id: str) -> None:
        try:
            await _client.terminate(client, workflow_id)
        except Error as exc:
            raise application_error(exc) from None

    return terminate
