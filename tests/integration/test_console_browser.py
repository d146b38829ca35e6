"""The web console in a real headless Chromium (Debian's ``chromium``), driven by Selenium.

Nothing is downloaded: Selenium drives Debian's ``chromedriver`` by path (``browser``). The
browser runs in a worker thread (Selenium's API blocks) while the node serves the console
on trio in the test's thread. Without /usr/bin/chromium and /usr/bin/chromedriver the test
is skipped, except under CI=true, where it fails: .ci/run installs them.

Screenshots go to a temporary directory, or to ``ROOST_CONSOLE_SCREENSHOTS`` when set
(``ROOST_CONSOLE_SCREENSHOTS=docs/images`` refreshes the ones in docs/console.md).
"""

import http.server
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

import roost
from roost import process

sys.path.insert(0, str(Path(__file__).parent))

import browser
import console_app
from browser import chromium, errors, find, goto, need_chromium, screenshot, texts, wait_for
from console_app import app
from console_fixture import open_console_node
from test_console import blocked_on_select, until


def drive(url: str, token: str, workflow_id: str, shots: Path) -> dict[str, Any]:
    """The browser session (in a worker thread); returns what it saw."""
    seen: dict[str, Any] = {}
    with chromium(1280, 820) as page:
        # Without the token: refused.
        seen["anonymous"] = goto(page, f"{url}/")
        errors(page)  # the 401 itself is logged; what follows must log nothing
        # The token link once; from then on the cookie carries it.
        seen["token_link"] = goto(page, f"{url}/?token={token}")
        seen["landed_on"] = page.current_url
        rows = browser.find_all(page, "#workflows tbody tr")
        row = [r for r in rows if workflow_id in r.text]
        seen["listed"] = len(row)
        seen["listed_status"] = row[0].find_element("css selector", ".status").text
        screenshot(page, shots / "console-workflows.png")

        row[0].find_element("css selector", "a").click()
        wait_for(page, "#timeline")
        seen["page_url"] = page.current_url
        seen["timeline"] = texts(page, "#timeline .kind")
        seen["status_before"] = find(page, "#wf-status").text
        seen["live_toggle"] = find(page, ".live-toggle").is_displayed()
        screenshot(page, shots / "console-workflow.png", full_page=True)

        find(page, "input[name=reason]").send_keys("out of stock")
        find(page, "#cancel").click()
        seen["flash"] = wait_for(page, ".flash.ok").text
        seen["after_url"] = page.current_url
        # The live refresh (console.js) brings the closed status and the rest of the
        # history in without a reload.
        seen["status_live"] = wait_for(page, "#wf-status.s-canceled").text
        seen["timeline_after"] = texts(page, "#timeline .kind")

        find(page, "nav a[href='/queues']").click()
        wait_for(page, "#queues")
        seen["queues"] = texts(page, "#queues tbody tr")
        screenshot(page, shots / "console-queues.png")
        seen["errors"] = errors(page)
    # Without JavaScript the pages read the same (only the live refresh is gone).
    with chromium(javascript=False) as plain:
        goto(plain, f"{url}/?token={token}")
        find(plain, f"#workflows a[href='/workflows/{workflow_id}']").click()
        wait_for(plain, "#timeline")
        seen["plain_timeline"] = texts(plain, "#timeline .kind")
        # console.js shows the live toggle: hidden here, the page's scripts are off.
        seen["plain_live_toggle"] = find(plain, ".live-toggle").is_displayed()
    return seen


async def test_the_console_in_headless_chromium(tmp_path, mock_clock):
    need_chromium()
    shots = Path(os.environ.get("ROOST_CONSOLE_SCREENSHOTS") or tmp_path)
    await trio.Path(shots).mkdir(parents=True, exist_ok=True)
    console_app.FAIL_JOBS[0] = True
    async with open_console_node(app) as c:
        # Some company for the screenshots: a finished, a failed and a parent workflow.
        await process.with_options(id="invoice-17").spawn(console_app.returns, {"total": 42})
        await process.with_options(id="refund-3").spawn(console_app.raises, "card expired")
        await process.with_options(id="order-9").spawn(console_app.parent, {"sku": "B-2"})
        await roost.enqueue("jobs", console_app.job, {"email": "ann@example.com"})
        pid = await process.with_options(id="order-42").spawn(
            console_app.waiter, {"sku": "A-1", "qty": 2}
        )
        await until(lambda: blocked_on_select(c.node, "order-42"), "waiting")
        await until(lambda: blocked_on_select(c.node, "order-9.1"), "child waiting")
        await until(lambda: len(c.node.dlq.list("jobs")) == 1, "dead letter")

        seen = await trio.to_thread.run_sync(drive, c.url, c.token, pid.id, shots)

        assert seen["anonymous"] == 401
        assert seen["token_link"] == 200
        assert "token=" not in seen["landed_on"]
        assert seen["listed"] == 1 and seen["listed_status"] == "running"
        assert seen["page_url"] == f"{c.url}/workflows/order-42"
        assert seen["status_before"] == "running"
        assert {"Started", "ScheduleActivity", "ActivityResolved", "StartTimer"} <= set(
            seen["timeline"]
        )
        assert seen["flash"].startswith("Cancel requested")
        assert seen["after_url"] == f"{c.url}/workflows/order-42?done=cancel&n=1"
        assert "CancelRequested" in seen["timeline_after"]
        assert seen["status_live"] == "canceled"
        assert "CancelRequested" in seen["plain_timeline"]
        assert seen["live_toggle"] is True and seen["plain_live_toggle"] is False
        assert c.node.describe("order-42")["status"] == "canceled"
        assert any(r.startswith("jobs") and r.rstrip().endswith("1") for r in seen["queues"])
        assert seen["errors"] == []  # no script error, no CSP violation
    for name in ["console-workflows.png", "console-workflow.png", "console-queues.png"]:
        assert (shots / name).stat().st_size > 10_000, name


ATTACKS = """
async ({admin, formToken}) => {
  const seen = {};
  const post = async (name, path, type, body) => {
    try {
      await fetch(admin + path, {method: "POST", mode: "no-cors", credentials: "include",
                                 headers: {"content-type": type}, body});
      seen[name] = "answered";  // opaque: the server answered, the page reads nothing
    } catch (e) { seen[name] = "refused: " + e; }
  };
  // The review's JSON-in-text/plain trick on the API, a start and a console action.
  await post("api_cancel", "/api/workflows/victim2/cancel", "text/plain", '{"reason": "x"}');
  await post("api_start", "/api/workflows", "text/plain",
             '{"entry": "cons:returns", "args": [1], "id": "planted"}');
  await post("console_fetch", "/workflows/victim", "application/x-www-form-urlencoded",
             "action=terminate&form_token=" + formToken);
  // Reading the API is refused too (no CORS): the fetch itself fails.
  try { await fetch(admin + "/api/workflows", {credentials: "include"}); seen.api_read = "read"; }
  catch (e) { seen.api_read = "refused"; }
  return seen;
}
"""

FORM = """
({admin, formToken, action}) => {
  const form = document.createElement("form");
  form.method = "post";
  form.action = admin + action;
  for (const [name, value] of [["action", "terminate"], ["form_token", formToken]]) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = name; input.value = value;
    form.appendChild(input);
  }
  document.body.appendChild(form);
  form.submit();
}
"""


class _Evil(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>another local server</title><p>hello</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def attack(url: str, token: str, form_token: str, evil: str) -> dict[str, Any]:
    """A logged-in browser visits a page of another local port, which tries its POSTs."""
    seen: dict[str, Any] = {}
    with chromium() as page:
        seen["login"] = goto(page, f"{url}/?token={token}")
        seen["cookie"] = [c["name"] for c in page.get_cookies()]
        goto(page, evil)
        # Every fetch resolves once the admin server has answered it.
        seen.update(
            page.execute_async_script(
                f"const done = arguments[arguments.length - 1];({ATTACKS})(arguments[0])"
                ".then(done, (e) => done({error: String(e)}));",
                {"admin": url, "formToken": form_token},
            )
        )
        # A plain form POST (a top-level navigation), with the right form token even.
        browser.document_statuses(page)
        page.execute_script(
            f"({FORM})(arguments[0]);",
            {"admin": url, "formToken": form_token, "action": "/workflows/victim"},
        )
        browser.wait_until(
            page,
            lambda d: (
                d.current_url.startswith(url)
                and d.execute_script("return document.readyState") == "complete"
            ),
        )
        statuses = browser.document_statuses(page)
        seen["form_status"] = statuses[-1] if statuses else None
        seen["form_body"] = find(page, "body").text
    return seen


async def test_a_page_of_another_local_port_changes_nothing_through_the_browser():
    need_chromium()
    from roost.admin._auth import form_token  # noqa: PLC0415 - the console's hidden field

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        async with open_console_node(app) as c:
            await process.with_options(id="victim").spawn(console_app.waiter, "v1")
            await process.with_options(id="victim2").spawn(console_app.waiter, "v2")
            evil = f"http://127.0.0.1:{server.server_address[1]}/"
            seen = await trio.to_thread.run_sync(attack, c.url, c.token, form_token(c.token), evil)
            assert seen["login"] == 200 and seen["cookie"] == ["roost_token"]
            assert seen["api_cancel"] == seen["api_start"] == seen["console_fetch"] == "answered"
            assert seen["api_read"] == "refused"
            assert seen["form_status"] == 403
            assert "another origin" in seen["form_body"] or "same-site" in seen["form_body"]
            # Nothing changed: both still run, nothing was started.
            assert c.node.describe("victim")["status"] == "running"
            assert c.node.describe("victim2")["status"] == "running"
            kinds = {type(e).__name__ for e in c.node.history("victim2")}
            assert "CancelRequested" not in kinds
            ids = sorted(w["workflow_id"] for w in c.node.list_workflows())
            assert ids == ["victim", "victim2"]
    finally:
        server.shutdown()
        server.server_close()


def test_a_missing_browser_fails_under_ci_and_is_skipped_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI needs Debian's chromium"):
        need_chromium(tmp_path / "no-chromium")
    with pytest.raises(pytest.fail.Exception, match="no-driver missing"):
        need_chromium(driver=tmp_path / "no-driver")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium chromium-driver"):
        need_chromium(tmp_path / "no-chromium")


def test_selenium_manager_never_runs():
    need_chromium()
    from selenium.webdriver.common.selenium_manager import SeleniumManager  # noqa: PLC0415

    browser.forbid_selenium_manager()
    with pytest.raises(AssertionError, match="Selenium Manager ran"):
        SeleniumManager().binary_paths(["--browser", "chrome"])
