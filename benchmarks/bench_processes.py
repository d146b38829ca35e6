"""Process benchmarks: roost processes and channels next to the same work in raw trio.

Run through ``python -m benchmarks``. One scenario can also be run on its own, which is
how the idle-memory children are started and how to profile a path::

    python -m benchmarks.bench_processes --scenario spawn-exit --impl roost --n 50000
    python -m pyinstrument -m benchmarks.bench_processes --scenario ping-pong --impl roost

Scenarios and what the raw trio side does:

- ``spawn-exit``: N ``await process.spawn(noop)`` vs N ``nursery.start_soon(noop)``; both
  then wait until every task has finished (``wait_all_tasks_blocked``).
- ``idle``: N processes parked in ``await process.inbox().receive()`` vs N tasks parked in
  ``receive()`` on their own ``trio.open_memory_channel(0)``; time to get all parked and
  RSS per task, in a fresh interpreter (clean heap), with the cyclic GC on or off.
- ``idle-trace``: the same in-process under tracemalloc (smaller N): bytes per task.
- ``ping-pong``: two processes, ``process.send`` + ``process.listen(topic)`` vs two tasks
  over two unbuffered memory channels.
- ``fan-in``: 10 senders to 1 receiver vs 10 tasks on one memory channel.
- ``select``: ``channel.select(c1, c2, c3, c4)`` with only ``c4`` ready vs a receive.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import os
import shutil
import sys
import tempfile
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

import roost
from benchmarks._harness import Children, Result, Target, compare, now, rss_bytes
from roost import channel, process

SUITE = "processes"
APP = roost.App("bench")
_KB3 = 3 * 1024
_HUNDRED_K = 100_000
FAN_IN_SENDERS = 10


# -- roost entries ---------------------------------------------------------------------------


@APP.process
async def noop() -> None:
    return None


@APP.process
async def idle_inbox() -> None:
    await process.inbox().receive()


@APP.process
async def ponger(n: int) -> None:
    ch = process.listen("ping")
    peer = await ch.receive()
    for _ in range(n):
        process.send(peer, "pong", await ch.receive())


@APP.process
async def pinger(peer: roost.Pid, n: int) -> None:
    ch = process.listen("pong")
    process.send(peer, "ping", process.pid())
    for i in range(n):
        process.send(peer, "ping", i)
        await ch.receive()


@APP.process
async def sink(total: int) -> None:
    ch = process.listen("m")
    for _ in range(total):
        await ch.receive()


@APP.process
async def source(dest: roost.Pid, m: int) -> None:
    for i in range(m):
        process.send(dest, "m", i)


def _in_node(body: Callable[[Any], Awaitable[float]]) -> float:
    """Run ``body(node)`` as the attached process of a fresh node; return its seconds."""

    async def main() -> float:
        async with roost.open_node(APP, shutdown_grace=0) as node:
            return await body(node)

    return trio.run(main)


async def _all_blocked() -> None:
    await trio.testing.wait_all_tasks_blocked()


# -- raw trio helpers --------------------------------------------------------------------------


async def _raw_noop() -> None:
    return None


async def _raw_noop_scoped() -> None:
    # What a roost process pays to be terminable: one scope around its body.
    with trio.CancelScope():  # noqa: ASYNC100 - the scope's cost is what is measured
        pass


async def _raw_idle(receive: trio.MemoryReceiveChannel[Any]) -> None:
    await receive.receive()


async def _raw_idle_scoped(receive: trio.MemoryReceiveChannel[Any]) -> None:
    with trio.CancelScope():
        await receive.receive()


# -- 1. spawn + exit ---------------------------------------------------------------------------


def spawn_exit(impl: str, n: int) -> float:
    """Seconds to start ``n`` trivial processes/tasks and see them all finish."""
    if impl == "roost":

        async def body(node: Any) -> float:
            t0 = now()
            for _ in range(n):
                await process.spawn(noop)
            await _all_blocked()
            elapsed = now() - t0
            if node.process_count() != 1:
                raise RuntimeError(f"{node.process_count() - 1} processes still alive")
            return elapsed

        return _in_node(body)

    checkpoint = impl in {"raw+checkpoint", "raw+checkpoint+scope"}
    task = _raw_noop_scoped if impl == "raw+checkpoint+scope" else _raw_noop

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            t0 = now()
            for _ in range(n):
                nursery.start_soon(task)
                if checkpoint:
                    await trio.lowlevel.checkpoint()
            await _all_blocked()
            return now() - t0

    return trio.run(main)


# -- 2. idle processes -------------------------------------------------------------------------


class _Probe:
    """How memory is read (RSS, or tracemalloc started just before the first reading),
    and what happens once measured: return, or print and leave at once (``exit_now``).

    Leaving at once skips tearing 100k tasks down, which takes longer than building
    them and is not what the child is there to measure.
    """

    def __init__(self, *, traced: bool, exit_now: bool = False) -> None:
        self.traced = traced
        self.exit_now = exit_now
        self.data_dir = tempfile.mkdtemp(prefix="roost-bench-") if exit_now else None

    def read(self) -> int:
        if not self.traced:
            return rss_bytes()
        if not tracemalloc.is_tracing():
            tracemalloc.start()
        return tracemalloc.get_traced_memory()[0]

    def done(self, n: int, elapsed: float, used: int) -> tuple[float, int]:
        tracemalloc.stop()
        if self.exit_now:
            print(json.dumps({"seconds": elapsed, "rss_per_task": used / n}), flush=True)
            if self.data_dir is not None:
                shutil.rmtree(self.data_dir, ignore_errors=True)
            os._exit(0)
        return elapsed, used


async def _park_roost(n: int, probe: _Probe) -> tuple[float, int]:
    async with roost.open_node(APP, probe.data_dir, shutdown_grace=0) as node:
        await _all_blocked()
        gc.collect()
        before = probe.read()
        t0 = now()
        for _ in range(n):
            await process.spawn(idle_inbox)
        await _all_blocked()
        elapsed = now() - t0
        gc.collect()
        used = probe.read() - before
        if node.process_count() != n + 1:
            raise RuntimeError(f"expected {n} idle processes, found {node.process_count() - 1}")
        return probe.done(n, elapsed, used)


async def _park_raw(n: int, probe: _Probe, impl: str) -> tuple[float, int]:
    task = _raw_idle_scoped if impl == "raw+scope" else _raw_idle
    bare = impl == "raw-bare"
    async with trio.open_nursery() as nursery:
        await _all_blocked()
        keep: list[trio.MemorySendChannel[Any]] = []
        gc.collect()
        before = probe.read()
        t0 = now()
        for _ in range(n):
            if bare:
                nursery.start_soon(trio.sleep_forever)
                continue
            send, receive = trio.open_memory_channel[Any](0)
            keep.append(send)
            nursery.start_soon(task, receive)
        await _all_blocked()
        elapsed = now() - t0
        gc.collect()
        used = probe.read() - before
        nursery.cancel_scope.cancel()
        return probe.done(n, elapsed, used)


def _park(impl: str, n: int, probe: _Probe) -> tuple[float, int]:
    try:
        if impl == "roost":
            return trio.run(_park_roost, n, probe)
        return trio.run(_park_raw, n, probe, impl)
    finally:
        tracemalloc.stop()


def idle(impl: str, n: int, *, gc_enabled: bool = True) -> None:
    """Child mode: park ``n`` tasks, print seconds and RSS bytes per task, and exit."""
    if not gc_enabled:
        gc.disable()
    probe = _Probe(traced=False, exit_now=True)
    try:
        _park(impl, n, probe)
    finally:  # only reached on failure: success leaves through os._exit
        if probe.data_dir is not None:
            shutil.rmtree(probe.data_dir, ignore_errors=True)
    raise RuntimeError("the idle child should have exited")


def idle_trace(impl: str, n: int) -> float:
    """Bytes per parked task as tracemalloc sees them (allocations still alive)."""
    _elapsed, used = _park(impl, n, _Probe(traced=True))
    return used / n


# -- 3. ping-pong ------------------------------------------------------------------------------


def ping_pong(impl: str, n: int) -> float:
    """Seconds for ``n`` round trips (2n messages)."""
    if impl == "roost":

        async def body(_node: Any) -> float:
            peer = await process.spawn(ponger, n)
            await _all_blocked()
            t0 = now()
            await process.exec(pinger, peer, n)
            return now() - t0

        return _in_node(body)

    async def main() -> float:
        ping_send, ping_recv = trio.open_memory_channel[int](0)
        pong_send, pong_recv = trio.open_memory_channel[int](0)

        async def pong() -> None:
            for _ in range(n):
                await pong_send.send(await ping_recv.receive())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pong)
            await _all_blocked()
            t0 = now()
            for i in range(n):
                await ping_send.send(i)
                await pong_recv.receive()
            return now() - t0

    return trio.run(main)


# -- 4. fan-in ---------------------------------------------------------------------------------


def fan_in(impl: str, per_sender: int) -> float:
    """Seconds for FAN_IN_SENDERS senders to get ``per_sender`` messages each to one receiver.

    ``raw`` is an unbuffered channel with ``await send``; ``raw-nowait`` an unbounded one
    with ``send_nowait`` (like roost's non-blocking send into an unbounded mailbox).
    """
    total = FAN_IN_SENDERS * per_sender
    if impl == "roost":

        async def body(_node: Any) -> float:
            receiver = await process.spawn_monitored(sink, total)
            events = process.events()
            await _all_blocked()
            t0 = now()
            for _ in range(FAN_IN_SENDERS):
                await process.spawn(source, receiver, per_sender)
            exit_event = await events.receive()
            elapsed = now() - t0
            if exit_event.error is not None:
                raise exit_event.error
            return elapsed

        return _in_node(body)

    nowait = impl == "raw-nowait"

    async def main() -> float:
        send, receive = trio.open_memory_channel[int](math.inf if nowait else 0)

        async def sender() -> None:
            if nowait:
                for i in range(per_sender):
                    send.send_nowait(i)
            else:
                for i in range(per_sender):
                    await send.send(i)

        async with trio.open_nursery() as nursery:
            t0 = now()
            for _ in range(FAN_IN_SENDERS):
                nursery.start_soon(sender)
            for _ in range(total):
                await receive.receive()
            return now() - t0

    return trio.run(main)


# -- 5. select ---------------------------------------------------------------------------------


def select(impl: str, n: int) -> float:
    """Seconds for ``n`` receives: ``select`` over 4 channels with the last one ready
    (``roost``), a plain receive on a roost channel (``roost-receive``), or on a trio
    memory channel (``raw``)."""

    async def main() -> float:
        if impl == "raw":
            send, receive = trio.open_memory_channel[int](n)
            for i in range(n):
                send.send_nowait(i)
            t0 = now()
            for _ in range(n):
                await receive.receive()
            return now() - t0
        c1, c2, c3, c4 = channel.new(), channel.new(), channel.new(), channel.new(n)
        for i in range(n):
            await c4.send(i)
        t0 = now()
        if impl == "roost-receive":
            for _ in range(n):
                await c4.receive()
        else:
            for _ in range(n):
                await channel.select(c1, c2, c3, c4)
        return now() - t0

    return trio.run(main)


# -- the suite ---------------------------------------------------------------------------------


def _sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {
            "repeat": 1,
            "spawn": 1_000,
            "idle": 1_000,
            "trace": 300,
            "ping": 1_000,
            "fan": 200,
            "select": 2_000,
        }
    return {
        "repeat": 5,
        "spawn": 20_000,
        "idle": _HUNDRED_K,
        "trace": 10_000,
        "ping": 50_000,
        "fan": 5_000,
        "select": 50_000,
    }


_IDLE_KEYS = [(impl, gc_on) for gc_on in (True, False) for impl in ("roost", "raw")]


def _idle_children(n: int, *, background: bool) -> Children:
    """The idle scenario for roost and raw, GC on and off, each in a fresh interpreter."""
    arg_lists = [
        ["--scenario", "idle", "--impl", impl, "--n", str(n), *([] if gc_on else ["--no-gc"])]
        for impl, gc_on in _IDLE_KEYS
    ]
    return Children("benchmarks.bench_processes", arg_lists, background=background)


def _rates(
    rep: int, fn: Callable[[str, int], float], n: int, impls: list[str], per: int = 1
) -> dict[str, float]:
    """Operations per second of ``fn`` for each impl, measured taking turns."""
    best = compare(rep, {impl: functools.partial(fn, impl, n) for impl in impls})
    return {impl: n * per / seconds for impl, seconds in best.items()}


def run(quick: bool = False) -> list[Result]:
    """Every process benchmark; ``quick`` uses small sizes and one repetition."""
    size = _sizes(quick)
    rep = size["repeat"]
    results: list[Result] = []
    # Quick runs start the idle children now, to overlap them with the rest.
    children = _idle_children(size["idle"], background=quick)

    # 1. spawn + exit
    n = size["spawn"]
    variants = [
        ("raw", "trio start_soon", ""),
        ("raw+checkpoint", "trio +checkpoint", "raw yields once per spawn, as spawn does"),
        (
            "raw+checkpoint+scope",
            "trio +ckpt+CancelScope",
            "raw task also enters one CancelScope, as a roost process does",
        ),
    ]
    rates = _rates(rep, spawn_exit, n, ["roost", *(v[0] for v in variants)])
    for impl, label, note in variants:
        results.append(
            Result(
                SUITE,
                "spawn+exit",
                "spawns/s",
                rates["roost"],
                rates[impl],
                raw_label=label,
                note=note,
                params={"n": n, "impl": impl},
            )
        )

    # 2. idle processes (fresh interpreters: RSS needs a clean heap)
    n = size["idle"]
    time_target = Target("max", 2.0, "< 2 s") if n == _HUNDRED_K else None
    idle_runs = dict(zip(_IDLE_KEYS, children.results(), strict=True))
    for gc_enabled in (True, False):
        tag = "gc on" if gc_enabled else "gc off"
        ours, raw = idle_runs["roost", gc_enabled], idle_runs["raw", gc_enabled]
        params = {"n": n, "gc": gc_enabled}
        results.append(
            Result(
                SUITE,
                f"spawn {n} idle ({tag})",
                "s",
                ours["seconds"],
                raw["seconds"],
                raw_label="trio mem chan(0)",
                higher_is_better=False,
                target=time_target,
                params=params,
            )
        )
        results.append(
            Result(
                SUITE,
                f"idle RSS/proc ({tag})",
                "B/proc",
                ours["rss_per_task"],
                raw["rss_per_task"],
                raw_label="trio mem chan(0)",
                higher_is_better=False,
                target=Target("max", _KB3, "<= 3 KB"),
                params=params,
            )
        )
    n = size["trace"]
    traced = idle_trace("roost", n)
    for impl, label, note in (
        ("raw", "trio mem chan(0)", ""),
        ("raw+scope", "trio +CancelScope", "raw task parked inside one CancelScope"),
        ("raw-bare", "trio sleep_forever", "the floor: a bare trio task, no channel"),
    ):
        results.append(
            Result(
                SUITE,
                "idle tracemalloc/proc",
                "B/proc",
                traced,
                idle_trace(impl, n),
                raw_label=label,
                higher_is_better=False,
                target=Target("max", _KB3, "<= 3 KB"),
                note=note,
                params={"n": n, "impl": impl},
            )
        )

    # 3. ping-pong
    n = size["ping"]
    rates = _rates(rep, ping_pong, n, ["roost", "raw"], per=2)
    results.append(
        Result(
            SUITE,
            "ping-pong",
            "msgs/s",
            rates["roost"],
            rates["raw"],
            raw_label="trio mem chan(0)",
            target=Target("ratio>=", 1.5, ">= 1.5x raw"),
            params={"round_trips": n},
        )
    )

    # 4. fan-in
    n = size["fan"]
    rates = _rates(rep, fan_in, n, ["roost", "raw", "raw-nowait"], per=FAN_IN_SENDERS)
    for impl, label in (("raw", "trio chan(0) send"), ("raw-nowait", "trio chan(inf) nowait")):
        results.append(
            Result(
                SUITE,
                f"fan-in {FAN_IN_SENDERS}->1",
                "msgs/s",
                rates["roost"],
                rates[impl],
                raw_label=label,
                params={"senders": FAN_IN_SENDERS, "per_sender": n, "impl": impl},
            )
        )

    # 5. select
    n = size["select"]
    rates = _rates(rep, select, n, ["roost", "roost-receive", "raw"])
    for name, impl in (
        ("roost channel receive", "roost-receive"),
        ("select(4), last ready", "roost"),
    ):
        results.append(
            Result(
                SUITE,
                name,
                "ops/s",
                rates[impl],
                rates["raw"],
                raw_label="trio chan receive",
                params={"n": n},
            )
        )
    return results


# -- one scenario, for children and profiling --------------------------------------------------

_SCENARIOS: dict[str, Callable[[str, int], Any]] = {
    "spawn-exit": spawn_exit,
    "ping-pong": ping_pong,
    "fan-in": fan_in,
    "select": select,
    "idle-trace": idle_trace,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one process benchmark scenario.")
    parser.add_argument("--scenario", required=True, choices=[*_SCENARIOS, "idle"])
    parser.add_argument("--impl", default="roost", help="roost, raw, or a raw variant")
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--no-gc", action="store_true", help="run with the cyclic GC disabled")
    args = parser.parse_args(argv)
    if args.no_gc:
        gc.disable()
    if args.scenario == "idle":
        idle(args.impl, args.n, gc_enabled=not args.no_gc)  # prints, then exits
    out = {"value": _SCENARIOS[args.scenario](args.impl, args.n)}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
