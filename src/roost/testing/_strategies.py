"""Hypothesis strategies: workflow programs, and schedules of what happens around them.

``workflow_programs()`` draws programs for the interpreter of ``program_app()`` (the format
is described in ``roost.testing._programs``); ``event_schedules(program)`` draws the signals
the program gets and where to crash its node. Together with ``assert_replay_deterministic``
and ``assert_crash_equivalent`` they make property tests of the workflow runtime, or of
any workflow (``event_schedules`` also takes topics and a duration instead of a program).

Programs are built so that every outcome is decided by the program and the schedule: each
``receive`` and ``select`` listens on a topic of its own (``"t0"``, ``"t1"``, ...), so no
two coroutines compete for one message, and only the top workflow (and its coroutines)
waits for messages, because signals go to it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
from hypothesis import strategies as st

from roost.testing._properties import CrashPoint

__all__ = ["Schedule", "event_schedules", "workflow_programs"]

ERROR_KINDS = ("Invalid", "NotFound", "Conflict", "PermissionDenied")
_UNHEARD = "unheard"  # a topic no program listens on


@attrs.frozen
class Schedule:
    """What happens around one run: messages to the workflow, and crash points.

    Pass it on as ``signals=schedule.signals, crash_points=schedule.crash_points``.

    Attributes:
        signals: ``(at, topic, payload)`` tuples, by time (virtual seconds after the start).
        crash_points: ``CrashPoint``s, virtual times first, then activation counts.
    """

    signals: tuple[tuple[float, str, Any], ...] = ()
    crash_points: tuple[CrashPoint, ...] = ()


@attrs.frozen
class _Options:
    max_steps: int
    max_depth: int
    max_seconds: int
    signals: bool
    children: bool
    coroutines: bool
    failures: bool


def workflow_programs(
    *,
    max_steps: int = 4,
    max_depth: int = 2,
    max_seconds: int = 60,
    signals: bool = True,
    children: bool = True,
    coroutines: bool = True,
    failures: bool = True,
) -> st.SearchStrategy[dict[str, Any]]:
    """Programs for ``program_app()``'s workflow, as plain (CBOR-encodable) data.

    A program has up to ``max_steps`` steps per block: activities (that fail a number of
    times and then succeed, or fail for good with an error kind), durable sleeps, waits
    for a message (without limit, or in a ``select`` with a timeout), child workflows
    running a program of their own, and coroutines running a block concurrently; child
    programs and coroutine blocks nest up to ``max_depth`` levels. It ends by returning,
    raising a ``roost.Error`` or crashing with a plain exception. Programs shrink towards
    fewer steps, plain activities and returning.

    Args:
        max_steps: the most steps of one block.
        max_depth: how deep child workflows and coroutines nest.
        max_seconds: the longest sleep or select timeout.
        signals: include ``receive`` and ``select`` steps.
        children: include child workflows.
        coroutines: include coroutines.
        failures: include failing activities and programs that end in an error.

    Example::

        @given(program=workflow_programs(), data=st.data())
        def test_programs(program, data):
            schedule = data.draw(event_schedules(program))
            ...
    """
    options = _Options(
        max_steps=max_steps,
        max_depth=max_depth,
        max_seconds=max_seconds,
        signals=signals,
        children=children,
        coroutines=coroutines,
        failures=failures,
    )
    return _programs(options, 0, top=True).map(_numbered)


def _ends(failures: bool) -> st.SearchStrategy[dict[str, Any]]:
    ret = st.fixed_dictionaries({"op": st.just("return")})
    if not failures:
        return ret
    raised = st.fixed_dictionaries(
        {
            "op": st.just("raise"),
            "kind": st.sampled_from(ERROR_KINDS),
            "message": st.just("the program failed"),
        }
    )
    crashed = st.fixed_dictionaries(
        {"op": st.just("crash"), "message": st.just("the program crashed")}
    )
    # Mostly return: a failing program's result (what each step saw) is not compared.
    return st.sampled_from(["return", "return", "return", "raise", "crash"]).flatmap(
        lambda end: {"return": ret, "raise": raised, "crash": crashed}[end]
    )


def _activities(failures: bool) -> st.SearchStrategy[dict[str, Any]]:
    error = st.none()
    if failures:
        error = st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"kind": st.sampled_from(ERROR_KINDS), "message": st.just("refused")}
            ),
        )
    return st.fixed_dictionaries(
        {
            "op": st.just("activity"),
            "fail": st.integers(0, 3) if failures else st.just(0),
            "max_attempts": st.sampled_from([0, 1, 2, 3]),
            "value": st.integers(0, 99),
            "error": error,
        }
    )


def _programs(options: _Options, depth: int, *, top: bool) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"steps": _blocks(options, depth, top=top), "end": _ends(options.failures)}
    )


def _blocks(options: _Options, depth: int, *, top: bool) -> st.SearchStrategy[list[Any]]:
    seconds = st.integers(1, options.max_seconds)
    kinds: list[st.SearchStrategy[dict[str, Any]]] = [
        _activities(options.failures),
        st.fixed_dictionaries({"op": st.just("sleep"), "seconds": seconds}),
    ]
    if top and options.signals:
        kinds.append(st.fixed_dictionaries({"op": st.just("receive")}))
        kinds.append(st.fixed_dictionaries({"op": st.just("select"), "timeout": seconds}))
    if depth < options.max_depth:
        if options.children:
            child = _programs(options, depth + 1, top=False)
            kinds.append(st.fixed_dictionaries({"op": st.just("child"), "program": child}))
        if options.coroutines:
            inner = _blocks(options, depth + 1, top=top)
            kinds.append(st.fixed_dictionaries({"op": st.just("coroutine"), "steps": inner}))
    return st.lists(st.one_of(kinds), max_size=options.max_steps)


def _numbered(drawn: dict[str, Any]) -> dict[str, Any]:
    """Give every receive and select a topic of its own, in program order."""
    program: dict[str, Any] = _fresh(drawn)  # st.just draws one shared object each time
    for n, step in enumerate(_listening(program["steps"])):
        step["topic"] = f"t{n}"
    return program


def _fresh(value: Any) -> Any:
    """A copy sharing no dict or list, not even between equal parts."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


def _listening(steps: Sequence[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The receive and select steps of the workflow itself (coroutines included)."""
    for step in steps:
        if step["op"] in ("receive", "select"):
            yield step
        elif step["op"] == "coroutine":
            yield from _listening(step["steps"])


def _walk(steps: Sequence[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every step, with those of coroutines and child programs."""
    for step in steps:
        yield step
        if step["op"] == "coroutine":
            yield from _walk(step["steps"])
        elif step["op"] == "child":
            yield from _walk(step["program"]["steps"])


def _program_duration(program: Mapping[str, Any]) -> float:
    """An upper bound of the virtual seconds the program takes, messages aside.

    Sleeps, select timeouts and activity retry waits, added up as if all ran one after
    another; a ``receive`` waits for its message on top of that.
    """
    total = 0.0
    for step in _walk(program["steps"]):
        if step["op"] == "sleep":
            total += step["seconds"]
        elif step["op"] == "select":
            total += step["timeout"]
        elif step["op"] == "activity":
            limit = step["max_attempts"] or step["fail"] + 1
            retries = min(step["fail"], limit - 1)
            total += 2**retries - 1  # waits of 1s, 2s, 4s, ...
    return total


def _program_activations(program: Mapping[str, Any]) -> int:
    """About how many activations a run of the program takes (workflow and children)."""
    count = 1
    for step in _walk(program["steps"]):
        count += 2 if step["op"] in ("child", "coroutine") else 1
    return count


def event_schedules(
    program: Mapping[str, Any] | None = None,
    *,
    topics: Sequence[str] = (),
    duration: float | None = None,
    activations: int | None = None,
    max_signals: int = 4,
    min_crashes: int = 1,
    max_crashes: int = 3,
    crashes: bool = True,
) -> st.SearchStrategy[Schedule]:
    """Schedules of signals and crash points for a run of ``program`` (or of any workflow).

    For a program from ``workflow_programs``, every ``receive`` gets one message on its
    topic (so the program can finish), and up to ``max_signals`` more go to its topics or
    to one it never listens on. Signal times are multiples of 0.5 s, crash times of
    0.25 s, so both meet the program's own timers sometimes (ties are decided one way:
    the properties act once the instant has settled, so a timer due at a signal's time
    fires first). Crash points
    are times, or counts of committed activations: ``min_crashes`` to ``max_crashes`` of
    them (a point past the end of the run is not reached).

    Args:
        program: a program from ``workflow_programs``; or None, and the next arguments.
        topics: topics to send signals on (added to the program's).
        duration: the virtual seconds over which to spread signals and crash times;
            default: worked out from the program, else 60.
        activations: the largest activation count to crash after; default: worked out
            from the program, else 20.
        max_signals: the most signals beyond those the program's receives need.
        min_crashes: the fewest crash points.
        max_crashes: the most crash points.
        crashes: False for schedules without crash points.

    Example::

        schedule = data.draw(event_schedules(topics=["approve"], duration=3600))
        await assert_crash_equivalent(
            app, "shop:order", order,
            signals=schedule.signals, crash_points=schedule.crash_points,
        )
    """
    needed: list[str] = []
    heard: list[str] = list(topics)
    if program is not None:
        for step in _listening(program["steps"]):
            heard.append(step["topic"])
            if step["op"] == "receive":
                needed.append(step["topic"])
    if duration is None:
        duration = _program_duration(program) + 5 if program is not None else 60.0
    if activations is None:
        activations = _program_activations(program) if program is not None else 20
    half_seconds = int(duration * 2)
    quarter_seconds = int(duration * 4)
    times = st.integers(0, half_seconds).map(lambda n: n / 2)
    payloads = st.integers(0, 9)
    answers = st.tuples(*(st.tuples(times, st.just(t), payloads) for t in needed))
    extra = st.lists(
        st.tuples(times, st.sampled_from([*heard, _UNHEARD]), payloads), max_size=max_signals
    )
    crash_points: st.SearchStrategy[list[CrashPoint]] = st.just([])
    if crashes and max_crashes > 0:
        point = st.one_of(
            st.integers(0, quarter_seconds).map(lambda n: CrashPoint(at=n / 4)),
            st.integers(1, max(1, activations)).map(lambda n: CrashPoint(activation=n)),
        )
        crash_points = st.lists(point, min_size=min(min_crashes, max_crashes), max_size=max_crashes)
    return st.builds(_schedule, answers, extra, crash_points)


def _schedule(
    answers: Sequence[tuple[float, str, Any]],
    extra: Sequence[tuple[float, str, Any]],
    points: Sequence[CrashPoint],
) -> Schedule:
    signals = sorted([*answers, *extra], key=lambda s: s[0])
    ordered = sorted(points, key=lambda p: (p.at is None, p.at or 0.0, p.activation or 0))
    return Schedule(signals=tuple(signals), crash_points=tuple(ordered))
