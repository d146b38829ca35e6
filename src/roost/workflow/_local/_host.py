"""The backend seam: what the workflow runtime's parts need from the host that runs them.

The deterministic driver (``_driver``) and the pure planner (``_planner``) know nothing of
where a run lives. Around them, the runtime's parts (activation, effects, closing, eager
start, recovery, the timer and activity workers, ...) reach their host only through the
protocols here: storage (``transact`` / ``read``), durable timers (``arm`` / ``drop``),
activity execution (``submit`` / ``cancel``) and message delivery (to a PID, and the EXIT
and LINK_DOWN notifications of watchers). ``WorkflowManager`` is the LMDB + trio host and
satisfies ``RunHost`` structurally; a second host (a Temporal worker, say) would implement
these and reuse the driver and the planner unchanged (docs/design-notes.md, "The backend
seam").

The module sits low in the import graph: it names the runtime's record types and the
actors' value types, never a module that implements one of these protocols, so every part
can type against it without a cycle.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import trio

    from roost._counters import RuntimeCounters
    from roost._errors import Error
    from roost._pid import Pid
    from roost.actors._events import Exit
    from roost.actors._process import NodeOps
    from roost.storage._codec import Codec
    from roost.storage._store import ReadTxn, WriteTxn
    from roost.workflow._local._forwarding import Forwarding
    from roost.workflow._local._plan import Routes
    from roost.workflow._local._records import ActivityTask, RunRecord, TimerTask
    from roost.workflow._local._run import Pending, Run
    from roost.workflow._local._runs import RunTable

__all__ = ["ActivityExecution", "DurableTimers", "Passes", "RunHost", "Storage"]


class Storage(Protocol):
    """Durable state: one write transaction per activation (grouped by the store)."""

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction (a consistent snapshot of every table)."""
        ...

    def transact_sync(self, fn: Callable[[WriteTxn], Any]) -> Any:
        """Run ``fn`` in a write transaction and commit it, blocking (recovery only)."""
        ...


class DurableTimers(Protocol):
    """Timers whose rows are stored: armed after their commit, fired into the history."""

    def add(self, timer: TimerTask) -> None:
        """Arm ``timer`` (already stored); one that fell due while down fires at once."""
        ...

    def add_all(self, timers: Iterable[TimerTask]) -> None:
        """Arm many stored timers at once (a node's open)."""
        ...

    def rows(self, run: Run) -> list[bytes]:
        """The stored rows of ``run``'s timers (deleted when it closes)."""
        ...

    def drop(self, run: Run) -> None:
        """``run`` closed and its timer rows are deleted: its armed timers never fire."""
        ...


class ActivityExecution(Protocol):
    """Runs stored activity tasks; each result is settled into its run's next activation."""

    def submit(self, task: ActivityTask, *, stored: bool = False) -> None:
        """Start working on ``task`` (recorded already); a task already running is ignored.

        ``stored``: it has a row in ``tasks`` for its outcome's commit to delete.
        """
        ...

    def cancel(self, run_id: str, seq: int) -> None:
        """Stop working on a task the workflow cancelled (its row is deleted already)."""
        ...


class Passes(Protocol):
    """The executors, as a task that hands results on in passes of its own sees them."""

    def hold(self) -> None:
        """Runs queued from now on wait for ``release`` (no executor is woken for them)."""
        ...

    def release(self, *, take: bool) -> bool:
        """End ``hold``; True if the caller is to run the held runs' pass (``take_pass``)."""
        ...

    async def take_pass(self) -> None:
        """Take the queued runs and run their pass (activations, commit, effects) here."""
        ...


class Replies(Protocol):
    """The private reply addresses of a run's calls."""

    def pid(self, run: Run, seq: int) -> Pid:
        """The reply address of call ``seq`` of ``run``."""
        ...


class RunHost(Protocol):
    """The host of a node's workflow runs, as every part of the runtime sees it."""

    @property
    def node(self) -> NodeOps:
        """Message delivery (to a PID; EXIT and LINK_DOWN to watchers), the clock, names."""
        ...

    @property
    def store(self) -> Storage:
        """Durable state."""
        ...

    @property
    def codec(self) -> Codec:
        """Encodes every stored value."""
        ...

    @property
    def host(self) -> str:
        """The virtual host of workflow PIDs (``<app>:workflows``)."""
        ...

    @property
    def runs(self) -> RunTable:
        """The open runs and the runs whose close is committing; the driver cache."""
        ...

    @property
    def cache_size(self) -> int:
        """How many drivers stay in memory."""
        ...

    @property
    def unread_limit(self) -> int:
        """How many unread messages a run may hold."""
        ...

    @property
    def quarantined(self) -> set[str]:
        """Workflow ids whose stored rows could not be decoded."""
        ...

    @property
    def unloadable(self) -> dict[str, Error]:
        """Stored running runs this node's app cannot run, by workflow id, with why."""
        ...

    @property
    def stats(self) -> dict[str, int]:
        """Counters (activations, replays, evictions, task failures)."""
        ...

    @property
    def counters(self) -> RuntimeCounters:
        """Runs started and closed, activity attempts (read by ``/metrics``)."""
        ...

    @property
    def base_context(self) -> contextvars.Context:
        """What workflow code starts from (never a starter's context)."""
        ...

    @property
    def timers(self) -> DurableTimers:
        """Durable timers."""
        ...

    @property
    def activities(self) -> ActivityExecution:
        """Activity execution."""
        ...

    @property
    def executors(self) -> Passes:
        """The tasks that run queued runs' activations in passes."""
        ...

    @property
    def replies(self) -> Replies:
        """Reply addresses of calls."""
        ...

    @property
    def forwarding(self) -> Forwarding:
        """Inbox rows that follow a workflow id into its next run (see ``_forwarding``)."""
        ...

    @property
    def routes(self) -> Routes:
        """What activation plans read of the host."""
        ...

    async def transact(self, fn: Callable[[WriteTxn], Any]) -> Any:
        """Commit ``fn``'s writes in the next group transaction."""
        ...

    async def commit_retrying(self, fn: Callable[[WriteTxn], Any], what: str) -> bool:
        """Commit the runtime's own bookkeeping, retrying until it commits (or the node stops)."""
        ...

    async def settle(
        self,
        table: str,
        row: bytes,
        task: tuple[str, str],
        event: Any,
        on_unencodable: Callable[[Error], Any] | None = None,
    ) -> None:
        """A task or timer row is done: hand its event to its run's next activation."""
        ...

    def settle_now(
        self,
        table: str,
        row: bytes,
        task: tuple[str, str],
        event: Any,
        on_unencodable: Callable[[Error], Any] | None = None,
    ) -> bool:
        """``settle`` without its checkpoint: False if no run takes the event (delete the row)."""
        ...

    def spawn_task(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` in the background, for as long as the host runs."""
        ...

    def hold_staged(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        """Keep the bytes of events a plan staged until their run accepts them."""
        ...

    def accept(self, run: Run, items: list[Pending]) -> None:
        """Events committed to ``run``'s inbox: queue them for its next activation."""
        ...

    def drop_settled(self, items: list[Pending]) -> None:
        """Delete the task and timer rows of events no run will record."""
        ...

    def ready(self, run: Run) -> None:
        """Queue ``run`` for an activation if it has events and may take one."""
        ...

    def arm(self, run: Run) -> None:
        """Arm the timers stored with ``run``'s start (after that commit)."""
        ...

    async def commit_start(self, run: Run, events: list[Any]) -> None:
        """Store a new run and its first events."""
        ...

    def input_of(self, run: Run) -> list[Any]:
        """The input ``run`` started with."""
        ...

    def closed(self, run: Run) -> None:
        """A run's final status is committed: tell whoever is waiting."""
        ...

    def stored_record(self, workflow_id: str) -> RunRecord | None:
        """The latest run record of ``workflow_id``, open or closed."""
        ...

    def process_exited(self, watcher: Pid, event: Exit) -> None:
        """A plain process a workflow spawned ended: record its EXIT."""
        ...

    def from_outside(self, run: Run, event: Any) -> trio.Event:
        """Queue ``event`` for ``run``'s inbox; the result is set once it is durable."""
        ...

    async def signal_many(
        self, run: Run, messages: tuple[tuple[str, Any], ...], sender: Pid | None
    ) -> None:
        """Commit start messages to an open run."""
        ...

    def cancel(self, pid: Pid, reason: str | None) -> trio.Event:
        """Deliver a CANCEL request to an open run."""
        ...

    def terminate(self, pid: Pid) -> None:
        """Stop an open run at once; it closes as Canceled."""
        ...

    def route(self, pid: Pid) -> tuple[Run, int | None] | None:
        """The open run a message to ``pid`` goes to, with the call seq of reply addresses."""
        ...
