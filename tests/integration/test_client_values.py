"""Plain Python types through ``roost.connect`` / ``connect_async``: arguments and results.

The admin API carries JSON: a client sends a dataclass, enum or NamedTuple argument as its
plain data, the workflow's annotations rebuild it, and ``result`` of the id ``start``
returned converts the JSON result back to the entry's annotated result type.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from pathlib import Path
from typing import NamedTuple

import pytest
from client_node import NodeThread

import roost

app = roost.App("typedshop")


class Tier(enum.Enum):
    BASIC = "basic"
    GOLD = "gold"


class Money(NamedTuple):
    amount: int
    currency: str


@dataclasses.dataclass
class Order:
    id: str
    tier: Tier
    price: Money


@dataclasses.dataclass
class Invoice:
    order: Order
    total: Money
    types: list[str]


@app.workflow
async def invoice(order: Order, discount: int) -> Invoice:
    types = [type(order).__name__, type(order.tier).__name__, type(order.price).__name__]
    total = Money(order.price.amount - discount, order.price.currency)
    return Invoice(order, total, types)


ORDER = Order("o-1", Tier.GOLD, Money(100, "EUR"))
EXPECTED = Invoice(ORDER, Money(90, "EUR"), ["Order", "Tier", "Money"])


def test_the_sync_client_sends_and_gets_back_typed_values(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with NodeThread(app, data), roost.connect(data) as client:
        wid = client.start(invoice, ORDER, 10, id="inv-1")
        assert wid == "inv-1"
        got = client.result(wid, timeout="30s")
        assert got == EXPECTED
        assert type(got.total) is Money and got.order.tier is Tier.GOLD
        # By a plain id, the result is the JSON the admin API gives.
        plain = client.result("inv-1")
        assert plain["total"] == [90, "EUR"] and plain["order"]["tier"] == "gold"


def test_the_async_client_under_asyncio(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def main() -> Invoice:
        async with roost.connect_async(data) as client:
            wid = await client.start(invoice, ORDER, 10)
            return await client.result(wid, timeout="30s")

    with NodeThread(app, data):
        assert asyncio.run(main()) == EXPECTED


@app.workflow
async def takes_an_order() -> list:
    message = await roost.process.listen("order", message=True).receive()
    return [message.payload["id"], message.payload["tier"]]


def test_a_signal_payload_of_plain_python_types_is_sent_as_its_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with NodeThread(app, data), roost.connect(data) as client:
        wid = client.start(takes_an_order, id="sig-1")
        client.signal(wid, "order", ORDER)  # a dataclass, as its plain data
        assert client.result(wid, timeout="30s") == ["o-1", "gold"]


def test_a_client_given_the_app_types_the_results_of_workflows_named_by_id(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with NodeThread(app, data):
        with roost.connect(data) as client:
            client.start("typedshop:invoice", ORDER, 10, id="inv-3")  # by id: not typed
            assert isinstance(client.result("inv-3", timeout="30s"), dict)
        with roost.connect(data, app=app) as typed:
            got = typed.result("inv-3", timeout="30s")
            assert got == EXPECTED and type(got.total) is Money

        async def main() -> Invoice:
            async with roost.connect_async(data, app=app) as client:
                return await client.result("inv-3")

        assert asyncio.run(main()) == EXPECTED
    # Offline (no node runs): the stored description names the type too.
    with roost.connect(data, app=app) as offline:
        assert offline.result("inv-3") == EXPECTED
    # A type the app does not declare comes back as its JSON data.
    with roost.connect(data, app=roost.App("other")) as other:
        assert other.result("inv-3")["total"] == [90, "EUR"]


def test_connect_refuses_an_app_that_is_no_app(tmp_path: Path) -> None:
    with pytest.raises(roost.Error, match=r"app is the roost\.App") as caught:
        roost.connect(tmp_path, app="typedshop")
    assert caught.value.kind is roost.ErrorKind.INVALID
