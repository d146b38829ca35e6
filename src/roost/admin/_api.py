"""The admin JSON API: everything ``roost workflow|queue|dlq|cron`` does, over HTTP.

Every handler calls the node's own public operations (``NodeHandle.describe`` ...,
``process.spawn`` / ``send`` / ``cancel`` / ``terminate``, ``node.dlq``). Those that need a
current process run as a short-lived process of their own, as an HTTP trigger's handler
does (``in_process``). Bodies are checked before anything is done: a bad one is a 400
naming what to fix, and changes nothing: a POST's body must be
``application/json`` (no HTML form can send that type to another origin) and at most
``MAX_BODY`` bytes. Errors are ``{"error": {"kind", "message", "details"}}`` with the status
of their kind (``roost.admin._status``).

A workflow id is one percent-encoded path segment (``/`` included, as ``%2F``), read from the
raw request path: ``/api/workflows/a%2Fhistory`` is workflow ``a/history``, never the history
of ``a``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import urllib.parse
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Final

import trio

from roost._errors import Error, ErrorKind, invalid, shown
from roost.actors._app import EntryKind
from roost.actors._authorize import check_control, check_relay
from roost.actors._current import reset_current, set_current
from roost.actors._events import Exit
from roost.admin._json import error_json, to_jsonable
from roost.admin._status import http_status
from roost.admin._views import (
    asked,
    cron_list,
    dead_letter,
    node_info,
    node_of,
    process_list,
    queue_stats,
    workflow_pid,
)
from roost.workflow._local._inspect import with_status
from roost.workflow._options import check_start_options
from roost.workflow._status import RunStatus

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute

    from roost.actors._open import NodeHandle

__all__ = ["MAX_BODY", "Closing", "api_routes", "error_response", "in_process", "read_limited"]

log = logging.getLogger("roost.admin")

MAX_BODY: Final = 1 << 20  # a request body larger than 1 MiB is refused (LimitExceeded)
_DRAIN: Final = 16 << 20  # an oversized body up to this is read to its end before the answer
_DLQ_LIMIT: Final = 1000
_PREFIX: Final = b"/api/workflows/"

Handler = Callable[["Request"], Awaitable[Any]]


def error_response(err: Error) -> Response:
    """The JSON answer for ``err``, with its kind's status (500 for the kinds not listed)."""
    from starlette.responses import JSONResponse  # noqa: PLC0415 - starlette loads with the server

    return JSONResponse({"error": error_json(err)}, status_code=http_status(err.kind))


def _endpoint(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler: its value as JSON (200), a failure as its error answer."""
    from starlette.responses import JSONResponse  # noqa: PLC0415

    @functools.wraps(fn)
    async def handle(request: Request) -> Response:
        try:
            return JSONResponse(to_jsonable(await fn(request)))
        except Error as err:
            if http_status(err.kind) >= 500 and err.kind is not ErrorKind.UNAVAILABLE:
                log.error(  # noqa: TRY400 - a roost.Error's message is the whole story
                    "admin %s %s failed: %s", request.method, request.url.path, err
                )
            return error_response(err)
        except Exception as exc:
            log.exception("admin %s %s failed", request.method, request.url.path)
            return error_response(Error.from_exception(exc))

    return handle


async def in_process(handle: NodeHandle, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``fn()`` as a process of the node (an attached one, as HTTP triggers do).

    The process exits normally once ``fn`` returns or fails, so its failure is the
    answer, not a crash of anything linked to it.
    """
    node = node_of(handle)
    if node.stopping:
        raise Error("the node is shutting down", kind=ErrorKind.UNAVAILABLE)
    proc = node.attach()
    token = set_current(proc)
    try:
        with proc.scope:
            return await fn()
        failure = proc.kill_error  # the scope was cancelled: the process was stopped
        raise (
            failure.clone()
            if failure is not None
            else Error("the request's process was stopped", kind=ErrorKind.CANCELED)
        )
    finally:
        reset_current(token)
        node.exit(proc, None, None)


# -- bodies ------------------------------------------------------------------------------


async def read_limited(request: Request, limit: int, what: str) -> bytes:
    """The request's body, refused with LimitExceeded past ``limit`` bytes (nothing kept)."""

    def too_large(size: int) -> Error:
        return Error(
            f"{what} is larger than {limit} bytes ({size}); send a smaller one",
            kind=ErrorKind.LIMIT_EXCEEDED,
            details={"limit": limit, "size": size},
        )

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > _DRAIN:
        raise too_large(int(declared))  # the client may see the connection close
    body = bytearray()
    size = 0
    async with contextlib.aclosing(request.stream()) as chunks:
        async for chunk in chunks:
            size += len(chunk)
            if size > _DRAIN:
                break
            if size <= limit:
                body += chunk
    if size > limit:
        # Read (and dropped) to the end, so that the client, still sending, gets the answer.
        raise too_large(max(size, int(declared) if declared.isdigit() else 0))
    return bytes(body)


async def _body(request: Request, allowed: tuple[str, ...], example: str) -> dict[str, Any]:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise invalid(
            f"the API takes JSON: send the body with 'Content-Type: application/json' (got "
            f"{shown(kind or 'none')}), e.g. {example}",
            content_type=kind,
        )
    raw = await read_limited(request, MAX_BODY, "the request body")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except RecursionError:
        raise invalid(
            f"the request body is nested too deeply to read; send a flatter JSON object like "
            f"{example}"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(
            f"the request body is not JSON ({exc}); send a JSON object like {example}"
        ) from None
    if not isinstance(body, dict):
        raise invalid(f"the request body must be a JSON object like {example}, got {shown(body)}")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise invalid(
            f"unknown field(s) {', '.join(map(repr, unknown))} in the request body; "
            f"the fields are {', '.join(allowed) or 'none'} (e.g. {example})",
            fields=unknown,
        )
    return body


def _optional_text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise invalid(f"{name!r} must be a string or null, got {shown(value)}", field=name)
    return value


def _required_text(body: dict[str, Any], name: str, example: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise invalid(
            f"{name!r} is required and must be a non-empty string (e.g. {example}), got "
            f"{shown(value)}",
            field=name,
        )
    return value


def _handle(request: Request) -> NodeHandle:
    node: NodeHandle = request.app.state.node
    return node


# -- workflows ---------------------------------------------------------------------------


@_endpoint
async def list_workflows(request: Request) -> Any:
    query = request.query_params.get("query") or None
    status = request.query_params.get("status") or None
    node = _handle(request)
    return await asked(node, node.list_workflows, with_status(query, status))


@_endpoint
async def describe(request: Request) -> Any:
    node = _handle(request)
    return await asked(node, node.describe, request.path_params["id"])


@_endpoint
async def history(request: Request) -> Any:
    # The rendering of roost.testing.history_to_json (the one renderer), as data.
    return to_jsonable(_handle(request).history(request.path_params["id"]))


@_endpoint
async def result(request: Request) -> Any:
    node = _handle(request)
    workflow_id = request.path_params["id"]
    wait = request.query_params.get("wait", "0")
    if wait not in ("0", "1", "true", "false"):
        raise invalid(f"wait is 1 or 0, got {wait!r}", wait=wait)
    bound = _seconds_param(request, "timeout")
    described = await asked(node, node.describe, workflow_id)
    if wait in ("1", "true") and described["status"] == RunStatus.RUNNING.value:
        closing: Closing = request.app.state.closing
        with closing.scope() as waiting:
            # A bounded wait answers with the run still open once ``timeout`` has passed.
            with trio.move_on_after(math.inf if bound is None else bound):
                await in_process(node, lambda: _closed(node, workflow_id))
        if waiting.cancelled_caught:
            raise Error(
                f"the node stopped before workflow {workflow_id!r} closed; ask again once a "
                "node runs on its data directory",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
                details={"workflow_id": workflow_id},
            )
        described = await asked(node, node.describe, workflow_id)
    return {key: described[key] for key in ("status", "result", "error")}


async def _closed(node: NodeHandle, workflow_id: str) -> None:
    from roost import process  # noqa: PLC0415 - the process API, in a request's process

    pid = workflow_pid(node, workflow_id)
    events = process.events()
    process.monitor(pid)  # one EXIT when it closes for good (at once if it has)
    while True:
        event = await events.receive()
        if isinstance(event, Exit) and event.pid == pid:
            return


_START_EXAMPLE: Final = (
    '{"entry": "app:order", "args": [1], "id": null, "options": {"task_queue": "orders"}}'
)


@_endpoint
async def start(request: Request) -> Any:
    from roost import process  # noqa: PLC0415

    node = _handle(request)
    body = await _body(request, ("entry", "args", "id", "options", "ticket"), _START_EXAMPLE)
    entry_id = _required_text(body, "entry", '"app:order"')
    args = body.get("args", [])
    if not isinstance(args, list):
        raise invalid(f"'args' must be a JSON list of arguments, got {shown(args)}", field="args")
    workflow_id = _optional_text(body, "id")
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise invalid(
            f"'options' must be a JSON object of workflow start options (e.g. "
            f'{{"task_queue": "orders", "execution_timeout": 60}}), got {shown(options)}',
            field="options",
        )
    if workflow_id is not None:
        options = {**options, "id": workflow_id}
    check_start_options(options)  # workflow start options only, each checked
    entry = node.app.resolve(entry_id)
    if entry.kind is not EntryKind.WORKFLOW:
        raise invalid(
            f"{entry_id!r} is a {entry.kind.value}, not a workflow: start an entry declared "
            "with @app.workflow",
            entry=entry_id,
        )
    # An explicit id must be free unless the request names another policy: starting is
    # never silently taken as "the one already running".
    if "id" in options:
        options = {"id_conflict_policy": "fail", **options}
        if options["id_conflict_policy"] == "terminate_existing":
            # Replacing a secured run terminates it: the same signed ticket as terminate.
            pid = workflow_pid(node, str(options["id"]))
            check_control(node_of(node), pid, "terminate", body.get("ticket"))
    spawner = process.with_options(options)
    pid = await in_process(node, lambda: spawner.spawn(entry.id, *args))
    return {"workflow_id": pid.id}


class Closing:
    """The admin server's waits that must end, answered, when the node stops."""

    def __init__(self) -> None:
        self.closed = False
        self._scopes: set[trio.CancelScope] = set()

    @contextlib.contextmanager
    def scope(self) -> Iterator[trio.CancelScope]:
        """A cancel scope that ``close`` cancels (at once, once closed)."""
        scope = trio.CancelScope()
        if self.closed:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)

    def close(self) -> None:
        """End every wait: each answers that the node stopped."""
        self.closed = True
        for scope in self._scopes:
            scope.cancel()


async def _running(node: NodeHandle, workflow_id: str, what: str) -> None:
    status = (await asked(node, node.describe, workflow_id))["status"]
    if status != RunStatus.RUNNING.value:
        raise Error(
            f"workflow {workflow_id!r} is {status}; only a running workflow can be {what}",
            kind=ErrorKind.INVALID_STATE,
            details={"workflow_id": workflow_id, "status": status},
        )


@_endpoint
async def signal(request: Request) -> Any:
    from roost import process  # noqa: PLC0415

    node = _handle(request)
    workflow_id = request.path_params["id"]
    body = await _body(
        request, ("topic", "payload", "ticket"), '{"topic": "approve", "payload": {}}'
    )
    topic = _required_text(body, "topic", '"approve"')
    payload = body.get("payload")
    await _running(node, workflow_id, "signaled")
    pid = workflow_pid(node, workflow_id)
    # A secured workflow takes the operator's signed ticket, not the node's own signature.
    check_relay(node_of(node), pid, topic, body.get("ticket"))

    async def send() -> None:
        await process.send(pid, topic, payload)  # durable: in its history on return

    await in_process(node, send)
    return {"ok": True}


_CALL_EXAMPLE: Final = '{"topic": "price", "payload": {}, "timeout": 5}'


@_endpoint
async def call(request: Request) -> Any:
    from roost import process  # noqa: PLC0415

    node = _handle(request)
    workflow_id = request.path_params["id"]
    body = await _body(request, ("topic", "payload", "timeout", "ticket"), _CALL_EXAMPLE)
    topic = _required_text(body, "topic", '"price"')
    payload = body.get("payload")
    timeout = body.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise invalid(
            f"'timeout' is a number of seconds or null (process.call's default), got "
            f"{shown(timeout)}",
            field="timeout",
        )
    await _running(node, workflow_id, "called")
    pid = workflow_pid(node, workflow_id)
    # As for signal: a secured workflow takes the operator's signed ticket for the request.
    check_relay(node_of(node), pid, topic, body.get("ticket"))

    async def ask() -> Any:
        if timeout is None:
            return await process.call(pid, topic, payload)
        return await process.call(pid, topic, payload, timeout=timeout)

    return {"result": await in_process(node, ask)}


@_endpoint
async def cancel(request: Request) -> Any:
    from roost import process  # noqa: PLC0415

    node = _handle(request)
    workflow_id = request.path_params["id"]
    body = await _body(request, ("reason", "ticket"), '{"reason": "not needed"}')
    reason = _optional_text(body, "reason")
    await _running(node, workflow_id, "canceled")
    pid = workflow_pid(node, workflow_id)
    # A secured workflow is canceled from outside only with the operator's signed ticket.
    check_control(node_of(node), pid, "cancel", body.get("ticket"))

    async def stop() -> None:
        await asked(node, process.cancel, pid, reason)

    await in_process(node, stop)
    return {"ok": True}


@_endpoint
async def terminate(request: Request) -> Any:
    from roost import process  # noqa: PLC0415

    node = _handle(request)
    workflow_id = request.path_params["id"]
    body = await _body(request, ("ticket",), "{}")
    await _running(node, workflow_id, "terminated")
    pid = workflow_pid(node, workflow_id)
    check_control(node_of(node), pid, "terminate", body.get("ticket"))

    async def stop() -> None:
        await asked(node, process.terminate, pid)

    await in_process(node, stop)
    return {"ok": True}


# -- queues, cron, processes, node -------------------------------------------------------


@_endpoint
async def queues(request: Request) -> Any:
    return queue_stats(_handle(request))


_ENQUEUE_EXAMPLE: Final = '{"entry": "app:charge", "payload": {"order": "o-1"}}'


@_endpoint
async def enqueue(request: Request) -> Any:
    from roost.queues._api import enqueue as enqueue_message  # noqa: PLC0415

    node = _handle(request)
    queue = request.path_params["q"]
    body = await _body(request, ("entry", "payload"), _ENQUEUE_EXAMPLE)
    entry_id = _required_text(body, "entry", '"app:charge"')
    payload = body.get("payload")
    receipt = await in_process(node, lambda: enqueue_message(queue, entry_id, payload))
    return {"receipt_id": receipt}


def _seconds_param(request: Request, name: str) -> float | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise invalid(f"{name} is a number of seconds >= 0, got {text!r}", **{name: text})
    return seconds


def _int_param(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    if not text.isdigit():
        raise invalid(f"{name} must be a whole number >= 0, got {text!r}", **{name: text})
    return int(text)


@_endpoint
async def dlq_list(request: Request) -> Any:
    offset = _int_param(request, "offset", 0)
    limit = _int_param(request, "limit", _DLQ_LIMIT)
    dead = _handle(request).dlq.list(request.path_params["q"], offset=offset, limit=limit)
    return [dead_letter(d) for d in dead]


@_endpoint
async def dlq_redrive(request: Request) -> Any:
    node = _handle(request)
    queue = request.path_params["q"]
    example = '{"receipt_id": "..."} or {"all": true}'
    body = await _body(request, ("receipt_id", "all"), example)
    everything = body.get("all", False)
    if not isinstance(everything, bool):
        raise invalid(f"'all' must be true or false, got {shown(everything)}", field="all")
    if everything == ("receipt_id" in body):
        raise invalid(f"send either a receipt_id or all: true, not both nor neither: {example}")
    if everything:
        return {"redriven": await node.dlq.redrive_all(queue)}
    await node.dlq.redrive(queue, _required_text(body, "receipt_id", '"r-1"'))
    return {"redriven": 1}


@_endpoint
async def dlq_discard(request: Request) -> Any:
    node = _handle(request)
    body = await _body(request, ("receipt_id",), '{"receipt_id": "..."}')
    receipt_id = _required_text(body, "receipt_id", '"r-1"')
    await node.dlq.discard(request.path_params["q"], receipt_id)
    return {"discarded": 1}


@_endpoint
async def cron(request: Request) -> Any:
    return cron_list(_handle(request))


@_endpoint
async def processes(request: Request) -> Any:
    return process_list(_handle(request))


@_endpoint
async def node(request: Request) -> Any:
    return node_info(_handle(request))


_GETS: Final[dict[str, Callable[[Request], Awaitable[Response]]]] = {
    "": describe,
    "history": history,
    "result": result,
}
_POSTS: Final[dict[str, Callable[[Request], Awaitable[Response]]]] = {
    "signal": signal,
    "call": call,
    "cancel": cancel,
    "terminate": terminate,
}


def _split(request: Request) -> tuple[str, str]:
    """``(workflow id, action)`` of ``/api/workflows/{id}[/{action}]``, from the raw path."""
    raw: bytes = request.scope.get("raw_path") or request.scope["path"].encode()
    rest = raw.split(b"?", 1)[0][len(_PREFIX) :]
    segment, _, action = rest.partition(b"/")
    workflow_id = urllib.parse.unquote_to_bytes(segment).decode("utf-8", "replace")
    return workflow_id, action.decode("latin-1")


def _dispatch(
    table: dict[str, Callable[[Request], Awaitable[Response]]], method: str
) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        workflow_id, action = _split(request)
        handler = table.get(action)
        if not workflow_id or handler is None:
            choices = ", ".join(f"{method} /api/workflows/{{id}}/{a}".rstrip("/") for a in table)
            return error_response(
                Error(
                    f"no such endpoint {method} {request.url.path}: use {choices} (an id with "
                    "'/' in it is sent as one segment, '/' as %2F)",
                    kind=ErrorKind.NOT_FOUND,
                    details={"path": request.url.path},
                )
            )
        request.scope["path_params"] = {"id": workflow_id}
        return await handler(request)

    return route


_workflow_get = _dispatch(_GETS, "GET")
_workflow_post = _dispatch(_POSTS, "POST")


def api_routes() -> list[BaseRoute]:
    """The ``/api/...`` routes (contract in docs/admin.md)."""
    from starlette.routing import Route  # noqa: PLC0415

    return [
        Route("/api/workflows", list_workflows, methods=["GET"]),
        Route("/api/workflows", start, methods=["POST"]),
        Route("/api/workflows/{rest:path}", _workflow_get, methods=["GET"]),
        Route("/api/workflows/{rest:path}", _workflow_post, methods=["POST"]),
        Route("/api/queues", queues, methods=["GET"]),
        Route("/api/queues/{q}/messages", enqueue, methods=["POST"]),
        Route("/api/queues/{q}/dlq", dlq_list, methods=["GET"]),
        Route("/api/queues/{q}/dlq/redrive", dlq_redrive, methods=["POST"]),
        Route("/api/queues/{q}/dlq/discard", dlq_discard, methods=["POST"]),
        Route("/api/cron", cron, methods=["GET"]),
        Route("/api/processes", processes, methods=["GET"]),
        Route("/api/node", node, methods=["GET"]),
    ]
