"""The run phases (``workflow/_runs.py``): every transition, and the illegal ones refused."""

import datetime as dt
import itertools

import pytest
import trio
import trio.testing

from roost._pid import Pid
from roost.actors._app import Entry, EntryKind
from roost.workflow._local._phases import IllegalTransition, PhaseEvent, RunPhase, next_phase
from roost.workflow._local._records import RunRecord
from roost.workflow._local._run import Run
from roost.workflow._local._runs import RunTable
from roost.workflow._status import RunStatus

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


@pytest.mark.parametrize(("phase", "event"), list(itertools.product(P, E)))
async def test_the_run_table_moves_a_run_exactly_as_next_phase_says(phase, event):
    # ``RunTable.move`` probes the transition table itself (the hot path); it must agree
    # with ``next_phase`` on every pair, refuse the same ones and leave such a run as it is.
    table = RunTable(cache_size=10)
    run = _run("w", phase)
    drained = trio.Event()

    async def closer() -> None:  # waits for the activation in flight, as a close does
        await run.wait_drained()
        drained.set()

    in_flight = {P.ACTIVE, P.DRAINING}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(closer)
        await trio.testing.wait_all_tasks_blocked()
        assert drained.is_set() is (phase not in in_flight)
        if (phase, event) not in LEGAL:
            with pytest.raises(IllegalTransition, match=f"phase {phase.name} cannot {event.value}"):
                table.move(run, event)
            assert run.phase is phase
        else:
            assert table.move(run, event) is LEGAL[phase, event] is run.phase
        await trio.testing.wait_all_tasks_blocked()
        # A closer waiting for the activation in flight is woken once it is over, not before.
        assert drained.is_set() is (phase not in in_flight or run.phase not in in_flight)
        nursery.cancel_scope.cancel()


class _Driver:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def open_calls(self) -> dict[int, object]:
        return {}


_ENTRY = Entry(id="t:flow", kind=EntryKind.WORKFLOW, fn=lambda: None, is_async=True)
_AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _run(workflow_id: str, phase: RunPhase = P.IDLE) -> Run:
    record = RunRecord(
        workflow_id=workflow_id,
        run_id="r",
        workflow_type=_ENTRY.id,
        status=RunStatus.RUNNING,
        started_at=_AT,
    )
    pid = Pid.trusted("local", "t:workflows", workflow_id)
    run = Run(record=record, entry=_ENTRY, pid=pid, context={}, phase=phase)
    run.attach_driver(_Driver())
    return run


def test_the_driver_cache_evicts_the_least_recently_activated_run():
    table = RunTable(cache_size=2)
    a, b, c = _run("a"), _run("b"), _run("c")
    assert [table.touch(r) for r in (a, b, a)] == [0, 0, 0]  # a again: most recent now
    driver_b = b.driver
    assert table.touch(c) == 1
    assert list(table.cache()) == ["a", "c"]
    assert b.driver is None and driver_b.closed
    assert a.driver is not None and not a.driver.closed


def test_a_newer_run_of_a_cached_id_takes_its_place():
    table = RunTable(cache_size=2)
    old, other, new = _run("w"), _run("x"), _run("w")
    table.touch(old)
    table.touch(other)
    assert table.touch(new) == 0
    assert list(table.cache().items()) == [("x", other), ("w", new)]


def test_a_cache_over_its_size_shrinks_once_the_active_run_is_done():
    table = RunTable(cache_size=1)
    busy, idle = _run("busy", P.ACTIVE), _run("idle")
    table.touch(busy)
    assert table.touch(idle) == 0  # the oldest is in flight: nothing is evicted
    table.move(busy, E.DONE)
    assert table.touch(idle) == 1  # touching a cached run evicts what is over the size
    assert list(table.cache()) == ["idle"]
