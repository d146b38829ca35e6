"""A tracer provider for one test, in place of the process's global one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from roost import _telemetry


@contextmanager
def tracer_provider(monkeypatch: pytest.MonkeyPatch, processor: SpanProcessor) -> Iterator[None]:
    """Spans go to ``processor`` until the block ends; roost then reads the globals again.

    OpenTelemetry sets its global provider once per process, so the test's is put in its
    place (and taken away after) rather than set.
    """
    provider = TracerProvider()
    provider.add_span_processor(processor)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    try:
        yield
    finally:
        monkeypatch.undo()
        _telemetry.refresh()
