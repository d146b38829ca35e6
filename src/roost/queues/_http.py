"""HTTP triggers, the sans-IO part: routes, request and response values, error mapping.

Nothing here does I/O: ``_http_server`` feeds it what hypercorn hands the ASGI app and
sends back what it returns. The pieces:

- ``Headers`` / ``QueryParams``: read-only string mappings (headers case-insensitive) that
  keep repeated names (``get_all``);
- ``Request`` / ``Response``: the values a handler receives and may return; both are codec
  records, so a workflow can take a request as its input and return a response;
- ``Router``: the routes of one app, path templates with ``{name}`` parameters, matching
  with 404 / 405 answers; ``declare_http`` is ``App.http`` and ``check_routes`` is its part
  of ``App.validate``;
- ``read_json`` / ``render`` / ``error_response``: the body in, the value out, and roost
  error kinds as HTTP statuses. A body is refused (400, before any handler runs) unless it
  is UTF-8 JSON that roost can store as it is: at most ``MAX_JSON_DEPTH`` levels deep, no
  lone surrogate escapes, numbers a float or an int can hold.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import attrs

from roost._errors import Error, ErrorKind, escaped, invalid
from roost._pid import Pid
from roost.actors._app import (
    ENTRY_ATTR,
    App,
    Entry,
    EntryKind,
    register_app_check,
    register_extension,
)
from roost.queues._http_body import MAX_JSON_DEPTH, read_json
from roost.storage._codec import record

__all__ = [
    "MAX_BODY",
    "MAX_JSON_DEPTH",
    "METHODS",
    "Headers",
    "Match",
    "QueryParams",
    "Rendered",
    "Request",
    "Response",
    "Route",
    "Router",
    "check_routes",
    "declare_http",
    "error_response",
    "read_json",
    "render",
    "routes_of",
    "status_for",
    "unsupported_type",
]

METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
MAX_BODY: Final = 16 * 1024 * 1024
"""The largest request body accepted (bytes); a larger one is refused with 413."""

_STATUS: Final[Mapping[ErrorKind, int]] = {
    ErrorKind.INVALID: 400,
    ErrorKind.PERMISSION_DENIED: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.ALREADY_EXISTS: 409,
    ErrorKind.CONFLICT: 409,
    ErrorKind.RATE_LIMITED: 429,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.TIMEOUT: 504,
}
_HANDLER_KINDS: Final = (EntryKind.ACTIVITY, EntryKind.PROCESS, EntryKind.WORKFLOW)
_AUTH_KINDS: Final = (EntryKind.ACTIVITY, EntryKind.PROCESS)
_PARAM: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_BAD_PATH_CHARS: Final = frozenset("?#%\\ \t\r\n")
_NO_BODY_STATUSES: Final = frozenset({204, 304})


# -- string mappings --------------------------------------------------------------------


class _MultiMap(Mapping[str, str]):
    """A read-only str -> str mapping that keeps every value of a repeated name.

    ``m[name]`` is the first value, ``m.get_all(name)`` every value in order.
    """

    __slots__ = ("_pairs", "_values")

    def __init__(self, pairs: Iterable[tuple[str, str]] | Mapping[str, str] = ()) -> None:
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        self._pairs = tuple((self._fold(str(k)), str(v)) for k, v in items)
        values: dict[str, list[str]] = {}
        for name, value in self._pairs:
            values.setdefault(name, []).append(value)
        self._values = values

    @staticmethod
    def _fold(name: str) -> str:
        return name

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """Every (name, value) pair, in the order received."""
        return self._pairs

    def get_all(self, name: str) -> list[str]:
        """Every value given for ``name``, in order (an empty list if none)."""
        return list(self._values.get(self._fold(name), ()))

    def __getitem__(self, name: str) -> str:
        return self._values[self._fold(name)][0]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._fold(name) in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self._pairs)!r})"


class Headers(_MultiMap):
    """Request headers: a read-only mapping with case-insensitive names (kept lowercase)."""

    __slots__ = ()

    @staticmethod
    def _fold(name: str) -> str:
        return name.lower()


class QueryParams(_MultiMap):
    """Query string parameters: a read-only mapping (``?a=1&a=2``: ``["a"] == "1"``)."""

    __slots__ = ()


def _header_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    return Headers(value).pairs


def _query_pairs(value: Any) -> tuple[tuple[str, str], ...]:
    return QueryParams(value).pairs


def _str_dict(value: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (value or {}).items()}


# -- request and response -----------------------------------------------------------------


def _request_v2(version: int, fields: dict[str, Any]) -> dict[str, Any]:
    # Version 1 stored the parsed body as "json" and had no content-type refusal.
    if version < 2:
        fields = dict(fields)
        fields["_json"] = fields.pop("json", None)
        fields.setdefault("_refused_type", None)
    return fields


def unsupported_type(content_type: str | None) -> Error:
    """The 415 error for reading ``.json`` of a body whose Content-Type is not JSON."""
    shown_type = "no Content-Type" if content_type is None else repr(content_type[:100])
    return Error(
        f"this route reads a JSON body, and the request has {shown_type}: send the body "
        "with 'Content-Type: application/json'",
        kind=ErrorKind.INVALID,
        retryable=False,
        details={"http_status": 415, "content_type": content_type},
    )


@record("roost.http.request", version=2, migrate=_request_v2)
@attrs.frozen(kw_only=True)
class Request:
    """What an HTTP trigger's entry is called with.

    Attributes:
        method: the HTTP method, upper case ("POST").
        path: the request path, percent-decoded ("/orders/42").
        path_params: the values of the route's ``{name}`` segments.
        query: the query string parameters (``QueryParams``, a string mapping).
        headers: the request headers (``Headers``, a case-insensitive string mapping).
        json: the parsed JSON body; None when the request has no body. Reading it for a
            body whose Content-Type is not JSON raises ``roost.Error`` (kind Invalid,
            answered 415): a browser page of another origin can send ``text/plain`` without
            a preflight, never ``application/json``.
        body: the raw body bytes (e.g. to check a webhook signature); readable whatever
            the Content-Type.
        route: the path template that matched ("/orders/{id}").
    """

    method: str
    path: str
    path_params: dict[str, str] = attrs.field(factory=dict, converter=_str_dict)
    _query: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=_query_pairs, alias="query"
    )
    _headers: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=_header_pairs, alias="headers"
    )
    _json: Any = attrs.field(default=None, alias="json")
    body: bytes = b""
    route: str = ""
    _refused_type: str | None = attrs.field(default=None, alias="refused_type")

    @property
    def json(self) -> Any:
        """The parsed JSON body (None without a body).

        Raises:
            roost.Error: kind Invalid (the server answers 415) when the body's Content-Type
                is not JSON.
        """
        if self._refused_type is not None:
            raise unsupported_type(self._refused_type or None)
        return self._json

    @property
    def query(self) -> QueryParams:
        """The query string parameters; repeated names via ``query.get_all(name)``."""
        return QueryParams(self._query)

    @property
    def headers(self) -> Headers:
        """The headers, names case-insensitive; repeated ones via ``headers.get_all(name)``."""
        return Headers(self._headers)


def _check_status(_inst: Any, _attr: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 100 <= value <= 599:
        raise invalid(f"an HTTP status is an int from 100 to 599, got {value!r}")


def _response_headers(value: Mapping[str, Any] | None) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise invalid(f"response headers are a mapping of str to str, got {value!r}")
    headers: dict[str, str] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise invalid(f"response headers are str -> str, got {name!r}: {text!r}")
        if not name or any(ch in name for ch in ":\r\n \t") or any(ch in text for ch in "\r\n"):
            raise invalid(f"invalid response header {name!r}: {text!r}", header=name)
        headers[name] = text
    return headers


@record("roost.http.response")
@attrs.frozen
class Response:
    """A handler's answer when a plain value (sent as JSON with status 200) is not enough.

    Args:
        status: the HTTP status code.
        body: sent as JSON, except bytes (sent as they are, ``application/octet-stream``
            unless a content-type header says otherwise) and None (no body).
        headers: extra response headers.

    Raises:
        roost.Error: kind Invalid for a status outside 100-599, a body on a 204 or 304,
            or headers that are not str -> str.
    """

    status: int = attrs.field(validator=_check_status)
    body: Any = None
    headers: dict[str, str] | None = attrs.field(default=None, converter=_response_headers)

    def __attrs_post_init__(self) -> None:
        if self.body is not None and (self.status in _NO_BODY_STATUSES or self.status < 200):
            raise invalid(f"a {self.status} response has no body; pass body=None")


# -- routes -------------------------------------------------------------------------------


@attrs.frozen
class Route:
    """One declared trigger: ``method`` on ``path`` runs the entry ``entry`` (an id).

    ``auth``: the id of the entry that checks each request first (None: no check).
    """

    method: str
    path: str
    entry: str
    segments: tuple[str | None, ...]  # None where a parameter sits: routes of one shape collide
    params: tuple[str, ...]
    auth: str | None = None


@attrs.frozen
class Match:
    """What the router found: a route and its parameters, or the methods the path allows.

    ``route`` None and ``allowed`` empty means no such path (404); ``allowed`` non-empty
    means the path exists for other methods (405).
    """

    route: Route | None
    params: dict[str, str] = attrs.field(factory=dict)
    allowed: tuple[str, ...] = ()


def _split(path: str) -> list[str]:
    # "/" is the root; a trailing slash is ignored ("/orders/" is "/orders").
    return [] if path == "/" else path.rstrip("/").split("/")[1:]


def _compile(path: object) -> tuple[tuple[str | None, ...], tuple[str, ...]]:
    if not isinstance(path, str) or not path.startswith("/"):
        raise invalid(f"an HTTP route path starts with '/', got {path!r}", path=str(path))
    bad = sorted({ch for ch in path if ch in _BAD_PATH_CHARS})
    if bad:
        raise invalid(f"HTTP route path {path!r} must not contain {''.join(bad)!r}", path=path)
    segments: list[str | None] = []
    params: list[str] = []
    for part in _split(path):
        if not part:
            raise invalid(f"HTTP route path {path!r} has an empty segment ('//')", path=path)
        found = _PARAM.fullmatch(part)
        if found is not None:
            name = found.group(1)
            if name in params:
                raise invalid(f"HTTP route path {path!r} repeats parameter {name!r}", path=path)
            params.append(name)
            segments.append(None)
        elif "{" in part or "}" in part:
            raise invalid(
                f"HTTP route path {path!r}: a parameter is a whole segment like "
                f"'{{id}}' (a Python identifier), got {part!r}",
                path=path,
            )
        else:
            segments.append(part)
    return tuple(segments), tuple(params)


class Router:
    """The HTTP routes of one app; matching is pure (no I/O), so it is tested alone.

    A more specific route wins: at the first segment where two matching routes differ,
    a literal beats a parameter (``/orders/stats`` before ``/orders/{id}``). ``HEAD`` is
    served by the ``GET`` route unless one is declared for it.
    """

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        self._routes: list[Route] = list(routes)

    @property
    def routes(self) -> tuple[Route, ...]:
        """Every route, in declaration order."""
        return tuple(self._routes)

    def add(self, method: object, path: object, entry_id: str, auth: str | None = None) -> Route:
        """Add a route for ``entry_id``.

        Raises:
            roost.Error: kind Invalid for an unknown method, a bad path or a duplicate.
        """
        if not isinstance(method, str) or method.upper() not in METHODS:
            raise invalid(
                f"unknown HTTP method {method!r}; use one of {', '.join(METHODS)}",
                method=str(method),
            )
        verb = method.upper()
        segments, params = _compile(path)
        assert isinstance(path, str)
        for other in self._routes:
            if other.method == verb and other.segments == segments:
                raise invalid(
                    f"HTTP route {verb} {path} is already declared (as {verb} {other.path} "
                    f"-> {other.entry}); each method and path takes one entry",
                    method=verb,
                    path=path,
                )
        route = Route(
            method=verb, path=path, entry=entry_id, segments=segments, params=params, auth=auth
        )
        self._routes.append(route)
        return route

    def match(self, method: str, segments: list[str]) -> Match:
        """Find the route for ``method`` on a path given as its decoded segments."""
        found: list[tuple[tuple[int, ...], Route, dict[str, str]]] = []
        allowed: set[str] = set()
        for route in self._routes:
            params = _bind(route, segments)
            if params is None:
                continue
            allowed.add(route.method)
            found.append((_rank(route), route, params))
        if "GET" in allowed:
            allowed.add("HEAD")
        verbs = (method, "GET") if method == "HEAD" else (method,)
        for verb in verbs:
            hits = [hit for hit in found if hit[1].method == verb]
            if hits:
                _, route, params = min(hits, key=lambda hit: hit[0])
                return Match(route, params, tuple(sorted(allowed)))
        return Match(None, {}, tuple(sorted(allowed)))

    def match_path(self, method: str, path: str) -> Match:
        """``match`` for a decoded path string (no ``%2F`` inside a segment)."""
        return self.match(method, _split(path) if path.startswith("/") else [])


def _bind(route: Route, segments: list[str]) -> dict[str, str] | None:
    if len(route.segments) != len(segments):
        return None
    values: list[str] = []
    for want, got in zip(route.segments, segments, strict=True):
        if want is None:
            if not got:
                return None
            values.append(got)
        elif want != got:
            return None
    return dict(zip(route.params, values, strict=True))


def _rank(route: Route) -> tuple[int, ...]:
    return tuple(1 if part is None else 0 for part in route.segments)


# -- app.http and app.validate ------------------------------------------------------------


def routes_of(app: App) -> Router:
    """A router over ``app``'s HTTP routes (kept in ``app.declared["http"]``)."""
    return Router(app.declared.get("http", {}).values())


def _entry_id(app: App, entry: object) -> str:
    if isinstance(entry, Entry):
        return entry.id
    if callable(entry):
        entry_id = getattr(entry, ENTRY_ATTR, None)
        if not isinstance(entry_id, str):
            name = getattr(entry, "__qualname__", entry)
            raise invalid(
                f"{name!r} is not a registered entry: decorate it with @app.activity, "
                "@app.process or @app.workflow before declaring a route to it"
            )
        return entry_id
    if isinstance(entry, str) and ":" in entry:
        return entry
    raise invalid(
        f"an HTTP route's entry is an id like '{app.name}:handler' or a registered "
        f"function, got {entry!r}"
    )


# Per role of an entry a route names: the kinds it may be, how a message names it, and
# what the kinds are (said when the entry is of another kind).
_ROLES: Final = {
    "handler": (
        _HANDLER_KINDS,
        "runs unknown entry",
        "a route runs an activity, a process or a workflow",
    ),
    "auth": (
        _AUTH_KINDS,
        "names unknown auth entry",
        "an auth entry is an activity or a process (it answers before anything durable starts)",
    ),
}


def _check_named(app: App, route: str, entry_id: str, role: str, *, known_only: bool) -> None:
    """Refuse a route whose ``role`` entry is unknown (unless ``known_only``) or of a wrong kind."""
    kinds, unknown, allowed = _ROLES[role]
    found = app.entries.get(entry_id)
    if found is None:
        if known_only:
            return
        known = ", ".join(sorted(app.entries)) or "none"
        raise invalid(
            f"HTTP route {route} {unknown} {entry_id!r}; registered entries: {known}",
            entry=entry_id,
        )
    if found.kind not in kinds:
        what = "the auth entry " if role == "auth" else ""
        raise invalid(
            f"HTTP route {route}: {what}{entry_id!r} is a {found.kind.value}; {allowed}",
            entry=entry_id,
        )


def declare_http(
    app: App, method: object, path: object, entry: object, auth: object = None
) -> Route:
    """``App.http``: declare that ``method path`` runs ``entry`` with a ``Request``.

    ``auth``: an activity or process entry called with the ``Request`` before the handler;
    it returns the ``security.Actor`` the handler runs as (or an ``(Actor, Scope)`` pair), or
    raises
    ``PermissionDenied`` (401; 403 with ``details={"status": 403}``) and the handler never
    runs. An entry given by id may be registered later; ``app.validate()`` (run by
    ``open_node``) checks it then.

    Raises:
        roost.Error: kind Invalid for an unknown method, a bad or duplicate path, or an
            entry that is not an activity, process or workflow (an auth entry: not an
            activity or process).
    """
    entry_id = _entry_id(app, entry)
    # By id, the entry may be registered after the route: validate() checks it then.
    _check_named(app, f"{method} {path}", entry_id, "handler", known_only=isinstance(entry, str))
    auth_id = None if auth is None else _entry_id(app, auth)
    if auth_id is not None:
        _check_named(app, f"{method} {path}", auth_id, "auth", known_only=isinstance(auth, str))
    route = routes_of(app).add(method, path, entry_id, auth_id)  # Invalid for a duplicate
    app.declared.setdefault("http", {})[f"{route.method} {route.path}"] = route
    return route


def check_routes(app: App) -> None:
    """``App.validate``'s HTTP part: every route names a registered handler entry.

    Raises:
        roost.Error: kind Invalid naming the first bad route.
    """
    for route in app.declared.get("http", {}).values():
        _check_named(app, f"{route.method} {route.path}", route.entry, "handler", known_only=False)
        if route.auth is not None:
            _check_named(app, f"{route.method} {route.path}", route.auth, "auth", known_only=False)


# -- bodies and statuses ------------------------------------------------------------------


def status_for(kind: ErrorKind) -> int:
    """The HTTP status for an error kind (500 for kinds without a closer match)."""
    return _STATUS.get(kind, 500)


@attrs.frozen
class Rendered:
    """A response ready for the wire: status, headers (bytes pairs) and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def error_response(
    err: Error, *, status: int | None = None, headers: Mapping[str, str] | None = None
) -> Rendered:
    """The JSON error answer ``{"error": {"kind": ..., "message": ...}}`` for ``err``.

    The status is ``status_for(err.kind)`` unless ``status`` is given; never a traceback.
    """
    message = err.message if isinstance(err.message, str) else repr(err.message)
    payload = {"error": {"kind": err.kind.value, "message": escaped(message)}}
    return _json(status if status is not None else status_for(err.kind), payload, headers or {})


def _json(status: int, value: Any, extra: Mapping[str, str]) -> Rendered:
    try:
        body = json.dumps(value, default=_to_json, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise Error(
            f"the handler's result cannot be sent as JSON: {escaped(str(exc))}",
            kind=ErrorKind.INTERNAL,
            retryable=False,
        ) from exc
    # A lone surrogate (from a request's JSON, say) goes out as its JSON escape (\udXXX).
    return _rendered(status, body.encode("utf-8", "backslashreplace"), "application/json", extra)


def _rendered(
    status: int, body: bytes, content_type: str | None, extra: Mapping[str, str]
) -> Rendered:
    headers: list[tuple[bytes, bytes]] = []
    names = {name.lower() for name in extra}
    if content_type is not None and "content-type" not in names:
        headers.append((b"content-type", content_type.encode("latin-1")))
    for name, text in extra.items():
        if name.lower() not in ("content-length", "transfer-encoding"):
            headers.append((name.lower().encode("latin-1"), text.encode("latin-1")))
    if status >= 200 and status not in _NO_BODY_STATUSES:
        headers.append((b"content-length", str(len(body)).encode()))
    return Rendered(status, headers, body)


def render(value: Any) -> Rendered:
    """Turn a handler's result into a response: a ``Response`` as it says, else JSON 200.

    JSON takes what ``json`` does, plus datetimes and UUIDs (as ISO / hex strings), PIDs
    (as their string), attrs instances (as objects) and other mappings.

    Raises:
        roost.Error: kind Internal for a value that cannot be sent as JSON.
    """
    if not isinstance(value, Response):
        return _json(200, value, {})
    extra = value.headers or {}
    if value.body is None:
        return _rendered(value.status, b"", None, extra)
    if isinstance(value.body, bytes):
        return _rendered(value.status, value.body, "application/octet-stream", extra)
    return _json(value.status, value.body, extra)


def _to_json(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID | Pid):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, set | frozenset):
        return list(value)
    if attrs.has(type(value)):
        return attrs.asdict(value, recurse=False)
    raise TypeError(f"object of type {type(value).__name__!r} is not JSON serializable")


register_extension("http", declare_http)
register_app_check(check_routes)
