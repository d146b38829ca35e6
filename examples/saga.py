"""A saga as a durable workflow: reserve, charge, ship, and undo in reverse on failure.

Each step of the order is an activity. After a step succeeds, the workflow registers the
activity that undoes it (its *compensation*) on a stack. When a later step fails, the
workflow runs the compensations newest first: refund the payment, then release the
inventory. A compensation that fails does not stop the others; the workflow reports the
first compensation error next to the error of the step that failed.

Because the workflow is durable, the stack of compensations is too: it is rebuilt by
replaying the history, so a saga interrupted by a crash still undoes exactly the steps
that were done.

1. order-1: every step succeeds; no compensation runs.
2. order-2: shipping fails; the refund and then the release run.
3. order-3: shipping fails and the refund fails too (non-retryable); the release still
   runs, and the result carries both errors.

Run it with ``.venv/bin/python examples/saga.py``.
"""

import logging
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import trio

import roost
from roost import funcs, process

app = roost.App("saga")

# Short retry policies keep the demo fast; a real one would back off for minutes.
STEP_RETRIES = roost.RetryPolicy(initial_interval="100ms", maximum_attempts=3)
# Compensations must not give up easily: retry transient errors more, but an error marked
# retryable=False (or of kind Invalid) still reaches the workflow at once.
UNDO_RETRIES = roost.RetryPolicy(
    initial_interval="100ms", maximum_attempts=10, non_retryable_error_kinds=["Invalid"]
)

# Every activity body that ran, in order (one OS process; the tests read it too).
CALLS: list[str] = []


# -- activities: the steps and their compensations ----------------------------------------


@app.activity(retry_policy=STEP_RETRIES)
async def reserve_inventory(order_id: str, items: list[str]) -> dict[str, Any]:
    """Hold the items in the warehouse."""
    CALLS.append(f"reserve_inventory {order_id}")
    print(f"    reserve_inventory({order_id}): reserved {', '.join(items)}")
    return {"id": f"res-{order_id}", "items": items}


@app.activity(retry_policy=UNDO_RETRIES)
async def release_inventory(reservation_id: str) -> str:
    """Compensation of reserve_inventory: put the items back on the shelf."""
    CALLS.append(f"release_inventory {reservation_id}")
    print(f"    release_inventory({reservation_id}): released")
    return f"released {reservation_id}"


@app.activity(retry_policy=STEP_RETRIES)
async def charge_payment(order_id: str, amount: int, method: str) -> dict[str, Any]:
    """Take the money (a real one would hand activity_info().idempotency_key over)."""
    CALLS.append(f"charge_payment {order_id}")
    print(f"    charge_payment({order_id}): charged {amount} to the {method}")
    return {"id": f"pay-{order_id}", "amount": amount, "method": method}


@app.activity(retry_policy=UNDO_RETRIES)
async def refund_payment(payment: dict[str, Any]) -> str:
    """Compensation of charge_payment: give the money back."""
    CALLS.append(f"refund_payment {payment['id']}")
    if payment["method"] == "gift card":
        print(f"    refund_payment({payment['id']}): the provider refuses to refund a gift card")
        raise roost.Error(
            "gift card payments cannot be refunded automatically",
            kind=roost.ErrorKind.PERMISSION_DENIED,
            retryable=False,  # retrying cannot help: a person has to step in
            details={"payment_id": payment["id"]},
        )
    print(f"    refund_payment({payment['id']}): refunded {payment['amount']}")
    return f"refunded {payment['id']}"


@app.activity(retry_policy=STEP_RETRIES)
async def ship_order(order_id: str, address: str) -> dict[str, Any]:
    """Hand the parcel to the carrier; an empty address is rejected for good."""
    CALLS.append(f"ship_order {order_id}")
    if not address:
        print(f"    ship_order({order_id}): the carrier rejects an empty address")
        raise roost.Error("no shipping address", kind=roost.ErrorKind.INVALID, retryable=False)
    print(f"    ship_order({order_id}): handed to the carrier")
    return {"tracking": f"TRK-{order_id}"}


# -- the saga: a stack of compensations, kept in workflow memory -------------------------


class Compensations:
    """The undo steps of a saga, run newest first.

    The stack lives in the workflow's memory only: after a restart, replaying the history
    runs the same ``add`` calls again, so it is rebuilt exactly.
    """

    def __init__(self) -> None:
        self._stack: list[tuple[Callable[..., Awaitable[Any]], tuple[Any, ...]]] = []

    def add(self, activity: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Register the activity that undoes the step that just succeeded."""
        self._stack.append((activity, args))

    async def run(self) -> tuple[list[str], roost.Error | None]:
        """Run every compensation, newest first, even past failures.

        Returns:
            The names of the compensations that succeeded, and the first error (or None).
        """
        done: list[str] = []
        first_error: roost.Error | None = None
        while self._stack:
            activity, args = self._stack.pop()
            try:
                await funcs.call(activity, *args)
            except roost.Error as err:
                first_error = first_error or err  # keep going; report the first one
            else:
                done.append(activity.__name__)
        return done, first_error


@app.workflow
async def order_saga(order: dict[str, Any]) -> dict[str, Any]:
    """Reserve, charge, ship; on a failure, undo what was done, in reverse order."""
    compensations = Compensations()
    step = "inventory"
    try:
        reservation = await funcs.call(reserve_inventory, order["id"], order["items"])
        compensations.add(release_inventory, reservation["id"])

        step = "payment"
        payment = await funcs.call(charge_payment, order["id"], order["total"], order["method"])
        compensations.add(refund_payment, payment)

        step = "shipping"
        shipment = await funcs.call(ship_order, order["id"], order["address"])
    except roost.Error as err:
        compensated, compensation_error = await compensations.run()
        result = {"status": "failed", "step": step, "error": str(err), "compensated": compensated}
        if compensation_error is not None:
            result["compensation_error"] = str(compensation_error)
        return result
    return {
        "status": "completed",
        "reservation": reservation["id"],
        "payment": payment["id"],
        "tracking": shipment["tracking"],
    }


# -- the driver -----------------------------------------------------------------------------


def order(order_id: str, address: str, method: str = "card") -> dict[str, Any]:
    return {
        "id": order_id,
        "items": ["kettle", "teapot"],
        "total": 4200,
        "method": method,
        "address": address,
    }


async def run_order(title: str, spec: dict[str, Any]) -> dict[str, Any]:
    print(title)
    result: dict[str, Any] = await process.with_options(id=spec["id"]).exec(order_saga, spec)
    for key, value in result.items():
        print(f"  {key}: {value}")
    return result


async def main(data_dir: str) -> None:
    async with roost.open_node(app, data_dir) as node:
        await run_order("1. order-1: every step succeeds", order("order-1", "1 Main St"))
        await run_order(
            "\n2. order-2: shipping fails, so the saga refunds, then releases",
            order("order-2", ""),
        )
        await run_order(
            "\n3. order-3: shipping fails and the refund fails too",
            order("order-3", "", method="gift card"),
        )

        print("\nThe activities each order's history recorded, in order:")
        for workflow_id in ("order-1", "order-2", "order-3"):
            steps = [
                event.entry.split(":")[1]
                for event in node.history(workflow_id)
                if type(event).__name__ == "ScheduleActivity"
            ]
            print(f"  {workflow_id}: {' -> '.join(steps)}")


if __name__ == "__main__":
    # Failed activities are logged at INFO and WARNING; this demo fails on purpose.
    logging.getLogger("roost").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="roost-saga-") as data_dir:
        trio.run(main, data_dir)
    print("\nsaga demo finished")
