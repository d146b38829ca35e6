"""HTTP triggers without a server: routes, matching, request/response values, error mapping."""

import datetime as dt
import json
import uuid

import pytest

import roost
from roost import ErrorKind
from roost.http import Request, Response
from roost.queues._http import (
    Headers,
    QueryParams,
    Router,
    error_response,
    read_json,
    render,
    status_for,
)
from roost.queues._http_server import parse_bind, parse_query, split_raw_path
from roost.storage import Codec


def router(*routes: tuple[str, str]) -> Router:
    r = Router()
    for method, path in routes:
        r.add(method, path, f"app:{method.lower()}_{len(r.routes)}")
    return r


# -- matching ------------------------------------------------------------------------------


def test_static_and_parameter_routes():
    r = router(("GET", "/"), ("GET", "/orders"), ("GET", "/orders/{id}/items/{item}"))
    assert r.match_path("GET", "/").route.path == "/"
    assert r.match_path("GET", "/orders").route.path == "/orders"
    found = r.match_path("GET", "/orders/o-1/items/7")
    assert found.route.path == "/orders/{id}/items/{item}"
    assert found.params == {"id": "o-1", "item": "7"}


def test_trailing_slash_is_ignored():
    r = router(("GET", "/orders/"))
    assert r.match_path("GET", "/orders").route is not None
    assert r.match_path("GET", "/orders/").route is not None


def test_a_literal_segment_beats_a_parameter():
    r = router(("GET", "/orders/{id}"), ("GET", "/orders/stats"), ("GET", "/{kind}/stats"))
    assert r.match_path("GET", "/orders/stats").route.path == "/orders/stats"
    assert r.match_path("GET", "/orders/42").route.path == "/orders/{id}"
    assert r.match_path("GET", "/users/stats").params == {"kind": "users"}


def test_a_less_specific_route_serves_a_method_the_specific_one_lacks():
    r = router(("POST", "/orders/new"), ("GET", "/orders/{id}"))
    assert r.match_path("GET", "/orders/new").route.path == "/orders/{id}"
    assert r.match_path("POST", "/orders/new").route.path == "/orders/new"


def test_unknown_path_is_404_and_other_method_is_405():
    r = router(("GET", "/orders/{id}"), ("DELETE", "/orders/{id}"))
    nothing = r.match_path("GET", "/customers/1")
    assert nothing.route is None and nothing.allowed == ()
    wrong = r.match_path("POST", "/orders/1")
    assert wrong.route is None
    assert wrong.allowed == ("DELETE", "GET", "HEAD")
    # A parameter never matches an empty segment, and segment counts must agree.
    assert r.match_path("GET", "/orders/1/extra").allowed == ()


def test_head_uses_the_get_route_unless_declared():
    r = router(("GET", "/a"), ("GET", "/b"), ("HEAD", "/b"))
    assert r.match_path("HEAD", "/a").route.method == "GET"
    assert r.match_path("HEAD", "/b").route.method == "HEAD"


def test_raw_paths_are_split_before_decoding():
    assert split_raw_path(b"/") == []
    assert split_raw_path(b"/orders/a%2Fb/x%20y/") == ["orders", "a/b", "x y"]
    assert split_raw_path("/caf\u00e9".encode()) == ["caf\u00e9"]
    assert split_raw_path(b"/caf%C3%A9") == ["caf\u00e9"]


def test_query_strings():
    assert parse_query(b"a=1&a=2&b=&c=%20x") == [("a", "1"), ("a", "2"), ("b", ""), ("c", " x")]
    with pytest.raises(roost.Error) as info:
        parse_query(b"&".join(b"k=v" for _ in range(1001)))
    assert info.value.kind is ErrorKind.INVALID


# -- declarations --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("FETCH", "/x"),
        (None, "/x"),
        ("GET", "x"),
        ("GET", ""),
        ("GET", 5),
        ("GET", "/a//b"),
        ("GET", "/a?b=1"),
        ("GET", "/a b"),
        ("GET", "/a/{b"),
        ("GET", "/a/x{b}"),
        ("GET", "/a/{1b}"),
        ("GET", "/a/{b}/{b}"),
    ],
)
def test_bad_routes_are_invalid(method, path):
    with pytest.raises(roost.Error) as info:
        Router().add(method, path, "app:x")
    assert info.value.kind is ErrorKind.INVALID


def test_duplicates_are_invalid_even_under_other_parameter_names():
    r = router(("GET", "/orders/{id}"))
    with pytest.raises(roost.Error) as info:
        r.add("get", "/orders/{order_id}", "app:other")
    assert info.value.kind is ErrorKind.INVALID
    r.add("delete", "/orders/{order_id}", "app:other")  # another method is fine
    assert [route.method for route in r.routes] == ["GET", "DELETE"]


def make_app() -> roost.App:
    app = roost.App("app")

    @app.activity
    def handler(req: Request) -> str:
        return "ok"

    @app.process
    async def proc(req: Request) -> str:
        return "ok"

    @app.workflow
    async def flow(req: Request) -> str:
        return "ok"

    app.supervisor("sup", children=[])
    return app


def test_app_http_accepts_activities_processes_and_workflows():
    app = make_app()
    route = app.http("post", "/a", app.entries["app:handler"].fn)
    assert (route.method, route.entry) == ("POST", "app:handler")
    app.http("POST", "/b/{id}", "app:proc")
    app.http("POST", "/c", app.entries["app:flow"])
    app.validate()


def test_app_http_refuses_bad_declarations():
    app = make_app()
    app.http("GET", "/a", "app:handler")

    def unregistered(req: Request) -> None: ...

    attempts = [
        lambda: app.http("FETCH", "/a", "app:handler"),
        lambda: app.http("GET", "a", "app:handler"),
        lambda: app.http("GET", "/a", "app:proc"),  # duplicate method + path
        lambda: app.http("GET", "/s", "app:sup"),  # a supervisor cannot serve requests
        lambda: app.http("GET", "/u", unregistered),
        lambda: app.http("GET", "/n", "no-colon"),
        lambda: app.http("GET", "/n", 42),
    ]
    for attempt in attempts:
        with pytest.raises(roost.Error) as info:
            attempt()
        assert info.value.kind is ErrorKind.INVALID
    assert len(app.declared["http"]) == 1  # nothing bad was stored


def test_an_entry_by_id_is_checked_by_validate():
    app = make_app()
    app.http("GET", "/later", "app:later")  # may be registered after the route

    with pytest.raises(roost.Error) as info:
        app.validate()
    assert info.value.kind is ErrorKind.INVALID
    assert "app:later" in info.value.message

    @app.activity
    def later(req: Request) -> str:
        return "here"

    app.validate()


# -- values --------------------------------------------------------------------------------


def test_headers_are_case_insensitive_and_keep_repeats():
    headers = Headers([("Content-Type", "application/json"), ("X-A", "1"), ("x-a", "2")])
    assert headers["content-type"] == headers["CONTENT-TYPE"] == "application/json"
    assert "X-a" in headers and "nope" not in headers
    assert headers.get_all("X-A") == ["1", "2"]
    assert headers == {"content-type": "application/json", "x-a": "1"}
    assert len(headers) == 2
    assert headers.get("missing") is None


def test_query_params_are_case_sensitive():
    query = QueryParams([("a", "1"), ("A", "2"), ("a", "3")])
    assert query["a"] == "1" and query["A"] == "2"
    assert query.get_all("a") == ["1", "3"]


def test_request_round_trips_through_the_codec():
    request = Request(
        method="POST",
        path="/orders/1",
        path_params={"id": "1"},
        query=[("tag", "a"), ("tag", "b")],
        headers={"X-Trace": "t"},
        json={"n": [1, 2.5, None]},
        body=b'{"n": [1, 2.5, null]}',
        route="/orders/{id}",
    )
    codec = Codec()
    back = codec.decode(codec.encode(request))
    assert back == request
    assert back.headers["x-trace"] == "t"
    assert back.query.get_all("tag") == ["a", "b"]


def test_response_round_trips_and_validates():
    codec = Codec()
    response = Response(201, {"id": 1}, {"Location": "/x"})
    assert codec.decode(codec.encode(response)) == response
    assert Response(204).body is None
    for bad in (
        lambda: Response(99),
        lambda: Response(600),
        lambda: Response(True),
        lambda: Response(204, {"x": 1}),
        lambda: Response(200, None, {"x": 1}),
        lambda: Response(200, None, {"x-a": "1\r\nSet-Cookie: a=b"}),
    ):
        with pytest.raises(roost.Error) as info:
            bad()
        assert info.value.kind is ErrorKind.INVALID


def test_read_json():
    assert read_json(b"") is None
    assert read_json(b"  \n") is None
    assert read_json(b'{"a": [1, "\\u00e9"]}') == {"a": [1, "\u00e9"]}
    for bad in (b"{", b"NaN", b'{"a": Infinity}', b"\xff\xfe\x00"):
        with pytest.raises(roost.Error) as info:
            read_json(bad)
        assert info.value.kind is ErrorKind.INVALID


def test_render_values_and_responses():
    plain = render({"at": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "id": uuid.UUID(int=1)})
    assert plain.status == 200
    assert (b"content-type", b"application/json") in plain.headers
    assert json.loads(plain.body) == {
        "at": "2026-01-02T00:00:00+00:00",
        "id": "00000000-0000-0000-0000-000000000001",
    }
    assert render(None).body == b"null"
    raw = render(Response(200, b"\x00\x01"))
    assert raw.body == b"\x00\x01"
    assert (b"content-type", b"application/octet-stream") in raw.headers
    custom = render(Response(200, b"hi", {"Content-Type": "text/plain", "Content-Length": "99"}))
    assert (b"content-type", b"text/plain") in custom.headers
    assert (b"content-length", b"2") in custom.headers
    assert (b"content-length", b"99") not in custom.headers
    empty = render(Response(204))
    assert empty.body == b"" and not any(name == b"content-length" for name, _ in empty.headers)
    for bad in ({"x": float("nan")}, {"x": object()}, {"x": b"bytes"}):
        with pytest.raises(roost.Error) as info:
            render(bad)
        assert info.value.kind is ErrorKind.INTERNAL


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        (ErrorKind.INVALID, 400),
        (ErrorKind.NOT_FOUND, 404),
        (ErrorKind.PERMISSION_DENIED, 403),
        (ErrorKind.ALREADY_EXISTS, 409),
        (ErrorKind.CONFLICT, 409),
        (ErrorKind.RATE_LIMITED, 429),
        (ErrorKind.UNAVAILABLE, 503),
        (ErrorKind.TIMEOUT, 504),
        (ErrorKind.INTERNAL, 500),
        (ErrorKind.UNKNOWN, 500),
        (ErrorKind.CANCELED, 500),
        (ErrorKind.LIMIT_EXCEEDED, 500),
        (ErrorKind.INVALID_STATE, 500),
    ],
)
def test_error_kinds_map_to_statuses(kind, status):
    assert status_for(kind) == status
    answer = error_response(roost.Error("what went wrong", kind=kind, details={"secret": 1}))
    assert answer.status == status
    assert json.loads(answer.body) == {"error": {"kind": kind.value, "message": "what went wrong"}}


def test_error_response_never_carries_a_traceback():
    try:
        raise ValueError("boom")
    except ValueError as exc:
        err = roost.Error.from_exception(exc)
    answer = error_response(err)
    assert answer.status == 500
    assert json.loads(answer.body) == {"error": {"kind": "Internal", "message": "ValueError: boom"}}


@pytest.mark.parametrize(
    ("value", "bind"),
    [
        (None, None),
        (False, None),
        (True, ("127.0.0.1", 0)),
        (8080, ("127.0.0.1", 8080)),
        ("8080", ("127.0.0.1", 8080)),
        (":0", ("127.0.0.1", 0)),
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),  # asked for explicitly
        ("localhost:9000", ("localhost", 9000)),
        ("[::1]:8000", ("::1", 8000)),
    ],
)
def test_parse_bind(value, bind):
    assert parse_bind(value) == bind


@pytest.mark.parametrize(
    "value", ["", "host", "::1:80", "127.0.0.1:", "127.0.0.1:http", 70000, -1, 1.5, "a b:1"]
)
def test_parse_bind_refuses(value):
    with pytest.raises(roost.Error) as info:
        parse_bind(value)
    assert info.value.kind is ErrorKind.INVALID
