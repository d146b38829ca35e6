"""The node that ``test_queue_crash.py`` runs in a real subprocess, SIGKILLs and restarts.

Usage: ``python crash_queue_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

- ``PHASE=run`` opens a node on ``DATA_DIR`` (``durability="sync"``), sets the scenario up
  (enqueues its messages, in stages, touching a marker file in ``WORK_DIR`` as each stage is
  reached) and waits to be killed: by the test (SIGKILL), or by itself at one of the
  scenario's crash points.
- ``PHASE=resume`` first reads what the killed node left in the store (``before``), then opens
  a node on the same directory (the stored messages are delivered again by themselves), waits
  until the queue table is empty (every message acknowledged or dead-lettered), shuts down,
  reads the store again (``after``) and writes both, with the scenario's results (the
  ``results`` state scope, dead letters, workflows), as JSON to ``WORK_DIR/resume.json``.
- ``PHASE=tick`` (the ``cron`` scenario, another app with two every-second cron triggers)
  logs the stored last fire times to ``nodes.log``, opens the node and runs until killed;
  the test kills and restarts it several times.

Handlers append JSON lines to ``WORK_DIR/queue.log`` (``cron.log`` for cron runs) when they
start, fail, hand off and finish, with their receipt id, attempt and phase. Every line is
one ``os.write`` on an ``O_APPEND`` descriptor, so a SIGKILL cannot tear it.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import crash_child
import trio

import roost
from roost.storage import Codec, open_lmdb_store, unpack_key

app = roost.App("qcrash")
WORK = Path()
PHASE = "run"
MODE = ""  # the scenario's variant (SCENARIO is "base-mode"): "mid", "attempt", "backoff"...
CODEC = Codec()
WAIT = 20.0  # bound on every wait of the child (a loaded box is slow, never this slow)

# -- scenario parameters (the test imports these) ---------------------------------------------

# leases: messages acknowledged before the kill, waiting for a retry backoff at the kill,
# in flight (holding in their handler) at the kill, and waiting for a free slot at the kill.
LEASE_BACKOFF = 1.5  # the retry delay after attempt 1 (jitter 0): the kill falls inside it
LEASE_CONCURRENCY = 10
QUICK = [f"quick{i}" for i in range(6)]
FLAKY = [f"flaky{i}" for i in range(4)]  # fail attempt 1 (always async activities)
HOLDS = [f"hold{i}" for i in range(LEASE_CONCURRENCY)]  # fill every slot
BLOCKED = [f"blocked{i}" for i in range(5)]

# handoff: step1 -> step2 -> step3, each handler enqueues the next step.
HANDOFF_N = 40
HANDOFF_DELAY = 0.02
HANDOFF_CONCURRENCY = 8
HANDOFF_KEYS = [f"m{i:02d}" for i in range(HANDOFF_N)]
MID_KILL_AT = HANDOFF_N // 2  # "mid": the step2 handler with this rank kills its node

# dlq: one message that fails every attempt.
DOOMED_RETRIES = 3
DOOMED_BACKOFF = 0.2  # 0.2 s, 0.4 s, 0.8 s before attempts 2, 3, 4

# flow: workflow handlers, in flight at the kill.
FLOWS = [f"flow{i}" for i in range(3)]
FLOW_WAIT = 3.0  # after the queue drained, how long the restart waits for the workflows

# once: a workflow handler whose node dies after the run closed, before its outcome commits.
ONCE_KEY = "once"
ONCE_FAILURE = "the order was refused"

# cron: two every-second triggers on their own app.
CRON = "* * * * * *"
CRON_RUN = {"skip": 0.3, "all": 0.05}  # how long each trigger's run takes

app.queue(
    "lease",
    max_retries=3,
    backoff=LEASE_BACKOFF,
    jitter=0,
    concurrency=LEASE_CONCURRENCY,
)
for _n in (1, 2, 3):
    app.queue(f"step{_n}", max_retries=3, backoff="0.2s", jitter=0, concurrency=HANDOFF_CONCURRENCY)
app.queue("doomed", max_retries=DOOMED_RETRIES, backoff=DOOMED_BACKOFF, jitter=0)
app.queue("flow", jitter=0)
app.queue("once", max_retries=0, jitter=0)  # "failed": the first failure is the dead letter


# -- logs and markers --------------------------------------------------------------------------


def append_line(name: str, **fields: Any) -> None:
    """Append one JSON line to ``WORK/name`` (see ``crash_child``)."""
    crash_child.append_line(WORK, name, **fields)


def touch(name: str) -> None:
    """Create the marker ``WORK/name`` (see ``crash_child``)."""
    crash_child.touch(WORK, name)


def log_event(event: str, payload: dict[str, Any], **extra: Any) -> roost.QueueInfo:
    """Log a handler event to ``queue.log`` with the delivery's receipt id and attempt."""
    info = roost.queue_info()
    assert info is not None, "not inside a queue handler"
    append_line(
        "queue.log",
        event=event,
        key=payload["key"],
        receipt=info.receipt_id,
        attempt=info.attempt,
        queue=info.queue,
        phase=PHASE,
        t=time.time(),
        **extra,
    )
    return info


def kill_myself() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# -- leases ------------------------------------------------------------------------------------


def _lease_start(payload: dict[str, Any], entry: str) -> bool:
    """Log the start; fail attempt 1 of a flaky message; True if this delivery must hold."""
    info = log_event("start", payload, entry=entry)
    if payload["kind"] == "flaky" and info.attempt == 1:
        log_event("fail", payload, entry=entry)
        raise roost.Error(f"{payload['key']} attempt 1 failed", kind="Unavailable")
    if payload["kind"] == "hold" and PHASE == "run":
        touch(f"held-{payload['key']}")
        return True
    return False


@app.activity
async def lease_async(payload: dict[str, Any]) -> str:
    """An async activity handler (a trio task); holds in the first run if told to."""
    if _lease_start(payload, "lease_async"):
        await trio.sleep_forever()  # until the node is killed
    await trio.sleep(0.01)
    log_event("done", payload, entry="lease_async")
    return payload["key"]


@app.activity
def lease_sync(payload: dict[str, Any]) -> str:
    """A sync activity handler (in a worker thread); holds in the first run if told to."""
    if _lease_start(payload, "lease_sync"):
        while True:  # until the node is killed
            time.sleep(0.05)
    time.sleep(0.01)
    log_event("done", payload, entry="lease_sync")
    return payload["key"]


@app.process
async def lease_proc(payload: dict[str, Any]) -> str:
    """A process handler (run to its end, like process.exec); holds if told to."""
    if _lease_start(payload, "lease_proc"):
        await trio.sleep_forever()  # until the node is killed
    await trio.sleep(0.01)
    log_event("done", payload, entry="lease_proc")
    return payload["key"]


async def enqueue_all(queue: str, items: list[tuple[Any, dict[str, Any]]]) -> None:
    """Enqueue every ``(entry, payload)`` at once (concurrent commits); log each receipt."""

    async def one(entry: Any, payload: dict[str, Any]) -> None:
        receipt = await roost.enqueue(queue, entry, payload)
        append_line("queue.log", event="enqueued", key=payload["key"], receipt=receipt, queue=queue)

    async with trio.open_nursery() as nursery:
        for entry, payload in items:
            nursery.start_soon(one, entry, payload)


def stored_messages(node: roost.NodeHandle) -> list[Any]:
    """The ``queue_messages`` rows of the running node (a test-only peek at its store)."""
    store = node._node.store  # the child checks what is committed
    assert store is not None
    with store.read() as txn:
        return [CODEC.decode(v) for _, v in txn.range("queue_messages")]


async def wait_until(what: str, ready: Callable[[], bool]) -> None:
    """Poll ``ready`` (every 2 ms) until it holds; fail after ``WAIT`` seconds."""
    with trio.move_on_after(WAIT):
        while True:
            if ready():
                return
            await trio.sleep(0.002)
    raise RuntimeError(f"timed out after {WAIT:g}s waiting for {what}")


def lease_entry(i: int) -> Any:
    return (lease_async, lease_sync, lease_proc)[i % 3]


async def run_leases(node: roost.NodeHandle) -> None:
    """Quick messages (acknowledged), then flaky ones (attempt 1 fails, retry committed),
    then holding ones (every slot taken), then blocked ones (no slot); then "ready"."""
    quick = [(lease_entry(i), {"key": k, "kind": "quick"}) for i, k in enumerate(QUICK)]
    await enqueue_all("lease", quick)
    await wait_until("quick ones acknowledged", lambda: not stored_messages(node))
    touch("quick-acked")

    await enqueue_all("lease", [(lease_async, {"key": k, "kind": "flaky"}) for k in FLAKY])

    def flaky_waiting() -> bool:
        stored = {m.payload["key"]: m for m in stored_messages(node)}
        return all(k in stored and stored[k].attempt == 2 for k in FLAKY)

    await wait_until("flaky retries committed", flaky_waiting)
    touch("flaky-waiting")

    holds = [(lease_entry(i), {"key": k, "kind": "hold"}) for i, k in enumerate(HOLDS)]
    await enqueue_all("lease", holds)
    await wait_until(
        "every holding handler started",
        lambda: all((WORK / f"held-{k}").exists() for k in HOLDS),
    )
    blocked = [(lease_entry(i), {"key": k, "kind": "blocked"}) for i, k in enumerate(BLOCKED)]
    await enqueue_all("lease", blocked)
    touch("ready")


# -- exactly-once hand-off -------------------------------------------------------------------

_step2_handoffs = 0


async def _step(n: int, payload: dict[str, Any]) -> list[str]:
    """Step ``n``: log, work a little, enqueue step n+1 (or store the result), log done."""
    global _step2_handoffs  # noqa: PLW0603 - the "mid" crash point counts step2 hand-offs
    info = log_event("start", payload, step=n)
    await trio.sleep(HANDOFF_DELAY)
    trail = [*payload["trail"], info.receipt_id]
    if n < 3:
        nxt = await roost.enqueue(
            f"step{n + 1}", STEPS[n + 1], {"key": payload["key"], "trail": trail}
        )
        log_event("handoff", payload, step=n, next=nxt)
        if n == 2 and PHASE == "run" and MODE == "mid":
            _step2_handoffs += 1
            if _step2_handoffs == MID_KILL_AT:
                kill_myself()  # the hand-off is buffered, the acknowledgement not committed
    else:
        await roost.state.set("results", payload["key"], trail)
    log_event("done", payload, step=n)
    return trail


@app.activity
async def step1(payload: dict[str, Any]) -> list[str]:
    """Step 1 (an activity)."""
    return await _step(1, payload)


@app.process
async def step2(payload: dict[str, Any]) -> list[str]:
    """Step 2 (a process: its enqueue goes to the hand-off buffer it inherits)."""
    return await _step(2, payload)


@app.activity
async def step3(payload: dict[str, Any]) -> list[str]:
    """Step 3 (an activity): store the trail of receipt ids as the result."""
    return await _step(3, payload)


STEPS = {1: step1, 2: step2, 3: step3}


async def run_handoff(_node: roost.NodeHandle) -> None:
    """Enqueue every original message at once; "started" once all are committed."""
    await enqueue_all("step1", [(step1, {"key": k, "trail": []}) for k in HANDOFF_KEYS])
    touch("started")


# -- dead letters ----------------------------------------------------------------------------


@app.activity
async def doomed(payload: dict[str, Any]) -> None:
    """Fails every attempt; in mode "attempt" its 2nd attempt holds in the first run."""
    info = log_event("start", payload)
    if info.attempt == 2 and PHASE == "run" and MODE == "attempt":
        touch("held")
        await trio.sleep_forever()  # until the test kills the node
    await trio.sleep(0.01)
    log_event("fail", payload)
    raise roost.Error(f"attempt {info.attempt} failed", kind="Unavailable", details={"n": 7})


async def run_dlq(node: roost.NodeHandle) -> None:
    """Enqueue the doomed message; in mode "backoff", die once attempt 2's failure (and the
    retry as attempt 3) is committed, i.e. while it waits for its backoff."""
    await enqueue_all("doomed", [(doomed, {"key": "doomed"})])
    touch("started")
    if MODE == "backoff":

        def third_waiting() -> bool:
            return any(m.attempt == 3 for m in stored_messages(node))

        await wait_until("attempt 2 to fail", third_waiting)
        kill_myself()


# -- workflow handlers -----------------------------------------------------------------------


@app.activity
async def flow_step(key: str, seen: list[Any] | None) -> None:
    """Log what the workflow saw as its queue_info; hold in the first run."""
    info = roost.activity_info()
    assert info is not None
    append_line("queue.log", event="step", key=key, seen=seen, wf=info.workflow_id, phase=PHASE)
    if PHASE == "run":
        touch(f"held-{key}")
        await trio.sleep_forever()  # until the test kills the node


@app.workflow
async def flow(payload: dict[str, Any]) -> list[Any] | None:
    """A workflow handler: returns the queue_info it saw, after an activity."""
    info = roost.queue_info()
    seen = None if info is None else [info.receipt_id, info.attempt, info.queue]
    await roost.funcs.call(flow_step, payload["key"], seen)
    return seen


async def run_flow(_node: roost.NodeHandle) -> None:
    """Enqueue the workflow handlers' messages; the test kills once every one holds."""
    await enqueue_all("flow", [(flow, {"key": k}) for k in FLOWS])
    touch("started")


# -- exactly once: queue -> workflow --------------------------------------------------------


@app.activity
async def once_step(key: str) -> str:
    """The workflow's one activity: logs each run with its idempotency key."""
    info = roost.activity_info()
    assert info is not None
    append_line(
        "queue.log",
        event="step",
        key=key,
        wf=info.workflow_id,
        run=info.run_id,
        idempotency_key=info.idempotency_key,
        phase=PHASE,
    )
    return f"done {key}"


@app.workflow
async def once_flow(payload: dict[str, Any]) -> dict[str, Any]:
    """Runs its activity, then returns (mode "done") or fails (mode "failed")."""
    step = await roost.funcs.call(once_step, payload["key"])
    if payload["fail"]:
        raise roost.Error(ONCE_FAILURE, kind="Unavailable", details={"key": payload["key"]})
    info = roost.queue_info()
    assert info is not None
    return {"step": step, "receipt": info.receipt_id, "attempt": info.attempt}


def die_before_outcome(message: Any, error: roost.Error | None) -> None:
    """The queue's crash point: the run has closed; its outcome is not committed yet."""
    if message.queue == "once":
        append_line(
            "queue.log",
            event="outcome",
            key=message.payload["key"],
            receipt=message.receipt_id,
            error=None if error is None else error.message,
        )
        kill_myself()


async def run_once(node: roost.NodeHandle) -> None:
    """Enqueue one message for the workflow handler; the node dies before its outcome."""
    node._node.ext["queues"].before_outcome = die_before_outcome  # a test-only crash point
    payload = {"key": ONCE_KEY, "fail": MODE == "failed"}
    await enqueue_all("once", [(once_flow, payload)])
    touch("started")


SCENARIOS: dict[str, Callable[[roost.NodeHandle], Any]] = {
    "leases": run_leases,
    "handoff": run_handoff,
    "dlq": run_dlq,
    "flow": run_flow,
    "once": run_once,
}


# -- cron --------------------------------------------------------------------------------------

cron_app = roost.App("qcron")


async def _tick(trigger: str, tick: roost.CronTick) -> None:
    line = {
        "trigger": trigger,
        "scheduled": tick.scheduled_at.timestamp(),
        "fired": tick.fired_at.timestamp(),
        "os_pid": os.getpid(),
    }
    append_line("cron.log", event="start", t=time.time(), **line)
    await trio.sleep(CRON_RUN[trigger])
    append_line("cron.log", event="done", t=time.time(), **line)


@cron_app.activity
async def tick_skip(tick: roost.CronTick) -> None:
    """The catch_up="skip" trigger's run."""
    await _tick("skip", tick)


@cron_app.activity
async def tick_all(tick: roost.CronTick) -> None:
    """The catch_up="all" trigger's run."""
    await _tick("all", tick)


TRIGGERS = {
    "skip": cron_app.cron(CRON, tick_skip).id,
    "all": cron_app.cron(CRON, tick_all, catch_up="all").id,
}


def stored_fire_times(data_dir: str) -> dict[str, float | None]:
    """The last fire time stored for each trigger (None: never fired), by trigger name."""
    stored = snapshot(data_dir)["cron"] if Path(data_dir).exists() else {}
    return {name: stored.get(trigger_id) for name, trigger_id in TRIGGERS.items()}


async def tick_phase(data_dir: str, last: dict[str, float | None]) -> None:
    """Log the stored last fire times and the open time; run the triggers until killed."""
    append_line("nodes.log", event="opening", t=time.time(), last=last, os_pid=os.getpid())
    async with roost.open_node(cron_app, data_dir, durability="sync"):
        append_line("nodes.log", event="open", t=time.time(), os_pid=os.getpid())
        await trio.sleep_forever()


# -- reading the store -------------------------------------------------------------------------


def to_json(value: Any) -> Any:
    """A JSON form of records (attrs classes), errors (with details), datetimes (seconds)."""
    if isinstance(value, roost.Error):
        return {
            "kind": str(value.kind),
            "message": value.message,
            "details": to_json(value.details),
        }
    if attrs.has(type(value)):
        return {f.name: to_json(getattr(value, f.name)) for f in attrs.fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def snapshot(data_dir: str) -> dict[str, Any]:
    """The stored queue messages, dead letters, cron last fire times and state, read from
    the store directly (no node: nothing is delivered while reading)."""
    store = open_lmdb_store(data_dir)
    try:
        with store.read() as txn:
            messages = [to_json(CODEC.decode(v)) for _, v in txn.range("queue_messages")]
            dead = [to_json(CODEC.decode(v)) for _, v in txn.range("dlq")]
            cron = {}
            for k, v in txn.range("cron"):
                (trigger_id,) = unpack_key(k, str)
                cron[str(trigger_id)] = to_json(CODEC.decode(v))
            state = {}
            for k, v in txn.range("state"):
                scope, name = unpack_key(k, str, str)
                state[f"{scope}/{name}"] = to_json(CODEC.decode(v))
    finally:
        store.close()
    return {"messages": messages, "dlq": dead, "cron": cron, "state": state}


# -- phases ----------------------------------------------------------------------------------


async def run_phase(data_dir: str, scenario: str) -> None:
    """Set the scenario up, then wait to be killed."""
    async with roost.open_node(app, data_dir, durability="sync") as node:
        await SCENARIOS[scenario](node)
        await trio.sleep_forever()


async def resume_phase(data_dir: str, scenario: str) -> None:
    """Restart on the killed node's data dir, wait until no message is left, report."""
    before = snapshot(data_dir)
    opened_at = time.time()
    async with roost.open_node(app, data_dir, durability="sync") as node:
        await wait_until("every message acknowledged or dead", lambda: not stored_messages(node))
        drained_at = time.time()
        results = await roost.state.list("results")
        dead_queue = {"dlq": "doomed", "once": "once"}.get(scenario)
        dead = [to_json(d) for d in node.dlq.list(dead_queue)] if dead_queue else []
        workflows = await wait_workflows(node) if scenario in ("flow", "once") else []
    after = snapshot(data_dir)
    report = {
        "before": before,
        "after": after,
        "opened_at": opened_at,
        "drained_at": drained_at,
        "results": results,
        "dead": dead,
        "workflows": workflows,
    }
    out = WORK / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps(report, sort_keys=True))
    out.with_suffix(".tmp").replace(out)


async def wait_workflows(node: roost.NodeHandle) -> list[dict[str, Any]]:
    """Every workflow once none is running, or after FLOW_WAIT seconds (a stuck one stays
    running: the report says so)."""
    with trio.move_on_after(FLOW_WAIT):
        while True:
            if all(d["status"] != "running" for d in node.list_workflows()):
                break
            await trio.sleep(0.01)
    return [to_json(d) for d in node.list_workflows()]


def main(argv: list[str] | None = None) -> None:
    """``crash_queue_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    global WORK, PHASE, MODE  # the handlers read them
    data_dir, work_dir, scenario, phase = argv if argv is not None else sys.argv[1:]
    base, _, mode = scenario.partition("-")
    if base not in (*SCENARIOS, "cron") or phase not in ("run", "resume", "tick"):
        raise SystemExit(f"unknown scenario {scenario!r} or phase {phase!r}")
    WORK, PHASE, MODE = Path(work_dir), phase, mode
    crash_child.seal_logs(WORK)
    if phase == "tick":
        trio.run(tick_phase, data_dir, stored_fire_times(data_dir))
    elif phase == "run":
        trio.run(run_phase, data_dir, base)
    else:
        trio.run(resume_phase, data_dir, base)


if __name__ == "__main__":
    main()
