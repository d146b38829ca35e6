"""Plain counters the runtime keeps for metrics, read only when ``/metrics`` is scraped.

The runtime bumps ints in dicts where it already counts (no locks, no label lookups, no
prometheus-client on the hot path); ``roost.admin._metrics`` turns them into Prometheus
families at scrape time. The two latency histograms observe each event into fixed
buckets: one bisect and three additions. Pure Python, no trio: the store's writer thread
observes commit latencies here too (an int or float update is atomic under the GIL, and a
scrape that reads a bucket list while an observation lands is off by that one event).
"""

from __future__ import annotations

import bisect
import time
from typing import Final

__all__ = [
    "ACTIVITY_BUCKETS",
    "COMMIT_BUCKETS",
    "Histogram",
    "RuntimeCounters",
]

# Seconds. Activities run from microseconds (inline) to minutes; commits are an fsync.
ACTIVITY_BUCKETS: Final = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    60.0,
)
COMMIT_BUCKETS: Final = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class Histogram:
    """Observations in fixed upper-bounded buckets (the last one is +Inf), with sum and count."""

    __slots__ = ("bounds", "buckets", "count", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.buckets = [0] * (len(bounds) + 1)  # per bucket, not cumulative
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count one observation."""
        self.buckets[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus' buckets: (upper bound as text, observations at or below it)."""
        out = []
        running = 0
        for bound, hits in zip((*self.bounds, float("inf")), self.buckets, strict=True):
            running += hits
            out.append(("+Inf" if bound == float("inf") else repr(bound), running))
        return out


class RuntimeCounters:
    """What the workflow runtime counts: runs started and closed, activity attempts.

    Keyed by entry id (a workflow's type, an activity's entry: activity latencies too, and
    workflow task failures by the failing run's type); closed runs also by their final
    status (``completed``, ``failed``, ``canceled``, ``terminated``, ``timed_out``).
    """

    __slots__ = (
        "activity_seconds",
        "attempts",
        "closed",
        "failures",
        "started",
        "task_failures",
    )

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.closed: dict[tuple[str, str], int] = {}
        self.attempts: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.activity_seconds: dict[str, Histogram] = {}  # by activity entry
        self.task_failures: dict[str, int] = {}  # by workflow type

    def run_started(self, workflow_type: str) -> None:
        """A workflow started (its first run; continue-as-new and retries are not starts)."""
        self.started[workflow_type] = self.started.get(workflow_type, 0) + 1

    def run_closed(self, workflow_type: str, status: str) -> None:
        """A workflow closed for good with ``status``."""
        ident = (workflow_type, status)
        self.closed[ident] = self.closed.get(ident, 0) + 1

    def attempt(self, entry: str) -> float:
        """An activity attempt begins; returns its start time for ``attempt_done``."""
        self.attempts[entry] = self.attempts.get(entry, 0) + 1
        return time.perf_counter()

    def attempt_done(self, entry: str, began: float) -> float:
        """An attempt of ``entry`` that began at ``began`` has its outcome; returns 0.0."""
        hist = self.activity_seconds.get(entry)
        if hist is None:
            hist = self.activity_seconds[entry] = Histogram(ACTIVITY_BUCKETS)
        hist.observe(time.perf_counter() - began)
        return 0.0

    def task_failed(self, workflow_type: str) -> None:
        """A workflow task of a run of ``workflow_type`` failed (it is retried)."""
        self.task_failures[workflow_type] = self.task_failures.get(workflow_type, 0) + 1

    def attempt_failed(self, entry: str) -> None:
        """An attempt of ``entry`` failed (to be retried, or for good)."""
        self.failures[entry] = self.failures.get(entry, 0) + 1
