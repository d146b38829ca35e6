"""Retry delay rules stay finite and capped however long something keeps failing."""

from hypothesis import given
from hypothesis import strategies as st

import roost
from roost._backoff import capped_backoff
from roost.queues._spec import make_spec, retry_delay
from roost.workflow._retry import next_retry


@given(
    st.floats(0.001, 1e4),
    st.floats(1.0, 100.0),
    st.integers(0, 100_000),
    st.floats(0.001, 1e6),
)
def test_capped_backoff_is_the_capped_power_without_overflow(initial, coefficient, n, cap):
    delay = capped_backoff(initial, coefficient, n, cap)
    assert 0 <= delay <= cap
    if n < 50:
        assert abs(delay - min(initial * coefficient**n, cap)) <= 1e-9 * max(1.0, cap)


def test_attempt_two_thousand_of_an_unlimited_policy_waits_the_cap():
    # The default policy (coefficient 2, unlimited attempts) used to raise OverflowError
    # past attempt 1025, which tore down the node.
    assert next_retry({}, 2000, roost.Error("still down")) == 100.0
    spec = make_spec("q", {"backoff": "1s", "max_backoff": "5m", "jitter": 0})
    assert retry_delay(spec, 5000) == 300.0
