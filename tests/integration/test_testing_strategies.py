"""``roost.testing.strategies`` and the workflow properties, on real nodes under a MockClock.

Generated programs (activities that fail and recover or fail for good, sleeps, signal waits,
selects with timeouts, child workflows, coroutines) run on a real node with generated
signals; every one must replay to its recorded outcome, and crashing its node at generated
points (virtual times and activation counts) must not change any outcome. Then the
mutation checks: each property fails, with a readable message, for a workflow that breaks
it on purpose.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import event, given, note
from hypothesis import strategies as st

import roost
from roost import channel, funcs, process, workflow
from roost.storage import Codec
from roost.testing import (
    CrashPoint,
    Outcome,
    assert_crash_equivalent,
    assert_replay_deterministic,
)
from roost.testing.strategies import Schedule, event_schedules, program_app, workflow_programs

PROGRAMS = program_app()
ENTRY = "prog:program"


def run(fn: Any, *args: Any) -> Any:
    return trio.run(fn, *args, clock=trio.testing.MockClock(autojump_threshold=0))


class CrashLog(logging.Handler):
    """Collects the crash reports of ``assert_crash_equivalent`` (logger roost.testing)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.crashes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.crashes.append(record.getMessage())


def crash_log() -> Any:
    handler = CrashLog()
    logger = logging.getLogger("roost.testing")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    def detach() -> None:
        logger.removeHandler(handler)
        logger.setLevel(level)

    return handler, detach


# -- generated programs ------------------------------------------------------------------------


@given(
    program=workflow_programs(),
    data=st.data(),
    cache=st.sampled_from([10_000, 1]),
)
def test_generated_programs_replay_and_survive_crashes(program, data, cache):
    schedule = data.draw(event_schedules(program), label="schedule")
    note(f"program: {program}")
    node_options = {"workflow_cache": cache}
    handler, detach = crash_log()

    async def main() -> tuple[Outcome, Outcome]:
        replayed = await assert_replay_deterministic(
            PROGRAMS, ENTRY, program, signals=schedule.signals, node_options=node_options
        )
        crashed = await assert_crash_equivalent(
            PROGRAMS,
            ENTRY,
            program,
            signals=schedule.signals,
            crash_points=schedule.crash_points,
            node_options=node_options,
        )
        return replayed, crashed

    try:
        replayed, crashed = run(main)
    finally:
        detach()
    # Every receive gets its message, so every program ends, and ends the same both times.
    assert replayed == crashed
    assert replayed.status in ("completed", "failed")
    event(f"outcome: {replayed.status}")
    event(f"crashes that happened: {min(len(handler.crashes), 3)}")
    kinds = {"time" if p.at is not None else "activation" for p in schedule.crash_points}
    event(f"crash points: {'+'.join(sorted(kinds)) or 'none'}")


@given(program=workflow_programs(max_steps=3))
def test_generated_programs_are_plain_data_with_their_own_topics(program):
    assert Codec().decode(Codec().encode(program)) == program

    def listening(steps):
        for step in steps:
            if step["op"] in ("receive", "select"):
                yield step["topic"]
            elif step["op"] == "coroutine":
                yield from listening(step["steps"])

    topics = list(listening(program["steps"]))
    assert topics == [f"t{n}" for n in range(len(topics))]


@given(data=st.data(), program=workflow_programs())
def test_schedules_answer_every_receive(data, program):
    schedule = data.draw(event_schedules(program, max_crashes=4))
    assert isinstance(schedule, Schedule)
    times = [s[0] for s in schedule.signals]
    assert times == sorted(times)
    assert all((2 * t).is_integer() for t in times)
    assert len(schedule.crash_points) <= 4
    sent = {topic for _, topic, _ in schedule.signals}

    def receives(steps):
        for step in steps:
            if step["op"] == "receive":
                yield step["topic"]
            elif step["op"] == "coroutine":
                yield from receives(step["steps"])

    assert set(receives(program["steps"])) <= sent


@given(event_schedules(topics=["approve"], duration=10, activations=3, crashes=False))
def test_schedules_for_any_workflow(schedule):
    assert schedule.crash_points == ()
    assert all(topic in ("approve", "unheard") for _, topic, _ in schedule.signals)
    assert all(0 <= at <= 10 for at, _, _ in schedule.signals)


# -- the interpreter -----------------------------------------------------------------------------


def act(value: Any = None, fail: int = 0, max_attempts: int = 0, error: Any = None) -> dict:
    return {"op": "activity", "fail": fail, "max_attempts": max_attempts, "value": value,
            "error": error}  # fmt: skip


EVERYTHING = {
    "steps": [
        act(7, fail=2),  # attempts at 0s, 1s, 3s
        act(8, fail=5, max_attempts=2),  # gives up after attempt 2 (at 4s)
        {
            "op": "coroutine",
            "steps": [{"op": "sleep", "seconds": 3}, {"op": "receive", "topic": "t0"}],
        },
        {"op": "select", "topic": "t1", "timeout": 10},  # its message comes at 9.5s
        {"op": "select", "topic": "t2", "timeout": 2},  # nothing comes
        {
            "op": "child",
            "program": {
                "steps": [act(error={"kind": "Conflict", "message": "refused"})],
                "end": {"op": "raise", "kind": "NotFound", "message": "gone"},
            },
        },
        {"op": "child", "program": {"steps": [{"op": "sleep", "seconds": 1}], "end": None}},
    ],
    "end": {"op": "return"},
}  # fmt: skip
EVERYTHING_SIGNALS = [(2, "t0", "early"), (9.5, "t1", 5)]
EVERYTHING_RESULT = {
    "out": [
        ["activity", 7, 3.0],
        ["activity failed", "Unavailable", "transient failure on attempt 2", 4.0],
        ["spawned", 2, 4.0],
        ["selected", "t1", 5, 9.5],
        ["timed out", "t2", 11.5],
        ["child failed", "NotFound", "gone", 11.5],
        ["child", {"out": [["slept", 1.0]]}, 12.5],
        ["joined", [["slept", 7.0], ["received", "t0", "early", 7.0]]],
    ]
}


def test_the_interpreter_runs_every_building_block():
    async def main() -> Outcome:
        return await assert_replay_deterministic(
            PROGRAMS, ENTRY, EVERYTHING, signals=EVERYTHING_SIGNALS
        )

    assert run(main) == Outcome("completed", EVERYTHING_RESULT)


def test_crashes_at_every_kind_of_point_happen_and_change_nothing():
    handler, detach = crash_log()
    points = [
        CrashPoint(activation=1),  # the first activity attempt still to run
        CrashPoint(activation=3),
        CrashPoint(activation=3),  # twice in a row
        4.25,
        "9.5s",  # the instant a signal arrives (after it)
        CrashPoint(activation=10),
        12,  # while the second child sleeps
    ]

    async def main() -> Outcome:
        return await assert_crash_equivalent(
            PROGRAMS, ENTRY, EVERYTHING, signals=EVERYTHING_SIGNALS, crash_points=points
        )

    try:
        outcome = run(main)
    finally:
        detach()
    assert outcome == Outcome("completed", EVERYTHING_RESULT)
    assert len(handler.crashes) == len(points), handler.crashes
    assert any("after activation 3" in c for c in handler.crashes)
    assert any("at 12s" in c for c in handler.crashes)


def test_a_program_that_fails_and_one_still_waiting_at_the_horizon():
    failing = {"steps": [act(1)], "end": {"op": "crash", "message": "boom"}}
    waiting = {"steps": [{"op": "receive", "topic": "t0"}], "end": {"op": "return"}}

    async def main() -> tuple[Outcome, Outcome]:
        failed = await assert_crash_equivalent(
            PROGRAMS, ENTRY, failing, crash_points=[CrashPoint(activation=1)]
        )
        still = await assert_crash_equivalent(
            PROGRAMS, ENTRY, waiting, crash_points=["1h"], horizon="1d"
        )
        return failed, still

    failed, still = run(main)
    assert failed == Outcome("failed", None, roost.ErrorKind.INTERNAL, "ValueError: boom")
    assert still == Outcome("running")


# -- with pytest-trio's autojump clock, as the docs show ----------------------------------------

app = roost.App("props")


@app.activity
def charge(amount: int) -> dict:
    return {"charged": amount}


@app.workflow
async def order(amount: int) -> dict:
    receipt = await funcs.call(charge, amount)
    await roost.sleep("1h")
    got = await channel.select(process.listen("approve"), roost.after("1d"))
    return {"receipt": receipt, "approved": got.value, "at": roost.now().isoformat()}


async def test_properties_in_a_trio_test(autojump_clock):
    outcome = await assert_replay_deterministic(app, order, 5, signals=[("2h", "approve", "ok")])
    assert outcome.status == "completed"
    assert outcome.result["approved"] == "ok"
    # roost.now() in the result is fine: both runs share one virtual timeline.
    again = await assert_crash_equivalent(
        app,
        "props:order",
        5,
        crash_points=[CrashPoint(activation=1), "30m", "2h"],
        signals=[("2h", "approve", "ok")],
        id="order-7",
    )
    assert again.result["receipt"] == {"charged": 5}


async def test_bad_arguments_raise_invalid(autojump_clock):
    with pytest.raises(roost.Error) as caught:
        await assert_replay_deterministic(app, charge, 1)
    assert caught.value.kind is roost.ErrorKind.INVALID
    for bad in ({}, {"at": 1, "activation": 2}, {"activation": 0}, {"at": -1}):
        with pytest.raises(roost.Error) as caught:
            CrashPoint(**bad)
        assert caught.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error):
        await assert_crash_equivalent(app, order, 1, crash_points=[], signals=[(1,)])
    with pytest.raises(roost.Error) as caught:  # the input cannot be recorded
        await assert_crash_equivalent(app, order, object(), crash_points=[1])
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert str(CrashPoint(at="1m")) == "at 60s"
    assert str(CrashPoint(activation=3)) == "after activation 3"


# -- mutations: each property catches a workflow that breaks it ----------------------------------

broken = roost.App("broken")
RUNS = [0]  # how often the code below has run, in this interpreter


def next_run() -> int:
    RUNS[0] += 1
    return RUNS[0] - 1


@broken.activity
def noop() -> None:
    return None


@broken.workflow
async def branches_on_a_global() -> str:
    # How often this code has run is not part of the history: replay takes the other path.
    if next_run() % 2 == 0:
        await roost.sleep(5)
    else:
        await funcs.call(noop)
    return "done"


@broken.workflow
async def returns_a_global() -> int:
    await roost.sleep(5)
    return next_run()


@broken.process
async def keeper(value: int) -> int:
    await roost.sleep(10)  # a plain process: it lives in memory only
    return value


@broken.workflow
async def trusts_a_process() -> str:
    await process.spawn(keeper, 42)
    exit_event = await process.events().receive()
    if exit_event.error is not None:
        return f"lost: {exit_event.error.kind.value}"
    return f"kept {exit_event.value}"


def test_replay_check_catches_code_that_branches_on_a_global():
    RUNS[0] = 0

    async def main() -> None:
        await assert_replay_deterministic(broken, branches_on_a_global)

    with pytest.raises(AssertionError) as caught:
        run(main)
    message = str(caught.value)
    assert "diverged from its history" in message
    assert "position: activation 1 of" in message
    assert "start timer 5s" in message  # what the history recorded
    assert "schedule activity 'broken:noop'" in message  # what the replay issued


def test_replay_check_catches_a_result_that_replay_does_not_reproduce():
    async def main() -> None:
        await assert_replay_deterministic(broken, returns_a_global)

    with pytest.raises(AssertionError, match="ended differently") as caught:
        run(main)
    assert "recorded: completed:" in str(caught.value)
    assert "replayed:" in str(caught.value)


def test_crash_check_catches_state_lost_in_a_crash():
    async def main() -> Outcome:
        return await assert_crash_equivalent(broken, trusts_a_process, crash_points=[5])

    with pytest.raises(AssertionError) as caught:
        run(main)
    message = str(caught.value)
    assert "crashes changed the outcome of the workflow 'roost-property'" in message
    assert "without crashes: completed: 'kept 42'" in message
    assert "with crashes:    completed: 'lost:" in message
    assert "crashes: at 5s" in message
    assert "part at event #" in message  # the first difference of the two histories

    async def no_crash() -> Outcome:
        return await assert_crash_equivalent(broken, trusts_a_process, crash_points=[])

    assert run(no_crash) == Outcome("completed", "kept 42")


SEEN: set[str] = set()  # runs whose code has run before, in this interpreter


@broken.workflow
async def differs_on_a_second_run() -> str:
    run_id = workflow.info().run_id
    first = run_id not in SEEN
    SEEN.add(run_id)
    if first:
        await roost.sleep(5)
    else:  # what recovery after a crash (or any replay) runs instead
        await funcs.call(noop)
    return "done"


def test_crash_check_catches_code_that_differs_when_it_runs_again():
    async def main() -> Outcome:
        return await assert_crash_equivalent(broken, differs_on_a_second_run, crash_points=[2])

    with pytest.raises(AssertionError, match="diverged from its history") as caught:
        run(main)
    assert "recorded #1 start timer 5s" in str(caught.value)
