"""The admin server's guards: who may change what, bounded bodies, routes and status codes.

Real HTTP against open_node(admin=...) on 127.0.0.1, on trio's real clock (as test_admin.py).
Nothing sleeps to wait: the API answers once its change is stored, ``?wait=1`` once a
workflow has closed, and trio.testing.wait_all_tasks_blocked once a request is parked.
"""

import json
import re
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio
import trio.testing

import roost
from roost import ErrorKind, process

sys.path.insert(0, str(Path(__file__).parent))

from test_admin import JSON, admin_node, app, error_of, start, waiter

FORM = {"content-type": "application/x-www-form-urlencoded"}


@asynccontextmanager
async def logged_in(node: roost.NodeHandle, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding the console's cookie (and no bearer header), as a browser would."""
    async with httpx.AsyncClient(base_url=node.admin_url) as browser:
        first = await browser.get("/", params={"token": token})
        assert first.status_code == 303 and "roost_token" in browser.cookies
        yield browser


def token_of(client: httpx.AsyncClient) -> str:
    return client.headers["authorization"].split()[1]


def history_kinds(node: roost.NodeHandle, workflow_id: str) -> list[str]:
    return [type(e).__name__ for e in node.history(workflow_id)]


# -- CSRF: the cookie is the console's alone ---------------------------------------------------


async def test_the_cookie_never_opens_the_api_or_metrics_and_changes_nothing():
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        async with logged_in(node, token_of(client)) as browser:
            for path in ("/api/node", "/api/workflows", "/metrics"):
                refused = await browser.get(path)
                assert "Bearer" in error_of(refused, 401, ErrorKind.PERMISSION_DENIED)["message"]
            # The review's trick: JSON sent as text/plain, as a <form enctype> can.
            body = b'{"reason": "csrf"}'
            plain = {"content-type": "text/plain"}
            cancel = await browser.post(
                f"/api/workflows/{workflow_id}/cancel", content=body, headers=plain
            )
            error_of(cancel, 401, ErrorKind.PERMISSION_DENIED)
            started = await browser.post(
                "/api/workflows", content=b'{"entry": "adm:adder", "args": [1, 2]}', headers=JSON
            )
            error_of(started, 401, ErrorKind.PERMISSION_DENIED)
            assert (await browser.get("/queues")).status_code == 200  # the console still reads
        assert node.describe(workflow_id)["status"] == "running"
        assert "CancelRequested" not in history_kinds(node, workflow_id)
        assert [w["workflow_id"] for w in node.list_workflows()] == [workflow_id]


async def test_api_posts_take_only_json_bodies():
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        for kind in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"content-type": kind} if kind else {}
            refused = await client.post(
                f"/api/workflows/{workflow_id}/cancel", content=b'{"reason": "x"}', headers=headers
            )
            message = error_of(refused, 400, ErrorKind.INVALID)["message"]
            assert "Content-Type: application/json" in message, kind
            ended = await client.post(f"/api/workflows/{workflow_id}/terminate", headers=headers)
            error_of(ended, 400, ErrorKind.INVALID)
        assert node.describe(workflow_id)["status"] == "running"
        assert "CancelRequested" not in history_kinds(node, workflow_id)


async def test_console_posts_by_cookie_need_its_own_origin_and_the_form_token():
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        async with logged_in(node, token_of(client)) as browser:
            page = (await browser.get(f"/workflows/{workflow_id}")).text
            tokens = set(re.findall(r'name="form_token" value="([0-9a-f]+)"', page))
            assert len(tokens) == 1  # every form of the page carries it
            form_token = tokens.pop()
            own = node.admin_url
            url = f"/workflows/{workflow_id}"
            attempts = [
                ({"origin": own}, {"action": "terminate"}),  # no form token
                ({"origin": own}, {"action": "terminate", "form_token": "0" * 64}),
                (
                    {"origin": "http://127.0.0.1:1"},
                    {"action": "terminate", "form_token": form_token},
                ),
                ({"origin": "null"}, {"action": "terminate", "form_token": form_token}),
                (
                    {"sec-fetch-site": "same-site"},
                    {"action": "terminate", "form_token": form_token},
                ),
                (
                    {"sec-fetch-site": "cross-site", "origin": own},
                    {"action": "terminate", "form_token": form_token},
                ),
            ]
            for headers, data in attempts:
                refused = await browser.post(url, data=data, headers=headers)
                assert refused.status_code == 403, (headers, data, refused.text)
                assert node.describe(workflow_id)["status"] == "running", (headers, data)
            ok = await browser.post(
                url,
                data={"action": "terminate", "form_token": form_token},
                headers={"origin": own, "sec-fetch-site": "same-origin"},
            )
            assert ok.status_code == 303, ok.text
        closed = await client.get(f"/api/workflows/{workflow_id}/result", params={"wait": "1"})
        assert closed.json()["status"] == "terminated"


async def test_the_token_link_never_redirects_to_another_host():
    async with admin_node() as (node, client):
        token = token_of(client)
        for path in ("//evil.example/", "///evil.example/x", "/\\evil.example/"):
            async with httpx.AsyncClient() as browser:  # no cookie yet: the token link answers
                answer = await browser.get(f"{node.admin_url}{path}", params={"token": token})
                assert answer.status_code == 303, path
                location = answer.headers["location"]
                assert location.startswith("/") and not location.startswith("//"), location
                assert not location.startswith("/\\"), location


# -- bodies: bounded, and too deep is Invalid --------------------------------------------------


async def test_deeply_nested_json_is_invalid_in_the_api_and_the_console():
    deep = "[" * 100_000 + "]" * 100_000
    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        body = f'{{"topic": "go", "payload": {deep}}}'.encode()
        refused = await client.post(
            f"/api/workflows/{workflow_id}/signal", content=body, headers=JSON
        )
        assert "nested too deeply" in error_of(refused, 400, ErrorKind.INVALID)["message"]
        page = await client.post(
            f"/workflows/{workflow_id}", data={"action": "signal", "topic": "go", "payload": deep}
        )
        assert page.status_code == 400 and "nested too deeply" in page.text
        assert node.describe(workflow_id)["status"] == "running"
        assert "MessageArrived" not in history_kinds(node, workflow_id)


async def test_api_bodies_are_capped_and_the_console_maps_the_same_kind_alike():
    from roost.admin._api import MAX_BODY  # noqa: PLC0415 - the documented bound

    async with admin_node() as (node, client):
        workflow_id = await start(client, "adm:waiter", "t")
        before = len(node.history(workflow_id))
        payload = "x" * MAX_BODY
        refused = await client.post(
            f"/api/workflows/{workflow_id}/signal", json={"topic": "go", "payload": payload}
        )
        error = error_of(refused, 429, ErrorKind.LIMIT_EXCEEDED)
        assert error["details"]["limit"] == MAX_BODY
        page = await client.post(
            f"/workflows/{workflow_id}",
            data={"action": "signal", "topic": "go", "payload": json.dumps(payload)},
        )
        assert page.status_code == 429 and "LimitExceeded" in page.text
        assert len(node.history(workflow_id)) == before


# -- routes: an id is one segment --------------------------------------------------------------


async def test_ids_with_a_slash_are_one_segment_for_every_workflow_route():
    async with admin_node() as (node, client):
        await start(client, "adm:waiter", "plain", workflow_id="q")
        for odd in ("q/history", "q/result"):
            await start(client, "adm:waiter", odd, workflow_id=odd)
        await start(client, "adm:cancellable", workflow_id="q/cancel")
        enc = {odd: odd.replace("/", "%2F") for odd in ("q/history", "q/result", "q/cancel")}

        described = await client.get(f"/api/workflows/{enc['q/history']}")
        assert described.json()["workflow_id"] == "q/history"
        assert (await client.get(f"/api/workflows/{enc['q/result']}")).json()["status"] == "running"
        history = (await client.get(f"/api/workflows/{enc['q/history']}/history")).json()
        started = next(e for e in history if e["type"] == "Started")
        assert started["args"] == ["q/history"]

        sent = await client.post(
            f"/api/workflows/{enc['q/result']}/signal", json={"topic": "go", "payload": 1}
        )
        assert sent.json() == {"ok": True}
        done = await client.get(f"/api/workflows/{enc['q/result']}/result", params={"wait": "1"})
        assert done.json()["result"] == {"tag": "q/result", "got": 1}
        cancel = await client.post(f"/api/workflows/{enc['q/cancel']}/cancel", json={})
        assert cancel.json() == {"ok": True}
        ended = await client.post(f"/api/workflows/{enc['q/history']}/terminate", json={})
        assert ended.json() == {"ok": True}
        closed = await client.get(f"/api/workflows/{enc['q/history']}/result", params={"wait": "1"})
        assert closed.json()["status"] == "terminated"
        cancelled = await client.get(
            f"/api/workflows/{enc['q/cancel']}/result", params={"wait": "1"}
        )
        assert cancelled.json()["result"].startswith("stopped: ")
        assert "CancelRequested" in history_kinds(node, "q/cancel")
        assert node.describe("q")["status"] == "running"  # never taken for q's
        assert "CancelRequested" not in history_kinds(node, "q")

        unknown = await client.get(f"/api/workflows/{enc['q/history']}/nothing")
        error_of(unknown, 404, ErrorKind.NOT_FOUND)
        wrong_method = await client.post(f"/api/workflows/{enc['q/history']}/history", json={})
        error_of(wrong_method, 404, ErrorKind.NOT_FOUND)


# -- the status filter and the DLQ of an unknown queue -----------------------------------------


async def test_one_status_filter_for_the_api_and_the_console():
    async with admin_node() as (_, client):
        await start(client, "adm:waiter", "t", workflow_id="w")
        quarantined = await client.get("/api/workflows", params={"status": "quarantined"})
        assert quarantined.status_code == 200 and quarantined.json() == []
        running = await client.get("/api/workflows", params={"status": "running"})
        assert [w["workflow_id"] for w in running.json()] == ["w"]
        bogus = await client.get("/api/workflows", params={"status": "bogus"})
        assert "quarantined" in error_of(bogus, 400, ErrorKind.INVALID)["message"]
        page = await client.get("/")
        assert '<option value="quarantined">' in page.text
        assert (await client.get("/", params={"status": "quarantined"})).status_code == 200
        assert (await client.get("/", params={"status": "bogus"})).status_code == 400
        error_of(await client.get("/api/queues/nosuch/dlq"), 404, ErrorKind.NOT_FOUND)


# -- the node stops under an open wait ---------------------------------------------------------


async def test_an_open_wait_answers_unavailable_when_the_node_stops_and_stops_promptly():
    answers: list[httpx.Response] = []
    async with httpx.AsyncClient(timeout=30) as outside, trio.open_nursery() as nursery:
        async with roost.open_node(app, admin="127.0.0.1:0") as node:
            token = json.loads((node.data_dir / "admin.json").read_text())["token"]
            await process.with_options(id="w").spawn(waiter, "x")
            url = f"{node.admin_url}/api/workflows/w/result"

            async def wait() -> None:
                headers = {"Authorization": f"Bearer {token}"}
                answers.append(await outside.get(url, params={"wait": "1"}, headers=headers))

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked(0.05)  # the request is parked
            assert answers == []
            stopping = time.monotonic()
        stopped_in = time.monotonic() - stopping
    assert len(answers) == 1
    error = error_of(answers[0], 503, ErrorKind.UNAVAILABLE)
    assert error["details"] == {"workflow_id": "w"}
    assert stopped_in < 1.0  # the server's graceful stop is bounded, and here immediate


# -- one JSON renderer: the API's history, the CLI's show --json --------------------------------


def strict(text: str):
    def refuse(constant: str):
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


async def test_the_api_history_and_the_cli_show_json_are_the_same_strict_json(tmp_path):
    from click.testing import CliRunner  # noqa: PLC0415

    from roost.cli import main  # noqa: PLC0415

    async with admin_node(data_dir=tmp_path) as (_, client):
        workflow_id = await start(client, "adm:waiter", "t")
        # Python's json reads NaN: the stored payload is a real float('nan').
        body = b'{"topic": "go", "payload": [NaN, Infinity, -Infinity]}'
        sent = await client.post(f"/api/workflows/{workflow_id}/signal", content=body, headers=JSON)
        assert sent.json() == {"ok": True}
        done = await client.get(f"/api/workflows/{workflow_id}/result", params={"wait": "1"})
        assert strict(done.text)["result"] == {"tag": "t", "got": ["nan", "inf", "-inf"]}
        api = strict((await client.get(f"/api/workflows/{workflow_id}/history")).text)
        described = strict((await client.get(f"/api/workflows/{workflow_id}")).text)
        assert described["result"]["got"] == ["nan", "inf", "-inf"]
    shown = CliRunner().invoke(
        main, ["workflow", "show", workflow_id, "--json", "--data-dir", str(tmp_path)]
    )
    assert shown.exit_code == 0, shown.output
    assert strict(shown.output) == api
    arrived = next(e for e in api if e["type"] == "MessageArrived")
    assert "nan" in json.dumps(arrived)
