"""What a host other than the local one decides and provides: versions, activity attempts.

A host that replays a run by itself (Temporal replays its own history) feeds the driver
the recorded events without ``expected=``; the driver then asks the host which version a
``workflow.version`` call gets. The host here answers from a table, as a Temporal host
answers from ``workflow.patched``. An activity attempt's info and heartbeat come from the
``ActivityPort`` its host installed.
"""

import contextvars

import pytest
from workflow_sim import T0, Sim, SimPorts

import roost
from roost import Pid, funcs, workflow
from roost.workflow._activity_info import ActivityInfo, ActivityPort, install_port
from roost.workflow._driver import DEFAULT_VERSION, Driver, Status
from roost.workflow._history import Activation, ScheduleActivity, VersionMarker

ACTIVITIES = {"t:charge": lambda amount: {"charged": amount}, "t:check": lambda: "checked"}


class Deciding(SimPorts):
    """Answers ``workflow.version`` from ``versions``, and notes each question."""

    def __init__(self, versions):
        super().__init__(Pid("local", "t:workflows", "wf-1"))
        self.versions = versions
        self.asked = []

    def choose_version(self, change_id, min_supported, max_supported):
        self.asked.append((change_id, min_supported, max_supported))
        return self.versions.get(change_id, max_supported)


async def before_the_change():
    return await funcs.call("t:charge", 1)


async def with_the_check():
    version = workflow.version("fraud-check", DEFAULT_VERSION, 2)
    assert workflow.version("fraud-check", DEFAULT_VERSION, 2) == version  # asked once
    if version >= 1:
        await funcs.call("t:check")
    return version, await funcs.call("t:charge", 1)


async def only_the_new_runs():  # support for the runs before version 2 dropped
    version = workflow.version("fraud-check", 2, 3)
    await funcs.call("t:check")
    return version, await funcs.call("t:charge", 1)


def _hosted(fn, ports):
    """Run ``fn`` to its end on the simulator, with ``ports`` deciding."""
    sim = Sim(fn, activities=ACTIVITIES)
    sim.driver = Driver(fn, ports)
    return sim, sim.run()


def _self_replay(fn, ports, history: list[Activation]) -> tuple[Driver, list[list]]:
    """Replay ``history`` as a host that replays by itself: events in, no ``expected``."""
    driver = Driver(fn, ports)
    issued = [driver.activate(act.at, act.events) for act in history]
    return driver, issued


def _shapes(batches):
    return [[(type(c).__name__, c.seq) for c in batch] for batch in batches]


def test_a_new_run_records_the_version_the_host_chose():
    ports = Deciding({})
    sim, driver = _hosted(with_the_check, ports)
    assert driver.status == Status.COMPLETED
    assert driver.result == (2, {"charged": 1})
    assert ports.asked == [("fraud-check", DEFAULT_VERSION, 2)]
    first = sim.history[0].commands
    assert first[0] == VersionMarker(seq=1, change_id="fraud-check", version=2)
    assert isinstance(first[1], ScheduleActivity) and first[1].entry == "t:check"


def test_a_replay_gets_the_version_the_host_says_the_run_recorded():
    sim, _ = _hosted(with_the_check, Deciding({}))  # recorded version 2
    driver, issued = _self_replay(only_the_new_runs, Deciding({"fraud-check": 2}), sim.history)
    assert driver.status == Status.COMPLETED and driver.result == (2, {"charged": 1})
    # The same commands, seq for seq, under code that supports 2..3 now.
    assert _shapes(issued) == _shapes([act.commands for act in sim.history])
    assert issued[0][0] == VersionMarker(seq=1, change_id="fraud-check", version=2)


def test_a_history_made_before_the_change_replays_on_the_old_path():
    old = Sim(before_the_change, activities=ACTIVITIES)
    old.run()
    ports = Deciding({"fraud-check": DEFAULT_VERSION})
    driver, issued = _self_replay(with_the_check, ports, old.history)
    assert driver.status == Status.COMPLETED
    assert driver.result == (DEFAULT_VERSION, {"charged": 1})
    # No marker for DEFAULT_VERSION: the old run issued none, so every seq stays the same.
    assert _shapes(issued) == _shapes([act.commands for act in old.history])
    assert issued[0] == old.history[0].commands
    assert ports.asked == [("fraud-check", DEFAULT_VERSION, 2)]


def test_the_driver_replays_the_same_history_with_its_own_rule_too():
    old = Sim(before_the_change, activities=ACTIVITIES)
    old.run()
    driver = Driver(with_the_check, SimPorts(Pid("local", "t:workflows", "wf-1")))
    for act in old.history:
        driver.activate(act.at, act.events, expected=act.commands)
    assert driver.result == (DEFAULT_VERSION, {"charged": 1})


@pytest.mark.parametrize("answer", [DEFAULT_VERSION, 1, 4])
def test_a_version_outside_the_supported_range_stops_the_replay(answer):
    old = Sim(before_the_change, activities=ACTIVITIES)
    old.run()
    with pytest.raises(roost.NondeterminismError) as info:
        _self_replay(only_the_new_runs, Deciding({"fraud-check": answer}), old.history)
    assert "outside the supported range 2..3" in info.value.message
    assert info.value.details["recorded"] == answer
    assert info.value.details["change_id"] == "fraud-check"


async def reversed_range():
    return workflow.version("fraud-check", 3, 1)


def test_the_range_is_checked_before_the_host_is_asked():
    ports = Deciding({})
    sim = Sim(reversed_range)
    sim.driver = Driver(reversed_range, ports)
    driver = sim.run()
    assert driver.status == Status.FAILED
    assert driver.error.kind == roost.ErrorKind.INVALID
    assert "min_supported 3 is greater than max_supported 1" in driver.error.message
    assert ports.asked == []


def test_by_default_the_driver_decides():
    assert SimPorts(Pid("local", "t:workflows", "wf-1")).choose_version("c", 1, 2) is None


class RecordingActivity(ActivityPort):
    """Another host's attempt: a fixed info, the beats noted."""

    __slots__ = ("beats", "context")

    def __init__(self):
        self.context = {"tenant": "acme"}
        self.beats = []

    def info(self):
        return INFO

    def heartbeat(self, details):
        self.beats.append(details)


INFO = ActivityInfo(
    workflow_id="wf-1",
    run_id="r-1",
    seq=3,
    entry="t:charge",
    attempt=2,
    idempotency_key="wf-1/r-1/3",
    scheduled_at=T0,
)


def test_activity_info_and_heartbeat_ask_the_port_the_host_installed():
    port = RecordingActivity()

    def attempt():
        roost.heartbeat({"done": 1})
        roost.heartbeat()
        return roost.activity_info(), roost.ctx.get("tenant")

    ctx = contextvars.copy_context()
    ctx.run(install_port, port)
    assert ctx.run(attempt) == (INFO, "acme")
    assert port.beats == [{"done": 1}, None]
    assert roost.activity_info() is None  # outside the attempt's context
    with pytest.raises(roost.Error) as info:
        roost.heartbeat()
    assert info.value.kind == roost.ErrorKind.INVALID_STATE
