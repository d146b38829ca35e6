"""The loop watchdog names the code that blocks the event loop, and counts the stall.

Driven without waiting: the blocking code sends the watchdog's ping itself, moves the
watchdog's clock (the test's) on, and has a thread take the watchdog's look while the loop
thread waits for it (a real block, of no length that matters). The watchdog's own thread
may take a look meanwhile too: it reports the same stall, once.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import roost
from roost import funcs
from roost.actors._loop_watch import LoopWatchdog
from roost.admin._metrics import metrics_text, new_registry

app = roost.App("stall")
WATCHED: dict[str, Any] = {}


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


def _block_for(seconds: float) -> None:
    watchdog = WATCHED["watchdog"]
    watchdog.tick()  # a ping is out (unless the watchdog's thread sent one already)
    WATCHED["clock"].now += seconds  # and the loop does not answer it for ``seconds``
    looks = threading.Thread(target=watchdog.check)
    looks.start()
    looks.join()  # the loop thread is blocked meanwhile, as by any blocking call


@app.activity
async def blocking_call(seconds: float) -> str:
    _block_for(seconds)
    return "done"


@app.workflow
async def calls_the_blocking_activity() -> str:
    return await funcs.call(blocking_call, 5.0)


@app.process
async def blocking_process() -> str:
    _block_for(3.0)
    return "done"


def _watch(node: roost.NodeHandle) -> LoopWatchdog:
    watchdog: LoopWatchdog = node._node.ext["loop_watchdog"]
    WATCHED["watchdog"], WATCHED["clock"] = watchdog, Clock()
    watchdog.clock = WATCHED["clock"]
    return watchdog


def _samples(node: roost.NodeHandle) -> dict[str, float]:
    text = metrics_text(new_registry(node)).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("roost_loop_")
    }


async def test_a_blocked_async_activity_is_named_in_a_warning_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="roost.loop")
    async with roost.open_node(app) as node:
        watchdog = _watch(node)
        assert _samples(node) == {
            "roost_loop_stalls_total": 0.0,
            "roost_loop_stall_seconds_total": 0.0,
        }
        result = await roost.process.with_options(id="w-1").exec(calls_the_blocking_activity)
        assert result == "done"
        # At least the 5 s the clock moved: a ping the watchdog's thread sent before the
        # test's clock went in was out a little longer.
        assert watchdog.stalls == 1
        assert watchdog.stall_seconds >= 5.0
        samples = _samples(node)
        assert samples["roost_loop_stalls_total"] == 1.0
        assert samples["roost_loop_stall_seconds_total"] == watchdog.stall_seconds
    stalls = [r for r in caplog.records if "has not run for" in r.getMessage()]
    assert len(stalls) == 1
    assert stalls[0].levelno == logging.WARNING
    message = stalls[0].getMessage()
    stalled = re.search(r"has not run for ([0-9.]+)s \(threshold 1s\)", message)
    assert stalled is not None and float(stalled.group(1)) >= 5.0
    assert "activity 'stall:blocking_call' of workflow 'w-1' is blocking it" in message
    assert "sync activity" in message  # the advice
    assert "test_loop_watchdog.py" in message and "in blocking_call" in message  # the stack
    assert any("ran again after a stall of" in r.getMessage() for r in caplog.records)


async def test_a_blocked_process_is_named_with_its_pid(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="roost.loop")
    async with roost.open_node(app) as node:
        watchdog = _watch(node)
        pid = await roost.process.spawn_monitored(blocking_process)
        event = await roost.process.events().receive()
        assert event.pid == pid
        assert watchdog.stalls == 1
    (stall,) = [r.getMessage() for r in caplog.records if "has not run for" in r.getMessage()]
    assert f"process {pid} (stall:blocking_process) is blocking it" in stall
    assert "in blocking_process" in stall


def test_only_a_ping_unanswered_past_the_threshold_is_a_stall() -> None:
    clock, posted = Clock(), []
    watchdog = LoopWatchdog(1.0, clock=clock, post=posted.append)
    watchdog.tick()
    clock.now += 0.9
    assert watchdog.check() is None  # within the threshold
    watchdog.tick()
    assert len(posted) == 1  # one ping out at a time
    posted.pop()()  # the loop answers
    clock.now += 10.0
    assert watchdog.check() is None  # no ping out: nothing to be late
    watchdog.tick()
    clock.now += 1.1
    report = watchdog.check()
    assert report is not None and "has not run for 1.1s (threshold 1s)" in report
    assert watchdog.check() is None  # reported once
    clock.now += 0.4
    posted.pop()()
    assert (watchdog.stalls, watchdog.stall_seconds) == (1, pytest.approx(1.5))
    watchdog.tick()
    clock.now += 0.5
    posted.pop()()
    assert (watchdog.stalls, watchdog.stall_seconds) == (1, pytest.approx(1.5))


async def test_open_node_refuses_a_loop_stall_that_is_not_a_positive_duration() -> None:
    for bad in ("0s", "-1s", "soon"):
        with pytest.raises(roost.Error) as info:
            async with roost.open_node(app, loop_stall=bad):
                pass
        assert info.value.kind is roost.ErrorKind.INVALID
        assert "loop_stall" in info.value.message
