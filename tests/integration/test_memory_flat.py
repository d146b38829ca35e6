"""A node that keeps closing workflows keeps no more objects: issue 24, "memory stays flat".

Counted, not timed: the objects the collector tracks, and the sizes of the workflow host's
in-memory tables, after a warm-up round and after several more rounds of closed workflows
(an activity, a durable timer and a signal each), queue messages, short-lived processes and
``state.set`` on rotating keys. What a closed workflow leaves is its record in the store,
not an object in the node.
"""

from __future__ import annotations

import gc
from collections import Counter, deque
from pathlib import Path
from typing import Any

import trio

import roost
from roost import funcs, process

app = roost.App("flat")
app.queue("flat", concurrency=4, jitter=0)
CONSUMED: dict[str, Any] = {"n": 0, "target": 0, "event": None}
ROUND = 20
KEYS = 7


@app.activity
async def bump(x: int) -> int:
    return x + 1


@app.workflow
async def closes(x: int) -> int:
    y = await funcs.call(bump, x)
    await roost.sleep("1s")
    return y + int(await process.listen("go").receive())


@app.activity
async def consume(msg: int) -> None:
    CONSUMED["n"] += 1
    if CONSUMED["n"] >= CONSUMED["target"]:
        CONSUMED["event"].set()


@app.process
async def brief(x: int) -> int:
    return x


async def _round(base: int) -> None:
    events = process.events()
    pids = [await process.spawn_monitored(closes, base + i) for i in range(ROUND)]
    for pid in pids:
        process.send(pid, "go", 1)
    CONSUMED.update(n=0, target=ROUND, event=trio.Event())
    for i in range(ROUND):
        await roost.enqueue("flat", consume, i)
        await process.spawn_monitored(brief, i)
        await roost.state.set("flat", f"k{(base + i) % KEYS}", {"v": base + i})
    for _ in range(2 * ROUND):
        event = await events.receive()
        assert event.error is None, event.error
    await CONSUMED["event"].wait()


def _objects() -> Counter[str]:
    # trio keeps an exited cancel scope in its deadline heap until the heap is pruned (at
    # 1,000 stale entries or the deadline): bounded, but it would count here as growth.
    trio._core._run.GLOBAL_RUN_CONTEXT.runner.deadlines._prune()
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def _table_sizes(node: Any) -> dict[str, int]:
    """The length of every dict, list, set and deque the node's objects hold, by path.

    Breadth first from the node, through roost's own objects only (not trio's, not the
    values in the containers), so each container is named by its shortest path.
    """
    sizes: dict[str, int] = {}
    seen: set[int] = set()
    todo: deque[tuple[Any, str]] = deque([(node._node, "node")])
    while todo:
        obj, path = todo.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (dict, list, set, deque)):
            sizes[path] = len(obj)
            continue
        slots = [s for k in type(obj).__mro__ for s in getattr(k, "__slots__", ())]
        attrs = dict(getattr(obj, "__dict__", {}))
        attrs.update({s: getattr(obj, s) for s in slots if hasattr(obj, s)})
        for name, value in attrs.items():
            if isinstance(value, (dict, list, set, deque)) or (
                type(value).__module__.startswith("roost.") and not isinstance(value, type)
            ):
                todo.append((value, f"{path}.{name}"))
    return sizes


async def test_closed_workflows_processes_and_messages_leave_no_objects_behind(
    autojump_clock: Any, tmp_path: Path
) -> None:
    async with roost.open_node(app, tmp_path / "data") as node:
        for r in range(3):  # warm-up: caches, lazily built tables, interned names
            await _round(r * ROUND)
        before, tables_before = _objects(), _table_sizes(node)
        rounds = 10
        for r in range(3, 3 + rounds):
            await _round(r * ROUND)
        after, tables_after = _objects(), _table_sizes(node)
        closed = rounds * ROUND
        grown = {k: after[k] - before[k] for k in after if after[k] - before[k] > 0}
        # One object left per closed workflow (or per process, or per message) would be
        # ``closed``; what is in flight at either count (a parked task's trap, a lock) is
        # a few dozen.
        assert sum(grown.values()) < closed // 2, grown
        bigger = {k: (tables_before.get(k, 0), v) for k, v in tables_after.items()}
        bigger = {k: v for k, v in bigger.items() if v[1] > v[0] + 1}
        assert bigger == {}, bigger
        assert len(node.list_workflows()) == (3 + rounds) * ROUND  # the records stay in the store
