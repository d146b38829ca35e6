"""The saga and worker-pool patterns of examples/saga.py and examples/worker_pool.py.

The example workflows themselves run here on a real node under trio's MockClock (the
``autojump_clock`` fixture), so every timer and activity sleep finishes at once and the
order of events is deterministic. A small generic saga (``steps``, below) reuses the
example's ``Compensations`` helper with failures chosen per test.
"""

import importlib.util
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
import trio

import roost
from roost import funcs, process
from roost.testing import Replayer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"patterns_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


saga = load_example("saga")
pool = load_example("worker_pool")


@pytest.fixture(autouse=True)
def clear_logs():
    saga.CALLS.clear()
    pool.RUNS.clear()
    pool.SPANS.clear()
    undo_log.clear()


def scheduled(history) -> list[str]:
    """The short names of the activities a history scheduled, in order."""
    return [e.entry.split(":")[1] for e in history if type(e).__name__ == "ScheduleActivity"]


# -- the saga example -------------------------------------------------------------------------


async def run_saga(workflow_id, spec):
    async with roost.open_node(saga.app) as node:
        result = await process.with_options(id=workflow_id).exec(saga.order_saga, spec)
        history = node.history(workflow_id)
    return result, history


async def test_saga_success_runs_no_compensation(autojump_clock):
    result, history = await run_saga("ok", saga.order("o-1", "1 Main St"))
    assert result == {
        "status": "completed",
        "reservation": "res-o-1",
        "payment": "pay-o-1",
        "tracking": "TRK-o-1",
    }
    assert saga.CALLS == ["reserve_inventory o-1", "charge_payment o-1", "ship_order o-1"]
    assert scheduled(history) == ["reserve_inventory", "charge_payment", "ship_order"]


async def test_saga_compensates_in_reverse_order(autojump_clock):
    result, history = await run_saga("no-address", saga.order("o-2", ""))
    assert result == {
        "status": "failed",
        "step": "shipping",
        "error": "[Invalid] no shipping address",
        "compensated": ["refund_payment", "release_inventory"],
    }
    # Newest first: the refund (of the charge) before the release (of the reservation).
    assert saga.CALLS == [
        "reserve_inventory o-2",
        "charge_payment o-2",
        "ship_order o-2",  # non-retryable: one attempt
        "refund_payment pay-o-2",
        "release_inventory res-o-2",
    ]
    assert scheduled(history)[3:] == ["refund_payment", "release_inventory"]


async def test_saga_failed_compensation_does_not_stop_the_others(autojump_clock):
    result, history = await run_saga("gift", saga.order("o-3", "", method="gift card"))
    assert result == {
        "status": "failed",
        "step": "shipping",
        "error": "[Invalid] no shipping address",
        "compensated": ["release_inventory"],
        "compensation_error": "[PermissionDenied] gift card payments cannot be refunded "
        "automatically",
    }
    # The refund failed once (not retried: retryable=False) and the release still ran.
    assert saga.CALLS[3:] == ["refund_payment pay-o-3", "release_inventory res-o-3"]
    assert scheduled(history)[3:] == ["refund_payment", "release_inventory"]
    assert Replayer(saga.app).replay(history) == result


# -- a generic saga over the example's Compensations helper -----------------------------------

generic = roost.App("patterns")
undo_log: list[str] = []


@generic.activity(retry_policy=roost.RetryPolicy(initial_interval="1s", maximum_attempts=3))
async def do_step(name: str, fail: bool) -> str:
    if fail:
        raise roost.Error(f"{name} failed", kind=roost.ErrorKind.CONFLICT, retryable=False)
    return f"did {name}"


@generic.activity(retry_policy=roost.RetryPolicy(initial_interval="1s", maximum_attempts=3))
async def undo_step(name: str, how: str) -> str:
    undo_log.append(name)
    if how == "fail":
        raise roost.Error(f"undo {name} failed", kind=roost.ErrorKind.UNAVAILABLE, retryable=False)
    if how == "slow":
        await trio.sleep(5 * 60)  # within the default 10m start_to_close timeout
    return f"undid {name}"


@generic.workflow
async def steps(plan: list[dict]) -> dict:
    compensations = saga.Compensations()
    try:
        for step in plan:
            await funcs.call(do_step, step["name"], step.get("fail", False))
            compensations.add(undo_step, step["name"], step.get("undo", "ok"))
    except roost.Error as err:
        compensated, first_error = await compensations.run()
        return {
            "error": str(err),
            "compensated": len(compensated),
            "compensation_error": None if first_error is None else str(first_error),
        }
    return {"completed": [step["name"] for step in plan]}


async def test_first_compensation_error_is_reported_and_the_rest_still_run(autojump_clock):
    plan = [
        {"name": "a", "undo": "fail"},
        {"name": "b"},
        {"name": "c", "undo": "fail"},
        {"name": "d", "fail": True},
    ]
    async with roost.open_node(generic):
        result = await process.exec(steps, plan)
    assert undo_log == ["c", "b", "a"]  # reverse order, past both failures, none retried
    assert result == {
        "error": "[Conflict] d failed",
        "compensated": 1,  # only b's undo succeeded
        "compensation_error": "[Unavailable] undo c failed",  # c's, the first; not a's
    }


async def test_only_completed_steps_are_compensated(autojump_clock):
    async with roost.open_node(generic):
        plan = [{"name": "a"}, {"name": "b", "fail": True}, {"name": "c"}]
        result = await process.exec(steps, plan)
        assert undo_log == ["a"]
        assert result == {
            "error": "[Conflict] b failed",
            "compensated": 1,
            "compensation_error": None,
        }

        undo_log.clear()
        assert await process.exec(steps, [{"name": "a"}, {"name": "b"}]) == {
            "completed": ["a", "b"]
        }
        assert undo_log == []


async def test_compensations_continue_after_a_restart(autojump_clock, tmp_path):
    plan = [
        {"name": "a"},
        {"name": "b", "undo": "slow"},
        {"name": "c"},
        {"name": "d", "fail": True},
    ]
    async with roost.open_node(generic, tmp_path):
        pid = await process.with_options(id="interrupted").spawn(steps, plan)
        await roost.sleep("1m")  # c is undone; b's undo is running
        assert undo_log == ["c", "b"]
    async with roost.open_node(generic, tmp_path) as node:
        process.monitor(pid)
        exit_ = await process.events().receive()
        history = node.history("interrupted")
    assert exit_.value == {
        "error": "[Conflict] d failed",
        "compensated": 3,
        "compensation_error": None,
    }
    # The stack was rebuilt by replay: c's recorded undo did not run again, b's (in flight
    # at the stop) ran again, then a's.
    assert undo_log == ["c", "b", "b", "a"]
    assert scheduled(history) == ["do_step"] * 4 + ["undo_step"] * 3
    assert Replayer(generic).replay(history) == exit_.value


# -- the worker pool example ------------------------------------------------------------------


def job_spans() -> list[tuple[int, float, float]]:
    return list(pool.SPANS)


def max_overlap(spans: list[tuple[int, float, float]]) -> int:
    """How many spans cover the busiest instant (half-open intervals [start, end))."""
    return max(sum(1 for _, s, e in spans if s <= start < e) for _, start, _ in spans)


async def run_batch(workflow_id, jobs, workers, deadline="1m"):
    async with roost.open_node(pool.app) as node:
        started = trio.current_time()
        spec = pool.batch(jobs, workers, deadline=deadline)
        result = await process.with_options(id=workflow_id).exec(pool.batch_workflow, spec)
        elapsed = trio.current_time() - started
        history = node.history(workflow_id)
    return result, history, elapsed


async def test_worker_pool_processes_every_job_exactly_once(autojump_clock):
    result, history, _ = await run_batch("b-once", 12, 4)
    jobs = list(range(1, 13))
    assert Counter(jobs) == pool.RUNS  # each job's activity ran once
    assert result["status"] == "completed"
    assert result["jobs"] == jobs
    assert result["total"] == sum(j * j for j in jobs)
    per_worker = result["by_worker"]
    assert set(per_worker) <= {"w1", "w2", "w3", "w4"}
    assert sorted(j for js in per_worker.values() for j in js) == jobs  # no job twice
    assert scheduled(history) == ["crunch"] * 12


async def test_worker_pool_runs_jobs_concurrently(autojump_clock):
    result, _, elapsed = await run_batch("b-parallel", 9, 3)
    spans = job_spans()
    assert len(spans) == 9
    assert max_overlap(spans) == 3  # all three workers busy at once, never more
    assert len(result["by_worker"]) == 3
    serial = sum(end - start for _, start, end in spans)
    assert elapsed < serial / 2  # 0.9 s of work in well under half of it


async def test_worker_pool_replays_to_the_same_result(autojump_clock):
    result, history, _ = await run_batch("b-replay", 9, 3)
    runs = Counter(pool.RUNS)
    assert Replayer(pool.app).replay(history) == result
    assert runs == pool.RUNS  # the replay ran no activity: the results came from the history


async def test_worker_pool_deadline_returns_what_it_has(autojump_clock):
    # 2 workers: job 1 ends at 100 ms; jobs 2 and 3 would end at 150 ms, after the deadline.
    result, history, elapsed = await run_batch("b-late", 9, 2, deadline="120ms")
    assert result == {"status": "timed out", "finished": [1]}
    assert elapsed == pytest.approx(0.12)
    assert Replayer(pool.app).replay(history) == result


async def test_worker_pool_survives_a_restart(autojump_clock, tmp_path):
    async with roost.open_node(pool.app, tmp_path) as node:
        spec = pool.batch(9, 3, notify=True)
        pid = await process.with_options(id="b-restart").spawn(pool.batch_workflow, spec)
        assert await process.listen("progress").receive() == "4 of 9"
        recorded = {
            e.seq for e in node.history("b-restart") if type(e).__name__ == "ActivityResolved"
        }
        jobs_of = {
            e.seq: e.args[0]
            for e in node.history("b-restart")
            if type(e).__name__ == "ScheduleActivity"
        }
        done_before = {jobs_of[seq] for seq in recorded}
    assert len(done_before) >= 4
    async with roost.open_node(pool.app, tmp_path) as node:
        process.monitor(pid)
        exit_ = await process.events().receive()
        history = node.history("b-restart")
    result = exit_.value
    assert result["status"] == "completed"
    assert result["jobs"] == list(range(1, 10))
    assert result["total"] == 285
    assert all(pool.RUNS[job] == 1 for job in done_before)  # recorded: never run again
    assert set(pool.RUNS) == set(range(1, 10))
    assert max(pool.RUNS.values()) <= 2  # at most the in-flight ones ran twice
    assert Replayer(pool.app).replay(history) == result
