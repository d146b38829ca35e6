"""A real store to damage, and a child that opens a node on each damaged copy it is given.

``python damage_app.py build DIR`` writes the store: sleeping workflows (runs, histories,
timers), state rows (small ones, and big ones on overflow pages). ``python damage_app.py
open DIR...`` opens a node on each directory in turn and prints one JSON line per directory:
what opening it did, and what reading every state row gave. A signal (SIGBUS, SIGABRT,
SIGSEGV) kills the child: its exit code shows it. A directory given as ``unchecked:DIR``
is opened without the check before LMDB maps it, as if the damage came after that check:
what LMDB itself reports must then surface as a ``roost.Error`` too.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import trio

import roost
from roost import Error, funcs, process
from roost.storage import _lmdb

app = roost.App("dmg")
WORKFLOWS = 40
SMALL = 150
BIG = 8


@app.activity
async def produce(n: int) -> str:
    return f"result {n} " + "r" * 150


@app.workflow
async def sleeper(opener: str, n: int) -> str:
    got = await funcs.call(produce, n)
    await process.send(roost.Pid.parse(opener), "armed", n)
    await roost.sleep("100d")
    return got


def small_value(i: int) -> dict[str, Any]:
    return {"i": i, "pad": "x" * 300}


def big_value(i: int) -> str:
    return f"{i} " + "y" * 9000


async def build(path: str) -> None:
    async with roost.open_node(app, path, durability="fast") as node:
        armed = process.listen("armed")
        for n in range(WORKFLOWS):
            await process.with_options(id=f"w-{n}").spawn(sleeper, str(node.pid), n)
        for _ in range(WORKFLOWS):
            await armed.receive()
        for i in range(SMALL):
            await roost.state.set("small", f"k-{i:04}", small_value(i))
        for i in range(BIG):
            await roost.state.set("big", f"b-{i}", big_value(i))


async def open_one(path: str) -> dict[str, Any]:
    try:
        async with roost.open_node(app, path) as node:
            read: dict[str, int] = {"same": 0, "other": 0, "unavailable": 0, "error": 0}
            for i in range(SMALL):
                try:
                    value = await roost.state.get("small", f"k-{i:04}")
                except Error as exc:
                    read["unavailable" if exc.kind.value == "Unavailable" else "error"] += 1
                    continue
                read["same" if value == small_value(i) else "other"] += 1
            listed = node.list_workflows()
            quarantined = sum(1 for w in listed if w.get("status") == "quarantined")
            return {"opened": True, "read": read, "quarantined": quarantined}
    except Error as exc:
        return {"opened": False, "kind": exc.kind.value, "message": exc.message}
    except BaseException as exc:  # what the test asserts never happens
        return {"opened": False, "raw": repr(exc)}


def main() -> None:
    command, *paths = sys.argv[1:]
    if command == "build":
        trio.run(build, paths[0])
        return
    check = _lmdb.inspect_before_open
    for given in paths:
        path = given.removeprefix("unchecked:")
        _lmdb.inspect_before_open = check if path == given else _no_check
        print(json.dumps({"path": given, **trio.run(open_one, path)}), flush=True)


def _no_check(path: str, *, locked: bool) -> None:
    pass


if __name__ == "__main__":
    main()
