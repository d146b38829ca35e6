"""HTTP triggers end to end: a real client against the real hypercorn server on 127.0.0.1.

These tests run on trio's real clock (no autojump_clock fixture): sockets and hypercorn's
own timeouts must see real time. Nothing sleeps: the server listens when open_node returns.
"""

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

import roost
from roost import ErrorKind, process
from roost.http import Request, Response

app = roost.App("web")


@app.activity
async def echo(req: Request) -> dict:
    return {
        "method": req.method,
        "path": req.path,
        "route": req.route,
        "params": req.path_params,
        "query": dict(req.query),
        "tags": req.query.get_all("tag"),
        "header": req.headers.get("X-Trace"),
        "json": req.json,
        "body": req.body.decode(),
    }


@app.activity
def sync_total(req: Request) -> dict:  # a sync activity runs in a worker thread
    return {"total": sum(item["price"] for item in req.json["items"])}


@app.process
async def order_process(req: Request) -> dict:
    return {"order": req.path_params["id"], "by": "process", "qty": req.json["qty"]}


@app.workflow
async def order_workflow(req: Request) -> Response:
    # The request crossed the codec (it is the workflow's durable input).
    return Response(
        202,
        {"order": req.path_params["id"], "json": req.json, "trace": req.headers["x-trace"]},
        {"X-Workflow": "yes"},
    )


@app.activity
async def created(req: Request) -> Response:
    return Response(201, {"id": "o-1"}, headers={"Location": "/orders/o-1", "X-Extra": "1"})


@app.activity
async def no_content(req: Request) -> Response:
    return Response(204)


@app.activity
async def raw_bytes(req: Request) -> Response:
    return Response(200, b"\x00raw", {"content-type": "text/plain"})


@app.activity
async def missing(req: Request) -> None:
    raise roost.Error(f"order {req.path_params['id']} does not exist", kind=ErrorKind.NOT_FOUND)


@app.activity
async def crash(req: Request) -> None:
    raise ValueError("the secret sauce spilled")


@app.process
async def crash_process(req: Request) -> None:
    raise RuntimeError("process went down")


@app.activity
async def conflict(req: Request) -> None:
    raise roost.Error("already paid", kind=ErrorKind.CONFLICT)


@app.process
async def double(x: int) -> int:
    return 2 * x


@app.activity
async def uses_roost(req: Request) -> dict:
    # The handler runs as a process of its own: roost calls work there.
    doubled = await process.exec(double, req.json["x"])
    return {"doubled": doubled, "pid": str(process.pid())}


@app.activity
async def not_json(req: Request) -> dict:
    return {"blob": b"bytes are not JSON"}


GATE: dict[str, trio.Event] = {}


@app.activity
async def wait_at_gate(req: Request) -> str:
    await GATE["gate"].wait()
    return "passed"


@app.activity
async def open_gate(req: Request) -> str:
    GATE["gate"].set()
    return "opened"


app.http("POST", "/echo/{id}", echo)
app.http("GET", "/echo/{id}", echo)
app.http("POST", "/total", sync_total)
app.http("PUT", "/orders/{id}/process", order_process)
app.http("POST", "/orders/{id}", "web:order_workflow")  # by id: checked by validate()
app.http("POST", "/created", created)
app.http("DELETE", "/things/{id}", no_content)
app.http("GET", "/raw", raw_bytes)
app.http("GET", "/orders/{id}", missing)
app.http("GET", "/crash", crash)
app.http("GET", "/crash-process", crash_process)
app.http("POST", "/pay", conflict)
app.http("POST", "/roost", uses_roost)
app.http("GET", "/not-json", not_json)
app.http("GET", "/gate/wait", wait_at_gate)
app.http("POST", "/gate/open", open_gate)


@asynccontextmanager
async def serving(**options) -> AsyncIterator[tuple[roost.NodeHandle, httpx.AsyncClient]]:
    async with (
        roost.open_node(app, http="127.0.0.1:0", **options) as node,
        httpx.AsyncClient(base_url=node.http_url) as client,
    ):
        yield node, client


def error_of(response: httpx.Response) -> dict:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"kind", "message"}
    return body["error"]


async def test_activity_gets_the_request_and_its_value_is_json():
    async with serving() as (_, client):
        response = await client.post(
            "/echo/42?tag=a&tag=b&empty=",
            json={"items": [1, 2]},
            headers={"X-Trace": "t-1"},
        )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "method": "POST",
        "path": "/echo/42",
        "route": "/echo/{id}",
        "params": {"id": "42"},
        "query": {"tag": "a", "empty": ""},
        "tags": ["a", "b"],
        "header": "t-1",
        "json": {"items": [1, 2]},
        "body": '{"items":[1,2]}',
    }


async def test_no_body_means_json_none_and_path_params_are_decoded():
    async with serving() as (_, client):
        response = await client.get("/echo/a%2Fb%20c")
    assert response.status_code == 200
    assert response.json()["json"] is None
    assert response.json()["params"] == {"id": "a/b c"}


async def test_sync_activity_process_and_workflow_handlers():
    async with serving() as (_, client):
        total = await client.post("/total", json={"items": [{"price": 2}, {"price": 3}]})
        by_process = await client.put("/orders/7/process", json={"qty": 3})
        by_workflow = await client.post(
            "/orders/8", json={"rush": True}, headers={"x-trace": "w-1"}
        )
    assert (total.status_code, total.json()) == (200, {"total": 5})
    assert by_process.status_code == 200
    assert by_process.json() == {"order": "7", "by": "process", "qty": 3}
    assert by_workflow.status_code == 202
    assert by_workflow.headers["x-workflow"] == "yes"
    assert by_workflow.json() == {"order": "8", "json": {"rush": True}, "trace": "w-1"}


async def test_response_with_status_and_headers():
    async with serving() as (_, client):
        made = await client.post("/created", json={})
        gone = await client.delete("/things/3")
        raw = await client.get("/raw")
    assert made.status_code == 201
    assert made.headers["location"] == "/orders/o-1" and made.headers["x-extra"] == "1"
    assert made.json() == {"id": "o-1"}
    assert (gone.status_code, gone.content) == (204, b"")
    assert (raw.status_code, raw.content, raw.headers["content-type"]) == (
        200,
        b"\x00raw",
        "text/plain",
    )


async def test_malformed_json_is_400_with_a_json_error():
    async with serving() as (_, client):
        response = await client.post(
            "/echo/1", content=b'{"items": [1,', headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    error = error_of(response)
    assert error["kind"] == "Invalid" and "not valid JSON" in error["message"]


async def test_unknown_route_is_404_and_wrong_method_is_405():
    async with serving() as (_, client):
        unknown = await client.get("/nowhere")
        wrong = await client.patch("/echo/1", json={})
    assert unknown.status_code == 404
    assert error_of(unknown)["kind"] == "NotFound"
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, HEAD, POST"
    assert "PATCH is not allowed" in error_of(wrong)["message"]


async def test_head_is_served_by_the_get_route_without_a_body():
    async with serving() as (_, client):
        response = await client.head("/echo/1")
    assert response.status_code == 200
    assert response.content == b""
    assert int(response.headers["content-length"]) > 0


async def test_handler_errors_map_to_statuses_by_kind():
    async with serving() as (_, client):
        missing_order = await client.get("/orders/9")
        paid = await client.post("/pay", json={})
    assert missing_order.status_code == 404
    assert error_of(missing_order) == {"kind": "NotFound", "message": "order 9 does not exist"}
    assert paid.status_code == 409
    assert error_of(paid)["kind"] == "Conflict"


async def test_plain_exception_is_500_internal_without_a_traceback():
    async with serving() as (_, client):
        by_activity = await client.get("/crash")
        by_process = await client.get("/crash-process")
        not_serializable = await client.get("/not-json")
    for response in (by_activity, by_process, not_serializable):
        assert response.status_code == 500
        assert error_of(response)["kind"] == "Internal"
        assert "Traceback" not in response.text and ".py" not in response.text
    assert "the secret sauce spilled" in error_of(by_activity)["message"]
    assert "process went down" in error_of(by_process)["message"]
    assert "JSON" in error_of(not_serializable)["message"]


async def test_each_request_is_a_process_that_can_use_roost():
    async with serving() as (node, client):
        first = await client.post("/roost", json={"x": 21})
        second = await client.post("/roost", json={"x": 1})
        assert node.process_count() == 1  # request processes exited; only the block remains
    assert first.json()["doubled"] == 42 and second.json()["doubled"] == 2
    assert first.json()["pid"] != second.json()["pid"] != str(node.pid)


async def test_requests_are_served_concurrently():
    GATE["gate"] = trio.Event()
    results: dict[str, httpx.Response] = {}

    async def waiter(client: httpx.AsyncClient) -> None:
        results["wait"] = await client.get("/gate/wait")

    async with serving() as (_, client), trio.open_nursery() as nursery:
        nursery.start_soon(waiter, client)
        # The first request is still in its handler when the second one opens the gate.
        results["open"] = await client.post("/gate/open")
    assert results["open"].json() == "opened"
    assert results["wait"].json() == "passed"


async def test_too_large_body_is_413(monkeypatch):
    monkeypatch.setattr("roost.queues._http_server.MAX_BODY", 10)
    async with serving() as (_, client):
        response = await client.post("/echo/1", json={"padding": "x" * 20})
    assert response.status_code == 413
    assert error_of(response)["kind"] == "LimitExceeded"


async def test_binds_to_loopback_with_the_real_port():
    async with roost.open_node(app, http=True) as node:
        url = node.http_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        port = int(url.rsplit(":", 1)[1])
        assert port > 0
        # The server listens on loopback only: the socket's address is 127.0.0.1.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            assert sock.getpeername()[0] == "127.0.0.1"
        async with httpx.AsyncClient(base_url=url) as client:
            assert (await client.get("/echo/1")).status_code == 200


async def test_no_server_without_http_option():
    async with roost.open_node(app) as node:
        assert node.http_url is None


async def test_bad_http_option_and_unknown_entry_fail_before_start():
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(app, http="127.0.0.1:99999"):
            pass
    assert info.value.kind is ErrorKind.INVALID

    other = roost.App("other")
    other.http("GET", "/x", "other:nothing")
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(other, http=0):
            pass
    assert info.value.kind is ErrorKind.INVALID
    assert "other:nothing" in info.value.message


def leaves(group: BaseExceptionGroup) -> list:
    found = []
    for exc in group.exceptions:
        found.extend(leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


async def test_a_taken_port_is_unavailable():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        errors: list[roost.Error] = []
        try:
            async with roost.open_node(app, http=port):
                pass
        except* roost.Error as group:  # node startup failures come in trio's exception groups
            errors.extend(leaves(group))
    assert [error.kind for error in errors] == [ErrorKind.UNAVAILABLE]
    assert "Address already in use" in errors[0].message


async def test_a_stopping_node_answers_503():
    async with serving() as (node, client):
        node._node.stopping = True  # what node shutdown sets before stopping processes
        response = await client.get("/echo/1")
    assert response.status_code == 503
    assert error_of(response)["kind"] == "Unavailable"
