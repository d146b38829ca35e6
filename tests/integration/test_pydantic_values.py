"""pydantic models as workflow inputs, results, signals and activity values (optional)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pydantic = pytest.importorskip("pydantic")

import roost  # noqa: E402 - after the skip: these tests need pydantic
from roost import funcs, process  # noqa: E402

app = roost.App("pyd")


class Item(pydantic.BaseModel):
    sku: str
    qty: int = 1


class Cart(pydantic.BaseModel):
    owner: str
    items: list[Item]


class Quote(pydantic.BaseModel):
    total: int
    items: int


class Note(pydantic.BaseModel):
    """A signal payload no annotation names."""

    text: str


ran: list[str] = []


@app.activity
def quote(cart: Cart) -> Quote:
    ran.append(type(cart).__name__)
    return Quote(total=sum(i.qty * 3 for i in cart.items), items=len(cart.items))


@app.workflow
async def buy(cart: Cart, opener: str) -> dict[str, Any]:
    got = await funcs.call(quote, cart)
    await process.send(roost.Pid.parse(opener), "armed", cart.owner)
    note = await process.listen("note").receive()
    return {"quote": got, "note": note, "types": [type(got).__name__, type(note).__name__]}


CART = Cart(owner="ann", items=[Item(sku="a", qty=2), Item(sku="b")])


async def test_models_round_trip_and_read_back_after_a_restart(
    tmp_path: Path, autojump_clock: Any
) -> None:
    ran.clear()
    data = tmp_path / "data"
    async with roost.open_node(app, data) as node:
        armed = process.listen("armed")
        await process.with_options(id="b-1").spawn(buy, CART, str(node.pid))
        assert await armed.receive() == "ann"
    async with roost.open_node(app, data):
        target = roost.Pid.parse("{pyd:workflows|b-1}")
        process.monitor(target)
        process.send(target, "note", Note(text="thanks"))
        event = await process.events().receive()
    assert event.error is None
    assert event.value == {
        "quote": Quote(total=9, items=2),
        "note": Note(text="thanks"),
        "types": ["Quote", "Note"],
    }
    assert ran == ["Cart"]  # once: the second node read the quote from the store


async def test_a_dict_input_is_validated_into_the_model(autojump_clock: Any) -> None:
    async with roost.open_node(app):
        assert await funcs.call(quote, {"owner": "x", "items": [{"sku": "a"}]}) == Quote(
            total=3, items=1
        )
