"""The app the client tests drive (``roost.connect`` / ``connect_async``).

- ``shop:greet(name)``: returns ``"hello <name>"`` at once.
- ``shop:order(order_id, amount)``: answers a ``price`` call with ``amount`` (``process.call``),
  then returns ``{"order": order_id, "approved_by": who}`` on an ``approve`` message, or
  ``"canceled: <reason>"`` on a cancel.
- ``shop:doomed(why)``: fails with a ``roost.Error`` of kind Conflict.
- the ``jobs`` queue and ``shop:record``: a handler that keeps each payload under
  ``roost.state`` scope ``jobs``.
"""

import roost
from roost import channel, process

app = roost.App("shop")
app.queue("jobs", max_retries=0, jitter=0)


@app.workflow
async def greet(name):
    return f"hello {name}"


@app.workflow
async def order(order_id, amount):
    inbox, events = process.inbox(), process.events()
    while True:
        got = await channel.select(inbox.case_receive(), events.case_receive())
        value = got.value
        if isinstance(value, roost.Cancel):
            return f"canceled: {value.reason}"
        if value.topic == "price":
            process.send(value.sender, "ok", amount)
        elif value.topic == "approve":
            return {"order": order_id, "approved_by": value.payload}


@app.workflow
async def doomed(why):
    raise roost.Error(f"doomed: {why}", kind=roost.ErrorKind.CONFLICT)


@app.activity
async def record(payload):
    await roost.state.set("jobs", str(payload["n"]), payload)
