"""The admin server end to end: real HTTP against open_node(admin=...) on 127.0.0.1.

On trio's real clock (like test_http.py): sockets and hypercorn's timeouts see real time.
Nothing sleeps to wait: the server listens when open_node returns, a started workflow is
waited for through the API's own ``?wait=1``, and queue work through events its handlers set.
"""

import json
import os
import socket
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

import roost
from roost import ErrorKind, funcs, process, supervisor

app = roost.App("adm")
app.queue("doomed", max_retries=0, concurrency=1, jitter=0)
app.queue("slow", concurrency=1)
app.cron("0 0 1 1 *", "adm:new_year")

EVENTS: dict[str, trio.Event] = {}
JSON = {"content-type": "application/json"}


@app.activity
async def add(x: int, y: int) -> int:
    return x + y


@app.workflow
async def adder(x: int, y: int) -> int:
    return await funcs.call(add, x, y)


@app.workflow
async def waiter(tag: str) -> dict:
    payload = await process.listen("go").receive()
    return {"tag": tag, "got": payload}


@app.workflow
async def cancellable() -> str:
    async for event in process.events():
        if event.kind is roost.EventKind.CANCEL:
            return f"stopped: {event.reason}"
    return "never"


@app.activity
async def bad_job(payload: dict) -> None:
    raise ValueError(f"job {payload['n']} is broken")


@app.activity
async def marker(payload: dict) -> None:
    EVENTS["marker"].set()


@app.activity
async def gated(payload: dict) -> None:
    EVENTS["started"].set()
    await EVENTS["gate"].wait()


@app.activity
async def new_year(tick: roost.CronTick) -> None:
    pass


@app.process
async def idle_worker() -> None:
    await trio.sleep_forever()


app.supervisor("root", children=[supervisor.child("w", "adm:idle_worker")])


@asynccontextmanager
async def admin_node(**options) -> AsyncIterator[tuple[roost.NodeHandle, httpx.AsyncClient]]:
    async with roost.open_node(app, admin="127.0.0.1:0", **options) as node:
        token = json.loads((node.data_dir / "admin.json").read_text())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            yield node, client


def error_of(response: httpx.Response, status: int, kind: ErrorKind) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"kind", "message", "details"}
    assert body["error"]["kind"] == kind.value
    return body["error"]


async def start(client: httpx.AsyncClient, entry: str, *args, workflow_id=None) -> str:
    response = await client.post(
        "/api/workflows", json={"entry": entry, "args": list(args), "id": workflow_id}
    )
    assert response.status_code == 200, response.text
    return response.json()["workflow_id"]


# -- the token and admin.json ----------------------------------------------------------


async def test_admin_json_is_0600_while_open_and_gone_after_close(tmp_path):
    async with roost.open_node(app, tmp_path, admin="127.0.0.1:0") as node:
        path = tmp_path / "admin.json"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        info = json.loads(path.read_text())
        assert info["url"] == node.admin_url and node.admin_url.startswith("http://127.0.0.1:")
        assert len(info["token"]) >= 40
    assert not path.exists()
    async with roost.open_node(app, tmp_path) as node:
        assert node.admin_url is None
        assert not path.exists()


async def test_a_stale_admin_json_is_replaced_by_the_next_node(tmp_path):
    stale = tmp_path / "admin.json"
    tmp_path.mkdir(exist_ok=True)
    stale.write_text(json.dumps({"url": "http://127.0.0.1:1", "token": "old"}))
    async with roost.open_node(app, tmp_path, admin="127.0.0.1:0") as node:
        info = json.loads(stale.read_text())
        assert info["url"] == node.admin_url and info["token"] != "old"
        assert stat.S_IMODE(os.stat(stale).st_mode) == 0o600
    assert not stale.exists()


async def test_no_token_or_a_wrong_one_is_401_and_changes_nothing():
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
            async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as anon:
                refused = await anon.post(f"/api/workflows/{workflow_id}/cancel", json={})
                error = error_of(refused, 401, ErrorKind.PERMISSION_DENIED)
                assert "admin.json" in error["message"]
                assert refused.headers["www-authenticate"].startswith("Bearer")
                for path in ("/api/node", "/api/workflows", "/metrics", "/", "/nope"):
                    assert (await anon.get(path)).status_code == 401
                started = await anon.post("/api/workflows", json={"entry": "adm:adder"})
                assert started.status_code == 401
                wrong = await anon.get("/api/node", params={"token": "wrong"})
                error_of(wrong, 401, ErrorKind.PERMISSION_DENIED)
        assert node.describe(workflow_id)["status"] == "running"
        assert [w["workflow_id"] for w in node.list_workflows()] == [workflow_id]


async def test_token_in_the_query_once_sets_a_strict_cookie_and_redirects_without_it():
    async with admin_node() as (node, client):
        token = client.headers["authorization"].split()[1]
        async with httpx.AsyncClient(base_url=node.admin_url) as browser:
            answer = await browser.get("/queues", params={"token": token, "x": "1"})
            assert answer.status_code == 303
            assert answer.headers["location"] == "/queues?x=1"
            cookie = answer.headers["set-cookie"]
            assert cookie.startswith(f"roost_token={token};")
            parts = {p.strip().lower() for p in cookie.split(";")}
            assert {"httponly", "samesite=strict", "path=/"} <= parts
            # The client keeps the cookie: the next console page needs no token.
            followed = await browser.get("/queues")
            assert followed.status_code == 200
            assert "doomed" in followed.text
        async with httpx.AsyncClient(
            base_url=node.admin_url, cookies={"roost_token": "forged"}
        ) as forged:
            assert (await forged.get("/queues")).status_code == 401


# -- workflows -------------------------------------------------------------------------


async def test_start_result_describe_list_and_history():
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:adder", 2, 3, workflow_id="sum-1")
        assert workflow_id == "sum-1"
        done = await client.get("/api/workflows/sum-1/result", params={"wait": "1"})
        assert done.json() == {"status": "completed", "result": 5, "error": None}
        described = (await client.get("/api/workflows/sum-1")).json()
        assert described["workflow_type"] == "adm:adder" and described["result"] == 5
        assert described["started_at"] == node.describe("sum-1")["started_at"].isoformat()
        history = (await client.get("/api/workflows/sum-1/history")).json()
        types = [event["type"] for event in history]
        assert types[:2] == ["WorkflowTask", "Started"] and history[1]["args"] == [2, 3]
        assert "ActivityResolved" in types
        running = await start(client, "adm:waiter", "w")
        listed = (await client.get("/api/workflows")).json()
        assert sorted(w["workflow_id"] for w in listed) == sorted(["sum-1", running])
        only = (await client.get("/api/workflows", params={"status": "running"})).json()
        assert [w["workflow_id"] for w in only] == [running]
        query = "workflow_type = 'adm:adder'"
        by_type = await client.get("/api/workflows", params={"query": query})
        assert [w["workflow_id"] for w in by_type.json()] == ["sum-1"]
        both = await client.get("/api/workflows", params={"query": query, "status": "running"})
        assert both.json() == []
        pending = await client.get(f"/api/workflows/{running}/result")
        assert pending.json() == {"status": "running", "result": None, "error": None}


async def test_signal_cancel_and_terminate_steer_running_workflows():
    async with admin_node() as (node, client):
        signaled = await start(client, "adm:waiter", "s")
        ok = await client.post(
            f"/api/workflows/{signaled}/signal", json={"topic": "go", "payload": [1]}
        )
        assert ok.json() == {"ok": True}
        done = await client.get(f"/api/workflows/{signaled}/result", params={"wait": "1"})
        assert done.json()["result"] == {"tag": "s", "got": [1]}

        canceled = await start(client, "adm:cancellable")
        ok = await client.post(f"/api/workflows/{canceled}/cancel", json={"reason": "not needed"})
        assert ok.json() == {"ok": True}
        done = await client.get(f"/api/workflows/{canceled}/result", params={"wait": "1"})
        assert done.json() == {"status": "canceled", "result": "stopped: not needed", "error": None}

        terminated = await start(client, "adm:waiter", "t")
        ok = await client.post(f"/api/workflows/{terminated}/terminate", json={})
        assert ok.json() == {"ok": True}
        done = await client.get(f"/api/workflows/{terminated}/result", params={"wait": "1"})
        assert done.json()["status"] == "terminated"
        assert node.describe(terminated)["status"] == "terminated"

        # A closed workflow cannot be steered: 409, and it stays as it was.
        for action, body in (("signal", {"topic": "go"}), ("cancel", {}), ("terminate", {})):
            refused = await client.post(f"/api/workflows/{signaled}/{action}", json=body)
            error = error_of(refused, 409, ErrorKind.INVALID_STATE)
            assert "completed" in error["message"]
        assert node.describe(signaled)["status"] == "completed"


async def test_workflow_errors_map_to_status_codes_and_bad_bodies_store_nothing():
    async with admin_node() as (node, client):
        error = error_of(await client.get("/api/workflows/nope"), 404, ErrorKind.NOT_FOUND)
        assert error["details"]["workflow_id"] == "nope"
        error_of(await client.get("/api/workflows/nope/history"), 404, ErrorKind.NOT_FOUND)
        error_of(await client.post("/api/workflows/nope/cancel", json={}), 404, ErrorKind.NOT_FOUND)
        unknown = await client.post("/api/workflows", json={"entry": "adm:nothing"})
        error_of(unknown, 404, ErrorKind.NOT_FOUND)
        not_workflow = await client.post(
            "/api/workflows", json={"entry": "adm:add", "args": [1, 2]}
        )
        assert "not a workflow" in error_of(not_workflow, 400, ErrorKind.INVALID)["message"]
        bad_json = await client.post("/api/workflows", content=b"{nope", headers=JSON)
        assert "not JSON" in error_of(bad_json, 400, ErrorKind.INVALID)["message"]
        for body, says in (
            ([1], "JSON object"),
            ({"entry": 5}, "'entry' is required"),
            ({"entry": "adm:adder", "args": {"x": 1}}, "'args' must be a JSON list"),
            ({"entry": "adm:adder", "id": 7}, "'id' must be a string"),
            ({"entry": "adm:adder", "input": [1]}, "unknown field(s) 'input'"),
        ):
            refused = await client.post("/api/workflows", json=body)
            assert says in error_of(refused, 400, ErrorKind.INVALID)["message"], body
        bad_status = await client.get("/api/workflows", params={"status": "sleeping"})
        assert "running" in error_of(bad_status, 400, ErrorKind.INVALID)["message"]
        bad_query = await client.get("/api/workflows", params={"query": "status is x"})
        error_of(bad_query, 400, ErrorKind.INVALID)
        assert node.list_workflows() == []  # nothing of the refused starts was stored

        await start(client, "adm:waiter", "d", workflow_id="dup")
        again = await client.post(
            "/api/workflows", json={"entry": "adm:waiter", "args": ["x"], "id": "dup"}
        )
        error_of(again, 409, ErrorKind.ALREADY_EXISTS)
        topic = await client.post("/api/workflows/dup/signal", json={"topic": 3})
        error_of(topic, 400, ErrorKind.INVALID)
        reason = await client.post("/api/workflows/dup/cancel", json={"reason": 3})
        error_of(reason, 400, ErrorKind.INVALID)
        assert node.describe("dup")["status"] == "running"
        history = node.history("dup")
        assert not any(type(e).__name__ in ("MessageArrived", "CancelRequested") for e in history)


async def test_start_options_bounded_result_waits_calls_and_enqueues():
    async with admin_node() as (node, client):
        started = await client.post(
            "/api/workflows",
            json={"entry": "adm:waiter", "args": ["o"], "id": "w", "options": {"memo": {"k": 1}}},
        )
        assert started.json() == {"workflow_id": "w"}
        assert node.describe("w")["memo"] == {"k": 1}
        again = await client.post(
            "/api/workflows",
            json={
                "entry": "adm:waiter",
                "args": ["x"],
                "id": "w",
                "options": {"id_conflict_policy": "use_existing"},
            },
        )
        assert again.json() == {"workflow_id": "w"}  # the running one, as asked
        for options, says in (
            ([1], "'options' must be a JSON object"),
            ({"bogus": 1}, "unknown workflow start option 'bogus'"),
        ):
            refused = await client.post(
                "/api/workflows", json={"entry": "adm:waiter", "args": ["y"], "options": options}
            )
            assert says in error_of(refused, 400, ErrorKind.INVALID)["message"]

        waited = await client.get("/api/workflows/w/result", params={"wait": "1", "timeout": "0"})
        assert waited.json() == {"status": "running", "result": None, "error": None}
        bad = await client.get("/api/workflows/w/result", params={"wait": "1", "timeout": "-1"})
        error_of(bad, 400, ErrorKind.INVALID)

        # The waiter never replies to a call: no reply within the timeout is 504 Timeout.
        silent = await client.post("/api/workflows/w/call", json={"topic": "q", "timeout": 0.01})
        error_of(silent, 504, ErrorKind.TIMEOUT)
        bad_timeout = await client.post(
            "/api/workflows/w/call", json={"topic": "q", "timeout": "1s"}
        )
        error_of(bad_timeout, 400, ErrorKind.INVALID)
        error_of(
            await client.post("/api/workflows/nope/call", json={"topic": "q"}),
            404,
            ErrorKind.NOT_FOUND,
        )

        EVENTS["marker"] = trio.Event()
        queued = await client.post(
            "/api/queues/slow/messages", json={"entry": "adm:marker", "payload": {"n": 1}}
        )
        assert queued.status_code == 200 and queued.json()["receipt_id"]
        await EVENTS["marker"].wait()
        undeclared = await client.post(
            "/api/queues/nope/messages", json={"entry": "adm:marker", "payload": {}}
        )
        assert "not declared" in error_of(undeclared, 400, ErrorKind.INVALID)["message"]
        error_of(
            await client.post("/api/queues/slow/messages", json={"entry": "adm:nothing"}),
            404,
            ErrorKind.NOT_FOUND,
        )


# -- queues, cron, processes, node -----------------------------------------------------


async def test_queue_stats_and_the_dlq_list_redrive_discard():
    EVENTS["marker"] = trio.Event()
    async with admin_node() as (node, client):
        first = await roost.enqueue("doomed", "adm:bad_job", {"n": 1})
        second = await roost.enqueue("doomed", "adm:bad_job", {"n": 2})
        await roost.enqueue("doomed", "adm:marker", {"n": 3})
        await EVENTS["marker"].wait()  # one at a time: both bad jobs are dead letters now
        stats = (await client.get("/api/queues")).json()
        # (The marker itself may still be in flight: its acknowledgement commits after it.)
        assert (stats["doomed"]["depth"], stats["doomed"]["dead"]) == (0, 2)
        assert stats["slow"] == {"depth": 0, "in_flight": 0, "dead": 0}
        dead = (await client.get("/api/queues/doomed/dlq")).json()
        assert [d["receipt_id"] for d in dead] == [first, second]
        assert set(dead[0]) == {"receipt_id", "entry", "payload", "errors", "failed_at"}
        assert dead[0]["entry"] == "adm:bad_job" and dead[0]["payload"] == {"n": 1}
        assert dead[0]["errors"][0]["kind"] == "Internal"
        assert "job 1 is broken" in dead[0]["errors"][0]["message"]
        assert dead[0]["failed_at"].endswith("+00:00")
        paged = await client.get("/api/queues/doomed/dlq", params={"offset": 1, "limit": 1})
        assert [d["receipt_id"] for d in paged.json()] == [second]

        discarded = await client.post("/api/queues/doomed/dlq/discard", json={"receipt_id": first})
        assert discarded.json() == {"discarded": 1}
        gone = await client.post("/api/queues/doomed/dlq/discard", json={"receipt_id": first})
        error_of(gone, 404, ErrorKind.NOT_FOUND)
        for body in ({}, {"receipt_id": second, "all": True}, {"all": "yes"}):
            refused = await client.post("/api/queues/doomed/dlq/redrive", json=body)
            error_of(refused, 400, ErrorKind.INVALID)
        assert [d.receipt_id for d in node.dlq.list("doomed")] == [second]
        EVENTS["marker"] = trio.Event()
        redriven = await client.post("/api/queues/doomed/dlq/redrive", json={"receipt_id": second})
        assert redriven.json() == {"redriven": 1}
        await roost.enqueue("doomed", "adm:marker", {"n": 4})
        await EVENTS["marker"].wait()  # the redriven job failed again before the marker ran
        assert [d.receipt_id for d in node.dlq.list("doomed")] == [second]
        every = await client.post("/api/queues/doomed/dlq/redrive", json={"all": True})
        assert every.json() == {"redriven": 1}
        unknown = await client.get("/api/queues/nope/dlq")
        error_of(unknown, 404, ErrorKind.NOT_FOUND)


async def test_cron_processes_and_node_info():
    async with admin_node(root="adm:root") as (node, client):
        (cron,) = (await client.get("/api/cron")).json()
        assert cron["expression"] == "0 0 1 1 *" and cron["entry"] == "adm:new_year"
        assert cron["next_fire_at"].endswith("-01-01T00:00:00+00:00")
        procs = (await client.get("/api/processes")).json()
        by_entry = {p["entry"]: p for p in procs}
        root, worker = by_entry["adm:root"], by_entry["adm:idle_worker"]
        assert root["children"] == [worker["pid"]] and root["status"] == "supervisor"
        assert worker["parent"] == root["pid"] and worker["status"] == "running"
        assert set(root) == {"pid", "entry", "name", "parent", "children", "status"}
        assert str(node.pid) in {p["pid"] for p in procs}
        info = (await client.get("/api/node")).json()
        assert info["name"] == "local" and info["incarnation"] == node.incarnation
        assert info["data_dir"] == str(node.data_dir) and info["pid"] == os.getpid()
        assert isinstance(info["version"], str)


async def test_bad_admin_addresses_are_invalid_before_anything_starts(tmp_path):
    for bad in (8080, True, "nowhere", "127.0.0.1:99999"):
        with pytest.raises(roost.Error) as info:
            async with roost.open_node(app, tmp_path / "d", admin=bad):
                pass
        assert info.value.kind is ErrorKind.INVALID
        assert "host:port" in info.value.message
    assert not (tmp_path / "d").exists()


async def test_a_taken_port_is_unavailable_and_leaves_no_admin_json(tmp_path):
    errors: list[roost.Error] = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        try:
            async with roost.open_node(app, tmp_path, admin=f"127.0.0.1:{port}"):
                pass
        except* roost.Error as group:  # node startup failures come in trio's exception groups
            errors.extend(leaves(group))
    assert [error.kind for error in errors] == [ErrorKind.UNAVAILABLE]
    assert "pick another port" in errors[0].message
    assert not (tmp_path / "admin.json").exists()


def leaves(group):
    for exc in group.exceptions:
        yield from leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]


async def test_a_host_beyond_loopback_is_served_when_asked_and_warned_about(tmp_path, caplog):
    async with roost.open_node(app, tmp_path, admin="0.0.0.0:0") as node:
        assert node.admin_url.startswith("http://0.0.0.0:")
        info = json.loads((tmp_path / "admin.json").read_text())
        port = node.admin_url.rsplit(":", 1)[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answer = await client.get(
                "/api/node", headers={"Authorization": f"Bearer {info['token']}"}
            )
            assert answer.status_code == 200
    warned = [r for r in caplog.records if r.name == "roost.admin" and r.levelname == "WARNING"]
    assert warned and "beyond this machine" in warned[0].getMessage()
