"""The console as a debugger: history table, activities, parent links, closed runs, queue
messages, cron outcomes and "trigger now", process pages with stop.

A real client against the admin server on 127.0.0.1, on trio's MockClock without autojump
(as in test_console.py): time moves only when a test jumps it.
"""

import datetime as dt
import html
import os
import re
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import trio
import trio.testing

import roost
from roost import channel, funcs, process

sys.path.insert(0, str(Path(__file__).parent))

from console_fixture import open_console_node

app = roost.App("dbg")
ATTEMPTS: list[int] = []
GATE: list[trio.Event] = []


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="10s", maximum_attempts=3))
async def wobbly(order: Any) -> dict:
    ATTEMPTS.append(len(ATTEMPTS) + 1)
    if len(ATTEMPTS) == 1:
        raise roost.Error("the <b>bank</b> is napping", kind=roost.ErrorKind.UNAVAILABLE)
    return {"paid": order}


@app.workflow
async def pay(order: Any) -> Any:
    paid = await funcs.call(wobbly, order)
    await roost.sleep("30s")
    return paid


FLAKY: list[int] = []


@app.activity(
    retry_policy=roost.RetryPolicy(
        initial_interval="10s", backoff_coefficient=1.0, maximum_attempts=5
    )
)
async def flaky(order: Any) -> str:
    FLAKY.append(len(FLAKY) + 1)
    if len(FLAKY) == 1:
        raise roost.Error("the bank is napping", kind=roost.ErrorKind.UNAVAILABLE)
    if len(FLAKY) == 2:
        await roost.sleep("3s")  # the second attempt runs a while before it fails
        raise ValueError("card reader jammed")
    return f"paid {order}"


@app.workflow
async def pay_flaky(order: Any) -> Any:
    return await funcs.call(flaky, order)


@app.activity(retry_policy=roost.RetryPolicy(initial_interval="1s", backoff_coefficient=1.0))
async def hopeless() -> None:
    raise roost.Error("still down", kind=roost.ErrorKind.UNAVAILABLE)


@app.workflow
async def keeps_failing() -> None:
    await funcs.call(hopeless)


@app.workflow
async def ship(order: Any) -> Any:
    """Pay (a flaky activity), start a child, sleep, then take an approval."""
    approvals = process.listen("approve")
    paid = await funcs.call(flaky, order)
    await process.spawn(child, order)
    await roost.sleep("30s")
    return [paid, await approvals.receive()]


@app.workflow
async def child(order: Any) -> None:
    await channel.select(process.listen("go"), roost.after("1h"))


@app.workflow
async def parent(order: Any) -> None:
    await process.spawn(child, order)
    await roost.sleep("2h")


@app.workflow
async def broken() -> None:
    raise SystemExit("workflow code called sys.exit()")


@app.activity
async def slow_job(payload: Any) -> None:
    await GATE[0].wait()


@app.activity
async def nightly(tick: roost.CronTick) -> None:
    raise ValueError(f"nightly run of {tick.expression} fell over")


@app.process
async def holder() -> None:
    await roost.sleep("1h")  # never reads its mailbox


@app.process
async def watcher(target: roost.Pid) -> None:
    process.link(target)
    process.monitor(target)
    await roost.sleep("1h")


app.queue("slow", concurrency=1, max_retries=0)
app.cron("0 3 * * *", nightly)


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


def section(page: str, element_id: str, end: str = "</table>") -> str:
    return page.split(f'id="{element_id}"')[1].split(end, maxsplit=1)[0]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


async def test_the_history_is_a_table_with_times_and_the_activities_show_each_attempt(
    mock_clock,
):
    ATTEMPTS.clear()
    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="pay-1").spawn(pay, {"sku": "A-1"})
        await settle()
        page = (await http.get("/workflows/pay-1")).text
        # The first attempt failed: the activity is running, attempt 2 waits 10 s.
        activities = section(page, "activities")
        assert "dbg:wobbly" in activities and "attempt 2" in activities
        assert "the &lt;b&gt;bank&lt;/b&gt; is napping" in activities
        assert "<b>bank" not in page
        mock_clock.jump(10)
        await settle()
        mock_clock.jump(30)
        await settle()
        assert c.node.describe("pay-1")["status"] == "completed"
        page = (await http.get("/workflows/pay-1")).text
        table = section(page, "timeline")
        rows = re.findall(r"<tr class=\"(task|ev ev-\w+)\">(.*?)</tr>", table, re.DOTALL)
        kinds = [re.search(r'class="kind">(\w+)<', r).group(1) for c_, r in rows if c_ != "task"]
        assert kinds[:2] == ["Started", "ScheduleActivity"]
        assert kinds[-1] == "Complete" and "ActivityResolved" in kinds and "TimerFired" in kinds
        tasks = [text_of(r) for c_, r in rows if c_ == "task"]
        assert tasks[0].split()[:2] == ["Activation", "1"]
        # The resolution came 10 s after the start, the timer 30 s after that.
        assert any("+10 s" in t for t in tasks) and any("+30 s" in t for t in tasks)
        resolved = next(r for c_, r in rows if "ActivityResolved" in r)
        assert "#1 dbg:wobbly returned" in text_of(resolved)
        assert "<details>" in resolved and 'class="value fields"' in resolved  # expandable
        activities = text_of(section(page, "activities"))
        assert "completed" in activities and "+10 s" in activities
        # Closed: shown as closed, with no pending sections and no buttons.
        assert 'id="closed-note"' in page and 'id="pending-timers"' not in page
        assert 'id="cancel"' not in page
        started = section(page, "wf-input", "</pre>")
        assert "&#34;sku&#34;: &#34;A-1&#34;" in started  # from the start record


def attempt_items(page: str, seq: int) -> list[str]:
    listed = section(page, f"attempts-{seq}", "</ol>")
    items = re.findall(r"<li[^>]*>(.*?)</li>", listed, re.DOTALL)
    return [" ".join(text_of(li).split()) for li in items]


async def test_a_completed_activity_shows_every_attempt_with_its_error_and_times(mock_clock):
    FLAKY.clear()
    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="flaky-1").spawn(pay_flaky, "o-1")
        await settle()
        t0 = c.node._node.now()
        mock_clock.jump(10)  # attempt 2 starts, runs 3 s, fails
        await settle()
        mock_clock.jump(3)
        await settle()
        mock_clock.jump(10)  # attempt 3 succeeds
        await settle()
        assert c.node.describe("flaky-1")["status"] == "completed"
        page = (await http.get("/workflows/flaky-1")).text
        first, second, third = attempt_items(page, 1)
        assert first.split()[0] == "failed" and "Unavailable the bank is napping" in first
        stamp = "%Y-%m-%d %H:%M:%S"
        assert (t0.strftime(stamp)) in first
        assert "failed" in second and "card reader jammed" in second and "+3 s" in second
        assert (t0 + dt.timedelta(seconds=10)).strftime(stamp) in second
        assert (t0 + dt.timedelta(seconds=13)).strftime(stamp) in second
        assert third.split()[0] == "completed"
        assert (t0 + dt.timedelta(seconds=23)).strftime(stamp) in third
        assert 'value="3"' in section(page, "attempts-1", "</ol>")  # numbered from the store
        # Nothing of the attempts is in the history the workflow replays.
        kinds = [type(e).__name__ for e in c.node.history("flaky-1")]
        assert kinds.count("ActivityResolved") == 1 and "AttemptRecord" not in kinds


async def test_the_store_keeps_the_latest_failed_attempts_of_an_activity(mock_clock):
    from roost.workflow._local._records import KEPT_ATTEMPTS  # noqa: PLC0415

    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="hopeless").spawn(keeps_failing)
        await settle()
        for _ in range(KEPT_ATTEMPTS + 5):
            mock_clock.jump(1)
            await settle()
        kept = c.node._node.workflows.activity_attempts("hopeless")
        numbers = [a["attempt"] for a in kept]
        assert numbers == list(range(7, KEPT_ATTEMPTS + 7))
        page = (await http.get("/workflows/hopeless")).text
        items = attempt_items(page, 1)
        assert len(items) == KEPT_ATTEMPTS + 1 and items[-1].split()[0] == "running"
        assert all("Unavailable still down" in item for item in items[:-1])


def chart_rows(page: str) -> list[dict[str, Any]]:
    found = []
    for kind, row in re.findall(
        r'<tr class="bar-row k-\w+" data-kind="(\w+)">(.*?)</tr>',
        section(page, "timeline-chart"),
        re.DOTALL,
    ):
        rect = re.search(r'<rect class="([^"]*)" x="([\d.]+)" y="1" width="([\d.]+)"', row)
        assert rect is not None, row
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        found.append(
            {
                "kind": kind,
                "label": " ".join(text_of(cells[0]).split()[1:]),
                "class": rect.group(1),
                "x": float(rect.group(2)),
                "width": float(rect.group(3)),
                "took": " ".join(text_of(cells[2]).split()),
            }
        )
    return found


async def test_the_timeline_draws_each_activity_timer_child_and_message_on_one_axis(
    mock_clock,
):
    ATTEMPTS.clear()
    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="pay-t").spawn(pay, {"sku": "T-1"})
        await process.with_options(id="fam-t").spawn(parent, {"n": 3})
        await settle()
        mock_clock.jump(10)  # the activity's second attempt succeeds; the 30 s timer starts
        await settle()
        process.send(roost.Pid.parse("{dbg:workflows|fam-t.1}"), "go", "now")
        await settle()
        mock_clock.jump(30)
        await settle()
        assert c.node.describe("pay-t")["status"] == "completed"
        # A closed run: the axis is its 40 s, the activity its first quarter, the timer the rest.
        rows = chart_rows((await http.get("/workflows/pay-t")).text)
        assert [(r["kind"], r["label"]) for r in rows] == [
            ("activity", "#1 dbg:wobbly"),
            ("timer", "#2 sleep 30 s"),
        ]
        activity, timer = rows
        assert (activity["x"], activity["width"]) == (0.0, 250.0)
        assert (timer["x"], timer["width"]) == (250.0, 750.0)
        assert "b-completed" in activity["class"] and "completed +10 s" in activity["took"]
        assert "completed +30 s" in timer["took"]
        # An open run: its child ended (the message let it finish), its 2 h timer runs on.
        family = chart_rows((await http.get("/workflows/fam-t")).text)
        kinds = {r["kind"]: r for r in family}
        assert set(kinds) == {"child", "timer"}
        assert kinds["child"]["label"] == "fam-t.1 (dbg:child)"
        assert "completed +10 s" in kinds["child"]["took"]
        assert "b-open" in kinds["timer"]["class"] and "running" in kinds["timer"]["took"]
        assert kinds["child"]["width"] == 250.0 and kinds["timer"]["width"] == 1000.0
        kid = chart_rows((await http.get("/workflows/fam-t.1")).text)
        assert [r["kind"] for r in kid] == ["timer", "message"]
        assert kid[1]["label"] == "message go" and kid[1]["x"] == 0.0
        assert kid[1]["width"] == 1000.0  # the whole run: it waited from its start


async def test_children_and_parent_link_to_each_other(mock_clock):
    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="fam").spawn(parent, {"n": 1})
        await settle()
        family = (await http.get("/workflows/fam")).text
        assert 'href="/workflows/fam.1"' in section(family, "children")
        kid = (await http.get("/workflows/fam.1")).text
        assert 'href="/workflows/fam"' in section(kid, "wf-parent", "</dd>")


async def test_a_terminated_run_shows_no_task_failure_and_no_failing_badge(mock_clock):
    async with open_console_node(app) as c, c.client() as http:
        await process.with_options(id="oops").spawn(broken)
        await settle()
        assert c.node.describe("oops")["task_failure"] is not None
        running = (await http.get("/workflows/oops")).text
        assert 'id="task-failure"' in running
        assert "task failing" in (await http.get("/")).text
        process.terminate(roost.Pid.parse("{dbg:workflows|oops}"))
        await settle()
        assert c.node.describe("oops")["status"] == "terminated"
        closed = (await http.get("/workflows/oops")).text
        assert 'id="task-failure"' not in closed and "retried with backoff" not in closed
        assert 'id="closed-note"' in closed and "terminated" in section(
            closed, "closed-note", "</p>"
        )
        assert "task failing" not in (await http.get("/")).text


async def test_a_queue_page_lists_waiting_and_in_flight_messages(mock_clock):
    GATE[:] = [trio.Event()]
    async with open_console_node(app) as c, c.client() as http:
        receipts = [await roost.enqueue("slow", slow_job, {"n": n}) for n in range(3)]
        await settle()
        page = (await http.get("/queues/slow")).text
        in_flight, waiting = section(page, "in-flight"), section(page, "waiting")
        assert receipts[0] in in_flight and receipts[0] not in waiting
        assert receipts[1] in waiting and receipts[2] in waiting
        assert "&#34;n&#34;: 2" in waiting
        GATE[0].set()
        await settle()
        page = (await http.get("/queues/slow")).text
        assert "None." in section(page, "in-flight") and "None." in section(page, "waiting")


async def test_cron_shows_the_last_fire_and_outcome_and_triggers_now(mock_clock):
    async with open_console_node(app) as c, c.client() as http:
        before = section((await http.get("/cron")).text, "cron")
        assert "never" in text_of(before) and "no run recorded" in before
        started = await http.post(
            "/cron", data={"action": "trigger", "trigger": "dbg:nightly @ 0 3 * * *"}
        )
        assert started.status_code == 303, started.text
        assert started.headers["location"] == "/cron?done=trigger&n=1"
        await settle()
        after = (await http.get(started.headers["location"])).text
        assert "Cron trigger started." in after
        row = section(after, "cron")
        assert "failed" in row and "fell over" in row and "by hand" in row
        assert "never" in text_of(row.split('class="last-fire"')[1].split("</td>")[0])
        unknown = await http.post("/cron", data={"action": "trigger", "trigger": "nope"})
        assert unknown.status_code == 404
        # The schedule's own fire: the stored last fire time and its outcome.
        now = c.node._node.now()
        due = now.replace(hour=3, minute=0, second=0, microsecond=0)
        if due <= now:
            due += dt.timedelta(days=1)
        mock_clock.jump((due - now).total_seconds())
        await settle()
        fired = section((await http.get("/cron")).text, "cron")
        last = text_of(fired.split('class="last-fire"')[1].split("</td>")[0])
        assert due.strftime("%Y-%m-%d 03:00:00 UTC") in last
        latest = fired.split('class="outcome">')[1].split('<details class="recent">')[0]
        assert "by hand" not in latest and "failed" in latest
        assert "by hand" in fired.split('<details class="recent">')[1]  # the run before


async def test_cron_outcomes_are_stored_and_shown_after_a_restart(mock_clock, tmp_path):
    from roost.queues._cron import KEPT_RUNS, RUNS_TABLE  # noqa: PLC0415
    from roost.storage import key  # noqa: PLC0415

    trigger = "dbg:nightly @ 0 3 * * *"
    async with open_console_node(app, data_dir=tmp_path) as c, c.client() as http:
        for _ in range(KEPT_RUNS + 2):
            started = await http.post("/cron", data={"action": "trigger", "trigger": trigger})
            assert started.status_code == 303
            await settle()
    async with open_console_node(app, data_dir=tmp_path) as c, c.client() as http:
        row = section((await http.get("/cron")).text, "cron")
        cell = row.split('class="outcome">')[1].split("</td>")[0]
        latest = " ".join(text_of(cell.split('<details class="recent">')[0]).split())
        assert latest.startswith("failed") and "by hand" in latest and "fell over" in latest
        runs = cell.split('<details class="recent">')[1]
        assert f"last {KEPT_RUNS} runs" in runs and runs.count("<li>") == KEPT_RUNS
        with c.node._node.store.read() as txn:
            kept = [k for k, _ in txn.prefix(RUNS_TABLE, key(trigger))]
        assert kept == [key(trigger, n) for n in range(3, KEPT_RUNS + 3)]  # the latest only


async def test_a_process_page_shows_its_mailbox_links_and_monitors_and_stops_it(mock_clock):
    async with open_console_node(app) as c, c.client() as http:
        target = await process.spawn(holder)
        other = await process.spawn(watcher, target)
        for n in range(3):
            process.send(target, "note", n)
        await settle()
        tree = (await http.get("/processes")).text
        target_url = "/processes/" + re.sub(
            r"[{|}:]", lambda m: "%" + format(ord(m.group()), "02X"), str(target)
        )
        assert f'href="{target_url}"' in tree
        page = (await http.get(target_url)).text
        assert 'id="proc-mailbox">3<' in page
        assert str(other) in text_of(section(page, "proc-links", "</dd>"))
        assert str(other) in text_of(section(page, "proc-monitored-by", "</dd>"))
        watcher_page = (await http.get(f"/processes/{other}")).text
        assert str(target) in text_of(section(watcher_page, "proc-monitoring", "</dd>"))
        stopped = await http.post(target_url, data={"action": "terminate"})
        assert stopped.status_code == 303
        assert stopped.headers["location"] == "/processes?done=process_terminate&n=1"
        await settle()
        assert c.node.process_count() < 4  # the target is gone, and the linked watcher with it
        assert (await http.get(target_url)).status_code == 404
        node_pid = await http.get(f"/processes/{process.pid()}")
        assert node_pid.status_code == 200 and 'id="proc-terminate"' not in node_pid.text
        refused = await http.post(f"/processes/{process.pid()}", data={"action": "terminate"})
        assert refused.status_code == 409
        assert (await http.get("/processes/not-a-pid")).status_code == 400


# -- in a real browser -------------------------------------------------------------------------


def browse(url: str, token: str, target: str, shots: Path) -> dict[str, Any]:
    """A session in headless Chromium (a worker thread); returns what it saw."""
    from browser import (  # noqa: PLC0415 - only the browser tests need it
        chromium,
        errors,
        find,
        goto,
        screenshot,
        wait_for,
    )

    seen: dict[str, Any] = {}
    with chromium(1280, 900) as page:
        # No cookie: the login page, then the token typed into it.
        seen["login_status"] = goto(page, f"{url}/workflows/pay-2")
        screenshot(page, shots / "console-login.png")
        seen["login_errors"] = errors(page)  # the 401 of the login page itself, and only it
        find(page, "#token").send_keys(token)
        find(page, "button[type=submit]").click()
        wait_for(page, "#timeline")
        seen["after_login"] = page.current_url
        # Expand one history row: its whole record shows.
        row = find(page, "#timeline tr.ev-ActivityResolved")
        seen["collapsed"] = row.find_element("css selector", "pre").is_displayed()
        row.find_element("css selector", "summary").click()
        seen["expanded"] = row.find_element("css selector", "pre").text
        screenshot(page, shots / "console-history.png", full_page=True)
        # The timeline of a run with an activity, a child, a timer and a message.
        goto(page, f"{url}/workflows/ship-1")
        chart = wait_for(page, "#timeline-chart")
        seen["chart_rows"] = [
            r.get_attribute("data-kind") for r in chart.find_elements("css selector", "tr.bar-row")
        ]
        chart.find_element("xpath", "./ancestor::section").screenshot(
            str(shots / "console-timeline.png")
        )
        # The child's parent is a link.
        goto(page, f"{url}/workflows/fam2.1")
        find(page, "#wf-parent a").click()
        wait_for(page, "#children")
        seen["parent_url"] = page.current_url
        # Trigger a cron run by hand; the live refresh brings its outcome.
        goto(page, f"{url}/cron")
        find(page, "button.trigger-now").click()
        seen["cron_outcome"] = wait_for(page, "#cron .outcome .s-failed")
        seen["cron_outcome"] = find(page, "#cron .outcome").text
        # A process page, and its stop button.
        goto(page, f"{url}/processes")
        find(page, f"a[href='/processes/{urllib.parse.quote(target, safe='')}']").click()
        wait_for(page, "#process")
        seen["mailbox"] = find(page, "#proc-mailbox").text
        screenshot(page, shots / "console-process.png", full_page=True)
        find(page, "#proc-terminate").click()
        seen["stopped"] = wait_for(page, ".flash.ok").text
        seen["errors"] = errors(page)
    return seen


async def test_debugging_in_headless_chromium(tmp_path, mock_clock):
    from browser import need_chromium  # noqa: PLC0415

    need_chromium()
    shots = Path(os.environ.get("ROOST_CONSOLE_SCREENSHOTS") or tmp_path)
    await trio.Path(shots).mkdir(parents=True, exist_ok=True)
    ATTEMPTS.clear()
    async with open_console_node(app) as c:
        await process.with_options(id="pay-2").spawn(pay, {"sku": "B-7", "qty": 2})
        await process.with_options(id="fam2").spawn(parent, {"n": 2})
        FLAKY.clear()
        await process.with_options(id="ship-1").spawn(ship, {"sku": "C-3"})
        target = await process.spawn(holder)
        process.send(target, "note", "unread")
        await settle()
        mock_clock.jump(10)  # the second attempt of each activity starts; wobbly's succeeds
        await settle()
        mock_clock.jump(3)  # flaky's second attempt fails after 3 s
        await settle()
        mock_clock.jump(10)  # its third succeeds: ship-1 starts its child and a 30 s timer
        await settle()
        kid = next(
            e.workflow_id for e in c.node.history("ship-1") if hasattr(e, "parent_close_policy")
        )
        mock_clock.jump(5)
        await settle()
        process.send(roost.Pid.parse(f"{{dbg:workflows|{kid}}}"), "go", "now")
        await settle()
        mock_clock.jump(10)
        await settle()
        process.send(roost.Pid.parse("{dbg:workflows|ship-1}"), "approve", {"by": "ann"})
        await settle()
        mock_clock.jump(15)  # the timer fires; ship-1 takes the approval and completes
        await settle()
        seen = await trio.to_thread.run_sync(browse, c.url, c.token, str(target), shots)
        assert c.node.process_count() == 1 + sum(1 for p in c.node._node.procs if p == target)
    assert seen["login_status"] == 401
    assert seen["after_login"] == f"{c.url}/workflows/pay-2"
    assert seen["collapsed"] is False
    assert '"value"' in seen["expanded"] and '"paid"' in seen["expanded"]
    assert seen["parent_url"] == f"{c.url}/workflows/fam2"
    assert seen["chart_rows"] == ["activity", "child", "timer", "message"]
    assert "failed" in seen["cron_outcome"] and "by hand" in seen["cron_outcome"]
    assert seen["mailbox"] == "1"
    assert seen["stopped"] == "Process terminated."
    assert [e for e in seen["login_errors"] if "401" not in e] == []
    assert seen["errors"] == []  # no script error, no CSP violation
    shown = ["console-login.png", "console-history.png", "console-timeline.png"]
    for name in [*shown, "console-process.png"]:
        assert (shots / name).stat().st_size > 10_000, name
