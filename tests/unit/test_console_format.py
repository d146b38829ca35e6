"""The console's value previews: bounded in size and depth whatever the value, never raising."""

import datetime as dt

import roost
from roost.admin._console_format import ago, preview, queue_url, short, timestamp, workflow_url


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_huge_string_is_cut_to_the_limit():
    text = preview({"big": "x" * 1_000_000}, chars=500)
    assert len(text) <= 501 and text.endswith("…")


def test_deep_and_wide_values_are_cut_with_a_marker():
    deep = preview(nested(10_000), depth=5)
    assert deep.count("[") == 6 and "[…]" in deep
    wide = preview(list(range(1000)), items=10, indent=False)
    assert wide == "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, … 990 more]"


def test_a_self_referential_value_and_a_raising_repr_still_preview():
    loop: list = []
    loop.append(loop)
    assert preview(loop).startswith("[")

    class Hostile:
        def __repr__(self):
            raise RuntimeError("no repr for you")

    assert preview(Hostile()).startswith("<Hostile instance at")
    assert "<Hostile instance at" in short({"h": Hostile()})


def test_stored_kinds_render_as_text():
    pid = roost.Pid("local", "app:processes", "1.00001")
    assert short(pid) == str(pid)
    assert short(b"\x00") == '{"base64": "AA=="}'
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert timestamp(at) == "2026-01-02 03:04:05 UTC"
    assert timestamp(None) == ""
    assert ago(at + dt.timedelta(minutes=4, seconds=10), at) == "in 4m 10s"
    assert ago(at - dt.timedelta(seconds=12), at) == "12s ago"
    err = roost.Error("card <b>declined</b>", kind=roost.ErrorKind.INVALID)
    assert '"message": "card <b>declined</b>"' in preview(err)  # escaped by the template


def test_urls_keep_any_id_in_one_segment():
    assert workflow_url("a/b?c#d%e") == "/workflows/a%2Fb%3Fc%23d%25e"
    assert workflow_url("..") == "/workflow?id=.."
    assert workflow_url(".") == "/workflow?id=."
    assert queue_url("q/1") == "/queues/q%2F1"
