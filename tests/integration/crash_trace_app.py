"""The node that ``test_telemetry_crash.py`` runs in a subprocess, kills and restarts.

Usage: ``python crash_trace_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

Each phase installs an OpenTelemetry SDK tracer provider whose exporter appends every
finished span as one JSON line to ``WORK_DIR/spans.log`` (one ``os.write`` each, so a
SIGKILL cannot tear one). ``PHASE=run`` starts the ``order`` workflow: an activity, a child
workflow with an activity of its own, then the ``die`` activity, which kills the node with
SIGKILL on its first attempt. ``PHASE=resume`` opens the node on the same directory, waits
for the workflow to close and writes ``WORK_DIR/resume.json``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import crash_child
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import roost
from roost import funcs, process, workflow

app = roost.App("ct")
WORK = Path()
PHASE = "run"


class LineExporter(SpanExporter):
    """Appends each span to ``spans.log`` as it ends (the SimpleSpanProcessor's thread)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            crash_child.append_line(
                WORK,
                "spans.log",
                phase=PHASE,
                span=span.name,
                trace_id=f"{span.context.trace_id:032x}",
                span_id=f"{span.context.span_id:016x}",
                parent_id=f"{span.parent.span_id:016x}" if span.parent is not None else None,
                start=span.start_time,
                end=span.end_time,
                attributes=dict(span.attributes or {}),
            )
        return SpanExportResult.SUCCESS


@app.activity
async def step(name: str) -> str:
    crash_child.append_line(WORK, "activities.log", phase=PHASE, label=name)
    return name.upper()


@app.activity
async def die() -> str:
    crash_child.append_line(WORK, "activities.log", phase=PHASE, label="die")
    if PHASE == "run":
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


@app.workflow
async def part(name: str) -> str:
    return await funcs.call(step, f"{name}/part")


@app.workflow
async def order(name: str) -> list[str]:
    first = await funcs.call(step, name)
    second = await workflow.exec(part, name)
    third = await funcs.call(die)
    return [first, second, third]


async def run_phase(data_dir: str) -> None:
    async with roost.open_node(app, data_dir, durability="sync"):
        await process.with_options(id="order-1").spawn(order, "o")
        await trio.sleep_forever()  # until ``die`` kills the node


async def resume_phase(data_dir: str) -> None:
    async with roost.open_node(app, data_dir, durability="sync") as node:
        while node.describe("order-1")["status"] == "running":  # noqa: ASYNC110 - another OS process's data
            await trio.sleep(0.01)
        result = node.describe("order-1")["result"]
    out = WORK / "resume.json"
    out.with_suffix(".tmp").write_text(json.dumps({"result": result}))
    out.with_suffix(".tmp").replace(out)


def main() -> None:
    """``crash_trace_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    global WORK, PHASE  # the activities and the exporter read them
    data_dir, work_dir, _scenario, phase = sys.argv[1:]
    WORK, PHASE = Path(work_dir), phase
    crash_child.seal_logs(WORK)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(LineExporter()))
    trace.set_tracer_provider(provider)
    trio.run(run_phase if phase == "run" else resume_phase, data_dir)


if __name__ == "__main__":
    main()
