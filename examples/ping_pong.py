"""roost in one screen: messages, monitors, links, select with a timeout, and cancel.

Run it with ``make demo`` (or ``.venv/bin/python examples/ping_pong.py``).
"""

import logging

import roost
from roost import channel, process

app = roost.App("demo")


@app.process
async def pong() -> int:
    """Answer every "ping" with a "pong" to its sender, until cancelled."""
    inbox, events = process.inbox(), process.events()
    served = 0
    while True:
        sel = await channel.select(inbox.case_receive(), events.case_receive())
        if sel.channel is events:  # a Cancel (here: the node shutting down), so stop cleanly
            return served
        msg = sel.value
        served += 1
        process.send(msg.sender, "pong", msg.payload)


@app.process
async def parse(text: str) -> int:
    """Return ``int(text)``; a bad input makes the process exit with an error."""
    return int(text)


@app.process
async def flaky(attempt: int) -> str:
    """A worker that crashes on its first two attempts."""
    await roost.sleep("10ms")
    if attempt < 3:
        raise ConnectionError(f"lost the connection on attempt {attempt}")
    return f"connected on attempt {attempt}"


@app.process
async def supervisor() -> str:
    """Restart ``flaky`` each time it crashes; return its result once it succeeds."""
    # Without trap_links, a crash of a linked worker would kill the supervisor too.
    process.set_options(trap_links=True)
    events = process.events()
    attempt = 1
    await process.spawn_linked_monitored(flaky, attempt)
    while True:
        event = await events.receive()
        if isinstance(event, roost.LinkDown):  # sent only when the worker failed
            print(f"  supervisor: worker {event.pid} crashed: {event.error}; restarting it")
            attempt += 1
            await process.spawn_linked_monitored(flaky, attempt)
        elif isinstance(event, roost.Exit) and event.error is None:
            return event.value


@app.process
async def heartbeat() -> int:
    """Beat every 100ms until asked to stop; return the number of beats."""
    ticks, events = roost.ticker("100ms"), process.events()
    beats = 0
    while True:
        sel = await channel.select(events.case_receive(), ticks.case_receive())
        if sel.channel is events:
            print(f"  heartbeat: got Cancel({sel.value.reason!r}), cleaning up")
            return beats
        beats += 1
        print(f"  heartbeat: beat {beats}")


@app.process
async def main() -> str:
    print(f"main runs as process {process.pid()}")

    print("\n1. Messages: ping-pong with a process registered as 'pong'")
    pid = await process.with_options(name="pong").spawn(pong)
    print(f"  spawned pong as {pid}")
    replies = process.listen("pong")
    for n in range(1, 4):
        process.send("pong", "ping", n)  # by name; send never blocks
        print(f"  main -> pong: ping {n}   pong -> main: pong {await replies.receive()}")

    print("\n2. Monitors: an EXIT event for every end, with a value or an error")
    events = process.events()
    for text in ["42", "forty-two"]:
        await process.spawn_monitored(parse, text)
        exit_ = await events.receive()
        outcome = f"error {exit_.error}" if exit_.error else f"value {exit_.value!r}"
        print(f"  parse({text!r}) {exit_.pid} exited with {outcome}")

    print("\n3. Links: a supervisor traps LinkDown and restarts a crashing worker")
    print(f"  supervisor returned: {await process.exec(supervisor)!r}")

    print("\n4. select with a roost.after timeout, then a cooperative cancel")
    beat = await process.spawn_monitored(heartbeat)
    sel = await channel.select(events.case_receive(), roost.after("350ms").case_receive())
    exit_ = sel.value if sel.channel is events else None
    if exit_ is None:
        print("  main: no EXIT within 350ms (the roost.after case won); cancelling heartbeat")
        process.cancel(beat, "demo over")
        exit_ = await events.receive()
    print(f"  heartbeat exited with value {exit_.value} (a clean exit, not an error)")
    return "demo finished"


if __name__ == "__main__":
    # roost logs every crashed process at ERROR, with its traceback; this demo fails on
    # purpose, so hush it.
    logging.getLogger("roost").setLevel(logging.CRITICAL)
    # No data_dir: the node uses a temporary directory and removes it on exit.
    print(f"\n{roost.run(app, 'demo:main')}")
