"""The local host's store, as its parts use it: commits, retried bookkeeping, run records."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from roost._errors import Error
from roost.workflow._history import Started
from roost.workflow._history_format import decode_activation
from roost.workflow._local._records import RunRecord, history_key, read_progress
from roost.workflow._local._task_failure import task_backoff

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from roost.storage import Codec, ReadTxn, Store, WriteTxn
    from roost.workflow._local._run import Run

__all__ = ["Commits"]

log = logging.getLogger("roost.workflow")


class Commits:
    """Commits through the node (group-committed), and the reads every part shares."""

    __slots__ = ("_codec", "_stopping", "_store", "_transact")

    def __init__(
        self,
        *,
        store: Store,
        codec: Codec,
        transact: Callable[[Callable[[WriteTxn], Any]], Any],
        stopping: Callable[[], bool],
    ) -> None:
        """Build it from the few collaborators it uses.

        Args:
            store: the node's store (read transactions; blocking commits for recovery).
            codec: decodes run records and histories.
            transact: the node's commit (``Node.transact``: inline under a mock clock).
            stopping: whether the node is stopping (a retried commit then gives up).
        """
        self._store, self._codec, self._transact, self._stopping = store, codec, transact, stopping

    async def transact(self, fn: Callable[[WriteTxn], Any]) -> Any:
        """Commit ``fn``'s writes in the next group transaction; its result once durable."""
        return await self._transact(fn)

    async def retrying(self, fn: Callable[[WriteTxn], Any], what: str) -> bool:
        """Commit the runtime's own bookkeeping ``fn``, retrying a failed commit.

        A store that refuses writes (a full disk, say) must not stop the node: the
        failure is logged and the same writes are tried again after a backoff, until they
        commit (True) or the node stops (False: the restart recovers from what is stored).
        """
        failures = 0
        while True:
            try:
                await self._transact(fn)
            except Error:
                if self._stopping():
                    return False
                failures += 1
                delay = task_backoff(failures)
                log.exception("%s failed (try %d); trying again in %gs", what, failures, delay)
                await trio.sleep(delay)
            else:
                return True

    def read(self) -> AbstractContextManager[ReadTxn]:
        """A read transaction (a consistent snapshot of every table)."""
        return self._store.read()

    def transact_sync(self, fn: Callable[[WriteTxn], Any]) -> Any:
        """Commit ``fn`` at once, blocking (recovery only, before the node serves)."""
        return self._store.transact_sync(fn)

    def stored_record(self, workflow_id: str) -> RunRecord | None:
        """The latest run record of ``workflow_id``, open or closed."""
        with self._store.read() as txn:
            data = txn.get("runs", workflow_id.encode())
            return read_progress(txn, self._codec, self._codec.decode(data)) if data else None

    def input_of(self, run: Run) -> list[Any]:
        """The input ``run`` started with (for a retry or the next cron run)."""
        if run.driver is not None and run.driver.started is not None:
            return list(run.driver.started.args)
        with self._store.read() as txn:
            first = txn.get("histories", history_key(run.record.run_id, 1))
        if first is None:
            return []
        started = decode_activation(self._codec, first).events[0]
        return list(started.args) if isinstance(started, Started) else []
