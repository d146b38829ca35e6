"""Plain Python types as workflow inputs, results, signals and activity values.

Dataclasses, enums, NamedTuples and converter-backed classes travel through a real node and
LMDB store, are found from the entries' annotations with no registration call, and come back
as themselves, also after a restart that rebuilds the workflow by replay from the store.
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import roost
from roost import funcs, process, workflow

app = roost.App("vals")


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


class Money(NamedTuple):
    amount: int
    currency: str


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    size: Size = Size.SMALL


@dataclasses.dataclass
class Order:
    id: str
    lines: list[Line]
    priority: Priority
    tags: frozenset[str] = frozenset()


@dataclasses.dataclass
class Approval:
    """A signal payload: no entry's annotation names it."""

    by: str
    level: Priority


@dataclasses.dataclass
class Receipt:
    order: Order
    total: Money
    approval: Approval
    seen: list[str]
    fee: decimal.Decimal


app.converter(decimal.Decimal, str, decimal.Decimal)
calls: list[tuple[str, str]] = []


@app.activity
def price(line: Line, priority: Priority) -> Money:
    """Prices one line; records the types it was called with."""
    calls.append((type(line).__name__, type(priority).__name__))
    factor = 2 if priority is Priority.HIGH else 1
    return Money(line.qty * 10 * factor * int(line.size), "EUR")


@app.activity
async def fee(total: Money) -> decimal.Decimal:
    return decimal.Decimal(total.amount) / 8


@app.workflow
async def checkout(order: Order, opener: str) -> Receipt:
    """Prices the order, reports "armed", waits for an Approval, returns a Receipt."""
    seen = [type(order).__name__, type(order.lines[0]).__name__, type(order.tags).__name__]
    amount = 0
    for line in order.lines:
        money = await funcs.call(price, line, order.priority)
        seen.append(type(money).__name__)
        amount += money.amount
    total = Money(amount, "EUR")
    charge = await funcs.call(fee, total)
    seen.append(type(charge).__name__)
    await process.send(roost.Pid.parse(opener), "armed", order.id)
    approval = await process.listen("approve").receive()
    seen.append(type(approval).__name__)
    return Receipt(order, total, approval, seen, charge)


@app.workflow
async def pair(n: int) -> tuple[int, str]:
    return (n, str(n))


@app.workflow
async def parent(n: int) -> list[Any]:
    """A child's result comes back as the child's annotated type."""
    got = await workflow.exec(pair, n)
    via_process = await process.exec(pair, n + 1)
    return [type(got).__name__, list(got), type(via_process).__name__]


ORDER = Order(
    "o-1",
    [Line("apple", 2), Line("melon", 1, Size.LARGE)],
    Priority.HIGH,
    frozenset({"gift"}),
)
SEEN = ["Order", "Line", "frozenset", "Money", "Money", "Decimal", "Approval"]


def _wf(workflow_id: str) -> roost.Pid:
    return roost.Pid.parse(f"{{vals:workflows|{workflow_id}}}")


async def _receipt() -> Receipt:
    event = await process.events().receive()
    assert event.error is None, event.error
    value: Receipt = event.value
    return value


async def test_values_round_trip_in_one_run(autojump_clock: Any) -> None:
    calls.clear()
    async with roost.open_node(app) as node:
        armed = process.listen("armed")
        pid = await process.with_options(id="o-1").spawn_monitored(checkout, ORDER, str(node.pid))
        assert await armed.receive() == "o-1"
        process.send(pid, "approve", Approval("ann", Priority.LOW))
        receipt = await _receipt()
    assert receipt == Receipt(
        ORDER, Money(80, "EUR"), Approval("ann", Priority.LOW), SEEN, decimal.Decimal(10)
    )
    assert type(receipt.total) is Money and type(receipt.order.lines[1].size) is Size
    assert calls == [("Line", "Priority"), ("Line", "Priority")]


async def test_values_read_back_after_a_restart(tmp_path: Path, autojump_clock: Any) -> None:
    """The second node rebuilds the run from the stored input and activity results."""
    calls.clear()
    data = tmp_path / "data"
    async with roost.open_node(app, data) as node:
        armed = process.listen("armed")
        await process.with_options(id="o-2").spawn(checkout, ORDER, str(node.pid))
        assert await armed.receive() == "o-1"
    assert len(calls) == 2
    async with roost.open_node(app, data) as node:
        process.monitor(_wf("o-2"))
        process.send(_wf("o-2"), "approve", Approval("bob", Priority.HIGH))
        receipt = await _receipt()
        history = node.history("o-2")
    assert receipt.seen == SEEN and receipt.approval == Approval("bob", Priority.HIGH)
    assert receipt.order == ORDER and receipt.fee == decimal.Decimal(10)
    assert len(calls) == 2  # the activities' results were read from the store, not rerun
    assert any(isinstance(getattr(e, "payload", None), Approval) for e in history)


async def test_plain_data_input_is_converted_from_the_annotations(autojump_clock: Any) -> None:
    """Input as the CLI or a JSON client sends it (dicts, lists, enum values) arrives typed."""
    async with roost.open_node(app) as node:
        armed = process.listen("armed")
        plain = {
            "id": "o-3",
            "lines": [{"sku": "apple", "qty": 2}, {"sku": "melon", "qty": 1, "size": 2}],
            "priority": "high",
            "tags": ["gift"],
        }
        pid = await process.with_options(id="o-3").spawn_monitored(checkout, plain, str(node.pid))
        await armed.receive()
        process.send(pid, "approve", Approval("cy", Priority.LOW))
        receipt = await _receipt()
    assert receipt.order == dataclasses.replace(ORDER, id="o-3")
    assert receipt.seen == SEEN


async def test_results_come_back_as_the_annotated_type(autojump_clock: Any) -> None:
    async with roost.open_node(app):
        assert await process.exec(parent, 4) == ["tuple", [4, "4"], "tuple"]
        assert await process.exec(pair, 7) == (7, "7")
        assert await funcs.call(price, Line("x", 1), Priority.LOW) == Money(10, "EUR")


async def test_an_argument_that_does_not_fit_its_annotation_is_invalid(
    autojump_clock: Any,
) -> None:
    async with roost.open_node(app):
        with pytest.raises(roost.Error) as caught:
            await funcs.call(price, {"sku": "x"}, "low")
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "vals:price: argument 'line'" in caught.value.message
    assert "qty" in caught.value.message
