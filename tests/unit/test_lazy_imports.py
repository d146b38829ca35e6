"""``import roost`` loads names on first use (PEP 562), and everything works when used.

Each check runs in a fresh interpreter: this process has imported all of roost already.
"""

import datetime as dt
import subprocess
import sys
import textwrap

import pytest

from roost.queues._records import QueueMessage
from roost.storage import Codec

pytestmark = pytest.mark.slow


def _run(script, *args):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_import_roost_loads_no_trio_and_names_resolve_to_one_object():
    out = _run(
        """
        import sys
        import roost
        assert "trio" not in sys.modules, "import roost imported trio"
        assert "roost.workflow._local._manager" not in sys.modules
        assert roost.RetryPolicy is roost.workflow.RetryPolicy
        assert roost.ActivityInfo is roost.workflow.ActivityInfo
        assert roost.App is roost.actors.App
        assert roost.Channel is roost.mailbox.Channel
        assert roost.CronTick is roost.queues.CronTick
        assert roost.storage.Codec.__module__ == "roost.storage._codec"
        assert set(roost.__all__) <= set(dir(roost))
        try:
            roost.no_such_name
        except AttributeError as exc:
            print(exc)
        """
    )
    assert out == "module 'roost' has no attribute 'no_such_name'"


def test_a_stored_record_decodes_before_its_module_is_imported():
    at = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    message = QueueMessage(
        receipt_id="r-1", queue="jobs", seq=3, entry="t:work", payload=[1], enqueued_at=at
    )
    out = _run(
        """
        import sys
        import roost
        from roost.storage import Codec
        assert "roost.queues._records" not in sys.modules
        print(repr(Codec().decode(bytes.fromhex(sys.argv[1]))))
        """,
        Codec().encode(message).hex(),
    )
    assert out == repr(message)


def test_after_a_bare_import_the_app_and_the_node_get_every_layer():
    # The extensions (queues, supervisors, activity options) and the node services (the
    # workflow runtime) load when an App or a node first needs them.
    out = _run(
        """
        import sys, tempfile
        import roost
        from roost import funcs

        app = roost.App("t")
        app.queue("jobs", max_retries=1)

        @app.activity(start_to_close_timeout="5s")
        def double(x):
            return 2 * x

        @app.workflow
        async def flow(x):
            return await funcs.call("t:double", x) + 1

        try:
            app.activity(lambda: None, name="bad", start_to_close_timeout="soon")
        except roost.Error as exc:
            print(exc.kind.value)
        with tempfile.TemporaryDirectory() as data_dir:
            print(roost.run(app, "t:flow", 20, data_dir=data_dir))
        """
    )
    assert out.splitlines() == ["Invalid", "41"]


# Every subpackage and module that was an attribute of roost after ``import roost`` (when
# the package init imported them eagerly).
_SUBMODULES = [
    "actors",
    "channel",
    "coroutine",
    "ctx",
    "funcs",
    "http",
    "mailbox",
    "process",
    "queues",
    "state",
    "storage",
    "supervisor",
    "workflow",
    "_backoff",
    "_cron",
    "_duration",
    "_errors",
    "_interrupt",
    "_pid",
    "_text",
]


@pytest.mark.parametrize("name", ["queues", "mailbox", "actors", "storage", "_duration"])
def test_a_subpackage_is_an_attribute_of_roost_as_its_first_use(name):
    out = _run(
        """
        import sys, types
        import roost
        module = getattr(roost, sys.argv[1])
        assert isinstance(module, types.ModuleType), module
        print(module.__name__)
        """,
        name,
    )
    assert out == f"roost.{name}"


def test_every_submodule_is_listed_and_reachable_without_importing_trio():
    out = _run(
        """
        import sys, types
        import roost
        names = sys.argv[1:]
        assert set(names) <= set(dir(roost)), set(names) - set(dir(roost))
        assert "trio" not in sys.modules, "import roost imported trio"
        for name in names:
            assert isinstance(getattr(roost, name), types.ModuleType), name
        print("ok")
        """,
        *_SUBMODULES,
    )
    assert out == "ok"
