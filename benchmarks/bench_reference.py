"""Roost's workflows as a ratio of the reference executor (benchmarks/_reference.py), issue 15.

Run through ``python -m benchmarks`` (suite ``reference``). One side on its own, e.g. to
profile it or to count its instructions (``benchmarks.callgrind`` runs these)::

    python -m benchmarks.bench_reference --scenario ref-b --n 2000
    python -m pyinstrument -m benchmarks.bench_reference --scenario roost --n 2000

Every side runs N workflows of 3 quick activities, all started at once, fsync on (roost:
``durability="sync"``; the reference: an LMDB environment opened with ``sync=True``), on a
fresh temporary data directory, timed from the first start to the last result; CPU is
``time.process_time()`` over the same span (every thread of the process), per workflow.
Sides take turns (roost, ref a, ref b, roost, ...) and each row gives the best of each
side, with the spread over the repetitions in its note.

- ``roost``: ``process.spawn`` + ``process.monitor`` each from a nursery, EXITs awaited
  (``bench_workflows.throughput``); ``roost-sync`` the same with sync activities.
- ``ref-a``: the reference, one trio task per workflow; ``ref-b``: one task stepping every
  workflow per pass, a pass per commit; ``ref-c``: b with sync activities, one thread hop
  per pass.
- ``floor``: roost's own parts of each workflow (its driver, history rows, and its run
  record at the first step and at the close) with no host around them
  (``benchmarks._floor``). A host that stores those cannot be faster, so the floor's ratio
  to ``ref-a`` bounds its ratio. ``floor-close-record`` encodes the record at the close
  only, the bound of a host that keeps a smaller row for open runs; ``floor-no-records``
  encodes none.
- latency: one workflow at a time through ``ref-a`` next to four dependent raw fsync'd
  commits (its contract's critical path), interleaved run by run.

``measure_recovery`` is the reference row of ``bench_recovery``'s mid-activity recovery: a
build child runs N workflows through ``ref-b`` and blocks once their first results are
committed, just before writing the pass that holds their second ones (whose activities
ran); it is SIGKILLed, and a recovery child is timed from opening the crashed directory
until every workflow has finished (the second activities run again)::

    python -m benchmarks.bench_reference --role build --n 10000 --dir /tmp/refrec  # then kill it
    python -m pyinstrument -m benchmarks.bench_reference --role recover --n 10000 --dir /tmp/refrec
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from benchmarks import _floor
from benchmarks import _reference as ref
from benchmarks._harness import Children, Result, Target, now
from benchmarks._wf_common import quantile, raw_commits, three_steps, three_sync_steps, tmpdir
from benchmarks.bench_workflows import CRITICAL_COMMITS, throughput

SUITE = "reference"
MODULE = "benchmarks.bench_reference"
BUILD_TIMEOUT = 600.0
ACTIVITIES = 3
TARGET_N = 2000


# -- the reference's workflows ---------------------------------------------------------------


async def step(x: int) -> int:
    return x + 1


def sync_step(x: int) -> int:
    return x + 1


async def three(x: int) -> int:
    a = await ref.call(step, x)
    b = await ref.call(step, a)
    return await ref.call(step, b)


async def three_sync(x: int) -> int:
    a = await ref.call(sync_step, x)
    b = await ref.call(sync_step, a)
    return await ref.call(sync_step, b)


WORKFLOWS: dict[str, ref.Workflow] = {"three": three, "three_sync": three_sync}


# -- one side --------------------------------------------------------------------------------


def reference(n: int, variant: str) -> dict[str, Any]:
    """N workflows through reference variant ``a``, ``b`` or ``c`` (c: sync activities)."""
    wf = three_sync if variant == "c" else three

    async def main(path: str) -> dict[str, Any]:
        async with ref.open_executor(path) as ex:
            t0, cpu0 = now(), time.process_time()
            runs = [ex.new_run(wf, i) for i in range(n)]
            if variant == "a":
                results = await ref.run_tasks(ex, runs)
            else:
                results = await ref.run_batched(ex, runs, thread_batch=variant == "c")
            out = {"seconds": now() - t0, "cpu_seconds": time.process_time() - cpu0}
            assert len(results) == n, f"{len(results)} of {n} workflows finished"
            return out | {"commits": ex.commits}

    with tmpdir() as tmp:
        return trio.run(main, tmp)


def roost(n: int, *, sync: bool = False) -> dict[str, Any]:
    return throughput(n, concurrent=True, workflow=three_sync_steps if sync else three_steps)


SCENARIOS: dict[str, Callable[[int], dict[str, Any]]] = {
    "roost": roost,
    "roost-sync": lambda n: roost(n, sync=True),
    "ref-a": lambda n: reference(n, "a"),
    "ref-b": lambda n: reference(n, "b"),
    "ref-c": lambda n: reference(n, "c"),
    "floor": _floor.workflows,
    "floor-close-record": lambda n: _floor.workflows(n, "close"),
    "floor-no-records": lambda n: _floor.workflows(n, "none"),
}

LABELS = {
    "ref-a": "reference a (a trio task per workflow)",
    "ref-b": "reference b (batched passes)",
    "ref-c": "reference c (batched, 1 thread hop/pass)",
}
FLOORS = {
    "floor": "roost's driver, history rows and both run records, no host (the floor)",
    "floor-close-record": "the floor with the run record at the close only",
    "floor-no-records": "the floor without run records",
}


def reference_latency(runs: int) -> tuple[list[float], list[float]]:
    """Seconds of one workflow at a time through ``ref-a``, and of 4 raw commits after each."""

    async def main(path: str) -> tuple[list[float], list[float]]:
        out: list[float] = []
        raw_s: list[float] = []
        async with ref.open_executor(path) as ex:
            await ref.run_tasks(ex, [ex.new_run(three, -1)])  # warm up
            with raw_commits() as raw:
                for i in range(runs):
                    t0 = now()
                    await ref.run_tasks(ex, [ex.new_run(three, i)])
                    out.append(now() - t0)
                    raw_s.append(raw.run(CRITICAL_COMMITS))
        return out, raw_s

    with tmpdir() as tmp:
        return trio.run(main, tmp)


# -- recovery after SIGKILL ------------------------------------------------------------------


def build(n: int, data_dir: str) -> None:
    """Run ``n`` workflows through ``ref-b``; block before committing their second results."""
    committed = {"results": 0, "commits": 0}

    def on_batch(batch: list[ref.Record]) -> None:
        if committed["results"] >= n:
            print(json.dumps(committed), flush=True)
            threading.Event().wait()  # until the SIGKILL
        committed["results"] += sum(1 for k, _ in batch if k[:1] == b"r")
        committed["commits"] += 1

    async def main() -> None:
        async with ref.open_executor(data_dir, on_batch) as ex:
            await ref.run_batched(ex, [ex.new_run(three, i) for i in range(n)])

    trio.run(main)
    raise RuntimeError("the build finished instead of blocking")


def recover(n: int, data_dir: str) -> dict[str, Any]:
    """Seconds from opening the crashed ``data_dir`` until all ``n`` workflows finished."""

    async def main() -> dict[str, Any]:
        t0 = now()
        async with ref.open_executor(data_dir) as ex:
            runs = ex.recover(WORKFLOWS)
            opened = now() - t0
            results = await ref.run_batched(ex, runs)
            seconds = now() - t0
            assert len(runs) == len(results) == n, f"{len(results)} of {n} recovered"
            return {"seconds": seconds, "open_seconds": opened, "commits": ex.commits}

    return trio.run(main)


def measure_recovery(n: int) -> dict[str, Any]:
    """Build ``n`` in-flight reference workflows in a child, SIGKILL it, time a recovery."""
    with tmpdir() as tmp:
        data_dir = os.path.join(tmp, "data")
        os.mkdir(data_dir)
        cmd = [sys.executable, "-m", MODULE, "--role", "build", "--n", str(n), "--dir", data_dir]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parent.parent
        )
        assert proc.stdout is not None
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ)
                line = proc.stdout.readline() if sel.select(BUILD_TIMEOUT) else b""
        finally:
            os.kill(proc.pid, signal.SIGKILL)  # the crash being measured
            proc.wait()
            proc.stdout.close()
        if not line.strip():
            raise RuntimeError(f"reference build child (n={n}) failed (exit {proc.returncode})")
        args = ["--role", "recover", "--n", str(n), "--dir", data_dir]
        (got,) = Children(MODULE, [args]).results()
    return got | {"build": json.loads(line)}


# -- the suite -------------------------------------------------------------------------------


def _alternate(plan: dict[str, Callable[[], dict[str, Any]]], repeat: int) -> dict[str, Any]:
    """Every side ``repeat`` times, taking turns; each side's runs in order."""
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in plan}
    for _ in range(repeat):
        for key, fn in plan.items():
            runs[key].append(fn())
    return runs


def _spread(n: int, runs: list[dict[str, Any]]) -> str:
    rates = sorted(n / r["seconds"] for r in runs)
    cpus = sorted(1e6 * r["cpu_seconds"] / n for r in runs)
    return (
        f"{rates[0]:,.0f}-{rates[-1]:,.0f} wf/s, {cpus[0]:.0f}-{cpus[-1]:.0f} us CPU/wf "
        f"over {len(runs)} runs"
    )


def _best(runs: list[dict[str, Any]], field: str) -> float:
    return min(r[field] for r in runs)


def _rows(n: int, runs: dict[str, list[dict[str, Any]]]) -> list[Result]:
    sync = "roost-sync" in runs
    kind = "sync" if sync else "async"
    me = "roost-sync" if sync else "roost"
    mine = runs[me]
    rate = n / _best(mine, "seconds")
    cpu = 1e6 * _best(mine, "cpu_seconds") / n
    params = {"n": n, "activities": ACTIVITIES, "kind": kind, "runs": runs}
    results = []
    for side, their in runs.items():
        if side == me or side in FLOORS:
            continue
        target = None  # the targets hold at its sizes, not at the quick ones
        if sync and n == TARGET_N:
            target = Target("min", 5000, ">= 5,000 wf/s")
        elif n >= TARGET_N and not sync:
            target = (
                Target("ratio>=", 0.45, ">= 0.45x ref a")
                if side == "ref-a"
                else Target("min", 10_000, ">= 10,000 wf/s")
            )
        results.append(
            Result(
                SUITE,
                f"workflows/s, N={n}, {ACTIVITIES} {kind} activities",
                "wf/s",
                rate,
                n / _best(their, "seconds"),
                raw_label=LABELS[side],
                target=target,
                note=f"roost {_spread(n, mine)}; {side} {_spread(n, their)}",
                params=params,
            )
        )
        results.append(
            Result(
                SUITE,
                f"CPU per workflow, N={n}, {ACTIVITIES} {kind} activities",
                "us/wf",
                cpu,
                1e6 * _best(their, "cpu_seconds") / n,
                raw_label=LABELS[side],
                higher_is_better=False,
                target=Target("max", 100, "<= 100 us") if n >= TARGET_N and not sync else None,
                params=params,
            )
        )
    return results


def _floor_rows(n: int, runs: dict[str, list[dict[str, Any]]]) -> list[Result]:
    """Each floor next to reference a, from the same alternating runs."""
    ref_a = runs["ref-a"]
    return [
        Result(
            SUITE,
            f"workflows/s, N={n}, {ACTIVITIES} async activities: {label}",
            "wf/s",
            n / _best(runs[side], "seconds"),
            n / _best(ref_a, "seconds"),
            raw_label=LABELS["ref-a"],
            note=f"{side} {_spread(n, runs[side])}; ref-a {_spread(n, ref_a)}; a host that "
            "stores these records cannot have a better ratio to ref a",
            params={"n": n, "activities": ACTIVITIES, "runs": runs},
        )
        for side, label in FLOORS.items()
    ]


def _latency_rows(runs: int) -> list[Result]:
    ref_s, raw_s = reference_latency(runs)
    label = f"raw lmdb, {CRITICAL_COMMITS} dependent fsync'd commits"
    return [
        Result(
            SUITE,
            f"one workflow ({ACTIVITIES} activities) through reference a, {stat}",
            "s",
            q(ref_s),
            q(raw_s),
            raw_label=label,
            higher_is_better=False,
            params={"runs": runs},
        )
        for stat, q in (
            ("median latency", statistics.median),
            ("p99 latency", lambda v: quantile(v, 0.99)),
        )
    ]


def run(quick: bool = False) -> list[Result]:
    """The reference rows for ``python -m benchmarks``."""
    sizes = [50] if quick else [TARGET_N, 10_000]
    sync_sizes = [50] if quick else [TARGET_N]
    repeat = 1 if quick else 3
    results: list[Result] = []
    for n in sizes:
        sides = ("roost", "ref-a", "ref-b", *FLOORS)
        plan = {key: (lambda key=key, n=n: SCENARIOS[key](n)) for key in sides}
        runs = _alternate(plan, repeat)
        results += _rows(n, runs) + _floor_rows(n, runs)
    for n in sync_sizes:
        plan = {key: (lambda key=key, n=n: SCENARIOS[key](n)) for key in ("roost-sync", "ref-c")}
        results += _rows(n, _alternate(plan, repeat))
    return results + _latency_rows(10 if quick else 200)


# -- one scenario, for profiling and callgrind -----------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one side of the reference benchmark.")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), help="one side, timed")
    parser.add_argument("--role", choices=["build", "recover"], help="a recovery child")
    parser.add_argument("--n", type=int, default=TARGET_N, help="workflows")
    parser.add_argument("--dir", help="the data directory of --role")
    args = parser.parse_args(argv)
    if args.role == "build":
        build(args.n, args.dir)
    if args.role == "recover":
        out = recover(args.n, args.dir)
    elif args.scenario is not None:
        out = SCENARIOS[args.scenario](args.n)
    else:
        parser.error("give --scenario or --role")
    print(json.dumps(out, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
