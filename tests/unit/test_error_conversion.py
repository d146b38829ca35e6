"""``roost.Error.from_exception`` is total: whatever an exception does, a storable Error."""

import datetime as dt
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost.storage import Codec

codec = Codec()


def round_trip(err):
    """The codec stores it and reads it back (what the node does with every error)."""
    back = codec.decode(codec.encode(err))
    assert (back.kind, back.message, back.retryable) == (err.kind, err.message, err.retryable)
    assert codec.encode(back) == codec.encode(err)
    return back


class StrRaisesError(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


class BothRaiseError(Exception):
    def __str__(self):
        raise RuntimeError

    def __repr__(self):
        raise ValueError


class RecursesError(Exception):
    def __str__(self):
        return str(self)


class ExitsInStrError(Exception):
    def __str__(self):
        raise SystemExit(1)


class Shady(str):
    def __len__(self):
        raise RuntimeError


class ReturnsSubclassError(Exception):
    def __str__(self):
        return Shady("sub")


class BadNameError(Exception):
    pass


BadNameError.__module__ = None  # a module name that is not a str


class SkipsInit(roost.Error):
    def __init__(self):  # never calls Error.__init__: no message, kind or details
        Exception.__init__(self)


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (StrRaisesError(), "<str() raised RuntimeError; repr: StrRaisesError()>"),
        (BothRaiseError(), "<str() raised RuntimeError, repr() raised ValueError>"),
        (RecursesError(), "<str() raised RecursionError; repr: RecursesError()>"),
        (ExitsInStrError(), "<str() raised SystemExit; repr: ExitsInStrError()>"),
        (ReturnsSubclassError(), "sub"),
        (ValueError("bad \ud800 byte \udfff"), "bad \\ud800 byte \\udfff"),
        (SystemExit(3), "3"),
        (GeneratorExit(), ""),
        (KeyboardInterrupt(), ""),
    ],
)
def test_hostile_exceptions_become_internal_errors_with_a_safe_text(exc, text):
    err = roost.Error.from_exception(exc)
    assert err.kind is roost.ErrorKind.INTERNAL
    assert err.details["message"] == text
    qualified = err.details["type"]
    assert err.message == (f"{qualified}: {text}" if text else qualified)
    assert err.__cause__ is exc
    round_trip(err)


def test_a_type_whose_name_raises_and_a_huge_message():
    assert roost.Error.from_exception(BadNameError("x")).details["type"] == "<unnamed type>"
    err = round_trip(roost.Error.from_exception(ValueError("z" * 50_000)))
    assert len(err.details["message"]) < 10_100
    assert err.details["message"].endswith("(40000 more characters)")


def test_an_error_subclass_that_skipped_init_is_converted_like_a_foreign_exception():
    err = roost.Error.from_exception(SkipsInit())
    assert err.kind is roost.ErrorKind.INTERNAL
    assert err.details["type"].endswith("SkipsInit")
    round_trip(err)


def test_a_clean_roost_error_comes_back_as_itself():
    when = dt.datetime(2024, 1, 2, tzinfo=dt.UTC)
    pid = roost.Pid("local", "app:processes", "1.00001")
    details = {"n": [1, 2.5, None, b"x"], "at": when, "id": uuid.uuid4(), "pid": pid}
    err = roost.Error("fine", kind=roost.ErrorKind.TIMEOUT, details=details)
    assert roost.Error.from_exception(err) is err
    round_trip(err)


def test_a_roost_error_the_codec_would_refuse_is_cleaned_keeping_kind_and_retryable():
    nested = roost.Error("inner \ud800", details={"s": {1}})
    cyclic: list = []
    cyclic.append(cyclic)
    err = roost.Error(
        "outer \udc00",
        kind=roost.ErrorKind.CONFLICT,
        retryable=False,
        details={
            "set": {1, 2},
            "naive": dt.datetime(2024, 1, 2),  # naive: no tzinfo
            "obj": object(),
            "k\ud800": ["\ud800", (1, 2)],
            "cycle": cyclic,
            "nested": nested,
            (1, 2): "tuple key",
        },
    )
    clean = roost.Error.from_exception(err)
    assert clean is not err and clean.__cause__ is err
    assert (clean.kind, clean.retryable, clean.message) == (
        roost.ErrorKind.CONFLICT,
        False,
        "outer \\udc00",
    )
    assert clean.details["set"] == "{1, 2}"
    assert clean.details["k\\ud800"] == ["\\ud800", (1, 2)]
    assert clean.details["nested"].message == "inner \\ud800"
    assert clean.details["nested"].details == {"s": "{1}"}
    assert clean.details["(1, 2)"] == "tuple key"
    round_trip(clean)


def test_nondeterminism_errors_stay_what_they_are_when_cleaned():
    err = roost.NondeterminismError("diverged \ud800")
    clean = roost.Error.from_exception(err)
    assert type(clean) is roost.NondeterminismError and clean.message == "diverged \\ud800"
    assert type(round_trip(clean)) is roost.NondeterminismError


@given(st.text(alphabet=st.characters(blacklist_categories=())), st.text())
def test_any_message_and_detail_text_is_stored(message, detail):
    for exc in (ValueError(message), roost.Error(message, details={detail: message})):
        err = roost.Error.from_exception(exc)
        round_trip(err)
        err.message.encode("utf-8")  # no lone surrogate left


class LiesAboutClassError(Exception):
    @property
    def __class__(self):
        raise RuntimeError("no class either")


def test_an_exception_whose_class_attribute_raises():
    err = round_trip(roost.Error.from_exception(LiesAboutClassError("x")))
    assert err.details["type"].endswith("LiesAboutClassError")
    assert err.details["message"] == "x"
