"""The node that ``test_workflow_crash.py`` runs in a real subprocess, kills and restarts.

Usage: ``python crash_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

- ``PHASE=run`` opens a node on ``DATA_DIR``, starts the scenario's workflows and then waits
  to be killed (SIGKILL, by the test or by an activity of the scenario).
- ``PHASE=resume`` first reads what the killed node left in the store (``before``), then
  opens a node on the same directory (it recovers the open runs by itself), waits for every
  workflow to close, shuts down, reads the store again (``after``) and writes everything as
  JSON to ``WORK_DIR/resume.json``.

Activities append JSON lines to ``WORK_DIR/activities.log`` when they start and when they
finish (just before returning their value), tagged with the phase; the signal sender appends
to ``WORK_DIR/signals.log`` after each receipt resolved. Every line is one ``os.write`` on an
``O_APPEND`` descriptor, so a SIGKILL cannot tear it.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import trio

import roost
from roost import channel, coroutine, funcs, process, workflow
from roost.storage import Codec, key, open_lmdb_store

app = roost.App("crash")
HOST = "crash:workflows"
WORK = Path()
PHASE = "run"

# Scenario parameters (the test imports these to compute the expected results).
SIGNAL_EXTRA = 5  # values sent after the restart: SIGNAL_BASE .. SIGNAL_BASE + SIGNAL_EXTRA - 1
SIGNAL_BASE = 10_000
SIGNAL_EVERY = 10  # the counter runs an activity for every value divisible by this
SIGNAL_BURST = 5  # sends made before awaiting their receipts, in the burst scenario
# fanout workflows: (activity delays, timer durations); "die-..." activities kill the node.
FANOUT = ([0, 0.05, 0.3, 0.6, 0, 0.1], [0.2, 0.4, 0.8])
FANOUT_DIE = ([0.2, 0, 0.05, 0.4, 0.3, 0.1], [0.3])
SLEEP_SHORT, SLEEP_LONG = 2.0, 6.0  # timers: one falls due while the node is down, one after
LATE_MAX = 1000  # "late-k" workflows started while the "die" workflow kills the node


def square_plus_one(x: int) -> int:
    """What ``step`` / ``sync_step`` compute (the test uses it for expected results)."""
    return x * x + 1


# -- logs ------------------------------------------------------------------------------------


def append_line(name: str, **fields: Any) -> None:
    """Append one JSON line to ``WORK/name`` in a single write."""
    data = (json.dumps(fields, sort_keys=True) + "\n").encode()
    fd = os.open(WORK / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def touch(name: str) -> None:
    """Create the marker file ``WORK/name`` (atomically, via rename)."""
    tmp = WORK / f".{name}.tmp"
    tmp.write_text(str(time.time()))
    tmp.replace(WORK / name)


def _activity_line(event: str, label: str) -> None:
    info = roost.activity_info()
    assert info is not None
    append_line(
        "activities.log",
        event=event,
        wf=info.workflow_id,
        seq=info.seq,
        attempt=info.attempt,
        key=info.idempotency_key,
        label=label,
        phase=PHASE,
        os_pid=os.getpid(),
    )


# -- activities ------------------------------------------------------------------------------


def _crash_point(label: str) -> bool:
    """In the first run: kill ourselves at a ``die-`` step; True for a ``hold-`` step."""
    if PHASE != "run":
        return False
    if label.startswith("die-"):
        os.kill(os.getpid(), signal.SIGKILL)
    if label.startswith("hold-"):
        touch(f"held-{label}")
        return True
    return False


@app.activity
async def step(label: str, x: int, delay: float) -> int:
    """An async activity (a trio task): logs, sleeps ``delay``, logs, returns x*x+1."""
    _activity_line("start", label)
    if _crash_point(label):
        await trio.sleep_forever()  # until the test kills the process
    await trio.sleep(delay)
    _activity_line("done", label)
    return square_plus_one(x)


@app.activity
def sync_step(label: str, x: int, delay: float) -> int:
    """The same as ``step``, as a sync activity (runs in a worker thread)."""
    _activity_line("start", label)
    if _crash_point(label):
        while True:  # until the test kills the process
            time.sleep(0.05)
    time.sleep(delay)
    _activity_line("done", label)
    return square_plus_one(x)


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="0.1s", backoff_coefficient=1.0))
async def flaky(label: str, x: int, failures: int) -> int:
    """Fails its first ``failures`` attempts; a ``hold-`` one holds on attempt 2 (first run)."""
    _activity_line("start", label)
    info = roost.activity_info()
    assert info is not None
    if info.attempt == 2 and _crash_point(label):
        await trio.sleep_forever()  # until the test kills the process
    if info.attempt <= failures:
        raise ConnectionError(f"{label} attempt {info.attempt} failed")
    _activity_line("done", label)
    return square_plus_one(x)


# -- workflows -------------------------------------------------------------------------------


@app.workflow
async def chain(steps: list[list[Any]]) -> list[int]:
    """Run ``[label, x, delay, sync]`` steps one after another."""
    out = []
    for label, x, delay, sync in steps:
        entry = sync_step if sync else step
        out.append(await funcs.call(entry, label, x, delay))
    return out


@app.workflow
async def retrying(label: str, x: int, failures: int) -> int:
    """One activity that needs retries."""
    return int(await funcs.call(flaky, label, x, failures))


@app.workflow
async def fanout(tag: str, delays: list[float], timers: list[float]) -> dict[str, Any]:
    """On "go", schedule every activity and timer in one activation; gather; one more."""
    await process.listen("go").receive()
    done: Any = channel.new(len(delays) + len(timers))

    async def one(i: int, delay: float) -> None:
        entry = sync_step if i % 2 else step
        await done.send(["activity", i, await funcs.call(entry, f"{tag}-{i}", i, delay)])

    async def tick(j: int, seconds: float) -> None:
        await roost.sleep(seconds)
        await done.send(["timer", j, seconds])

    for i, delay in enumerate(delays):
        coroutine.spawn(one, i, delay)
    for j, seconds in enumerate(timers):
        coroutine.spawn(tick, j, seconds)
    deadline = roost.after(max(timers, default=0))
    got = [await done.receive() for _ in range(len(delays) + len(timers))]
    await deadline.receive()
    final = await funcs.call(step, f"{tag}-final", len(delays), 0)
    return {"got": sorted(got), "final": final}


@app.workflow
async def sleeper(seconds: float, notify: str) -> dict[str, Any]:
    """Sleep on a durable timer; return the workflow times before and after.

    Tells ``notify`` "armed" in the activation that starts the timer: that message is
    dispatched only after the commit, so it arrives once the timer is stored.
    """
    before = roost.now()
    process.send(notify, "armed", workflow.info().workflow_id)
    await roost.sleep(seconds)
    after = roost.now()
    return {"seconds": seconds, "before": before.isoformat(), "after": after.isoformat()}


@app.workflow
async def counter() -> dict[str, Any]:
    """Collect "add" signals until a None; run an activity for every SIGNAL_EVERY-th value."""
    got: list[int] = []
    squares: list[int] = []
    adds = process.listen("add")
    while True:
        value = await adds.receive()
        if value is None:
            return {"got": got, "squares": squares}
        got.append(value)
        if value % SIGNAL_EVERY == 0:
            squares.append(await funcs.call(step, f"sig-{value}", value, 0))


@app.process
async def sender(dest: str, count: int, burst: int) -> None:
    """Send "add" 0..count-1 in bursts of ``burst`` sends made without waiting; then await
    each receipt of the burst in turn and log its value once it resolved (durable)."""
    for first in range(0, count, burst):
        receipts = [(i, process.send(dest, "add", i)) for i in range(first, first + burst)]
        for i, receipt in receipts:
            await receipt
            append_line("signals.log", i=i, phase=PHASE)


# -- scenarios (the first run) ---------------------------------------------------------------


def wf_pid(workflow_id: str) -> roost.Pid:
    """The PID of a workflow of this app on a node named "local"."""
    return roost.Pid("local", HOST, workflow_id)


async def start(workflow_id: str, entry: Any, *args: Any) -> roost.Pid:
    """Start a workflow under an explicit id."""
    return await process.with_options(id=workflow_id).spawn(entry, *args)


async def run_activities(_node: Any) -> None:
    """Test 1: chains of activities; three hold until killed (async, sync, 2nd attempt)."""
    for k in range(4):
        steps = [[f"busy{k}-{i}", 10 * k + i, 0.03, bool(i % 2)] for i in range(8)]
        await start(f"busy-{k}", chain, steps)
    await start(
        "hold-async",
        chain,
        [["a", 1, 0, False], ["b", 2, 0, True], ["hold-c", 3, 0, False], ["d", 4, 0, False]],
    )
    await start("hold-sync", chain, [["e", 5, 0, False], ["hold-f", 6, 0, True]])
    await start("hold-retry", retrying, "hold-g", 7, 2)


async def _fanouts(plans: dict[str, tuple[list[float], list[float]]]) -> None:
    pids = [await start(wf, fanout, wf, delays, timers) for wf, (delays, timers) in plans.items()]
    # All of them go at once: their activations run concurrently.
    receipts = [process.send(pid, "go") for pid in pids]
    for receipt in receipts:
        await receipt


async def run_fanout(_node: Any) -> None:
    """Test 2: workflows that schedule many activities and timers in one activation."""
    await _fanouts({f"fan{k}": FANOUT for k in range(4)})


async def run_fanout_die(_node: Any) -> None:
    """Test 2b: as ``run_fanout``, plus one whose activities kill the node when they start;
    meanwhile more workflows keep being started (some will be cut off by the kill)."""
    await _fanouts({**{f"fan{k}": FANOUT for k in range(3)}, "die": FANOUT_DIE})
    for k in range(LATE_MAX):
        await start(f"late-{k}", chain, [[f"late{k}", k, 0, bool(k % 2)]])


async def run_timers(_node: Any) -> None:
    """Test 3: two workflows sleeping on durable timers; "ready" once both are stored."""
    armed = process.listen("armed")
    await start("sleep-short", sleeper, SLEEP_SHORT, str(process.pid()))
    await start("sleep-long", sleeper, SLEEP_LONG, str(process.pid()))
    with trio.fail_after(30):
        got = {await armed.receive(), await armed.receive()}
    assert got == {"sleep-short", "sleep-long"}, got
    touch("ready")


async def run_signals(_node: Any) -> None:
    """Test 4: a plain process signals a workflow, awaiting and logging each receipt."""
    pid = await start("sig", counter)
    await process.spawn(sender, str(pid), SIGNAL_BASE, 1)


async def run_signal_bursts(_node: Any) -> None:
    """Test 4b: as ``run_signals``, in bursts of SIGNAL_BURST sends before any await."""
    pid = await start("sig", counter)
    await process.spawn(sender, str(pid), SIGNAL_BASE, SIGNAL_BURST)


SCENARIOS = {
    "activities": run_activities,
    "fanout": run_fanout,
    "fanout_die": run_fanout_die,
    "timers": run_timers,
    "signals": run_signals,
    "signal_bursts": run_signal_bursts,
}


# -- reading the store -----------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """A JSON form of history events, records and results (attrs classes get a "type")."""
    if attrs.has(type(value)):
        out = {"type": type(value).__name__}
        for field in attrs.fields(type(value)):
            out[field.name] = to_json(getattr(value, field.name))
        return out
    if isinstance(value, roost.Error):
        return {"type": "Error", "kind": str(value.kind), "message": value.message}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, roost.Pid):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def snapshot(data_dir: str) -> dict[str, Any]:
    """Every run with its activations, pending inbox events, activity tasks and timers.

    Reads the store directly (no node: nothing is recovered or resumed while reading).
    """
    codec = Codec()
    store = open_lmdb_store(data_dir)
    try:
        with store.read() as txn:
            runs = {}
            for _, data in txn.range("runs"):
                record = codec.decode(data)
                prefix = key(record.run_id)
                runs[record.workflow_id] = {
                    "record": to_json(record),
                    "activations": [
                        to_json(codec.decode(v)) for _, v in txn.prefix("histories", prefix)
                    ],
                    "inbox": [to_json(codec.decode(v)) for _, v in txn.prefix("inbox", prefix)],
                    "tasks": [to_json(codec.decode(v)) for _, v in txn.prefix("tasks", prefix)],
                }
            timers = [to_json(codec.decode(v)) for _, v in txn.range("timers")]
            for timer in timers:
                run = runs.get(timer["workflow_id"])
                if run is not None and run["record"]["run_id"] == timer["run_id"]:
                    run.setdefault("timers", []).append(timer)
            counts = {table: txn.count(table) for table in ("inbox", "tasks", "timers")}
    finally:
        store.close()
    for run in runs.values():
        run.setdefault("timers", [])
    return {"runs": runs, "counts": counts}


# -- phases ----------------------------------------------------------------------------------


async def run_phase(data_dir: str, scenario: str) -> None:
    """Start the scenario, then wait to be killed."""
    async with roost.open_node(app, data_dir, durability="sync") as node:
        await SCENARIOS[scenario](node)
        touch("started")
        await trio.sleep_forever()


async def resume_phase(data_dir: str, scenario: str) -> None:
    """Restart on the killed node's data dir, wait for every workflow, report as JSON."""
    before = snapshot(data_dir)
    opened_at = time.time()
    async with roost.open_node(app, data_dir, durability="sync") as node:
        if scenario in ("signals", "signal_bursts"):
            dest = wf_pid("sig")
            for i in range(SIGNAL_BASE, SIGNAL_BASE + SIGNAL_EXTRA):
                await process.send(dest, "add", i)
            await process.send(dest, "add", None)
        waiting = {wf_pid(wf) for wf in before["runs"]}
        for pid in waiting:
            process.monitor(pid)
        exits = {}
        with trio.fail_after(40):
            while waiting:
                event = await process.events().receive()
                if isinstance(event, roost.Exit) and event.pid in waiting:
                    waiting.discard(event.pid)
                    exits[event.pid.id] = {
                        "value": to_json(event.value),
                        "error": to_json(event.error),
                        "at": time.time(),
                    }
        histories = {wf: to_json(node.history(wf)) for wf in before["runs"]}
        described = {wf: to_json(node.describe(wf)) for wf in before["runs"]}
    after = snapshot(data_dir)
    report = {
        "before": before,
        "after": after,
        "exits": exits,
        "histories": histories,
        "describe": described,
        "opened_at": opened_at,
    }
    out = WORK / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, sort_keys=True))
    out.with_suffix(".tmp").replace(out)


def main(argv: list[str] | None = None) -> None:
    """``crash_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    global WORK, PHASE  # the activities read them
    data_dir, work_dir, scenario, phase = argv if argv is not None else sys.argv[1:]
    if scenario not in SCENARIOS or phase not in ("run", "resume"):
        raise SystemExit(f"unknown scenario {scenario!r} or phase {phase!r}")
    WORK, PHASE = Path(work_dir), phase
    if phase == "run":
        trio.run(run_phase, data_dir, scenario)
    else:
        trio.run(resume_phase, data_dir, scenario)


if __name__ == "__main__":
    main()
