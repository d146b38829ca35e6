"""The node: process table, spawn, exit propagation (monitors, links), kill and cancel."""

from __future__ import annotations

import datetime as dt
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from roost import _telemetry as telemetry
from roost._duration import deadline_after
from roost._errors import Error, ErrorKind, invalid, not_found, shown
from roost._pid import LOCAL_NODE, Pid
from roost.actors._app import App, Entry, EntryKind, check_arguments
from roost.actors._contain import must_propagate
from roost.actors._current import set_current
from roost.actors._events import Cancel, Exit, LinkDown
from roost.actors._node_types import (
    ExitResult,
    SpawnRequest,
    is_cancelled,
    is_mock_clock,
    noproc_error,
    terminated_error,
)
from roost.actors._process import Process
from roost.actors._registry import Registry, check_name
from roost.actors._stopping import shut_down, until_running
from roost.actors._timers import Timers
from roost.actors._trio_backend import TRIO_BACKEND
from roost.actors._upgrade import Upgrade
from roost.mailbox._channel import Channel, select
from roost.mailbox._mailbox import EVENTS
from roost.storage import Store

if TYPE_CHECKING:
    from roost.workflow._host_protocol import WorkflowHost

__all__ = [
    "ExitResult",
    "Node",
    "SpawnRequest",
    "noproc_error",
    "terminated_error",
]

log = logging.getLogger("roost.process")
# Seconds a node waits, at shutdown, for processes it has terminated to end.
KILLED_GRACE = 5.0
assert TRIO_BACKEND is not None  # importing it installs the default channel backend
_UTC = dt.UTC


_SPAWNABLE = frozenset({EntryKind.PROCESS, EntryKind.SUPERVISOR})


def _capacity_error(host_id: str, limit: int) -> Error:
    return Error(
        f"host {host_id!r} is at its limit of {limit} processes; wait for some to "
        "exit, spawn on another host, or raise max_processes",
        kind=ErrorKind.LIMIT_EXCEEDED,
        retryable=True,
        details={"host": host_id, "max_processes": limit},
    )


class Node:
    """One running node: all its processes, names, hosts and timers."""

    def __init__(
        self,
        app: App,
        *,
        name: str,
        incarnation: int,
        nursery: trio.Nursery,
        store: Store | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.incarnation = incarnation
        self.procs: dict[Pid, Process] = {}
        self.registry = Registry()
        self.host_counts: dict[str, int] = dict.fromkeys(app.hosts, 0)
        self.stopping = False
        # Per-node state of higher layers (supervisor registry, ...), keyed by owner.
        self.ext: dict[str, Any] = {}
        self.store = store
        self.settings: dict[str, Any] = dict(settings or {})
        # The host of the app's workflows, set once as the node starts (roost.actors._hosting)
        # from open_node's workflow_host= factory, or the embedded LMDB host.
        self.workflows: WorkflowHost | None = None
        self._nursery = nursery
        self._counter = 0
        self._idle: trio.Event | None = None
        self._prefix = f"{incarnation:x}."
        self._node_part = name
        clock = trio.lowlevel.current_clock()
        self.mock_time = is_mock_clock(clock)
        # Under a MockClock, wall time is anchored once per clock, so that nodes opened
        # one after another on it (a restart in a test) share one consistent timeline.
        self._wall0, self._t0 = _ANCHORS.setdefault(
            clock, (dt.datetime.now(_UTC), trio.current_time())
        )
        self.timers = Timers(self.now)

    # -- identity and time ---------------------------------------------------------------

    def now(self) -> dt.datetime:
        """The node's UTC time; follows trio's clock when it is a MockClock."""
        if self.mock_time:
            # (a clock run millennia ahead stops at LATEST instead of overflowing)
            return deadline_after(self._wall0, trio.current_time() - self._t0)
        return dt.datetime.now(_UTC)

    def new_pid(self, host: str) -> Pid:
        """A PID never used before by this data directory (incarnation + counter)."""
        self._counter += 1
        return Pid.trusted(self._node_part, host, f"{self._prefix}{self._counter:05x}")

    def is_local(self, pid: Pid) -> bool:
        """Whether ``pid`` belongs to this node."""
        return pid.node == self.name or (pid.node == LOCAL_NODE and self.name == LOCAL_NODE)

    # -- the workflow host -----------------------------------------------------------------

    def workflow_host_of(self, pid: Pid) -> WorkflowHost | None:
        """The workflow host serving ``pid`` (a workflow or a reply address), if any."""
        host = self.workflows
        return host if host is not None and pid.host in host.pid_hosts else None

    def require_workflows(self) -> WorkflowHost:
        """The node's workflow host.

        Raises:
            roost.Error: Invalid when the node hosts no workflows.
        """
        host = self.workflows
        if host is None:
            raise invalid("this node runs no workflow runtime; import roost.workflow")
        return host

    @property
    def local_workflows(self) -> Any:
        """The workflow host when it is the embedded LMDB one, else None.

        What only that host has (its counters, stats and run cache) is read through it;
        everything else goes through the ``WorkflowHost`` protocol (``workflows``).
        """
        return self.workflows if self.settings.get("workflow_host") is None else None

    # -- destinations ----------------------------------------------------------------------

    def resolve(self, dest: object) -> Pid:
        """Turn a Pid, a PID string or a registered name into a Pid.

        Raises:
            roost.Error: Invalid for a malformed destination, NotFound for an unknown name.
        """
        if isinstance(dest, Pid):
            return dest
        if isinstance(dest, str):
            if dest[:1] == "{":
                return Pid.parse(dest)
            return self.registry.require(check_name(dest))
        raise invalid(
            f"a destination is a Pid, a PID string or a registered name, got {shown(dest)}"
        )

    def live(self, dest: object) -> Process:
        """The live process behind ``dest``.

        Raises:
            roost.Error: NotFound when it is not alive on this node.
        """
        pid = self.resolve(dest)
        proc = self.procs.get(pid)
        if proc is None:
            raise not_found(f"process {pid} is not alive", pid=str(pid))
        return proc

    # -- spawn -----------------------------------------------------------------------------

    def spawn(
        self, parent: Process | None, entry: Entry, args: tuple[Any, ...], req: SpawnRequest
    ) -> Pid:
        """Start ``entry`` as a new process (or signal the one holding ``req.name``)."""
        return self.start_process(parent, entry, args, req).pid

    def start_process(
        self, parent: Process | None, entry: Entry, args: tuple[Any, ...], req: SpawnRequest
    ) -> Process:
        """``spawn``, returning the started process (or the named one that was signalled)."""
        kind = entry.kind
        # Identity tests, not `in _SPAWNABLE`: hashing an enum member is a Python call.
        if (kind is not EntryKind.PROCESS and kind is not EntryKind.SUPERVISOR) or self.stopping:
            raise self._spawn_refused(entry)
        check_arguments(entry, args, self.app)
        name = req.name
        if name is not None:
            holder = self._signal_holder(parent, name, req)
            if holder is not None:
                return holder
        host = self.app.resolve_host(req.host)
        host_id = host.id
        counts = self.host_counts
        count = counts.get(host_id, 0)
        if host.max_processes is not None and count >= host.max_processes:
            raise _capacity_error(host_id, host.max_processes)
        context = parent.context if parent is not None else {}
        if req.context:
            context = {**context, **req.context}
        pid = req.pid if req.pid is not None else self.new_pid(host_id)
        proc = Process(self, pid, entry, context, req.mailbox_limit)
        if req.watcher is not None:
            proc.watchers = {req.watcher}
        if req.trap_links:
            proc.trap_links = True
        # A supervisor's child is stopped by its supervisor, in order, at node shutdown.
        if parent is not None and parent.entry is not None:
            proc.supervised = parent.entry.kind is EntryKind.SUPERVISOR
        if entry.options.get("sync_start"):
            proc.ready = Channel(1)
        if name is not None:
            self.registry.register(name, pid)
        self.procs[pid] = proc
        counts[host_id] = count + 1
        if req.messages:
            self._deliver_start(proc, req.messages, parent)
        if parent is not None and (req.link or req.monitor):
            self._wire(parent, proc, req)
        self._nursery.start_soon(self._run, proc, entry.fn, args, name="roost.process")
        return proc

    def _spawn_refused(self, entry: Entry) -> Error:
        if entry.kind not in _SPAWNABLE:
            return invalid(
                f"{entry.id!r} is an {entry.kind.value}, not a process: call it with funcs.call()",
                entry=entry.id,
            )
        return Error(
            "the node is shutting down and starts no new processes",
            kind=ErrorKind.UNAVAILABLE,
        )

    def _signal_holder(
        self, parent: Process | None, name: str, req: SpawnRequest
    ) -> Process | None:
        """Spawn-or-signal: the live holder of ``name`` gets the start messages instead.

        All of them or (over its mailbox limit) none; None when nobody holds the name.
        """
        existing = self.registry.lookup(check_name(name))
        holder = self.procs.get(existing) if existing is not None else None
        if holder is None:
            return None
        self._check_room(holder, len(req.messages))
        self._deliver_start(holder, req.messages, parent)
        self._wire(parent, holder, req)
        return holder

    def _check_room(self, proc: Process, count: int) -> None:
        box = proc.get_mailbox()
        if count and box.limit is not None and box.unread() + count > box.limit:
            raise Error(
                f"mailbox of {proc.pid} has no room for {count} start messages (limit "
                f"{box.limit}, {box.unread()} unread); nothing was delivered",
                kind=ErrorKind.LIMIT_EXCEEDED,
                retryable=True,
                details={"limit": box.limit},
                pid=proc.pid,
            )

    def _deliver_start(
        self, proc: Process, messages: Iterable[tuple[str, Any]], parent: Process | None
    ) -> None:
        # Start messages are part of the spawn: the limit was checked up front (or, for a
        # new process, does not apply to them), so none is refused half-way.
        sender = parent.pid if parent is not None else None
        for topic, payload in messages:
            proc.get_mailbox().deliver(topic, payload, sender, force=True)

    def _wire(self, parent: Process | None, child: Process, req: SpawnRequest) -> None:
        if parent is None:
            return
        if req.link:
            self.link(parent, child.pid)
        if req.monitor:
            self.monitor(parent, child.pid)

    def attach(self, task_context: Mapping[str, Any] | None = None) -> Process:
        """Register the calling task (the ``open_node`` block) as a process."""
        proc = Process(self, self.new_pid("node"), None, task_context or {})
        self.procs[proc.pid] = proc
        self.host_counts["node"] = self.host_counts.get("node", 0) + 1
        return proc

    def start_coroutine(self, proc: Process, fn: Callable[..., Awaitable[Any]], args: Any) -> None:
        """Run ``fn(*args)`` as a coroutine of ``proc``; it dies with its process."""
        scope = trio.CancelScope()
        if proc.coros is None:
            proc.coros = set()
        proc.coros.add(scope)
        self._nursery.start_soon(self._run_coroutine, proc, scope, fn, args, name="roost.coro")

    # -- the trampoline: the one place exceptions become exit results ----------------------

    async def _run(self, proc: Process, fn: Callable[..., Awaitable[Any]], args: Any) -> None:
        set_current(proc)
        value: Any = None
        error: Error | None = None
        try:
            # Like `with proc.scope:`, but the scope is only made if a kill needs it.
            proc.enter_body()
            try:
                while True:
                    try:
                        value = await fn(*args)
                        break
                    except Upgrade as up:
                        self._cancel_coroutines(proc)
                        proc.entry, fn, args = up.entry, up.entry.fn, up.args
            except BaseException as exc:
                if not proc.leave_body(exc):
                    raise
            else:
                proc.leave_body(None)
        except BaseException as exc:
            if must_propagate(exc):
                # trio.Cancelled from outside the process (the node is being torn down) or
                # KeyboardInterrupt (see _contain): record the exit, then let it propagate.
                reason = "node stopped" if is_cancelled(exc) else type(exc).__name__
                self.exit(proc, None, proc.kill_error or terminated_error(proc.pid, reason))
                raise
            # An error exit is a result, not a crash: SystemExit and GeneratorExit too.
            error = Error.from_exception(exc)
        if proc.kill_error is not None:
            error = proc.kill_error
        self.exit(proc, value, error)

    async def _run_coroutine(
        self, proc: Process, scope: trio.CancelScope, fn: Callable[..., Awaitable[Any]], args: Any
    ) -> None:
        set_current(proc)
        try:
            with scope:
                await fn(*args)
        except Upgrade:
            self.kill(
                proc,
                invalid("process.upgrade must be called from the process body, not a coroutine"),
            )
        except BaseException as exc:
            if must_propagate(exc):
                raise
            self.kill(proc, Error.from_exception(exc))  # a failing coroutine fails its process
        finally:
            if proc.coros is not None:
                proc.coros.discard(scope)

    def _cancel_coroutines(self, proc: Process) -> None:
        coros = proc.coros
        if coros:
            for scope in coros:
                scope.cancel()
            coros.clear()

    # -- exit propagation ------------------------------------------------------------------

    def exit(self, proc: Process, value: Any, error: Error | None) -> None:
        """Record that ``proc`` ended and tell its monitors and links."""
        if not proc.alive:
            return
        proc.alive = False
        pid = proc.pid
        del self.procs[pid]
        self.host_counts[pid.host] -= 1
        self.registry.release(pid)
        if proc.coros:
            self._cancel_coroutines(proc)
        if error is not None and error.pid is None:
            error.pid = pid
        if proc.watchers or proc.watching or proc.links:
            at = self.now()
            self._notify_watchers(proc, value, error, at)
            self._notify_links(proc, error, at)
        if proc.exit_chans:
            result = ExitResult(value, error)
            for chan in proc.exit_chans:
                chan._try_send(result)
        if proc.mailbox is not None:
            proc.mailbox.close()
        if error is not None and error.kind is not ErrorKind.CANCELED:
            entry = proc.entry.id if proc.entry is not None else "attached"
            # A crash (the process raised: its traceback is kept) is an ERROR; an exit
            # with an error it did not raise (killed, a linked failure) a WARNING.
            exc_info = telemetry.exc_info(error)
            log.log(
                logging.ERROR if exc_info is not None else logging.WARNING,
                "process %s (%s) failed: %s",
                pid,
                entry,
                error,
                exc_info=exc_info,
                extra=telemetry.fields(entry=entry, pid=str(pid), kind=error.kind.value),
            )
        if self._idle is not None and self.user_count() == 0:
            self._idle.set()

    def _notify_watchers(self, proc: Process, value: Any, error: Error | None, at: Any) -> None:
        pid = proc.pid
        for target in proc.watching or ():
            other = self.procs.get(target)
            if other is not None and other.watchers:
                other.watchers.discard(pid)
        for watcher in proc.watchers or ():
            other = self.procs.get(watcher)
            if other is not None:
                if other.watching:
                    other.watching.discard(pid)
                self.post_event(other, Exit(pid, value, error, at))
            else:
                host = self.workflow_host_of(watcher)
                if host is not None:
                    host.process_exited(watcher, Exit(pid, value, error, at))

    def _notify_links(self, proc: Process, error: Error | None, at: Any) -> None:
        pid = proc.pid
        for linked in proc.links or ():
            other = self.procs.get(linked)
            if other is None:
                continue
            if other.links:
                other.links.discard(pid)
            if error is not None:
                self.link_down(other, pid, error, at)

    def link_down(self, proc: Process, dead: Pid, error: Error, at: Any) -> None:
        """Deliver LINK_DOWN, or kill ``proc`` when it does not trap links."""
        if proc.trap_links:
            self.post_event(proc, LinkDown(dead, error, at))
            return
        self.kill(
            proc,
            Error(
                f"linked process failed: {dead} exited with {error}",
                kind=error.kind,
                retryable=error.retryable,
                details={"reason": "link", "linked_pid": str(dead), "cause": error.message},
            ),
        )

    def post_event(self, proc: Process, event: Any) -> None:
        """Queue an event on ``proc``'s events channel (never refused by the limit)."""
        proc.get_mailbox().deliver(EVENTS, event, None, force=True)

    # -- control ---------------------------------------------------------------------------

    def kill(self, proc: Process, error: Error) -> None:
        """Hard-stop ``proc``: it exits with ``error`` at its next checkpoint."""
        if not proc.alive or proc.kill_error is not None:
            return
        proc.kill_error = error
        proc.scope.cancel()

    def cancel(self, proc: Process, reason: str | None) -> None:
        """Ask ``proc`` to stop (a CANCEL event it may act on)."""
        self.post_event(proc, Cancel(reason, self.now()))

    def stop(self, dest: object, reason: str | None = None, *, hard: bool) -> None:
        """Terminate (``hard``) or cancel ``dest``, a process or a workflow.

        Raises:
            roost.Error: NotFound when ``dest`` is not alive.
        """
        pid = self.resolve(dest)
        host = self.workflow_host_of(pid)
        if host is not None:
            if hard:
                host.terminate(pid)
            else:
                host.cancel(pid, reason)
            return
        target = self.live(pid)
        if hard:
            self.kill(target, terminated_error(target.pid))
        else:
            self.cancel(target, reason)

    async def transact(self, fn: Callable[[Any], Any]) -> Any:
        """Commit ``fn(txn)`` to the node's store (its group-committing writer thread).

        Under a trio MockClock the commit runs inline instead: an autojumping clock counts a
        task waiting on a thread as idle and would skip virtual time while the commit is in
        flight, so tests would see timers fire before the writes that armed them.

        Raises:
            roost.Error: InvalidState when the node has no store.
        """
        store = self.store
        if store is None:
            raise Error("this node has no store", kind=ErrorKind.INVALID_STATE)
        if self.mock_time:
            result = store.transact_sync(fn)
            # Committed: a cancel must not land now, or the caller would take it for a
            # commit that did not happen (as the threaded store's commit cannot be cancelled).
            await trio.lowlevel.cancel_shielded_checkpoint()
            return result
        return await store.transact(fn)

    def alive(self, pid: Pid) -> bool:
        """Whether ``pid`` is a live process or an open workflow on this node."""
        if pid in self.procs:
            return True
        host = self.workflow_host_of(pid)
        return host is not None and host.running(pid)

    def monitor(self, watcher: Process, dest: object) -> None:
        """Watch ``dest``: one EXIT when it ends (at once, "noproc", if it is not alive)."""
        pid = self.resolve(dest)
        if pid == watcher.pid:
            return
        host = self.workflow_host_of(pid)
        if host is not None:
            host.monitor(watcher.pid, pid)
            return
        target = self.procs.get(pid)
        if target is None:
            self.post_event(watcher, Exit(pid, None, noproc_error(pid), self.now()))
            return
        if target.watchers is None:
            target.watchers = set()
        target.watchers.add(watcher.pid)
        if watcher.watching is None:
            watcher.watching = set()
        watcher.watching.add(pid)

    def unmonitor(self, watcher: Process, dest: object) -> None:
        """Stop watching ``dest``; a no-op when not watching it."""
        pid = self.resolve(dest)
        host = self.workflow_host_of(pid)
        if host is not None:
            host.unwatch(watcher.pid, pid)
        if watcher.watching:
            watcher.watching.discard(pid)
        target = self.procs.get(pid)
        if target is not None and target.watchers:
            target.watchers.discard(watcher.pid)

    def link(self, proc: Process, dest: object) -> None:
        """Link both ways; linking to a dead process is a LINK_DOWN with "noproc"."""
        pid = self.resolve(dest)
        if pid == proc.pid:
            return
        host = self.workflow_host_of(pid)
        if host is not None:
            host.link(proc.pid, pid)
            return
        other = self.procs.get(pid)
        if other is None:
            self.link_down(proc, pid, noproc_error(pid), self.now())
            return
        if proc.links is None:
            proc.links = set()
        if other.links is None:
            other.links = set()
        proc.links.add(pid)
        other.links.add(proc.pid)

    def unlink(self, proc: Process, dest: object) -> None:
        """Remove a link; a no-op when there is none."""
        pid = self.resolve(dest)
        host = self.workflow_host_of(pid)
        if host is not None:
            host.unwatch(proc.pid, pid)
        if proc.links:
            proc.links.discard(pid)
        other = self.procs.get(pid)
        if other is not None and other.links:
            other.links.discard(proc.pid)

    # -- shutdown --------------------------------------------------------------------------

    def user_count(self) -> int:
        """Live processes other than attached ones."""
        return len(self.procs) - self.host_counts.get("node", 0)

    async def wait_idle(self) -> None:
        """Wait until only attached processes remain."""
        while self.user_count() > 0:
            self._idle = trio.Event()
            await self._idle.wait()
        self._idle = None

    async def shutdown(self, grace: float) -> None:
        """Cancel every process, wait up to ``grace`` seconds, then terminate the rest.

        A process that does not listen on ``process.events()`` is stopped at once (see
        ``_stopping.shut_down``). Children of supervisors get no CANCEL from the node: their
        supervisor stops them, in reverse start order, when it is cancelled.
        """
        self.stopping = True
        targets = [p for p in self.procs.values() if p.entry is not None and not p.supervised]
        await until_running(targets)
        for proc in targets:
            if proc.alive:
                shut_down(self, proc, "node shutdown", by="node")
        with trio.move_on_after(grace):
            await self.wait_idle()
        for proc in list(self.procs.values()):
            if proc.entry is not None:
                self.kill(
                    proc, terminated_error(proc.pid, "terminated: node shutdown grace elapsed")
                )
        with trio.move_on_after(KILLED_GRACE):
            await self.wait_idle()
        # What is left never ran far enough to be stopped: its task was never started (a
        # Ctrl-C between the spawn's bookkeeping and its task's start) or cannot be
        # cancelled. The node stops all the same; each is recorded as ended, and named.
        for proc in list(self.procs.values()):
            if proc.entry is not None:
                log.error(
                    "process %s (%s) did not end when terminated at node shutdown; "
                    "recorded as ended",
                    proc.pid,
                    proc.entry.id,
                )
                self.exit(proc, None, terminated_error(proc.pid, "terminated: node shutdown"))

    def mark_ready(self, proc: Process) -> None:
        """Signal that ``proc`` finished starting (entries declared with sync_start)."""
        if proc.ready is not None and not len(proc.ready):
            proc.ready._try_send(proc.pid)

    async def wait_ready(self, pid: Pid) -> None:
        """Wait until a sync_start process has started, or has already ended."""
        proc = self.procs.get(pid)
        if proc is None or proc.ready is None:
            return
        await select(proc.ready.case_receive(), self.exit_channel(proc).case_receive())

    def exit_channel(self, proc: Process) -> Channel[ExitResult]:
        """A channel that receives ``proc``'s ExitResult once."""
        chan: Channel[ExitResult] = Channel(1)
        if proc.exit_chans is None:
            proc.exit_chans = []
        proc.exit_chans.append(chan)
        return chan


_ANCHORS: weakref.WeakKeyDictionary[Any, tuple[dt.datetime, float]] = weakref.WeakKeyDictionary()
