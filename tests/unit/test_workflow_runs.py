"""The run phases (``workflow/_runs.py``): every transition, and the illegal ones refused."""

import itertools

import pytest

from roost.workflow._phases import IllegalTransition, PhaseEvent, RunPhase, next_phase

P, E = RunPhase, PhaseEvent

LEGAL = {
    (P.IDLE, E.QUEUE): P.QUEUED,
    (P.IDLE, E.TAKE): P.ACTIVE,
    (P.QUEUED, E.TAKE): P.ACTIVE,
    (P.HELD, E.RELEASE): P.IDLE,
    (P.BACKOFF, E.RETRY): P.IDLE,
    (P.ACTIVE, E.DONE): P.IDLE,
    (P.ACTIVE, E.FAIL): P.BACKOFF,
    (P.ACTIVE, E.CLOSE): P.DRAINING,
    (P.DRAINING, E.DONE): P.CLOSING,
    (P.DRAINING, E.FAIL): P.CLOSING,
    (P.DRAINING, E.CLOSE): P.DRAINING,
    (P.CLOSING, E.CLOSE): P.CLOSING,
    (P.BACKOFF, E.DONE): P.BACKOFF,
    (P.CLOSING, E.DONE): P.CLOSING,
    (P.CLOSED, E.DONE): P.CLOSED,
    (P.CLOSED, E.CLOSE): P.CLOSED,
    **{(p, E.CLOSE): P.CLOSING for p in (P.IDLE, P.QUEUED, P.HELD, P.BACKOFF)},
    # CLOSED too: a run announced twice (its own close and one from outside) stays closed.
    **{(p, E.CLOSED): P.CLOSED for p in P},
}


@pytest.mark.parametrize(("phase", "event"), list(itertools.product(P, E)))
def test_each_transition_is_the_documented_one_or_refused(phase, event):
    if (phase, event) in LEGAL:
        assert next_phase(phase, event) is LEGAL[phase, event]
    else:
        with pytest.raises(IllegalTransition, match=f"phase {phase.name} cannot {event.value}"):
            next_phase(phase, event)


def test_no_activation_starts_once_a_close_is_asked_for():
    for phase in P:
        try:
            closing = next_phase(phase, E.CLOSE)
        except IllegalTransition:
            continue
        with pytest.raises(IllegalTransition):
            next_phase(closing, E.TAKE)
        with pytest.raises(IllegalTransition):
            next_phase(closing, E.QUEUE)


def test_a_closed_run_never_reopens():
    assert next_phase(P.CLOSED, E.DONE) is next_phase(P.CLOSED, E.CLOSE) is P.CLOSED
    assert next_phase(P.CLOSED, E.CLOSED) is P.CLOSED  # a second announce
    for event in (E.QUEUE, E.TAKE, E.RETRY, E.RELEASE, E.FAIL):
        with pytest.raises(IllegalTransition):
            next_phase(P.CLOSED, event)
