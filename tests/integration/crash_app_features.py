"""The crash-test scenarios of newer workflow features (``test_workflow_crash_features.py``).

Child workflows, process.call between workflows, workflow retry policies, cron schedules,
start delays and run timeouts. These scenarios keep every run of a workflow id (a retry or
a cron run is a new run under the same id), so they report the store per run id
(``snapshot_runs``) and have their own resume steps (``FEATURES``).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import crash_app_base
import trio
from crash_app_base import (
    app,
    append_line,
    decode,
    pending_tasks,
    read_lines,
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
from roost.storage import Codec, open_lmdb_store, unpack_key
from roost.workflow._history_format import decode_activation

KID_DELAY = 0.1  # each activity of a child workflow
KIDS = [["k0", 1], ["k1", 2], ["k2", 3]]  # async children: process.spawn in the workflow
SYNC_KIDS = [["s0", 4], ["s1", 5]]  # sync children: process.exec, then workflow.exec
KIDS_HELD = ("hold-k1", "hold-s0")  # in "children_hold", these children's first step holds
CALLS = {"asker-0": [1, 2, 3, 4], "asker-1": [11, 12, 13, 14]}  # each asker's requests
CALL_DELAY = 0.05  # the callee's activity per request
CALL_HELD = 3  # in "calls_hold", the callee's activity for this request holds
RETRY_INTERVAL = 1.0  # the workflow retry backoff (constant)
RETRY_FAIL_UNTIL = 3  # "retry" fails attempts 1 and 2; "retry-out" fails every attempt
RETRY_OUT_MAX = 3  # ... and gives up after this many
CRON = "* * * * * *"  # every second
CRON_SLOW = 0.5  # "cron-b"'s activity takes this long ("cron-a"'s none)
CRON_AFTER = 2  # runs of each schedule to wait for after the restart, before terminating
CRON_HELD = "cron-b"  # in the first run, its second run's activity holds until the kill
CRON_HELD_RUNS: set[str] = set()  # the runs of CRON_HELD whose activity has begun
CRON_MARGIN = 0.25  # seconds to cron-a's next fire at least, when run_cron kills the node
DELAY_SHORT, DELAY_LONG = 1.0, 2.5  # start delays: one ends while the node is down
RUN_TIMEOUT = 1.5  # ends the first attempt of the "rt-*" workflows while the node is down
RUN_TIMEOUT_RETRY = 0.5  # "rt-retry"'s retry backoff
RT_SLEEP = 30.0  # what the first attempt would sleep


@app.activity
async def stamp(log: str, fields: dict[str, Any], delay: float) -> dict[str, Any]:
    """Log a start line to ``WORK/log``, sleep ``delay``, log a done line; return ``fields``."""
    info = roost.activity_info()
    assert info is not None
    line = {
        "wf": info.workflow_id,
        "run": info.run_id,
        "seq": info.seq,
        "attempt": info.attempt,
        "key": info.idempotency_key,
        "phase": crash_app_base.PHASE,
        **fields,
    }
    append_line(log, event="start", wall=time.time(), **line)
    if crash_app_base.PHASE == "run" and fields.get("label") == CRON_HELD:
        CRON_HELD_RUNS.add(info.run_id)
        if len(CRON_HELD_RUNS) == 2:
            await trio.sleep_forever()  # until run_cron kills the node
    await trio.sleep(delay)
    append_line(log, event="done", wall=time.time(), **line)
    return fields


@app.workflow
async def kid(label: str, x: int, delay: float) -> dict[str, Any]:
    """A child workflow: an async then a sync activity (``hold-`` labels hold the first)."""
    first = await funcs.call(step, f"{label}-a", x, delay)
    second = await funcs.call(sync_step, f"{label}-b", x + 1, delay)
    info = workflow.info()
    assert info is not None
    return {"label": label, "id": info.workflow_id, "values": [first, second]}


@app.workflow
async def family(kids: list[list[Any]], sync_kids: list[list[Any]]) -> dict[str, Any]:
    """Start ``kids`` as async children, run ``sync_kids`` one by one as sync children (by
    ``process.exec``, then ``workflow.exec`` with an explicit id, alternately), then gather
    the async children's EXITs; an EXIT arriving within 0.3 s more is reported as ``late``.
    """
    info = workflow.info()
    assert info is not None
    spawned = [(await process.spawn(kid, label, x, KID_DELAY)).id for label, x in kids]
    done = []
    for i, (label, x) in enumerate(sync_kids):
        if i % 2:
            child_id = f"{info.workflow_id}-sync{i}"
            done.append(await workflow.exec(kid, label, x, KID_DELAY, id=child_id))
        else:
            done.append(await process.exec(kid, label, x, KID_DELAY))
    events = process.events()
    exits: dict[str, Any] = {}
    late = []
    while len(exits) < len(spawned):
        event = await events.receive()
        if event.pid.id in exits:
            late.append(event.pid.id)
        exits[event.pid.id] = event.value if event.error is None else to_json(event.error)
    more = await channel.select(events.case_receive(), roost.after(0.3).case_receive())
    if more.channel is events:
        late.append(str(more.value.pid))
    return {"spawned": spawned, "async": [exits[i] for i in spawned], "sync": done, "late": late}


@app.workflow
async def tally(hold: int) -> dict[str, Any]:
    """A callee: for each "add" n, reply "ack", run an activity, count, reply "ok"."""
    count, seen = 0, []
    inbox = process.inbox()
    while True:
        msg = await inbox.receive()
        if msg.topic == "stop":
            result = {"count": count, "seen": seen}
            process.send(msg.sender, "ok", result)
            return result
        n = msg.payload
        process.send(msg.sender, "ack")
        squared = await funcs.call(step, f"hold-t{n}" if n == hold else f"t{n}", n, CALL_DELAY)
        count += n
        seen.append(n)
        process.send(msg.sender, "ok", {"n": n, "sq": squared})


@app.workflow
async def asker(target: roost.Pid, ns: list[int]) -> list[Any]:
    """A caller: one ``process.call`` per n, all in flight at once; the replies by n."""
    replies: Any = channel.new(len(ns))

    async def ask(n: int) -> None:
        await replies.send([n, await process.call(target, "add", n, timeout="60s")])

    for n in ns:
        coroutine.spawn(ask, n)
    got = [await replies.receive() for _ in ns]
    return sorted(got, key=lambda item: item[0])


@app.workflow
async def attempts(label: str, fail_until: int) -> dict[str, Any]:
    """Log this run's attempt (an activity); fail attempts before ``fail_until``."""
    info = workflow.info()
    assert info is not None
    fields = {"label": label, "attempt": info.attempt, "at": roost.now().timestamp()}
    await funcs.call(stamp, "attempts.log", fields, 0)
    if info.attempt < fail_until:
        raise roost.Error(f"attempt {info.attempt} failed", kind="Unavailable")
    return {"attempt": info.attempt}


@app.workflow
async def ticking(label: str, delay: float) -> float:
    """A cron run: log the run's start time (workflow time) by an activity of ``delay``."""
    at = roost.now().timestamp()
    info = workflow.info()
    assert info is not None
    await funcs.call(stamp, "cron.log", {"label": label, "at": at, "attempt": info.attempt}, delay)
    return at


@app.workflow
async def delayed(label: str) -> dict[str, Any]:
    """Note when it began; read two "item" messages; log by an activity."""
    at = roost.now().timestamp()
    items = process.listen("item")
    got = [await items.receive(), await items.receive()]
    await funcs.call(stamp, "delay.log", {"label": label, "at": at}, 0)
    return {"at": at, "items": got}


@app.workflow
async def lingering(notify: str) -> int:
    """Attempt 1 tells ``notify`` "armed" and sleeps RT_SLEEP (its run_timeout ends it
    first); a later attempt logs by an activity and returns its attempt number."""
    info = workflow.info()
    assert info is not None
    if info.attempt == 1:
        process.send(notify, "armed", info.workflow_id)
        await roost.sleep(RT_SLEEP)
    fields = {"label": info.workflow_id, "attempt": info.attempt, "at": roost.now().timestamp()}
    await funcs.call(stamp, "timeout.log", fields, 0)
    return info.attempt


# The first run of each scenario.


async def _family(_node: Any, held: bool) -> None:
    kids = [
        [f"hold-{label}" if held and f"hold-{label}" in KIDS_HELD else label, x]
        for label, x in KIDS
    ]
    sync = [
        [f"hold-{label}" if held and f"hold-{label}" in KIDS_HELD else label, x]
        for label, x in SYNC_KIDS
    ]
    await start("fam", family, kids, sync)


async def run_children(node: Any) -> None:
    """A parent with three async and two sync children; the test kills mid-way."""
    await _family(node, held=False)


async def run_children_hold(node: Any) -> None:
    """As ``run_children``; an async and a sync child hold in their first activity. Touch
    "exits-in" once the EXITs of the two other async children are in the parent's history.
    """
    await _family(node, held=True)
    while True:
        exits = [x for x in node.history("fam") if type(x).__name__ == "ProcessExited"]
        if len(exits) >= len(KIDS) - 1:
            touch("exits-in")
            return
        await trio.sleep(0.005)


async def _calls(hold: int) -> None:
    target = await start("tally", tally, hold)
    for wf, ns in CALLS.items():
        await start(wf, asker, target, ns)


async def run_calls(_node: Any) -> None:
    """Two workflows call a third (every call in flight at once); the test kills mid-way."""
    await _calls(-1)


async def run_calls_hold(_node: Any) -> None:
    """As ``run_calls``; the callee's activity for request CALL_HELD holds."""
    await _calls(CALL_HELD)


async def run_retry(node: Any) -> None:
    """Two workflows retried after failures; touch "backoff-n" once attempt n+1 of "retry"
    is committed (it then waits RETRY_INTERVAL to start): the test kills in that backoff."""
    policy = {"initial_interval": RETRY_INTERVAL, "backoff_coefficient": 1.0}
    for wf, fail_until, most in (
        ("retry", RETRY_FAIL_UNTIL, 5),
        ("retry-out", 1000, RETRY_OUT_MAX),
    ):
        spawner = process.with_options(id=wf, retry_policy={**policy, "maximum_attempts": most})
        await spawner.spawn(attempts, wf, fail_until)
    told = 1
    while True:
        attempt = node.describe("retry")["attempt"]
        while told < attempt:
            touch(f"backoff-{told}")
            told += 1
        await trio.sleep(0.002)


async def run_cron(node: Any) -> None:
    """Two every-second schedules, one with a slow activity; the node kills itself in a
    known state, noted first as one line of ``kill.log``.

    The state: cron-b's second run holds in its activity (a stored task); cron-a is
    between runs, at least two runs done, its next run committed and not begun, that run's
    fire time at least CRON_MARGIN away (so no commit of it can be in flight). Checked on
    the store and killed with no checkpoint in between: nothing of the node moves meanwhile.
    """
    for wf, delay in (("cron-a", 0.0), ("cron-b", CRON_SLOW)):
        await process.with_options(id=wf, cron_schedule=CRON).spawn(ticking, wf, delay)
    with trio.fail_after(30):
        while True:
            done = _cron_between_runs(node)
            if done is not None:
                break
            await trio.sleep(0.002)  # the state is read from the store: no event to wait on
    append_line("kill.log", runs_before={"cron-a": done, CRON_HELD: 2}, wall=time.time())
    os.kill(os.getpid(), signal.SIGKILL)


def _cron_between_runs(node: Any) -> int | None:
    """cron-a's completed runs if it is between runs as ``run_cron`` needs, else None."""
    if len(CRON_HELD_RUNS) < 2:
        return None
    described = node.describe("cron-a")
    if described["status"] != "running" or described["history_length"] != 0:
        return None  # its current run has begun (or it is not stored yet)
    lines = [x for x in read_lines("cron.log") if x["label"] == "cron-a"]
    done = {x["run"] for x in lines if x["event"] == "done"}
    begun = {x["run"] for x in lines}
    start_at = described["start_at"]
    if len(done) < 2 or done != begun or described["run_id"] in done or start_at is None:
        return None
    if start_at.timestamp() - time.time() < CRON_MARGIN:
        return None  # its next run is about to begin: wait for the next gap
    return len(done)


async def run_delay(_node: Any) -> None:
    """Two delayed starts, each sent an "item" before it starts; "ready" once accepted."""
    for wf, delay in (("delay-short", DELAY_SHORT), ("delay-long", DELAY_LONG)):
        pid = await process.with_options(id=wf, start_delay=delay).spawn(delayed, wf)
        await process.send(pid, "item", "a")
    touch("ready")


async def run_timeout(_node: Any) -> None:
    """Two workflows whose first attempt outlives its run_timeout, one with a retry
    policy; "ready" once both are asleep (their timers stored)."""
    armed = process.listen("armed")
    notify = str(process.pid())
    retry = {"initial_interval": RUN_TIMEOUT_RETRY, "maximum_attempts": 3}
    for wf, extra in (("rt-retry", {"retry_policy": retry}), ("rt-final", {})):
        spawner = process.with_options(id=wf, run_timeout=RUN_TIMEOUT, **extra)
        await spawner.spawn(lingering, notify)
    with trio.fail_after(30):
        got = {await armed.receive(), await armed.receive()}
    assert got == {"rt-retry", "rt-final"}, got
    touch("ready")


# The restart of each scenario: what to do once the node is up; returns report entries.


async def wait_exits(ids: list[str], then: Callable[[], Any] | None = None) -> dict[str, Any]:
    """Monitor workflows ``ids``, call ``then()``, wait for the EXIT of each (its value,
    error, time)."""
    waiting = {wf_pid(wf) for wf in ids}
    for pid in waiting:
        process.monitor(pid)
    if then is not None:
        then()
    exits = {}
    with trio.fail_after(40):
        while waiting:
            event = await process.events().receive()
            if isinstance(event, roost.Exit) and event.pid in waiting:
                waiting.discard(event.pid)
                error = event.error
                exits[event.pid.id] = {
                    "value": to_json(event.value),
                    "error": to_json(error),
                    "details": to_json(error.details) if error is not None else None,
                    "at": time.time(),
                }
    return exits


async def resume_children(_node: Any) -> dict[str, Any]:
    return {"exits": await wait_exits(["fam"])}


async def resume_calls(_node: Any) -> dict[str, Any]:
    exits = await wait_exits(list(CALLS))
    # Every caller is done: a plain process stops the callee (a call from outside).
    stopped = await process.call(wf_pid("tally"), "stop", None, timeout="30s")
    exits |= await wait_exits(["tally"])
    return {"exits": exits, "stopped": to_json(stopped)}


async def resume_retry(_node: Any) -> dict[str, Any]:
    return {"exits": await wait_exits(["retry", "retry-out"])}


async def resume_cron(_node: Any) -> dict[str, Any]:
    """Let each schedule begin and finish CRON_AFTER more runs, terminate both, wait 1.2 s.

    They are monitored before the terminate: a monitor placed after ``process.terminate``
    but before the close commits gets an EXIT with neither value nor error (the stored
    record still says running).
    """
    labels = ("cron-a", "cron-b")
    with trio.fail_after(30):
        while True:
            lines = read_lines("cron.log")
            cut = {x["run"] for x in lines if x["phase"] == "run"}  # runs begun before the kill
            done = [x["label"] for x in lines if x["run"] not in cut and x["event"] == "done"]
            if all(done.count(label) >= CRON_AFTER for label in labels):
                break
            await trio.sleep(0.01)
    terminated_at = time.time()

    def terminate() -> None:
        for label in labels:
            process.terminate(wf_pid(label))

    exits = await wait_exits(list(labels), then=terminate)  # monitored first: see below
    await trio.sleep(1.2)  # a fire after the terminate would show in the log and the store
    return {"exits": exits, "terminated_at": terminated_at}


async def resume_delay(_node: Any) -> dict[str, Any]:
    for wf in ("delay-short", "delay-long"):
        await process.send(wf_pid(wf), "item", "b")
    return {"exits": await wait_exits(["delay-short", "delay-long"])}


async def resume_timeout(_node: Any) -> dict[str, Any]:
    return {"exits": await wait_exits(["rt-retry", "rt-final"])}


FEATURES: dict[str, tuple[Any, Any]] = {
    "children": (run_children, resume_children),
    "children_hold": (run_children_hold, resume_children),
    "calls": (run_calls, resume_calls),
    "calls_hold": (run_calls_hold, resume_calls),
    "retry": (run_retry, resume_retry),
    "cron": (run_cron, resume_cron),
    "delay": (run_delay, resume_delay),
    "timeout": (run_timeout, resume_timeout),
}


def snapshot_runs(data_dir: str) -> dict[str, Any]:
    """Every run id in the store (closed runs of a retried or cron workflow too): its
    workflow id, activations, pending inbox events, activity tasks and timers, and the
    ``runs`` record if it is its workflow id's latest run; plus the latest record of each
    workflow id and the row counts. Reads the store directly (no node)."""
    codec = Codec()
    store = open_lmdb_store(data_dir)
    runs: dict[str, dict[str, Any]] = {}

    def run_of(run_id: Any) -> dict[str, Any]:
        empty = {"activations": [], "inbox": [], "tasks": [], "timers": []}
        return runs.setdefault(str(run_id), empty)

    try:
        with store.read() as txn:
            records = {r.workflow_id: r for r in (codec.decode(v) for _, v in txn.range("runs"))}
            for table in ("histories", "inbox", "tasks"):
                name = "activations" if table == "histories" else table
                read = decode_activation if table == "histories" else decode
                for k, v in txn.range(table):
                    run_id, _ = unpack_key(k, str, int)
                    run_of(run_id)[name].append(to_json(read(codec, v)))
            for _, v in txn.range("timers"):
                timer = codec.decode(v)
                run_of(timer.run_id)["timers"].append(to_json(timer))
            counts = {table: txn.count(table) for table in ("inbox", "tasks", "timers")}
            for record in records.values():  # an open run's from its history (rows or not)
                if record.status.value == "running":
                    tasks = pending_tasks(txn, codec, record)
                    run_of(record.run_id)["tasks"] = [to_json(t) for t in tasks]
    finally:
        store.close()
    latest = {r.run_id: r for r in records.values()}
    for record in records.values():
        run_of(record.run_id)
    for run_id, run in runs.items():
        record = latest.get(run_id)
        run["record"] = to_json(record) if record is not None else None
        items = [*flat_events(run["activations"]), *run["inbox"], *run["tasks"], *run["timers"]]
        owners = {x["workflow_id"] for x in items if "workflow_id" in x}
        if record is not None:
            owners.add(record.workflow_id)
        assert len(owners) == 1, (run_id, owners)
        run["workflow_id"] = owners.pop()
    return {
        "records": {wf: to_json(r) for wf, r in records.items()},
        "runs": runs,
        "counts": counts,
    }


def flat_events(activations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for act in activations for e in act["events"]]


async def feature_resume_phase(data_dir: str, scenario: str) -> None:
    """Restart on the killed node's data dir, run the scenario's resume step, report."""
    before = snapshot_runs(data_dir)
    opened_at = time.time()
    async with roost.open_node(app, data_dir, durability="sync") as node:
        report = await FEATURES[scenario][1](node)
        described = {d["workflow_id"]: to_json(d) for d in node.list_workflows()}
    after = snapshot_runs(data_dir)
    report |= {"before": before, "after": after, "describe": described, "opened_at": opened_at}
    write_report(report)
