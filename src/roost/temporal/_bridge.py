"""The bridge between a node's trio loop and the asyncio loop temporalio runs on.

temporalio is asyncio; a node is trio. Each Temporal host runs one asyncio loop in a
thread of its own. trio code awaits an asyncio coroutine with ``run`` (it is scheduled
with ``run_coroutine_threadsafe``, and its outcome wakes the trio task through the trio
token), or blocks on one with ``blocking`` (for the protocol's synchronous inspection
calls). asyncio code awaits trio code with ``to_trio``: the function runs as a task of the
host's trio nursery, and its outcome comes back through ``call_soon_threadsafe``.
Cancelling either side's waiter cancels the other side's work.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import trio

from roost._errors import Error, ErrorKind
from roost.actors._contain import must_propagate

__all__ = ["Bridge"]

log = logging.getLogger("roost.temporal")

T = TypeVar("T")

# How long a blocking call from the trio thread may wait for the asyncio side (seconds).
BLOCKING_TIMEOUT = 30.0


class Bridge:
    """One asyncio loop in its own thread, and the calls that cross to and from it."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The asyncio loop (started)."""
        if self._loop is None:
            raise Error("the Temporal bridge is not started", kind=ErrorKind.INVALID_STATE)
        return self._loop

    async def start(self, nursery: trio.Nursery) -> None:
        """Start the asyncio thread; trio work asked from it runs in ``nursery``."""
        self._token = trio.lowlevel.current_trio_token()
        self._nursery = nursery
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="roost.temporal asyncio", daemon=True
        )
        self._thread.start()
        await trio.to_thread.run_sync(ready.wait)

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        ready.set()
        try:
            loop.run_forever()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    async def stop(self) -> None:
        """Stop the asyncio loop (its tasks are cancelled) and wait for its thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        await trio.to_thread.run_sync(thread.join)
        self._loop = None

    # -- trio -> asyncio -------------------------------------------------------------------

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the asyncio loop; its future (from any thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the asyncio loop from a trio task (cancelling one cancels it)."""
        future = self.submit(coro)
        return await self.wait(future)

    async def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Wait in trio for a future of the asyncio side; cancelling the wait cancels it."""
        if not future.done():
            done = trio.Event()
            token = self._token
            assert token is not None

            def wake(_: object) -> None:
                with contextlib.suppress(trio.RunFinishedError):  # the node stopped: nobody waits
                    token.run_sync_soon(done.set)

            future.add_done_callback(wake)
            try:
                await done.wait()
            except BaseException:
                future.cancel()
                raise
        else:  # done already: yield anyway, so every wait is a schedule point
            # (WorkflowHost.spawn relies on it); shielded, as a done call cannot be undone.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return future.result()

    def blocking(self, coro: Coroutine[Any, Any, T], timeout: float = BLOCKING_TIMEOUT) -> T:
        """Run ``coro`` on the asyncio loop and block the calling thread for its outcome.

        Raises:
            roost.Error: Unavailable when the asyncio side gives no answer within
                ``timeout`` seconds.
        """
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise Error(
                f"the Temporal server gave no answer within {timeout:g}s: check that it is "
                "running and reachable",
                kind=ErrorKind.UNAVAILABLE,
            ) from None

    # -- asyncio -> trio -------------------------------------------------------------------

    async def to_trio(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Await ``fn(*args)``, run as a task of the host's trio nursery (from asyncio).

        Cancelling the asyncio waiter cancels the trio task.

        Raises:
            roost.Error: Unavailable when the node has stopped (the task cannot start or
                was cancelled by the node's shutdown); else what ``fn`` raised.
        """
        loop = asyncio.get_running_loop()
        outcome: asyncio.Future[T] = loop.create_future()
        scope = trio.CancelScope()
        nursery, token = self._nursery, self._token
        assert nursery is not None
        assert token is not None

        def settle(value: Any, error: BaseException | None) -> None:
            if outcome.done():
                return
            if error is not None:
                outcome.set_exception(error)
            else:
                outcome.set_result(value)

        async def task() -> None:
            value: Any = None
            error: BaseException | None = None
            try:
                with scope:
                    value = await fn(*args)
                if scope.cancelled_caught:
                    error = asyncio.CancelledError()
            except BaseException as exc:
                if must_propagate(exc):  # the node is stopping
                    _post(loop, settle, None, _stopped())
                    raise
                error = exc
            _post(loop, settle, value, error)

        def start() -> None:  # a run_sync_soon callback: it must never raise
            try:
                nursery.start_soon(task)
            except RuntimeError:  # the nursery has closed: the node is stopping
                _post(loop, settle, None, _stopped())

        try:
            token.run_sync_soon(start)
        except trio.RunFinishedError:
            raise _stopped() from None
        try:
            return await outcome
        except asyncio.CancelledError:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)
            raise


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """Call ``fn(*args)`` on ``loop`` soon; nothing if the loop has closed."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _stopped() -> Error:
    return Error(
        "the node stopped while an activity ran on it", kind=ErrorKind.UNAVAILABLE, retryable=True
    )
