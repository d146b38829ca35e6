"""A second workflow host, in memory, installed through ``open_node(workflow_host=...)``.

The node reaches it only through the public ``roost.workflow.WorkflowHost`` protocol, and
it reaches the node only through the ``NodeServices`` it is given: every call below is the
public API, and every effect is seen by a plain process.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

import roost
from roost import process
from roost.actors import ExitResult
from roost.workflow import NodeServices, WorkflowHost

app = roost.App("seam")


@app.workflow
async def doubled(x):
    return 2 * x


@app.workflow
async def forever():
    await trio.sleep_forever()


@app.process
async def helper(n):
    return n + 1


@app.process
async def watcher(target, report_to, link):
    if link:
        process.set_options(trap_links=True)
        process.link(target)
    else:
        process.monitor(target)
    process.send(report_to, "watching")
    process.send(report_to, "event", await process.events().receive())


class Stored:
    """Durable at once: this host keeps nothing it could lose."""

    def is_set(self):
        return True

    async def wait(self):
        await trio.lowlevel.checkpoint()


class MemoryHost:
    """Runs each workflow body as a trio task and records every call the node makes."""

    def __init__(self, services: NodeServices, nursery: trio.Nursery) -> None:
        self.services, self.nursery = services, nursery
        self.host = f"{services.app.name}:workflows"
        self.pid_hosts = frozenset({self.host})
        self.calls: list = []
        self.open: dict = {}  # pid -> (cancel scope, monitors, links)
        self.closed: dict = {}  # pid -> ExitResult
        self.done: dict = {}  # pid -> trio.Event
        self.exited = trio.Event()  # a plain process it spawned has ended

    async def spawn(self, parent, *, entry, args, options, messages, context):
        pid = roost.Pid(self.services.name, self.host, options.get("id", f"w{len(self.done)}"))
        self.calls.append(("spawn", parent, entry.id, args))
        scope = trio.CancelScope()
        self.open[pid] = (scope, set(), set())
        self.done[pid] = trio.Event()
        self.nursery.start_soon(self._run, pid, scope, entry.fn, args)
        await trio.lowlevel.cancel_shielded_checkpoint()  # a start is a schedule point
        return pid

    async def _run(self, pid, scope, fn, args):
        with scope:
            self._close(pid, await fn(*args), None)

    def _close(self, pid, value, error):
        scope, monitors, links = self.open.pop(pid)
        scope.cancel()
        self.closed[pid] = ExitResult(value, error)
        at = self.services.now()
        for watcher in monitors:
            self.services.post_exit(watcher, roost.Exit(pid, value, error, at))
        for linked in links if error is not None else ():
            self.services.link_down(linked, pid, error, at)
        self.done[pid].set()

    def _require(self, pid):
        if pid not in self.open:
            raise roost.Error(f"workflow {pid} is not running", kind=roost.ErrorKind.NOT_FOUND)

    def signal(self, sender, pid, topic, payload):
        self._require(pid)
        self.calls.append(("signal", sender, pid, topic, payload))
        if topic == "echo":  # process.call: the reply goes to the caller's reply address
            self.services.send(pid, sender, "ok", payload)
        elif topic == "spawn":
            child = roost.Pid(self.services.name, self.services.app.default_host, f"{pid.id}-h")
            self.services.spawn("seam:helper", (payload,), pid=child, watcher=pid, context={})
        return Stored()

    def cancel(self, pid, reason):
        self._require(pid)
        self.calls.append(("cancel", pid, reason))
        self._close(pid, None, roost.Error(f"canceled: {reason}", kind=roost.ErrorKind.CANCELED))
        return Stored()

    def terminate(self, pid):
        self._require(pid)
        self.calls.append(("terminate", pid))
        self._close(pid, None, roost.Error("terminated", kind=roost.ErrorKind.CANCELED))

    def running(self, pid):
        return pid in self.open

    def _outcome(self, pid):
        noproc = roost.Error(f"noproc: {pid}", kind=roost.ErrorKind.NOT_FOUND)
        return self.closed.get(pid, ExitResult(None, noproc))

    def monitor(self, watcher, pid):
        self.calls.append(("monitor", watcher, pid))
        if pid in self.open:
            self.open[pid][1].add(watcher)
            return
        out = self._outcome(pid)
        self.services.post_exit(watcher, roost.Exit(pid, out.value, out.error, self.services.now()))

    def link(self, proc, pid):
        self.calls.append(("link", proc, pid))
        if pid in self.open:
            self.open[pid][2].add(proc)
        elif (error := self._outcome(pid).error) is not None:
            self.services.link_down(proc, pid, error, self.services.now())

    def unwatch(self, proc, pid):
        self.calls.append(("unwatch", proc, pid))
        if pid in self.open:
            self.open[pid][1].discard(proc)
            self.open[pid][2].discard(proc)

    def process_exited(self, watcher, event):
        self.calls.append(("exited", watcher, event.pid, event.value))
        self.exited.set()

    async def wait_exit(self, pid):
        if pid in self.done:
            await self.done[pid].wait()
        return self._outcome(pid)

    def describe(self, workflow_id):
        pid = roost.Pid(self.services.name, self.host, workflow_id)
        return {"workflow_id": workflow_id, "status": "running" if pid in self.open else "closed"}

    def list_workflows(self, query):
        return [self.describe(pid.id) for pid in self.done]

    def history(self, workflow_id):
        return [c[3] for c in self.calls if c[0] == "signal" and c[2].id == workflow_id]


hosts: list[MemoryHost] = []


@asynccontextmanager
async def memory_host(services: NodeServices) -> AsyncIterator[WorkflowHost]:
    async with trio.open_nursery() as nursery:
        host = MemoryHost(services, nursery)
        hosts.append(host)
        yield host
        nursery.cancel_scope.cancel()


@pytest.fixture
async def node(tmp_path):
    hosts.clear()
    async with roost.open_node(app, tmp_path, workflow_host=memory_host) as handle:
        yield handle


def calls(kind):
    return [call for call in hosts[0].calls if call[0] == kind]


async def test_spawn_send_call_and_inspection_reach_the_host(node):
    with trio.testing.assert_checkpoints():  # the host's start is the schedule point
        pid = await process.with_options(id="w-1").spawn(forever)
    assert pid == roost.Pid(node.name, "seam:workflows", "w-1")
    assert calls("spawn") == [("spawn", node.pid, "seam:forever", ())]
    receipt = process.send(pid, "hello", {"n": 1})
    await receipt
    assert receipt.accepted
    assert calls("signal") == [("signal", node.pid, pid, "hello", {"n": 1})]
    assert await process.call(pid, "echo", 5) == 5  # the reply came through NodeServices.send
    assert node.describe("w-1") == {"workflow_id": "w-1", "status": "running"}
    assert node.list_workflows() == [{"workflow_id": "w-1", "status": "running"}]
    assert node.history("w-1") == ["hello", "echo"]


async def test_a_send_to_a_workflow_the_host_does_not_know_raises_its_error(node):
    with pytest.raises(roost.Error) as caught:
        process.send(roost.Pid(node.name, "seam:workflows", "nobody"), "hello")
    assert caught.value.kind is roost.ErrorKind.NOT_FOUND


async def test_cancel_reaches_the_host_and_its_exit_reaches_a_monitor(node):
    pid = await process.spawn_monitored(forever)
    assert calls("monitor") == [("monitor", node.pid, pid)]
    process.cancel(pid, "enough")
    assert calls("cancel") == [("cancel", pid, "enough")]
    event = await process.events().receive()
    assert isinstance(event, roost.Exit) and event.pid == pid
    assert event.error.kind is roost.ErrorKind.CANCELED and "enough" in event.error.message


async def test_terminate_reaches_the_host_and_a_plain_process_gets_exit_and_link_down(node):
    pid = await process.spawn(forever)
    inbox = process.inbox()
    for link in (False, True):
        await process.spawn(watcher, pid, node.pid, link)
        assert (await inbox.receive()).topic == "watching"
    process.terminate(pid)
    assert calls("terminate") == [("terminate", pid)]
    events = {type(m.payload) for m in [await inbox.receive(), await inbox.receive()]}
    assert events == {roost.Exit, roost.LinkDown}
    assert [c[0] for c in calls("monitor") + calls("link")] == ["monitor", "link"]


async def test_exec_waits_for_the_hosts_exit_and_a_closed_workflow_is_not_alive(node):
    assert await process.exec(doubled, 21) == 42
    pid = roost.Pid(node.name, "seam:workflows", "w0")
    process.monitor(pid)  # closed: the host answers at once with its outcome
    event = await process.events().receive()
    assert event.pid == pid and event.value == 42
    with pytest.raises(roost.Error) as caught:
        process.cancel(pid)
    assert caught.value.kind is roost.ErrorKind.NOT_FOUND


async def test_a_plain_process_the_host_spawns_reports_its_exit_to_the_host(node):
    pid = await process.spawn(forever)
    await process.send(pid, "spawn", 41)
    with trio.fail_after(5):
        await hosts[0].exited.wait()
    assert calls("exited") == [("exited", pid, roost.Pid(node.name, "seam:processes", "w0-h"), 42)]


async def test_unmonitor_reaches_the_host(node):
    pid = await process.spawn_monitored(forever)
    process.unmonitor(pid)
    assert calls("unwatch") == [("unwatch", node.pid, pid)]


def test_roost_run_takes_the_host_too():
    hosts.clear()
    assert roost.run(app, doubled, 4, workflow_host=memory_host) == 8
    assert [c[0] for c in hosts[0].calls] == ["spawn"]


async def test_workflow_host_must_be_a_factory(tmp_path):
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(app, tmp_path, workflow_host="temporal:7233"):
            pass
    assert caught.value.kind is roost.ErrorKind.INVALID
    assert "workflow_host must be a factory" in caught.value.message
