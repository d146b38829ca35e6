"""``Replayer``: replay recorded histories against the current code (no trio, no store).

Public as ``roost.testing.Replayer``; ``roost replay`` runs it on a history file.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Iterable
from typing import Any

from roost._errors import Error, NondeterminismError, invalid
from roost._pid import Pid
from roost.actors._app import App, EntryKind
from roost.actors._current import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.storage._codec import Codec
from roost.workflow._awaitables import DriverView
from roost.workflow._driver import Driver, Ports, Status
from roost.workflow._history import (
    Activation,
    HistoryItem,
    SendMessage,
    SpawnProcess,
    Started,
    WorkflowTask,
    unflatten,
)

__all__ = ["Replayer"]

_CODEC = Codec()


class Replayer:
    """Replays histories (from ``node.history`` or ``load_history``) against ``app``'s code.

    Example:
        ``Replayer(app).replay(node.history("order-1"))`` returns the workflow's result,
        raises its recorded error, or raises ``roost.NondeterminismError`` naming the
        first command the current code issued differently, and the code line.
    """

    def __init__(self, app: App) -> None:
        if not isinstance(app, App):
            raise invalid(f"Replayer needs a roost.App, got {type(app).__name__}")
        self.app = app

    def replay(self, history: Iterable[HistoryItem | Activation]) -> Any:
        """Replay one history; see the class docstring.

        Returns:
            The workflow's result, or None if the history ends before the workflow did.

        Raises:
            roost.NondeterminismError: the code diverged from the history.
            roost.Error: the workflow's recorded error; Invalid for a malformed history.
        """
        items = list(history)
        acts = unflatten(items)
        sizes = [item.size for item in items if type(item) is WorkflowTask]
        started = _started(acts)
        entry = self.app.resolve(started.workflow_type)
        if entry.kind is not EntryKind.WORKFLOW:
            raise invalid(f"{entry.id!r} is not a workflow entry")
        pid = Pid("local", f"{self.app.name}:workflows", started.workflow_id)
        spawned = {
            cmd.seq: cmd.pid
            for act in acts
            for cmd in act.commands
            if isinstance(cmd, SpawnProcess)
        }
        reply_to = {
            cmd.seq: cmd.reply_to
            for act in acts
            for cmd in act.commands
            if isinstance(cmd, SendMessage) and cmd.reply_to is not None
        }

        driver = Driver(entry.fn, _ReplayPorts(self.app, pid, started, spawned, reply_to))
        try:
            for n, act in enumerate(acts):
                driver.activate(act.at, act.events, expected=act.commands)
                # As a node counts it: the bytes the activation takes in the store, as
                # recorded with the history; a history without them (a list of Activations,
                # a file saved by an earlier roost) counts the record's own encoding.
                size = sizes[n] if n < len(sizes) else None
                driver.recorded(size if size is not None else len(_CODEC.encode(act)))
        finally:
            driver.close()
        if driver.status == Status.FAILED and driver.error is not None:
            raise driver.error.clone()
        if driver.status != Status.COMPLETED:
            return None
        # As the live run's watchers got it: recorded (a tuple comes back a list).
        return _CODEC.decode(_CODEC.encode(driver.result))

    def replay_many(self, histories: Iterable[Iterable[HistoryItem | Activation]]) -> list[Any]:
        """Replay several histories: their results, or their recorded errors, in order.

        Raises:
            roost.NondeterminismError: the first history that does not replay (a
                divergence, or a recorded ``workflow.version`` the code no longer
                supports); its index is in ``details["history_index"]``.
        """
        results = []
        for index, history in enumerate(histories):
            try:
                results.append(self.replay(history))
            except NondeterminismError as exc:
                exc.details["history_index"] = index
                raise
            except Error as exc:  # the workflow's recorded error: its outcome
                results.append(exc)
        return results


class _ReplayPorts(Ports):
    """PIDs as the history recorded them; nothing is checked (it was, when recorded)."""

    __slots__ = ("app", "pid", "reply_to", "shim", "spawned", "started")

    def __init__(
        self,
        app: App,
        pid: Pid,
        started: Started,
        spawned: dict[int, Pid],
        reply_to: dict[int, Pid],
    ) -> None:
        self.app, self.pid, self.started = app, pid, started
        self.spawned, self.reply_to = spawned, reply_to
        # Workflow code resolves entries through its node's app; replay must resolve them
        # exactly as the live run did (an unknown entry fails at the same line).
        self.shim: Any = types.SimpleNamespace(app=app)

    def make_context(self, driver: DriverView) -> contextvars.Context:
        ctx = contextvars.copy_context()
        entry = self.app.resolve(self.started.workflow_type)
        proc = WorkflowProcess(self.pid, entry, driver, self.started.context, self.shim)
        ctx.run(set_current, proc)
        ctx.run(use_backend, driver.backend)
        return ctx

    def spawn_pid(self, seq: int) -> Pid:
        return self.spawned.get(seq) or Pid("local", self.app.default_host, f"replay.{seq}")

    def child_pid(self, workflow_id: str) -> Pid:
        return Pid("local", f"{self.app.name}:workflows", workflow_id)

    def reply_pid(self, seq: int) -> Pid:
        return self.reply_to.get(seq) or Pid(
            "local", f"{self.app.name}:replies", f"{self.started.run_id}.{seq}"
        )

    def encoded_size(self, value: object) -> int:
        return len(_CODEC.encode(value))


def _started(acts: list[Activation]) -> Started:
    if not acts or not acts[0].events or not isinstance(acts[0].events[0], Started):
        raise invalid("a history must begin with the workflow's Started event")
    started: Started = acts[0].events[0]
    return started
