"""What the hostile-value properties share: the codec oracle, one counted sink call, a run.

Each property keeps a ``TRIED`` dict of counts (examples, calls, refused, stored,
node_stopped, ...) and passes it in, so its module can report what it tried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing
from hypothesis import event
from hypothesis.control import currently_in_test_context

import roost
from roost.storage import Codec

CODEC = Codec()


def accepts(value: Any) -> bool:
    """Whether the codec stores ``value`` (the oracle every durable sink must follow)."""
    try:
        CODEC.encode(value)
    except roost.Error as err:
        if err.kind is not roost.ErrorKind.INVALID:
            raise
        str(err).encode("utf-8")  # the refusal itself is printable and storable
        return False
    return True


def expect(value: Any, tried: dict[str, int]) -> tuple[bool, bool]:
    """Count an example; whether the codec stores ``value``, and ``{"v": value}``."""
    tried["examples"] += 1
    stores = accepts(value)
    if currently_in_test_context():  # (also called from plain tests)
        event(f"codec {'stores' if stores else 'refuses'} it")
    return stores, accepts({"v": value})


async def attempt(call: Callable[[], Any], tried: dict[str, int]) -> bool:
    """Run one sink call: True if it stored, False if it refused with Invalid."""
    tried["calls"] += 1
    try:
        result = call()
        if isinstance(result, Awaitable):
            await result
    except roost.Error as err:
        if err.kind is not roost.ErrorKind.INVALID:
            raise
        tried["refused"] += 1
        return False
    tried["stored"] += 1
    return True


async def settle() -> None:
    """Let queue leases, retries, task backoffs and workflows run out (virtual time)."""
    await trio.sleep(120)
    await trio.testing.wait_all_tasks_blocked()


def run(main: Callable[[], Awaitable[Any]], tried: dict[str, int]) -> Any:
    """``trio.run`` under an autojumping MockClock; a run that raises counts as a stop."""
    try:
        return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    except BaseException:
        tried["node_stopped"] += 1
        raise
