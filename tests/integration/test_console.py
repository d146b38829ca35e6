"""The web console over plain HTTP: every page, every button, and hostile values.

A real client (httpx) against the admin server on 127.0.0.1. The tests run on a MockClock
that does not jump (``mock_clock``): sockets work as ever, time stands still, and what a
test waits for (a workflow reaching a state) is read once the node has done all it can
(``until``), with nothing polled on a clock.
"""

import html
import re
import sys
from pathlib import Path

import trio
import trio.testing

import roost
from roost import process

sys.path.insert(0, str(Path(__file__).parent))

import console_app
from console_app import app
from console_fixture import open_console_node

HOST = "cons:workflows"


async def until(check, what: str) -> None:
    """Let the node take every step it can, then require ``check`` to hold.

    The tests run on trio's MockClock without autojump (the ``mock_clock`` fixture): time
    stands still, so timers, retries and backoffs wait, and the node commits inline (no
    writer thread). Once every task is blocked, the node has done all it can without time
    passing or an outside event: the state ``check`` reads is final, with nothing polled.
    """
    await trio.testing.wait_all_tasks_blocked()
    assert check(), f"not {what} once the node had done all it could"


def blocked_on_select(node, workflow_id: str) -> bool:
    history = node.history(workflow_id)
    return any(type(e).__name__ == "StartTimer" for e in history)


def links(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', page)]


async def start(entry, *args, wid: str | None = None) -> roost.Pid:
    spawner = process.with_options(id=wid) if wid is not None else process
    return await spawner.spawn(entry, *args)


# -- the token ---------------------------------------------------------------------------------


async def test_every_page_and_button_needs_the_token_and_the_token_link_sets_a_cookie(mock_clock):
    async with open_console_node(app) as c:
        pid = await start(console_app.waiter, "o-1", wid="guarded")
        await until(lambda: blocked_on_select(c.node, "guarded"), "waiting")
        async with c.client(auth=False) as anon:
            for path in [
                "/",
                "/workflows/guarded",
                "/queues",
                "/queues/jobs",
                "/cron",
                "/processes",
            ]:
                answer = await anon.get(path)
                assert answer.status_code == 401, path
                assert answer.json()["error"]["message"], path
            refused = await anon.post("/workflows/guarded", data={"action": "terminate"})
            assert refused.status_code == 401
            assert c.node.describe(pid.id)["status"] == "running"  # nothing changed
            wrong = await anon.get("/", params={"token": "not-it"})
            assert wrong.status_code == 401
            assert "roost_token" not in anon.cookies

            first = await anon.get("/", params={"token": c.token}, follow_redirects=True)
            assert first.status_code == 200
            assert 'href="/workflows/guarded"' in first.text
            assert "roost_token" in anon.cookies  # set once; later pages need no token
            cookie = next(h for h in first.history[0].headers.get_list("set-cookie"))
            assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
            page = await anon.get("/workflows/guarded")
            assert page.status_code == 200
            assert "StartTimer" in page.text


# -- workflows ---------------------------------------------------------------------------------


async def test_the_list_filters_by_status_searches_and_links_each_workflow(mock_clock):
    async with open_console_node(app) as c:
        await start(console_app.waiter, "o-1", wid="wait-1")
        done = await start(console_app.returns, 7, wid="done-1")
        await until(lambda: c.node.describe(done.id)["status"] == "completed", "completed")
        await until(lambda: blocked_on_select(c.node, "wait-1"), "waiting")
        async with c.client() as http:
            everything = await http.get("/")
            assert everything.status_code == 200
            assert {"/workflows/wait-1", "/workflows/done-1"} <= set(links(everything.text))
            assert "cons:waiter" in everything.text and "cons:returns" in everything.text

            completed = await http.get("/", params={"status": "completed"})
            assert "/workflows/done-1" in links(completed.text)
            assert "/workflows/wait-1" not in links(completed.text)

            typed = await http.get("/", params={"q": "workflow_type = 'cons:waiter'"})
            assert "/workflows/wait-1" in links(typed.text)
            assert "/workflows/done-1" not in links(typed.text)

            both = await http.get("/", params={"q": "workflow_id != 'x'", "status": "running"})
            assert "/workflows/wait-1" in links(both.text)
            assert "/workflows/done-1" not in links(both.text)

            bad = await http.get("/", params={"q": "status == 'running' or 1"})
            assert bad.status_code == 400
            assert "Workflows" in bad.text and 'class="flash err"' in bad.text
            bad_status = await http.get("/", params={"status": "sleepy"})
            assert bad_status.status_code == 400
            assert "status must be one of" in bad_status.text


async def test_a_workflow_page_shows_status_input_timeline_timers_and_children(mock_clock):
    async with open_console_node(app) as c:
        await start(console_app.parent, {"sku": "A-1"}, wid="fam")
        await until(lambda: blocked_on_select(c.node, "fam.1"), "child waiting")
        async with c.client() as http:
            page = (await http.get("/workflows/fam")).text
            assert 'id="wf-status">running<' in page
            assert "cons:parent" in page
            assert "&#34;sku&#34;: &#34;A-1&#34;" in page  # the input
            for kind in ["Started", "StartChild", "StartTimer"]:
                assert f'<span class="kind">{kind}</span>' in page, kind
            assert "Activation 1" in page
            timers = page.split('id="pending-timers"')[1].split("</table>")[0]
            assert "7200.0 s" in timers and "in 2h 0m" in timers  # the clock stands still
            kids = page.split('id="children"')[1].split("</table>")[0]
            assert 'href="/workflows/fam.1"' in kids and "cons:waiter" in kids

            child = (await http.get("/workflows/fam.1")).text
            assert "ScheduleActivity" in child and "ActivityResolved" in child
            assert "cons:charge" in child  # the resolved activity is named
            assert 'id="signal"' in child and 'id="cancel"' in child


async def test_a_closed_workflow_shows_its_result_or_error_and_no_buttons(mock_clock):
    async with open_console_node(app) as c:
        await start(console_app.returns, {"total": 42}, wid="ok")
        await start(console_app.raises, "card declined <i>twice</i>", wid="bad")
        await until(lambda: c.node.describe("bad")["status"] == "failed", "failed")
        await until(lambda: c.node.describe("ok")["status"] == "completed", "completed")
        async with c.client() as http:
            ok = (await http.get("/workflows/ok")).text
            result = ok.split('id="wf-result">')[1].split("</pre>")[0]
            assert "&#34;total&#34;: 42" in result
            assert 'id="cancel"' not in ok
            bad = (await http.get("/workflows/bad")).text
            error = bad.split('id="wf-error">')[1].split("</pre>")[0]
            assert "card declined &lt;i&gt;twice&lt;/i&gt;" in error
            assert "<i>twice" not in bad


async def test_a_task_failure_and_a_pending_activity_are_shown(mock_clock):
    async with open_console_node(app) as c:
        await start(console_app.task_fails, wid="broken")
        await start(console_app.retries, wid="retrying")
        await until(lambda: c.node.describe("broken")["task_failure"] is not None, "task failure")
        await until(lambda: c.node.describe("retrying")["pending_activities"], "retrying")
        async with c.client() as http:
            broken = (await http.get("/workflows/broken")).text
            failure = broken.split('id="task-failure"')[1].split("</section>")[0]
            assert "sys.exit()" in failure
            assert "&lt;script&gt;alert" in failure and "<script>alert" not in broken
            listed = (await http.get("/")).text
            assert "task failing" in listed

            retrying = (await http.get("/workflows/retrying")).text
            pending = retrying.split('id="pending-activities"')[1].split("</table>")[0]
            assert "cons:flaky" in pending
            assert "the payment service said &lt;b&gt;no&lt;/b&gt;" in pending


async def test_the_signal_cancel_and_terminate_buttons_change_the_workflow(mock_clock):
    async with open_console_node(app) as c:
        for wid in ["sig", "can", "term"]:
            await start(console_app.waiter, wid, wid=wid)
        for wid in ["sig", "can", "term"]:
            await until(lambda wid=wid: blocked_on_select(c.node, wid), "waiting")
        async with c.client() as http:
            length = c.node.describe("sig")["history_length"]
            bad = await http.post(
                "/workflows/sig", data={"action": "signal", "topic": "go", "payload": "{nope"}
            )
            assert bad.status_code == 400 and "is not JSON" in bad.text
            bad_topic = await http.post("/workflows/sig", data={"action": "signal", "topic": ""})
            assert bad_topic.status_code == 400
            assert c.node.describe("sig")["history_length"] == length  # nothing stored

            sent = await http.post(
                "/workflows/sig",
                data={"action": "signal", "topic": "go", "payload": '{"by": "ann"}'},
            )
            assert sent.status_code == 303
            assert sent.headers["location"] == "/workflows/sig?done=signal&n=1"
            await until(lambda: c.node.describe("sig")["status"] == "completed", "signalled")
            assert c.node.describe("sig")["result"] == {"by": "ann"}
            shown = (await http.get(sent.headers["location"])).text
            assert "Signal sent" in shown and "MessageArrived" in shown

            cancelled = await http.post(
                "/workflows/can", data={"action": "cancel", "reason": "no stock"}
            )
            assert cancelled.status_code == 303
            await until(lambda: c.node.describe("can")["status"] == "canceled", "canceled")
            assert c.node.describe("can")["result"] == {"stopped": True}  # its code saw it
            assert any(type(e).__name__ == "CancelRequested" for e in c.node.history("can"))

            ended = await http.post("/workflows/term", data={"action": "terminate"})
            assert ended.status_code == 303
            await until(lambda: c.node.describe("term")["status"] == "terminated", "terminated")

            again = await http.post("/workflows/term", data={"action": "cancel"})
            assert again.status_code == 409 and "only a running workflow" in again.text
            unknown = await http.post("/workflows/nobody", data={"action": "cancel"})
            assert unknown.status_code == 404
            assert (await http.get("/workflows/nobody")).status_code == 404
            odd = await http.post("/workflows/sig", data={"action": "explode"})
            assert odd.status_code == 400 and "unknown action" in odd.text
            not_form = await http.post("/workflows/sig", json={"action": "cancel"})
            assert not_form.status_code == 400


# -- queues, cron, processes -------------------------------------------------------------------


async def test_queues_show_depth_in_flight_and_dead_letters_with_redrive_and_discard(mock_clock):
    console_app.FAIL_JOBS[0] = True
    console_app.HANDLED.clear()
    async with open_console_node(app) as c:
        receipts = [await roost.enqueue("jobs", console_app.job, n) for n in range(4)]
        await until(lambda: len(c.node.dlq.list("jobs")) == 4, "dead")
        async with c.client() as http:
            queues = (await http.get("/queues")).text
            row = next(r for r in queues.split("<tr>") if 'href="/queues/jobs"' in r)
            assert re.findall(r'class="num">(?:<a [^>]*>)?(\d+)', row) == ["0", "0", "4"]
            assert 'href="/queues/idle"' in queues

            letters = (await http.get("/queues/jobs")).text
            for receipt in receipts:
                assert receipt in letters
            assert "job failed on 0" in letters and 'id="redrive-all"' in letters

            console_app.FAIL_JOBS[0] = False
            redriven = await http.post(
                "/queues/jobs", data={"action": "redrive", "receipt_id": receipts[0]}
            )
            assert redriven.status_code == 303
            assert redriven.headers["location"] == "/queues/jobs?done=redrive&n=1"
            await until(lambda: console_app.HANDLED == [0], "redriven")
            discarded = await http.post(
                "/queues/jobs", data={"action": "discard", "receipt_id": receipts[1]}
            )
            assert discarded.status_code == 303
            assert [d.receipt_id for d in c.node.dlq.list("jobs")] == receipts[2:]
            gone = await http.post(
                "/queues/jobs", data={"action": "discard", "receipt_id": receipts[1]}
            )
            assert gone.status_code == 404

            everything = await http.post("/queues/jobs", data={"action": "redrive_all"})
            assert everything.headers["location"] == "/queues/jobs?done=redrive_all&n=2"
            await until(lambda: sorted(console_app.HANDLED) == [0, 2, 3], "all redriven")
            assert c.node.dlq.list("jobs") == []
            assert (
                "Dead letters redriven. (2)"
                in (await http.get(everything.headers["location"])).text
            )
            assert (await http.get("/queues/nowhere")).status_code == 404
            assert (await http.get("/queues/jobs", params={"limit": "-1"})).status_code == 400


async def test_cron_shows_each_trigger_with_its_next_fire_time(mock_clock):
    async with open_console_node(app) as c:
        async with c.client() as http:
            page = (await http.get("/cron")).text
        row = page.split('id="cron"')[1].split("</table>")[0]
        now = c.node._node.now()
        assert "0 0 1 1 *" in row and "cons:charge" in row
        assert f"{now.year + 1}-01-01 00:00:00 UTC" in row


async def test_processes_show_the_supervision_tree_links_and_names(mock_clock):
    async with open_console_node(app) as c:
        sup = await process.spawn("cons:tree")
        process.registry.register("the-tree", sup)
        async with c.client() as http:
            page = (await http.get("/processes")).text
        assert f'id="process-count">{c.node.process_count()}<' in page
        depth, seen = 0, {}
        for token in re.findall(r'<ul class="tree">|</ul>|child \w+|<b>cons:tree</b>', page):
            if token.startswith("<ul"):
                depth += 1
            elif token == "</ul>":
                depth -= 1
            else:
                seen[token] = depth
        assert seen == {"<b>cons:tree</b>": 1, "child w1": 2, "child inner": 2, "child w2": 3}
        assert "name the-tree" in page
        assert f"links {sup}" in page  # the supervisor's children are linked to it


# -- hostile values ----------------------------------------------------------------------------

ODD_ID = 'odd/<b>x</b> "q" ?#%2F&amp;..'
SCRIPT = "<script>alert('pwned')</script>"


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


async def test_hostile_values_and_ids_neither_break_a_page_nor_inject_markup(mock_clock):
    console_app.FAIL_JOBS[0] = True
    hostile = {
        "html": SCRIPT,
        "attr": '" onmouseover="alert(1)',
        "huge": "x" * 500_000,
        "deep": nested(200),
        "wide": {f"k{i}": i for i in range(5000)},
        "bytes": b"\x00\xff<script>",
    }
    async with open_console_node(app) as c:
        await start(console_app.returns, hostile, wid=ODD_ID)
        await start(console_app.returns, SCRIPT, wid="..")
        await start(console_app.waiter, "w", wid=SCRIPT)
        await roost.enqueue("jobs", console_app.job, hostile)
        await until(lambda: c.node.describe(ODD_ID)["status"] == "completed", "done")
        await until(lambda: blocked_on_select(c.node, SCRIPT), "waiting")
        await until(lambda: len(c.node.dlq.list("jobs")) == 1, "dead")
        async with c.client() as http:
            listed = await http.get("/")
            pages = {"/": listed}
            hrefs = [h for h in links(listed.text) if h.startswith(("/workflows/", "/workflow?"))]
            assert len(hrefs) == 3
            for href in hrefs:
                pages[href] = await http.get(href)
            pages["/queues/jobs"] = await http.get("/queues/jobs")
            for path, answer in pages.items():
                assert answer.status_code == 200, path
                text = answer.text
                assert "<script>alert" not in text, path
                assert 'onmouseover="alert' not in text, path
                assert len(text) < 200_000, (path, len(text))  # huge values are cut
                assert answer.headers["content-security-policy"].startswith("default-src 'none'")
            titles = {
                re.search(r'<h1 class="id">(.*?)</h1>', a.text, re.DOTALL).group(1)
                for a in pages.values()
                if '<h1 class="id">' in a.text
            }
            assert html.escape(ODD_ID, quote=False) in {
                t.replace("&#34;", '"').replace("&#39;", "'") for t in titles
            }
            odd = pages[next(h for h in hrefs if "odd" in h)].text
            assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in odd
            assert "…" in odd  # the huge, deep and wide parts are cut, not dropped silently
            dots = pages["/workflow?id=.."].text
            assert "&lt;script&gt;" in dots
            scripted = pages[next(h for h in hrefs if "script" in h)]
            assert 'id="cancel"' in scripted.text

            # The odd id's buttons post to its own page and work.
            url = next(h for h in hrefs if "script" in h)
            ended = await http.post(url, data={"action": "terminate"})
            assert ended.status_code == 303 and ended.headers["location"].startswith(url)
            await until(lambda: c.node.describe(SCRIPT)["status"] == "terminated", "ended")
