"""examples/order_fulfillment.py against hostile POST /orders bodies, in a real subprocess.

One unauthenticated ``POST /orders`` with ``items`` nested 450 levels deep used to store an
order and a queue message the codec could not read back, so the node stopped on every
restart. Here the node is served as ``make demo`` serves it (``--serve DATA_DIR``), gets
that body and the other hostile ones, answers each with a 400 and a JSON error, takes a good
order next, is SIGKILLed, shows in its store only the good order, and starts again on the
same data dir, where it still answers. The parent polls the child's stdout for its URL (it
waits for another OS process, which no trio clock can do).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from roost.storage import Codec, open_lmdb_store, unpack_key

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "order_fulfillment.py"
WAIT = 30.0


def nested(depth: int) -> Any:
    value: Any = "kettle"
    for _ in range(depth):
        value = [value]
    return value


HOSTILE: dict[str, bytes] = {
    "items nested 450 deep": json.dumps({"items": nested(450), "card": "4242"}).encode(),
    "items nested 129 deep": json.dumps({"items": nested(129), "card": "4242"}).encode(),
    "items nested 3 deep": json.dumps({"items": nested(3), "card": "4242"}).encode(),
    "a lone surrogate escape": b'{"items": ["kettle"], "card": "\\ud800"}',
    "a surrogate in an item": b'{"items": ["\\udc00"], "card": "4242"}',
    "invalid UTF-8": b'{"items": ["kettle"], "card": "\xff"}',
    "a huge number": b'{"items": ["kettle"], "card": "4242", "tip": 1e999}',
    "a list body": b'[{"items": ["kettle"], "card": "4242"}]',
    "a string body": b'"an order"',
    "a non-string order id": b'{"items": ["kettle"], "card": "4242", "order_id": {"a": 1}}',
    "not JSON": b'{"items": [',
}


class Node:
    """The example's node process (``--serve``), as the demo starts it."""

    def __init__(self, data_dir: Path, work: Path, name: str) -> None:
        env = {**os.environ, "SHOP_DIR": str(data_dir), "PYTHONWARNINGS": "error"}
        self.err = (work / f"{name}.err").open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "--serve", str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            env=env,
        )
        self.errors = work / f"{name}.err"
        assert self.proc.stdout is not None
        for line in self.proc.stdout:  # blocks until a line or EOF: the child's own pace
            if line.startswith("URL "):
                self.url = line.split()[1]
                break
        else:
            self.proc.wait(timeout=WAIT)
            pytest.fail(f"the node did not start ({self.proc.returncode}):\n{self.stderr()}")

    def stderr(self) -> str:
        return self.errors.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=WAIT)
        self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.err.close()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for node in started:
        node.close()


def stored(data_dir: Path) -> dict[str, Any]:
    """What the killed node left: state keys by scope, queue message and dead letter payloads."""
    codec = Codec()
    store = open_lmdb_store(str(data_dir))
    try:
        with store.read() as txn:
            state: dict[str, list[str]] = {}
            for k, _ in txn.range("state"):
                scope, name = unpack_key(k, str, str)
                state.setdefault(str(scope), []).append(str(name))
            messages = [codec.decode(v).payload for _, v in txn.range("queue_messages")]
            dead = [codec.decode(v).payload for _, v in txn.range("dlq")]
    finally:
        store.close()
    return {"state": state, "messages": messages, "dead": dead}


JSON = {
    "content-type": "application/json"
}  # the bodies are declared JSON: refused for what they hold


def test_hostile_orders_are_refused_and_the_node_restarts(tmp_path: Path, nodes: list[Node]):
    data_dir, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    node = Node(data_dir, work, "first")
    nodes.append(node)
    with httpx.Client(base_url=node.url, timeout=WAIT, headers=JSON) as client:
        for name, body in HOSTILE.items():
            response = client.post("/orders", content=body)
            assert response.status_code == 400, (name, response.status_code, response.text)
            error = response.json()["error"]
            assert error["kind"] == "Invalid", (name, error)
            assert "Traceback" not in error["message"]
            assert node.alive(), f"{name} stopped the node:\n{node.stderr()}"
        good = client.post("/orders", json={"order_id": "o-good", "items": ["kettle"], "card": "1"})
        assert good.status_code == 202, good.text
    node.kill()

    left = stored(data_dir)
    assert left["state"].get("orders") == ["o-good"], left  # nothing of a refused order
    assert left["dead"] == []
    assert all(m["order_id"] == "o-good" for m in left["messages"] if "order_id" in m), left

    again = Node(data_dir, work, "restart")  # starts: nothing unreadable was stored
    nodes.append(again)
    with httpx.Client(base_url=again.url, timeout=WAIT, headers=JSON) as client:
        order = client.get("/orders/o-good")
        assert order.status_code == 200, order.text
        assert order.json()["order"]["items"] == ["kettle"]
        deep = client.post("/orders", content=HOSTILE["items nested 450 deep"])
        assert deep.status_code == 400
        assert again.alive()
    again.kill()
