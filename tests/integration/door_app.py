"""The app ``test_start_door.py`` starts with arguments that do or do not fit."""

import trio

import roost
from roost import funcs, process

app = roost.App("door")
app.host("workers")


@app.activity
def charge(order_id: str, cents: int) -> str:
    return f"{order_id}: {cents}"


@app.workflow
async def order(order_id: str, cents: int) -> str:
    return await funcs.call(charge, order_id, cents)


@app.workflow
async def waiter() -> str:
    await process.listen("go").receive()
    return "went"


@app.process
async def worker(job: dict) -> None:
    await trio.sleep_forever()
