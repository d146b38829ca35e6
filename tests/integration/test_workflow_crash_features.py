"""The newer workflow features survive a real crash: SIGKILL a node, restart it, check.

The harness of ``test_workflow_crash.py`` (``crash_app.py`` in a subprocess on an LMDB data
dir, ``durability="sync"``, killed with SIGKILL and restarted on the same dir), applied to
child workflows, ``process.call`` between workflows, workflow retry policies, cron
schedules, start delays and run timeouts. The restarted node reads what the killed one left
in the store (``before``), runs the scenario's resume step, and reports the store per run id
(``after``): a retried or cron workflow is several runs under one id.

Besides what each test checks of its feature, every test checks the store as
``test_workflow_crash.py`` does, for every run:

- one ``Started`` and at most one closing command, last; activity and timer seqs unique;
  every activity resolved at most once (exactly once in a run its own code closed), every
  timer fired at most once;
- nothing lost: the killed node's activations are a prefix of the final ones, and its
  pending inbox events were fed later (unless the run was then closed from outside);
- the store was consistent at the kill: an open run's scheduled activity was resolved or a
  stored task, its started timer fired or stored; a closed run kept no task or inbox event;
- at-least-once, never more: an activity resolved before the kill did not run again, one
  stored as a task at the kill ran again at most once, others ran only after the restart;
- nothing left over: no inbox events or tasks. Timer rows of closed runs may remain until
  they fall due (a ``process.call`` deadline, the sleep of a run its run_timeout ended, the
  run_timeout of a run that completed): firing them is a no-op (see ``check_store``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import crash_app_features as scenarios
import pytest
import trio
from test_workflow_crash import (  # the harness (Child) and its helpers
    Child,
    _no_stray_children,  # noqa: F401 - the autouse fixture: no node outlives a test
    canon,
    flat,
    seqs,
    sq,
)

import roost
from roost import process

pytestmark = pytest.mark.slow

CLOSERS = ("Complete", "Fail", "ContinueAsNew")


# -- reading the report ----------------------------------------------------------------------


def runs_of(snap: dict[str, Any], wf: str) -> list[dict[str, Any]]:
    """The runs of workflow ``wf`` in the order they began (a run not yet begun last)."""
    found = [
        {**run, "run_id": run_id}
        for run_id, run in snap["runs"].items()
        if run["workflow_id"] == wf
    ]
    return sorted(found, key=lambda r: r["activations"][0]["at"] if r["activations"] else math.inf)


def started(run: dict[str, Any]) -> dict[str, Any]:
    """The run's ``Started`` event (in its first activation, or still in its inbox)."""
    first = (flat(run["activations"]) or run["inbox"])[0]
    assert first["type"] == "Started", first
    return first


def begun_at(run: dict[str, Any]) -> float:
    """When the run's code first ran: its first activation's time (workflow time)."""
    return float(run["activations"][0]["at"])


def ended_by_code(history: list[dict[str, Any]]) -> bool:
    return bool(history) and history[-1]["type"] in CLOSERS


def is_open(run: dict[str, Any]) -> bool:
    return run["record"] is not None and run["record"]["status"] == "running"


def lines_by_key(lines: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Activity log lines by (run id, seq), from their idempotency key."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for line in lines:
        _wf, run_id, seq = line["key"].rsplit("/", 2)
        out.setdefault((run_id, int(seq)), []).append(line)
    return out


# -- checks ----------------------------------------------------------------------------------


def check_run_history(run_id: str, history: list[dict[str, Any]]) -> None:
    """One start; a closing command only last; activities and timers resolved at most once
    (every activity exactly once if the run's own code closed it)."""
    if not history:
        return
    types = Counter(x["type"] for x in history)
    assert history[0]["type"] == "Started" and types["Started"] == 1, (run_id, history[:2])
    assert history[0]["run_id"] == run_id
    assert sum(types[c] for c in CLOSERS) <= 1, (run_id, types)
    scheduled, timers = seqs(history, "ScheduleActivity"), seqs(history, "StartTimer")
    assert len(set(scheduled)) == len(scheduled), f"{run_id}: activity seq reused: {scheduled}"
    assert len(set(timers)) == len(timers), f"{run_id}: timer seq reused: {timers}"
    resolved = Counter(seqs(history, "ActivityResolved"))
    fired = Counter(seqs(history, "TimerFired"))
    assert set(resolved) <= set(scheduled) and max(resolved.values(), default=1) == 1, (
        f"{run_id}: scheduled {scheduled}, resolved {resolved}"
    )
    assert set(fired) <= set(timers) and max(fired.values(), default=1) == 1, (
        f"{run_id}: timers {timers}, fired {fired}"
    )
    if ended_by_code(history):
        assert resolved == Counter(scheduled), f"{run_id}: closed with activities unresolved"


def check_store(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The store checks of the module docstring; returns the timer rows left at the end."""
    before, after = report["before"], report["after"]
    assert set(before["runs"]) <= set(after["runs"]), "a run vanished in the restart"
    for run_id, run in after["runs"].items():
        history = flat(run["activations"])
        check_run_history(run_id, history)
        old = before["runs"].get(run_id)
        if old is None:
            continue
        # Nothing lost: the killed node's activations are a prefix, its inbox was fed later.
        acts, new = old["activations"], run["activations"]
        assert len(new) >= len(acts), f"{run_id}: history shrank"
        for i, (a, b) in enumerate(zip(acts, new, strict=False)):
            assert canon(a) == canon(b), f"{run_id}: activation {i + 1} changed in the restart"
        if ended_by_code(history):  # (a run closed from outside drops its inbox)
            later = Counter(canon(e) for act in new[len(acts) :] for e in act["events"])
            missing = Counter(canon(e) for e in old["inbox"]) - later
            assert not missing, f"{run_id}: inbox events lost in the restart: {list(missing)}"
        # The transactional outbox at the kill.
        killed = flat(acts) + old["inbox"]
        tasks = [t["seq"] for t in old["tasks"]]
        stored = [t["seq"] for t in old["timers"] if t["kind"] == "timer"]
        if not is_open(old):
            assert not tasks and not old["inbox"], f"{run_id}: a closed run kept work"
            continue
        resolved, fired = seqs(killed, "ActivityResolved"), seqs(killed, "TimerFired")
        for seq in seqs(killed, "ScheduleActivity"):
            where = resolved.count(seq) + tasks.count(seq)
            assert where == 1, f"{run_id}: activity #{seq} at the kill: {resolved=} {tasks=}"
        assert set(tasks) <= set(seqs(killed, "ScheduleActivity")), f"{run_id}: unrecorded task"
        for seq in seqs(killed, "StartTimer"):
            where = fired.count(seq) + stored.count(seq)
            assert where == 1, f"{run_id}: timer #{seq} at the kill: {fired=} {stored=}"
        assert set(stored) <= set(seqs(killed, "StartTimer")), f"{run_id}: unrecorded timer"
    # Nothing left over but timers of closed runs, which fire into nothing when due.
    assert after["counts"]["inbox"] == 0 and after["counts"]["tasks"] == 0, after["counts"]
    left = [t for run in after["runs"].values() for t in run["timers"]]
    for timer in left:
        assert not is_open(after["runs"][timer["run_id"]]), f"an open run's timer: {timer}"
    assert after["counts"]["timers"] == len(left)
    return left


def check_activity_runs(
    report: dict[str, Any], lines: list[dict[str, Any]]
) -> dict[tuple[str, int], str]:
    """At least once, never more (see the module docstring), by idempotency key.

    Returns how each activity stood at the kill: "resolved", "task" (stored, so it may
    have run twice) or "after" (scheduled after the restart).
    """
    before, after = report["before"]["runs"], report["after"]["runs"]
    by_key = lines_by_key(lines)
    status = {}
    for run_id, run in after.items():
        history = flat(run["activations"])
        old = before.get(run_id)
        killed = flat(old["activations"]) + old["inbox"] if old is not None else []
        tasks = {t["seq"] for t in old["tasks"]} if old is not None else set()
        resolved_at_kill = set(seqs(killed, "ActivityResolved"))
        resolved = set(seqs(history, "ActivityResolved"))
        for seq in seqs(history, "ScheduleActivity"):
            mine = by_key.pop((run_id, seq), [])
            done = Counter(x["phase"] for x in mine if x["event"] == "done")
            begun = Counter(x["phase"] for x in mine if x["event"] == "start")
            what = f"{run['workflow_id']} run {run_id} activity #{seq}: {mine}"
            finished_once = seq in resolved  # (else its run was closed from outside)
            if seq in resolved_at_kill:
                status[(run_id, seq)] = "resolved"
                assert begun["resume"] == 0 and done == Counter(run=1), what
            elif seq in tasks:  # it may have run (even finished) before the kill: once more
                status[(run_id, seq)] = "task"
                assert done["run"] <= 1, what
                assert done["resume"] == 1 if finished_once else done["resume"] <= 1, what
            else:
                status[(run_id, seq)] = "after"
                assert begun["run"] == 0 and done["run"] == 0, what
                assert done["resume"] == 1 if finished_once else done["resume"] <= 1, what
    assert not by_key, f"activities ran that no history schedules: {by_key}"
    return status


def check_report(report: dict[str, Any], *logs: list[dict[str, Any]]) -> Any:
    left = check_store(report)
    status = check_activity_runs(report, [line for log in logs for line in log])
    return left, status


def exit_value(report: dict[str, Any], wf: str) -> Any:
    got = report["exits"][wf]
    assert got["error"] is None, f"{wf} failed after the restart: {got['error']}"
    return got["value"]


def pid_str(wf: str) -> str:
    return str(scenarios.wf_pid(wf))


# -- child workflows -------------------------------------------------------------------------


def kid_result(label: str, workflow_id: str, x: int) -> dict[str, Any]:
    return {"label": label, "id": workflow_id, "values": [sq(x), sq(x + 1)]}


@pytest.mark.parametrize("kill", ["held", "mid"])
def test_kill_while_child_workflows_run(tmp_path: Path, kill: str) -> None:
    """A parent starts three async children (``process.spawn``) and two sync ones
    (``process.exec``, then ``workflow.exec`` with an explicit id), each running two
    activities, and gathers the async children's EXITs.

    ``held``: killed while an async and a sync child each hold in an activity, once the
    two other async children finished and their EXITs are in the parent's history (so a
    restart must not report them again). ``mid``: killed once six activities finished,
    wherever the family is (typically a child has closed but its EXIT is not yet in the
    parent's inbox: the restart reports it). After the restart the parent returns what an
    uncrashed run returns;
    every child id is the same, has exactly one run, ran to completion once, and its EXIT
    reached the parent exactly once.
    """
    held = kill == "held"
    child = Child(tmp_path, "children_hold" if held else "children")
    child.start()
    if held:
        markers = [f"held-{label}-a" for label in scenarios.KIDS_HELD]
        child.wait_for(
            "two children to hold, two to finish and their EXITs recorded",
            lambda: all(child.marker(m) for m in [*markers, "exits-in"]),
        )
    else:
        child.wait_for("six activities", lambda: child.has_lines("activities.log", 6, event="done"))
    child.kill()
    report = child.resume()

    def label(name: str) -> str:
        hold = f"hold-{name}"
        return hold if held and hold in scenarios.KIDS_HELD else name

    async_ids = [f"fam.{i + 1}" for i in range(len(scenarios.KIDS))]  # seqs 1..3
    sync_ids = ["fam.4", "fam-sync1"]  # seq 4 (a generated id), then an explicit one
    kids = [(i, label(n), x) for i, (n, x) in zip(async_ids, scenarios.KIDS, strict=True)]
    sync = [(i, label(n), x) for i, (n, x) in zip(sync_ids, scenarios.SYNC_KIDS, strict=True)]
    expected = {
        "spawned": async_ids,
        "async": [kid_result(n, i, x) for i, n, x in kids],
        "sync": [kid_result(n, i, x) for i, n, x in sync],
        "late": [],
    }
    assert exit_value(report, "fam") == expected
    lines = child.lines("activities.log")
    _left, status = check_report(report, lines)

    # Child ids are stable and each child ran once: one run, completed with its result.
    after = report["after"]
    assert set(after["records"]) == {"fam", *async_ids, *sync_ids}
    for child_id, name, x in kids + sync:
        (run,) = runs_of(after, child_id)
        assert started(run)["parent"] == pid_str("fam")
        record = after["records"][child_id]
        assert record["status"] == "completed", record
        assert record["result"] == kid_result(name, child_id, x)
        assert flat(run["activations"])[-1]["type"] == "Complete"
    # The parent started each child once and got each one's EXIT once.
    (parent,) = runs_of(after, "fam")
    history = flat(parent["activations"])
    assert [x["workflow_id"] for x in history if x["type"] == "StartChild"] == [
        *async_ids,
        *sync_ids,
    ]
    exits = Counter(x["pid"] for x in history if x["type"] == "ProcessExited")
    assert exits == Counter(pid_str(i) for i in async_ids + sync_ids), exits
    assert all(x["error"] is None for x in history if x["type"] == "ProcessExited")
    assert after["counts"]["timers"] == 0  # the parent's 0.3 s wait fired

    before = report["before"]
    assert "fam" in before["records"]  # started before the kill; its children at once
    assert set(async_ids + sync_ids[:1]) <= set(before["records"])
    if held:
        # The held activities were stored tasks at the kill, and ran again after it.
        for name in scenarios.KIDS_HELD:
            (start,) = [x for x in lines if x["label"] == f"{name}-a" and x["phase"] == "run"]
            assert start["event"] == "start"
            wf, run_id, seq = start["key"].rsplit("/", 2)
            assert status[(run_id, int(seq))] == "task", (wf, status)
        # The two other async children had finished and their EXITs were in the parent's
        # history at the kill: the restart did not report them again (once each, above).
        for child_id in ("fam.1", "fam.3"):
            assert before["records"][child_id]["status"] == "completed"
        (old,) = runs_of(before, "fam")
        recorded = [x["pid"] for x in flat(old["activations"]) if x["type"] == "ProcessExited"]
        assert sorted(recorded) == [pid_str("fam.1"), pid_str("fam.3")]


# -- process.call between workflows ----------------------------------------------------------


@pytest.mark.parametrize("kill", ["held", "mid"])
def test_kill_with_calls_between_workflows_in_flight(tmp_path: Path, kill: str) -> None:
    """Two workflows each make four ``process.call``s at once to a third, which replies
    "ack", runs an activity, counts the request and replies "ok".

    ``held``: killed while the callee's activity for request 3 holds (the other requests
    answered or queued). ``mid``: killed once three requests were worked on. After the
    restart every call got exactly one "ack" and one "ok", the callee saw each request
    once and counted it once, in each caller's order, and the callers return what an
    uncrashed run returns.
    """
    held = kill == "held"
    child = Child(tmp_path, "calls_hold" if held else "calls")
    child.start()
    if held:
        child.wait_for(
            "the held request", lambda: child.marker(f"held-hold-t{scenarios.CALL_HELD}")
        )
    else:
        child.wait_for("three requests", lambda: child.has_lines("activities.log", 3, event="done"))
    child.kill()
    report = child.resume()

    every = [n for ns in scenarios.CALLS.values() for n in ns]
    for wf, ns in scenarios.CALLS.items():
        assert exit_value(report, wf) == [[n, {"n": n, "sq": sq(n)}] for n in ns], wf
    final = exit_value(report, "tally")
    assert final["count"] == sum(every), final
    assert sorted(final["seen"]) == sorted(every), f"a request lost or doubled: {final}"
    for ns in scenarios.CALLS.values():  # one sender's requests are served in its order
        assert [n for n in final["seen"] if n in ns] == ns, final
    assert report["stopped"] == final
    lines = child.lines("activities.log")
    check_report(report, lines)

    # Each call: one request in the callee's history, one "ack" and one "ok" back.
    after = report["after"]
    (callee,) = runs_of(after, "tally")
    served = flat(callee["activations"])
    adds = [x for x in served if x["type"] == "MessageArrived" and x["topic"] == "add"]
    assert Counter(x["sender"] for x in adds).most_common(1)[0][1] == 1, adds
    reply_to = set()
    for wf in scenarios.CALLS:
        (caller,) = runs_of(after, wf)
        history = flat(caller["activations"])
        calls = {x["seq"]: x for x in history if x["type"] == "SendMessage" and x["reply_to"]}
        assert len(calls) == len(scenarios.CALLS[wf]), calls
        reply_to |= {x["reply_to"] for x in calls.values()}
        for seq in calls:
            got = Counter(
                x["topic"] for x in history if x["type"] == "MessageArrived" and x["call"] == seq
            )
            assert got == Counter(ack=1, ok=1), f"{wf} call #{seq}: replies {got}"
    assert {x["sender"] for x in adds} == reply_to
    answers = Counter(
        (x["dest"], x["topic"])
        for x in served
        if x["type"] == "SendMessage" and x["dest"] in reply_to
    )
    assert answers == Counter({(r, t): 1 for r in reply_to for t in ("ack", "ok")}), answers
    # One activity per request, each of which ran to completion once (at least once).
    assert len(seqs(served, "ScheduleActivity")) == len(every)
    labels = Counter(x["label"] for x in lines if x["event"] == "done")
    assert set(labels) == {
        f"hold-t{n}" if held and n == scenarios.CALL_HELD else f"t{n}" for n in every
    }


# -- workflow retry policy -------------------------------------------------------------------


@pytest.mark.parametrize("kill_after", [1, 2])
def test_kill_during_a_workflow_retry_backoff(tmp_path: Path, kill_after: int) -> None:
    """Workflow "retry" fails attempts 1 and 2 and succeeds on 3; "retry-out" fails every
    attempt and gives up after 3. The backoff is RETRY_INTERVAL (1 s), constant.

    Killed in the backoff after attempt ``kill_after`` of "retry" (its next run committed,
    waiting to start). With ``kill_after=1`` the node restarts at once, before the backoff
    ends; with 2 it stays down longer than the backoff. Either way each attempt runs
    exactly once, in order, none skipped or repeated; a run starts no earlier than its
    backoff allows and no later than the restart; the results are as uncrashed.
    """
    interval = scenarios.RETRY_INTERVAL
    child = Child(tmp_path, "retry")
    child.start()
    child.wait_for(
        f"the backoff after attempt {kill_after}", lambda: child.marker(f"backoff-{kill_after}")
    )
    child.kill()
    if kill_after == 2:
        time.sleep(interval + 0.3)  # the backoff ends while the node is down
    report = child.resume()

    # The kill came in the backoff: the next attempt's run was stored, not yet begun.
    waiting = report["before"]["records"]["retry"]
    assert (waiting["attempt"], waiting["status"]) == (kill_after + 1, "running"), waiting
    assert waiting["not_before"] > child.killed_at, "the next attempt was due at the kill"
    (next_run,) = [r for r in runs_of(report["before"], "retry") if r["record"] is not None]
    assert next_run["activations"] == [] and next_run["tasks"] == []

    assert exit_value(report, "retry") == {"attempt": scenarios.RETRY_FAIL_UNTIL}
    out = report["exits"]["retry-out"]
    assert out["error"]["kind"] == "Unavailable"
    assert out["error"]["message"] == f"attempt {scenarios.RETRY_OUT_MAX} failed"
    described = report["describe"]
    assert described["retry"]["status"] == "completed"
    assert described["retry"]["attempt"] == scenarios.RETRY_FAIL_UNTIL
    assert described["retry-out"]["status"] == "failed"
    assert described["retry-out"]["attempt"] == scenarios.RETRY_OUT_MAX
    lines = child.lines("attempts.log")
    check_report(report, lines)

    opened_at = report["opened_at"]
    for wf, count in (
        ("retry", scenarios.RETRY_FAIL_UNTIL),
        ("retry-out", scenarios.RETRY_OUT_MAX),
    ):
        runs = runs_of(report["after"], wf)
        assert [started(r)["attempt"] for r in runs] == list(range(1, count + 1)), wf
        closing = [flat(r["activations"])[-1]["type"] for r in runs]
        assert closing == ["Fail"] * (count - 1) + ["Complete" if wf == "retry" else "Fail"]
        # Each run logged its own attempt, and no attempt number was skipped or repeated.
        # (An attempt's activity may have run twice, at least once: a stored task at the
        # kill. check_activity_runs checks that; here it counts once, by its run.)
        logged = {x["run"]: x["attempt"] for x in lines if x["label"] == wf}
        assert list(logged) == [r["run_id"] for r in runs], (wf, lines)
        assert list(logged.values()) == list(range(1, count + 1)), (wf, lines)
        for earlier, later in itertools.pairwise(runs):
            failed_at = earlier["activations"][-1]["at"]
            due = failed_at + interval
            begun = begun_at(later)
            assert begun >= due - 1e-3, f"{wf}: attempt began {due - begun:.3f}s early"
            late = begun - max(due, opened_at)
            assert late < 1.5, f"{wf}: attempt began {late:.3f}s late"
    retry = [x for x in lines if x["label"] == "retry" and x["event"] == "done"]
    assert [x["phase"] for x in retry] == ["run"] * kill_after + ["resume"] * (3 - kill_after)


# -- cron schedule ---------------------------------------------------------------------------


def test_kill_mid_cron_schedule(tmp_path: Path) -> None:
    """Two every-second cron workflows ("cron-a": a quick activity; "cron-b": a 0.5 s one),
    killed (the node kills itself: a known state, no timing window) while cron-b's second
    run is in its activity and cron-a is between runs, its runs so far (normally two)
    completed and its next one committed; down for 1.2 s, restarted; after CRON_AFTER more
    runs of each, terminated.

    Checked: one run per schedule time, even across the restart (no fire second appears
    twice; run start times strictly increase); no run starts before its fire time; the
    schedule resumes after the restart and stops at the terminate.

    Observed (and checked), by where a schedule was at the kill:

    - between runs (cron-a, normally): its next run was committed, waiting for its fire
      time, which passed while the node was down. That run begins at once after the
      restart, late; the fires missed while down are skipped (no catch-up burst), and the
      schedule goes on from the next second after that run.
    - in a run (cron-b): the run cut off (its activity a stored task, run again: at least
      once) completes after the restart, and the next run is at the next fire time after
      that; the fires missed while down are skipped.
    """
    child = Child(tmp_path, "cron")
    child.start()
    # The node kills itself in a known state (see crash_app_features.run_cron): cron-b's second run
    # in its activity, cron-a between runs with its runs so far done, noted in kill.log.
    child.wait_killed_itself()
    (kill,) = child.lines("kill.log")
    runs_before = kill["runs_before"]
    assert runs_before["cron-b"] == 2 and runs_before["cron-a"] >= 2, runs_before
    time.sleep(1.2)  # fires fall due while the node is down
    report = child.resume()
    opened_at, terminated_at = report["opened_at"], report["terminated_at"]

    for wf in ("cron-a", "cron-b"):
        got = report["exits"][wf]["error"]
        assert got is not None and got["kind"] == "Canceled", got
        assert report["describe"][wf]["status"] == "terminated"
    lines = child.lines("cron.log")
    _left, status = check_report(report, lines)
    assert report["after"]["counts"]["timers"] == 0  # a terminated run's start timer fired

    cases = {}
    for wf in ("cron-a", "cron-b"):
        runs = runs_of(report["after"], wf)
        begun = [r for r in runs if r["activations"]]
        starts = [begun_at(r) for r in begun]
        assert all(started(r)["attempt"] == 1 for r in begun)
        fire_seconds = [math.floor(s) for s in starts]
        assert len(set(fire_seconds)) == len(fire_seconds), f"{wf}: a fire ran twice: {starts}"
        assert fire_seconds == sorted(fire_seconds), starts
        # Every run but the last completed (the last one was terminated, begun or not).
        for run in begun[:-1]:
            assert flat(run["activations"])[-1]["type"] == "Complete", run
        assert runs[-1]["record"]["status"] == "terminated"
        # Never early: a run begins at a whole second after the previous run completed.
        for earlier, later in itertools.pairwise(begun):
            completed = earlier["activations"][-1]["at"]
            assert begun_at(later) >= math.floor(completed) + 1 - 1e-3, (wf, starts)
        # The logged start time is the run's (replayed) workflow time, for every line.
        for run in begun:
            logged = {x["at"] for x in lines if x["run"] == run["run_id"]}
            assert logged <= {begun_at(run)}, (wf, run["run_id"], logged)
        # Runs before the kill, none while down, then on after the restart, until the end.
        ran_before = [s for s in starts if s < child.killed_at]
        resumed = [r for r in begun if begun_at(r) >= opened_at]
        assert len(ran_before) + len(resumed) == len(starts), (wf, starts, opened_at)
        assert len(ran_before) == runs_before[wf], (wf, starts, child.killed_at, runs_before)
        assert len(resumed) >= scenarios.CRON_AFTER, (wf, starts)
        assert all(s < terminated_at for s in starts), f"{wf}: a run began after the terminate"
        # Where the schedule was at the kill decides what comes first after the restart.
        (cut,) = [r for r in runs_of(report["before"], wf) if is_open(r)]
        first = resumed[0]
        if cut["activations"]:  # in a run: it completes after the restart...
            cases[wf] = "in a run"
            finished = report["after"]["runs"][cut["run_id"]]["activations"][-1]
            assert finished["at"] >= opened_at and finished["commands"][-1]["type"] == "Complete"
            assert begun_at(first) < math.floor(finished["at"]) + 1 + 1.0, "the next run late"
        else:  # between runs: the next one, overdue, begins at once; none in its place
            cases[wf] = "between runs"
            assert cut["record"]["not_before"] < opened_at, "it was not due at the restart"
            assert first["run_id"] == cut["run_id"]
            assert begun_at(first) < opened_at + 1.0, "the overdue run began late"
        # Fires missed while down were skipped: the next after the restart is a whole
        # second after the first one (no burst of catch-up runs).
        if len(resumed) > 1:
            assert begun_at(resumed[1]) >= math.floor(begun_at(first)) + 1 - 1e-3
        # (An overdue run due the second after the last one may begin late in that very
        # second when the restart is quick; it is that fire, not a second one.)
        assert math.floor(begun_at(first)) >= math.floor(ran_before[-1]) + 1
    # cron-b's 0.5 s activity was in flight: a stored task at the kill, run again after it.
    assert cases["cron-b"] == "in a run", cases
    (cut,) = [r for r in runs_of(report["before"], "cron-b") if is_open(r)]
    (task,) = cut["tasks"]
    assert status[(cut["run_id"], task["seq"])] == "task"


# -- start delay -----------------------------------------------------------------------------


def test_kill_before_a_start_delay_ends(tmp_path: Path) -> None:
    """Two workflows started with a start delay (DELAY_SHORT, DELAY_LONG), each sent an
    "item" before it began, killed at once; the short delay ends while the node is down.

    After the restart each runs exactly once: the short one at once, the long one at its
    stored start time, neither before it; the item sent before the kill is there.
    """
    child = Child(tmp_path, "delay")
    child.start()
    child.wait_for("the delayed starts", lambda: child.marker("ready"))
    ready_at = time.time()
    child.kill()
    time.sleep(max(0.0, ready_at + scenarios.DELAY_SHORT + 0.3 - time.time()))
    report = child.resume()
    opened_at = report["opened_at"]

    lines = child.lines("delay.log")
    check_report(report, lines)
    for wf, delay in (("delay-short", scenarios.DELAY_SHORT), ("delay-long", scenarios.DELAY_LONG)):
        (old,) = runs_of(report["before"], wf)
        record = old["record"]
        start_at = record["not_before"]
        assert start_at == pytest.approx(record["started_at"] + delay, abs=1e-3)
        # At the kill: nothing had run; the start and the item were stored, and the timer.
        assert old["activations"] == [] and start_at > child.killed_at
        assert [e["type"] for e in old["inbox"]] == ["Started", "MessageArrived"]
        assert [(t["kind"], t["due"]) for t in old["timers"]] == [("start", start_at)]
        value = exit_value(report, wf)
        assert value["items"] == ["a", "b"]
        (run,) = runs_of(report["after"], wf)
        assert value["at"] == begun_at(run)
        assert value["at"] >= start_at, f"{wf} began {start_at - value['at']:.3f}s early"
        late = value["at"] - max(start_at, opened_at)
        assert late < 1.5, f"{wf} began {late:.3f}s late"
        done = [x for x in lines if x["label"] == wf and x["event"] == "done"]
        assert [x["phase"] for x in done] == ["resume"]
    assert report["before"]["records"]["delay-short"]["not_before"] < opened_at
    # The long one normally is still waiting at the restart; on a box so loaded that the
    # restart took longer, it fell due too and the checks above still hold.


# -- run timeout -----------------------------------------------------------------------------


def test_run_timeout_expires_while_the_node_is_down(tmp_path: Path) -> None:
    """Two workflows whose first attempt sleeps far longer than its run_timeout; "rt-retry"
    has a retry policy. Killed while they sleep, down until the timeouts passed.

    After the restart "rt-final" is closed at once as timed out (not given a fresh
    timeout), and "rt-retry"'s first run too, after which its second attempt runs once,
    after the backoff, and completes.
    """
    timeout, backoff = scenarios.RUN_TIMEOUT, scenarios.RUN_TIMEOUT_RETRY
    child = Child(tmp_path, "timeout")
    child.start()
    child.wait_for("both workflows asleep", lambda: child.marker("ready"))
    ready_at = time.time()
    child.kill()
    time.sleep(max(0.0, ready_at + timeout + 0.3 - time.time()))
    report = child.resume()
    opened_at = report["opened_at"]
    left, _status = check_report(report, child.lines("timeout.log"))

    for wf in ("rt-retry", "rt-final"):  # the timeouts were stored, and fell due while down
        (old,) = runs_of(report["before"], wf)
        (due,) = [t["due"] for t in old["timers"] if t["kind"] == "run_timeout"]
        assert due == pytest.approx(old["record"]["started_at"] + timeout, abs=1e-3)
        assert child.killed_at < due < opened_at, (wf, child.killed_at, due, opened_at)

    final = report["exits"]["rt-final"]
    assert final["error"]["kind"] == "Timeout" and final["details"]["timeout_type"] == "run"
    described = report["describe"]["rt-final"]
    assert described["status"] == "timed_out"
    assert described["closed_at"] >= described["started_at"] + timeout
    # At the restart: not a full (fresh) run_timeout after it.
    assert described["closed_at"] < opened_at + timeout, "not closed promptly after the restart"
    (run,) = runs_of(report["after"], "rt-final")
    assert run["activations"] == runs_of(report["before"], "rt-final")[0]["activations"]

    assert exit_value(report, "rt-retry") == 2
    assert report["describe"]["rt-retry"]["attempt"] == 2
    first, second = runs_of(report["after"], "rt-retry")
    assert [started(first)["attempt"], started(second)["attempt"]] == [1, 2]
    assert not ended_by_code(flat(first["activations"]))  # closed from outside
    assert begun_at(second) >= begun_at(first) + timeout + backoff - 1e-3
    assert begun_at(second) >= opened_at + backoff - 0.05
    assert begun_at(second) < opened_at + backoff + 1.5
    done = [x for x in child.lines("timeout.log") if x["event"] == "done"]
    assert [(x["label"], x["attempt"], x["phase"]) for x in done] == [("rt-retry", 2, "resume")]
    # Nothing stays behind: the sleeps of the two timed-out runs and the completed run's
    # own run_timeout went with the transactions that closed them.
    assert left == [], left


# -- regressions found on the way (no crash needed) ------------------------------------------
# terminate() drops the run from the open runs at once and commits its close in a task;
# until that commit, monitor() and spawn() of the id must still see the run being closed.


async def test_monitor_right_after_terminate_gets_the_terminated_exit() -> None:
    async with roost.open_node(scenarios.app):
        pid = await process.with_options(id="t").spawn(scenarios.tally, -1)
        process.terminate(pid)
        process.monitor(pid)
        event = await process.events().receive()
        assert event.error is not None and event.error.kind is roost.ErrorKind.CANCELED, event


async def test_a_start_right_after_terminate_runs() -> None:
    async with roost.open_node(scenarios.app):
        pid = await process.with_options(id="t").spawn(scenarios.tally, -1)
        process.terminate(pid)
        with trio.fail_after(3):
            assert await process.with_options(id="t").exec(scenarios.asker, pid, []) == []
