"""An app for the ``roost ... --temporal`` tests (``roost run temporal_cli_app:app``).

``ROOST_TCLI_CHANGED=1`` is the "new build": ``pay`` calls an audit activity first, which a
history recorded by the old build does not have (``roost replay`` says it diverged).
"""

import os

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
