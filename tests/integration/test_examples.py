"""Smoke-run every script in examples/: it must exit 0 and tell its story.

Each example runs in a fresh interpreter (``sys.executable``), with warnings as errors, in
an empty working directory that must still be empty afterwards (no stray data dirs).
"""

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.py"))

# Lines (or fragments) the narrative of each example must contain, in this order.
EXPECTED: dict[str, list[str]] = {
    "ping_pong.py": [
        "main runs as process {demo:processes|",
        "spawned pong as {demo:processes|",
        "main -> pong: ping 1   pong -> main: pong 1",
        "main -> pong: ping 3   pong -> main: pong 3",
        "parse('42') {demo:processes|",
        "exited with value 42",
        "exited with error [Internal] ValueError: invalid literal for int()",
        "crashed: [Internal] ConnectionError: lost the connection on attempt 1; restarting it",
        "crashed: [Internal] ConnectionError: lost the connection on attempt 2; restarting it",
        "supervisor returned: 'connected on attempt 3'",
        "heartbeat: beat 1",
        "the roost.after case won",
        "heartbeat: got Cancel('demo over'), cleaning up",
        "heartbeat exited with value",
        "demo finished",
    ],
    "supervision.py": [
        "1. Start the tree",
        "database: up",
        "cache: up (after the database, which it requires)",
        "payments api: attempt 1",
        "orders  supervisor permanent",
        "payments api: attempt 4",
        "the api is up on attempt 4",
        "counts: {'specs': 4, 'active': 4, 'supervisors': 1, 'workers': 3}",
        "order worker for o-2: up",
        "orders: {'specs': 2, 'active': 2, 'supervisors': 0, 'workers': 2}",
        "4. rest_for_one",
        "cache: stopping",
        "database: up",
        "the api is up again on attempt 5",
        "root exited: [LimitExceeded] supervisor 'shop:root' shut down: reached max restart",
        "supervision demo finished",
    ],
    "order_workflow.py": [
        "1. order-1001: a transient failure is retried",
        "started {shop:workflows|order-1001}",
        "charge_payment(order-1001) attempt 1: the provider timed out",
        "charge_payment(order-1001) attempt 2: charged 4200 to cust-7",
        "order-1001: paid, waiting 2s",
        "ship_order(order-1001): handed to the carrier",
        "result: {'status': 'completed', 'payment_id': 'pay-order-1001', 'tracking': 'TRK-",
        "2. order-1002: the node stops while the workflow sleeps",
        "order-1002: paid, waiting 2s",
        "stopping the node now",
        "node restarted (incarnation 3); watching {shop:workflows|order-1002}",
        "ship_order(order-1002): the carrier rejects an empty address",
        "refund_payment(pay-order-1002): refunded",
        "result: {'status': 'failed', 'error': '[Invalid] no shipping address', 'refunded':",
        "charge_payment ran 0 more times after the restart",
        "order-1001: workflow completed, order completed",
        "2. charge_payment #1 ok -> send 'progress' #2, timer 2s #3",
        "order-1002: workflow completed, order failed",
        "4. ship_order #4 failed (Invalid) -> call refund_payment #5",
        "5. refund_payment #5 ok -> return status 'failed'",
        "completed order workflows: ['order-1001', 'order-1002']",
        "monitoring the finished order-1002 gives its recorded result: {'status': 'failed'",
        "order workflow demo finished",
    ],
    "fastapi_shop.py": [
        "node up; the web app finds it through roost-data",
        "POST /orders -> 201 {'workflow_id': 'o-1'}",
        "GET /orders/o-1 -> 200 {'order': 'o-1', 'status': 'running'}",
        "POST /orders -> 409 {'error': {'kind': 'AlreadyExists'",
        "POST /orders/o-1/approve -> 200 {'approved': 'o-1'}",
        "GET /orders/o-1/result -> 200 {'order': 'o-1', 'approved_by': 'ann',",
        "GET /orders/o-404 -> 404 {'error': {'kind': 'NotFound'",
        "GET /orders/o-2/result -> 504 {'error': {'kind': 'Timeout'",
        "node stopped; the web app's client needs no node to start an order:",
        "POST /orders -> 201 {'workflow_id': 'o-3'} (stored for the next node)",
        "GET /orders/o-3/result -> 504 Timeout",
    ],
    "signals.py": [
        "started {signals:workflows|counter}; the second spawn returned the same PID",
        "start message -> ok {'value': 12}",
        "start message -> ok {'value': 15}",
        "increment {'amount': 5} -> ok {'value': 20}",
        "decrement {'amount': 100} -> nak: would go below zero (20 - 100)",
        "decrement {'amount': 'lots'} -> nak: amount must be an int",
        "get -> ok {'value': 20}",
        "node restarted (incarnation 2)",
        "get -> ok {'value': 20}",
        "decrement {'amount': 20} -> ok {'value': 0}",
        "finish -> ok {'final': 0}",
        "counter exited with {'final_counter': 0}",
        "2. An approval with a durable timeout",
        "reply to alice: approved",
        "refund #77: approved by alice",
        "refund #78: nobody decided within 300ms",
        "a signal to the finished workflow: [NotFound]",
        "signals demo finished",
    ],
    "order_fulfillment.py": [
        "1. start the node and post orders over HTTP",
        "POST /orders with no items -> 400 {'error': {'kind': 'Invalid'",
        "GET /orders/nope -> 404 {'error': {'kind': 'NotFound'",
        "POST /orders o-4 -> 202, queued as",
        # the node's own lines are relayed as they happen, so they sit in the narration
        "[node] charge o-1: charged",
        "o-1 fulfilled;",
        "2. SIGKILL the node in the middle of the pipeline, start it again",
        "node restarted on http://127.0.0.1:",
        "o-3: fulfilled, tracking TRK-o-3",
        "3. o-4's card is declined: 6 attempts, then the DLQ; fix the card and redrive",
        "[node] charge o-4 attempt 6: card declined",
        "o-4: charge failed after 6 attempts",
        "DLQ order-payment: o-4: 6 errors",
        "redrove 1 message(s)",
        "[node] charge o-4: charged",
        "[node] order.fulfilled: o-4 (a durable subscriber",
        "o-4 after the redrive: fulfilled, tracking TRK-o-4",
        "4. final state",
        "o-4: fulfilled validate=done, charge=done, ship=done",
        "charges recorded: ['o-1', 'o-2', 'o-3', 'o-4']",
        "customers emailed about: ['o-1', 'o-2', 'o-3', 'o-4']",
        "after 23 more hours: o-9 is retrying",
        "after  2 more hours: o-9 is stale",
        "order fulfillment demo finished",
        "Your turn: run this app as a node of your own, and watch it.",
        "roost run examples.order_fulfillment:app --data-dir shop-data --http 8080 --admin 8081",
        "roost queue stats --data-dir shop-data",
        "The console: http://127.0.0.1:8081/?token=TOKEN, TOKEN from shop-data/admin.json",
    ],
    "saga.py": [
        "1. order-1: every step succeeds",
        "reserve_inventory(order-1): reserved kettle, teapot",
        "charge_payment(order-1): charged 4200 to the card",
        "ship_order(order-1): handed to the carrier",
        "status: completed",
        "tracking: TRK-order-1",
        "2. order-2: shipping fails, so the saga refunds, then releases",
        "ship_order(order-2): the carrier rejects an empty address",
        "refund_payment(pay-order-2): refunded 4200",
        "release_inventory(res-order-2): released",
        "error: [Invalid] no shipping address",
        "compensated: ['refund_payment', 'release_inventory']",
        "3. order-3: shipping fails and the refund fails too",
        "ship_order(order-3): the carrier rejects an empty address",
        "refund_payment(pay-order-3): the provider refuses to refund a gift card",
        "release_inventory(res-order-3): released",
        "error: [Invalid] no shipping address",
        "compensated: ['release_inventory']",
        "compensation_error: [PermissionDenied] gift card payments cannot be refunded",
        "order-1: reserve_inventory -> charge_payment -> ship_order\n",
        "order-2: reserve_inventory -> charge_payment -> ship_order -> refund_payment -> release_",
        "order-3: reserve_inventory -> charge_payment -> ship_order -> refund_payment -> release_",
        "saga demo finished",
    ],
    "worker_pool.py": [
        "1. batch-1: 9 jobs on 3 workers",
        "status completed, jobs [1, 2, 3, 4, 5, 6, 7, 8, 9], total 285",
        "w1 ran jobs [",
        "every job's activity ran exactly once: True",
        "up to 3 jobs ran at the same time",
        "replaying batch-1's history gives the same result: True",
        "2. batch-2: the node stops in the middle of the batch",
        "4 of 9 jobs done; stopping the node",
        "node restarted (incarnation 3); the batch carries on",
        "status completed, jobs [1, 2, 3, 4, 5, 6, 7, 8, 9], total 285",
        "jobs recorded before the stop, not run again: [",
        "jobs running when the node stopped, run again: [",
        "jobs started after the restart: [",
        "every job is in the result exactly once: True",
        "replaying batch-2's history gives the same result: True",
        "3. batch-3: 9 jobs, 2 workers, a 120ms deadline",
        "status timed out, finished jobs [",
        "replaying batch-3's history gives the same result: True",
        "worker pool demo finished",
    ],
}


def test_examples_are_found() -> None:
    assert "ping_pong.py" in [path.name for path in EXAMPLES]


@pytest.mark.slow
@pytest.mark.parametrize("script", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 0, report
    assert "Traceback" not in proc.stderr, report
    assert list(tmp_path.iterdir()) == [], "the example left files behind"

    assert script.name in EXPECTED, (
        f"add the key lines of {script.name}'s output to EXPECTED in {Path(__file__).name}"
    )
    position = 0
    for fragment in EXPECTED[script.name]:
        found = proc.stdout.find(fragment, position)
        assert found >= 0, f"missing (or out of order): {fragment!r}\n{report}"
        position = found + len(fragment)
