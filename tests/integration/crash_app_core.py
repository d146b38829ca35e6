"""The core crash-test scenarios (``test_workflow_crash.py``): activities, fan-outs, timers,
signals.

After the restart the node waits for every workflow the killed node left (``resume_phase``);
the report holds the store per workflow id before and after (``snapshot``), the EXITs, the
histories and ``describe`` of each.
"""

from __future__ import annotations

import time
from typing import Any

import crash_app_base
import trio
from crash_app_base import (
    app,
    append_line,
    flaky,
    pending_tasks,
    start,
    step,
    sync_step,
    to_json,
    touch,
    wf_pid,
    write_report,
)

import roost
from roost import channel, coroutine, funcs, process, workflow
from roost.storage import Codec, key, open_lmdb_store
from roost.workflow._history_format import decode_activation

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
            append_line("signals.log", i=i, phase=crash_app_base.PHASE)


# -- scenarios (the first run) ---------------------------------------------------------------


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
                        to_json(decode_activation(codec, v))
                        for _, v in txn.prefix("histories", prefix)
                    ],
                    "inbox": [to_json(codec.decode(v)) for _, v in txn.prefix("inbox", prefix)],
                    # The activities it waits for: read from its history, as recovery does.
                    "tasks": [to_json(t) for t in pending_tasks(txn, codec, record)],
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


# -- the restart ---------------------------------------------------------------------------


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
    write_report(report)
