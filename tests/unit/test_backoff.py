"""The one capped backoff primitive, and every delay rule built on it, never overflow."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import roost
from roost import supervisor
from roost._backoff import capped_backoff
from roost.queues._spec import make_spec, retry_delay
from roost.supervisor._policy import backoff_delay
from roost.workflow._retry import next_retry

HUGE = [1025, 1100, 10**6, 10**12, 10**400]


@given(
    initial=st.floats(0, 1e4),
    factor=st.floats(1, 1e6),
    exponent=st.integers(0, 10**7),
    maximum=st.floats(0, 1e9) | st.just(math.inf),
)
def test_is_the_capped_power_for_any_exponent(initial, factor, exponent, maximum):
    delay = capped_backoff(initial, factor, exponent, maximum)
    assert 0 <= delay <= maximum
    grown = math.log(initial) + exponent * math.log(factor) if initial else -math.inf
    if grown < 690:  # the exact value is a float: compare with it
        exact = math.exp(grown)
        assert math.isclose(delay, min(exact, maximum), rel_tol=1e-9)


@given(exponent=st.sampled_from(HUGE) | st.integers(1025, 10**9))
def test_huge_exponents_reach_the_cap_without_overflow(exponent):
    assert capped_backoff(1.0, 2.0, exponent, 60.0) == 60.0
    assert capped_backoff(1.0, 1.0001, exponent * 1000, 60.0) == 60.0
    assert capped_backoff(0.5, 2.0, exponent, math.inf) == math.inf
    assert capped_backoff(1.0, math.inf, exponent, 90.0) == 90.0


def test_factor_and_initial_edge_cases():
    assert capped_backoff(3.0, 1.0, 10**6, 60.0) == 3.0  # factor 1: constant
    assert capped_backoff(0.0, 2.0, 10**6, 60.0) == 0.0  # no initial delay: none ever
    assert capped_backoff(5.0, 2.0, 0, 60.0) == 5.0  # the first delay is the initial one
    assert capped_backoff(90.0, 2.0, 3, 60.0) == 60.0  # initial above the cap: the cap
    assert capped_backoff(1.0, math.inf, 0, 60.0) == 1.0
    # A tiny initial delay: factor**exponent overflows on its own, the product does not.
    assert math.isclose(capped_backoff(1e-300, 2.0, 1030, 1e12), 1e-300 * 2.0**30 * 2.0**1000)


@pytest.mark.parametrize(
    "args",
    [
        (math.nan, 2.0, 1, 60.0),
        (-1.0, 2.0, 1, 60.0),
        (math.inf, 2.0, 1, 60.0),
        (1.0, 0.5, 1, 60.0),
        (1.0, math.nan, 1, 60.0),
        (1.0, 2.0, -1, 60.0),
        (1.0, 2.0, 1.5, 60.0),
        (1.0, 2.0, True, 60.0),
        (1.0, 2.0, 1, math.nan),
        (1.0, 2.0, 1, -1.0),
    ],
)
def test_arguments_out_of_range_are_invalid(args):
    with pytest.raises(roost.Error) as info:
        capped_backoff(*args)
    assert info.value.kind is roost.ErrorKind.INVALID


@pytest.mark.parametrize("attempt", HUGE)
def test_every_delay_rule_caps_huge_attempt_numbers(attempt):
    service = supervisor.Backoff(initial_delay="1s", max_delay="90s", factor=2.0, jitter=0.1)
    assert math.isclose(backoff_delay(service, attempt, 0.5), 90.0)
    assert 81.0 <= backoff_delay(service, attempt, 0.99) <= 99.0
    assert next_retry({}, attempt, roost.Error("still down")) == 100.0
    queue = make_spec("q", {"backoff": "1s", "max_backoff": "5m", "jitter": 0})
    assert retry_delay(queue, attempt) == 300.0


def test_service_backoff_factor_must_be_finite():
    for factor in (math.nan, math.inf, 0.5):
        with pytest.raises(roost.Error) as info:
            supervisor.Backoff(factor=factor)
        assert info.value.kind is roost.ErrorKind.INVALID
        assert "factor" in info.value.message
