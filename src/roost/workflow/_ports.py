"""``Ports``: what a workflow driver asks of the host that runs it (no trio)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from roost._errors import Error, ErrorKind

if TYPE_CHECKING:
    import contextvars

    from roost._pid import Pid
    from roost.workflow._awaitables import DriverView
    from roost.workflow._history import Started
    from roost.workflow._trust import Trust

__all__ = ["Ports"]


class Ports(abc.ABC):
    """What a driver asks of whoever runs it: one object, not a closure per need.

    The runtime's subclass holds its run; every cached workflow keeps one, so one small
    object here instead of five closures and their cells is memory and collector time
    saved per workflow. The defaults suit a driver that only replays plain code: values are
    not checked, and PIDs (processes, child workflows, reply addresses) are refused.
    """

    __slots__ = ()

    @abc.abstractmethod
    def make_context(self, driver: DriverView) -> contextvars.Context:
        """A fresh context in which workflow code sees ``driver`` (one per coroutine)."""

    def check(self, value: object, what: str) -> None:  # noqa: B027 - by default, no check
        """Raise ``Invalid`` if ``value`` cannot be recorded."""

    def spawn_pid(self, seq: int) -> Pid:
        """The PID of the process started by command ``seq``."""
        raise _cannot("spawn processes")

    def child_pid(self, workflow_id: str) -> Pid:
        """The PID of the child workflow ``workflow_id``."""
        raise _cannot("start child workflows")

    def reply_pid(self, seq: int) -> Pid:
        """The private reply address of call ``seq``."""
        raise _cannot("make calls")

    def encoded_size(self, value: object) -> int:
        """Bytes ``value`` takes in the history (0 by default: sizes are not measured)."""
        return 0

    def choose_version(self, change_id: str, min_supported: int, max_supported: int) -> int | None:
        """The version ``workflow.version(change_id, ...)`` returns, if this host decides it.

        None (the default): the driver decides, from the replayed commands passed as
        ``activate(expected=...)`` (``max_supported`` for a new run). A host that replays
        by itself and never passes them decides here: the version this run recorded,
        ``max_supported`` for a new run, or ``DEFAULT_VERSION`` (-1) for a run whose
        history predates the change. The driver records a ``VersionMarker`` for any other
        answer, as for its own, and checks the answer against the supported range (a
        version outside it stops the run's replay). Asked once per change per run.
        """
        return None

    def trust(self) -> Trust | None:
        """What a secured run's envelope is checked against at every activation.

        None (the default): this driver does not check envelopes (a replay that only
        checks code against a history). A host that runs workflows returns its key ring
        and the app's policy names (a ring of None denies every secured run).
        """
        return None

    def kept_start(self, started: Started) -> Started:
        """The ``Started`` the driver keeps for the run's life (``started`` by default).

        A host whose run record holds the same identity returns an equal event that shares
        the record's strings: a decoded event's own copies would stay in memory with every
        cached run.
        """
        return started


def _cannot(what: str) -> Error:
    return Error(f"this driver cannot {what}", kind=ErrorKind.INVALID_STATE)
