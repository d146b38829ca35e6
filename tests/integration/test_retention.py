"""Retention: a closed workflow is deleted once closed for longer than ``retention``.

On a mock clock: workflows close, the clock moves past the retention, the sweep deletes
their records and histories (``describe`` and ``history`` say NotFound, the id starts
again), while open workflows and ones closed more recently stay; and the store's file stops
growing once closes and deletes balance (LMDB reuses the freed pages).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

import roost
from roost import Error, ErrorKind, funcs, process
from roost.storage import key

app = roost.App("keep")


FAILED: set[int] = set()


@app.activity
async def bump(x: int) -> int:
    if x >= 100 and x not in FAILED:  # fails once: its failed attempt is stored
        FAILED.add(x)
        raise RuntimeError("the first attempt fails")
    return x + 1


@app.workflow
async def closes(x: int) -> int:
    y = await funcs.call(bump, x)
    await roost.sleep("1s")
    return y


@app.workflow
async def waits() -> str:
    return str(await process.listen("go").receive())


def _rows(node: roost.NodeHandle, table: str, run_id: str) -> int:
    store = node._node.store  # the test counts the store's rows
    assert store is not None
    with store.read() as txn:
        return sum(1 for _ in txn.prefix(table, key(run_id)))


def test_closed_workflows_are_deleted_after_the_retention_and_open_ones_stay(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        async with roost.open_node(app, tmp_path / "d", retention="1h") as node:
            old = [f"old-{i}" for i in range(30)]
            for wid in old:
                assert await process.with_options(id=wid).exec(closes, 1) == 2
            assert await process.with_options(id="flaky").exec(closes, 100) == 101
            old.append("flaky")
            run_ids = {wid: node.describe(wid)["run_id"] for wid in old}
            assert all(_rows(node, "histories", r) > 0 for r in run_ids.values())
            assert _rows(node, "attempts", run_ids["flaky"]) == 1
            events = process.events()
            opened = await process.with_options(id="open").spawn_monitored(waits)
            await trio.sleep(1800)  # half the retention: nothing is due
            assert node.describe("old-0")["status"] == "completed"
            recent = "recent"
            assert await process.with_options(id=recent).exec(closes, 1) == 2
            await trio.sleep(1800 + 120)  # old ones past the retention, the sweep ran
            for wid in old:
                with pytest.raises(Error) as raised:
                    node.describe(wid)
                assert raised.value.kind is ErrorKind.NOT_FOUND
                with pytest.raises(Error) as raised:
                    node.history(wid)
                assert raised.value.kind is ErrorKind.NOT_FOUND
                assert _rows(node, "histories", run_ids[wid]) == 0
                assert _rows(node, "inbox", run_ids[wid]) == 0
                assert _rows(node, "attempts", run_ids[wid]) == 0
            assert node.describe(recent)["status"] == "completed"
            assert node.describe("open")["status"] == "running"  # open for 1 h: kept
            listed = {w["workflow_id"] for w in node.list_workflows()}
            assert listed == {recent, "open"}
            # A deleted id is free: it starts a new run.
            assert await process.with_options(id="old-0").exec(closes, 5) == 6
            process.send(opened, "go", "now")
            assert (await events.receive()).value == "now"
            await trio.sleep(3 * 3600)
            assert {w["workflow_id"] for w in node.list_workflows()} == set()

    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))


def _sizes(path: Path, retention: str | None) -> list[int]:
    """data.mdb's size after each of 60 minutes that close 20 workflows each."""
    sizes: list[int] = []

    async def body() -> None:
        async with roost.open_node(app, path, retention=retention) as node:
            for minute in range(60):
                for i in range(20):
                    await process.with_options(id=f"w-{minute}-{i}").exec(closes, i)
                await trio.sleep(60)
                sizes.append((node.data_dir / "data.mdb").stat().st_size)

    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))
    return sizes


def test_the_store_file_plateaus_under_a_steady_rate_of_closes(tmp_path: Path) -> None:
    kept = _sizes(tmp_path / "kept", None)
    swept = _sizes(tmp_path / "swept", "10m")
    # 1,200 workflows closed; with the retention about 10 minutes' worth (~220) are kept at a
    # time, and LMDB reuses the freed pages: over the second half the file grows by a few
    # pages at most (where the B-trees split differently), without it by every workflow.
    assert kept[-1] - kept[29] > 300_000, kept
    assert swept[-1] - swept[29] <= 16 * 4096, swept
    assert swept[-1] < kept[-1] / 2, (swept, kept)


def test_retention_must_be_a_positive_duration(tmp_path: Path) -> None:
    async def body(value: object) -> None:
        async with roost.open_node(app, tmp_path / "d", retention=value):  # type: ignore[arg-type]
            pass

    for value in ("0s", -1, "soon"):
        with pytest.raises(Error) as raised:
            trio.run(body, value)
        assert raised.value.kind is ErrorKind.INVALID


def test_roost_run_passes_its_retention_to_the_node(tmp_path: Path) -> None:
    here = Path(__file__).parent
    command = [sys.executable, "-m", "roost", "run", "main_app:app", "--data-dir"]
    child = subprocess.run(
        [*command, str(tmp_path / "d"), "--retention", "soon"],
        cwd=here,
        env={**os.environ, "MAIN_MODE": "return"},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert child.returncode != 0
    assert "retention 'soon' is not a duration" in child.stderr, child.stderr
