"""Recovery after a real ``kill -9``: time from opening a node on a crashed data directory
until every in-flight workflow has resumed and completed.

Run through ``python -m benchmarks``. For a profile, prepare a crashed data directory once
and run the recovering child under the profiler (it changes the directory: prepare again
for a second profile)::

    python -m benchmarks.bench_recovery --role prepare --kind timer --n 2000 --dir /tmp/rec
    python -m pyinstrument -m benchmarks.bench_recovery --role recover --n 2000 --dir /tmp/rec

Each measurement:

1. A build child (a fresh interpreter) opens a node on a new data directory with fsync on
   and starts N workflows concurrently. ``timer``: ``sleeper`` arms a durable timer and, in
   the same activation, sends "armed" to the build process, so N "armed" messages mean N
   timers are durable. ``activity``: ``stuck_steps`` runs an activity, then a second one
   that hangs in the build child; an activity only runs once its scheduling is committed,
   so N hung activities mean N workflows durably in the middle of their activities. The
   child then writes one JSON line on stdout and the parent SIGKILLs it at once.
2. ``timer`` only: the parent waits until every timer is due (the timers are set just long
   enough for the build; a build slower than its timers is redone with longer ones).
3. Reference: py-lmdb opens the crashed data directory and reads every table.
4. A recovery child (a fresh interpreter; ``hang`` returns at once there) reads the PIDs,
   then is timed from ``open_node`` on the crashed directory until it has received the
   EXIT of every one of the N workflows (``process.monitor`` each; timers fire at once,
   activities run again and the workflows finish). It also reports the process CPU time
   over the same span (``cpu_seconds``): on a shared machine it moves far less than the
   wall time.
5. ``activity`` only: the same crash and recovery with the reference executor
   (``bench_reference.measure_recovery``: its workflows killed between their first and
   second activity result), timed the same way, for the row that is a ratio of it.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

import roost
from benchmarks._harness import Children, Result, Target, now
from benchmarks._wf_common import (
    APP,
    HANG,
    manager,
    raw_scan,
    sleeper,
    store,
    stuck_steps,
    tmpdir,
    wait_exits,
)
from benchmarks.bench_reference import measure_recovery
from roost import process

SUITE = "recovery"
MODULE = "benchmarks.bench_recovery"
TARGET_N = 2000
TARGET_N_V2 = 10_000  # issue 15: 10,000 in-flight workflows recovered in < 2 s
KILL_MARGIN = 0.3  # seconds a timer must still have to run when the build child is killed
BUILD_TIMEOUT = 600.0


# -- inside the children ---------------------------------------------------------------------


def _timer_for(n: int) -> float:
    """Timer seconds that outlast building ``n`` sleepers (~1 ms each on a loaded box)."""
    return 0.6 + 0.0015 * n


def build(kind: str, n: int, data_dir: str, pids_file: str, seconds: float) -> None:
    """Start ``n`` in-flight workflows, print one JSON line, then wait to be killed."""
    t_start = time.time()

    async def body(node: Any) -> None:
        me = process.pid()
        armed = process.listen("armed")
        pids: list[str] = []
        if kind == "activity":
            HANG.update(on=True, count=0, target=n, event=trio.Event())

        async def start(i: int) -> None:
            if kind == "timer":
                pid = await process.spawn(sleeper, seconds, me)
            else:
                pid = await process.spawn(stuck_steps, i)
            pids.append(str(pid))

        t0 = now()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(start, i)
        if kind == "timer":
            for _ in range(n):
                await armed.receive()
        else:
            await HANG["event"].wait()
        built = now() - t0
        await trio.Path(pids_file).write_text(json.dumps(pids), encoding="utf-8")
        ready = time.time()
        info = {
            "ready": ready,
            "build_seconds": built,
            "early": kind == "timer" and ready + KILL_MARGIN > t_start + seconds,
            "commits": store(node).stats.commits,
        }
        print(json.dumps(info), flush=True)
        await trio.sleep_forever()  # until the SIGKILL

    async def main() -> None:
        async with roost.open_node(APP, data_dir, durability="sync", shutdown_grace=0) as node:
            await body(node)

    trio.run(main)


def recover(n: int, data_dir: str, pids_file: str) -> dict[str, Any]:
    """Open a node on the crashed ``data_dir``; seconds until all ``n`` workflows EXITed."""
    pids = [roost.Pid.parse(s) for s in json.loads(Path(pids_file).read_text(encoding="utf-8"))]
    assert len(pids) == n, f"{len(pids)} PIDs stored for {n} workflows"
    out: dict[str, Any] = {}

    async def main() -> None:
        t0, cpu0 = now(), time.process_time()
        async with roost.open_node(APP, data_dir, durability="sync", shutdown_grace=0) as node:
            out["open_seconds"] = now() - t0
            m = manager(node)
            out["resumed"] = len(m.runs)
            with trio.fail_after(BUILD_TIMEOUT):
                for pid in pids:
                    process.monitor(pid)
                await wait_exits(n)
            out["seconds"] = now() - t0
            out["cpu_seconds"] = time.process_time() - cpu0
            out["commits"] = store(node).stats.commits
            out["requests"] = store(node).stats.requests
            out["replays"] = m.stats["replays"]
            t_close = now()
        out["close_seconds"] = now() - t_close

    trio.run(main)
    return out


# -- in the parent ---------------------------------------------------------------------------


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise TimeoutError(f"build child gave no sign of life within {timeout:.0f}s")
    return proc.stdout.readline()


def prepare(kind: str, n: int, data_dir: str, pids_file: str) -> dict[str, Any]:
    """Build ``n`` in-flight workflows in a child, SIGKILL it; for timers, wait until due."""
    seconds = _timer_for(n)
    err_path = Path(data_dir).with_suffix(".build-stderr")
    err_path.parent.mkdir(parents=True, exist_ok=True)
    for _attempt in range(4):
        args = ["--role", "build", "--kind", kind, "--n", str(n), "--dir", data_dir]
        args += ["--pids", pids_file, "--timer", str(seconds)]
        with err_path.open("w", encoding="utf-8") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", MODULE, *args],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            try:
                line = _read_line(proc, BUILD_TIMEOUT)
            finally:
                os.kill(proc.pid, signal.SIGKILL)  # the crash being measured
                proc.wait()
                assert proc.stdout is not None
                proc.stdout.close()
        if not line.strip():
            detail = err_path.read_text(encoding="utf-8").strip()[-2000:]
            raise RuntimeError(f"build child ({kind}, n={n}) failed:\n{detail}")
        info: dict[str, Any] = json.loads(line)
        if not info["early"]:
            break
        shutil.rmtree(data_dir, ignore_errors=True)  # a timer may have fired: longer ones
        seconds *= 2
    else:
        raise RuntimeError(f"building {n} sleepers kept outlasting their timers")
    if kind == "timer":  # every timer falls due while the node is down
        time.sleep(max(0.0, info["ready"] + seconds + 0.05 - time.time()))
    info["timer_seconds"] = seconds if kind == "timer" else None
    return info


def measure(kind: str, n: int) -> dict[str, Any]:
    """Prepare a crashed directory, scan it raw, then time a recovery child on it."""
    with tmpdir() as tmp:
        data_dir, pids_file = os.path.join(tmp, "data"), os.path.join(tmp, "pids.json")
        info = prepare(kind, n, data_dir, pids_file)
        data_bytes = os.path.getsize(os.path.join(data_dir, "data.mdb"))
        scan = min(raw_scan(data_dir) for _ in range(3))
        args = ["--role", "recover", "--n", str(n), "--dir", data_dir, "--pids", pids_file]
        (got,) = Children(MODULE, [args]).results()
        apparent = os.stat(os.path.join(data_dir, "data.mdb")).st_blocks * 512
    reference = measure_recovery(n) if kind == "activity" else None
    return {
        **got,
        "reference": reference,
        "n": n,
        "kind": kind,
        "build": info,
        "raw_scan_seconds": scan,
        "data_file_bytes": data_bytes,
        "data_file_allocated": apparent,
    }


def _rows(r: dict[str, Any]) -> list[Result]:
    n, kind = r["n"], r["kind"]
    what = "timer-blocked (due)" if kind == "timer" else "mid-activity"
    name = f"recovery after SIGKILL: {n} {what} workflows"
    label = "raw lmdb open + scan all tables"
    build = r["build"]
    note = (
        f"{r['resumed']} resumed; open_node {r['open_seconds']:.3f}s, then "
        f"{r['seconds'] - r['open_seconds']:.3f}s to the last EXIT ({r['cpu_seconds']:.3f}s CPU "
        f"in all); {r['commits']} commits / "
        f"{r['requests']} txns; {r['replays']} replays; built in {build['build_seconds']:.1f}s"
        f" ({build['commits']} commits) before the kill"
    )
    params = {k: v for k, v in r.items() if k != "build"} | {"build": build}
    if n == TARGET_N_V2:
        target: Target | None = Target("max", 2.0, "< 2 s")
    elif n == TARGET_N and kind == "timer":
        target = Target("max", 3.0, "< 3 s")
    else:
        target = None
    ref_rows = []
    if r["reference"] is not None:
        ref_rows.append(
            Result(
                SUITE,
                f"{name}, open to all done",
                "s",
                r["seconds"],
                r["reference"]["seconds"],
                raw_label="reference executor b, the same crash",
                higher_is_better=False,
                target=target,
                params=params,
            )
        )
    return [
        *ref_rows,
        Result(
            SUITE,
            f"{name}, open to all done",
            "s",
            r["seconds"],
            r["raw_scan_seconds"],
            raw_label=label,
            higher_is_better=False,
            target=target,
            note=note,
            params=params,
        ),
        Result(
            SUITE,
            f"{name}, workflows/s",
            "wf/s",
            n / r["seconds"],
            n / r["raw_scan_seconds"],
            raw_label=label,
            params=params,
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    """The recovery rows for ``python -m benchmarks``."""
    if quick:
        plan = [("timer", 20), ("activity", 20)]
    else:
        plan = [("timer", 100), ("timer", 1000), ("timer", TARGET_N), ("timer", 10_000)]
        plan += [("activity", TARGET_N), ("activity", TARGET_N_V2)]
    results = []
    for kind, n in plan:
        results += _rows(measure(kind, n))
    return results


# -- the children's entry point, and profiling -----------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Recovery benchmark children and helpers.")
    parser.add_argument("--role", required=True, choices=["build", "recover", "prepare"])
    parser.add_argument("--kind", choices=["timer", "activity"], default="timer")
    parser.add_argument("--n", type=int, default=TARGET_N)
    parser.add_argument("--dir", required=True, help="the data directory")
    parser.add_argument("--pids", help="where the PIDs go (default: next to --dir)")
    parser.add_argument("--timer", type=float, help="build: the timers' seconds")
    args = parser.parse_args(argv)
    pids = args.pids or f"{args.dir.rstrip('/')}.pids.json"
    if args.role == "build":
        build(args.kind, args.n, args.dir, pids, args.timer or _timer_for(args.n))
        return 0
    if args.role == "prepare":
        info = prepare(args.kind, args.n, args.dir, pids)
        print(json.dumps(info), flush=True)
        print(
            f"now: python -m pyinstrument -m {MODULE} --role recover --n {args.n} --dir {args.dir}",
            file=sys.stderr,
        )
        return 0
    print(json.dumps(recover(args.n, args.dir, pids)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
