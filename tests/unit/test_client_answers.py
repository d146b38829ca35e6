"""How the clients read an admin server's answers: values, API errors, and anything else."""

import json

import pytest

import roost
from roost import ErrorKind
from roost.client._core import Http, error_from_json
from roost.client._local import Admin

REQUEST = Http(Admin(url="http://127.0.0.1:8081", token="t"), "GET", "/api/workflows/x")


def test_a_success_is_its_json_value():
    assert REQUEST.answer(200, b'{"status": "running"}') == {"status": "running"}
    assert REQUEST.answer(200, b"") is None


def test_an_api_error_keeps_its_kind_message_and_details():
    body = {"error": {"kind": "NotFound", "message": "no workflow", "details": {"id": "x"}}}
    with pytest.raises(roost.Error) as caught:
        REQUEST.answer(404, json.dumps(body).encode())
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert caught.value.message == "no workflow"
    assert caught.value.details == {"id": "x", "http_status": 404}


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, ErrorKind.INVALID),
        (401, ErrorKind.PERMISSION_DENIED),
        (421, ErrorKind.PERMISSION_DENIED),  # a Host the server does not serve
        (429, ErrorKind.RATE_LIMITED),
        (502, ErrorKind.INTERNAL),
        (503, ErrorKind.UNAVAILABLE),
    ],
)
def test_an_answer_that_is_no_api_error_gets_the_kind_of_its_status(status, kind):
    with pytest.raises(roost.Error) as caught:
        REQUEST.answer(status, b"<html>proxy error</html>")
    assert caught.value.kind is kind
    assert f"HTTP {status}" in caught.value.message or status == 401
    assert caught.value.details["http_status"] == status


def test_a_success_without_json_is_no_admin_server():
    with pytest.raises(roost.Error) as caught:
        REQUEST.answer(200, b"<html>hello</html>")
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert "admin server" in caught.value.message


def test_an_error_of_an_unknown_kind_is_unknown():
    err = error_from_json({"kind": "Weird", "message": "m", "retryable": True})
    assert (err.kind, err.message, err.retryable) == (ErrorKind.UNKNOWN, "m", True)


def test_requests_carry_the_token_and_no_origin():
    post = Http(REQUEST.admin, "POST", "/api/workflows", {"entry": "a:b"})
    assert post.headers() == {
        "Authorization": "Bearer t",
        "Accept": "application/json",
        "Content-Type": "application/json",
    }
    assert json.loads(post.content()) == {"entry": "a:b"}
    assert repr(post.admin) == "Admin(url='http://127.0.0.1:8081', pid=None)"  # no token
