"""The web console: server-rendered pages of a running node, on the admin server.

``console_routes()`` is mounted at ``/`` by the admin server, behind its token check; each
handler finds the node as ``request.app.state.node``. Pages are Jinja2 templates with
autoescape on, and every stored value is shown through ``_console_format.preview`` (bounded
in size and depth), so a hostile value (markup in a string, a huge or deeply nested
payload) neither breaks a page nor adds markup to it. The pages read without JavaScript;
``static/console.js`` only refreshes the parts marked ``data-live`` while the page is open.
Buttons are plain forms that POST and redirect back (303) to the page they came from; each
carries the node's ``form_token`` (``_auth``), without which a cookie-authenticated POST is
refused (403) and changes nothing.

Ids and queue names travel as one percent-encoded path segment (``/`` included), read back
from the raw request path, so any id the runtime accepts has its page.
"""

from __future__ import annotations

import hmac
import importlib.metadata
import json
import logging
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from roost._errors import Error, ErrorKind, invalid
from roost.admin import _console_data as data
from roost.admin._api import read_limited
from roost.admin._auth import AUTH_SCOPE_KEY, form_token
from roost.admin._console_format import (
    ago,
    duration,
    pid_url,
    preview,
    queue_url,
    short,
    timestamp,
    workflow_url,
)
from roost.admin._json import to_jsonable
from roost.admin._status import http_status
from roost.admin._views import asked
from roost.workflow._local._inspect import LISTED_STATUSES, with_status

__all__ = ["console_routes"]

log = logging.getLogger("roost.admin")

_HERE = Path(__file__).parent
_MAX_FORM: Final = 1 << 20  # a signal payload larger than 1 MiB is refused
_LIST_LIMIT: Final = 200
_DLQ_LIMIT: Final = 100
_HISTORY_LIMIT: Final = 2000
_DONE: Final = {
    "signal": "Signal sent (stored in the workflow's history).",
    "cancel": "Cancel requested (stored; the workflow decides how to stop).",
    "terminate": "Terminated.",
    "redrive": "Dead letter redriven.",
    "redrive_all": "Dead letters redriven.",
    "discard": "Dead letter discarded.",
    "process_cancel": "Cancel sent to the process (it decides how to stop).",
    "process_terminate": "Process terminated.",
    "trigger": "Cron trigger started.",
}
# Defence in depth beside autoescape: no inline script, nothing from elsewhere, no framing.
_SECURITY_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    # Never to other sites; same-origin keeps the console's own POSTs' Origin (not "null").
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(_HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(
    preview=preview,
    short=short,
    ts=timestamp,
    workflow_url=workflow_url,
    queue_url=queue_url,
    pid_url=pid_url,
    duration=duration,
)
try:
    _env.globals.update(version=importlib.metadata.version("roost"))
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    _env.globals.update(version="")


def console_routes() -> list[BaseRoute]:
    """The console's routes, to be mounted at ``/`` of the admin app."""
    return [
        Route("/", _page(_workflows), methods=["GET"]),
        Route("/workflows/{rest:path}", _page(_workflow), methods=["GET"]),
        Route("/workflow", _page(_workflow), methods=["GET"]),
        Route("/workflows/{rest:path}", _page(_workflow_action), methods=["POST"]),
        Route("/workflow", _page(_workflow_action), methods=["POST"]),
        Route("/queues", _page(_queues), methods=["GET"]),
        Route("/queues/{rest:path}", _page(_queue), methods=["GET"]),
        Route("/queue", _page(_queue), methods=["GET"]),
        Route("/queues/{rest:path}", _page(_queue_action), methods=["POST"]),
        Route("/queue", _page(_queue_action), methods=["POST"]),
        Route("/cron", _page(_cron), methods=["GET"]),
        Route("/cron", _page(_cron_action), methods=["POST"]),
        Route("/processes", _page(_processes), methods=["GET"]),
        Route("/processes/{rest:path}", _page(_process), methods=["GET"]),
        Route("/processes/{rest:path}", _page(_process_action), methods=["POST"]),
        Mount("/static", StaticFiles(directory=_HERE / "static"), name="console-static"),
    ]


Handler = Callable[[Request], Awaitable[Response]]


def _page(handler: Handler) -> Handler:
    """Wrap a handler: a roost error becomes an error page with its status."""

    async def endpoint(request: Request) -> Response:
        try:
            response = await handler(request)
        except Exception as exc:
            err = exc if isinstance(exc, Error) else Error.from_exception(exc)
            if not isinstance(exc, Error) or http_status(err.kind) == 500:
                log.exception("console %s %s failed", request.method, request.url.path)
            response = _render(
                request,
                "error.html",
                status=http_status(err.kind),
                title=f"{err.kind.value}",
                error=err,
                details=to_jsonable(err.details),
            )
        response.headers.update(_SECURITY_HEADERS)
        return response

    return endpoint


def _render(request: Request, template: str, *, status: int = 200, **context: Any) -> Response:
    node = request.app.state.node
    done = request.query_params.get("done")
    page = _env.get_template(template).render(
        node=node,
        path=request.url.path,
        done=_DONE.get(done or ""),
        done_count=request.query_params.get("n", ""),
        form_token=form_token(request.app.state.tokens.current()),
        **context,
    )
    return HTMLResponse(page, status_code=status)


def _tail(request: Request, prefix: str, query_name: str) -> str:
    """The id in ``/prefix/{id}`` (one encoded segment), or ``?query_name=`` of the fallback."""
    if request.url.path.rstrip("/") in ("/workflow", "/queue"):
        value = request.query_params.get(query_name)
        if not value:
            raise invalid(f"{request.url.path} needs ?{query_name}=...")
        return value
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    rest = raw.split(b"?", 1)[0][len(prefix) :]
    text = urllib.parse.unquote_to_bytes(rest).decode("utf-8", "replace")
    if not text:
        raise invalid(f"{prefix}{{id}} needs an id after {prefix}")
    return text


# -- workflows ---------------------------------------------------------------------------------


async def _workflows(request: Request) -> Response:
    node = request.app.state.node
    status = request.query_params.get("status", "")
    search = request.query_params.get("q", "").strip()
    query = with_status(search or None, status or None)
    try:
        rows = await asked(node, node.list_workflows, query)
        query_error = None
    except Error as err:  # a bad search: the page says why, above an empty list
        if err.kind is not ErrorKind.INVALID:
            raise
        rows, query_error = [], err
    rows.sort(key=lambda r: (r.get("started_at") is None, r.get("started_at")), reverse=True)
    return _render(
        request,
        "workflows.html",
        rows=rows[:_LIST_LIMIT],
        total=len(rows),
        statuses=LISTED_STATUSES,
        chosen=status,
        search=search,
        query_error=query_error,
        status=400 if query_error is not None else 200,
    )


# What the workflow page shows of ``describe``.
_DESCRIBED = (
    "attempt",
    "closed_at",
    "error",
    "history_length",
    "history_size",
    "memo",
    "parent",
    "pending_activities",
    "result",
    "run_id",
    "search_attributes",
    "started_at",
    "status",
    "task_failure",
    "task_queue",
    "unread_messages",
    "workflow_type",
)


async def _workflow(request: Request) -> Response:
    node = request.app.state.node
    workflow_id = _tail(request, "/workflows/", "id")
    # A host that does not report every field (Temporal's) shows the rest as empty.
    described = dict.fromkeys(_DESCRIBED, None) | await asked(node, node.describe, workflow_id)
    try:
        history = await asked(node, node.history, workflow_id)
        history_error = None
    except Error as err:  # a quarantined workflow: its describe still shows
        history, history_error = [], err
    status = described.get("status", "")
    # The input is the start record's (the first event of the run's first activation).
    started = next((e for e in history[:3] if type(e).__name__ == "Started"), None)
    return _render(
        request,
        "workflow.html",
        input_args=getattr(started, "args", None),
        has_input=started is not None,
        wf=described,
        running=status == "running",
        workflow_id=workflow_id,
        url=workflow_url(workflow_id),
        parent_id=data.parent_workflow(node, described.get("parent")),
        parent_pid=data.parent_process(node, described.get("parent")),
        temporal_url=data.temporal_url(node, workflow_id, described.get("run_id")),
        timeline=data.history_rows(history[:_HISTORY_LIMIT]),
        activities=data.activity_rows(
            history[:_HISTORY_LIMIT],
            described.get("pending_activities") or [],
            data.activity_attempts(node, workflow_id),
        ),
        history_total=len(history),
        history_error=history_error,
        timers=data.pending_timers(history, status),
        chart=data.timeline_chart(history[:_HISTORY_LIMIT], described.get("closed_at"), _now(node)),
        chart_width=data.CHART_WIDTH,
        children=data.children(node, history),
        now=_now(node),
        ago=ago,
    )


def _now(node: Any) -> Any:
    return node._node.now()  # the node's clock (a test node's follows its MockClock)


async def _workflow_action(request: Request) -> Response:
    node = request.app.state.node
    workflow_id = _tail(request, "/workflows/", "id")
    form = await _form(request)
    action = form.get("action", "")
    if action == "signal":
        topic = form.get("topic", "").strip()
        payload = _json_field(form.get("payload", ""), "payload")
        await data.signal_workflow(node, workflow_id, topic, payload)
    elif action == "cancel":
        reason = form.get("reason", "").strip() or None
        await data.cancel_workflow(node, workflow_id, reason)
    elif action == "terminate":
        await data.terminate_workflow(node, workflow_id)
    else:
        raise invalid(f"unknown action {action[:40]!r}: use signal, cancel or terminate")
    return _back(workflow_url(workflow_id), action)


def _json_field(text: str, what: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise invalid(f"the {what} is nested too deeply to read; send a flatter value") from None
    except ValueError as exc:
        raise invalid(f"the {what} is not JSON ({exc}); leave it empty for none") from None


# -- queues, cron, processes -------------------------------------------------------------------


async def _queues(request: Request) -> Response:
    return _render(request, "queues.html", queues=data.queue_stats(request.app.state.node))


async def _queue(request: Request) -> Response:
    node = request.app.state.node
    queue = _tail(request, "/queues/", "name")
    data.check_queue(node, queue)
    limit = data.parse_limit(request.query_params.get("limit"), _DLQ_LIMIT, 10_000)
    stats = data.queue_stats(node)[queue]
    return _render(
        request,
        "queue.html",
        queue=queue,
        url=queue_url(queue),
        stats=stats,
        letters=data.dead_letters(node, queue, limit),
        messages=data.queue_messages(node, queue, limit),
        limit=limit,
    )


async def _queue_action(request: Request) -> Response:
    node = request.app.state.node
    queue = _tail(request, "/queues/", "name")
    data.check_queue(node, queue)
    form = await _form(request)
    action = form.get("action", "")
    count = 1
    if action == "redrive":
        await node.dlq.redrive(queue, form.get("receipt_id", ""))
    elif action == "redrive_all":
        count = await node.dlq.redrive_all(queue)
    elif action == "discard":
        await node.dlq.discard(queue, form.get("receipt_id", ""))
    else:
        raise invalid(f"unknown action {action[:40]!r}: use redrive, redrive_all or discard")
    return _back(queue_url(queue), action, count)


async def _cron(request: Request) -> Response:
    node = request.app.state.node
    return _render(request, "cron.html", triggers=data.cron_triggers(node), now=_now(node), ago=ago)


async def _cron_action(request: Request) -> Response:
    form = await _form(request)
    if form.get("action") != "trigger":
        raise invalid(f"unknown action {form.get('action', '')[:40]!r}: use trigger")
    data.trigger_cron(request.app.state.node, form.get("trigger", ""))
    return _back("/cron", "trigger")


async def _processes(request: Request) -> Response:
    roots, count = data.process_tree(request.app.state.node)
    return _render(request, "processes.html", roots=roots, count=count)


async def _process(request: Request) -> Response:
    pid = _tail(request, "/processes/", "pid")
    info = data.process_info(request.app.state.node, pid)
    return _render(request, "process.html", proc=info, url=pid_url(pid))


async def _process_action(request: Request) -> Response:
    pid = _tail(request, "/processes/", "pid")
    form = await _form(request)
    action = form.get("action", "")
    if action not in ("cancel", "terminate"):
        raise invalid(f"unknown action {action[:40]!r}: use cancel or terminate")
    reason = form.get("reason", "").strip() or None
    data.stop_process(request.app.state.node, pid, hard=action == "terminate", reason=reason)
    return _back("/processes", f"process_{action}")


# -- forms -------------------------------------------------------------------------------------


async def _form(request: Request) -> dict[str, str]:
    """The url-encoded form of a POST (at most 1 MiB); the first value of each field."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise invalid("the console's actions take an HTML form (application/x-www-form-urlencoded)")
    body = await read_limited(request, _MAX_FORM, "the form")
    try:
        pairs = urllib.parse.parse_qsl(
            bytes(body).decode("utf-8"), keep_blank_values=True, max_num_fields=100
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise invalid(f"the form cannot be read: {exc}") from None
    form: dict[str, str] = {}
    for name, value in pairs:
        form.setdefault(name, value)
    if request.scope.get(AUTH_SCOPE_KEY) != "bearer":  # a browser's cookie: prove the page
        expected = form_token(request.app.state.tokens.current())
        given = form.get("form_token", "")
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
            raise Error(
                "the form has no valid form_token: send the console's actions from its own "
                "pages (reload the page: the token changes when the node restarts)",
                kind=ErrorKind.PERMISSION_DENIED,
            )
    return form


def _back(url: str, action: str, count: int = 1) -> Response:
    """303 back to the page the form came from, naming what was done."""
    sep = "&" if "?" in url else "?"
    return RedirectResponse(f"{url}{sep}done={action}&n={count}", status_code=303)
