"""Workflow replay: events/s rebuilding a history, and the time to rebuild an evicted run.

Run through ``python -m benchmarks``; one size on its own (e.g. for a profile)::

    python -m pyinstrument -m benchmarks.bench_replay --k 5000

A workflow runs K cheap activities in a loop (a history of ~2K events: per activation
one ``ActivityResolved`` event and one command), then blocks on a signal. Building is not
measured and uses durability "fast"; K = 500, 5000, 50000 (1k, 10k, 100k events) in full
mode. The node is then reopened with fsync on, and:

- ``the runtime's rebuild``: ``roost.workflow._local._replay.Drivers.rebuild``, what the
  runtime runs for an evicted or recovered run: read and decode the ``Activation`` records, then
  ``Driver.activate(at, events, expected=commands)`` over each, with the cyclic collector
  paused (best of a few tries). Reference: the read + decode alone (collector on). The
  note also gives read+decode and the Driver timed apart with the collector on.
- ``Driver only``: the replay alone. Reference: a bare coroutine resumed once per
  activation, the interpreter's floor.
- ``signal to reply after reopen``: a signal to the evicted workflow until its reply; the
  runtime rebuilds the run by replay, then commits the signal and the next activation (2
  fsync'd commits). Reference: the rebuild alone (above).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks._harness import Result, Target, now
from benchmarks._wf_common import in_node, long_history, manager, store, tmpdir
from roost import process
from roost.storage import key
from roost.workflow._history_format import decode_activation

SUITE = "replay"
TARGET_EVENTS = 10_000  # the >= 150k events/s target applies from this history length on


def build_history(data_dir: str, k: int) -> str:
    """Run ``long_history(k)`` until it blocks on its signal; return its workflow id."""

    async def body(node: Any) -> str:
        built = process.listen("built")
        pid = await process.with_options(id="replay-1").spawn(long_history, k, process.pid())
        await built.receive()
        return str(pid.id)

    return in_node(body, data_dir, durability="fast")  # type: ignore[no-any-return]


def _bare_coroutine(steps: int) -> float:
    """Seconds to resume a bare coroutine ``steps`` times (the interpreter's floor)."""

    class _Yield:
        def __await__(self) -> Iterator[None]:
            yield None

    async def body() -> None:
        y = _Yield()
        for _ in range(steps):
            await y

    coro = body()
    t0 = now()
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass
    return now() - t0


def replay(k: int, tries: int = 3) -> dict[str, Any]:
    """Rebuild a ~2k-event history: read+decode, Driver replay (best of ``tries``), and by
    signal on the reopened node."""
    with tmpdir() as tmp:
        t_build = now()
        wf_id = build_history(tmp, k)
        t_build = now() - t_build

        async def body(node: Any) -> dict[str, Any]:
            m = manager(node)
            st, codec = store(node), m.codec
            run = m.runs[wf_id]
            prefix = key(run.record.run_id)
            t_read = t_drive = t_rebuild = float("inf")
            for _ in range(tries):  # best of: the first read also warms the page cache
                t0 = now()
                with st.read() as txn:
                    rows = [v for _, v in txn.prefix("histories", prefix)]
                    acts = [decode_activation(codec, v) for v in rows]
                t_read = min(t_read, now() - t0)
                t0 = now()
                driver = m.drivers.new(run)
                for act in acts:
                    driver.activate(act.at, act.events, expected=act.commands)
                t_drive = min(t_drive, now() - t0)
                driver.close()
                t0 = now()
                driver = m.drivers.rebuild(run)  # the runtime's own path (collector paused)
                t_rebuild = min(t_rebuild, now() - t0)
                driver.close()
            events = sum(len(a.events) + len(a.commands) for a in acts)
            # End to end: the runtime rebuilds the evicted run when the signal arrives.
            done = process.listen("done")
            replays = m.stats["replays"]
            t0 = now()
            process.send(run.pid, "go", 1)
            await done.receive()
            t_signal = now() - t0
            return {
                "events": events,
                "activations": len(acts),
                "bytes_per_event": sum(len(v) for v in rows) / events,
                "read_seconds": t_read,
                "drive_seconds": t_drive,
                "rebuild_seconds": t_rebuild,
                "signal_seconds": t_signal,
                "runtime_replays": m.stats["replays"] - replays,
            }

        out: dict[str, Any] = in_node(body, tmp)
    out["bare_seconds"] = _bare_coroutine(out["activations"])
    out["build_seconds"] = t_build
    return out


def _tag(events: int) -> str:
    return f"{events / 1000:.0f}k" if events >= 1000 else str(events)


def _rows(k: int, r: dict[str, Any], detail: bool) -> list[Result]:
    events = r["events"]
    rebuilt = r["rebuild_seconds"]
    tag = _tag(events)
    params = {"activities": k, **r}
    target = Target("min", 150_000, ">= 150k events/s") if events >= TARGET_EVENTS else None
    rows = [
        Result(
            SUITE,
            f"replay {tag}-event history (the runtime's rebuild)",
            "events/s",
            events / rebuilt,
            events / r["read_seconds"],
            raw_label="read+decode only",
            target=target,
            note=(
                f"{r['activations']} activations; rebuild {rebuilt:.3f}s; apart, with the "
                f"collector on: read+decode {r['read_seconds']:.3f}s, Driver "
                f"{r['drive_seconds']:.3f}s (history built in {r['build_seconds']:.1f}s)"
            ),
            params=params,
        )
    ]
    if not detail:  # the smaller histories only show how cost grows with length
        return rows
    return [
        *rows,
        Result(
            SUITE,
            f"replay {tag}-event history, Driver only",
            "events/s",
            events / r["drive_seconds"],
            events / r["bare_seconds"],
            raw_label="bare coroutine, 1 resume/activation",
            params=params,
        ),
        Result(
            SUITE,
            f"rebuild evicted {tag}-event workflow: signal to reply",
            "s",
            r["signal_seconds"],
            rebuilt,
            raw_label="the rebuild alone",
            higher_is_better=False,
            note="after reopen: runtime rebuild of the evicted run + 2 fsync'd commits",
            params=params,
        ),
    ]


def run(quick: bool = False) -> list[Result]:
    """The replay rows for ``python -m benchmarks``."""
    sizes = [250] if quick else [500, 5000, 50_000]
    results = []
    for k in sizes:
        r = replay(k, tries=1 if quick else 5 if k < 50_000 else 3)
        detail = k == sizes[-1] or r["events"] >= TARGET_EVENTS
        results += _rows(k, r, detail)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Replay one history of ~2K events.")
    parser.add_argument("--k", type=int, default=5000, help="activities in the history")
    args = parser.parse_args(argv)
    print(json.dumps(replay(args.k)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
