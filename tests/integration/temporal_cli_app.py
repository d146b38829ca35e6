"""An app for the ``roost ... --temporal`` tests (``roost run temporal_cli_app:app``).

``ROOST_TCLI_CHANGED=1`` is the "new build": ``pay`` calls an audit activity first, which a
history recorded by the old build does not have (``roost replay`` says it diverged).
"""

import json
import os
import time

import roost
from roost import channel, funcs, process, workflow

app = roost.App("tcli")


@app.activity
def charge(amount):
    return {"charged": amount}


@app.activity
def audit(amount):
    return amount


@app.workflow
async def pay(amount):
    if os.environ.get("ROOST_TCLI_CHANGED"):
        await funcs.call(audit, amount)
    charged = await funcs.call(charge, amount)
    workflow.attrs(search={"Shop": "tcli", "Priority": amount}, memo={"paid": amount})
    return charged


@app.workflow
async def waiter():
    message = await process.listen("go", message=True).receive()
    return {"go": message.payload}


@app.workflow
async def cancellable():
    chosen = await channel.select(
        process.events().case_receive(), roost.after("60s").case_receive()
    )
    event = chosen.value
    return f"stopped: {event.reason}" if isinstance(event, roost.Cancel) else "timed out"


@app.workflow
async def failing():
    raise roost.Error("it went wrong", kind=roost.ErrorKind.CONFLICT)


def _effects(line):
    """Append one JSON line to the file the multi-node test reads (``TCLI_EFFECTS``)."""
    with open(os.environ["TCLI_EFFECTS"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@app.activity
def effect(order_id):
    """Begin, wait for the test's release (heartbeating), then apply the side effect once."""
    info = roost.activity_info()
    base = {"order": order_id, "key": info.idempotency_key, "pid": os.getpid()}
    _effects({**base, "event": "begin", "attempt": info.attempt})
    release = os.environ["TCLI_EFFECTS"] + ".release"
    while not os.path.exists(release):
        roost.heartbeat()
        time.sleep(0.05)
    _effects({**base, "event": "effect", "attempt": info.attempt})
    return info.attempt


@app.workflow
async def effectful(order_id):
    step = funcs.new().with_options(
        heartbeat_timeout="2s",
        retry_policy=roost.RetryPolicy(initial_interval="100ms", maximum_attempts=5),
    )
    return await step.call(effect, order_id)
