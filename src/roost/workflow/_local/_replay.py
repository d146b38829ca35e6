"""Drivers of runs: built for new runs, rebuilt by replay, kept in an LRU cache (``Drivers``)."""

from __future__ import annotations

import contextvars
import gc
from typing import TYPE_CHECKING, TypeVar

from roost._interrupt import is_ctrl_c
from roost._pid import Pid
from roost.actors._current import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.storage._quarantine import QuarantinedRow, decode_error
from roost.workflow._awaitables import DriverView
from roost.workflow._driver import Driver, Ports
from roost.workflow._history import Started
from roost.workflow._history_format import read_activation
from roost.workflow._local._quarantine import RunQuarantined
from roost.workflow._local._records import history_key
from roost.workflow._local._run import Run
from roost.workflow._recorded import is_plain
from roost.workflow._trust import Trust

if TYPE_CHECKING:
    from roost.actors._process import NodeOps
    from roost.storage import Codec, Store
    from roost.workflow._local._replies import ReplyHost
    from roost.workflow._local._runs import RunTable

__all__ = [
    "READ_AHEAD_BYTES",
    "Drivers",
    "ReplayFailed",
    "RunPorts",
    "Stored",
    "paused_gc",
]

_T = TypeVar("_T")


class ReplayFailed(Exception):  # noqa: N818 - not an error of its own: it carries one
    """Rebuilding a run failed at ``activation`` of its history, with ``cause``.

    The cause may be a ``NondeterminismError``, an exception workflow code raised past
    the driver (``SystemExit``), or a stored activation that cannot be read.
    """

    def __init__(self, activation: int, cause: BaseException) -> None:
        super().__init__(activation, cause)
        self.activation = activation
        self.cause = cause


class RunPorts(Ports):
    """A live run's ports: PIDs derived from the run, values checked by the node's codec."""

    __slots__ = ("drivers", "run")

    def __init__(self, drivers: Drivers, run: Run) -> None:
        self.drivers, self.run = drivers, run

    def make_context(self, driver: DriverView) -> contextvars.Context:
        """A context in which workflow code is the run's process, on ``driver``'s backend."""
        run, drivers = self.run, self.drivers
        ctx = drivers.base_context.copy()
        proc = WorkflowProcess(run.pid, run.entry, driver, run.context, drivers.node)
        ctx.run(set_current, proc)
        ctx.run(use_backend, driver.backend)
        return ctx

    def check(self, value: object, what: str) -> None:
        """Encode ``value`` with the node's codec (raises Invalid if it cannot be)."""
        if not is_plain(value):  # a plain value always encodes
            self.drivers.codec.encode(value, what=what)

    def spawn_pid(self, seq: int) -> Pid:
        """Deterministic, so replay returns the same PID; unique per run and seq."""
        record, node = self.run.record, self.drivers.node
        name = f"{record.workflow_id}.{record.run_id[:6]}.{seq}"
        return Pid.trusted(node.name, node.app.default_host, name)

    def child_pid(self, workflow_id: str) -> Pid:
        """A child workflow's PID: its id on this node's workflow host."""
        return Pid.trusted(self.drivers.node.name, self.drivers.host, workflow_id)

    def reply_pid(self, seq: int) -> Pid:
        """The private reply address of the run's call ``seq``."""
        return self.drivers.reply_pid(self.run, seq)

    def encoded_size(self, value: object) -> int:
        """Bytes ``value`` takes in the history, by the node's codec."""
        return len(self.drivers.codec.encode(value))

    def trust(self) -> Trust:
        """The node's key ring and the app's policy names."""
        return self.drivers.trust

    def kept_start(self, started: Started) -> Started:
        """``started`` with the run record's own strings, PID and context where equal.

        The event the driver gets is decoded (from the store, or recoded as it will be
        stored): its strings are copies of the record's, and kept for the run's life they
        would be about a fifth of what an idle cached run holds.
        """
        run = self.run
        record = run.record
        if (  # the event new_run built, handed over as it is (see _recorded): kept already
            started.workflow_id is record.workflow_id
            and started.run_id is record.run_id
            and started.workflow_type is record.workflow_type
            and started.context is run.context
            and started.task_queue is record.task_queue
            and started.parent is record.parent
        ):
            return started
        return Started(
            workflow_id=_shared(started.workflow_id, record.workflow_id),
            run_id=_shared(started.run_id, record.run_id),
            workflow_type=_shared(started.workflow_type, record.workflow_type),
            args=started.args,
            seed=started.seed,
            context=_shared(started.context, run.context),
            task_queue=_shared(started.task_queue, record.task_queue),
            parent=_shared(started.parent, record.parent),
            attempt=started.attempt,
        )


def _shared(value: _T, kept: object) -> _T:
    """``kept`` if it equals ``value`` (the same type too), else ``value``."""
    return kept if type(kept) is type(value) and kept == value else value


# Histories read ahead for one pass of rebuilds hold at most this many stored bytes in all;
# a longer one is read when its run is rebuilt (its bytes are never all held twice).
READ_AHEAD_BYTES = 4 << 20

Stored = list[tuple[bytes, bytes]]  # the history rows of a run, in activation order


class Drivers:
    """Builds runs' drivers, rebuilds them by replay, and keeps the driver cache in order."""

    __slots__ = (
        "_replies",
        "_runs",
        "_stats",
        "_store",
        "base_context",
        "codec",
        "host",
        "node",
        "trust",
    )

    def __init__(
        self,
        *,
        node: NodeOps,
        store: Store,
        codec: Codec,
        runs: RunTable,
        stats: dict[str, int],
        host: str,
        replies: ReplyHost,
        base_context: contextvars.Context,
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            node: the node workflow code's process objects belong to.
            store: where histories are read from.
            codec: decodes histories, checks and measures recorded values.
            runs: the run table (its driver cache).
            stats: counts replays and evictions.
            host: the host of workflow PIDs (children's PIDs are on it).
            replies: the reply addresses of workflows' calls.
            base_context: what workflow code starts from (never a starter's context).
        """
        self.node, self._store, self.codec, self._runs = node, store, codec, runs
        self._stats, self.host, self._replies = stats, host, replies
        self.base_context = base_context
        # What secured runs' envelopes are checked against (the policies as the app has
        # them when the host starts: policies are registered before a node opens).
        self.trust = Trust(node.settings.get("keyring"), frozenset(node.app.policies))

    def reply_pid(self, run: Run, seq: int) -> Pid:
        """The private reply address of ``run``'s call ``seq``."""
        return self._replies.pid(run, seq)

    def new(self, run: Run) -> Driver:
        """A fresh driver for ``run``, its PIDs (spawned processes, children, replies) fixed."""
        return Driver(run.entry.fn, RunPorts(self, run))

    def read_histories(self, runs: list[Run]) -> dict[str, Stored]:
        """The stored histories of the ``runs`` about to be rebuilt, by run id, in one read.

        A run with no driver and a history is rebuilt by replay: after a restart that is
        every open run, so a pass reads their histories in one transaction, not one each.
        Only histories within ``READ_AHEAD_BYTES`` together are read; the others are read
        by ``rebuild`` itself.
        """
        wanted = [run for run in runs if run.driver is None and run.progress[0] > 0]
        if len(wanted) < 2:
            return {}
        out: dict[str, Stored] = {}
        budget = READ_AHEAD_BYTES
        with self._store.read() as txn:
            for run in wanted:
                if run.progress[2] > budget:
                    continue  # read by its own rebuild
                run_id = run.record.run_id
                rows = out[run_id] = list(txn.prefix("histories", history_key(run_id, 0)[:-8]))
                budget -= sum(len(data) for _, data in rows)
                if budget <= 0:
                    break
        return out

    def rebuild(self, run: Run, stored: Stored | None = None) -> Driver:
        """A driver brought back to where ``run`` is, by replaying its stored history.

        ``stored``: its history rows, if already read (``read_histories``).

        Raises:
            ReplayFailed: the history does not replay (a ``NondeterminismError``: the code
                diverged from it), or cannot be read; the driver is discarded.
            RunQuarantined: a row of the history cannot be decoded; the driver is discarded.
        """
        driver = self.new(run)
        if run.progress[0] == 0:
            return driver  # a new run (or one that never got to its first step): no history
        self._stats["replays"] += 1
        position = 0  # of the activation being replayed
        try:
            with paused_gc():
                if stored is None:
                    with self._store.read() as txn:
                        prefix = history_key(run.record.run_id, 0)[:-8]
                        stored = list(txn.prefix("histories", prefix))
                # Decoded one at a time: a long history never has all its records alive at once.
                codec, activate, recorded = self.codec, driver.activate, driver.recorded
                for k, data in stored:
                    position += 1
                    try:
                        index, at, events, commands = read_activation(codec, data)
                    except Exception as exc:  # whatever the decoder raises, the row is unreadable
                        raise _quarantined(k, data, exc) from exc
                    if index == 1 and events and type(events[0]) is Started:
                        # Before replaying: workflow code sees the context from its first step on.
                        run.restore_context(events[0].context)
                    activate(at, events, expected=commands)
                    recorded(len(data))
        except RunQuarantined:
            driver.close()
            raise
        except BaseException as exc:  # the caller fails the task with it
            if is_ctrl_c(exc):
                raise
            driver.close()
            raise ReplayFailed(position, exc) from exc
        run.replayed(len(stored))
        return driver

    def touch(self, run: Run) -> None:
        """``run`` was just activated: most recently used; evict the oldest idle ones."""
        self._stats["evictions"] += self._runs.touch(run)


def _quarantined(k: bytes, data: bytes, exc: Exception) -> RunQuarantined:
    error = decode_error(exc, "histories", k)
    return RunQuarantined(QuarantinedRow(table="histories", key=k, data=data, error=error))


class paused_gc:  # noqa: N801 - used as a function: ``with paused_gc():``
    """No cyclic garbage collection while a history replays (or a pass runs).

    A replay allocates many objects that live until it ends, so the collector's passes
    find nothing to free: on a 100k-event history they were most of the replay's time.
    Garbage made meanwhile is collected after; a collector the application disabled stays
    disabled. A class, not a generator: every executor and activity pass enters one.
    """

    __slots__ = ("enabled",)

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *_: object) -> None:
        if self.enabled:
            gc.enable()
