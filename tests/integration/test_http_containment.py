"""Nothing a request or its handler does stops the node (issue 14, item 4), over real HTTP.

A hostile body (nested past ``MAX_JSON_DEPTH``, lone surrogate escapes, invalid UTF-8,
numbers no float or int holds) is a 400 with a JSON error before any handler runs: nothing
is stored. A handler that raises anything (SystemExit, GeneratorExit, a BaseException, an
exception whose __str__ raises, surrogates in its message) or returns what JSON cannot carry
is a 500 (or its kind's status) with the JSON error body, never a traceback. After each,
the node answers the next request. Real clock, like test_http.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from hostile_exceptions import Custom, StrRaisesError

import roost
from roost import state
from roost.http import Request
from roost.queues._http import MAX_JSON_DEPTH  # documented in docs/orchestration.md

app = roost.App("webjail")
handled: list[Any] = []


RAISES: dict[str, Any] = {
    "system_exit": lambda: SystemExit(3),
    "generator_exit": GeneratorExit,
    "base_exception": lambda: Custom("mine"),
    "str_raises": StrRaisesError,
    "surrogate": lambda: ValueError("bad \ud800 text"),
    "not_found_surrogate": lambda: roost.Error("no order \udfff", kind="NotFound"),
}
# A lone surrogate in a result goes out as its JSON escape (test_bad_input), so it is no 500.
RETURNS: dict[str, Any] = {
    "object": {"thing": object()},
    "tuple_key": {(1, 2): 3},
    "nan": float("nan"),
}


@app.activity
async def store(req: Request) -> dict[str, Any]:
    """Stores the body it gets: a refused body must never get here."""
    handled.append(req.json)
    await state.set("bodies", str(len(handled)), req.json)
    return {"stored": len(handled)}


@app.workflow
async def store_workflow(req: Request) -> dict[str, Any]:
    """The request is the workflow's durable input."""
    return {"depth_ok": req.json is not None}


@app.activity
async def raises(req: Request) -> None:
    raise RAISES[req.path_params["how"]]()


@app.process
async def raises_in_process(req: Request) -> None:
    raise RAISES[req.path_params["how"]]()


@app.activity
async def returns(req: Request) -> Any:
    return RETURNS[req.path_params["what"]]


app.http("POST", "/store", store)
app.http("POST", "/store-workflow", store_workflow)
app.http("GET", "/raises/{how}", raises)
app.http("GET", "/raises-in-process/{how}", raises_in_process)
app.http("GET", "/returns/{what}", returns)


@asynccontextmanager
async def serving() -> AsyncIterator[tuple[roost.NodeHandle, httpx.AsyncClient]]:
    handled.clear()
    async with (
        roost.open_node(app, http="127.0.0.1:0") as node,
        httpx.AsyncClient(base_url=node.http_url) as client,
    ):
        yield node, client


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    body = json.loads(response.content.decode("utf-8"))  # strict UTF-8: no surrogates
    assert set(body) == {"error"} and set(body["error"]) == {"kind", "message"}
    assert "Traceback" not in body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


async def still_serving(client: httpx.AsyncClient) -> None:
    ok = await client.post("/store", json={"fine": True})
    assert ok.status_code == 200, ok.text


HOSTILE_BODIES: dict[str, tuple[bytes, str]] = {
    # name -> (body, a fragment of the 400's message)
    "nested 450 deep": (json.dumps({"items": nested(450)}).encode(), "levels deep"),
    "nested one too deep": (json.dumps(nested(MAX_JSON_DEPTH + 1)).encode(), "levels deep"),
    "nested 100000 deep": (b"[" * 100_000 + b"]" * 100_000, "levels deep"),
    "lone surrogate escape": (b'{"card": "\\ud800"}', 'at $["card"]'),
    "lone surrogate key": (b'{"\\udc00": 1}', "(a key)"),
    "lone surrogate as the body": (b'"\\ud800"', "at $;"),
    "surrogate in a list": (b'{"items": ["ok", ["\\udfff"]]}', 'at $["items"][1][0]'),
    "invalid UTF-8": (b'{"card": "\xff\xfe"}', "not valid UTF-8"),
    "UTF-8 encoded surrogate": (b'{"card": "\xed\xa0\x80"}', "not valid UTF-8"),
    "a float too large": (b'{"amount": 1e400}', "too large for a float"),
    "an int too long": (b'{"amount": ' + b"9" * 5000 + b"}", "5000 digits"),
    "NaN": (b'{"amount": NaN}', "not valid JSON"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
async def test_a_hostile_body_is_400_and_nothing_is_stored(name):
    body, fragment = HOSTILE_BODIES[name]
    async with serving() as (node, client):
        for path in ("/store", "/store-workflow"):
            response = await client.post(
                path, content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 400, response.text
            error = error_of(response)
            assert error["kind"] == "Invalid"
            assert fragment in error["message"], error
        assert handled == []  # no handler ran
        assert await state.list("bodies") == {}
        assert node.list_workflows() == []  # no workflow started either
        await still_serving(client)


async def test_the_deepest_accepted_body_is_stored_and_reads_back():
    """MAX_JSON_DEPTH levels are accepted: stored by an activity, and a workflow's input."""
    body = {"items": nested(MAX_JSON_DEPTH - 1)}
    async with serving() as (node, client):
        response = await client.post("/store", json=body)
        assert response.status_code == 200, response.text
        assert await state.get("bodies", "1") == body
        by_workflow = await client.post("/store-workflow", json=body)
        assert (by_workflow.status_code, by_workflow.json()) == (200, {"depth_ok": True})
        assert [w["status"] for w in node.list_workflows()] == ["completed"]


@pytest.mark.parametrize("how", sorted(RAISES))
@pytest.mark.parametrize("where", ["raises", "raises-in-process"])
async def test_a_handler_raising_anything_is_a_json_error(where, how):
    async with serving() as (_, client):
        response = await client.get(f"/{where}/{how}")
        error = error_of(response)
        if how == "not_found_surrogate":
            assert (response.status_code, error["kind"]) == (404, "NotFound")
            assert error["message"] == "no order \\udfff"
        else:
            assert (response.status_code, error["kind"]) == (500, "Internal"), error
        await still_serving(client)


@pytest.mark.parametrize("what", sorted(RETURNS))
async def test_a_result_json_cannot_carry_is_a_500(what):
    async with serving() as (_, client):
        response = await client.get(f"/returns/{what}")
        assert response.status_code == 500
        error = error_of(response)
        assert error["kind"] == "Internal"
        assert "cannot be sent as JSON" in error["message"]
        await still_serving(client)
