"""roost.testing's properties on roost's own example workflows."""

import importlib.util
from pathlib import Path

import pytest

from roost.testing import CrashPoint, assert_crash_equivalent, assert_replay_deterministic

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"props_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


saga = load_example("saga")
pool = load_example("worker_pool")

CASES = {
    "saga ships": (saga.app, saga.order_saga, saga.order("o-1", "1 Main St")),
    "saga compensates": (saga.app, saga.order_saga, saga.order("o-2", "")),
    "worker pool": (pool.app, pool.batch_workflow, pool.batch(6, 2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_example_workflows_replay_deterministically(autojump_clock, case):
    app, entry, arg = CASES[case]
    outcome = await assert_replay_deterministic(app, entry, arg)
    assert outcome.status == "completed"


@pytest.mark.parametrize("case", ["saga ships", "saga compensates"])
async def test_example_sagas_end_the_same_with_crashes(autojump_clock, case):
    # (Not the worker pool: which worker takes which job depends on when activities
    # finish, and a crash re-runs the activities that were in flight. The property
    # rightly reports that as a different outcome.)
    app, entry, arg = CASES[case]
    outcome = await assert_replay_deterministic(app, entry, arg)
    crashes = [CrashPoint(activation=2), CrashPoint(activation=4), "1ms"]
    assert await assert_crash_equivalent(app, entry, arg, crash_points=crashes) == outcome
