"""Durable workflows survive a real crash: SIGKILL a node process, restart it, check.

Each test runs ``crash_app.py`` (a roost node on an LMDB data dir, ``durability="sync"``) in a
fresh interpreter, kills it with SIGKILL at a chosen point, then runs it again on the same
data dir. The restarted node first reads what the killed one left in the store (``before``:
activations, pending inbox events, activity tasks, timers), then recovers, waits for every
workflow to close and reports the final histories and store state as JSON.

What every test checks after the restart:

- every workflow completed with the result an uncrashed run gives (computed here);
- nothing recorded was lost: the killed node's activations are a prefix of the final
  history, and its pending inbox events are in the rest of it;
- nothing is duplicated: activity and timer seqs are unique, each ``ScheduleActivity`` has
  exactly one ``ActivityResolved`` and each ``StartTimer`` exactly one ``TimerFired``;
- the store was consistent at the kill (the transactional outbox): every scheduled activity
  was either resolved or still a stored task, every started timer fired or still stored;
- at-least-once, never more: an activity resolved before the kill is not run again; only
  one still stored as a task at the kill may have run twice; none ran three times;
- nothing is left over: no tasks, timers or inbox events remain.

The parent polls marker and log files the child writes (a bounded loop of short sleeps: it
waits for another OS process, which no trio clock can do).
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

APP = Path(__file__).with_name("crash_app.py")
sys.path.insert(0, str(APP.parent))
import crash_app_base  # noqa: E402 - the child's modules: their constants define the scenarios
import crash_app_core as scenarios  # noqa: E402 - as crash_app_base
import crash_harness  # noqa: E402 - next to this module, on the path set above

pytestmark = pytest.mark.slow

WAIT = crash_harness.WAIT


# -- running the child -----------------------------------------------------------------------


class Child(crash_harness.Child):
    """A crash_app node (see ``crash_harness.Child``)."""

    app = APP


_no_stray_children = crash_harness.no_stray_children  # autouse: no node outlives a test


# -- checks ----------------------------------------------------------------------------------


def flat(activations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events then commands of each activation, in order (what ``node.history`` returns)."""
    out: list[dict[str, Any]] = []
    for act in activations:
        out += act["events"] + act["commands"]
    return out


def strip_markers(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``node.history`` without its per-activation ``WorkflowTask`` markers."""
    return [x for x in history if x["type"] != "WorkflowTask"]


def seqs(items: list[dict[str, Any]], kind: str) -> list[int]:
    return [x["seq"] for x in items if x["type"] == kind]


def canon(item: Any) -> str:
    return json.dumps(item, sort_keys=True)


def check_history(wf: str, history: list[dict[str, Any]]) -> None:
    """One start, one completion at the end, every activity and timer resolved exactly once."""
    types = Counter(x["type"] for x in history)
    assert history[0]["type"] == "Started" and types["Started"] == 1, (wf, history[:2])
    assert history[-1]["type"] == "Complete" and types["Complete"] == 1, (wf, history[-2:])
    assert types["Fail"] == 0, wf
    scheduled, timers = seqs(history, "ScheduleActivity"), seqs(history, "StartTimer")
    assert len(set(scheduled)) == len(scheduled), f"{wf}: activity seq reused: {scheduled}"
    assert len(set(timers)) == len(timers), f"{wf}: timer seq reused: {timers}"
    assert not set(scheduled) & set(timers), f"{wf}: a seq is both an activity and a timer"
    resolved = Counter(seqs(history, "ActivityResolved"))
    assert resolved == Counter(scheduled), f"{wf}: scheduled {scheduled}, resolved {resolved}"
    fired = Counter(seqs(history, "TimerFired"))
    assert fired == Counter(timers), f"{wf}: timers {timers}, fired {fired}"


def check_outbox_at_kill(wf: str, run: dict[str, Any]) -> None:
    """At the kill every scheduled activity / started timer was resolved or still stored."""
    history, inbox = flat(run["activations"]), run["inbox"]
    tasks = [t["seq"] for t in run["tasks"]]
    stored_timers = [t["seq"] for t in run["timers"]]
    resolved = seqs(history, "ActivityResolved") + seqs(inbox, "ActivityResolved")
    fired = seqs(history, "TimerFired") + seqs(inbox, "TimerFired")
    if run["record"]["status"] != "running":
        assert not tasks and not stored_timers and not inbox, f"{wf}: closed run left work"
    for seq in seqs(history, "ScheduleActivity"):
        where = resolved.count(seq) + tasks.count(seq)
        assert where == 1, f"{wf}: activity #{seq} at the kill: {resolved=} {tasks=}"
    assert set(tasks) <= set(seqs(history, "ScheduleActivity")), f"{wf}: unrecorded task"
    for seq in seqs(history, "StartTimer"):
        where = fired.count(seq) + stored_timers.count(seq)
        assert where == 1, f"{wf}: timer #{seq} at the kill: {fired=} {stored_timers=}"
    assert set(stored_timers) <= set(seqs(history, "StartTimer")), f"{wf}: unrecorded timer"


def check_nothing_lost(wf: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """The killed node's activations are a prefix of the final ones; its inbox follows."""
    old, new = before["activations"], after["activations"]
    assert len(new) >= len(old), f"{wf}: history shrank from {len(old)} to {len(new)}"
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        assert canon(a) == canon(b), f"{wf}: activation {i + 1} changed across the restart"
    later = Counter(canon(e) for act in new[len(old) :] for e in act["events"])
    missing = Counter(canon(e) for e in before["inbox"]) - later
    assert not missing, f"{wf}: inbox events lost in the restart: {list(missing)}"


def check_activity_runs(
    report: dict[str, Any], lines: list[dict[str, Any]]
) -> dict[tuple[str, int], int]:
    """At least once, at most twice, twice only if still a stored task at the kill.

    Returns, for each activity still stored as a task at the kill, how many times it had
    finished in the killed node (0, or 1 if it finished but its result was not committed).
    """
    by_activity: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for line in lines:
        by_activity.setdefault((line["wf"], line["seq"]), []).append(line)
    rerun: dict[tuple[str, int], int] = {}
    known = set()
    for wf, run in report["before"]["runs"].items():
        history = strip_markers(report["histories"][wf])
        killed = flat(run["activations"]) + run["inbox"]
        resolved_before = set(seqs(killed, "ActivityResolved"))
        pending_before = {t["seq"]: t for t in run["tasks"]}
        for seq in seqs(history, "ScheduleActivity"):
            known.add((wf, seq))
            mine = by_activity.get((wf, seq), [])
            done = Counter(x["phase"] for x in mine if x["event"] == "done")
            started = [(x["phase"], x["attempt"]) for x in mine if x["event"] == "start"]
            phases = Counter(phase for phase, _ in started)
            what = f"{wf} activity #{seq}: {mine}"
            assert len({x["key"] for x in mine}) == 1, f"idempotency key changed: {what}"
            if seq in resolved_before:
                assert phases["resume"] == 0, f"resolved before the kill, ran again: {what}"
                assert done == Counter(run=1), what
            elif seq in pending_before:
                assert done["resume"] == 1 and done["run"] <= 1, what
                assert phases["resume"] >= 1, what
                # A stored retry state survives: the attempt count does not start over.
                first_resumed = next(a for p, a in started if p == "resume")
                assert first_resumed >= pending_before[seq]["attempt"], what
                rerun[(wf, seq)] = done["run"]
            else:  # scheduled after the restart
                assert phases["run"] == 0 and done == Counter(resume=1), what
    assert set(by_activity) <= known, f"activities ran that no history schedules: {by_activity}"
    return rerun


def check_report(report: dict[str, Any], expected: dict[str, Any], lines: list[dict]) -> Any:
    """The checks every crash test makes (see the module docstring)."""
    assert set(report["before"]["runs"]) == set(expected)
    for wf, want in expected.items():
        got = report["exits"][wf]
        assert got["error"] is None, f"{wf} failed after the restart: {got['error']}"
        assert got["value"] == want, f"{wf}: result {got['value']}, expected {want}"
        described = report["describe"][wf]
        assert described["status"] == "completed" and described["result"] == want, described
        history = strip_markers(report["histories"][wf])
        check_history(wf, history)
        after = report["after"]["runs"][wf]
        assert canon(flat(after["activations"])) == canon(history), wf
        markers = [x["index"] for x in report["histories"][wf] if x["type"] == "WorkflowTask"]
        assert markers in ([], list(range(1, len(after["activations"]) + 1))), (wf, markers)
        check_outbox_at_kill(wf, report["before"]["runs"][wf])
        check_nothing_lost(wf, report["before"]["runs"][wf], after)
    assert report["after"]["counts"] == {"inbox": 0, "tasks": 0, "timers": 0}
    return check_activity_runs(report, lines)


def sq(x: int) -> int:
    return crash_app_base.square_plus_one(x)


# -- the tests -------------------------------------------------------------------------------


def test_kill_while_activities_run(tmp_path: Path) -> None:
    """Kill while activities are mid-execution: an async one (a trio task), a sync one (in
    a worker thread) and one on its second attempt after a failure and a retry; four more
    workflows run short chains of activities and are cut off wherever they are."""
    child = Child(tmp_path, "activities")
    child.start()
    held = ("hold-c", "hold-f", "hold-g")
    child.wait_for(
        "the three holding activities to start",
        lambda: all(child.marker(f"held-{label}") for label in held),
    )
    child.kill()
    report = child.resume()

    expected: dict[str, Any] = {
        "hold-async": [sq(x) for x in (1, 2, 3, 4)],
        "hold-sync": [sq(5), sq(6)],
        "hold-retry": sq(7),
    }
    for k in range(4):  # started first; on a loaded box the kill may still beat a start
        if f"busy-{k}" in report["before"]["runs"]:
            expected[f"busy-{k}"] = [sq(10 * k + i) for i in range(8)]
    lines = child.lines("activities.log")
    rerun = check_report(report, expected, lines)
    # The activities running at the kill were stored tasks, started and never finished in
    # the killed node, and ran again after the restart; the retried one went on from its
    # stored attempt (2: fails again, 3: succeeds) instead of starting over.
    seq_of = {x["label"]: (x["wf"], x["seq"]) for x in lines}
    for label in held:
        assert rerun[seq_of[label]] == 0, (label, rerun)
    in_run = sorted(x["label"] for x in lines if x["label"] in held and x["phase"] == "run")
    assert in_run == ["hold-c", "hold-f", "hold-g", "hold-g"], in_run  # starts, no "done"
    attempts = [(x["phase"], x["event"], x["attempt"]) for x in lines if x["label"] == "hold-g"]
    assert attempts == [
        ("run", "start", 1),
        ("run", "start", 2),
        ("resume", "start", 2),
        ("resume", "start", 3),
        ("resume", "done", 3),
    ], attempts


@pytest.mark.parametrize("kill", ["first-start", "self", "mid-gather"])
def test_kill_right_after_scheduling_many(tmp_path: Path, kill: str) -> None:
    """Kill just after workflows scheduled several activities and timers in one activation.

    Four fanout workflows are released at once; each then schedules six activities and
    four timers in one activation. ``first-start``: the test kills the node as soon as the
    first activity starts (the rest are still being dispatched, the other workflows still
    activating). ``self``: an activity of the "die" workflow SIGKILLs its own node the
    moment it starts, i.e. in the middle of the dispatch that follows the commit.
    ``mid-gather``: killed once fourteen activities finished (some results committed, some
    in flight, some activities still running or waiting, timers pending).
    """
    child = Child(tmp_path, "fanout_die" if kill == "self" else "fanout")
    child.start()
    if kill == "self":
        child.wait_killed_itself()
    else:
        count = 1 if kill == "first-start" else 14
        event = "start" if kill == "first-start" else "done"
        child.wait_for(
            f"{count} activities to {event}",
            lambda: child.has_lines("activities.log", count, event=event),
        )
        child.kill()
    report = child.resume()

    plans = {f"fan{k}": scenarios.FANOUT for k in range(3 if kill == "self" else 4)}
    if kill == "self":
        plans["die"] = scenarios.FANOUT_DIE
    expected = {}
    for wf, (delays, timers) in plans.items():
        got = [["activity", i, sq(i)] for i in range(len(delays))]
        got += [["timer", j, s] for j, s in enumerate(timers)]
        expected[wf] = {"got": sorted(got), "final": sq(len(delays))}
    late = [wf for wf in report["before"]["runs"] if wf.startswith("late-")]
    for wf in late:
        expected[wf] = [sq(int(wf.removeprefix("late-")))]
    rerun = check_report(report, expected, child.lines("activities.log"))

    # The activation that got "go" recorded every activity, every timer and the deadline
    # at once, if it was recorded before the kill; at least one was (an activity started).
    recorded = 0
    for wf, run in report["before"]["runs"].items():
        for act in run["activations"]:
            if any(e.get("topic") == "go" for e in act["events"]):
                recorded += 1
                issued = Counter(c["type"] for c in act["commands"])
                delays, timers = plans[wf]
                assert issued["ScheduleActivity"] == len(delays), (wf, issued)
                assert issued["StartTimer"] == len(timers) + 1, (wf, issued)
    assert recorded >= 1
    if kill == "self":
        # Workflows started up to the kill were all kept (ids are sequential).
        assert sorted(late) == sorted(f"late-{k}" for k in range(len(late)))
        # The activity that killed the node was a stored task; it ran again after restart.
        dead = [x for x in child.lines("activities.log") if x["phase"] == "run"]
        assert [x["event"] for x in dead if x["wf"] == "die"] == ["start"], dead
        (victim,) = [x["seq"] for x in dead if x["wf"] == "die"]
        assert rerun[("die", victim)] == 0


def test_kill_with_durable_timers_pending(tmp_path: Path) -> None:
    """Kill with two timers stored; one falls due while the node is down, one after.

    The first must fire at once on restart, the second at its stored due time: neither
    early nor lost, and each exactly once.
    """
    short, long = scenarios.SLEEP_SHORT, scenarios.SLEEP_LONG
    child = Child(tmp_path, "timers")
    child.start()
    child.wait_for("both timers to be stored", lambda: child.marker("ready"))
    ready_at = time.time()
    child.kill()
    # Stay down until the short timer is past due (it was stored before "ready").
    time.sleep(max(0.0, ready_at + short + 0.4 - time.time()))
    report = child.resume()
    opened_at = report["opened_at"]

    expected = {}
    for wf, seconds in (("sleep-short", short), ("sleep-long", long)):
        value = report["exits"][wf]["value"]
        expected[wf] = {"seconds": seconds, "before": value["before"], "after": value["after"]}
    check_report(report, expected, [])

    for wf, seconds in (("sleep-short", short), ("sleep-long", long)):
        run = report["before"]["runs"][wf]
        (timer,) = run["timers"]
        started_at = run["activations"][0]["at"]
        due = timer["due"]
        assert due == pytest.approx(started_at + seconds, abs=1e-3), (wf, timer)
        assert due > child.killed_at, f"{wf}: the timer was due before the kill"
        value = report["exits"][wf]["value"]
        before = dt.datetime.fromisoformat(value["before"]).timestamp()
        fired = dt.datetime.fromisoformat(value["after"]).timestamp()
        assert before == pytest.approx(started_at, abs=1e-3)
        # Never early: not before its stored due time...
        assert fired >= due, f"{wf}: fired {due - fired:.3f}s early"
        # ...and not re-armed for its whole duration by the restart: it fired at its stored
        # due time, or at once after the restart if it fell due while the node was down.
        assert fired < opened_at + seconds, f"{wf}: fired {fired - due:.3f}s after its due time"
        late = fired - max(due, opened_at)
        assert late < 1.5, f"{wf}: fired {late:.3f}s late"
    short_due = report["before"]["runs"]["sleep-short"]["timers"][0]["due"]
    assert short_due < opened_at, "the short timer should fall due while the node is down"
    # The long one is normally still pending at the restart (due ~3s later); on a box so
    # loaded that the restart took longer, it fell due too and the checks above still hold.


@pytest.mark.parametrize("burst", [1, scenarios.SIGNAL_BURST])
def test_kill_with_signals_in_flight(tmp_path: Path, burst: int) -> None:
    """A plain process signals a workflow, logging each value once its receipt resolved.

    ``burst=1``: each send is awaited before the next. ``burst=5``: five sends, then their
    five receipts awaited in turn. Killed mid-stream: every logged signal is in the result
    after the restart, none twice, in the order sent; of those in flight at the kill
    (unlogged), only a prefix may have made it in (one sender: FIFO, no gaps).
    """
    child = Child(tmp_path, "signals" if burst == 1 else "signal_bursts")
    child.start()
    # Bursts: enough of them that a reordering within a burst is all but certain to show.
    acknowledged = 25 if burst == 1 else 80
    child.wait_for(
        f"{acknowledged} acknowledged signals",
        lambda: child.has_lines("signals.log", acknowledged),
    )
    child.kill()
    report = child.resume()

    logged = [x["i"] for x in child.lines("signals.log")]
    assert logged == list(range(len(logged))), logged  # receipts awaited in send order
    got = report["exits"]["sig"]["value"]["got"]
    extra = list(range(scenarios.SIGNAL_BASE, scenarios.SIGNAL_BASE + scenarios.SIGNAL_EXTRA))
    received = len(got) - len(extra)
    assert got == [*range(received), *extra], f"lost, reordered or doubled signals: {got}"
    assert len(logged) <= received <= len(logged) + burst, (logged, got)
    expected = {
        "sig": {
            "got": got,
            "squares": [sq(v) for v in got if v % scenarios.SIGNAL_EVERY == 0],
        }
    }
    check_report(report, expected, child.lines("activities.log"))
    arrived = [
        x["payload"]
        for x in report["histories"]["sig"]
        if x["type"] == "MessageArrived" and x["topic"] == "add"
    ]
    assert arrived == [*got, None], arrived
