"""The start-up heap freeze happens before recovery: recovered runs stay collectable.

``gc.freeze`` runs once per interpreter, at its first node's start, so each check runs in
a fresh interpreter (this one has started nodes already).
"""

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

SCRIPT = textwrap.dedent(
    """
    import gc, sys, weakref
    import trio
    import roost
    from roost import process

    app = roost.App("fz")

    @app.workflow
    async def waits():
        return (await process.inbox().receive()).payload

    async def make(data_dir):
        async with roost.open_node(app, data_dir):
            print((await process.spawn(waits)).id)

    def seen_by_the_collector(obj):
        # gc.get_objects() leaves out the permanent generation (what gc.freeze moved).
        return any(o is obj for o in gc.get_objects())

    async def check(data_dir, workflow_id):
        async with roost.open_node(app, data_dir) as node:
            assert gc.get_freeze_count() > 0, "the start-up heap was frozen"
            assert not seen_by_the_collector(waits), "what was imported is frozen"
            manager = node._node.local_workflows
            run = manager.runs.get(workflow_id)
            assert run is not None, "the run was recovered"
            assert seen_by_the_collector(run), "a recovered run is frozen"
            assert seen_by_the_collector(run.record), "a recovered record is frozen"
            ref = weakref.ref(run)
            record = weakref.ref(run.record)
            pid = run.pid
            del run
            process.monitor(pid)
            process.send(pid, "t", "done")
            with trio.fail_after(30):
                down = await process.events().receive()
            assert down.value == "done", down
            assert manager.runs.get(workflow_id) is None
        gc.collect()
        assert ref() is None, "the closed run is still alive"
        assert record() is None, "the closed run's record is still alive"
        print("ok")

    if sys.argv[1] == "make":
        trio.run(make, sys.argv[2])
    else:
        trio.run(check, sys.argv[2], sys.argv[3])
    """
)


def _run(*args):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_recovered_run_is_not_frozen_and_is_collected_once_closed(tmp_path):
    workflow_id = _run("make", str(tmp_path))
    assert _run("check", str(tmp_path), workflow_id) == "ok"
