"""The Host / Origin checks and the JSON content types, pure (no server)."""

import cbor2
import pytest

from roost import Error
from roost.queues._http import Request, _request_v2
from roost.queues._http_guard import HostGuard, is_json_type, parse_allowed_hosts
from roost.storage import Codec


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost", True),
        ("LOCALHOST:1", True),
        ("[::1]:8000", True),
        ("10.0.0.5:8000", True),  # the bound address
        ("evil.example", False),
        ("127.0.0.1.evil.example", False),
        ("[::2]:8000", False),
    ],
)
def test_the_default_hosts_are_loopback_and_the_bound_address(host, allowed):
    refusal = HostGuard("10.0.0.5").check("GET", {"host": host}, "http")
    assert (refusal is None) is allowed
    if refusal is not None:
        assert refusal.status == 421


def test_an_ipv6_bound_address_is_bracketed():
    guard = HostGuard("::1")
    assert guard.check("GET", {"host": "[::1]:9"}, "http") is None


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "localhost:9", "origin": "http://localhost:9"}, None),
        ({"host": "localhost:9", "origin": "http://localhost:8"}, 403),  # another port
        ({"host": "localhost:9", "origin": "https://localhost:9"}, 403),  # another scheme
        ({"host": "localhost:9", "origin": "null"}, 403),
        ({"host": "localhost:9", "sec-fetch-site": "same-site"}, 403),
        ({"host": "localhost:9", "sec-fetch-site": "same-origin"}, None),
        ({"host": "localhost:9", "sec-fetch-site": "none"}, None),
        ({"host": "localhost:9"}, None),  # not a browser
    ],
)
def test_a_change_from_another_origin_is_403(headers, status):
    guard = HostGuard("127.0.0.1")
    refusal = guard.check("POST", headers, "http")
    assert (refusal.status if refusal else None) == status
    assert guard.check("GET", headers, "http") is None  # reads are not changes


def test_allowed_hosts_entries():
    assert parse_allowed_hosts(None) is None
    assert parse_allowed_hosts(["A.example", "b:80"]) == ("a.example", "b:80")
    for bad in ("a.example", [""], [3], ["a b"], ["http://a"]):
        with pytest.raises(Error):
            parse_allowed_hosts(bad)


@pytest.mark.parametrize(
    ("value", "json"),
    [
        ("application/json", True),
        ("Application/JSON; charset=utf-8", True),
        ("application/problem+json", True),
        ("text/plain", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("text/json", False),
        (None, False),
    ],
)
def test_json_content_types(value, json):
    assert is_json_type(value) is json


def test_a_version_1_request_reads_as_version_2():
    # A request stored before the Content-Type check (e.g. a workflow's input): tag 39003.
    stored = {
        "method": "GET",
        "path": "/o",
        "path_params": {},
        "_query": [],
        "_headers": [["x", "1"]],
        "json": {"k": 2},
        "body": b"",
        "route": "/o",
    }
    old = Codec().decode(cbor2.dumps(cbor2.CBORTag(39003, ["roost.http.request", 1, stored])))
    assert (old.json, old.headers["x"]) == ({"k": 2}, "1")
    assert _request_v2(2, {"a": 1}) == {"a": 1}
    request = Request(method="POST", path="/", body=b"x", refused_type="text/plain")
    with pytest.raises(Error) as raised:
        _ = request.json
    assert raised.value.details["http_status"] == 415
    assert request.body == b"x"
