"""The backend-neutral core (``roost.workflow`` outside ``_local``) imports neither trio nor lmdb.

A host other than the local one (Temporal's) imports the core unchanged: every module,
through the normal packages, with trio and lmdb unimportable. The modules are found by
walking the package, so a module added to the core is checked without being listed.
"""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import contextvars, datetime as dt, importlib, importlib.abc, pkgutil, sys

    BLOCKED = ("trio", "lmdb")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"{name} is blocked")
            return None

    sys.meta_path.insert(0, Block())

    import roost.workflow

    def core_modules():
        found, todo = [], [("roost.workflow", list(roost.workflow.__path__))]
        while todo:
            package, path = todo.pop()
            for info in pkgutil.iter_modules(path):
                name = f"{package}.{info.name}"
                if name == "roost.workflow._local":  # the local host (LMDB + trio)
                    continue
                found.append(name)
                if info.ispkg:
                    todo.append((name, [f"{p}/{info.name}" for p in path]))
        return sorted(found)

    modules = core_modules()
    assert {"roost.workflow._driver", "roost.workflow._replayer"} <= set(modules), modules
    for name in modules:
        importlib.import_module(name)
    for name in roost.workflow.__all__:  # the lazy namespace resolves each public name
        getattr(roost.workflow, name)

    from roost import Pid, workflow
    from roost.actors._app import App
    from roost.actors._current import WorkflowProcess, maybe_current_process, set_current
    from roost.mailbox._backend import use_backend
    from roost.workflow._driver import Driver, Ports, Status
    from roost.workflow._history import Activation, Started, StartTimer, TimerFired
    from roost.workflow._replayer import Replayer

    app = App("core")

    @app.workflow
    async def doubled(x):
        version = workflow.version("doubling", -1, 1)
        await maybe_current_process().workflow.sleep(5)
        return x * 2, version, workflow.info().workflow_id

    class Plain(Ports):
        def make_context(self, driver):
            ctx = contextvars.copy_context()
            pid = Pid("local", "core:workflows", "wf")
            ctx.run(set_current, WorkflowProcess(pid, None, driver))
            ctx.run(use_backend, driver.backend)
            return ctx

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    started = Started(workflow_id="wf", run_id="r", workflow_type="core:doubled", args=[21], seed=1)
    driver = Driver(doubled, Plain())
    history, events, at = [], [started], now
    while driver.status == Status.RUNNING:
        commands = driver.activate(at, events)
        history.append(Activation(index=len(history) + 1, at=at, events=events, commands=commands))
        # The host's part: each timer fires at the next activation.
        events = [TimerFired(seq=c.seq) for c in commands if isinstance(c, StartTimer)]
        at += dt.timedelta(seconds=5)
        assert len(history) < 5, history
    assert driver.result == (42, 1, "wf"), driver.result
    assert Replayer(app).replay(history) == [42, 1, "wf"]  # as recorded: a list

    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    print(len(modules))
    """
)


@pytest.mark.slow
def test_the_core_runs_with_trio_and_lmdb_blocked():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 15  # every core module was found and imported
