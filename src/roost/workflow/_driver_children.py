"""Child workflows and processes a run starts, on the driver (a base of ``Driver``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from roost._errors import Error, ErrorKind
from roost._pid import Pid
from roost.actors._events import Exit
from roost.mailbox._mailbox import EVENTS, Mailbox
from roost.workflow._driver_parts import Future, Ports
from roost.workflow._history import SpawnProcess, StartChild, Started, StopProcess
from roost.workflow._options import check_child_id, check_child_options

if TYPE_CHECKING:
    from roost.workflow._driver_parts import DriverView

__all__ = ["Children"]


class Children:
    """What a run starts (``Driver`` has the slots and methods named here)."""

    __slots__ = ()
    children: set[Pid] | frozenset[Pid]
    started: Started | None
    mailbox: Mailbox
    now: dt.datetime
    _child_waits: dict[Pid, Future]
    _ports: Ports
    _seq: int
    _own: Callable[[str], dict[Any, Any]]
    _own_children: Callable[[], set[Pid]]
    _issue: Callable[[Any], None]
    _next_seq: Callable[[], int]
    _validate_args: Callable[[Any, str], None]

    def _child_exited(self, pid: Pid, value: Any, error: Error | None) -> None:
        """A child's EXIT: to its ``workflow.exec`` caller, else to the run's events."""
        if pid in self.children:
            self._own_children().discard(pid)
        waiting = self._child_waits.pop(pid, None)
        if waiting is not None:  # a workflow.exec: the result goes to its caller
            waiting.resolve(value, error)
        else:
            exit_event = Exit(pid, value, error, self.now)
            self.mailbox.deliver(EVENTS, exit_event, None, force=True)

    def stop(self, dest: Any, reason: str | None, *, hard: bool) -> None:
        """Record a cancel (or, ``hard``, a terminate) of ``dest``, done after the commit."""
        self._issue(StopProcess(seq=self._next_seq(), dest=dest, reason=reason, hard=hard))

    def spawn_process(self, entry: str, args: tuple[Any, ...]) -> Pid:
        """Record the start of a plain process; its PID is derived from the run and seq.

        The process is monitored: its EXIT comes back as an event in the history.
        """
        self._validate_args(args, f"process {entry!r}")
        pid = self._ports.spawn_pid(self._seq + 1)  # raises if this driver cannot
        seq = self._next_seq()
        self._issue(SpawnProcess(seq=seq, entry=entry, args=list(args), pid=pid))
        self._own_children().add(pid)
        return pid

    def start_child(self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]) -> Pid:
        """Start a child workflow; its EXIT arrives on ``events()`` (it is monitored).

        ``options`` are child start options (``id``, ``parent_close_policy``, timeouts,
        ``retry_policy``, ``cron_schedule``, ...), checked here.
        """
        if self.started is None:
            raise Error("the workflow has not started", kind=ErrorKind.INVALID_STATE)
        workflow_id, policy, child_options = check_child_options(options)
        self._validate_args(args, f"child workflow {entry!r}")
        child_id = workflow_id or check_child_id(f"{self.started.workflow_id}.{self._seq + 1}")
        pid = self._ports.child_pid(child_id)  # raises if this driver cannot
        seq = self._next_seq()
        self._issue(
            StartChild(
                seq=seq,
                entry=entry,
                args=list(args),
                workflow_id=child_id,
                parent_close_policy=policy,
                options=child_options,
            )
        )
        self._own_children().add(pid)
        return pid

    async def exec_child(
        self, entry: str, args: tuple[Any, ...], options: Mapping[str, Any]
    ) -> Any:
        """Run a child workflow to its end: its result, or its error raised here."""
        pid = self.start_child(entry, args, options)
        future = Future(cast("DriverView", self))  # the one class with this base is one
        self._own("_child_waits")[pid] = future
        return await future
