"""Durable workflow benchmarks: roost workflows next to raw py-lmdb doing the same commits.

Run through ``python -m benchmarks``. One scenario can also be run on its own, which is
how to profile a path::

    python -m benchmarks.bench_workflows --scenario throughput --n 2000
    python -m pyinstrument -m benchmarks.bench_workflows --scenario recovery --n 2000

Every measurement uses a real clock, ``durability="sync"`` (fsync on every group commit)
and a fresh temporary data directory. Scenarios and their references:

- ``throughput``: N workflows of 3 quick async activities, all started from one process
  (``process.spawn`` + ``process.monitor`` each, one after the other, or ``concurrent``ly
  from a nursery inside that process), timed from the first spawn to the last EXIT.
  References: raw py-lmdb doing one fsync'd commit per transaction the workflows asked the
  store for (``store.stats.requests``, measured), and the same number of writes (counted by
  a calibration run) in one transaction, the ceiling.
- ``latency``: one such workflow at a time (spawn, monitor, EXIT); median and p99 next to
  raw py-lmdb doing the workflow's critical path of dependent fsync'd commits.
- ``signal``: a workflow echoes every message back to its sender; a plain process sends,
  waits for the echo, repeats. Reference: two dependent fsync'd raw commits (the signal's
  and the activation's), which every round trip needs.
- ``replay``: a workflow runs K cheap activities in a loop (history ~2K events, built with
  durability "fast" since building is not measured), then blocks on a signal. The node is
  reopened and the history rebuilt with ``roost.workflow._driver.Driver.activate(at,
  events, expected=commands)`` over the stored ``Activation`` records, as the runtime's own
  rebuild does. References: reading + decoding those records alone, and a bare coroutine
  resumed once per activation. Also end to end: on the reopened node, a signal to the
  evicted workflow until its reply (rebuild + 2 fsync'd commits).
- ``recovery``: N workflows each blocked on a durable timer; the node is closed in-process
  (not SIGKILL: the crash tests live elsewhere) and, once the timers are due, reopened;
  timed from opening the node until every workflow has completed. Reference: raw py-lmdb
  opening the same data directory and scanning every table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lmdb
import trio

import roost
from benchmarks._harness import Result, Target, now
from roost import funcs, process
from roost.storage import key
from roost.workflow._drivers import new_driver

SUITE = "workflows"
APP = roost.App("wfbench")
RAW_VALUE = b"v" * 200
# Dependent commits on one workflow's critical path: start, then per activity its
# activation and its result, then the final activation.
CRITICAL_COMMITS = 8
SIGNAL_COMMITS = 2
REPLAY_TRIES = 3
# The targets apply at its sizes (full mode), not to the quick smoke sizes.
TARGET_WORKFLOWS = 2000
TARGET_EVENTS = 10_000


# -- roost entries ---------------------------------------------------------------------------


@APP.activity
async def step(x: int) -> int:
    return x + 1


@APP.workflow
async def three_steps(x: int) -> int:
    a = await funcs.call(step, x)
    b = await funcs.call(step, a)
    return await funcs.call(step, b)


@APP.workflow
async def echo() -> int:
    inbox = process.listen("ping", message=True)
    count = 0
    while True:
        msg = await inbox.receive()
        if msg.payload is None:
            return count
        process.send(msg.sender, "pong", msg.payload)
        count += 1


@APP.workflow
async def long_history(k: int, parent: roost.Pid) -> int:
    for i in range(k):
        await funcs.call(step, i)
    process.send(parent, "built", k)
    msg = await process.listen("go", message=True).receive()
    process.send(msg.sender, "done", k)
    return k


@APP.workflow
async def sleeper(seconds: float, parent: roost.Pid) -> float:
    process.send(parent, "armed", seconds)  # committed with the timer, in one activation
    await roost.sleep(seconds)
    return seconds


# -- plumbing --------------------------------------------------------------------------------


@contextmanager
def _tmpdir() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="roost-bench-wf-") as tmp:
        yield tmp


def _in_node(body: Callable[[Any], Awaitable[Any]], data_dir: str, durability: str = "sync") -> Any:
    """Run ``body(node)`` as the attached process of a node on ``data_dir``."""

    async def main() -> Any:
        async with roost.open_node(APP, data_dir, durability=durability, shutdown_grace=0) as node:
            return await body(node)

    return trio.run(main)


def _store(node: Any) -> Any:
    return node._node.store


def _manager(node: Any) -> Any:
    return node._node.ext["workflows"]


async def _wait_exits(n: int) -> None:
    events = process.events()
    for _ in range(n):
        ev = await events.receive()
        if ev.error is not None:
            raise RuntimeError(f"workflow {ev.pid} failed: {ev.error}")


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- raw py-lmdb references ------------------------------------------------------------------


@contextmanager
def _raw_env(path: str) -> Iterator[lmdb.Environment]:
    env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
    try:
        yield env
    finally:
        env.close()


class RawCommits:
    """A py-lmdb environment (fsync on) that times runs of dependent one-write commits."""

    def __init__(self, path: str) -> None:
        self.env = lmdb.open(path, map_size=1 << 30, sync=True, metasync=True)
        self._next = 0

    def run(self, commits: int) -> float:
        """Seconds for ``commits`` fsync'd commits in a row, one small write each."""
        t0 = now()
        for _ in range(commits):
            with self.env.begin(write=True) as txn:
                txn.put(key(self._next), RAW_VALUE)
            self._next += 1
        return now() - t0

    def close(self) -> None:
        self.env.close()


@contextmanager
def raw_commits() -> Iterator[RawCommits]:
    with _tmpdir() as tmp:
        raw = RawCommits(tmp)
        try:
            yield raw
        finally:
            raw.close()


def raw_commit_rate(commits: int) -> float:
    """Fsync'd commits per second, one write each, from one thread."""
    with raw_commits() as raw:
        return commits / raw.run(commits)


def raw_one_txn(writes: int, value: bytes) -> float:
    """Seconds to do ``writes`` puts in one fsync'd transaction (the ceiling)."""
    with _tmpdir() as tmp, _raw_env(tmp) as env:
        t0 = now()
        with env.begin(write=True) as txn:
            for i in range(writes):
                txn.put(key(i), value)
        return now() - t0


def raw_scan(data_dir: str) -> float:
    """Seconds to open ``data_dir`` with py-lmdb and read every table (recovery's I/O floor)."""
    t0 = now()
    env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                for _ in txn.cursor(db=db):
                    pass
    finally:
        env.close()
    return now() - t0


# -- 1. throughput ---------------------------------------------------------------------------


def throughput(n: int, *, concurrent: bool = False) -> dict[str, Any]:
    """N workflows of 3 activities from one process: seconds, commits and requests."""

    async def body(node: Any) -> dict[str, Any]:
        stats = _store(node).stats
        commits, requests = stats.commits, stats.requests

        async def start(i: int) -> None:
            process.monitor(await process.spawn(three_steps, i))

        t0 = now()
        if concurrent:
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(start, i)
        else:
            for i in range(n):
                await start(i)
        spawned = now() - t0
        await _wait_exits(n)
        return {
            "seconds": now() - t0,
            "spawn_seconds": spawned,
            "commits": stats.commits - commits,
            "requests": stats.requests - requests,
            "largest_batch": stats.largest_batch,
        }

    with _tmpdir() as tmp:
        return _in_node(body, tmp)  # type: ignore[no-any-return]


class _CountingTxn:
    def __init__(self, txn: Any, tally: dict[str, int]) -> None:
        self._txn = txn
        self._tally = tally

    def put(self, table: str, k: bytes, v: bytes) -> None:
        self._tally["writes"] += 1
        self._tally["bytes"] += len(k) + len(v)
        self._txn.put(table, k, v)

    def delete(self, table: str, k: bytes) -> bool:
        self._tally["writes"] += 1
        return bool(self._txn.delete(table, k))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)


def writes_per_workflow(n: int = 20) -> tuple[float, float]:
    """Calibration (not timed): puts+deletes and bytes put per workflow of 3 activities."""
    tally = {"writes": 0, "bytes": 0}

    async def body(node: Any) -> None:
        store = _store(node)
        transact = store.transact

        async def counting(fn: Callable[[Any], Any]) -> Any:
            return await transact(lambda txn: fn(_CountingTxn(txn, tally)))

        store.transact = counting  # shadow the method on this instance only

        async def start(i: int) -> None:
            process.monitor(await process.spawn(three_steps, i))

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(start, i)
        await _wait_exits(n)

    with _tmpdir() as tmp:
        _in_node(body, tmp)
    return tally["writes"] / n, tally["bytes"] / max(1, tally["writes"])


# -- 2. latency ------------------------------------------------------------------------------


def latency(runs: int) -> tuple[list[float], list[float]]:
    """Seconds from spawn to EXIT of one workflow of 3 activities, ``runs`` times in a row.

    After each run the raw reference (its critical path of dependent fsync'd commits) is
    timed too, so both sides see the same disk weather. Returns (roost, raw).
    """

    async def body(node: Any) -> tuple[list[float], list[float]]:
        out: list[float] = []
        ref: list[float] = []
        with raw_commits() as raw:
            for i in range(runs + 1):  # the first run warms up
                t0 = now()
                process.monitor(await process.spawn(three_steps, i))
                await _wait_exits(1)
                out.append(now() - t0)
                ref.append(raw.run(CRITICAL_COMMITS))
        return out[1:], ref[1:]

    with _tmpdir() as tmp:
        return _in_node(body, tmp)  # type: ignore[no-any-return]


# -- 3. signal round trip --------------------------------------------------------------------


def signal_round_trips(n: int) -> tuple[list[float], list[float]]:
    """Seconds of each of ``n`` send-to-echo round trips with a workflow, and of the raw
    reference (two dependent fsync'd commits) timed after each. Returns (roost, raw)."""

    async def body(node: Any) -> tuple[list[float], list[float]]:
        pongs = process.listen("pong")
        pid = await process.spawn(echo)
        process.send(pid, "ping", -1)  # warm up: the workflow's first activations
        await pongs.receive()
        out: list[float] = []
        ref: list[float] = []
        with raw_commits() as raw:
            for i in range(n):
                t0 = now()
                process.send(pid, "ping", i)
                await pongs.receive()
                out.append(now() - t0)
                ref.append(raw.run(SIGNAL_COMMITS))
        process.monitor(pid)
        process.send(pid, "ping", None)
        await _wait_exits(1)
        return out, ref

    with _tmpdir() as tmp:
        return _in_node(body, tmp)  # type: ignore[no-any-return]


# -- 4. replay -------------------------------------------------------------------------------


def build_history(data_dir: str, k: int) -> str:
    """Run ``long_history(k)`` until it blocks on its signal; return its workflow id."""

    async def body(node: Any) -> str:
        built = process.listen("built")
        pid = await process.with_options(id="replay-1").spawn(long_history, k, process.pid())
        await built.receive()
        return str(pid.id)

    return _in_node(body, data_dir, durability="fast")  # type: ignore[no-any-return]


def _bare_coroutine(steps: int) -> float:
    """Seconds to resume a bare coroutine ``steps`` times (the interpreter's floor)."""

    class _Yield:
        def __await__(self) -> Iterator[None]:
            yield None

    async def body() -> None:
        y = _Yield()
        for _ in range(steps):
            await y

    coro = body()
    t0 = now()
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass
    return now() - t0


def replay(k: int) -> dict[str, Any]:
    """Rebuild a ~2k-event history: read+decode, Driver replay (best of 3), and by signal."""
    with _tmpdir() as tmp:
        wf_id = build_history(tmp, k)

        async def body(node: Any) -> dict[str, Any]:
            manager = _manager(node)
            store, codec = _store(node), manager.codec
            run = manager.runs[wf_id]
            prefix = key(run.record.run_id)
            t_read = t_drive = float("inf")
            for _ in range(REPLAY_TRIES):  # best of: the first read also warms the page cache
                t0 = now()
                with store.read() as txn:
                    acts = [codec.decode(v) for _, v in txn.prefix("histories", prefix)]
                t_read = min(t_read, now() - t0)
                t0 = now()
                driver = new_driver(manager, run)
                for act in acts:
                    driver.activate(act.at, act.events, expected=act.commands)
                t_drive = min(t_drive, now() - t0)
                driver.close()
            events = sum(len(a.events) + len(a.commands) for a in acts)
            # End to end: the runtime rebuilds the evicted run when the signal arrives.
            done = process.listen("done")
            t0 = now()
            process.send(run.pid, "go", 1)
            await done.receive()
            t_signal = now() - t0
            return {
                "events": events,
                "activations": len(acts),
                "read_seconds": t_read,
                "drive_seconds": t_drive,
                "signal_seconds": t_signal,
            }

        out: dict[str, Any] = _in_node(body, tmp)
    out["bare_seconds"] = _bare_coroutine(out["activations"])
    return out


# -- 5. recovery -----------------------------------------------------------------------------


def recovery(n: int, timer: float | None = None) -> dict[str, Any]:
    """Seconds from opening a node on ``n`` timer-blocked workflows until all completed.

    The timers must outlast building (spawning and arming take ~1 ms per workflow, more
    under a profiler): a workflow whose timer fired before the close is reported, not timed.
    """
    seconds = timer if timer is not None else 0.3 + 0.002 * n
    with _tmpdir() as tmp:

        async def build(node: Any) -> tuple[list[roost.Pid], float, int]:
            armed = process.listen("armed")
            me = process.pid()
            pids: list[roost.Pid] = []

            async def start() -> None:
                pids.append(await process.spawn(sleeper, seconds, me))

            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(start)
            for _ in range(n):
                await armed.receive()
            in_flight = len(node.list_workflows("status = 'running'"))
            # Each timer is due ``seconds`` after its first activation, all of which are done.
            return pids, time.time() + seconds, in_flight

        pids, due, in_flight = _in_node(build, tmp)
        if not in_flight:
            raise RuntimeError(f"every timer fired before the close: raise it above {seconds}s")
        time.sleep(max(0.0, due - time.time()) + 0.05)  # every timer is now due

        async def resume(node: Any) -> tuple[float, int, int]:
            for pid in pids:
                process.monitor(pid)
            await _wait_exits(n)
            stats = _store(node).stats
            return now(), stats.commits, stats.requests

        t0 = now()
        done, commits, requests = _in_node(resume, tmp)
        elapsed = done - t0
        scan = raw_scan(tmp)
    return {
        "seconds": elapsed,
        "in_flight": in_flight,
        "commits": commits,
        "requests": requests,
        "raw_scan_seconds": scan,
        "timer_seconds": seconds,
    }


# -- the suite -------------------------------------------------------------------------------


def _sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "ns": [50],
            "concurrent": 50,
            "repeat": 1,
            "raw_commits": 50,
            "latency": 8,
            "signal": 15,
            "replay": [250],
            "recovery": 200,
        }
    return {
        "ns": [100, 1000, 2000],
        "concurrent": 2000,
        "repeat": 2,
        "raw_commits": 500,
        "latency": 200,
        "signal": 500,
        "replay": [500, 5000],
        "recovery": 2000,
    }


def _throughput_best(
    n: int, concurrent: bool, size: dict[str, Any], writes: int, value: bytes
) -> tuple[dict[str, Any], float, float]:
    """Best of ``repeat`` roost runs, each followed by its raw references (interleaved, so
    both sides see the same disk weather): (roost run, raw commits/s, raw 1-txn seconds)."""
    best: dict[str, Any] | None = None
    floor_rate, ceiling_s = 0.0, float("inf")
    for _ in range(max(1, size["repeat"])):
        got = throughput(n, concurrent=concurrent)
        if best is None or got["seconds"] < best["seconds"]:
            best = got
        floor_rate = max(floor_rate, raw_commit_rate(size["raw_commits"]))
        ceiling_s = min(ceiling_s, raw_one_txn(writes, value))
    assert best is not None
    return best, floor_rate, ceiling_s


def _throughput_results(size: dict[str, Any]) -> list[Result]:
    results = []
    writes_wf, bytes_write = writes_per_workflow()
    value = b"v" * max(1, round(bytes_write) - 8)
    target_n = size["ns"][-1]
    runs = [(n, False) for n in size["ns"]] + [(size["concurrent"], True)]
    for n, concurrent in runs:
        best, floor_rate, ceiling_s = _throughput_best(
            n, concurrent, size, round(writes_wf * n), value
        )
        rate = n / best["seconds"]
        txn_wf = best["requests"] / n
        floor = floor_rate / txn_wf
        ceiling = n / ceiling_s
        how = "concurrent spawns" if concurrent else "serial spawns"
        at_size = n >= TARGET_WORKFLOWS
        target = Target("min", 1000, ">= 1000 wf/s") if at_size else None
        note = (
            f"{3 * rate:,.0f} activities/s; spawning took {best['spawn_seconds']:.2f}s; "
            f"{best['requests']} txns ({txn_wf:.0f}/wf) in {best['commits']} commits, "
            f"largest batch {best['largest_batch']}; {writes_wf:.0f} writes/wf"
        )
        params = {"n": n, "activities": 3, "concurrent": concurrent, **best}
        name = f"workflows/s, N={n}, 3 activities, {how}"
        results += [
            Result(
                SUITE,
                name,
                "wf/s",
                rate,
                floor,
                raw_label=f"raw lmdb, 1 fsync/txn ({txn_wf:.0f} txn/wf)",
                target=target,
                note=note,
                params=params,
            ),
            Result(
                SUITE,
                name,
                "wf/s",
                rate,
                ceiling,
                raw_label=f"raw lmdb, {writes_wf:.0f} writes/wf in 1 txn",
                params=params,
            ),
        ]
        if n == target_n and not concurrent:
            results.append(
                Result(
                    SUITE,
                    f"activities/s, N={n}, {how}",
                    "act/s",
                    3 * rate,
                    3 * floor,
                    raw_label="raw lmdb, 1 fsync/txn",
                    params=params,
                )
            )
    return results


def _latency_results(size: dict[str, Any]) -> list[Result]:
    runs = size["latency"]
    roost_s, raw_s = latency(runs)
    params = {"runs": runs, "activities": 3}
    label = f"raw lmdb, {CRITICAL_COMMITS} dependent fsync'd commits"
    return [
        Result(
            SUITE,
            f"one workflow (3 activities), {stat}",
            "s",
            q(roost_s),
            q(raw_s),
            raw_label=label,
            higher_is_better=False,
            params=params,
        )
        for stat, q in (
            ("median latency", statistics.median),
            ("p99 latency", lambda v: _quantile(v, 0.99)),
        )
    ]


def _signal_results(size: dict[str, Any]) -> list[Result]:
    n = size["signal"]
    roost_s, raw_s = signal_round_trips(n)
    label = f"raw lmdb, {SIGNAL_COMMITS} dependent fsync'd commits"
    params = {"round_trips": n}
    return [
        Result(
            SUITE,
            "signal round trip to a workflow",
            "trips/s",
            n / sum(roost_s),
            n / sum(raw_s),
            raw_label=label,
            params=params,
        ),
        Result(
            SUITE,
            "signal round trip, median",
            "s",
            statistics.median(roost_s),
            statistics.median(raw_s),
            raw_label=label,
            higher_is_better=False,
            params=params,
        ),
    ]


def _replay_results(size: dict[str, Any]) -> list[Result]:
    results = []
    for k in size["replay"]:
        r = replay(k)
        events = r["events"]
        rebuild = r["read_seconds"] + r["drive_seconds"]
        tag = f"{events / 1000:.0f}k" if events >= 1000 else str(events)
        params = {"activities": k, **r}
        largest = k == size["replay"][-1]
        target = Target("min", 100_000, ">= 100k events/s") if events >= TARGET_EVENTS else None
        results.append(
            Result(
                SUITE,
                f"replay {tag}-event history (read+decode+Driver)",
                "events/s",
                events / rebuild,
                events / r["read_seconds"],
                raw_label="read+decode only",
                target=target,
                note=f"{r['activations']} activations; Driver.activate over stored Activations",
                params=params,
            )
        )
        if not largest:  # the smaller history only shows how cost grows with length
            continue
        results += [
            Result(
                SUITE,
                f"replay {tag}-event history, Driver only",
                "events/s",
                events / r["drive_seconds"],
                events / r["bare_seconds"],
                raw_label="bare coroutine, 1 resume/activation",
                params=params,
            ),
            Result(
                SUITE,
                f"replay {tag}-event history, signal to reply after reopen",
                "s",
                r["signal_seconds"],
                rebuild,
                raw_label="the rebuild alone",
                higher_is_better=False,
                note="runtime rebuild of the evicted run + 2 fsync'd commits",
                params=params,
            ),
        ]
    return results


def _recovery_results(size: dict[str, Any]) -> list[Result]:
    n = size["recovery"]
    r = recovery(n)
    return [
        Result(
            SUITE,
            f"recovery: {n} timer-blocked workflows, open to all done",
            "s",
            r["seconds"],
            r["raw_scan_seconds"],
            raw_label="raw lmdb open + scan all",
            higher_is_better=False,
            target=Target("max", 3.0, "< 3 s") if n >= TARGET_WORKFLOWS else None,
            note="in-process close + reopen (not SIGKILL); timers fell due while closed",
            params={"n": n, **r},
        )
    ]


def run(quick: bool = False) -> list[Result]:
    """The workflow rows for ``python -m benchmarks``."""
    size = _sizes(quick)
    return [
        *_throughput_results(size),
        *_latency_results(size),
        *_signal_results(size),
        *_replay_results(size),
        *_recovery_results(size),
    ]


# -- one scenario, for profiling -------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one workflow benchmark scenario.")
    parser.add_argument(
        "--scenario",
        required=True,
        choices=["throughput", "concurrent", "latency", "signal", "replay", "recovery"],
    )
    parser.add_argument("--n", type=int, default=2000, help="workflows / runs / activities")
    parser.add_argument("--timer", type=float, help="recovery: the timers' seconds")
    args = parser.parse_args(argv)
    n = args.n
    out: Any
    if args.scenario in ("throughput", "concurrent"):
        out = throughput(n, concurrent=args.scenario == "concurrent")
    elif args.scenario == "latency":
        out = {"median": statistics.median(latency(n)[0])}
    elif args.scenario == "signal":
        out = {"median": statistics.median(signal_round_trips(n)[0])}
    elif args.scenario == "replay":
        out = replay(n)
    else:
        out = recovery(n, args.timer)
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
