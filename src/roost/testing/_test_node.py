"""``roost.testing.open_test_node``: a node for tests, on a temporary store, skipping time.

Time skipping works under a plain ``trio.run``: the node installs trio's ``MockClock`` as
the run's clock (aligned with the current time, so deadlines already set stay valid) and
turns on its autojump, so whenever every task is waiting the clock jumps to the next
deadline. Under that clock the node commits and runs sync activities inline (no worker
threads), so a jump can never pass over work in flight. When the block ends, autojump is
switched off again and the clock runs at real speed from where it stands (it never goes
backwards). A MockClock the caller already uses (pytest-trio's ``autojump_clock``) is used
as it is, with autojump turned on for the block.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.actors._api import send
from roost.actors._app import App
from roost.actors._current import reset_current, set_current
from roost.actors._node import Node
from roost.actors._open import NodeHandle, open_node
from roost.actors._process import Process

__all__ = ["TestNode", "open_test_node"]

_INSTALLED: set[int] = set()  # ids of the MockClocks this module installed


class _SkippingTime:
    """Autojump on for the block; restored (never going backwards) afterwards."""

    def __init__(self) -> None:
        from trio._core._run import GLOBAL_RUN_CONTEXT  # noqa: PLC0415 - no public API
        from trio.testing import MockClock  # noqa: PLC0415 - keeps pytest out of roost

        current = trio.lowlevel.current_clock()
        if isinstance(current, MockClock):
            self.clock = current
        else:
            # trio fixes the clock at trio.run; replacing the runner's clock is the one
            # way to skip time without asking the caller to pass one.
            self.clock = MockClock(rate=0.0)
            self.clock.jump(max(0.0, current.current_time()))
            GLOBAL_RUN_CONTEXT.runner.clock = self.clock
            _INSTALLED.add(id(self.clock))
        self.ours = id(self.clock) in _INSTALLED
        self.saved = (self.clock.rate, self.clock.autojump_threshold)
        if self.ours:
            self.clock.rate = 0.0
        self.clock.autojump_threshold = 0

    def restore(self) -> None:
        if self.ours:
            self.clock.autojump_threshold = math.inf
            self.clock.rate = 1.0
        else:
            self.clock.autojump_threshold = self.saved[1]


class ActivityFaults:
    """Injected activity failures: ``take(entry)`` is the next error to raise, or None."""

    def __init__(self) -> None:
        self._plans: dict[str, list[Any]] = {}

    def add(self, entry: str, times: int, error: Error) -> None:
        self._plans[entry] = [times, error]

    def take(self, entry: str) -> Error | None:
        plan = self._plans.get(entry)
        if plan is None or plan[0] <= 0:
            return None
        plan[0] -= 1
        return plan[1].clone()  # type: ignore[no-any-return]


class TestNode:
    """What ``open_test_node`` yields: the node, plus test helpers.

    The ``async with`` block is a process of the node, as with ``open_node``; after
    ``restart()`` it is a new process of the new node.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, app: App, data_dir: Path, options: Mapping[str, Any], clock: Any) -> None:
        self.app = app
        self.data_dir = data_dir
        self.clock = clock
        self._options = dict(options)
        self._handle: NodeHandle | None = None
        self._stop = trio.Event()
        self._up = trio.Event()
        self._closing = False
        self._body: Process | None = None
        self._token: Any = None
        self.faults = ActivityFaults()

    # -- the node's life -----------------------------------------------------------------

    async def _serve(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        started = False
        while not self._closing:
            async with open_node(self.app, self.data_dir, shutdown_grace=0, **self._options) as h:
                self._handle = h
                self._node.ext["activity_faults"] = self.faults
                self._stop = trio.Event()
                self._up.set()
                if not started:
                    started = True
                    task_status.started()
                await self._stop.wait()

    @property
    def _node(self) -> Node:
        if self._handle is None:
            raise Error("the test node is not running", kind=ErrorKind.INVALID_STATE)
        return self._handle._node

    def _attach(self) -> None:
        self._body = self._node.attach()
        self._token = set_current(self._body)

    def _detach(self) -> None:
        if self._body is not None:
            if self._body.alive:
                self._node.exit(self._body, None, None)
            reset_current(self._token)
            self._body = None

    async def restart(self) -> None:
        """Crash and restart: drop every in-memory state, reopen the store, recover.

        Like a crash, processes are stopped at once (no grace) and nothing is written on
        the way down: workflows resume from what they committed, by replay; activities
        that were running run again. The block becomes a process of the new node (monitors
        and messages of the old one are gone, as after a real restart).
        """
        self._detach()
        self._up = trio.Event()
        self._stop.set()
        await self._up.wait()
        self._attach()

    async def _close(self) -> None:
        self._detach()
        self._closing = True
        self._stop.set()

    # -- helpers -------------------------------------------------------------------------

    async def wait_until_blocked(self) -> None:
        """Return once every task of the node (and the test) waits, before time skips.

        Workflows have then taken every step they can without time passing or an outside
        event: the moment to inspect them or to deliver the next signal.
        """
        from trio.testing import wait_all_tasks_blocked  # noqa: PLC0415 - keeps pytest out

        await wait_all_tasks_blocked()

    async def signal(self, dest: Pid | str, topic: str, payload: Any = None) -> None:
        """Send a message (to a workflow: a signal) and wait until it is durably accepted."""
        await send(dest, topic, payload)

    def fail_activity(self, entry: Any, times: int = 1, error: Error | None = None) -> None:
        """Make the next ``times`` attempts of activity ``entry`` fail with ``error``.

        The default error is a retryable ``Unavailable`` ("injected failure"), so retry
        policies are exercised as with a real outage. Counts survive ``restart()``.
        """
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise invalid(f"times must be an int >= 0, got {times!r}")
        entry_id = self.app.resolve(entry).id
        failure = error or Error(
            f"injected failure of {entry_id!r}",
            kind=ErrorKind.UNAVAILABLE,
            retryable=True,
            details={"injected": True},
        )
        self.faults.add(entry_id, times, failure)

    # -- the NodeHandle calls ------------------------------------------------------------

    @property
    def pid(self) -> Pid:
        """The PID of the block (a new one after each restart)."""
        if self._body is None:
            raise Error("the test node is not running", kind=ErrorKind.INVALID_STATE)
        return self._body.pid

    @property
    def incarnation(self) -> int:
        """How many times a node has started on this data directory."""
        return self._node.incarnation

    def describe(self, workflow_id: str) -> dict[str, Any]:
        """See ``NodeHandle.describe``."""
        return self._current.describe(workflow_id)

    def history(self, workflow_id: str) -> list[Any]:
        """See ``NodeHandle.history``."""
        return self._current.history(workflow_id)

    def list_workflows(self, query: str | None = None) -> list[dict[str, Any]]:
        """See ``NodeHandle.list_workflows``."""
        return self._current.list_workflows(query)

    def process_count(self) -> int:
        """See ``NodeHandle.process_count``."""
        return self._current.process_count()

    @property
    def dlq(self) -> Any:
        """See ``NodeHandle.dlq`` (the dead letters of the current node's queues)."""
        return self._current.dlq

    @property
    def _current(self) -> NodeHandle:
        self._node  # noqa: B018 - raises when not running
        assert self._handle is not None
        return self._handle


@asynccontextmanager
async def open_test_node(
    app: App,
    *,
    name: str = "local",
    workflow_cache: int = 10_000,
    data_dir: str | Path | None = None,
    workflow_unread_limit: int = 10_000,
    signing_keys: Mapping[str, bytes] | None = None,
    signing_key: str | None = None,
    cron: bool = True,
) -> AsyncIterator[TestNode]:
    """A node for tests: a temporary LMDB store and a clock that skips idle time.

    Inside the block ``await roost.sleep("30d")`` (in a workflow or a process) returns at
    once in real time, with ``roost.now()`` 30 days later. No special clock is needed:
    plain ``trio.run(main)`` works, and so does pytest-trio.

    Args:
        app: the entries the node runs.
        name: the node name.
        workflow_cache: as for ``open_node`` (1 makes every step rebuild by replay).
        data_dir: keep the store there instead of a temporary directory (not removed).
        workflow_unread_limit: as for ``open_node``.
        signing_keys: as for ``open_node`` (the key ring; docs/security.md).
        signing_key: as for ``open_node``.
        cron: False keeps the app's cron triggers from firing (the skipping clock would
            otherwise fire every one of them as time jumps ahead); as for ``open_node``.

    Example::

        async def test_reminder():
            async with roost.testing.open_test_node(app) as node:
                node.fail_activity("app:send_email", times=2)
                pid = await process.spawn("app:reminder", "u-1")
                await node.wait_until_blocked()
                await node.signal(pid, "snooze", "1d")
                await node.restart()                      # crash; recover by replay
                assert node.describe(pid.id)["status"] == "running"
    """
    skipping = _SkippingTime()
    temp = data_dir is None
    path = Path(tempfile.mkdtemp(prefix="roost-test-")) if data_dir is None else Path(data_dir)
    options = {
        "name": name,
        "workflow_cache": workflow_cache,
        "workflow_unread_limit": workflow_unread_limit,
        "signing_keys": signing_keys,
        "signing_key": signing_key,
        "cron": cron,
    }
    try:
        async with trio.open_nursery() as nursery:
            node = TestNode(app, path, options, skipping.clock)
            await nursery.start(node._serve)
            node._attach()
            try:
                yield node
            finally:
                await node._close()
    finally:
        skipping.restore()
        if temp:
            shutil.rmtree(path, ignore_errors=True)
