"""The task watchdog: one guard per thread, armed per activation, firing only when overdue."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from roost.workflow._local import _watchdog
from roost.workflow._local._watchdog import Guard, TaskTimeout, guard


def spin(seconds: float) -> None:
    """Compute without yielding for up to ``seconds`` (what a stuck activation does)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_an_overdue_activation_is_stopped_and_the_next_one_starts_clean() -> None:
    with pytest.raises(TaskTimeout), guard(0.1) as first:
        spin(10.0)
    assert first.fired
    assert "test_workflow_watchdog.py" in first.location
    assert not first.armed
    with guard(5.0) as second:  # the same thread's guard, armed afresh
        spin(0.2)  # longer than the first deadline: only this one's counts
    assert second is first
    assert not second.fired and second.location == "<unknown>"


def test_each_thread_has_its_own_guard() -> None:
    here = guard(1.0)
    seen: list[Guard] = []
    worker = threading.Thread(target=lambda: seen.append(guard(1.0)))
    worker.start()
    worker.join()
    assert seen and seen[0] is not here
    assert seen[0].thread != here.thread


def test_a_dead_watchdog_thread_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = _watchdog._watch_forever
    monkeypatch.setattr(_watchdog, "_THREAD", [])  # the running watchdog's slot, emptied
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # its death is expected

    def dies() -> None:
        raise RuntimeError("the watchdog's loop failed")

    monkeypatch.setattr(_watchdog, "_watch_forever", dies)
    with guard(5.0):
        pass  # starts a watchdog thread, which dies at once
    dead = _watchdog._THREAD[0] if _watchdog._THREAD else None
    if dead is not None:
        dead.join()
    assert _watchdog._THREAD == []  # a thread that ended gives up its slot
    monkeypatch.setattr(_watchdog, "_watch_forever", watch)
    with pytest.raises(TaskTimeout), guard(0.1):
        spin(10.0)  # stopped all the same: by a watchdog thread started again
    assert _watchdog._THREAD[0] is not dead and _watchdog._THREAD[0].is_alive()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_while_the_lock_is_held_can_guard() -> None:
    with guard(5.0):  # this thread's guard exists; the watchdog thread runs
        pass
    held, release = threading.Event(), threading.Event()

    def holder() -> None:  # stands for the watchdog thread inside its ``with _LOCK``
        with _watchdog._LOCK:
            held.set()
            release.wait()

    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:  # the child: one activation under guard, then a clean exit
        signal.alarm(10)  # a hang on the inherited lock ends the child (SIGALRM), not the run
        try:
            with guard(5.0) as mine:
                pass
            os._exit(0 if list(_watchdog._GUARDS.values()) == [mine] else 3)
        finally:
            os._exit(2)
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the forked child hung or kept stale guards"
