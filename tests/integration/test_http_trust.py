"""HTTP triggers under attack: foreign Host, cross-origin changes, non-JSON bodies, auth entries.

A real client against the real hypercorn server on 127.0.0.1, on trio's real clock (as in
test_http.py). "Nothing started" is checked on the node: no handler ran, no workflow exists.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

import roost
from roost import ErrorKind, security
from roost.http import Request

app = roost.App("trust")

RAN: list[str] = []


KEYS = {"k1": b"0123456789abcdef0123456789abcdef"}


@app.policy("web")
def web(actor: security.Actor, action: str, resource: str) -> bool:
    return actor.meta.get("tier") == "paid" or action == "process.spawn"


@app.workflow
async def place_order(req: Request) -> dict:
    actor = security.actor()
    return {"order": req.json, "actor": actor.id if actor is not None else None}


@app.activity
async def echo_json(req: Request) -> dict:
    RAN.append("echo_json")
    return {"json": req.json}


@app.activity
async def webhook(req: Request) -> dict:
    RAN.append("webhook")  # reads only the raw body: any Content-Type will do
    return {"size": len(req.body)}


@app.activity
async def read_only(req: Request) -> str:
    RAN.append("read_only")
    return "ok"


@app.activity
async def who(req: Request) -> dict:
    RAN.append("who")
    actor, scope = security.actor(), security.scope()
    return {
        "actor": actor.id if actor is not None else None,
        "scope": list(scope) if scope is not None else None,
        "ctx": roost.ctx.all(),  # the security context is not a ctx value
    }


@app.process
async def saves(req: Request) -> str:
    await roost.state.set("orders", "last", req.json)  # checked against the scope's policies
    return "saved"


@app.activity
async def check_key(req: Request) -> tuple[security.Actor, security.Scope]:
    key = req.headers.get("x-api-key")
    if key is None:
        raise roost.Error("no API key", kind=ErrorKind.PERMISSION_DENIED)
    if key == "banned":
        raise roost.Error("banned", kind=ErrorKind.PERMISSION_DENIED, details={"status": 403})
    if key == "none":
        return None  # type: ignore[return-value]
    if key == "boom":
        raise ValueError("the key store is down")
    if key == "text":
        return "user:text"  # type: ignore[return-value]
    if key == "paid":
        return security.Actor("user:paid", meta={"tier": "paid"}), security.Scope("web")
    return security.Actor(f"user:{key}"), security.Scope("web")


app.http("POST", "/orders", place_order)
app.http("POST", "/echo", echo_json)
app.http("POST", "/hook", webhook)
app.http("GET", "/read", read_only)
app.http("POST", "/who", who, auth=check_key)
app.http("POST", "/orders-by", place_order, auth=check_key)
app.http("POST", "/save", saves, auth=check_key)


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


@asynccontextmanager
async def serving(**options) -> AsyncIterator[tuple[roost.NodeHandle, httpx.AsyncClient]]:
    async with (
        roost.open_node(app, http="127.0.0.1:0", signing_keys=KEYS, **options) as node,
        httpx.AsyncClient(base_url=node.http_url) as client,
    ):
        yield node, client


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


async def test_a_cross_origin_text_plain_post_and_a_foreign_host_start_nothing():
    async with serving() as (node, client):
        # What a DNS-rebinding page sends: its own name as Host, its own Origin.
        rebinding = await client.post(
            "/orders",
            content=b'{"item": "x"}',
            headers={
                "content-type": "text/plain",
                "origin": "http://evil.example",
                "host": "evil.example",
            },
        )
        assert "evil.example" in error_of(rebinding, 421)["message"]
        # A page of another origin posting to the real address ("simple": no preflight).
        cross = await client.post(
            "/orders",
            content=b'{"item": "x"}',
            headers={"content-type": "text/plain", "origin": "http://evil.example"},
        )
        assert error_of(cross, 403)["kind"] == "PermissionDenied"
        # The same with Sec-Fetch-Site only (no Origin), and to an activity route.
        fetch_site = await client.post(
            "/echo", json={"a": 1}, headers={"sec-fetch-site": "cross-site"}
        )
        assert fetch_site.status_code == 403
        # A foreign Host on a GET: a rebinding page cannot read the answer either.
        read = await client.get("/read", headers={"host": "evil.example:8080"})
        assert read.status_code == 421
        assert node.list_workflows() == []
        assert RAN == []
        # Its own pages (and clients that are not browsers) pass.
        own = await client.post(
            "/orders", json={"item": "y"}, headers={"origin": node.http_url or ""}
        )
        assert (own.status_code, own.json()) == (200, {"order": {"item": "y"}, "actor": None})
        assert (await client.get("/read", headers={"host": "localhost"})).status_code == 200


async def test_a_body_that_is_not_declared_json_is_415_where_json_is_read():
    async with serving() as (node, client):
        # A workflow's request is its input: refused before anything starts.
        to_workflow = await client.post(
            "/orders", content=b'{"item": "x"}', headers={"content-type": "text/plain"}
        )
        error = error_of(to_workflow, 415)
        assert error["kind"] == "Invalid" and "application/json" in error["message"]
        untyped = await client.post("/orders", content=b'{"item": "x"}')
        assert "no Content-Type" in error_of(untyped, 415)["message"]
        assert node.list_workflows() == []
        # An activity that reads .json: 415 from the read.
        form = await client.post("/echo", data={"item": "x"})
        assert form.status_code == 415, form.text
        # A handler that reads only the raw body takes any type.
        hook = await client.post(
            "/hook",
            content=b"a=1&b=2",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert (hook.status_code, hook.json()) == (200, {"size": 7})
        # JSON types with parameters and +json suffixes are JSON.
        typed = await client.post(
            "/echo",
            content=b'{"a": 1}',
            headers={"content-type": "application/merge-patch+json; charset=utf-8"},
        )
        assert (typed.status_code, typed.json()) == (200, {"json": {"a": 1}})
        empty = await client.post("/echo", headers={"content-type": "text/plain"})
        assert (empty.status_code, empty.json()) == (200, {"json": None})


async def test_allowed_hosts_replaces_the_default_list():
    async with serving(allowed_hosts=["shop.example", "*.internal", "proxy:8443"]) as (_, client):
        for host, status in [
            ("shop.example", 200),
            ("SHOP.example:80", 200),
            ("api.internal", 200),
            ("proxy:8443", 200),
            ("proxy:8444", 421),
            ("localhost", 421),
            ("evil.example", 421),
            ("internal", 421),
        ]:
            response = await client.get("/read", headers={"host": host})
            assert response.status_code == status, (host, response.text)
    with pytest.raises(roost.Error) as raised:
        async with serving(allowed_hosts="shop.example"):
            pass
    assert raised.value.kind is ErrorKind.INVALID


async def test_an_auth_entry_names_the_actor_or_refuses_before_the_handler():
    async with serving() as (node, client):
        ok = await client.post("/who", json={}, headers={"x-api-key": "42"})
        assert (ok.status_code, ok.json()) == (
            200,
            {"actor": "user:42", "scope": ["web"], "ctx": {}},
        )
        assert RAN == ["who"]
        RAN.clear()
        missing = await client.post("/who", json={})
        assert error_of(missing, 401)["kind"] == "PermissionDenied"
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert error_of(await client.post("/who", json={}, headers={"x-api-key": "banned"}), 403)
        nothing = await client.post("/who", json={}, headers={"x-api-key": "none"})
        assert "returned None" in error_of(nothing, 401)["message"]
        broken = await client.post("/who", json={}, headers={"x-api-key": "boom"})
        assert error_of(broken, 500)["kind"] == "Internal"  # a failing check refuses too
        text = await client.post("/who", json={}, headers={"x-api-key": "text"})
        assert error_of(text, 500)["kind"] == "Internal"  # not an Actor: refused
        refused = await client.post("/orders-by", json={"item": "z"})
        assert refused.status_code == 401
        assert RAN == []
        assert node.list_workflows() == []
        # A workflow handler runs as the actor: its start record carries the signed context.
        placed = await client.post("/orders-by", json={"item": "z"}, headers={"x-api-key": "7"})
        assert placed.json() == {"order": {"item": "z"}, "actor": "user:7"}
        # The handler's actions are checked against the scope the auth entry gave.
        free = await client.post("/save", json={"n": 1}, headers={"x-api-key": "7"})
        assert error_of(free, 403)["kind"] == "PermissionDenied"
        paid = await client.post("/save", json={"n": 2}, headers={"x-api-key": "paid"})
        assert (paid.status_code, paid.json()) == (200, "saved")
        assert await roost.state.get("orders", "last") == {"n": 2}


def test_an_auth_entry_is_an_activity_or_a_process():
    other = roost.App("trust2")

    @other.workflow
    async def not_an_auth(req: Request) -> str:
        return "x"

    @other.activity
    async def handler(req: Request) -> str:
        return "x"

    with pytest.raises(roost.Error) as raised:
        other.http("GET", "/x", handler, auth=not_an_auth)
    assert raised.value.kind is ErrorKind.INVALID
    assert "auth entry" in raised.value.message
    other.http("GET", "/y", handler, auth="trust2:later")  # by id: checked by validate()
    with pytest.raises(roost.Error) as unknown:
        other.validate()
    assert "trust2:later" in unknown.value.message
