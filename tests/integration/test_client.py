"""``roost.connect`` and ``roost.connect_async`` against real nodes, online and offline.

Online: a node with an admin server runs on a thread of this process (``NodeThread``), and
the clients reach it through its data directory (found from ``admin.json``) or its URL and
token. Offline: no node holds the data directory, and changes are stored for the next
node, which acts on them. The async client runs the same scenario under asyncio and trio.
"""

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import client_app
import pytest
import trio
from client_app import app
from client_node import NodeThread

import roost
from roost import ErrorKind


def token_of(data_dir):
    return json.loads((Path(data_dir) / "admin.json").read_text())["token"]


def raises(kind, fn, *args, **kwargs):
    with pytest.raises(roost.Error) as caught:
        fn(*args, **kwargs)
    assert caught.value.kind is kind, caught.value
    return caught.value


async def araises(kind, awaitable):
    with pytest.raises(roost.Error) as caught:
        await awaitable
    assert caught.value.kind is kind, caught.value
    return caught.value


# -- online ------------------------------------------------------------------------------


def test_sync_client_steers_a_running_node_through_its_data_dir(tmp_path):
    data = tmp_path / "data"
    with NodeThread(app, data), roost.connect(data) as client:
        greeted = client.start("shop:greet", "ann")
        assert client.result(greeted, timeout="30s") == "hello ann"

        assert client.start(client_app.order, "o-1", 4200, id="o-1") == "o-1"
        assert client.call("o-1", "price", timeout="30s") == 4200
        client.signal("o-1", "approve", "bob")
        assert client.result("o-1") == {"order": "o-1", "approved_by": "bob"}
        described = client.describe("o-1")
        assert described["status"] == "completed"
        assert described["workflow_type"] == "shop:order"
        assert described["started_at"].startswith("20")  # JSON data, as the admin API gives

        client.start("shop:order", "o-2", 1, id="o-2", memo={"customer": "c-7"})
        assert client.describe("o-2")["memo"] == {"customer": "c-7"}
        dup = raises(ErrorKind.ALREADY_EXISTS, client.start, "shop:order", "o-2", 1, id="o-2")
        assert "o-2" in dup.message
        same = client.start("shop:order", "o-2", 9, id="o-2", id_conflict_policy="use_existing")
        assert same == "o-2"
        assert [w["workflow_id"] for w in client.list(status="running")] == ["o-2"]
        listed = client.list(query="workflow_type = 'shop:greet'")
        assert [w["workflow_id"] for w in listed] == [greeted]
        raises(ErrorKind.TIMEOUT, client.result, "o-2", timeout=0)

        client.cancel("o-2", reason="changed my mind")
        assert client.result("o-2") == "canceled: changed my mind"
        client.start("shop:order", "o-3", 1, id="o-3")
        client.terminate("o-3")
        assert raises(ErrorKind.CANCELED, client.result, "o-3").message == "terminated"
        doomed = client.start("shop:doomed", "no stock")
        assert raises(ErrorKind.CONFLICT, client.result, doomed).message == "doomed: no stock"

        receipt = client.enqueue("jobs", "shop:record", {"n": 1})
        assert isinstance(receipt, str) and receipt

        raises(ErrorKind.NOT_FOUND, client.result, "nope")
        raises(ErrorKind.NOT_FOUND, client.describe, "nope")
        raises(ErrorKind.NOT_FOUND, client.start, "shop:missing")
        raises(ErrorKind.INVALID_STATE, client.signal, "o-1", "approve")  # closed
        raises(ErrorKind.INVALID, client.enqueue, "undeclared", "shop:record", {})


async def async_scenario(client, tag):
    wid = await client.start("shop:greet", tag)
    assert await client.result(wid, timeout="30s") == f"hello {tag}"
    oid = await client.start("shop:order", tag, 7, id=f"order-{tag}")
    assert await client.call(oid, "price") == 7
    await client.signal(oid, "approve", "async")
    assert await client.result(oid) == {"order": tag, "approved_by": "async"}
    assert (await client.describe(oid))["status"] == "completed"
    assert oid in [w["workflow_id"] for w in await client.list(status="completed")]
    cid = await client.start("shop:order", tag, 7)
    await client.cancel(cid, "stop")
    assert await client.result(cid) == "canceled: stop"
    tid = await client.start("shop:order", tag, 7)
    await client.terminate(tid)
    await araises(ErrorKind.CANCELED, client.result(tid))
    await araises(ErrorKind.CONFLICT, client.result(await client.start("shop:doomed", tag)))
    assert await client.enqueue("jobs", "shop:record", {"n": tag})
    await araises(ErrorKind.NOT_FOUND, client.describe("nope"))


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("via", ["data_dir", "url"])
def test_async_client_under_asyncio_and_trio(tmp_path, backend, via):
    data = tmp_path / "data"

    async def main():
        if via == "url":
            target, token = node.admin_url, token_of(data)
        else:
            target, token = data, None
        async with roost.connect_async(target, token=token) as client:
            await async_scenario(client, f"{backend}-{via}")

    with NodeThread(app, data) as node:
        if backend == "asyncio":
            asyncio.run(main())
        else:
            trio.run(main)


def test_sync_client_by_url_and_token(tmp_path):
    data = tmp_path / "data"
    with NodeThread(app, data) as node:
        with roost.connect(node.admin_url, token=token_of(data)) as client:
            wid = client.start("shop:greet", "url")
            assert client.result(wid) == "hello url"
        with roost.connect(node.admin_url, token="wrong") as client:
            refused = raises(ErrorKind.PERMISSION_DENIED, client.describe, wid)
            assert "refused the token" in refused.message
            assert refused.details["http_status"] == 401


# -- offline -----------------------------------------------------------------------------


def test_offline_requests_are_stored_for_the_next_node(tmp_path):
    data = tmp_path / "data"
    with roost.connect(data) as client:
        greeted = client.start("shop:greet", "later")
        client.start("shop:order", "o-1", 5, id="o-1", memo={"k": 1})
        client.start("shop:order", "o-2", 5, id="o-2")
        client.signal("o-1", "approve", "offline")
        client.cancel("o-2", "offline")
        receipt = client.enqueue("jobs", "shop:record", {"n": 2})
        described = client.describe("o-1")
        assert described["status"] == "running"
        assert described["memo"] == {"k": 1}
        assert [w["workflow_id"] for w in client.list(status="running")] == sorted(
            [greeted, "o-1", "o-2"]
        )
        timeout = raises(ErrorKind.TIMEOUT, client.result, greeted, timeout="1h")
        assert "no node runs" in timeout.message
        raises(ErrorKind.UNAVAILABLE, client.call, "o-1", "price")
        raises(ErrorKind.ALREADY_EXISTS, client.start, "shop:order", "o-1", 5, id="o-1")
        raises(ErrorKind.NOT_FOUND, client.signal, "nope", "approve")
    assert isinstance(receipt, str)

    with NodeThread(app, data) as node, roost.connect(data) as client:
        assert client.result(greeted) == "hello later"
        assert client.result("o-1") == {"order": "o-1", "approved_by": "offline"}
        assert client.result("o-2") == "canceled: offline"
        assert node.node is not None

    # Closed runs read back with no node, and the queued call ran.
    with roost.connect(data) as client:
        assert client.result("o-1") == {"order": "o-1", "approved_by": "offline"}
        client.start("shop:order", "o-3", 5, id="o-3")
        client.terminate("o-3")

    async def check_state():
        # The async client inside the node's own trio run, through its admin API.
        async with (
            roost.open_node(app, data, admin="127.0.0.1:0"),
            roost.connect_async(data) as client,
        ):
            await araises(ErrorKind.CANCELED, client.result("o-3"))
            assert await roost.state.get("jobs", "2") == {"n": 2}

    trio.run(check_state)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_async_client_offline(tmp_path, backend):
    data = tmp_path / "data"

    async def offline():
        async with roost.connect_async(data) as client:
            wid = await client.start("shop:order", "a", 1, id="a")
            await client.signal(wid, "approve", backend)
            await client.enqueue("jobs", "shop:record", {"n": 3})
            await araises(ErrorKind.TIMEOUT, client.result(wid))
            assert (await client.describe(wid))["status"] == "running"
            return wid

    wid = asyncio.run(offline()) if backend == "asyncio" else trio.run(offline)
    with NodeThread(app, data), roost.connect(data) as client:
        assert client.result(wid) == {"order": "a", "approved_by": backend}


def test_a_left_admin_file_of_a_killed_node_is_ignored(tmp_path):
    data = tmp_path / "data"
    with roost.connect(data) as client:
        client.start("shop:greet", "first")  # creates the store
        # What a SIGKILLed node leaves: its admin.json, no lock held, nobody at the URL.
        (data / "admin.json").write_text(
            json.dumps({"url": "http://127.0.0.1:9", "token": "x", "pid": 1})
        )
        client.start("shop:greet", "second")
        assert not (data / "admin.json").exists()
        assert len(client.list()) == 2


def test_a_node_without_an_admin_server_cannot_be_changed_from_outside(tmp_path):
    data = tmp_path / "data"
    with NodeThread(app, data, admin=False), roost.connect(data) as client:
        refused = raises(ErrorKind.UNAVAILABLE, client.signal, "o-1", "approve")
        assert "--admin" in refused.message
        assert refused.retryable
        raises(ErrorKind.UNAVAILABLE, client.start, "shop:greet", "x")


# -- bad input ---------------------------------------------------------------------------


def test_bad_targets_and_values_are_refused_and_store_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("ROOST_ADMIN_TOKEN", raising=False)
    no_token = raises(ErrorKind.INVALID, roost.connect, "http://127.0.0.1:8081")
    assert "token" in no_token.message
    raises(ErrorKind.INVALID, roost.connect, 42)
    raises(ErrorKind.INVALID, roost.connect, "")
    raises(ErrorKind.INVALID, roost.connect_async, "http://", token="t")

    data = tmp_path / "data"
    with roost.connect(data) as client:
        raises(ErrorKind.NOT_FOUND, client.describe, "x")  # no store yet
        bad = raises(ErrorKind.INVALID, client.start, "shop:greet", {1, 2})
        assert "JSON" in bad.message
        raises(ErrorKind.INVALID, client.start, "no-colon")
        raises(ErrorKind.INVALID, client.start, "shop:greet", "x", bogus_option=1)
        raises(ErrorKind.INVALID, client.start, "shop:greet", "x", id=7)
        raises(ErrorKind.INVALID, client.result, "x", timeout="soon")
        raises(ErrorKind.INVALID, client.list, status="sleeping")
        raises(ErrorKind.INVALID, client.enqueue, "jobs", object(), 1)
        raises(ErrorKind.INVALID, client.signal, "x", "", 1)
    assert not data.exists()  # nothing was stored, not even an empty store

    with roost.connect("http://127.0.0.1:9", token="t") as client:
        unreachable = raises(ErrorKind.UNAVAILABLE, client.describe, "x")
        assert "did not answer" in unreachable.message


def test_beside_a_node_in_another_process_without_an_admin_server(tmp_path):
    """Reads come from its store (``result`` looks again until the run closes); changes
    are refused, naming ``--admin``."""
    data = tmp_path / "data"
    with roost.connect(data) as client:
        client.start("shop:greet", "beside", id="g")  # stored: the node below runs it
        client.start("shop:order", "o", 1, id="o")
    node = subprocess.Popen(
        [sys.executable, "-m", "roost", "run", "client_app:app", "--data-dir", str(data)],
        cwd=Path(__file__).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in node.stderr:  # its log, until it serves
            if "stop it with Ctrl-C or SIGTERM" in line:
                break
        with roost.connect(data) as client:
            assert client.result("g", timeout="60s") == "hello beside"
            assert client.describe("o")["status"] == "running"
            refused = raises(ErrorKind.UNAVAILABLE, client.signal, "o", "approve", "x")
            assert f"OS pid {node.pid}" in refused.message and "--admin" in refused.message
            raises(ErrorKind.UNAVAILABLE, client.call, "o", "price")
            raises(ErrorKind.TIMEOUT, client.result, "o", timeout=0)
    finally:
        node.send_signal(signal.SIGTERM)
        node.communicate(timeout=60)
    assert node.returncode == 0
