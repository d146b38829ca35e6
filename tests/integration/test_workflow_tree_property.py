"""Generated parent/child workflow trees vs a model of the parent-close rules, and replay.

A tree is plain data. One workflow, ``tree``, interprets any node of it: it starts its
children one after another, synchronously (``workflow.exec`` / ``process.exec`` inside a
workflow: waits for the result) or asynchronously (``process.spawn`` /
``spawn_monitored``: monitored, its EXIT arrives on ``events()``), each with a
``parent_close_policy`` (``terminate``, ``request_cancel``, ``abandon``, or none given:
the default, terminate) and an explicit or a derived id. It may then sleep a little
("settle"), and waits on ``events()`` up to its deadline (or forever), recording the EXITs
of its async children; a ``Cancel`` ends the wait with the result ``"cancelled"`` if the
node honours cancels, and is ignored otherwise. At the deadline it returns, raises a
``roost.Error`` or crashes with a plain exception.

The test starts the root on a real node (LMDB data directory, a MockClock that jumps
ahead), may cancel or terminate the root from outside at some time, may restart the node
in the middle, may run it with a workflow cache of one (so that workflows are evicted and
rebuilt by replay all the time), lets everything settle, and then checks:

1. the final status, result or error of every workflow of the tree, and which ones never
   started, against an independent discrete-event model of the documented rules:
   ``terminate``: a child still running when its parent closes ends ``terminated``;
   ``request_cancel``: it gets a ``Cancel``, which it may honour or ignore (either way,
   once it returns it is ``canceled``); ``abandon``: it goes on alone; and the sync
   results, the EXITs each parent saw, ``parent``, the root's EXIT to a monitor, and the
   ``StartChild`` commands (ids, order) in each history;
2. that ``Replayer(app).replay(history)`` of every workflow reproduces what ``describe``
   recorded (the result; the error, for a failure; ``None`` for a workflow that is still
   running or was terminated), with no ``NondeterminismError``. A child started in the
   very step that closed its parent with ``terminate`` never runs: its history is empty.

Ties in virtual time would make the model ambiguous (did the child close before its
parent, or after?), so they are impossible by construction: node ``i`` waits
``d * H + 2**(2*i)`` seconds and settles ``2**(2*i+1)`` seconds (``H`` is more than all of
those together), so two events at the same instant have the same causal set of waits,
i.e. one causes the other; the outside actions happen at times ending in ``.5`` (cancel,
terminate) and ``.25`` (restart). The model asserts that no two timed events coincide,
and that no child gets a cancel before its first activation (see ``needs_settle``).
"""

from __future__ import annotations

import heapq
import tempfile
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import event, example, given, note
from hypothesis import strategies as st

import roost
from roost import channel, process, workflow
from roost.testing import Replayer

app = roost.App("tree")

H = 2**21  # one "unit" of waiting: more than the sum of all the 2**k seconds below
MAX_NODES = 10
SYNC_MODES = ("wexec", "pexec")
ASYNC_MODES = ("spawn", "spawn_monitored")
# "default" gives no option (terminate); each policy is drawn a third of the time.
POLICIES = ("terminate", "request_cancel", "abandon", "default", "request_cancel", "abandon")
ENDS = ("return", "return", "raise", "crash")


# -- the workflow: a fixed interpreter of tree nodes ---------------------------------------


def child_id(parent_id: str, index: int, child: dict) -> str | None:
    """The id the interpreter gives child ``index`` (None: let roost derive it)."""
    return f"{parent_id}/{index}" if child["named"] else None


def expected_child_id(parent_id: str, index: int, child: dict) -> str:
    # A derived id is "<parent id>.<seq>": the children phase issues one command per child.
    return child_id(parent_id, index, child) or f"{parent_id}.{index + 1}"


def child_options(parent_id: str, index: int, child: dict) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if child["policy"] != "default":
        options["parent_close_policy"] = child["policy"]
    name = child_id(parent_id, index, child)
    if name is not None:
        options["id"] = name
    return options


def process_pid(wid: str) -> roost.Pid:
    return roost.Pid("local", "tree:workflows", wid)


def summary(ev: roost.Exit) -> list:
    return [ev.pid.id, "ok" if ev.error is None else ev.error.kind.value]


@app.workflow
async def tree(node: dict) -> dict:
    me = workflow.info().workflow_id
    sync: list = []
    for index, child in enumerate(node["children"]):
        options = child_options(me, index, child)
        mode = child["mode"]
        try:
            if mode == "wexec":
                got = await workflow.exec(tree, child["node"], **options)
                sync.append(["ok", got["end"]])
            elif mode == "pexec":
                got = await process.with_options(options).exec("tree:tree", child["node"])
                sync.append(["ok", got["end"]])
            elif mode == "spawn":
                await process.with_options(options).spawn(tree, child["node"])
            else:
                await process.with_options(options).spawn_monitored("tree:tree", child["node"])
        except roost.Error as err:
            sync.append(["err", err.kind.value])
    if node["settle"] is not None:
        await roost.sleep(node["settle"])
    events = process.events()
    cases: list = [events]
    if node["wait"] is not None:
        cases.append(roost.after(node["wait"]))
    exits: list = []
    while True:
        sel = await channel.select(*cases)
        if sel.channel is not events:
            break  # the deadline
        ev = sel.value
        if ev.kind is roost.EventKind.CANCEL:
            if node["on_cancel"]:
                return {"id": me, "sync": sync, "exits": exits, "end": "cancelled"}
            continue
        exits.append(summary(ev))
    if node["end"] == "raise":
        raise roost.Error(f"{me} failed", kind=roost.ErrorKind.CONFLICT)
    if node["end"] == "crash":
        raise ValueError(f"{me} crashed")
    return {"id": me, "sync": sync, "exits": exits, "end": "deadline"}


# -- generating trees -----------------------------------------------------------------------


def needs_settle(spec: dict) -> bool:
    """Whether the node must sleep before its wait phase to keep the model exact.

    A node that honours a cancel and starts a ``request_cancel`` child after its last sync
    child could return (on a cancel it already holds) in the very step that starts that
    child. Whether the child's first step then sees the ``Cancel``, or runs without it
    (and starts its own children first), is an ordering the documented rules leave open
    (today the first step runs without it: the cancel is committed after the child's
    first activation took its events). A short durable sleep before waiting avoids it.
    """
    tail = []
    for child in spec["children"]:
        tail = [] if child["mode"] in SYNC_MODES else [*tail, child]
    return spec["on_cancel"] and any(c["policy"] == "request_cancel" for c in tail)


def node(
    units: int | None,
    *children: dict,
    on_cancel: bool = False,
    end: str = "return",
    settle: bool = False,
) -> dict:
    """A node before numbering: waits ``units`` (None: forever), then ends per ``end``."""
    return {
        "units": units,
        "on_cancel": on_cancel,
        "end": end,
        "settle": settle,
        "children": list(children),
    }


def child(mode: str, policy: str, spec: dict, *, named: bool = False) -> dict:
    return {"mode": mode, "policy": policy, "named": named, "node": spec}


def numbered(raw: dict) -> dict:
    """The spec the workflow runs: node ``i`` (preorder) waits ``units * H + 2**(2*i)`` s.

    A node that settles first sleeps ``2**(2*i+1)`` s; ``needs_settle`` forces it.
    """
    count = [0]

    def number(raw: dict) -> dict:
        index = count[0]
        count[0] += 1
        units = raw["units"]
        spec = {
            "i": index,
            "wait": None if units is None else units * H + 2 ** (2 * index),
            "on_cancel": raw["on_cancel"],
            "end": raw["end"],
            "children": [{**c, "node": number(c["node"])} for c in raw["children"]],
        }
        settle = raw["settle"] or needs_settle(spec)
        spec["settle"] = 2 ** (2 * index + 1) if settle else None
        return spec

    return number(raw)


@st.composite
def trees(draw: st.DrawFn, max_nodes: int = MAX_NODES, max_depth: int = 3) -> dict:
    """A numbered tree of at most ``max_nodes`` nodes and ``max_depth`` levels below the root."""
    count = [0]

    def draw_node(depth: int) -> dict:
        count[0] += 1
        raw = node(
            draw(st.sampled_from([0, 1, 2, 3, None])),
            on_cancel=draw(st.sampled_from([True, True, False])),
            end=draw(st.sampled_from(ENDS)),
            settle=draw(st.booleans()),
        )
        if depth < max_depth:
            for _ in range(draw(st.integers(1 if depth == 0 else 0, 3))):
                if count[0] >= max_nodes:
                    break
                mode = draw(st.sampled_from(SYNC_MODES + ASYNC_MODES))
                policy = draw(st.sampled_from(POLICIES))
                named = draw(st.booleans())
                raw["children"].append(child(mode, policy, draw_node(depth + 1), named=named))
        return raw

    return numbered(draw_node(0))


def outside_time(units: int, seconds: int, frac: float) -> float:
    """A time for an outside action: never a sum of waits, whose ``.5`` or ``.25`` ends it."""
    return units * H + seconds + frac


scenarios = st.fixed_dictionaries(
    {
        "tree": trees(),
        "action": st.sampled_from(["none", "cancel", "terminate"]),
        "action_at": st.builds(
            outside_time, st.integers(0, 4), st.integers(0, 4 * MAX_NODES), st.just(0.5)
        ),
        "restart_at": st.one_of(
            st.none(),
            st.builds(
                outside_time, st.integers(0, 4), st.integers(0, 4 * MAX_NODES), st.just(0.25)
            ),
        ),
        "cache": st.sampled_from([1, 10_000]),
    }
)


# -- the model ------------------------------------------------------------------------------


class MNode:
    """What the model knows of one workflow of the tree."""

    def __init__(self, spec: dict, wid: str, parent: MNode | None, link: dict | None) -> None:
        self.spec = spec
        self.id = wid
        self.parent = parent
        self.policy = "terminate" if link is None or link["policy"] == "default" else link["policy"]
        self.sync_child = link is not None and link["mode"] in SYNC_MODES
        self.children = [
            MNode(c["node"], expected_child_id(wid, k, c), self, c)
            for k, c in enumerate(spec["children"])
        ]
        self.status = "unstarted"  # running, completed, canceled, failed, terminated
        self.activated = False  # had its first activation
        self.cancel_requested = False  # a Cancel reached its history
        self.phase = "children"  # then "wait"
        self.next_child = 0
        self.awaiting: MNode | None = None
        self.mailbox: list[tuple[str, Any]] = []
        self.sync: list = []
        self.exits: list = []
        self.result: Any = None
        self.error: tuple[str, str] | None = None
        self.started_at: float | None = None
        self.closed_at: float | None = None

    def walk(self) -> list[MNode]:
        return [self, *(n for c in self.children for n in c.walk())]


class Model:
    """A discrete-event simulation of the tree under the documented rules.

    Time moves only from one timed event (a deadline, a settle sleep, the outside action)
    to the next; everything else happens at the instant of its cause. Within an instant
    one rule of the runtime matters: a child started by a step of its parent has its
    first activation only after that step committed, so if the step also closed the
    parent, the close policy reaches the child first (``terminate``: it never runs).
    """

    def __init__(self, spec: dict) -> None:
        self.root = MNode(spec, "root", None, None)
        self.now = 0.0
        self.timers: list[tuple[float, int, str, MNode]] = []
        self.first_activations: list[MNode] = []
        self._seq = 0
        self.root_running_at_action: bool | None = None
        self.applied: list[str] = []  # close policies that met a running child

    def at(self, when: float, what: str, node: MNode) -> None:
        self._seq += 1
        heapq.heappush(self.timers, (when, self._seq, what, node))

    def run(self, action: str, action_at: float) -> None:
        self.start(self.root)
        self.settle_instant()
        if action != "none":
            self.at(action_at, action, self.root)
        while self.timers:
            when, _, what, node = heapq.heappop(self.timers)
            assert not self.timers or self.timers[0][0] != when, "a tie in virtual time"
            self.now = when
            if node.status != "running" and what in ("deadline", "settled"):
                continue  # closed meanwhile: its timer fires into nothing
            if what == "deadline":
                self.reach_deadline(node)
            elif what == "settled":
                self.wait_phase(node)
            else:
                self.root_running_at_action = node.status == "running"
                if what == "cancel":
                    self.cancel(node)
                else:
                    self.terminate(node)
            self.settle_instant()

    def settle_instant(self) -> None:
        while self.first_activations:
            node = self.first_activations.pop(0)
            node.activated = True
            if node.status == "running":
                self.advance(node)

    def start(self, node: MNode) -> None:
        node.status, node.started_at = "running", self.now
        self.first_activations.append(node)

    def advance(self, node: MNode) -> None:
        """Run the children phase from where it stopped; then (settle and) wait."""
        while node.next_child < len(node.children):
            child = node.children[node.next_child]
            node.next_child += 1
            self.start(child)
            if child.sync_child:
                node.awaiting = child
                return
        if node.spec["settle"] is not None:
            self.at(self.now + node.spec["settle"], "settled", node)
        else:
            self.wait_phase(node)

    def wait_phase(self, node: MNode) -> None:
        node.phase = "wait"
        buffered, node.mailbox = node.mailbox, []
        for kind, item in buffered:
            if self.on_event(node, kind, item):
                return
        if node.spec["wait"] is not None:
            self.at(self.now + node.spec["wait"], "deadline", node)

    def on_event(self, node: MNode, kind: str, item: Any) -> bool:
        """An event read in the wait phase; True if it closed the node."""
        if kind == "exit":
            node.exits.append(item)
            return False
        if node.spec["on_cancel"]:
            self.close(node, "completed", self.result_of(node, "cancelled"))
            return True
        return False

    def result_of(self, node: MNode, end: str) -> dict:
        return {"id": node.id, "sync": node.sync, "exits": node.exits, "end": end}

    def reach_deadline(self, node: MNode) -> None:
        end = node.spec["end"]
        if end == "return":
            self.close(node, "completed", self.result_of(node, "deadline"))
        elif end == "raise":
            self.close(node, "failed", error=("Conflict", f"{node.id} failed"))
        else:
            self.close(node, "failed", error=("Internal", f"ValueError: {node.id} crashed"))

    def deliver(self, node: MNode, kind: str, item: Any = None) -> None:
        if node.status != "running":
            return  # a closed workflow gets nothing
        if kind == "cancel":
            # The race needs_settle() avoids: a cancel before the first activation.
            assert node.activated, f"{node.id} cancelled before its first activation"
            node.cancel_requested = True
        if node.phase == "wait":
            self.on_event(node, kind, item)
        else:
            node.mailbox.append((kind, item))

    def cancel(self, node: MNode) -> None:
        self.deliver(node, "cancel")

    def terminate(self, node: MNode) -> None:
        if node.status == "running":
            self.close(node, "terminated", error=("Canceled", "terminated"))

    def close(self, node: MNode, status: str, result: Any = None, error: Any = None) -> None:
        if status == "completed" and node.cancel_requested:
            status = "canceled"  # it returned after a cancel request (read or not)
        node.status, node.result, node.error = status, result, error
        node.closed_at = self.now
        parent = node.parent
        if parent is not None and parent.status == "running":
            if parent.awaiting is node:
                parent.awaiting = None
                outcome = ["ok", result["end"]] if error is None else ["err", error[0]]
                parent.sync.append(outcome)
                self.advance(parent)
            elif not node.sync_child:
                self.deliver(parent, "exit", [node.id, "ok" if error is None else error[0]])
        for child in node.children:
            if child.status != "running":
                continue
            self.applied.append(f"{child.policy} {'sync' if child.sync_child else 'async'}")
            if child.policy == "terminate":
                self.terminate(child)
            elif child.policy == "request_cancel":
                self.cancel(child)
                if child.status != "running":
                    self.applied.append("request_cancel honoured at once")
                elif child.spec["on_cancel"]:
                    self.applied.append("request_cancel to a busy child")

    def horizon(self) -> float:
        """A time after which nothing more can happen."""
        waits = [(n.spec["wait"] or 0) + (n.spec["settle"] or 0) for n in self.root.walk()]
        return sum(waits) + 5 * H


# -- the property ---------------------------------------------------------------------------


async def run_on_node(scenario: dict, data_dir: str, ids: list[str], horizon: float) -> dict:
    """Run the scenario; return describe, histories and what the outside actions saw."""
    seen: dict[str, Any] = {"action": None}
    t0 = trio.current_time()
    steps = [(scenario["action_at"], scenario["action"])]
    if scenario["restart_at"] is not None:
        steps.append((scenario["restart_at"], "restart"))
    pending = sorted(steps)
    root = stopped_at = None
    while True:
        async with roost.open_node(
            app, data_dir, workflow_cache=scenario["cache"], durability="fast"
        ) as node:
            if stopped_at is not None:  # the model assumes a restart takes no virtual time
                assert trio.current_time() - stopped_at < 0.25
            if root is None:
                root = await process.with_options(id="root").spawn(tree, scenario["tree"])
                seen["parent"] = node.pid
            restart = False
            while pending and not restart:
                when, what = pending.pop(0)
                await trio.sleep(max(0.0, t0 + when - trio.current_time()))
                if what == "restart":
                    restart = True
                elif what != "none":
                    stop = process.cancel if what == "cancel" else process.terminate
                    try:
                        stop(root)
                        seen["action"] = "delivered"
                    except roost.Error as err:  # NotFound: the root is not running
                        seen["action"] = err.kind.value
            if restart:
                stopped_at = trio.current_time()
                continue  # leave the block: the node stops, and the loop opens it again
            await trio.sleep(max(0.0, t0 + horizon - trio.current_time()))
            await trio.testing.wait_all_tasks_blocked()
            listed = {w["workflow_id"] for w in node.list_workflows()}
            described = {wid: node.describe(wid) for wid in ids if wid in listed}
            for wid in set(ids) - listed:
                with pytest.raises(roost.Error) as info:
                    node.describe(wid)
                assert info.value.kind is roost.ErrorKind.NOT_FOUND
            exit_event = None
            if described["root"]["status"] != "running":
                process.monitor(root)  # a closed workflow: its EXIT comes at once
                exit_event = await process.events().receive()
            return {
                "described": described,
                "listed": listed,
                "histories": {wid: node.history(wid) for wid in described},
                "seen": seen,
                "exit": exit_event,
            }


def make_scenario(
    raw: dict,
    action: str = "none",
    action_at: float = 0.5,
    restart_at: float | None = None,
    cache: int = 10_000,
) -> dict:
    return {
        "tree": numbered(raw),
        "action": action,
        "action_at": action_at,
        "restart_at": restart_at,
        "cache": cache,
    }


FOREVER = None
# Every policy meets a running async child when the root returns after 1 s.
EVERY_POLICY = node(
    0,
    child("spawn", "terminate", node(FOREVER)),
    child("spawn_monitored", "request_cancel", node(FOREVER, on_cancel=True)),
    child("spawn", "request_cancel", node(FOREVER)),  # ignores the cancel: runs on
    child("spawn", "abandon", node(1, child("wexec", "terminate", node(0)))),
    child("spawn", "default", node(1, end="raise")),
)
# The root is terminated while it waits for a sync child, which gets the cancel while it
# waits for its own sync child, and honours it only when that one has finished.
BUSY_WHEN_CANCELLED = node(
    1,
    child(
        "wexec",
        "request_cancel",
        node(FOREVER, child("pexec", "abandon", node(1), named=True), on_cancel=True),
    ),
)
# Cancelled while waiting for a sync child, the root honours the cancel in the very step
# that starts its last (async) child: that child is terminated before it ever runs.
CLOSES_WHILE_STARTING = node(
    FOREVER,
    child("pexec", "terminate", node(0)),
    child("spawn", "terminate", node(0, child("wexec", "abandon", node(0)))),
    child("spawn_monitored", "abandon", node(0, end="crash")),
    on_cancel=True,
)
# Three levels across a restart, with a cache of one workflow (every step replays).
DEEP = node(
    2,
    child("pexec", "abandon", node(0, child("wexec", "terminate", node(1, end="crash")))),
    child(
        "spawn",
        "request_cancel",
        node(FOREVER, child("spawn", "terminate", node(3)), on_cancel=True),
    ),
    child("wexec", "default", node(FOREVER, on_cancel=True)),
)


@given(scenarios)
@example(make_scenario(EVERY_POLICY))
@example(make_scenario(BUSY_WHEN_CANCELLED, "terminate"))
@example(make_scenario(CLOSES_WHILE_STARTING, "cancel"))
@example(make_scenario(DEEP, "terminate", 2 * H + 0.5, restart_at=H + 0.25, cache=1))
def test_workflow_trees_follow_parent_close_rules_and_replay(scenario: dict) -> None:
    note(f"scenario: {scenario}")
    model = Model(scenario["tree"])
    model.run(scenario["action"], scenario["action_at"])
    nodes = model.root.walk()
    for applied in sorted(set(model.applied)):
        event(f"policy applied: {applied}")
    for n in nodes:
        event(f"final status: {n.status}")
    if scenario["restart_at"] is not None:
        event("the node restarts in the middle")
    if scenario["cache"] == 1:
        event("a workflow cache of one")
    with tempfile.TemporaryDirectory(prefix="roost-tree-") as data_dir:
        got = trio.run(
            run_on_node,
            scenario,
            data_dir,
            [n.id for n in nodes],
            model.horizon(),
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    described = got["described"]
    expected_started = {n.id for n in nodes if n.status != "unstarted"}
    assert set(described) == expected_started
    assert got["listed"] == expected_started

    for n in nodes:
        if n.status == "unstarted":
            continue
        info = described[n.id]
        note(f"{n.id}: model {n.status} {n.result or n.error}; node {info['status']}")
        assert info["status"] == n.status, n.id
        parent_pid = got["seen"]["parent"] if n.parent is None else process_pid(n.parent.id)
        assert info["parent"] == parent_pid
        if n.status in ("completed", "canceled"):
            assert info["result"] == n.result, n.id
        if n.error is not None:
            assert (info["error"].kind.value, info["error"].message) == n.error, n.id
        else:
            assert info["error"] is None

    if scenario["action"] != "none":
        expected = "delivered" if model.root_running_at_action else "NotFound"
        assert got["seen"]["action"] == expected
    root = model.root
    if root.status != "running":  # what a monitor of the root gets
        ev = got["exit"]
        assert ev.value == root.result
        assert root.error == (None if ev.error is None else (ev.error.kind.value, ev.error.message))

    replayer = Replayer(app)
    by_id = {n.id: n for n in nodes}
    for wid, history in got["histories"].items():
        info = described[wid]
        started = [c.workflow_id for c in history if type(c).__name__ == "StartChild"]
        assert started == [c.id for c in by_id[wid].children if c.status != "unstarted"]
        if not history:
            event("a child terminated before its first activation")
            # Started and terminated in the same instant (its parent started it in the
            # step that closed the parent): it never ran, so there is nothing to replay.
            n = by_id[wid]
            assert n.status == "terminated" and n.started_at == n.closed_at, wid
            continue
        if info["status"] == "failed":
            with pytest.raises(roost.Error) as raised:
                replayer.replay(history)
            assert not isinstance(raised.value, roost.NondeterminismError), raised.value
            err = raised.value
            assert (err.kind, err.message) == (info["error"].kind, info["error"].message)
        else:
            closed = info["status"] in ("completed", "canceled")
            expected = info["result"] if closed else None
            assert replayer.replay(history) == expected, wid


# -- known bugs, each a minimal repro ---------------------------------------------------------
# Child ids in the generated trees are unique, so the property never reuses one: these
# repros do, and keep the limit honest. Each runs its node in its own ``trio.run`` and
# asserts outside it, so that a failure is a plain AssertionError.


def on_a_node(body: Any) -> Any:
    async def main() -> Any:
        async with roost.open_node(app) as node:
            return await body(node)

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


@app.workflow
async def returns(value: Any) -> Any:
    return value


@app.workflow
async def holds() -> None:
    await process.inbox().receive()


@app.workflow
async def outlives_its_child() -> str:
    await workflow.exec(returns, "child", id="reused")  # completes at once
    await roost.sleep(60)
    return "parent done"


def test_close_policy_spares_a_workflow_that_reused_a_closed_childs_id():
    async def body(node: roost.NodeHandle) -> list:
        await process.with_options(id="first-parent").spawn(outlives_its_child)
        await roost.sleep(30)
        before = node.describe("reused")["status"]  # the child, done
        await process.with_options(id="reused").spawn(holds)  # a new run, not a child
        stranger = node.describe("reused")
        await roost.sleep(60)  # the parent closes (policy terminate, for its old child)
        after = node.describe("reused")["status"]
        return [before, stranger["parent"] == node.pid, stranger["status"], after]

    before, not_a_child, status, after = on_a_node(body)
    assert [before, not_a_child, status] == ["completed", True, "running"]
    assert after == "running"  # is: "terminated", by the close of a parent it never had


@app.workflow
async def execs_the_same_id_twice() -> list:
    first = await workflow.exec(returns, 1, id="again")
    second = await workflow.exec(returns, 2, id="again")  # the first run has closed
    return [first, second]


def test_a_parent_can_run_a_child_id_again_once_it_closed():
    async def body(node: roost.NodeHandle) -> list:
        await process.with_options(id="twice").spawn(execs_the_same_id_twice)
        await roost.sleep(60)
        return [node.describe("again")["result"], node.describe("twice")]

    child_result, parent = on_a_node(body)
    assert child_result == 2  # the second run of the child did complete
    assert parent["status"] == "completed"  # is: still "running"
    assert parent["result"] == [1, 2]
