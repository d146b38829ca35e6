"""The seed's order pipeline: HTTP -> validate -> charge -> ship -> publish, on durable queues.

POST /orders enqueues ``validate`` (queue order-validate, 2 retries), which hands off to
``charge`` (order-payment: 5 retries, FIFO per order_id, 2 at a time), which hands off to
``ship`` (order-ship: 3 retries), which publishes ``order.fulfilled``. Every step records its
progress in ``roost.state`` (current step, status, per-step status and time, nested) and
publishes it on the ``order.progress`` stream. An hourly cron marks orders stale after 24 h.

Run it: ``make demo`` (or ``.venv/bin/python examples/order_fulfillment.py``; with
``--keep-data DIR`` its data stays in DIR to look at afterwards). The demo starts
the node in a child process, posts orders over real HTTP, SIGKILLs the node in the middle of
the pipeline and starts it again on the same data directory (nothing is lost, nothing is
charged twice), shows a payment that keeps failing go through its retries to the DLQ, fixes
the card and redrives it, and prints the final state.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

import roost
from roost import http, state

app = roost.App("shop")
app.queue("order-validate", max_retries=2, backoff="100ms", jitter=0)
app.queue(
    "order-payment",
    max_retries=5,
    backoff="100ms",
    max_backoff="1s",
    jitter=0,
    type="fifo",
    message_group_field="order_id",
    concurrency=2,
)
app.queue("order-ship", max_retries=3, backoff="100ms", jitter=0)

STEPS = ("validate", "charge", "ship")
BAD_CARDS = Path(os.environ.get("SHOP_DIR", ".")) / "declined-cards.json"


def log(line: str) -> None:
    print(f"  [node] {line}", flush=True)


async def track(order_id: str, step: str, status: str, **extra: Any) -> None:
    """The iii trackStep pattern: one atomic state update, then a stream event."""
    now = roost.now()
    ops: list[dict[str, Any]] = [
        {"type": "set", "path": "current_step", "value": step},
        {"type": "set", "path": "status", "value": status},
        {"type": "set", "path": ["steps", step, "status"], "value": status},
        {"type": "set", "path": ["steps", step, "at"], "value": now},
        {"type": "set", "path": "updated_at", "value": now},
    ]
    ops += [{"type": "set", "path": key, "value": value} for key, value in extra.items()]
    await state.update("orders", order_id, ops)
    roost.publish("order.progress", {"order_id": order_id, "step": step, "status": status})


@app.activity
async def create_order(request: http.Request) -> http.Response:
    # Checked before anything is stored: a bad order is a 400 and leaves no trace. (Bodies
    # roost cannot store at all, such as JSON nested hundreds of levels deep, are refused
    # with a 400 before this handler runs.)
    body = request.json
    if not isinstance(body, dict):
        raise roost.Error("an order is a JSON object with items and a card", kind="Invalid")
    items, card, order_id = body.get("items"), body.get("card"), body.get("order_id")
    if not items or not isinstance(items, list) or not isinstance(card, str):
        raise roost.Error("an order needs a list of items and a card", kind="Invalid")
    if not all(isinstance(item, str) and item for item in items):
        raise roost.Error("items must be non-empty strings", kind="Invalid")
    if order_id is not None and not isinstance(order_id, str):
        raise roost.Error("order_id, when given, is a string", kind="Invalid")
    order_id = order_id or f"o-{roost.uuid4().hex[:8]}"
    order = {"order_id": order_id, "items": items, "card": card}
    await state.set("orders", order_id, {"order": order, "created_at": roost.now()})
    receipt = await roost.enqueue("order-validate", validate, order)
    await track(order_id, "validate", "queued")
    return http.Response(202, {"order_id": order_id, "receipt_id": receipt})


@app.activity
async def get_order(request: http.Request) -> Any:
    order = await state.get("orders", request.path_params["id"])
    if order is None:
        raise roost.Error(f"no order {request.path_params['id']!r}", kind="NotFound")
    return order


@app.activity
async def validate(order: dict[str, Any]) -> None:
    await track(order["order_id"], "validate", "running")
    if any(not isinstance(item, str) or not item for item in order["items"]):
        await track(order["order_id"], "validate", "failed")
        raise roost.Error("items must be non-empty strings", kind="Invalid", retryable=False)
    await roost.enqueue("order-payment", charge, order)  # commits with this step's ack
    await track(order["order_id"], "validate", "done")


@app.activity
async def charge(order: dict[str, Any]) -> None:
    info = roost.queue_info()
    assert info is not None
    order_id = order["order_id"]
    await track(order_id, "charge", "running", **{"attempts/charge": info.attempt})
    await roost.sleep(0.4)  # the payment provider takes its time
    declined = json.loads(BAD_CARDS.read_text()) if BAD_CARDS.exists() else []
    if order["card"] in declined:
        log(f"charge {order_id} attempt {info.attempt}: card declined")
        last = info.attempt > 5  # order-payment: max_retries=5
        await track(order_id, "charge", "failed" if last else "retrying")
        raise roost.Error(f"card {order['card']} declined", kind="Unavailable")
    # Idempotent by receipt id: a redelivery after a crash finds the charge already made.
    if await state.get("charges", info.receipt_id) is None:
        await state.set("charges", info.receipt_id, {"order_id": order_id, "at": roost.now()})
        log(f"charge {order_id}: charged (receipt {info.receipt_id[:8]})")
    else:
        log(f"charge {order_id}: already charged before the crash; not charging again")
    await roost.enqueue("order-ship", ship, order)
    await track(order_id, "charge", "done", payment_receipt=info.receipt_id)


@app.activity
async def ship(order: dict[str, Any]) -> None:
    order_id = order["order_id"]
    await track(order_id, "ship", "running")
    await roost.sleep(0.3)
    await track(order_id, "ship", "done", tracking=f"TRK-{order_id}")
    await state.update(
        "orders", order_id, [{"type": "set", "path": "status", "value": "fulfilled"}]
    )
    roost.publish("order.fulfilled", {"order_id": order_id})


@app.activity
async def on_fulfilled(event: dict[str, Any]) -> None:
    # Durable subscribers are fed at least once: keyed by order, a second delivery after a
    # crash changes nothing.
    order_id = event["order_id"]
    sent = await state.get("mail", "sent")
    if sent is not None and sent["orders"].get(order_id):
        log(f"order.fulfilled: {order_id} delivered again; already emailed, nothing to do")
        return
    await state.update(
        "mail", "sent", [{"type": "set", "path": ["orders", order_id], "value": True}]
    )
    log(f"order.fulfilled: {order_id} (a durable subscriber: it would email the customer)")


@app.activity
async def mark_stale(tick: roost.CronTick) -> None:
    for order_id, order in (await state.list("orders")).items():
        age = tick.fired_at - order["created_at"]
        if order.get("status") not in ("fulfilled", "stale") and age > dt.timedelta(hours=24):
            await track(order_id, order.get("current_step", "validate"), "stale")


app.http("POST", "/orders", create_order)
app.http("GET", "/orders/{id}", get_order)
app.subscribe("order.fulfilled", on_fulfilled, durable=True, queue="order-ship")
app.cron("0 0 * * * * *", mark_stale)  # hourly, seconds first


# -- the node process ------------------------------------------------------------------------


async def serve(data_dir: str) -> None:
    async with roost.open_node(app, data_dir, http="127.0.0.1:0") as node:
        with trio.open_signal_receiver(signal.SIGTERM) as signals:
            print(f"URL {node.http_url}", flush=True)
            async for _ in signals:  # a SIGTERM: stop gracefully
                break


# -- the demo (the parent process) -----------------------------------------------------------


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


class Node:
    """The node as a child process we can SIGKILL.

    Its output is relayed as it comes (its log records to stderr, prefixed), so the
    narration shows the node's lines in the order things happen.
    """

    def __init__(self, data_dir: str) -> None:
        env = {**os.environ, "SHOP_DIR": data_dir, "PYTHONWARNINGS": "error"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", data_dir],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.url = ""
        self._lines: list[str] = []
        self._seen = threading.Condition()
        self._relays = [
            threading.Thread(target=self._relay, args=(self.proc.stdout, sys.stdout, "")),
            threading.Thread(target=self._relay, args=(self.proc.stderr, sys.stderr, "  [log] ")),
        ]
        for relay in self._relays:
            relay.start()
        with self._seen:  # recovered work may print before the URL line
            self._seen.wait_for(lambda: self.url or self.proc.poll() is not None, timeout=30)
        if not self.url:
            self.kill()
            raise SystemExit("the node did not start")

    def _relay(self, stream: Any, out: Any, prefix: str) -> None:
        for line in stream:
            if line.startswith("URL "):
                self.url = line.split()[1]
            else:
                out.write(prefix + line)
                out.flush()
            with self._seen:
                self._lines.append(line)
                self._seen.notify_all()
        stream.close()
        with self._seen:
            self._seen.notify_all()

    def wait_for_line(self, fragment: str, limit: float = 20.0) -> None:
        """Wait until the node has printed a line containing ``fragment``."""
        with self._seen:
            if not self._seen.wait_for(
                lambda: any(fragment in line for line in self._lines), timeout=limit
            ):
                raise SystemExit(f"the node never printed {fragment!r}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._join()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._join()

    def _join(self) -> None:
        for relay in self._relays:
            relay.join()


def wait_for(base: str, order_id: str, want: str, limit: float = 20.0) -> dict[str, Any]:
    end = time.monotonic() + limit
    while True:
        _, order = call(base, "GET", f"/orders/{order_id}")
        if order and order.get("status") == want:
            return dict(order)
        if time.monotonic() > end:
            raise SystemExit(f"{order_id} never reached {want!r}: {order}")
        time.sleep(0.05)


@contextlib.contextmanager
def demo_data(keep: str | None) -> Iterator[str]:
    """The demo's data directory: ``keep`` (emptied first, left for a look), or a temporary one."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="roost-shop-") as data_dir:
            yield data_dir
        return
    shutil.rmtree(keep, ignore_errors=True)
    Path(keep).mkdir(parents=True)
    yield keep


def demo(keep: str | None = None) -> None:
    with demo_data(keep) as data_dir:
        bad_cards = Path(data_dir) / "declined-cards.json"
        bad_cards.write_text(json.dumps(["4000-0000-0000-0002"]))
        print("1. start the node and post orders over HTTP")
        node = Node(data_dir)
        print(f"   node serving on {node.url}")
        status, body = call(node.url, "POST", "/orders", {"items": []})
        print(f"   POST /orders with no items -> {status} {body}")
        status, body = call(node.url, "GET", "/orders/nope")
        print(f"   GET /orders/nope -> {status} {body}")
        orders = []
        for n, card in enumerate(["4242-1", "4242-2", "4242-3", "4000-0000-0000-0002"], start=1):
            status, body = call(
                node.url,
                "POST",
                "/orders",
                {"order_id": f"o-{n}", "items": ["kettle"], "card": card},
            )
            print(f"   POST /orders o-{n} -> {status}, queued as {body['receipt_id'][:8]}")
            orders.append(body["order_id"])
        wait_for(node.url, "o-1", "fulfilled")
        node.wait_for_line("charge o-1: charged")
        where = []
        for order_id in orders[1:]:
            _, order = call(node.url, "GET", f"/orders/{order_id}")
            status, step = order["status"], order["current_step"]
            where.append(
                f"{order_id} {status}"
                if status == "fulfilled"
                else f"{order_id} at {step} ({status})"
            )
        print(f"   o-1 fulfilled; {', '.join(where)}")

        print("2. SIGKILL the node in the middle of the pipeline, start it again")
        node.kill()
        node = Node(data_dir)
        print(f"   node restarted on {node.url}")
        for order_id in ("o-2", "o-3"):
            order = wait_for(node.url, order_id, "fulfilled")
            print(f"   {order_id}: {order['status']}, tracking {order['tracking']}")

        print("3. o-4's card is declined: 6 attempts, then the DLQ; fix the card and redrive")
        o4 = wait_for(node.url, "o-4", "failed")  # the DLQ'd step's last status
        node.wait_for_line("charge o-4 attempt 6: card declined")
        print(
            f"   o-4: {o4['current_step']} {o4['status']} after {o4['attempts']['charge']} attempts"
        )
        node.stop()
        bad_cards.write_text("[]")
        redrive_payments(data_dir)
        node = Node(data_dir)
        order = wait_for(node.url, "o-4", "fulfilled")
        node.wait_for_line("order.fulfilled: o-4")
        print(f"   o-4 after the redrive: {order['status']}, tracking {order['tracking']}")
        node.stop()

        print("4. final state")
        report(data_dir)
    print("5. the hourly cron, on a test node whose clock skips ahead")
    trio.run(stale_orders)
    print("order fulfillment demo finished")
    print(next_steps(keep))


def next_steps(kept: str | None) -> str:
    """How to run and watch a node of your own: ``roost run``, the CLI, the console."""
    data = kept or "shop-data"
    here = os.path.relpath(Path(sys.executable).with_name("roost"))
    roost_cli = here if not here.startswith("..") else str(Path(sys.executable).with_name("roost"))
    app_ref = "--app examples.order_fulfillment:app"
    lines = ["", "Your turn: run this app as a node of your own, and watch it."]
    if kept:
        lines += [
            f"  What the demo left in {kept}/ (its queues, their dead letters, the cron):",
            f"    {roost_cli} queue stats {app_ref} --data-dir {kept}",
            f"    {roost_cli} dlq list order-payment --data-dir {kept}",
            f"    {roost_cli} cron list {app_ref} --data-dir {kept}",
        ]
    lines += [
        "  Serve it (HTTP on :8080, the admin API and web console on :8081; Ctrl-C stops it):",
        (
            f"    {roost_cli} run examples.order_fulfillment:app --data-dir {data} "
            "--http 8080 --admin 8081"
        ),
        "  From another terminal:",
        "    curl -X POST localhost:8080/orders -H 'content-type: application/json' \\",
        """      -d '{"order_id": "o-10", "items": ["kettle"], "card": "4242-1"}'""",
        "    curl localhost:8080/orders/o-10",
        f"    {roost_cli} queue stats --data-dir {data}",
        f"  The console: http://127.0.0.1:8081/?token=TOKEN, TOKEN from {data}/admin.json",
        "  (docs/admin.md); docs/operating.md has every command.",
    ]
    return "\n".join(lines)


async def stale_orders() -> None:
    from roost.testing import open_test_node  # noqa: PLC0415 - test tooling, only here

    async with open_test_node(app):
        await state.set("orders", "o-9", {"created_at": roost.now()})
        await track("o-9", "charge", "retrying")
        for hours in (23, 2):
            await roost.sleep(hours * 3600)  # the cron fires every hour meanwhile
            order = await state.get("orders", "o-9")
            print(f"   after {hours:>2} more hours: o-9 is {order['status']}")


def redrive_payments(data_dir: str) -> None:
    async def main() -> None:
        async with roost.open_node(app, data_dir) as node:
            dead = node.dlq.list("order-payment")
            for letter in dead:
                errors = [e.message for e in letter.errors]
                order_id = letter.payload["order_id"]
                print(f"   DLQ order-payment: {order_id}: {len(errors)} errors")
                print(f"   last error: {errors[-1]!r}")
            moved = await node.dlq.redrive_all("order-payment")
            print(f"   redrove {moved} message(s)")

    trio.run(main)


def report(data_dir: str) -> None:
    async def main() -> None:
        async with roost.open_node(app, data_dir):
            orders = await state.list("orders")
            for order_id, order in orders.items():
                steps = ", ".join(f"{s}={order['steps'][s]['status']}" for s in STEPS)
                print(f"   {order_id}: {order['status']:<9} {steps}")
            charged = sorted(c["order_id"] for c in (await state.list("charges")).values())
            print(f"   charges recorded: {charged}")
            fulfilled = {o for o, order in orders.items() if order["status"] == "fulfilled"}
            # A stopped node may leave a durable subscriber's delivery pending: this node
            # resumes it, so wait (bounded) until every fulfilled order has its email.
            with trio.move_on_after(10):
                while not fulfilled <= set((await state.get("mail", "sent"))["orders"]):  # noqa: ASYNC110 - state has no change notification
                    await trio.sleep(0.05)
            mails = await state.get("mail", "sent")
            print(f"   customers emailed about: {sorted(mails['orders'])}")

    trio.run(main)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        trio.run(serve, sys.argv[2])
    elif sys.argv[1:2] == ["--keep-data"]:
        demo(keep=sys.argv[2])  # `make demo`: the data stays, to look at afterwards
    else:
        demo()
