"""Durable workflow benchmarks: roost workflows next to raw py-lmdb doing the same commits.

Run through ``python -m benchmarks``. One scenario can also be run on its own, which is
how to profile a path::

    python -m benchmarks.bench_workflows --scenario concurrent --n 10000
    python -m pyinstrument -m benchmarks.bench_workflows --scenario throughput --n 2000

Replay, recovery and disk/memory live in ``bench_replay``, ``bench_recovery`` and
``bench_disk``; the entries and raw references they share are in ``_wf_common``. Every
measurement uses a real clock, ``durability="sync"`` (fsync on every group commit) and a
fresh temporary data directory. Scenarios and their references:

- ``concurrent`` (the N-series, N = 100, 1000, 2000, 10000): N workflows of 3 quick async
  activities, all started at once from a nursery inside one process (``process.spawn`` +
  ``process.monitor`` each), timed from the first spawn to the last EXIT. References: raw
  py-lmdb doing the same number of writes (counted by a calibration run) spread over the
  same number of fsync'd commits as roost's group commits took (measured), and the same
  writes in one transaction, the ceiling. The note gives the time spent in CPython's cyclic
  collector; at N = 2000 and 10000 a second row runs the same with
  ``gc.set_threshold(*TUNED_GC)`` next to the default thresholds, to show that cost. At
  N = 2000 another row runs the workflow with sync activities (``three_sync_steps``) next
  to the async one, alternating runs.
- ``throughput``: the same, spawned one after the other (``await spawn`` in a loop).
  Reference: raw py-lmdb doing one fsync'd commit per transaction the workflows asked the
  store for (``store.stats.requests``): what a serial spawn can reach at best.
- ``latency``: one such workflow at a time (spawn, monitor, EXIT); median and p99 next to
  raw py-lmdb doing the contract's critical path: four dependent fsync'd commits (start,
  result 1, result 2, result 3 + completion; issue 15), each waiting for the one before.
  The note gives the transactions one workflow actually asked the store for (measured on
  the warm-up run).
- ``starts``: workflow starts one after another, each awaited (``await process.spawn(echo)``:
  a start and its first activation, one commit), in chunks alternating with as many raw
  py-lmdb fsync'd commits of one put each (issue 21's serial target: >= 0.6x that rate).
  The ``echo`` runs stay open, waiting for messages, as a service's workflows would. A
  second row times roost's own parts of such a start with no host around them (the
  driver's first activation, its row and run record in one fsync'd commit to two tables,
  ``benchmarks._floor``): the most a host that writes those two rows per start can reach.
- ``signal``: a workflow echoes every message back to its sender; a plain process sends,
  waits for the echo, repeats. Reference: as many dependent fsync'd raw commits as one
  round trip asked the store for (measured on a warm-up round trip; the signal's and the
  activation's).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

from benchmarks import _floor
from benchmarks._harness import Result, Target, now
from benchmarks._wf_common import (
    echo,
    in_node,
    quantile,
    raw_commit_rate,
    raw_commits,
    raw_group_commits,
    raw_one_txn,
    store,
    three_steps,
    three_sync_steps,
    tmpdir,
    wait_exits,
    writes_per_workflow,
)
from roost import process

SUITE = "workflows"
ACTIVITIES = 3
# The durability contract's critical path for ACTIVITIES activities: start, each result
# (the last one with the completion). The latency rows are a ratio to this many commits.
CRITICAL_COMMITS = ACTIVITIES + 1
# The target applies at its size (full mode), not to the quick smoke sizes.
TARGET_WORKFLOWS = 2000


# -- 1. throughput ---------------------------------------------------------------------------


# What the "collector tuned" rows set: far fewer young collections, so far fewer of the
# full ones that walk every cached workflow (CPython 3.11's default is (700, 10, 10)).
TUNED_GC = (50_000, 20, 100)


@contextmanager
def _collector(threshold: tuple[int, int, int] | None) -> Iterator[dict[str, float]]:
    """Time spent in the cyclic collector meanwhile (and optionally other thresholds)."""
    spent = {"seconds": 0.0, "collections": 0}
    started = [0.0]

    def watch(phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = now()
        else:
            spent["seconds"] += now() - started[0]
            spent["collections"] += 1

    old = gc.get_threshold()
    if threshold is not None:
        gc.set_threshold(*threshold)
    gc.callbacks.append(watch)
    try:
        yield spent
    finally:
        gc.callbacks.remove(watch)
        gc.set_threshold(*old)


def throughput(
    n: int,
    *,
    concurrent: bool = False,
    gc_threshold: tuple[int, int, int] | None = None,
    workflow: Any = None,
    sync_activities: bool = False,
) -> dict[str, Any]:
    """N workflows of 3 activities from one process: seconds, CPU seconds, commits, requests."""
    if workflow is None:
        workflow = three_sync_steps if sync_activities else three_steps

    async def body(node: Any) -> dict[str, Any]:
        stats = store(node).stats
        commits, requests = stats.commits, stats.requests

        async def start(i: int) -> None:
            process.monitor(await process.spawn(workflow, i))

        t0, cpu0 = now(), time.process_time()
        if concurrent:
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(start, i)
        else:
            for i in range(n):
                await start(i)
        spawned = now() - t0
        await wait_exits(n)
        return {
            "seconds": now() - t0,
            "cpu_seconds": time.process_time() - cpu0,
            "spawn_seconds": spawned,
            "commits": stats.commits - commits,
            "requests": stats.requests - requests,
            "largest_batch": stats.largest_batch,
        }

    with tmpdir() as tmp, _collector(gc_threshold) as collector:
        out: dict[str, Any] = in_node(body, tmp)
    out["gc_seconds"] = collector["seconds"]
    out["gc_collections"] = collector["collections"]
    return out


# -- 2. latency ------------------------------------------------------------------------------


def latency(runs: int) -> tuple[list[float], list[float], int]:
    """Seconds from spawn to EXIT of one workflow of 3 activities, ``runs`` times in a row.

    After each run the raw reference (CRITICAL_COMMITS dependent fsync'd commits) is timed
    too, so both sides see the same disk weather. Returns (roost, raw, the transactions
    one workflow asked the store for).
    """

    async def body(node: Any) -> tuple[list[float], list[float], int]:
        out: list[float] = []
        ref: list[float] = []
        stats = store(node).stats
        requests = stats.requests
        process.monitor(await process.spawn(three_steps, -1))  # warms up, counts txns
        await wait_exits(1)
        commits = stats.requests - requests
        with raw_commits() as raw:
            for i in range(runs):
                t0 = now()
                process.monitor(await process.spawn(three_steps, i))
                await wait_exits(1)
                out.append(now() - t0)
                ref.append(raw.run(CRITICAL_COMMITS))
        return out, ref, commits

    with tmpdir() as tmp:
        return in_node(body, tmp)  # type: ignore[no-any-return]


# -- 3. serial starts -----------------------------------------------------------------------


def serial_starts(n: int, chunk: int = 50) -> tuple[float, float]:
    """Seconds of ``n`` starts of ``echo`` one after another, each awaited, and of ``n``
    raw fsync'd one-put commits, timed in alternating chunks of ``chunk`` (the same disk
    weather for both sides)."""

    async def body(node: Any) -> tuple[float, float]:
        for _ in range(chunk):  # warm up: the driver, the store's tables
            await process.spawn(echo)
        roost_s = raw_s = 0.0
        with raw_commits() as raw:
            done = 0
            while done < n:
                size = min(chunk, n - done)
                t0 = now()
                for _ in range(size):
                    await process.spawn(echo)
                roost_s += now() - t0
                raw_s += raw.run(size)
                done += size
        return roost_s, raw_s

    with tmpdir() as tmp:
        return in_node(body, tmp)  # type: ignore[no-any-return]


# -- 4. signal round trip --------------------------------------------------------------------


def signal_round_trips(n: int) -> tuple[list[float], list[float], int]:
    """Seconds of each of ``n`` send-to-echo round trips with a workflow, and of the raw
    reference (the round trip's dependent fsync'd commits) timed after each. Returns
    (roost, raw, commits per round trip)."""

    async def body(node: Any) -> tuple[list[float], list[float], int]:
        stats = store(node).stats
        pongs = process.listen("pong")
        pid = await process.spawn(echo)
        process.send(pid, "ping", -2)  # warm up: the workflow's first activations
        await pongs.receive()
        requests = stats.requests
        process.send(pid, "ping", -1)  # one plain round trip: count its txns
        await pongs.receive()
        commits = stats.requests - requests
        out: list[float] = []
        ref: list[float] = []
        with raw_commits() as raw:
            for i in range(n):
                t0 = now()
                process.send(pid, "ping", i)
                await pongs.receive()
                out.append(now() - t0)
                ref.append(raw.run(commits))
        process.monitor(pid)
        process.send(pid, "ping", None)
        await wait_exits(1)
        return out, ref, commits

    with tmpdir() as tmp:
        return in_node(body, tmp)  # type: ignore[no-any-return]


# -- the suite -------------------------------------------------------------------------------


def _sizes(quick: bool) -> dict[str, Any]:
    if quick:
        return {
            "series": [20],
            "tuned": [20],
            "serial": [20],
            "repeat": 1,
            "raw_commits": 50,
            "latency": 8,
            "signal": 15,
            "starts": 20,
        }
    return {
        "series": [100, 1000, TARGET_WORKFLOWS, 10_000],
        "tuned": [TARGET_WORKFLOWS, 10_000],
        "serial": [TARGET_WORKFLOWS],
        "repeat": 2,
        "raw_commits": 500,
        "latency": 200,
        "signal": 500,
        "starts": 1000,
    }


def _repeat(n: int, size: dict[str, Any]) -> int:
    # A 10k run takes ~40 s: once is enough (its spread is far below the effects shown).
    return 1 if n > TARGET_WORKFLOWS else max(1, size["repeat"])


def _target(n: int) -> Target | None:
    return Target("min", 1000, ">= 1000 wf/s") if n == TARGET_WORKFLOWS else None


def _note(best: dict[str, Any], n: int, writes_wf: float) -> str:
    rate = n / best["seconds"]
    return (
        f"{ACTIVITIES * rate:,.0f} activities/s; spawning took {best['spawn_seconds']:.2f}s; "
        f"{best['gc_seconds']:.2f}s in {best['gc_collections']} collections; "
        f"{best['requests']} txns ({best['requests'] / n:.0f}/wf) in {best['commits']} "
        f"commits, largest batch {best['largest_batch']}; {writes_wf:.0f} writes/wf"
    )


def _series_results(size: dict[str, Any], writes_wf: float, value: bytes) -> list[Result]:
    """Concurrent starts, N growing: roost next to raw LMDB with roost's commit pattern."""
    results = []
    for n in size["series"]:
        writes = round(writes_wf * n)
        best: dict[str, Any] | None = None
        group_s = ceiling_s = float("inf")
        for _ in range(_repeat(n, size)):  # interleaved: both sides see the same disk weather
            got = throughput(n, concurrent=True)
            if best is None or got["seconds"] < best["seconds"]:
                best = got
            group_s = min(group_s, raw_group_commits(writes, got["commits"], value))
            ceiling_s = min(ceiling_s, raw_one_txn(writes, value))
        assert best is not None
        rate = n / best["seconds"]
        params = {"n": n, "activities": ACTIVITIES, "concurrent": True, "writes": writes, **best}
        name = f"workflows/s, N={n} concurrent, {ACTIVITIES} activities each"
        group_label = f"raw lmdb, {writes} writes in {best['commits']} fsync'd txns"
        results += [
            Result(
                SUITE,
                name,
                "wf/s",
                rate,
                n / group_s,
                raw_label=group_label,
                target=_target(n),
                note=_note(best, n, writes_wf),
                params=params,
            ),
            Result(
                SUITE,
                name,
                "wf/s",
                rate,
                n / ceiling_s,
                raw_label=f"raw lmdb, {writes} writes in 1 txn",
                params=params,
            ),
            Result(
                SUITE,
                f"activities/s, N={n} concurrent",
                "act/s",
                ACTIVITIES * rate,
                ACTIVITIES * n / group_s,
                raw_label=group_label,
                params=params,
            ),
        ]
    return results


def _serial_results(size: dict[str, Any], writes_wf: float) -> list[Result]:
    """Serial starts: each ``await spawn`` waits for its own commit."""
    results = []
    for n in size["serial"]:
        best: dict[str, Any] | None = None
        floor_rate = 0.0
        for _ in range(_repeat(n, size)):
            got = throughput(n, concurrent=False)
            if best is None or got["seconds"] < best["seconds"]:
                best = got
            floor_rate = max(floor_rate, raw_commit_rate(size["raw_commits"]))
        assert best is not None
        txn_wf = best["requests"] / n
        results.append(
            Result(
                SUITE,
                f"workflows/s, N={n}, {ACTIVITIES} activities, serial spawns",
                "wf/s",
                n / best["seconds"],
                floor_rate / txn_wf,
                raw_label=f"raw lmdb, 1 fsync/txn ({txn_wf:.0f} txn/wf)",
                target=_target(n),
                note=_note(best, n, writes_wf),
                params={"n": n, "activities": ACTIVITIES, "concurrent": False, **best},
            )
        )
    return results


def _latency_results(size: dict[str, Any]) -> list[Result]:
    runs = size["latency"]
    roost_s, raw_s, txns = latency(runs)
    params = {"runs": runs, "activities": ACTIVITIES, "commits": CRITICAL_COMMITS, "txns": txns}
    label = f"raw lmdb, {CRITICAL_COMMITS} dependent fsync'd commits"
    note = f"roost asked the store for {txns} transactions per workflow"
    return [
        Result(
            SUITE,
            f"one workflow ({ACTIVITIES} activities), {stat}",
            "s",
            q(roost_s),
            q(raw_s),
            raw_label=label,
            higher_is_better=False,
            target=Target("ratio<=", 1.5, "<= 1.5x") if stat == "median latency" else None,
            note=note if stat == "median latency" else "",
            params=params,
        )
        for stat, q in (
            ("median latency", statistics.median),
            ("p99 latency", lambda v: quantile(v, 0.99)),
        )
    ]


def _start_results(size: dict[str, Any]) -> list[Result]:
    n = size["starts"]
    roost_s, raw_s = serial_starts(n)
    floor_s, floor_raw_s = _floor.serial_starts(n)
    return [
        Result(
            SUITE,
            "serial workflow starts, each awaited",
            "starts/s",
            n / roost_s,
            n / raw_s,
            raw_label="raw lmdb, 1 fsync'd commit each",
            target=Target("ratio>=", 0.6, ">= 0.6x"),
            note="a start and its first activation in one commit; alternating chunks of 50",
            params={"starts": n, "roost_seconds": roost_s, "raw_seconds": raw_s},
        ),
        Result(
            SUITE,
            "serial workflow starts: roost's driver, row and run record, no host (the floor)",
            "starts/s",
            n / floor_s,
            n / floor_raw_s,
            raw_label="raw lmdb, 1 fsync'd commit each",
            note="the first activation's row and the run record in one fsync'd commit to two "
            "tables (benchmarks._floor); a host that writes these rows cannot do better",
            params={"starts": n, "floor_seconds": floor_s, "raw_seconds": floor_raw_s},
        ),
    ]


def _signal_results(size: dict[str, Any]) -> list[Result]:
    n = size["signal"]
    roost_s, raw_s, commits = signal_round_trips(n)
    label = f"raw lmdb, {commits} dependent fsync'd commits"
    params = {"round_trips": n, "commits": commits}
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


def _best_interleaved(
    n: int, size: dict[str, Any], **variant: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The concurrent N-series and its ``variant``, taking turns: the best run of each."""
    runs: list[list[dict[str, Any]]] = [[], []]
    for _ in range(_repeat(n, size)):
        runs[0].append(throughput(n, concurrent=True))
        runs[1].append(throughput(n, concurrent=True, **variant))
    plain, changed = (min(side, key=lambda r: r["seconds"]) for side in runs)
    return plain, changed


def _sync_activity_results(size: dict[str, Any]) -> list[Result]:
    """The N-series workflow with sync activities, next to async ones in the same run."""
    results = []
    for n in size["serial"]:
        asyn, sync = _best_interleaved(n, size, sync_activities=True)
        results.append(
            Result(
                SUITE,
                f"workflows/s, N={n} concurrent, {ACTIVITIES} sync activities each",
                "wf/s",
                n / sync["seconds"],
                n / asyn["seconds"],
                raw_label="roost, the same with async activities",
                target=Target("min", 5000, ">= 5000 wf/s") if n == TARGET_WORKFLOWS else None,
                note=f"{sync['requests']} txns in {sync['commits']} commits",
                params={"n": n, "sync": sync, "async": asyn},
            )
        )
    return results


def _tuned_gc_results(size: dict[str, Any]) -> list[Result]:
    """The N-series' cost of the cyclic collector: the same run with TUNED_GC thresholds."""
    results = []
    for n in size["tuned"]:
        plain, tuned = _best_interleaved(n, size, gc_threshold=TUNED_GC)
        results.append(
            Result(
                SUITE,
                f"workflows/s, N={n} concurrent, gc.set_threshold{TUNED_GC}",
                "wf/s",
                n / tuned["seconds"],
                n / plain["seconds"],
                raw_label="roost, default collector thresholds",
                note=(
                    f"collector: {tuned['gc_seconds']:.2f}s in {tuned['gc_collections']} "
                    f"collections, against {plain['gc_seconds']:.2f}s in "
                    f"{plain['gc_collections']} with the defaults"
                ),
                params={"n": n, "threshold": TUNED_GC, "tuned": tuned, "default": plain},
            )
        )
    return results


def run(quick: bool = False) -> list[Result]:
    """The workflow rows for ``python -m benchmarks``."""
    size = _sizes(quick)
    writes_wf, bytes_write = writes_per_workflow()
    value = b"v" * max(1, round(bytes_write) - 8)  # key() of an int is 8 bytes
    return [
        *_series_results(size, writes_wf, value),
        *_sync_activity_results(size),
        *_tuned_gc_results(size),
        *_serial_results(size, writes_wf),
        *_latency_results(size),
        *_start_results(size),
        *_signal_results(size),
    ]


# -- one scenario, for profiling -------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one workflow benchmark scenario.")
    parser.add_argument(
        "--scenario",
        required=True,
        choices=["throughput", "concurrent", "latency", "starts", "signal"],
    )
    parser.add_argument("--n", type=int, default=2000, help="workflows / runs")
    parser.add_argument("--sync", action="store_true", help="sync activities (throughput)")
    args = parser.parse_args(argv)
    n = args.n
    out: Any
    if args.scenario in ("throughput", "concurrent"):
        out = throughput(n, concurrent=args.scenario == "concurrent", sync_activities=args.sync)
    elif args.scenario == "latency":
        out = {"median": statistics.median(latency(n)[0])}
    elif args.scenario == "starts":
        roost_s, raw_s = serial_starts(n)
        out = {"us_per_start": 1e6 * roost_s / n, "raw_us_per_commit": 1e6 * raw_s / n}
    else:
        out = {"median": statistics.median(signal_round_trips(n)[0])}
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
