"""Signal-driven workflows: a durable counter and an approval with a timeout.

A signal is a message sent to a workflow's PID with ``process.send``. Awaiting the
``Receipt`` returns once the message is in the workflow's history (committed to LMDB), so
it survives a crash from then on. The workflow reads signals with the same ``listen`` /
``inbox`` / ``select`` calls as any process, and answers with ``process.send`` to
``msg.sender``.

1. The seed's counter: increment / decrement / get / finish, handled one at a time by a
   single ``select`` loop (so the order of changes is deterministic), with "ok" / "nak"
   replies; start messages; the node restarted in the middle (the count is rebuilt by
   replaying the history).
2. An approval: ``select`` over an "approve" channel, a "reject" channel and a durable
   ``roost.after`` timeout.

Run it with ``.venv/bin/python examples/signals.py``.
"""

import logging
import tempfile
from typing import Any

import trio

import roost
from roost import channel, process

app = roost.App("signals")


@app.workflow
async def counter_workflow(initial: int) -> dict[str, int]:
    """Keep a counter that never goes below zero; reply to every request."""
    count = initial
    increments = process.listen("increment", message=True)
    decrements = process.listen("decrement", message=True)
    gets = process.listen("get", message=True)
    finish = process.listen("finish", message=True)
    while True:
        sel = await channel.select(increments, decrements, gets, finish)
        msg = sel.value
        if sel.channel is finish:
            process.send(msg.sender, "ok", {"final": count})
            return {"final_counter": count}
        if sel.channel is gets:
            process.send(msg.sender, "ok", {"value": count})
            continue
        amount = msg.payload.get("amount") if isinstance(msg.payload, dict) else None
        if not isinstance(amount, int):
            process.send(msg.sender, "nak", "amount must be an int")
        elif sel.channel is decrements and count - amount < 0:
            process.send(msg.sender, "nak", f"would go below zero ({count} - {amount})")
        else:
            count += amount if sel.channel is increments else -amount
            process.send(msg.sender, "ok", {"value": count})


@app.workflow
async def approval_workflow(request: str, wait: str) -> str:
    """Wait for an approve or reject signal, or give up after ``wait``."""
    approve = process.listen("approve", message=True)
    reject = process.listen("reject", message=True)
    sel = await channel.select(approve, reject, roost.after(wait))  # a durable timer
    if sel.channel is approve:
        process.send(sel.value.sender, "decided", "approved")
        return f"{request}: approved by {sel.value.payload}"
    if sel.channel is reject:
        process.send(sel.value.sender, "decided", "rejected")
        return f"{request}: rejected by {sel.value.payload}"
    return f"{request}: nobody decided within {wait}"


async def request(pid: roost.Pid, topic: str, payload: Any = None) -> str:
    """Send one request to the counter, wait until it is durable, then read the reply."""
    receipt = process.send(pid, topic, payload)
    await receipt  # returns once the signal is committed to the workflow's history
    ok, nak = process.listen("ok"), process.listen("nak")
    sel = await channel.select(ok, nak)
    reply = f"ok {sel.value}" if sel.channel is ok else f"nak: {sel.value}"
    print(f"  {topic} {payload} -> {reply}" if payload else f"  {topic} -> {reply}")
    return reply


async def main(data_dir: str) -> None:
    print("1. The counter workflow")
    async with roost.open_node(app, data_dir):
        # An explicit id makes the workflow a singleton: a second spawn with the same id
        # returns the running one, ignores the new input, and delivers its start messages.
        spawner = process.with_options(id="counter").with_message("increment", {"amount": 2})
        pid = await spawner.spawn(counter_workflow, 10)
        second = process.with_options(id="counter").with_message("increment", {"amount": 3})
        again = await second.spawn(counter_workflow, 999)
        same = "the same" if again == pid else "another"
        print(f"  started {pid}; the second spawn returned {same} PID")
        for _ in range(2):  # the replies to the two start messages
            print(f"  start message -> ok {await process.listen('ok').receive()}")
        await request(pid, "increment", {"amount": 5})
        await request(pid, "decrement", {"amount": 100})
        await request(pid, "decrement", {"amount": "lots"})
        await request(pid, "get")
        print("  stopping the node with the counter running")

    async with roost.open_node(app, data_dir) as node:
        print(f"  node restarted (incarnation {node.incarnation}); the counter replays its history")
        await request(pid, "get")
        await request(pid, "decrement", {"amount": 20})
        process.monitor(pid)
        await request(pid, "finish")
        exit_ = await process.events().receive()
        print(f"  counter exited with {exit_.value}")
        history = node.history("counter")
        signals = [e.topic for e in history if type(e).__name__ == "MessageArrived"]
        print(f"  signals in its history: {', '.join(signals)}")

        print("\n2. An approval with a durable timeout")
        decided = process.listen("decided")
        pid = await process.spawn_monitored(approval_workflow, "refund #77", "1m")
        await process.send(pid, "approve", "alice")
        print(f"  reply to alice: {await decided.receive()}")
        print(f"  {(await process.events().receive()).value}")

        pid = await process.spawn_monitored(approval_workflow, "refund #78", "300ms")
        print(f"  {(await process.events().receive()).value}")
        try:
            process.send(pid, "approve", "bob")
        except roost.Error as err:
            print(f"  a signal to the finished workflow: {err}")


if __name__ == "__main__":
    logging.getLogger("roost").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="roost-signals-") as data_dir:
        trio.run(main, data_dir)
    print("\nsignals demo finished")
