"""The task watchdog: one guard per thread, armed per activation, firing only when overdue."""

from __future__ import annotations

import threading
import time

import pytest

from roost.workflow._watchdog import Guard, TaskTimeout, guard


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
