"""The per-process record and the "current process" lookup."""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import trio

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.mailbox._channel import Channel
from roost.mailbox._mailbox import Mailbox

if TYPE_CHECKING:
    from roost.actors._app import Entry
    from roost.actors._node import Node

__all__ = ["Process", "Upgrade", "current_process", "maybe_current_process"]

_EMPTY: Mapping[str, Any] = {}


class Upgrade(BaseException):
    """Raised by ``process.upgrade`` to swap the running code; caught by the trampoline.

    A BaseException so that ``except Exception`` in user code does not swallow it.
    """

    def __init__(self, entry: Entry, args: tuple[Any, ...]) -> None:
        super().__init__(entry.id)
        self.entry = entry
        self.args = args


class Process:
    """Everything the node knows about one live process.

    Sets are created on first use: most processes never link, monitor or subscribe, and
    an idle process should cost as little memory as possible.
    """

    __slots__ = (
        "alive",
        "context",
        "coros",
        "entry",
        "exit_chans",
        "host",
        "kill_error",
        "links",
        "mailbox",
        "mailbox_limit",
        "node",
        "pid",
        "ready",
        "scope",
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
        self.host = pid.host
        self.entry = entry
        self.context = context
        self.alive = True
        self.scope = trio.CancelScope()
        self.mailbox: Mailbox | None = None
        self.mailbox_limit = mailbox_limit
        self.links: set[Pid] | None = None
        self.watchers: set[Pid] | None = None
        self.watching: set[Pid] | None = None
        self.trap_links = False
        self.kill_error: Error | None = None
        self.coros: set[trio.CancelScope] | None = None
        self.exit_chans: list[Channel[Any]] | None = None
        self.ready: Channel[Any] | None = None
        self.supervised = False

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        entry = self.entry.id if self.entry is not None else "attached"
        return f"<roost process {self.pid} {entry} {state}>"

    def get_mailbox(self) -> Mailbox:
        """The mailbox, created on first use."""
        box = self.mailbox
        if box is None:
            box = self.mailbox = Mailbox(self.mailbox_limit, self.pid)
        return box


_current: ContextVar[Process | None] = ContextVar("roost_process", default=None)


def maybe_current_process() -> Process | None:
    """The process running the calling code, or None outside any process."""
    return _current.get()


def current_process(what: str = "this call") -> Process:
    """The process running the calling code.

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
    return proc


def set_current(proc: Process | None) -> object:
    """Make ``proc`` the current process of this task; returns a reset token."""
    return _current.set(proc)


def reset_current(token: Any) -> None:
    """Undo ``set_current``."""
    _current.reset(token)
