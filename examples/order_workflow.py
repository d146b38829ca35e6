"""A durable order workflow (a saga): charge, wait, ship, and refund if shipping fails.

The workflow code is ordinary ``async def`` Python. Every step it takes (an activity, a
timer, a message) is recorded in its history in LMDB, so the node can stop in the middle
of a workflow and pick it up again later. The script has three parts:

1. order-1001: the payment provider fails once, the activity's retry policy retries it,
   a durable ``roost.sleep`` waits, the order ships.
2. order-1002: the node is stopped while the workflow sleeps, then reopened on the same
   data directory; the workflow resumes from its history (nothing runs twice), shipping
   fails for good, and the workflow refunds the payment.
3. One more start of the node shows what the store remembers: ``node.describe`` and a
   compact ``node.history`` of both orders.

Run it with ``.venv/bin/python examples/order_workflow.py``.
"""

import logging
import tempfile
from collections import Counter
from typing import Any

import trio

import roost
from roost import channel, funcs, process

app = roost.App("shop")

# How often each activity body ran, across the node restarts (one OS process here).
RUNS: Counter[str] = Counter()


# -- activities: plain functions, where the side effects live -----------------------------


@app.activity(
    retry_policy=roost.RetryPolicy(initial_interval="200ms", maximum_attempts=5),
    start_to_close_timeout="30s",
)
def charge_payment(order_id: str, amount: int, customer: str) -> dict[str, Any]:
    """Charge the customer; the provider times out on the first attempt of every order."""
    RUNS["charge_payment"] += 1
    info = roost.activity_info()
    assert info is not None  # run by a workflow
    if info.attempt == 1:
        print(f"    charge_payment({order_id}) attempt 1: the provider timed out")
        raise roost.Error("payment provider timed out", kind=roost.ErrorKind.UNAVAILABLE)
    # A real charge would pass info.idempotency_key to the provider: it is the same for
    # every attempt of this step, even after a crash, so the customer is charged once.
    print(f"    charge_payment({order_id}) attempt {info.attempt}: charged {amount} to {customer}")
    return {"id": f"pay-{order_id}", "amount": amount}


@app.activity
async def ship_order(order_id: str, address: str) -> dict[str, Any]:
    """Hand the parcel to the carrier (async activities run as trio tasks)."""
    RUNS["ship_order"] += 1
    if not address:
        print(f"    ship_order({order_id}): the carrier rejects an empty address")
        # retryable=False: retrying cannot help, so the workflow sees the error at once.
        raise roost.Error("no shipping address", kind=roost.ErrorKind.INVALID, retryable=False)
    print(f"    ship_order({order_id}): handed to the carrier")
    return {"tracking_number": f"TRK-{order_id}"}


@app.activity
def refund_payment(payment_id: str) -> str:
    """Give the money back (the compensation of charge_payment)."""
    RUNS["refund_payment"] += 1
    print(f"    refund_payment({payment_id}): refunded")
    return f"refund-{payment_id}"


# -- the workflow: deterministic orchestration, no I/O of its own -------------------------


@app.workflow
async def order_workflow(order: dict[str, Any]) -> dict[str, Any]:
    """The seed's order workflow, with a progress message to whoever asked for it."""
    try:
        payment = await funcs.call(charge_payment, order["id"], order["total"], order["customer"])
    except roost.Error as err:
        return {"status": "failed", "step": "payment", "error": str(err)}

    if order.get("notify"):
        # A workflow's send goes out after this step is committed, together with the timer
        # below: whoever receives it knows the timer is already stored.
        process.send(order["notify"], "progress", [order["id"], f"paid, waiting {order['wait']}"])
    await roost.sleep(order["wait"])  # durable: the due time is stored, restarts keep it

    try:
        shipment = await funcs.call(ship_order, order["id"], order["address"])
    except roost.Error as err:
        try:
            await funcs.call(refund_payment, payment["id"])
        except roost.Error as refund_err:
            return {"status": "failed", "error": str(err), "compensation_error": str(refund_err)}
        return {"status": "failed", "error": str(err), "refunded": payment["id"]}

    return {
        "status": "completed",
        "payment_id": payment["id"],
        "tracking": shipment["tracking_number"],
    }


# -- the driver: a plain program around three node starts ---------------------------------


async def watch(pid: roost.Pid) -> dict[str, Any]:
    """Print the workflow's progress messages until its EXIT arrives; return its result."""
    progress, events = process.listen("progress"), process.events()
    while True:
        sel = await channel.select(progress, events)
        if sel.channel is progress:
            order_id, text = sel.value
            print(f"  {order_id}: {text}")
        elif isinstance(sel.value, roost.Exit) and sel.value.pid == pid:
            if sel.value.error is not None:
                raise sel.value.error
            result: dict[str, Any] = sel.value.value
            return result


def order(order_id: str, address: str) -> dict[str, Any]:
    return {
        "id": order_id,
        "total": 4200,
        "customer": "cust-7",
        "address": address,
        "wait": "2s",  # stands in for the seed's time.sleep("1h")
        "notify": process.pid(),
    }


async def main(data_dir: str) -> None:
    print("1. order-1001: a transient failure is retried, then a durable sleep")
    async with roost.open_node(app, data_dir):
        spawner = process.with_options(id="order-1001")  # an explicit workflow id
        pid = await spawner.spawn_monitored(order_workflow, order("order-1001", "1 Main St"))
        print(f"  started {pid}")
        print(f"  result: {await watch(pid)}")

    print("\n2. order-1002: the node stops while the workflow sleeps")
    async with roost.open_node(app, data_dir):
        spawner = process.with_options(id="order-1002")
        pid = await spawner.spawn(order_workflow, order("order-1002", ""))
        progress = process.listen("progress")
        order_id, text = await progress.receive()  # sent once the timer was committed
        print(f"  {order_id}: {text}")
        print("  stopping the node now (the workflow is asleep; its timer is in LMDB)")
    charged = RUNS["charge_payment"]

    async with roost.open_node(app, data_dir) as node:
        print(f"  node restarted (incarnation {node.incarnation}); watching {pid}")
        process.monitor(pid)  # the PID of a workflow is its id: stable across restarts
        result = await watch(pid)
        print(f"  result: {result}")
        again = RUNS["charge_payment"] - charged
        print(f"  charge_payment ran {again} more times after the restart (its result is recorded)")

    print("\n3. A fresh node on the same data directory remembers both orders")
    async with roost.open_node(app, data_dir) as node:
        for workflow_id in ("order-1001", "order-1002"):
            info = node.describe(workflow_id)
            outcome = info["result"]["status"]
            print(f"  {workflow_id}: workflow {info['status']}, order {outcome}; its history:")
            for line in compact_history(node.history(workflow_id)):
                print(f"    {line}")
        done = node.list_workflows("status = 'completed' and workflow_type = 'shop:order_workflow'")
        print(f"  completed order workflows: {sorted(w['workflow_id'] for w in done)}")
        result = await watch_finished(pid)
        print(f"  monitoring the finished order-1002 gives its recorded result: {result}")


async def watch_finished(pid: roost.Pid) -> dict[str, Any]:
    process.monitor(pid)  # a finished workflow: the EXIT comes at once, from the store
    exit_ = await process.events().receive()
    result: dict[str, Any] = exit_.value
    return result


def compact_history(history: list[Any]) -> list[str]:
    """One line per activation: the events fed to the workflow -> the commands it issued."""
    entries: dict[int, str] = {}  # activity seq -> its short name
    lines: list[tuple[list[str], list[str]]] = []
    for item in history:
        name = type(item).__name__
        if name == "WorkflowTask" or not lines:
            lines.append(([], []))
        events, commands = lines[-1]
        if name == "Started":
            events.append(f"started {item.workflow_type}")
        elif name == "ActivityResolved":
            outcome = f"failed ({item.error.kind.value})" if item.error else "ok"
            events.append(f"{entries[item.seq]} #{item.seq} {outcome}")
        elif name == "TimerFired":
            events.append(f"timer #{item.seq} fired")
        elif name == "ScheduleActivity":
            entries[item.seq] = item.entry.split(":")[1]
            commands.append(f"call {entries[item.seq]} #{item.seq}")
        elif name == "StartTimer":
            commands.append(f"timer {item.seconds:g}s #{item.seq}")
        elif name == "SendMessage":
            commands.append(f"send {item.topic!r} #{item.seq}")
        elif name == "Complete":
            commands.append(f"return status {item.value['status']!r}")
        elif name != "WorkflowTask":
            (commands if hasattr(item, "seq") else events).append(name)
    return [
        f"{n}. {', '.join(events)} -> {', '.join(commands)}"
        for n, (events, commands) in enumerate(lines, 1)
    ]


if __name__ == "__main__":
    # Retries are logged at INFO and failures at WARNING; this demo fails on purpose.
    logging.getLogger("roost").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="roost-orders-") as data_dir:
        trio.run(main, data_dir)
    print("\norder workflow demo finished")
