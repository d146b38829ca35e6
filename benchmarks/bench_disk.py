"""Disk and memory per workflow: LMDB bytes per history event, RSS per cached workflow.

Run through ``python -m benchmarks``. One part on its own::

    python -m benchmarks.bench_disk --scenario disk --n 2000
    python -m benchmarks.bench_disk --scenario rss --kind workflow --n 10000

- ``disk``: N workflows of 3 activities (fsync on, started concurrently) run to the end, and
  one workflow of K activities in a row (a long history; built with durability "fast"). The
  events are counted with ``node.history`` (events and commands, without the activation
  markers). After the node closed, py-lmdb reads the data file: its high-water mark
  (``(info()['last_pgno'] + 1) * psize``: what the file needs, free pages included) and the
  pages the tables' B-trees hold (``stat()`` branch + leaf + overflow pages of every table).
  Reference: the encoded bytes themselves (sum of key + value lengths), of the histories
  table and of every table.
- ``rss``: in a fresh interpreter, a node (durability "fast", a workflow cache larger than
  N) starts N ``waiter`` workflows concurrently; each reports in and blocks on a signal, so
  all stay cached with their live coroutine. Anonymous RSS (``RssAnon``: the LMDB map's
  file pages left out) after minus before, per workflow. References, each in its own fresh
  interpreter and measured the same way: N plain roost processes parked on their inbox,
  and N bare trio tasks in ``sleep_forever``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from typing import Any

import lmdb
import trio
import trio.testing

from benchmarks._harness import Children, Result, Target, now, rss_bytes
from benchmarks._wf_common import (
    count_events,
    idle_inbox,
    in_node,
    long_history,
    manager,
    three_steps,
    tmpdir,
    wait_exits,
    waiter,
)
from roost import process

SUITE = "disk"
MODULE = "benchmarks.bench_disk"
WARM = 64  # workflows started before the first reading, to warm caches and code paths


# -- disk ------------------------------------------------------------------------------------


def lmdb_usage(data_dir: str) -> dict[str, Any]:
    """Pages and encoded bytes of a closed data directory, read with py-lmdb."""
    env = lmdb.open(data_dir, max_dbs=64, readonly=True, lock=False)
    try:
        info, stat = env.info(), env.stat()
        psize = stat["psize"]
        live = stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
        tables: dict[str, dict[str, int]] = {}
        with env.begin() as txn:
            names = [k for k, _ in txn.cursor()]
            for name in names:
                db = env.open_db(name, txn=txn, create=False)
                s = txn.stat(db)
                pages = s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"]
                kv = sum(len(k) + len(v) for k, v in txn.cursor(db=db))
                live += pages
                if s["entries"]:
                    tables[name.decode()] = {"entries": s["entries"], "pages": pages, "kv": kv}
    finally:
        env.close()
    path = os.path.join(data_dir, "data.mdb")
    return {
        "psize": psize,
        "high_water": (info["last_pgno"] + 1) * psize,
        "live": live * psize,
        "allocated": os.stat(path).st_blocks * 512,
        "tables": tables,
    }


def _histories(node: Any, ids: list[str]) -> tuple[int, int]:
    """Events (and commands) and activations in these workflows' histories."""
    events = activations = 0
    for wf_id in ids:
        items = node.history(wf_id)
        n = count_events(items)
        events += n
        activations += len(items) - n
    return events, activations


def disk_many(n: int) -> dict[str, Any]:
    """LMDB usage after ``n`` completed workflows of 3 activities (fsync on)."""
    with tmpdir() as tmp:
        data = os.path.join(tmp, "data")

        async def body(node: Any) -> tuple[int, int]:
            pids = []

            async def start(i: int) -> None:
                pid = await process.spawn(three_steps, i)
                process.monitor(pid)
                pids.append(pid)

            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(start, i)
            await wait_exits(n)
            return _histories(node, [str(pid.id) for pid in pids])

        events, activations = in_node(body, data)
        return {"workflows": n, "events": events, "activations": activations, **lmdb_usage(data)}


def disk_long(k: int) -> dict[str, Any]:
    """LMDB usage of one workflow that ran ``k`` activities in a row (blocked at the end)."""
    with tmpdir() as tmp:
        data = os.path.join(tmp, "data")

        async def body(node: Any) -> tuple[int, int]:
            built = process.listen("built")
            pid = await process.spawn(long_history, k, process.pid())
            await built.receive()
            return _histories(node, [str(pid.id)])

        events, activations = in_node(body, data, durability="fast")
        return {"workflows": 1, "events": events, "activations": activations, **lmdb_usage(data)}


def _disk_rows(what: str, r: dict[str, Any]) -> list[Result]:
    events = r["events"]
    tables = r["tables"]
    hist_kv = tables.get("histories", {}).get("kv", 0)
    all_kv = sum(t["kv"] for t in tables.values())
    share = ", ".join(
        f"{name} {t['pages'] * r['psize'] / events:.0f}"
        for name, t in sorted(tables.items(), key=lambda item: -item[1]["pages"])
        if t["pages"] * r["psize"] >= events  # tables under 1 B/event left out
    )
    per_wf = f"{events / r['workflows']:g} events and {r['activations'] / r['workflows']:g}"
    note = (
        f"{per_wf} activations per workflow; B-tree page bytes per event by table: {share}; "
        f"{r['high_water'] / 1024:.0f} KB high-water, {r['live'] / 1024:.0f} KB in B-trees, "
        f"{r['allocated'] / 1024:.0f} KB allocated on disk"
    )
    params = dict(r)
    return [
        Result(
            SUITE,
            f"LMDB bytes/event, {what}: file high-water",
            "B/event",
            r["high_water"] / events,
            hist_kv / events,
            raw_label="history key+value bytes",
            higher_is_better=False,
            note=note,
            params=params,
        ),
        Result(
            SUITE,
            f"LMDB bytes/event, {what}: B-tree pages",
            "B/event",
            r["live"] / events,
            all_kv / events,
            raw_label="key+value bytes, all tables",
            higher_is_better=False,
            params=params,
        ),
    ]


# -- memory (children) -----------------------------------------------------------------------


def rss_anon() -> int:
    """Anonymous resident memory of this process (RssAnon: file-backed maps left out)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return rss_bytes()


def _reading() -> tuple[int, int]:
    gc.collect()
    return rss_anon(), rss_bytes()


def _tracked() -> int:
    """Objects the cyclic collector tracks: what each of its full passes walks."""
    gc.collect()
    return len(gc.get_objects())


async def _park_workflows(node: Any, n: int, *, serial: bool = False) -> dict[str, Any]:
    armed = process.listen("armed")
    me = process.pid()

    async def start_all(count: int) -> None:
        if serial:  # one at a time: no burst of in-flight starts in the reading
            for _ in range(count):
                await process.spawn(waiter, me)
                await armed.receive()
            return
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                nursery.start_soon(process.spawn, waiter, me)
        for _ in range(count):
            await armed.receive()

    await start_all(WARM)
    m = manager(node)
    evictions = m.stats["evictions"]
    anon0, total0 = _reading()
    tracked0 = _tracked()
    t0 = now()
    await start_all(n)
    elapsed = now() - t0
    await trio.testing.wait_all_tasks_blocked()
    anon1, total1 = _reading()
    tracked1 = _tracked()
    if m.stats["evictions"] != evictions or len(m.cached) < n:
        raise RuntimeError(f"only {len(m.cached)} of {n} workflows stayed cached")
    return {
        "anon": anon1 - anon0,
        "total": total1 - total0,
        "seconds": elapsed,
        "tracked_per": (tracked1 - tracked0) / n,
    }


async def _park_processes(n: int) -> dict[str, Any]:
    for _ in range(WARM):
        await process.spawn(idle_inbox)
    await trio.testing.wait_all_tasks_blocked()
    anon0, total0 = _reading()
    t0 = now()
    for _ in range(n):
        await process.spawn(idle_inbox)
    await trio.testing.wait_all_tasks_blocked()
    elapsed = now() - t0
    anon1, total1 = _reading()
    return {"anon": anon1 - anon0, "total": total1 - total0, "seconds": elapsed}


async def _park_trio(n: int) -> dict[str, Any]:
    async with trio.open_nursery() as nursery:
        for _ in range(WARM):
            nursery.start_soon(trio.sleep_forever)
        await trio.testing.wait_all_tasks_blocked()
        anon0, total0 = _reading()
        t0 = now()
        for _ in range(n):
            nursery.start_soon(trio.sleep_forever)
        await trio.testing.wait_all_tasks_blocked()
        elapsed = now() - t0
        anon1, total1 = _reading()
        nursery.cancel_scope.cancel()
    return {"anon": anon1 - anon0, "total": total1 - total0, "seconds": elapsed}


def rss(kind: str, n: int, *, serial: bool = False) -> dict[str, Any]:
    """Resident bytes per parked workflow / process / trio task (call in a fresh child).

    ``serial``: workflows start one after another (as the process reference does), so the
    reading holds what the cached runs keep, without the peak of N concurrent starts.
    """
    if kind == "trio":
        out: dict[str, Any] = trio.run(_park_trio, n)
    else:
        with tmpdir() as tmp:

            async def body(node: Any) -> dict[str, Any]:
                if kind == "workflow":
                    return await _park_workflows(node, n, serial=serial)
                return await _park_processes(n)

            data = os.path.join(tmp, "data")
            out = in_node(body, data, durability="fast", workflow_cache=n + 2 * WARM)
    return {"n": n, "kind": kind, "per": out["anon"] / n, "total_per": out["total"] / n, **out}


def _rss_children(n: int, *, background: bool) -> Children:
    args = [["--scenario", "rss", "--kind", kind, "--n", str(n)] for kind in _RSS_KINDS]
    return Children(MODULE, args, background=background)


_RSS_KINDS = ("workflow", "process", "trio")


def _rss_rows(runs: dict[str, dict[str, Any]]) -> list[Result]:
    wf = runs["workflow"]
    n = wf["n"]
    name = f"RSS per cached workflow (blocked on a signal), N={n}"
    note = (
        f"anonymous RSS; with the LMDB map's file pages {wf['total_per'] / 1024:.2f} KB/wf; "
        f"{wf['tracked_per']:.1f} collector-tracked objects/wf; "
        f"{n} parked in {wf['seconds']:.2f}s, all cached (0 evictions)"
    )
    labels = {"process": "idle roost process", "trio": "bare trio task (sleep_forever)"}
    return [
        Result(
            SUITE,
            name,
            "B/wf",
            wf["per"],
            runs[kind]["per"],
            raw_label=label,
            higher_is_better=False,
            # issue 15's target, at the full size (10,000 cached)
            target=Target("max", 4096, "<= 4 KB") if kind == "process" and n >= 10_000 else None,
            note=note if kind == "process" else "",
            params={"workflow": wf, "reference": runs[kind]},
        )
        for kind, label in labels.items()
    ]


def run(quick: bool = False) -> list[Result]:
    """The disk and memory rows for ``python -m benchmarks``."""
    n, k, cached = (50, 100, 200) if quick else (2000, 5000, 10_000)
    children = _rss_children(cached, background=quick)  # quick: overlap with the rest
    results = [
        *_disk_rows(f"{n} workflows x 3 activities", disk_many(n)),
        *_disk_rows(f"1 workflow x {k} activities", disk_long(k)),
    ]
    runs = dict(zip(_RSS_KINDS, children.results(), strict=True))
    return results + _rss_rows(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one disk or memory scenario.")
    parser.add_argument("--scenario", required=True, choices=["disk", "long", "rss"])
    parser.add_argument("--kind", choices=_RSS_KINDS, default="workflow")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument(
        "--serial", action="store_true", help="rss: start the workflows one at a time"
    )
    args = parser.parse_args(argv)
    if args.scenario == "disk":
        out = disk_many(args.n)
    elif args.scenario == "long":
        out = disk_long(args.n)
    else:
        out = rss(args.kind, args.n, serial=args.serial)
        print(json.dumps(out), flush=True)
        os._exit(0)  # skip tearing N parked tasks down: not what is measured
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
