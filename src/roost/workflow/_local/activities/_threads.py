"""Worker threads for sync activities: fed in batches, grown only when a job blocks.

A thread hop (``trio.to_thread.run_sync``) costs far more than a quick sync activity, so
the attempts ready in one pass go to the pool together and one thread drains them. A
thread that finds the queue empty lingers briefly for the next batch before its hop
ends. Sync activities may block (I/O, sleeps): while jobs wait and no job has started
for ``GROW_AFTER`` seconds, as many threads join as there are (doubling), up to
``MAX_THREADS``.

Results come back to the trio thread in bursts: a thread finishing a job posts one
delivery (``run_sync_soon``) unless one is already pending, and that delivery takes every
job finished meanwhile. A job the runtime drops (timed out, cancelled) is never started if
it is still queued; if it is running, its thread is abandoned (it runs to its end, its
result is discarded, and it leaves the pool) and the pool may grow past it. The pool's
threads take no tokens of trio's default limiter: abandoned threads would keep theirs,
and once they held all of them neither the pool nor the store could start a thread.

A thread may outlive its node: once the pool is closed (its nursery ended), what a
thread hands back is dropped, and no callback on the trio thread ever raises (it would
crash the host program's trio run).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable
from contextvars import Context
from typing import Any, Final

import trio

from roost.actors._contain import in_worker_thread

__all__ = ["GROW_AFTER", "MAX_THREADS", "SyncJob", "ThreadPool", "never_raising"]

log = logging.getLogger("roost.activity")

# How many threads the pool keeps at once (abandoned threads have left it).
MAX_THREADS: Final = 40
# How long queued jobs wait on busy threads before more threads join (seconds): longer
# than the GIL's switch interval (5 ms), or a thread merely waiting for it looks blocked.
GROW_AFTER: Final = 0.02
# How long an idle thread waits for the next batch before its hop ends (seconds).
LINGER: Final = 0.05

QUEUED, RUNNING, DONE, DROPPED = range(4)


def never_raising(fn: Callable[..., None]) -> Callable[..., None]:
    """``fn`` as a ``run_sync_soon`` callback: what it raises is logged, never propagated.

    trio treats an exception from such a callback as its own bug and crashes the whole
    run, the host program's included.
    """

    def callback(*args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("roost: a callback from an activity thread failed; ignored")

    callback.__name__ = fn.__name__
    callback.__doc__ = fn.__doc__
    return callback


class SyncJob:
    """One sync activity attempt: what to call, and (once done) its value or exception."""

    __slots__ = ("args", "ctx", "error", "fn", "owner", "state", "value")

    def __init__(self, owner: Any, ctx: Context, fn: Callable[..., Any], args: Any) -> None:
        self.owner = owner  # what the runtime tracks the attempt by
        self.ctx = ctx
        self.fn = fn
        self.args = args
        self.state = QUEUED
        self.value: Any = None
        self.error: BaseException | None = None


class ThreadPool:
    """Runs sync jobs in a few worker threads; hands finished ones to ``deliver``."""

    def __init__(self, nursery: trio.Nursery, deliver: Callable[[list[SyncJob]], None]) -> None:
        self._nursery = nursery
        self._deliver = deliver
        self._token = trio.lowlevel.current_trio_token()
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[SyncJob] = deque()
        self._done: list[SyncJob] = []
        self._posted = False  # a delivery is scheduled on the trio thread
        self._threads = 0  # threads in the pool (abandoned ones left it)
        self._idle = 0  # of those, waiting for work
        self._started = 0  # jobs started so far (the growth check watches it)
        self._watching = False
        self.hops = 0  # thread hops made (trio.to_thread.run_sync calls)
        # The pool bounds its own threads (MAX_THREADS); abandoned ones, which still run,
        # must not keep new ones from starting, so the limiter itself never blocks.
        self._limiter = trio.CapacityLimiter(math.inf)
        self.closed = False  # the nursery has ended: nothing is delivered or started

    @property
    def threads(self) -> int:
        """Threads in the pool now."""
        return self._threads

    def submit(self, jobs: list[SyncJob]) -> None:
        """Queue ``jobs`` (from the trio thread): one batch for the pool."""
        if self.closed:
            return
        with self._cond:
            self._queue.extend(jobs)
            start = self._threads == 0
            if start:
                self._threads += 1
            elif self._idle:
                self._cond.notify(min(self._idle, len(jobs)))
        if start:
            self._hop()
        if not self._watching:
            self._watching = True
            self._nursery.start_soon(self._watch, name="roost.activity threads")

    def drop(self, job: SyncJob) -> None:
        """Never start ``job``, or abandon its thread if it is running (from trio)."""
        with self._cond:
            if job.state == RUNNING:
                self._threads -= 1  # its thread leaves the pool once the job returns
            if job.state in (QUEUED, RUNNING):
                job.state = DROPPED

    def _hop(self) -> None:
        self.hops += 1
        self._nursery.start_soon(self._thread, name="roost.activity thread")

    async def _thread(self) -> None:
        # Cancelled (the node stops), the thread is abandoned: it leaves once idle.
        await trio.to_thread.run_sync(self._drain, abandon_on_cancel=True, limiter=self._limiter)

    async def _watch(self) -> None:
        """While jobs wait, add a thread whenever none started for GROW_AFTER."""
        try:
            seen = -1
            while True:
                with self._cond:
                    if not self._queue:
                        return
                    grow = 0
                    if self._started == seen and self._idle == 0:
                        grow = min(self._threads or 1, len(self._queue))
                        grow = max(0, min(grow, MAX_THREADS - self._threads))
                    self._threads += grow
                    seen = self._started
                for _ in range(grow):
                    self._hop()
                await trio.sleep(GROW_AFTER)
        finally:
            self._watching = False

    def _drain(self) -> None:
        """A worker thread: run queued jobs until none comes within LINGER."""
        cond = self._cond
        while True:
            with cond:
                while True:
                    if self._queue:
                        job = self._queue.popleft()
                        if job.state != QUEUED:
                            continue  # dropped before it started
                        job.state = RUNNING
                        self._started += 1
                        break
                    self._idle += 1
                    woken = cond.wait(LINGER)
                    self._idle -= 1
                    if not woken and not self._queue:
                        self._threads -= 1
                        return
            try:
                job.value = job.ctx.run(in_worker_thread, job.fn, *job.args)
            except BaseException as exc:  # noqa: BLE001 - the attempt's failure, handed back
                job.error = exc
            with cond:
                if job.state == DROPPED:
                    return  # abandoned: this thread already left the pool
                job.state = DONE
                self._done.append(job)
                post = not self._posted
                self._posted = True
            if post:
                try:
                    self._token.run_sync_soon(self._hand_back)
                except trio.RunFinishedError:
                    return  # the trio run has ended: nobody wants the result

    @never_raising
    def _hand_back(self) -> None:
        """On the trio thread: hand every job finished meanwhile to ``deliver``."""
        with self._cond:
            done, self._done = self._done, []
            self._posted = False
        if done and not self.closed:  # a closed pool's node has stopped: results dropped
            self._deliver(done)
