"""A real store to damage, and a child that opens a node on each damaged copy it is given.

``python damage_app.py build DIR`` writes the store: sleeping workflows (runs, histories,
timers), state rows (small ones, and big ones on overflow pages). ``python damage_app.py
open DIR...`` opens a node on each directory in turn (on a mock clock) and prints one JSON
line per directory: what opening it did (a salvage, its warning, the file kept), what reading
every state row gave, and how the workflows ended once their timers fell due (completed, or
quarantined and why). ``open-refuse`` opens with ``on_damage="refuse"``. A signal (SIGBUS, SIGABRT,
SIGSEGV) kills the child: its exit code shows it. A directory given as ``unchecked:DIR``
is opened without the check before LMDB maps it, as if the damage came after that check:
what LMDB itself reports must then surface as a ``roost.Error`` too. One given as
``opened-only:DIR`` is opened and read, and its workflows are not run to their end.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import os
import sys
from typing import Any

import trio
import trio.testing

import roost
from roost import Error, funcs, process
from roost.storage import _lmdb
from roost.storage._salvage import earlier_salvages

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


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def open_one(path: str, on_damage: str, *, run: bool = True) -> dict[str, Any]:
    """Open a node on ``path``, read every small state row, let every workflow finish."""
    warnings = _Warnings()
    logging.getLogger("roost").addHandler(warnings)
    try:
        async with roost.open_node(app, path, on_damage=on_damage) as node:
            read = dict.fromkeys(("same", "missing", "other", "unavailable", "error"), 0)
            for i in range(SMALL):
                try:
                    value = await roost.state.get("small", f"k-{i:04}")
                except Error as exc:
                    read["unavailable" if exc.kind.value == "Unavailable" else "error"] += 1
                    continue
                if value is None:
                    read["missing"] += 1
                else:
                    read["same" if value == small_value(i) else "other"] += 1
            if run:
                await trio.sleep(101 * 86400)  # every sleeper's timer falls due (a mock clock)
            listed = node.list_workflows()
            statuses = collections.Counter(str(w.get("status")) for w in listed)
            workflows = {w["workflow_id"]: str(w.get("status")) for w in listed}
            errors = [
                node.describe(w["workflow_id"])["error"].message
                for w in listed
                if w.get("status") == "quarantined"
            ]
        salvages = earlier_salvages(path)
        kept = [s["source"] for s in salvages]
        return {
            "opened": True,
            "read": read,
            "statuses": dict(statuses),
            "workflows": workflows,
            "quarantined": statuses.get("quarantined", 0),
            "quarantine_errors": errors,
            "salvages": [{"records_lost": s["records_lost"], "lost": s["lost"]} for s in salvages],
            "kept_modes": [oct(os.stat(k).st_mode & 0o777) for k in kept],
            "warned": [m for m in warnings.messages if "roost store check" in m],
        }
    except Error as exc:
        return {"opened": False, "kind": exc.kind.value, "message": exc.message}
    except BaseException as exc:  # what the test asserts never happens
        return {"opened": False, "raw": repr(exc)}
    finally:
        logging.getLogger("roost").removeHandler(warnings)


def main() -> None:
    command, *paths = sys.argv[1:]
    if command == "build":
        trio.run(build, paths[0])
        return
    on_damage = "refuse" if command == "open-refuse" else "salvage"
    check = _lmdb.inspect_before_open
    for given in paths:
        opened_only = given.startswith("opened-only:")
        unprefixed = given.removeprefix("opened-only:")
        path = unprefixed.removeprefix("unchecked:")
        _lmdb.inspect_before_open = check if path == unprefixed else _no_check
        clock = trio.testing.MockClock(autojump_threshold=0)
        found = trio.run(
            functools.partial(open_one, path, on_damage, run=not opened_only), clock=clock
        )
        print(json.dumps({"path": given, **found}), flush=True)


def _no_check(path: str, *, locked: bool, salvage: bool = False) -> None:
    return None


if __name__ == "__main__":
    main()
