"""Bad input is refused where it enters: durations, retry policies, ids, names, keys, cron."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import roost
from roost import Error, ErrorKind, Pid, process
from roost._cron import parse_firing_cron
from roost._duration import LATEST, MAX_DURATION, deadline_after, parse_duration
from roost.mailbox._mailbox import check_topic
from roost.storage import key
from roost.workflow._options import (
    MAX_ID_BYTES,
    check_child_id,
    check_start_options,
    check_workflow_id,
)
from roost.workflow._retry import activity_options, retry_policy


def invalid(fn: Any, *args: Any, **kwargs: Any) -> Error:
    with pytest.raises(Error) as info:
        fn(*args, **kwargs)
    assert info.value.kind is ErrorKind.INVALID, info.value
    return info.value


# --- durations ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        1e12,
        "99999999999d",
        10**400,
        -(10**400),
        10**5000,  # past Python's int-to-str limit: the message must not try to print it
        math.nan,
        math.inf,
        -math.inf,
        -1,
        "1" + "0" * 500 + "s",
        dt.timedelta.max,
        -dt.timedelta(seconds=1),
        MAX_DURATION + 1,
    ],
    ids=lambda v: f"int-{v.bit_length()}-bits" if isinstance(v, int) else repr(v)[:20],
)
def test_durations_past_the_range_are_invalid_not_overflow_errors(value: Any) -> None:
    message = invalid(parse_duration, value, what="sleep duration").message
    assert message.startswith("sleep duration must be")
    assert len(message) < 200


def test_the_longest_duration_is_accepted() -> None:
    assert parse_duration(MAX_DURATION) == MAX_DURATION
    assert parse_duration(int(MAX_DURATION)) == MAX_DURATION
    assert "292 years" in invalid(parse_duration, "300w" * 1000).message


def test_deadlines_stop_at_the_latest_time_instead_of_overflowing() -> None:
    now = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert deadline_after(now, 60) == now + dt.timedelta(minutes=1)
    assert deadline_after(now, MAX_DURATION) == now + dt.timedelta(seconds=MAX_DURATION)
    far = dt.datetime(8900, 1, 1, tzinfo=dt.UTC)
    assert deadline_after(far, MAX_DURATION) == LATEST
    assert deadline_after(dt.datetime(9999, 1, 1, tzinfo=dt.UTC), 1) == LATEST


# --- retry policies -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"backoff_coefficient": math.nan}, "finite number >= 1"),
        ({"backoff_coefficient": math.inf}, "finite number >= 1"),
        ({"initial_interval": math.nan}, "non-negative"),
        ({"initial_interval": math.inf}, "at most"),
        ({"maximum_interval": math.inf}, "at most"),
        ({"initial_interval": "10s", "maximum_interval": "5s"}, "must not be less than"),
        ({"initial_interval": 0}, "hot loop"),
        ({"initial_interval": "0s", "maximum_attempts": 0}, "hot loop"),
        ({"initial_interval": 1e-9}, "hot loop"),  # its default cap is 100 x: 100 ns
        ({"initial_interval": 1e-300, "backoff_coefficient": 1.0}, "hot loop"),
        ({"initial_interval": "1ms", "maximum_interval": 0.0005}, "must not be less than"),
        ({"non_retryable_error_kinds": [["x"]]}, "error kinds"),
    ],
)
def test_bad_retry_policies_are_invalid(kwargs: dict[str, Any], words: str) -> None:
    assert words in invalid(roost.RetryPolicy, **kwargs).message


def test_unlimited_retries_may_settle_at_one_millisecond() -> None:
    policy = roost.RetryPolicy(initial_interval=1e-5, maximum_interval="1ms")
    assert policy.cap == 0.001


def test_a_zero_interval_is_fine_with_a_bounded_number_of_attempts() -> None:
    policy = roost.RetryPolicy(initial_interval=0, maximum_attempts=3)
    assert policy.cap == 0


def test_a_retry_policy_dict_with_an_unknown_key_names_the_known_keys() -> None:
    error = invalid(retry_policy, {"initial_interval": "1s", "max_attempts": 3})
    assert "'max_attempts'" in error.message
    for known in ("initial_interval", "maximum_attempts", "non_retryable_error_kinds"):
        assert known in error.message
    # The same at every place a dict is taken: start options and activity options.
    invalid(check_start_options, {"retry_policy": {"nope": 1}})
    invalid(activity_options, {"retry_policy": {"nope": 1}})
    invalid(retry_policy, {1: 2})


def test_wippys_non_retryable_error_types_is_an_alias() -> None:
    policy = retry_policy({"non_retryable_error_types": ["Invalid"], "maximum_attempts": 2})
    assert policy.non_retryable_error_kinds == (ErrorKind.INVALID,)
    error = invalid(
        retry_policy,
        {"non_retryable_error_types": ["Invalid"], "non_retryable_error_kinds": ["Invalid"]},
    )
    assert "twice" in error.message


# --- PIDs, ids, names ---------------------------------------------------------------------

# Mostly parts a PID takes (any text but the separators), some with what breaks one.
plain_parts = st.text(st.characters(exclude_characters="{}|@"), min_size=1, max_size=8)
any_text = st.one_of(
    plain_parts,
    plain_parts.map(lambda t: t + "@x"),
    st.text(min_size=1, max_size=8),
    st.text(st.characters(categories=("Cs",)) | st.sampled_from("{}|@ a"), min_size=1, max_size=4),
)


def _accepted(node: str, host: str, ident: str) -> Pid | None:
    try:
        return Pid(node, host, ident)
    except Error as err:
        if err.kind is not ErrorKind.INVALID:
            raise
        return None


@given(any_text | st.just("local"), any_text, any_text)
def test_every_pid_roost_accepts_parses_back_from_its_text(
    node: str, host: str, ident: str
) -> None:
    pid = _accepted(node, host, ident)
    assume(pid is not None)
    assert pid is not None
    assert Pid.parse(str(pid)) == pid
    assert str(pid).encode("utf-8")  # no lone surrogate got in


@given(any_text)
def test_every_workflow_id_roost_accepts_makes_a_pid_that_parses_back(ident: str) -> None:
    try:
        workflow_id = check_workflow_id(ident)
    except Error as err:
        if err.kind is not ErrorKind.INVALID:
            raise
        assume(False)
    pid = Pid.trusted("local", "app:workflows", workflow_id)  # how the runtime builds it
    assert Pid.parse(str(pid)) == pid


@pytest.mark.parametrize("bad", ["a{b", "a}b", "{a}", "a|b", "x\ud800", "", 5, None])
def test_workflow_ids_and_names_that_break_a_pid_are_invalid(bad: Any) -> None:
    for option in ("id", "name"):
        invalid(check_start_options, {option: bad})
    if isinstance(bad, str) and bad:
        invalid(process.with_options(id=bad).with_name, bad)  # a name is an id too


def test_the_longest_workflow_id_is_accepted_and_one_byte_more_is_invalid() -> None:
    longest = "é" * (MAX_ID_BYTES // 2) + "x" * (MAX_ID_BYTES % 2)  # counted in UTF-8 bytes
    assert len(longest.encode()) == MAX_ID_BYTES
    assert check_start_options({"id": longest}) == {"id": longest}
    error = invalid(check_start_options, {"id": longest + "x"})
    assert f"at most {MAX_ID_BYTES}" in error.message
    assert error.details["max_bytes"] == MAX_ID_BYTES


def test_a_derived_child_id_must_fit_the_store_key() -> None:
    assert check_child_id("p" * 511) == "p" * 511
    assert "explicit, shorter id" in invalid(check_child_id, "p" * 512).message


@pytest.mark.parametrize("bad", ["\ud800", "ok\udfff"])
def test_lone_surrogates_in_topics_keys_and_names_are_invalid(bad: str) -> None:
    assert "lone surrogate" in invalid(check_topic, bad).message
    assert "lone surrogate" in invalid(key, "scope", bad).message
    assert "lone surrogate" in invalid(Pid, "local", "h", bad).message
    assert "lone surrogate" in invalid(roost.App, "a" + bad).message
    app = roost.App("ok")
    assert "lone surrogate" in invalid(app.host, "h" + bad).message
    assert "lone surrogate" in invalid(app.queue, "q" + bad).message
    # The error is printable and storable: the character is shown escaped.
    assert str(invalid(check_topic, bad)).encode("utf-8")


# --- options ------------------------------------------------------------------------------


@pytest.mark.parametrize("canonical_first", [True, False])
def test_the_canonical_option_key_wins_over_the_legacy_one(canonical_first: bool) -> None:
    pairs = [("workflow.id", "canonical"), ("temporal.workflow.id", "legacy")]
    mapping = dict(pairs if canonical_first else pairs[::-1])
    assert process.with_options(mapping).options["id"] == "canonical"
    # Across calls too (Wippy merges the tables, then reads the canonical key first).
    chained = process.with_options({"workflow.id": "canonical"}).with_options(
        {"temporal.workflow.id": "legacy"}
    )
    assert chained.options["id"] == "canonical"
    legacy_only = process.with_options({"temporal.workflow.task_queue": "q"})
    assert legacy_only.options["task_queue"] == "q"
    assert legacy_only.with_options(task_queue="r").options["task_queue"] == "r"


# --- cron ---------------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 0 30 2 * *", "0 0 0 1 1 * 2020"])
def test_cron_expressions_that_never_fire_are_invalid(expression: str) -> None:
    assert "never fires" in invalid(parse_firing_cron, expression).message
    invalid(check_start_options, {"cron_schedule": expression})


def test_a_cron_year_decades_away_still_fires() -> None:
    schedule = parse_firing_cron("0 0 0 1 1 * 2099")
    assert schedule.next_after(dt.datetime(2030, 1, 1, tzinfo=dt.UTC)) == dt.datetime(
        2099, 1, 1, tzinfo=dt.UTC
    )
