"""The workflows of the history-format fixture (``make_v1_store.py``): keep them unchanged.

The committed store in ``v1_store.tar.gz`` was written by running these workflows; a
change here that alters the commands they issue makes the fixture's open runs diverge.
"""

import roost
from roost import channel, funcs, process, workflow

app = roost.App("v1")


@app.activity
def charge(amount):
    if amount < 0:
        raise roost.Error(
            "negative amount", kind=roost.ErrorKind.INVALID, retryable=False, details={"a": 1}
        )
    return {"charged": amount, "bytes": b"\x00\x01", "nested": [1.5, None, True, "é"]}


@app.activity
def ship(order_id):
    return f"shipped {order_id}"


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="1s", maximum_attempts=2))
def always_fails(what):
    raise ConnectionError(f"provider down for {what}")


@app.workflow
async def order(order_id, amount):
    """Completed: two activities and a timer."""
    receipt = await funcs.call("v1:charge", amount)
    await roost.sleep("1h")
    shipped = await funcs.call(ship, order_id)
    return {"receipt": receipt, "shipped": shipped, "at": roost.now()}


@app.workflow
async def refunding(amount):
    """Completed after an activity error (non-retryable)."""
    try:
        await funcs.call("v1:charge", amount)
    except roost.Error as err:
        return {"refund": True, "kind": err.kind, "message": err.message}
    return {"refund": False}


@app.workflow
async def failing():
    """Failed: an activity's retries run out and the workflow raises."""
    await funcs.call("v1:always_fails", "x")


@app.workflow
async def approval():
    """Completed: a signal wins a select against a timer, and the workflow replies."""
    inbox = process.listen("approve", message=True)
    got = await channel.select(inbox, roost.after("1d"))
    if got.index == 1:
        return "timed out"
    process.send(got.value.sender, "ack", "approved")
    return f"approved by {got.value.payload}"


@app.workflow
async def child(n):
    return n * 2


@app.workflow
async def parent(n):
    """Completed: a child workflow's result, a plain process, versions, attributes."""
    v = workflow.version("change-1", 1, 2)
    workflow.attrs(search={"customer": "c-1"}, memo={"note": "memo"})
    doubled = await workflow.exec("v1:child", n, id=f"child-of-{n}")
    await process.spawn("v1:plain", n)
    exited = await process.events().receive()
    return {"v": v, "doubled": doubled, "plain": exited.value, "uuid": str(roost.uuid4())}


@app.process
async def plain(n):
    return n + 1


@app.workflow
async def looping(n):
    """Completed after continuing as new ``n`` times."""
    if n:
        await process.upgrade(None, n - 1)
    return "looped"


@app.workflow
async def cancellable():
    """Completed after a cancel request."""
    ev = await process.events().receive()
    return f"stopped: {ev.reason}"


@app.workflow
async def ticking(label):
    """A cron workflow (terminated after a few runs)."""
    return label


# -- left open in the fixture ----------------------------------------------------------------


@app.workflow
async def waiter(tag):
    """Open: waits for "go", then runs an activity and completes."""
    first = await funcs.call("v1:charge", 7)
    go = await process.listen("go").receive()
    second = await funcs.call(ship, tag)
    return {"first": first["charged"], "go": go, "second": second}


@app.workflow
async def sleeper():
    """Open: sleeps ten years, then completes."""
    await roost.sleep("3650d")
    return "woke"


@app.workflow
async def waiting_child():
    return await process.listen("finish").receive()


@app.workflow
async def open_parent():
    """Open: waits for a child that waits for a signal."""
    result = await workflow.exec("v1:waiting_child", id="open-child")
    return {"child said": result}
