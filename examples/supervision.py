"""Supervision: a tree that restarts what fails, in order, and gives up when it must.

Run it with ``.venv/bin/python examples/supervision.py``.
"""

import logging

import roost
from roost import process, supervisor

app = roost.App("shop")
attempts: dict[str, int] = {}


@app.process
async def database():
    print("  database: up")
    await process.inbox().receive()  # crashes on any message (see below)
    raise ConnectionResetError("database connection lost")


@app.process
async def cache():
    print("  cache: up (after the database, which it requires)")
    await process.events().receive()  # a Cancel: stop cleanly
    print("  cache: stopping")


@app.process
async def payments_api():
    attempts["api"] = attempts.get("api", 0) + 1
    n = attempts["api"]
    print(f"  payments api: attempt {n}")
    if n < 4:
        raise ConnectionError("payment provider unreachable")
    process.send("main", "api-up", n)  # tell the demo it is finally up
    await process.events().receive()


@app.process
async def order_worker(order_id):
    print(f"  order worker for {order_id}: up")
    await process.events().receive()


app.supervisor(
    "root",
    children=[
        supervisor.child("cache", "shop:cache", requires=["db"]),
        supervisor.child("db", "shop:database"),
        supervisor.child(
            "api",
            "shop:payments_api",
            # A service: restarts wait 100ms, 200ms, 400ms ... instead of counting
            # toward the restart intensity.
            backoff=supervisor.Backoff(initial_delay="100ms", factor=2.0, jitter=0.0),
        ),
        supervisor.child("orders", "shop:orders", type="supervisor"),
    ],
    strategy="rest_for_one",
    intensity=2,
    period="5s",
)
app.dynamic_supervisor("orders", template=supervisor.child("order", "shop:order_worker"))


def show(sup):
    for info in supervisor.which_children(sup):
        print(f"    {info.id:<7} {info.type.value:<10} {info.restart.value}")


@app.process
async def main():
    process.registry.register("main")
    api_up = process.listen("api-up")
    print("1. Start the tree: children start in order, 'requires' first")
    root = await process.spawn_monitored("shop:root")
    show(root)

    print("\n2. A service with backoff: the payments api fails 3 times, then stays up")
    print(f"  the api is up on attempt {await api_up.receive()}")
    # rest_for_one restarts "orders" after the api, and a supervisor child counts as up
    # (which_children lists its pid) once its own start is done: give it a moment.
    await roost.sleep("10ms")
    print(f"  counts: {supervisor.count_children(root)}")

    print("\n3. A dynamic supervisor: start order workers at run time")
    orders = supervisor.which_children(root)[-1].pid
    for order_id in ("o-1", "o-2"):
        await supervisor.start_child(orders, order_id)
    await roost.sleep("50ms")
    print(f"  orders: {supervisor.count_children(orders)}")

    print("\n4. rest_for_one: the database crashes, so it and every later child restart")
    process.send(supervisor.which_children(root)[0].pid, "poke")
    print(f"  the api is up again on attempt {await api_up.receive()}")
    show(root)

    print("\n5. Crash it twice more within 5s: intensity 2 exceeded, the tree shuts down")
    for _ in range(2):
        process.send(supervisor.which_children(root)[0].pid, "poke")
        await roost.sleep("50ms")
    exit_event = await process.events().receive()
    print(f"  root exited: {exit_event.error}")
    return "supervision demo finished"


if __name__ == "__main__":
    # Restarts are logged by the "roost.supervisor" logger; crashes by "roost.process" (at
    # ERROR, with a traceback: hushed here, the restarts tell the story).
    logging.basicConfig(level=logging.INFO, format="  log: %(message)s")
    logging.getLogger("roost.process").setLevel(logging.CRITICAL)
    print(roost.run(app, "shop:main"))
