"""The per-process record and the "current process" lookup."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import trio

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors import _hardstop
from roost.mailbox._channel import Channel
from roost.mailbox._mailbox import Mailbox

if TYPE_CHECKING:
    from roost.actors._app import Entry
    from roost.actors._node import Node

__all__ = [
    "Process",
    "WorkflowOps",
    "WorkflowProcess",
    "activity_context",
    "current_any",
    "current_process",
    "maybe_current_process",
]

_EMPTY: Mapping[str, Any] = {}


class WorkflowOps(Protocol):
    """What process calls need from a workflow's driver (implemented in roost.workflow)."""

    mailbox: Mailbox

    def send(self, dest: Any, topic: str, payload: Any) -> None: ...
    async def call(self, dest: Any, topic: str, payload: Any, seconds: float) -> Any: ...
    def start_activity(
        self, entry: str, args: tuple[Any, ...], options: tuple[Mapping[str, Any], ...]
    ) -> Any: ...
    def stop(self, dest: Any, reason: str | None, *, hard: bool) -> None: ...
    async def call_activity(
        self, entry: str, args: tuple[Any, ...], options: tuple[Mapping[str, Any], ...]
    ) -> Any: ...
    async def sleep(self, seconds: float) -> None: ...
    def after(self, seconds: float) -> Channel[Any]: ...
    def ticker(self, seconds: float) -> Channel[Any]: ...
    def spawn_coroutine(self, fn: Any, args: tuple[Any, ...]) -> None: ...
    def spawn_process(self, entry: str, args: tuple[Any, ...]) -> Pid: ...
    def start_child(self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]) -> Pid: ...
    async def exec_child(
        self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]
    ) -> Any: ...
    def uuid4(self) -> Any: ...
    def uuid7(self) -> Any: ...
    def random_bytes(self, n: int) -> bytes: ...
    def random(self) -> Any: ...

    @property
    def now(self) -> Any: ...


class WorkflowProcess:
    """The current process as workflow code sees it: every call goes to its driver."""

    __slots__ = ("context", "entry", "node", "pid", "workflow")

    def __init__(
        self,
        pid: Pid,
        entry: Entry | None,
        workflow: WorkflowOps,
        context: Mapping[str, Any] = _EMPTY,
        node: Node | None = None,
    ) -> None:
        self.pid = pid
        self.entry = entry
        self.workflow = workflow
        self.context = context
        self.node = node

    def get_mailbox(self) -> Mailbox:
        """The workflow's mailbox (fed from its history)."""
        return self.workflow.mailbox


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
        node: Node,
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
        self.mailbox = None if mailbox_limit is None else Mailbox(mailbox_limit, pid)
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
            box = self.mailbox = Mailbox(None, self.pid)
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


_current: ContextVar[Any] = ContextVar("roost_process", default=None)

# Inside an activity run by a workflow: that workflow's context values (for ctx.get).
activity_context: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "roost_activity_context", default=None
)


def maybe_current_process() -> Process | WorkflowProcess | None:
    """The process (or workflow) running the calling code, or None outside any process."""
    return _current.get()  # type: ignore[no-any-return]


def current_any(what: str = "this call") -> Process | WorkflowProcess:
    """The process (or workflow) running the calling code.

    Raises:
        roost.Error: kind InvalidState outside a process.
    """
    proc = _current.get()
    if proc is None:
        raise Error(
            f"{what} must run inside a roost process: spawn one, or call it inside "
            "'async with roost.open_node(app):'",
            kind=ErrorKind.INVALID_STATE,
        )
    return proc  # type: ignore[no-any-return]


def current_process(what: str = "this call") -> Process:
    """The plain process running the calling code.

    Raises:
        roost.Error: InvalidState outside a process; Invalid inside a workflow, where
            this call is not replay-safe.
    """
    proc = current_any(what)
    if proc.workflow is not None:
        raise Error(
            f"{what} is not available inside a workflow: it is not replay-safe there "
            "(see docs/workflows.md for what workflows may call)",
            kind=ErrorKind.INVALID,
            retryable=False,
        )
    assert isinstance(proc, Process)
    return proc


def set_current(proc: Process | WorkflowProcess | None) -> object:
    """Make ``proc`` the current process of this task; returns a reset token."""
    return _current.set(proc)


def reset_current(token: Any) -> None:
    """Undo ``set_current``."""
    _current.reset(token)


# The node code reaches when no process is current: set in activity tasks run by a
# workflow (whose current process is deliberately None) and in queue deliveries, so that
# roost.now, roost.state, roost.enqueue and roost.publish work there. A process, when
# there is one, always wins.
_bound_node: ContextVar[Node | None] = ContextVar("roost_bound_node", default=None)


def bind_node(node: Node) -> Any:
    """Let roost calls in this task (and the tasks and threads it starts) reach ``node``."""
    return _bound_node.set(node)


def bound_node() -> Node | None:
    """The node bound by ``bind_node`` in this context, if any."""
    return _bound_node.get()
