"""The loop watchdog: a thread that notices when trio's loop has not come round in time.

Every process, activity and workflow activation of a node shares one trio thread, so code
that blocks it (``time.sleep`` in an ``async def``, a long computation, a C call that does
not return) stalls all of them. A daemon thread pings the loop every quarter of the
threshold (``TrioToken.run_sync_soon``: a callback the loop runs on its next pass, at no
cost to the loop between pings); a ping still unanswered after the threshold is a stall.
The first look that sees it logs, at WARNING, what is running (the workflow activation,
activity or process, from the blocked thread's frames) with its stack; when the loop
answers, the stall's length is added to ``stall_seconds``.

What the watchdog cannot do is stop the code: a thread cannot preempt another thread's C
call, and one that holds the GIL (a catastrophic regular expression, say) even keeps the
watchdog from running until it returns; then the warning comes late, naming the code the
call returned to. Blocking or CPU-heavy code belongs in a sync activity, which runs in a
worker thread (docs/processes.md, "Blocking code").
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    import types
    from collections.abc import Callable

__all__ = ["DEFAULT_STALL_THRESHOLD", "LoopWatchdog", "describe_running"]

log = logging.getLogger("roost.loop")

DEFAULT_STALL_THRESHOLD = 1.0
_ROOST_DIR = str(Path(__file__).resolve().parents[1])
_TRIO_RUN = str(Path(trio.__file__).resolve().parent / "_core" / "_run.py")
_STACK_FRAMES = 12


class LoopWatchdog:
    """Watches one trio loop: its stalls, counted and timed, and a warning for each.

    The thread's round, every quarter of the threshold: ``check()`` (is the ping sent
    last still unanswered after the threshold? then report the stall, once), then
    ``tick()`` (send a ping unless one is out). A test may drive both itself, with a
    clock of its own and, outside a trio loop, a ``post`` of its own.
    """

    def __init__(
        self,
        threshold: float = DEFAULT_STALL_THRESHOLD,
        *,
        clock: Callable[[], float] | None = None,
        post: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """Watch with ``threshold`` seconds.

        Args:
            threshold: how long the loop may not run before it is a stall.
            clock: what times the stalls (default ``time.monotonic``).
            post: how a ping reaches the loop (default: ``run()`` uses the loop's
                ``TrioToken.run_sync_soon``).
        """
        self.threshold = threshold
        self.stalls = 0
        self.stall_seconds = 0.0
        self.clock = clock or time.monotonic
        self._post = post
        self._loop_thread = threading.get_ident()
        self._sent = 0.0  # when the ping that is out was sent; 0.0: none is out
        self._reported = 0.0  # the _sent of the stall reported
        self._stop = threading.Event()

    def tick(self) -> None:
        """Send the loop a ping, unless one is out (the watchdog's thread)."""
        if self._sent or self._post is None:
            return
        self._sent = self.clock() or 1e-9  # set before the loop can answer it
        self._post(self._pong)

    def _pong(self) -> None:
        """The loop ran the ping: a stall reported meanwhile is over (the loop's thread)."""
        sent, self._sent = self._sent, 0.0
        if sent and self._reported == sent:
            took = self.clock() - sent
            self.stall_seconds += took
            log.warning("the event loop ran again after a stall of %.1fs", took)
        self._reported = 0.0

    def check(self) -> str | None:
        """Report a stall in progress, once: the warning's text, or None if there is none."""
        sent = self._sent
        if not sent or sent == self._reported:
            return None
        stalled = self.clock() - sent
        if stalled <= self.threshold:
            return None
        self._reported = sent
        self.stalls += 1
        what, stack = describe_running(self._loop_thread)
        text = (
            f"the event loop has not run for {stalled:.1f}s (threshold {self.threshold:g}s): "
            f"{what} is blocking it. Every process, activity and workflow of the node waits "
            "meanwhile; run blocking or CPU-heavy code in a sync activity (a worker thread). "
            f"Its stack:\n{stack}"
        )
        log.warning("%s", text)
        return text

    async def run(self) -> None:
        """Watch the current trio loop until cancelled (from a thread of its own)."""
        self._loop_thread = threading.get_ident()
        self._post = trio.lowlevel.current_trio_token().run_sync_soon
        thread = threading.Thread(target=self._watch, name="roost.loop-watchdog", daemon=True)
        thread.start()
        try:
            await trio.sleep_forever()
        finally:
            self._stop.set()  # the thread ends within a quarter of the threshold

    def _watch(self) -> None:
        while not self._stop.wait(self.threshold / 4):
            try:
                self.check()
                self.tick()
            except trio.RunFinishedError:  # the loop ended before the node's close said so
                return
            except Exception:  # a frame that vanished under the look: look again next time
                log.debug("the loop watchdog's look failed", exc_info=True)


def describe_running(ident: int) -> tuple[str, str]:
    """What thread ``ident``'s trio loop is running now, and the stack of that code.

    The task is the one trio's run loop is stepping (a local of its frame); a roost frame
    on the way names it better: the workflow activation (its id and index), the activity
    attempt, the process (its PID and entry).
    """
    frame: types.FrameType | None = sys._current_frames().get(ident)
    inner: list[types.FrameType] = []
    task: Any = None
    while frame is not None:
        if frame.f_code.co_filename == _TRIO_RUN and frame.f_code.co_name == "unrolled_run":
            task = frame.f_locals.get("task")
            break
        inner.append(frame)
        frame = frame.f_back
    inner.reverse()  # outermost first
    what = f"trio task {task.name!r}" if task is not None else "code outside any trio task"
    for f in inner:
        named = _name(f)
        if named is not None:
            what = named
    summary = traceback.StackSummary.extract((f, f.f_lineno) for f in inner[-_STACK_FRAMES:])
    return what, "".join(summary.format()).rstrip()


def _name(frame: types.FrameType) -> str | None:
    """A roost frame's name for the work it runs, or None for any other frame.

    By the locals roost's runners keep: ``work`` (an activity attempt, its task's entry and
    workflow), ``run`` (a workflow run in an activation) and ``proc`` (a process).
    """
    if not frame.f_code.co_filename.startswith(_ROOST_DIR):
        return None
    local: dict[str, Any] = dict(frame.f_locals)
    task = getattr(local.get("work"), "task", None)
    if task is not None and hasattr(task, "entry"):
        return f"activity {task.entry!r} of workflow {getattr(task, 'workflow_id', '?')!r}"
    run: Any = local.get("run")
    if hasattr(run, "pid") and hasattr(run, "next_index"):
        return f"workflow {run.pid.id!r} (activation {run.next_index})"
    proc: Any = local.get("proc")
    if hasattr(proc, "pid") and hasattr(proc, "entry"):
        entry = proc.entry.id if proc.entry is not None else "attached"
        return f"process {proc.pid} ({entry})"
    return None
