"""Roost on Temporal next to plain temporalio: the same workflow, the same dev server, one run.

Run through ``python -m benchmarks`` (suite ``temporal``; it needs the ``roost[temporal]``
extra and is skipped without it), or on its own::

    python -m benchmarks.bench_temporal --n 200            # both sides, one and two workers
    python -m benchmarks.bench_temporal --n 200 --workers 1

Both sides run N workflows of three async activities (``x + 1`` each), all started at once,
on one ``temporal server start-dev`` (in memory) started for the run, and are timed from
the first start to the last result:

- ``plain``: a hand-written ``@workflow.defn`` class calling ``workflow.execute_activity``
  three times, started with ``Client.start_workflow`` and awaited with ``handle.result()``,
  from asyncio. Unsandboxed, as roost's workflow type is.
- ``roost``: ``benchmarks._wf_common.three_steps`` (``funcs.call`` three times) in a node
  opened with ``temporal=``; ``process.spawn`` + ``process.monitor``, the EXITs awaited.

With two workers a second interpreter serves the same task queue (a plain worker, or a
second roost node with its own name); the measuring process serves it too. Sides take
turns and each row keeps the best of each. The dev server shares the machine's cores with
both, so on 2 cores a second worker adds little: the figure says how much.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import trio

import roost
from benchmarks._harness import Result, Target, now
from benchmarks._wf_common import APP, three_steps, wait_exits
from roost import process

SUITE = "temporal"
MODULE = "benchmarks.bench_temporal"
PLAIN_QUEUE = "bench-plain"
ROOT = Path(__file__).resolve().parent.parent

try:
    import temporalio  # noqa: F401 - only whether the extra is installed
except ImportError:  # pragma: no cover - the extra is part of the dev install
    HAVE_TEMPORAL = False
else:
    HAVE_TEMPORAL = True
    from temporalio import activity, workflow
    from temporalio.client import Client
    from temporalio.worker import Worker

    @activity.defn(name="plain_step")
    async def plain_step(x: int) -> int:
        return x + 1

    @workflow.defn(name="PlainThreeSteps", sandboxed=False)
    class PlainThreeSteps:
        @workflow.run
        async def run(self, x: int) -> int:
            timeout = dt.timedelta(seconds=60)
            a = await workflow.execute_activity(plain_step, x, start_to_close_timeout=timeout)
            b = await workflow.execute_activity(plain_step, a, start_to_close_timeout=timeout)
            return await workflow.execute_activity(plain_step, b, start_to_close_timeout=timeout)


# -- the dev server ----------------------------------------------------------------------------


@contextlib.contextmanager
def dev_server() -> Iterator[str]:
    """A dev server for the run (the tests' fixture class), yielding its ``host:port``."""
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from temporal_server import DevServer  # noqa: PLC0415 - on the path set just above

    with tempfile.TemporaryDirectory(prefix="roost-bench-temporal-") as tmp:
        server = DevServer(Path(tmp) / "server.log")
        server.start()
        try:
            yield server.target
        finally:
            server.stop()


# -- the two sides -----------------------------------------------------------------------------


def run_plain(target: str, n: int) -> float:
    """Seconds for N plain temporalio workflows, from the first start to the last result."""

    async def main() -> float:
        client = await Client.connect(target)
        async with Worker(
            client,
            task_queue=PLAIN_QUEUE,
            workflows=[PlainThreeSteps],
            activities=[plain_step],
        ):
            batch = os.urandom(4).hex()
            t0 = now()
            handles = await asyncio.gather(
                *(
                    client.start_workflow(
                        PlainThreeSteps.run, i, id=f"plain-{batch}-{i}", task_queue=PLAIN_QUEUE
                    )
                    for i in range(n)
                )
            )
            results = await asyncio.gather(*(h.result() for h in handles))
            seconds = now() - t0
        if results != [i + 3 for i in range(n)]:
            raise RuntimeError("plain temporalio returned wrong results")
        return seconds

    return asyncio.run(main())


def run_roost(target: str, n: int) -> float:
    """Seconds for N roost workflows on Temporal, from the first start to the last result."""

    async def main() -> float:
        with tempfile.TemporaryDirectory(prefix="roost-bench-temporal-") as tmp:
            async with roost.open_node(
                APP, tmp, name=f"bench-{os.getpid()}", temporal=target, shutdown_grace=0
            ):

                async def start(i: int) -> None:
                    process.monitor(await process.spawn(three_steps, i))

                t0 = now()
                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(start, i)
                await wait_exits(n)
                return now() - t0

    return trio.run(main)


# -- a second worker ---------------------------------------------------------------------------


def serve(side: str, target: str) -> None:
    """Serve ``side``'s task queue until SIGTERM; print ``ready`` once polling."""
    stop = signal.SIGTERM
    if side == "plain":

        async def plain() -> None:
            client = await Client.connect(target)
            done = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(stop, done.set)
            async with Worker(
                client,
                task_queue=PLAIN_QUEUE,
                workflows=[PlainThreeSteps],
                activities=[plain_step],
            ):
                print("ready", flush=True)
                await done.wait()

        asyncio.run(plain())
        return

    async def node() -> None:
        with (
            tempfile.TemporaryDirectory(prefix="roost-bench-temporal-") as tmp,
            trio.open_signal_receiver(stop) as signals,
        ):
            async with roost.open_node(
                APP, tmp, name=f"bench-{os.getpid()}", temporal=target, shutdown_grace=0
            ):
                print("ready", flush=True)
                async for _ in signals:
                    return

    trio.run(node)


@contextlib.contextmanager
def second_worker(side: str, target: str) -> Iterator[None]:
    """Another interpreter serving ``side``'s task queue while the block runs."""
    child = subprocess.Popen(
        [sys.executable, "-m", MODULE, "--role", "worker", "--side", side, "--target", target],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the second {side} worker did not start")
        yield
    finally:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


# -- measuring ---------------------------------------------------------------------------------


def measure(target: str, n: int, workers: int, repeat: int) -> dict[str, list[float]]:
    """Per side, the seconds of each repetition (sides taking turns) with ``workers`` workers."""
    runs: dict[str, list[float]] = {"plain": [], "roost": []}
    for _ in range(repeat):
        for side, fn in (("plain", run_plain), ("roost", run_roost)):
            with contextlib.ExitStack() as stack:
                if workers == 2:
                    stack.enter_context(second_worker(side, target))
                runs[side].append(fn(target, n))
    return runs


def _spread(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f} s over {len(values)}"


def results(by_workers: dict[int, dict[str, list[float]]], n: int) -> list[Result]:
    out: list[Result] = []
    for workers, runs in sorted(by_workers.items()):
        plain, mine = min(runs["plain"]), min(runs["roost"])
        out.append(
            Result(
                SUITE,
                f"3-activity workflows/s, {workers} worker{'s' * (workers > 1)}",
                "wf/s",
                roost=n / mine,
                raw=n / plain,
                raw_label="plain temporalio",
                target=Target("ratio>=", 1 / 1.2, "roost overhead <= 1.2x"),
                note=f"roost {_spread(runs['roost'])}; plain {_spread(runs['plain'])}",
                params={"n": n, "workers": workers},
            )
        )
    if 1 in by_workers and 2 in by_workers:
        one, two = by_workers[1], by_workers[2]
        out.append(
            Result(
                SUITE,
                "two workers / one worker (workflows/s)",
                "x",
                roost=min(one["roost"]) / min(two["roost"]),
                raw=min(one["plain"]) / min(two["plain"]),
                raw_label="plain temporalio",
                note="the same ratio for each side; the dev server shares the cores",
                params={"n": n},
            )
        )
    return out


def run(quick: bool) -> list[Result]:
    """The suite's results (``python -m benchmarks``); none without the temporal extra."""
    if not HAVE_TEMPORAL:
        print("temporal: skipped (install roost[temporal])", file=sys.stderr)
        return []
    n, repeat = (10, 1) if quick else (200, 3)
    workers = (1,) if quick else (1, 2)
    with dev_server() as target:
        return results({w: measure(target, n, w, repeat) for w in workers}, n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--role", choices=["measure", "worker"], default="measure")
    parser.add_argument("--side", choices=["plain", "roost"], help="worker role: which side")
    parser.add_argument("--target", help="worker role: the server's host:port")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, choices=[1, 2], action="append")
    args = parser.parse_args(argv)
    if args.role == "worker":
        serve(args.side, args.target)
        return 0
    with dev_server() as target:
        by = {w: measure(target, args.n, w, args.repeat) for w in args.workers or [1, 2]}
    for result in results(by, args.n):
        print(json.dumps(result.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
