"""Time and chance: ``sleep``, ``after``, ``ticker``, ``now``, UUIDs and randomness.

Outside workflows these are the plain operations (on the node's clock, so a trio
MockClock drives them in tests); inside workflows the driver records them.
"""

from __future__ import annotations

import datetime as dt
import os
import random as _random
import time
import uuid

import trio

from roost._duration import Duration, parse_duration
from roost._errors import invalid
from roost.actors._current import bound_node, current_process, maybe_current_process
from roost.actors._process import Process
from roost.actors._workflow_ops import WorkflowOps
from roost.mailbox._channel import Channel

__all__ = ["after", "now", "random", "random_bytes", "sleep", "ticker", "uuid4", "uuid7"]


def _workflow() -> WorkflowOps | None:
    proc = maybe_current_process()
    return proc.workflow if proc is not None else None


async def sleep(duration: Duration) -> None:
    """Sleep for ``duration`` ("250ms", "5s", a timedelta or seconds); durable in workflows."""
    seconds = parse_duration(duration, what="sleep duration")
    workflow = _workflow()
    if workflow is not None:
        await workflow.sleep(seconds)
    else:
        await trio.sleep(seconds)


def after(duration: Duration) -> Channel[dt.datetime]:
    """A channel that receives the time once ``duration`` has passed (a select timeout)."""
    seconds = parse_duration(duration, what="after duration")
    workflow = _workflow()
    if workflow is not None:
        return workflow.after(seconds)
    proc = current_process("roost.after")
    return proc.node.timers.add(seconds, alive=lambda: proc.alive)


def ticker(duration: Duration) -> Channel[dt.datetime]:
    """A channel that receives the time every ``duration``; unread ticks are skipped."""
    seconds = parse_duration(duration, what="ticker period", allow_zero=False)
    workflow = _workflow()
    if workflow is not None:
        return workflow.ticker(seconds)
    proc = current_process("roost.ticker")
    return proc.node.timers.add(seconds, period=seconds, alive=lambda: proc.alive)


def now() -> dt.datetime:
    """The current time as an aware UTC datetime (the node's clock inside a node)."""
    proc = maybe_current_process()
    if proc is None:
        node = bound_node()  # an activity or a queue step: its node's clock
        return node.now() if node is not None else dt.datetime.now(dt.UTC)
    if proc.workflow is not None:
        return proc.workflow.now  # type: ignore[no-any-return]
    assert isinstance(proc, Process)
    return proc.node.now()


def uuid4() -> uuid.UUID:
    """A random UUID (drawn from the run's recorded seed inside workflows)."""
    workflow = _workflow()
    return workflow.uuid4() if workflow is not None else uuid.uuid4()


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7: 48-bit Unix ms, then random bits)."""
    workflow = _workflow()
    if workflow is not None:
        return workflow.uuid7()  # type: ignore[no-any-return]
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68 & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return uuid.UUID(int=value)


def random_bytes(n: int) -> bytes:
    """``n`` random bytes."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise invalid(f"random_bytes takes an int >= 0, got {n!r}")
    workflow = _workflow()
    return workflow.random_bytes(n) if workflow is not None else os.urandom(n)


def random() -> _random.Random:
    """A ``random.Random`` seeded from the OS (from the run's recorded seed in workflows)."""
    workflow = _workflow()
    if workflow is not None:
        return workflow.random()  # type: ignore[no-any-return]
    return _random.Random(int.from_bytes(os.urandom(16), "big"))  # noqa: S311 - not crypto
