"""Drivers of runs: built for new runs, rebuilt by replay, kept in an LRU cache."""

from __future__ import annotations

import contextlib
import contextvars
import gc
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from roost._pid import Pid
from roost.actors._process import WorkflowProcess, set_current
from roost.mailbox._backend import use_backend
from roost.workflow._driver import Driver
from roost.workflow._history import Started
from roost.workflow._records import history_key
from roost.workflow._run import Run

if TYPE_CHECKING:
    from roost.workflow._manager import WorkflowManager

__all__ = ["new_driver", "paused_gc", "rebuild", "touch"]


def _context_factory(m: WorkflowManager, run: Run) -> Callable[[Driver], contextvars.Context]:
    def make(driver: Driver) -> contextvars.Context:
        ctx = contextvars.copy_context()
        proc = WorkflowProcess(run.pid, run.entry, driver, run.context, m.node)
        ctx.run(set_current, proc)
        ctx.run(use_backend, driver.backend)
        return ctx

    return make


def new_driver(m: WorkflowManager, run: Run) -> Driver:
    """A fresh driver for ``run``, its PIDs (spawned processes, children, replies) fixed."""
    host = m.node.app.default_host
    prefix = f"{run.record.workflow_id}.{run.record.run_id[:6]}"
    node_name = m.node.name

    def spawn_pid(seq: int) -> Pid:
        # Deterministic, so replay returns the same PID; unique per run and seq.
        return Pid.trusted(node_name, host, f"{prefix}.{seq}")

    def check(value: object, what: str) -> None:
        m.codec.encode(value, what=what)

    return Driver(
        run.entry.fn,
        make_context=_context_factory(m, run),
        check=check,
        spawn_pid=spawn_pid,
        child_pid=lambda workflow_id: Pid.trusted(node_name, m.host, workflow_id),
        reply_pid=lambda seq: m.replies.pid(run, seq),
    )


def rebuild(m: WorkflowManager, run: Run) -> Driver:
    """A driver brought back to where ``run`` is, by replaying its stored history.

    Raises:
        roost.NondeterminismError: the code no longer replays the history.
    """
    driver = new_driver(m, run)
    if run.record.activations == 0:
        return driver  # a new run (or one that never got to its first step): no history
    m.stats["replays"] += 1
    with paused_gc():
        with m.store.read() as txn:
            stored = [v for _, v in txn.prefix("histories", history_key(run.record.run_id, 0)[:-8])]
        # Decoded one at a time: a long history never has all its records alive at once.
        for data in stored:
            act = m.codec.decode(data)
            if act.index == 1 and act.events and isinstance(act.events[0], Started):
                # Before replaying: workflow code sees the context from its first step on.
                run.context = act.events[0].context
            driver.activate(act.at, act.events, expected=act.commands)
    run.next_index = len(stored) + 1
    driver.history_size = run.record.history_size
    return driver


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection while a history replays.

    A replay allocates many objects that live until it ends, so the collector's passes
    find nothing to free: on a 100k-event history they were most of the replay's time.
    Garbage made meanwhile is collected after; a collector the application disabled stays
    disabled.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def touch(m: WorkflowManager, run: Run) -> None:
    """``run`` was just activated: most recently used; evict the oldest idle ones."""
    cached = m.cached
    cached[run.record.workflow_id] = run
    cached.move_to_end(run.record.workflow_id)
    while len(cached) > m.cache_size:
        oldest = next(iter(cached.values()))
        if oldest.active or oldest is run:
            break
        del cached[oldest.record.workflow_id]
        if oldest.driver is not None:
            oldest.driver.close()
            oldest.driver = None
        m.stats["evictions"] += 1
