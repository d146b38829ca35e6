"""An exporter that raises anything (``SystemExit``, a bare ``BaseException``) stops nothing.

Telemetry observes: what its hooks raise is logged and dropped, except a cancel or a real
Ctrl-C, which are not telemetry's to keep.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from tracing import tracer_provider

import roost
from roost import funcs, process
from roost.testing import open_test_node

app = roost.App("telx")


class Odd(BaseException):
    """Neither an Exception nor an exit request: what a hostile library may raise."""


class Raising(SpanExporter):
    """Raises ``raises`` on every export, after noting the span's name."""

    def __init__(self, raises: type[BaseException]) -> None:
        self.raises = raises
        self.names: list[str] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.names += [s.name for s in spans]
        raise self.raises("the exporter gives up")


@app.activity
async def double(x: int) -> int:
    return 2 * x


@app.workflow
async def twice(x: int) -> int:
    return await funcs.call(double, x)


@pytest.fixture(params=[SystemExit, GeneratorExit, Odd])
def exporter(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Raising]:
    raising = Raising(request.param)
    with tracer_provider(monkeypatch, SimpleSpanProcessor(raising)):
        yield raising


async def test_an_exporter_raising_a_base_exception_stops_nothing(
    exporter: Raising, autojump_clock: Any
) -> None:
    async with open_test_node(app):
        assert await process.exec(twice, 2) == 4  # the run's close emits its span
        assert await process.exec(twice, 5) == 10  # and the node goes on
    assert "workflow telx:twice" in exporter.names  # run_closed did reach the exporter
    assert any(name.startswith("activity") for name in exporter.names), exporter.names
