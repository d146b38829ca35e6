"""The clients' one core: each request written once, as a plan of steps a transport runs.

A client method is a generator here (a *plan*): it yields the steps it needs and gets back
each step's outcome, or has the step's ``roost.Error`` raised into it:

- ``Http``: one request to a node's admin API (the answer decoded, errors mapped back to
  ``roost.Error`` with their kind, here too);
- ``Blocking``: a blocking call on the data directory (``_local``: probe its lock, read its
  store, write an offline change);
- ``Sleep``: a pause between two looks at a store that a node without an admin API runs.

``Client`` runs plans with blocking I/O, ``AsyncClient`` with awaits (httpx on anyio, so
under asyncio and trio alike); neither has a method body of its own, so both behave the same.

Routing, per request, for a data directory: the directory's lock says whether a node runs.
Free: reads open the store read-only and changes are written to it under the lock, as the
command line does (the next node acts on them). Held: the holder's ``admin.json`` names its
admin API (checked with ``GET /api/node``: same process, same directory), and the request
goes there; a holder without one can be read from its store but not changed. A client made
for an admin URL always asks that URL.
"""

from __future__ import annotations

import json
import math
import os
import time
import urllib.parse
from collections.abc import Callable, Generator, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import attrs

from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid, shown
from roost.actors._app import ENTRY_ATTR, App
from roost.admin._json import to_jsonable
from roost.client import _local
from roost.client._local import Admin
from roost.queues import _offline as queue_offline
from roost.storage import Codec
from roost.storage._values import plain_data, result_of
from roost.workflow._local import _inspect
from roost.workflow._local import _offline as workflow_offline

__all__ = [
    "Admin",
    "Blocking",
    "Core",
    "Http",
    "Plan",
    "Sleep",
    "Step",
    "WorkflowId",
    "error_from_json",
]

T = TypeVar("T")
_R_co = TypeVar("_R_co", covariant=True)


class WorkflowId(str, Generic[_R_co]):
    """A started workflow's id (a ``str``), carrying its entry's result type.

    ``client.start(order, ...)`` returns one; ``client.result(wid)`` then returns the
    entry's annotated result type, to type checkers and at run time (the JSON the admin API
    carries is converted from the entry's annotations).
    """

    entry: Callable[..., Any] | None

    def __new__(cls, value: str, entry: Callable[..., Any] | None = None) -> WorkflowId[_R_co]:
        """The id ``value`` of a workflow of ``entry`` (a function, or None for an id)."""
        made = super().__new__(cls, value)
        made.entry = entry
        return made


REQUEST_TIMEOUT: Final = 60.0  # seconds a plain request may take to be answered
PROBE_TIMEOUT: Final = 5.0  # seconds a node gets to answer "who are you" (GET /api/node)
LONG_POLL: Final = 30.0  # seconds one waiting request of ``result`` is held open at most
MARGIN: Final = 10.0  # seconds past a server-side wait the answer may take to arrive
CALL_TIMEOUT: Final = 5.0  # process.call's default reply timeout
POLL_START: Final = 0.05  # seconds between looks at a store, doubling ...
POLL_MAX: Final = 1.0  # ... up to this
_ROUTE_TRIES: Final = 3
_CODEC: Final = Codec()
_KINDS: Final = {kind.value: kind for kind in ErrorKind}
_STATUS_KINDS: Final = {
    400: ErrorKind.INVALID,
    401: ErrorKind.PERMISSION_DENIED,
    403: ErrorKind.PERMISSION_DENIED,
    404: ErrorKind.NOT_FOUND,
    409: ErrorKind.CONFLICT,
    413: ErrorKind.LIMIT_EXCEEDED,
    415: ErrorKind.INVALID,
    421: ErrorKind.PERMISSION_DENIED,
    429: ErrorKind.RATE_LIMITED,
    503: ErrorKind.UNAVAILABLE,
    504: ErrorKind.TIMEOUT,
}


@attrs.frozen
class Http:
    """One request to an admin API; ``answer`` turns the response into a value or an error."""

    admin: Admin
    method: str
    path: str
    body: Any = None
    params: Mapping[str, str] | None = None
    timeout: float = REQUEST_TIMEOUT

    @property
    def url(self) -> str:
        """The request's full URL (without its query)."""
        return self.admin.url + self.path

    def headers(self) -> dict[str, str]:
        """The token, and the body's type; no ``Origin`` (this is no browser)."""
        out = {"Authorization": f"Bearer {self.admin.token}", "Accept": "application/json"}
        if self.body is not None:
            out["Content-Type"] = "application/json"
        return out

    def content(self) -> bytes | None:
        """The JSON body, or None."""
        return None if self.body is None else json.dumps(self.body).encode()

    def answer(self, status: int, content: bytes) -> Any:
        """The decoded answer of a response with ``status`` and ``content``.

        Raises:
            roost.Error: the API's error, with its kind, message and details (and
                ``details["http_status"]``); for an answer that is no API error, the kind
                its status means.
        """
        if status < 400:
            try:
                return json.loads(content) if content else None
            except ValueError:
                raise Error(
                    f"{self.method} {self.url} answered {status} with no JSON: is this a roost "
                    "admin server?",
                    kind=ErrorKind.UNAVAILABLE,
                    details={"url": self.admin.url, "http_status": status},
                ) from None
        err = _api_error(content)
        if err is None:
            text = content[:200].decode("utf-8", "replace").strip()
            err = Error(
                f"{self.method} {self.url} answered HTTP {status}: {text or 'no body'}",
                kind=_STATUS_KINDS.get(status, ErrorKind.INTERNAL),
            )
        message = err.message
        if status == 401:
            message = (
                f"the admin server at {self.admin.url} refused the token ({message}): pass "
                "the node's token (roost.connect(url, token=...), the one in its data "
                "directory's admin.json), or connect to the data directory instead"
            )
        raise Error(
            message,
            kind=err.kind,
            retryable=err.retryable,
            details={**err.details, "http_status": status},
        )

    def unreachable(self, exc: BaseException) -> Error:
        """The error for a request that got no answer (refused, reset, timed out)."""
        return Error(
            f"the admin server at {self.admin.url} did not answer {self.method} {self.path}: "
            f"{type(exc).__name__}: {exc}; is the node running?",
            kind=ErrorKind.UNAVAILABLE,
            retryable=True,
            details={"url": self.admin.url},
        )


def _api_error(content: bytes) -> Error | None:
    try:
        data = json.loads(content)["error"]
    except (ValueError, KeyError, TypeError):
        return None
    return error_from_json(data) if isinstance(data, dict) else None


def error_from_json(data: Mapping[str, Any]) -> Error:
    """The ``roost.Error`` of its JSON form (``{"kind", "message", "details", "retryable"}``)."""
    kind = _KINDS.get(str(data.get("kind")), ErrorKind.UNKNOWN)
    details = data.get("details")
    retryable = data.get("retryable")
    return Error(
        str(data.get("message", "")),
        kind=kind,
        retryable=retryable if isinstance(retryable, bool) else None,
        details=dict(details) if isinstance(details, Mapping) else None,
    )


@attrs.frozen
class Blocking:
    """A blocking call on the data directory; its return value is the step's outcome."""

    fn: Callable[[], Any]


@attrs.frozen
class Sleep:
    """A pause of ``seconds``."""

    seconds: float


Step = Http | Blocking | Sleep
Plan = Generator[Step, Any, T]


@attrs.frozen
class _Route:
    admin: Admin | None  # the admin API to ask, if any
    holder: int | None  # the OS pid holding the data directory, None when it is free


def _json(value: Any, what: str) -> Any:
    """``value`` if it travels as JSON, else Invalid naming what to send instead."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise invalid(
            f"{what} must be JSON data (None, bool, int, finite float, str, and lists and "
            f"dicts of them), as the admin API carries it: {exc} (a dataclass or pydantic "
            "model goes as its dict: dataclasses.asdict(v), v.model_dump(mode='json'))"
        ) from None
    return value


def _entry_id(entry: object) -> str:
    entry_id = getattr(entry, ENTRY_ATTR, None) if callable(entry) else entry
    if not isinstance(entry_id, str):
        raise invalid(
            f"an entry is an id like 'shop:order' or a function registered with the app "
            f"(@app.workflow), got {shown(entry)}"
        )
    return entry_id


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise invalid(f"{what} is a non-empty string, got {shown(value)}")
    return value


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _outcome(workflow_id: str, found: Mapping[str, Any]) -> Any:
    error = found.get("error")
    if isinstance(error, Mapping):
        raise error_from_json(error)
    if found.get("status") in ("completed", "canceled") or found.get("result") is not None:
        return found.get("result")
    status = found.get("status")
    raise Error(
        f"workflow {workflow_id!r} closed as {status} without a result",
        kind=ErrorKind.TIMEOUT if status == "timed_out" else ErrorKind.CANCELED,
        details={"workflow_id": workflow_id, "status": status},
    )


def checked_app(app: object) -> App | None:
    """``connect``'s ``app``: a ``roost.App`` or None.

    Raises:
        roost.Error: Invalid for anything else.
    """
    if app is None or isinstance(app, App):
        return app
    raise invalid(f"app is the roost.App whose entries type the results, got {shown(app)}")


def typed_by(app: App | None, workflow_id: str, workflow_type: object) -> Callable[..., Any] | None:
    """The entry function whose annotations type a result (None: its JSON data as is).

    The one ``start`` returned the id for (a ``WorkflowId``), else ``workflow_type``'s in
    ``app``.
    """
    entry = workflow_id.entry if isinstance(workflow_id, WorkflowId) else None
    if entry is not None or app is None or not isinstance(workflow_type, str):
        return entry
    try:
        return app.resolve(workflow_type).fn
    except Error:  # a type this app does not declare: its JSON data as is
        return None


class Core:
    """Every client request, as a plan; one per client, holding its target."""

    def __init__(
        self, *, admin: Admin | None = None, data_dir: Path | None = None, token: str | None = None
    ) -> None:
        """A core for an admin API (``admin``) or a data directory (``data_dir``).

        ``token``: for a data directory, the token of its node when not its own.
        """
        assert (admin is None) != (data_dir is None)
        self._admin = admin
        self._dir = data_dir
        self._token = token
        self._found: Admin | None = None  # the data directory's node, once checked
        self.app: App | None = None  # types the results of workflows named by id

    @property
    def target(self) -> str:
        """What the client talks to: the admin URL or the data directory."""
        return self._admin.url if self._admin is not None else str(self._dir)

    # -- routing -------------------------------------------------------------------------

    def _route(self) -> Plan[_Route]:
        if self._dir is None:
            return _Route(self._admin, None)
        holder = yield Blocking(partial(_local.lock_holder, self._dir))
        if holder is None:
            self._found = None
            return _Route(None, None)
        admin = _local.read_admin_file(self._dir, self._token)
        if admin is None or admin.pid != holder:
            return _Route(None, holder)
        if admin == self._found:  # the node checked before, still advertising the same API
            return _Route(admin, holder)
        if not (yield from self._answers_for(admin, holder)):
            return _Route(None, holder)
        self._found = admin
        return _Route(admin, holder)

    def _answers_for(self, admin: Admin, holder: int) -> Plan[bool]:
        """Whether ``admin`` is the API of process ``holder`` serving this data directory.

        A file left by a killed node names a URL nobody (or another program) answers.
        """
        assert self._dir is not None
        try:
            node = yield Http(admin, "GET", "/api/node", timeout=PROBE_TIMEOUT)
        except Error:
            return False
        return (
            isinstance(node, dict)
            and node.get("pid") == holder
            and _local.same_dir(node.get("data_dir"), self._dir)
        )

    def _ask(self, request: Http) -> Plan[Any]:
        try:
            return (yield request)
        except Error as exc:
            if exc.kind is ErrorKind.UNAVAILABLE and "http_status" not in exc.details:
                self._found = None  # it did not answer: look for the node again next time
            raise

    def _no_admin(self, holder: int, what: str) -> Error:
        here = " (this process)" if holder == os.getpid() else ""
        who = "an unknown process" if holder == _local.UNKNOWN_HOLDER else f"OS pid {holder}"
        return Error(
            f"cannot {what}: {who}{here} holds {self._dir} and serves no admin API for it "
            "(yet): a node that is starting or stopping, a node without an admin server, or "
            "a `roost` command writing a change. Try again once the node is up; a node "
            "without one needs a restart with `roost run ... --admin 127.0.0.1:0` (or "
            "open_node(..., admin=...))",
            kind=ErrorKind.UNAVAILABLE,
            retryable=True,
            details={"path": str(self._dir), "holder_pid": holder},
        )

    def _read(self, request: Callable[[Admin], Http], stored: Callable[..., Any]) -> Plan[Any]:
        """Read through the node's admin API, or from the store beside a node without one."""
        route = yield from self._route()
        if route.admin is not None:
            return (yield from self._ask(request(route.admin)))
        assert self._dir is not None
        if route.holder == os.getpid():  # one open of a store per process: the node's
            raise self._no_admin(route.holder, "read the store")
        found = yield Blocking(partial(_local.read_store, self._dir, stored))
        return to_jsonable(found)  # as the admin API renders it

    def _change(
        self,
        request: Callable[[Admin], Http],
        offline: Callable[..., Any],
        what: str,
        *,
        create: bool = False,
    ) -> Plan[Any]:
        """Change through the node's admin API, or in the store when no node runs."""
        for _ in range(_ROUTE_TRIES):
            route = yield from self._route()
            if route.admin is not None:
                return (yield from self._ask(request(route.admin)))
            if route.holder is not None:
                raise self._no_admin(route.holder, what)
            assert self._dir is not None
            try:
                return (
                    yield Blocking(partial(_local.change_store, self._dir, offline, create=create))
                )
            except Error as exc:
                if _local.held_by(exc) is None:
                    raise
                # A node (or a command) took the directory since the look: ask again.
        raise Error(
            f"cannot {what}: the data directory {self._dir} changed hands {_ROUTE_TRIES} "
            "times while this request looked for its node; try again",
            kind=ErrorKind.UNAVAILABLE,
            retryable=True,
            details={"path": str(self._dir)},
        )

    # -- workflows -----------------------------------------------------------------------

    def start(
        self, entry: object, args: tuple[Any, ...], options: dict[str, Any]
    ) -> Plan[WorkflowId[Any]]:
        """Start workflow ``entry`` with ``args``; the workflow id."""
        entry_id = _entry_id(entry)
        # Dataclasses, enums, NamedTuples and pydantic models travel as their plain data;
        # the entry's annotations rebuild them in the workflow.
        values = _json(plain_data(list(args)), f"the arguments of {entry_id!r}")
        asked = dict(options)
        workflow_id = asked.pop("id", None)
        if workflow_id is not None and not isinstance(workflow_id, str):
            raise invalid(f"id is a string, got {shown(workflow_id)}", option="id")
        # Checked here, before anything is sent or stored, as the command line checks.
        checked = workflow_offline.check_start(_CODEC, entry_id, values, workflow_id, asked)
        checked.pop("id", None)
        sent = _json(to_jsonable(checked), "the start options")
        body = {"entry": entry_id, "args": values, "id": workflow_id, "options": sent}

        def online(admin: Admin) -> Http:
            return Http(admin, "POST", "/api/workflows", body)

        def offline(txn: Any, codec: Codec) -> str:
            return workflow_offline.start_offline(
                txn, codec, entry_id, values, workflow_id=workflow_id, options=asked
            )

        answer = yield from self._change(online, offline, f"start {entry_id}", create=True)
        started = str(answer["workflow_id"]) if isinstance(answer, dict) else str(answer)
        return WorkflowId(started, entry if callable(entry) else None)

    def signal(self, workflow_id: str, topic: str, payload: Any) -> Plan[None]:
        """Send ``topic`` with ``payload`` to a running workflow (durable once returned)."""
        workflow_id = _text(workflow_id, "a workflow id")
        topic = _text(topic, "a message topic")
        body = {"topic": topic, "payload": _json(plain_data(payload), f"the payload of {topic!r}")}

        def online(admin: Admin) -> Http:
            return Http(admin, "POST", f"/api/workflows/{_quote(workflow_id)}/signal", body)

        def offline(txn: Any, codec: Codec) -> None:
            workflow_offline.signal_offline(txn, codec, workflow_id, topic, payload)

        yield from self._change(online, offline, f"signal workflow {workflow_id!r}")

    def call(
        self, workflow_id: str, topic: str, payload: Any, timeout: Duration | None
    ) -> Plan[Any]:
        """Send a request to a running workflow and wait for its reply."""
        workflow_id = _text(workflow_id, "a workflow id")
        topic = _text(topic, "a message topic")
        seconds = (
            CALL_TIMEOUT
            if timeout is None
            else parse_duration(timeout, what="call timeout", allow_zero=False)
        )
        body = {
            "topic": topic,
            "payload": _json(plain_data(payload), f"the payload of {topic!r}"),
            "timeout": seconds,
        }
        route = yield from self._route()
        if route.admin is None:
            if route.holder is not None:
                raise self._no_admin(route.holder, f"call workflow {workflow_id!r}")
            raise Error(
                f"cannot call workflow {workflow_id!r}: no node runs on {self._dir}, and a "
                "call needs one to reply (signal stores a message for the next node instead)",
                kind=ErrorKind.UNAVAILABLE,
                retryable=True,
                details={"path": str(self._dir), "workflow_id": workflow_id},
            )
        path = f"/api/workflows/{_quote(workflow_id)}/call"
        answer = yield from self._ask(
            Http(route.admin, "POST", path, body, timeout=seconds + MARGIN)
        )
        return answer["result"] if isinstance(answer, dict) else answer

    def result(self, workflow_id: str, timeout: Duration | None) -> Plan[Any]:
        """The workflow's result once it has closed, or its error raised."""
        workflow_id = _text(workflow_id, "a workflow id")
        seconds = None if timeout is None else parse_duration(timeout, what="result timeout")
        deadline = None if seconds is None else time.monotonic() + seconds
        path = f"/api/workflows/{_quote(workflow_id)}/result"
        delay = POLL_START
        while True:
            left = math.inf if deadline is None else max(deadline - time.monotonic(), 0.0)
            route = yield from self._route()
            if route.admin is not None:
                wait = min(left, LONG_POLL)
                params = {"wait": "1", "timeout": f"{wait:.3f}"}
                found = yield from self._ask(
                    Http(route.admin, "GET", path, params=params, timeout=wait + MARGIN)
                )
            else:
                found = yield from self._read(
                    lambda admin: Http(admin, "GET", path), _local.describe_of(workflow_id)
                )
            if not isinstance(found, dict) or found.get("status") != "running":
                found = found if isinstance(found, dict) else {}
                value = _outcome(workflow_id, found)
                kind = found.get("workflow_type")  # in a stored description, not the API's
                if (
                    kind is None
                    and self.app is not None
                    and not isinstance(workflow_id, WorkflowId)
                ):
                    kind = (yield from self.describe(workflow_id)).get("workflow_type")
                entry = typed_by(self.app, workflow_id, kind)
                return value if entry is None else result_of(entry, value)
            left = math.inf if deadline is None else deadline - time.monotonic()
            if route.admin is None and route.holder is None:
                raise self._open_timeout(workflow_id, "no node runs on its data directory")
            if left <= 0:
                raise self._open_timeout(workflow_id, f"it is still running after {seconds:g}s")
            if route.admin is None:  # a node without an admin API: look at its store again
                yield Sleep(min(delay, left))
                delay = min(delay * 2, POLL_MAX)

    def _open_timeout(self, workflow_id: str, why: str) -> Error:
        return Error(
            f"workflow {workflow_id!r} has no result yet: {why}; ask again later (a "
            "timeout=None waits for as long as it takes)",
            kind=ErrorKind.TIMEOUT,
            retryable=True,
            details={"workflow_id": workflow_id},
        )

    def describe(self, workflow_id: str) -> Plan[dict[str, Any]]:
        """What ``node.describe`` says of a workflow, as JSON data."""
        workflow_id = _text(workflow_id, "a workflow id")
        path = f"/api/workflows/{_quote(workflow_id)}"
        found = yield from self._read(
            lambda admin: Http(admin, "GET", path), _local.describe_of(workflow_id)
        )
        return dict(found)

    def list(self, query: str | None, status: str | None) -> Plan[list[dict[str, Any]]]:
        """The workflows (latest run of each id) matching ``query`` and ``status``."""
        combined = _inspect.with_status(query, status)  # Invalid here, for either target
        params = {"query": query or "", "status": status or ""}
        found = yield from self._read(
            lambda admin: Http(admin, "GET", "/api/workflows", params=params),
            _local.listed(combined),
        )
        return [dict(row) for row in found]

    def cancel(self, workflow_id: str, reason: str | None) -> Plan[None]:
        """Ask a running workflow to cancel."""
        workflow_id = _text(workflow_id, "a workflow id")
        if reason is not None and not isinstance(reason, str):
            raise invalid(f"a cancel reason is a string or None, got {shown(reason)}")

        def online(admin: Admin) -> Http:
            path = f"/api/workflows/{_quote(workflow_id)}/cancel"
            return Http(admin, "POST", path, {"reason": reason})

        def offline(txn: Any, codec: Codec) -> None:
            workflow_offline.cancel_offline(txn, codec, workflow_id, reason)

        yield from self._change(online, offline, f"cancel workflow {workflow_id!r}")

    def terminate(self, workflow_id: str) -> Plan[None]:
        """Stop a running workflow at once."""
        workflow_id = _text(workflow_id, "a workflow id")

        def online(admin: Admin) -> Http:
            return Http(admin, "POST", f"/api/workflows/{_quote(workflow_id)}/terminate", {})

        def offline(txn: Any, codec: Codec) -> None:
            workflow_offline.terminate_offline(txn, codec, workflow_id)

        yield from self._change(online, offline, f"terminate workflow {workflow_id!r}")

    # -- queues --------------------------------------------------------------------------

    def enqueue(self, queue: str, entry: object, payload: Any) -> Plan[str]:
        """Enqueue a call of ``entry`` with ``payload`` on ``queue``; the receipt id."""
        queue = _text(queue, "a queue name")
        entry_id = _entry_id(entry)
        body = {
            "entry": entry_id,
            "payload": _json(plain_data(payload), f"the payload for {queue!r}"),
        }

        def online(admin: Admin) -> Http:
            return Http(admin, "POST", f"/api/queues/{_quote(queue)}/messages", body)

        def offline(txn: Any, codec: Codec) -> str:
            return queue_offline.enqueue_offline(txn, codec, queue, entry_id, payload)

        answer = yield from self._change(online, offline, f"enqueue on {queue!r}", create=True)
        return str(answer["receipt_id"]) if isinstance(answer, dict) else str(answer)
