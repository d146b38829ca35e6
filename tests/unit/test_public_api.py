"""Guards the public surface: what API.md promises exists, and nothing leaks by accident."""

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import roost
import roost.testing
import roost.testing.strategies

SRC = Path(roost.__file__).parent

# The names API.md promises at the top level. Adding a public name means adding it here,
# on purpose; removing one breaks users.
TOP_LEVEL = {
    "ActivityInfo",
    "App",
    "AsyncClient",
    "Cancel",
    "Channel",
    "ChannelClosed",
    "Client",
    "CronTick",
    "DeadLetter",
    "Duration",
    "Error",
    "ErrorKind",
    "Event",
    "EventKind",
    "Exit",
    "LinkDown",
    "Message",
    "NodeHandle",
    "NondeterminismError",
    "Pid",
    "QueueInfo",
    "Receipt",
    "RetryPolicy",
    "Selected",
    "Spawner",
    "after",
    "channel",
    "client",
    "connect",
    "connect_async",
    "coroutine",
    "enqueue",
    "ctx",
    "funcs",
    "heartbeat",
    "http",
    "now",
    "open_node",
    "process",
    "random",
    "random_bytes",
    "run",
    "security",
    "sleep",
    "state",
    "supervisor",
    "ticker",
    "uuid4",
    "uuid7",
    "workflow",
    "WorkflowInfo",
    "activity_info",
    "publish",
    "queue_info",
}

PROCESS = {
    "Receipt",
    "Spawner",
    "call",
    "cancel",
    "events",
    "exec",
    "get_options",
    "id",
    "inbox",
    "link",
    "listen",
    "monitor",
    "pid",
    "registry",
    "send",
    "set_options",
    "spawn",
    "spawn_linked",
    "spawn_linked_monitored",
    "spawn_monitored",
    "terminate",
    "unlink",
    "unlisten",
    "unmonitor",
    "upgrade",
    "with_context",
    "with_options",
}


def public_modules():
    yield roost
    for info in pkgutil.walk_packages(roost.__path__, "roost."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            yield importlib.import_module(info.name)


def test_top_level_surface_is_exactly_the_promised_one():
    assert set(roost.__all__) == TOP_LEVEL


def test_process_module_surface():
    assert set(roost.process.__all__) == PROCESS
    for name in ("register", "lookup", "unregister"):
        assert callable(getattr(roost.process.registry, name))


def test_other_namespaces():
    assert set(roost.channel.__all__) >= {"new", "select", "Channel", "Selected"}
    assert set(roost.ctx.__all__) == {"get", "all"}
    assert set(roost.security.__all__) == {"Actor", "Scope", "actor", "scope"}
    assert set(roost.coroutine.__all__) == {"spawn"}
    assert set(roost.funcs.__all__) == {"call", "new", "start", "Executor", "ActivityHandle"}
    assert set(roost.state.__all__) == {"get", "set", "delete", "list", "update"}
    assert set(roost.http.__all__) == {"Request", "Response"}
    assert {
        "info",
        "history_length",
        "history_size",
        "is_continue_as_new_suggested",
        "RetryPolicy",
        "WorkflowHost",
        "WorkflowHostFactory",
        "NodeServices",
        "Durable",
        "Driver",
        "Ports",
        "Event",
        "Command",
        "ActivityPort",
        "Replayer",
    } <= set(roost.workflow.__all__)
    assert roost.workflow.Replayer is roost.testing.Replayer  # one object, two public homes


def test_testing_namespaces():
    assert {
        "CrashPoint",
        "Outcome",
        "Replayer",
        "assert_crash_equivalent",
        "assert_replay_deterministic",
        "history_to_json",
        "load_history",
        "save_history",
    } <= set(roost.testing.__all__)
    assert set(roost.testing.strategies.__all__) == {
        "Schedule",
        "durations",
        "event_schedules",
        "hostile_values",
        "nested",
        "payloads",
        "program_app",
        "same_value",
        "workflow_programs",
    }


@pytest.mark.parametrize("module", list(public_modules()), ids=lambda m: m.__name__)
def test_all_is_complete_and_resolvable(module):
    exported = set(getattr(module, "__all__", ()))
    for name in exported:
        assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name!r}"
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public <= exported, f"{module.__name__} exposes names missing from __all__"


@pytest.mark.parametrize("module", list(public_modules()), ids=lambda m: m.__name__)
def test_public_modules_only_reexport(module):
    tree = ast.parse(Path(module.__file__).read_text())
    defined = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    assert defined == [], f"{module.__name__} defines {defined}; move them to a _module"


def test_sans_io_cores_do_not_import_trio():
    for path in (SRC / "mailbox").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            assert not any(n.split(".")[0] == "trio" for n in names), path
