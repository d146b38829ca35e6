"""The admin server's door: a kept token, Host and Origin checks, the login page, the audit trail.

Real nodes with a real admin server on 127.0.0.1 and a real HTTP client (trio's real clock).
"""

import json
import socket
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from click.testing import CliRunner

import roost
from roost.admin._audit import read_audit
from roost.cli import main

app = roost.App("door")


@app.workflow
async def hello(name: str) -> str:
    return f"hello {name}"


@asynccontextmanager
async def admin_node(data_dir: Path, **options) -> AsyncIterator[roost.NodeHandle]:
    options.setdefault("admin", "127.0.0.1:0")
    async with roost.open_node(app, data_dir, **options) as node:
        yield node


def kept_token(data_dir: Path) -> str:
    return (data_dir / "admin.token").read_text().strip()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_the_token_and_a_given_port_survive_a_restart(tmp_path):
    port = free_port()
    async with admin_node(tmp_path, admin=f"127.0.0.1:{port}") as node:
        token = kept_token(tmp_path)
        assert stat.S_IMODE((tmp_path / "admin.token").stat().st_mode) == 0o600
        assert json.loads((tmp_path / "admin.json").read_text())["token"] == token
        first_url = node.admin_url
        async with httpx.AsyncClient(base_url=first_url) as client:
            login = await client.get("/", params={"token": token})
            assert login.status_code == 303
            cookie = login.cookies["roost_token"]
    async with admin_node(tmp_path, admin=f"127.0.0.1:{port}") as node:
        assert node.admin_url == first_url
        assert kept_token(tmp_path) == token
        async with httpx.AsyncClient(base_url=node.admin_url) as client:
            # A scrape configured before the restart, and a browser logged in before it.
            assert (await client.get("/metrics", headers=bearer(token))).status_code == 200
            client.cookies.set("roost_token", cookie)
            assert (await client.get("/")).status_code == 200


async def test_roost_admin_token_overrides_and_rotates(tmp_path, monkeypatch):
    runner = CliRunner()
    printed = runner.invoke(main, ["admin", "token", "--data-dir", str(tmp_path)])
    assert printed.exit_code == 0, printed.output
    old = printed.stdout.strip()
    assert old == kept_token(tmp_path)
    async with (
        admin_node(tmp_path) as node,
        httpx.AsyncClient(base_url=node.admin_url) as client,
    ):
        assert (await client.get("/api/node", headers=bearer(old))).status_code == 200
        rotated = runner.invoke(main, ["admin", "token", "--rotate", "--data-dir", str(tmp_path)])
        assert rotated.exit_code == 0, rotated.output
        new = rotated.stdout.strip()
        assert new != old and new == kept_token(tmp_path)
        # The running node refuses the old token at once and takes the new one.
        assert (await client.get("/api/node", headers=bearer(old))).status_code == 401
        assert (await client.get("/api/node", headers=bearer(new))).status_code == 200
        assert json.loads((tmp_path / "admin.json").read_text())["token"] == new
    assert read_audit(tmp_path)[-1]["action"] == "roost admin token --rotate"
    monkeypatch.setenv("ROOST_ADMIN_TOKEN", "an-operator-chosen-token-123")
    async with (
        admin_node(tmp_path) as node,
        httpx.AsyncClient(base_url=node.admin_url) as client,
    ):
        env = bearer("an-operator-chosen-token-123")
        assert (await client.get("/api/node", headers=env)).status_code == 200
        assert (await client.get("/api/node", headers=bearer(new))).status_code == 401
    refused = runner.invoke(main, ["admin", "token", "--rotate", "--data-dir", str(tmp_path)])
    assert refused.exit_code == 1 and "ROOST_ADMIN_TOKEN" in refused.output
    assert kept_token(tmp_path) == new


async def test_a_foreign_host_or_another_origin_changes_nothing(tmp_path):
    async with admin_node(tmp_path) as node:
        headers = bearer(kept_token(tmp_path))
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            start = {"entry": "door:hello", "args": ["x"], "id": "w1"}
            rebound = await client.post(
                "/api/workflows", json=start, headers={"host": "evil.example"}
            )
            assert rebound.status_code == 421
            assert "allowed hosts" in rebound.json()["error"]["message"]
            read = await client.get("/api/workflows", headers={"host": "evil.example"})
            assert read.status_code == 421
            cross = await client.post(
                "/api/workflows",
                content=json.dumps(start),
                headers={"content-type": "text/plain", "origin": "http://evil.example"},
            )
            assert cross.status_code == 403
            assert node.list_workflows() == []
            ok = await client.post("/api/workflows", json=start, headers={"host": "localhost"})
            assert ok.status_code == 200, ok.text
    async with (
        admin_node(tmp_path, allowed_hosts=["ops.example"]) as node,
        httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client,
    ):
        assert (await client.get("/api/node")).status_code == 421
        named = await client.get("/api/node", headers={"host": "ops.example"})
        assert named.status_code == 200


async def test_a_browser_without_a_cookie_gets_a_login_page(tmp_path):
    async with admin_node(tmp_path) as node:
        token = kept_token(tmp_path)
        async with httpx.AsyncClient(base_url=node.admin_url) as client:
            page = await client.get("/queues?x=1", headers={"accept": "text/html,*/*"})
            assert page.status_code == 401
            assert page.headers["content-type"].startswith("text/html")
            assert '<form method="post" action="/login">' in page.text
            assert 'value="/queues?x=1"' in page.text
            # Not a browser: a JSON error.
            plain = await client.get("/queues")
            assert (plain.status_code, plain.headers["content-type"]) == (401, "application/json")
            wrong = await client.post("/login", data={"token": "nope", "next": "/queues"})
            assert wrong.status_code == 401 and 'id="wrong"' in wrong.text
            for away in ["//evil.example/", "https://evil.example/", "/x\r\nSet-Cookie: a=b"]:
                escape = await client.post("/login", data={"token": token, "next": away})
                assert escape.headers["location"] == "/", away
            login = await client.post("/login", data={"token": token, "next": "/queues?x=1"})
            assert login.status_code == 303 and login.headers["location"] == "/queues?x=1"
            assert "HttpOnly" in login.headers["set-cookie"]
            assert (await client.get("/queues")).status_code == 200  # the cookie works
            # The login form from another origin is refused like any other change.
            foreign = await client.post(
                "/login", data={"token": token}, headers={"origin": "http://evil.example"}
            )
            assert foreign.status_code == 403


async def test_every_change_is_recorded_with_its_actor(tmp_path):
    async with admin_node(tmp_path) as node:
        headers = {**bearer(kept_token(tmp_path)), "X-Roost-Actor": "operator:alice"}
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            start = {"entry": "door:hello", "args": ["x"], "id": "w1"}
            assert (await client.post("/api/workflows", json=start)).status_code == 200
            assert (await client.get("/api/workflows")).status_code == 200  # a read: not recorded
            bad = await client.post("/api/workflows/w1/cancel", json={"reason": 1})
            assert bad.status_code >= 400
    entries = read_audit(tmp_path)
    assert [(e["actor"], e["via"], e["action"]) for e in entries] == [
        ("operator:alice", "admin API", "POST /api/workflows"),
        ("operator:alice", "admin API", "POST /api/workflows/w1/cancel"),
    ]
    assert entries[0]["outcome"] == 200 and entries[1]["outcome"] == bad.status_code
    assert stat.S_IMODE((tmp_path / "audit.log").stat().st_mode) == 0o600
    # A change to the stopped store, from the command line: recorded by the CLI.
    done = CliRunner().invoke(
        main,
        ["workflow", "start", "door:hello", '["y"]', "--id", "w2", "--data-dir", str(tmp_path)],
    )
    assert done.exit_code == 0, done.output
    last = read_audit(tmp_path)[-1]
    assert last["via"] == "cli" and last["actor"].startswith("operator:")
    assert "workflow start" in last["action"] and "w2" in last["action"]
    assert last["outcome"] == "ok"
