"""Typed calls, checked by mypy in tests/unit/test_typed_calls.py (never run).

A trailing ``R:`` comment names the type mypy must reveal on its line; an ``E:`` comment the
text of an error mypy must report there. Any other error, or a missing one, fails the test.
"""

from __future__ import annotations

import dataclasses
from typing import reveal_type

import roost
from roost import funcs, process, workflow

app = roost.App("typed")


@dataclasses.dataclass
class Receipt:
    order_id: str
    total: int


@app.activity
def charge(order_id: str, amount: int) -> Receipt:
    return Receipt(order_id, amount)


@app.activity
async def ship(order_id: str, express: bool = False) -> list[str]:
    return [order_id] * (2 if express else 1)


@app.workflow
async def order(order_id: str, amount: int) -> Receipt:
    receipt = await funcs.call(charge, order_id, amount)
    reveal_type(receipt)  # R: typed_calls.Receipt
    reveal_type(await funcs.call(ship, order_id))  # R: list[str]
    reveal_type(await funcs.call(ship, order_id, True))  # R: list[str]
    reveal_type(await funcs.call("typed:charge", order_id, amount))  # R: Any
    executor = funcs.new().with_options(retry_policy=None)
    reveal_type(await executor.call(charge, "o", 1))  # R: typed_calls.Receipt
    await funcs.call(charge, order_id, "not-an-int")  # E: Argument 1 to "funcs_call"
    await funcs.call(charge, order_id)  # E: Argument 1 to "funcs_call"
    await funcs.call(ship, order_id, True, 3)  # E: Argument 1 to "funcs_call"
    reveal_type(await workflow.exec(child, 3))  # R: tuple[int, str]
    reveal_type(await workflow.exec(child, 3, id="c-1"))  # R: tuple[int, str]
    await workflow.exec(child, "three")  # E: Argument 1 to "exec"
    return receipt


@app.workflow
async def child(n: int) -> tuple[int, str]:
    return n, str(n)


@app.process
async def worker(name: str, count: int) -> None:
    reveal_type(await process.exec(order, name, count))  # R: typed_calls.Receipt
    named = process.with_options(id="o-1")
    reveal_type(await named.exec(order, name, count))  # R: typed_calls.Receipt
    reveal_type(await process.exec("typed:order", 1))  # R: Any
    await process.exec(order, "wrong")  # E: Argument 1 to "exec"
    reveal_type(await process.spawn(worker, name, count))  # R: roost._pid.Pid
    reveal_type(await process.spawn_monitored(order, name, 1))  # R: roost._pid.Pid
    await process.spawn(worker, name, count, host="typed:processes")
    await process.spawn(worker, count, name)  # E: Argument 1 to "spawn"
    await process.spawn_linked(worker, name)  # E: Argument 1 to "spawn_linked"
    await named.spawn(order, 1, 2)  # E: Argument 1 to "spawn" of "Spawner"


def client_calls(path: str) -> None:
    with roost.connect(path) as client:
        wid = client.start(order, "o-1", 3, id="o-1")
        reveal_type(wid)  # R: roost.client._core.WorkflowId[typed_calls.Receipt]
        reveal_type(client.result(wid))  # R: typed_calls.Receipt
        reveal_type(client.result("o-1"))  # R: Any
        client.start(order, "o-1")  # E: Argument 1 to "start" of "Client"


async def async_client_calls(url: str) -> None:
    async with roost.connect_async(url, token="t") as client:
        wid = await client.start(child, 2)
        reveal_type(await client.result(wid, timeout="5s"))  # R: tuple[int, str]
        await client.start(child, "two")  # E: Argument 1 to "start" of "AsyncClient"
