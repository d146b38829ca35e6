"""The app the console tests run: workflows in every state, a queue with dead letters, cron,
a supervision tree, and hostile values."""

import sys
from typing import Any

import roost
from roost import channel, funcs, process, supervisor

app = roost.App("cons")
FAIL_JOBS = [True]  # the queue handler fails while this holds (its letters go dead)
HANDLED: list[Any] = []


@app.activity
async def charge(order: Any) -> dict[str, Any]:
    return {"charged": order}


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="1h", maximum_attempts=5))
async def flaky(order: Any) -> None:
    raise roost.Error("the payment service said <b>no</b>", kind=roost.ErrorKind.UNAVAILABLE)


@app.workflow
async def waiter(order: Any) -> Any:
    """Charge, then wait for "go" (its payload is the result) or a cancel (returns)."""
    await funcs.call(charge, order)
    go, events = process.listen("go"), process.events()
    sel = await channel.select(go, events, roost.after("1h"))
    if sel.channel is go:
        return sel.value
    return {"stopped": True}


@app.workflow
async def parent(order: Any) -> None:
    await process.spawn(waiter, order)
    await roost.sleep("2h")


@app.workflow
async def returns(value: Any) -> Any:
    return value


@app.workflow
async def raises(message: str) -> None:
    raise ValueError(message)


@app.workflow
async def task_fails() -> None:
    sys.exit("workflow code called sys.exit() <script>alert('x')</script>")


@app.workflow
async def retries() -> None:
    await funcs.call(flaky, 1)


@app.activity
async def job(payload: Any) -> None:
    if FAIL_JOBS[0]:
        raise ValueError(f"job failed on {payload!r}")
    HANDLED.append(payload)


@app.process
async def worker() -> None:
    await roost.sleep("1h")


app.queue("jobs", max_retries=0, backoff="1s")
app.queue("idle")
app.cron("0 0 1 1 *", charge)
app.supervisor(
    "tree",
    children=[
        supervisor.child("w1", "cons:worker"),
        supervisor.child("inner", "cons:inner", type="supervisor"),
    ],
)
app.supervisor("inner", children=[supervisor.child("w2", "cons:worker")])
