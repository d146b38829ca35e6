"""The per-process record, and the node as processes see it (``NodeOps``).

Which process runs the calling code is ``actors/_current.py``, which needs no trio.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from roost._errors import Error
from roost._pid import Pid
from roost.actors import _hardstop
from roost.mailbox._channel import Channel
from roost.mailbox._mailbox import DEFAULT_WARN_AT, Mailbox

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable

    from roost.actors._app import App, Entry
    from roost.actors._events import ExitResult
    from roost.actors._node_types import SpawnRequest
    from roost.actors._registry import Registry
    from roost.actors._timers import Timers
    from roost.actors._workflow_ops import WorkflowOps
    from roost.storage._store import Store
    from roost.workflow._host_protocol import WorkflowHost

__all__ = ["NodeOps", "Process"]

_EMPTY: Mapping[str, Any] = {}


class NodeOps(Protocol):
    """The node as a process record, and the calls made on one, reach it (``Node``).

    Declared here, beside the record, so that the record can name its node without
    importing the module that creates records.
    """

    app: App
    name: str
    incarnation: int
    procs: dict[Pid, Process]
    registry: Registry
    stopping: bool
    ext: dict[str, Any]
    store: Store | None
    settings: dict[str, Any]
    workflows: WorkflowHost | None
    mock_time: bool
    timers: Timers

    def now(self) -> dt.datetime:
        """The node's UTC time."""

    async def transact(self, fn: Callable[[Any], Any]) -> Any:
        """Commit ``fn(txn)`` to the node's store."""

    def resolve(self, dest: object) -> Pid:
        """Turn a Pid, a PID string or a registered name into a Pid."""

    def workflow_host_of(self, pid: Pid) -> WorkflowHost | None:
        """The workflow host serving ``pid`` (a workflow or a reply address), if any."""

    def require_workflows(self) -> WorkflowHost:
        """The node's workflow host (Invalid when it hosts none)."""

    def live(self, dest: object) -> Process:
        """The live process behind ``dest``."""

    def spawn(
        self, parent: Process | None, entry: Entry, args: tuple[Any, ...], req: SpawnRequest
    ) -> Pid:
        """Start ``entry`` as a new process."""

    def start_process(
        self, parent: Process | None, entry: Entry, args: tuple[Any, ...], req: SpawnRequest
    ) -> Process:
        """``spawn``, returning the started process."""

    def attach(self, task_context: Mapping[str, Any] | None = None) -> Process:
        """Register the calling task as a process."""

    def start_coroutine(self, proc: Process, fn: Callable[..., Awaitable[Any]], args: Any) -> None:
        """Run ``fn(*args)`` as a coroutine of ``proc``."""

    def exit(self, proc: Process, value: Any, error: Error | None) -> None:
        """Record that ``proc`` ended and tell its monitors and links."""

    def link_down(self, proc: Process, dead: Pid, error: Error, at: Any) -> None:
        """Deliver LINK_DOWN, or kill ``proc`` when it does not trap links."""

    def post_event(self, proc: Process, event: Any) -> None:
        """Queue an event on ``proc``'s events channel."""

    def kill(self, proc: Process, error: Error) -> None:
        """Hard-stop ``proc``."""

    def cancel(self, proc: Process, reason: str | None) -> None:
        """Ask ``proc`` to stop."""

    def stop(self, dest: object, reason: str | None = None, *, hard: bool) -> None:
        """Terminate (``hard``) or cancel ``dest``."""

    def alive(self, pid: Pid) -> bool:
        """Whether ``pid`` is a live process or an open workflow."""

    def monitor(self, watcher: Process, dest: object) -> None:
        """Watch ``dest``: one EXIT when it ends."""

    def unmonitor(self, watcher: Process, dest: object) -> None:
        """Stop watching ``dest``."""

    def link(self, proc: Process, dest: object) -> None:
        """Link both ways."""

    def unlink(self, proc: Process, dest: object) -> None:
        """Remove a link."""

    def mark_ready(self, proc: Process) -> None:
        """Signal that ``proc`` finished starting."""

    async def wait_ready(self, pid: Pid) -> None:
        """Wait until a sync_start process has started, or has already ended."""

    def exit_channel(self, proc: Process) -> Channel[ExitResult]:
        """A channel that receives ``proc``'s ExitResult once."""


class Process:
    """Everything the node knows about one live process.

    Sets are created on first use: most processes never link, monitor or subscribe, and
    an idle process should cost as little memory as possible.
    """

    __slots__ = (
        "_stop",
        "alive",
        "context",
        "coros",
        "entry",
        "exit_chans",
        "kill_error",
        "links",
        "mailbox",
        "node",
        "pid",
        "ready",
        "supervised",
        "trap_links",
        "watchers",
        "watching",
    )

    def __init__(
        self,
        node: NodeOps,
        pid: Pid,
        entry: Entry | None,
        context: Mapping[str, Any] = _EMPTY,
        mailbox_limit: int | None = None,
    ) -> None:
        self.node = node
        self.pid = pid
        self.entry = entry
        self.context = context
        self.alive = True
        # What hard-stops the process: None until it runs, then its trio task until a
        # kill attaches a cancel scope to that task (see _hardstop), or the scope itself.
        self._stop: trio.lowlevel.Task | trio.CancelScope | None = None
        # A limit is rare and must hold from the first message: such a mailbox is made now.
        self.mailbox = (
            None if mailbox_limit is None else Mailbox(mailbox_limit, pid, _warn_at(node))
        )
        self.links: set[Pid] | None = None
        self.watchers: set[Pid] | None = None
        self.watching: set[Pid] | None = None
        self.trap_links = False
        self.kill_error: Error | None = None
        self.coros: set[trio.CancelScope] | None = None
        self.exit_chans: list[Channel[Any]] | None = None
        self.ready: Channel[Any] | None = None
        self.supervised = False

    # Plain processes are not workflows; a class attribute costs no memory per process.
    workflow: WorkflowOps | None = None

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        entry = self.entry.id if self.entry is not None else "attached"
        return f"<roost process {self.pid} {entry} {state}>"

    def get_mailbox(self) -> Mailbox:
        """The mailbox, created on first use."""
        box = self.mailbox
        if box is None:
            box = self.mailbox = Mailbox(None, self.pid, _warn_at(self.node))
        return box

    @property
    def scope(self) -> trio.CancelScope:
        """The cancel scope around the process body; cancelling it hard-stops the process.

        Made on first use: attached to the running task of a spawned process (see
        _hardstop), or a plain scope for one that has not run yet (its trampoline enters
        it) and for attached processes (their owner enters it with ``with proc.scope:``).
        """
        stop = self._stop
        if isinstance(stop, trio.CancelScope):
            return stop
        scope = trio.CancelScope() if stop is None or not self.alive else _hardstop.attach(stop)
        self._stop = scope
        return scope

    @property
    def has_run(self) -> bool:
        """Whether its body has begun, or a kill already stops it (nothing to wait for)."""
        return self._stop is not None

    def enter_body(self) -> None:
        """Called by the trampoline as the body starts, in the process's own task.

        The body gets no cancel scope of its own until a kill attaches one to this task;
        a process killed before it ran finds a cancelled scope waiting, entered here as a
        ``with`` block would, and so does every process on a trio without attach support.
        """
        stop = self._stop
        if stop is None:
            if _hardstop.ATTACH_SUPPORTED:
                self._stop = trio.lowlevel.current_task()
                return
            stop = self._stop = trio.CancelScope()
        assert isinstance(stop, trio.CancelScope)
        stop.__enter__()

    def leave_body(self, exc: BaseException | None) -> bool:
        """Called by the trampoline as the body ends (with its exception, if it raised).

        Exits the body's scope, if it has one, as ``with`` would; returns True when that
        swallowed ``exc`` (the Cancelled a kill caused), False when ``exc`` must propagate.
        """
        stop = self._stop
        if not isinstance(stop, trio.CancelScope):
            return False
        if exc is None:
            return bool(stop.__exit__(None, None, None))
        return bool(stop.__exit__(type(exc), exc, exc.__traceback__))


def _warn_at(node: NodeOps) -> int:
    """The node's ``mailbox_warning`` (``open_node``), or the default."""
    return int(node.settings.get("mailbox_warning", DEFAULT_WARN_AT))
