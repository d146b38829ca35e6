"""``GET /metrics``: Prometheus text from the node's own counters, read at scrape time.

Each admin server has a ``CollectorRegistry`` of its own (never prometheus-client's global
one, which would mix the nodes of one process) holding one custom collector. The runtime
keeps plain ints where it already counts (``roost._counters``, ``StoreStats``, the queue
states); the collector reads them when scraped, so the hot path pays nothing for metrics
beyond those increments and the two latency histograms. The client library's process,
platform and GC collectors are registered too (they describe the OS process).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from roost._counters import RuntimeCounters
from roost.admin._views import node_of, queue_stats

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from roost._counters import Histogram
    from roost.actors._open import NodeHandle

__all__ = ["CONTENT_TYPE", "NodeCollector", "metrics_text", "new_registry"]

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


def _histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, buckets=hist.cumulative(), sum_value=hist.total)


class NodeCollector(Collector):
    """Every roost metric of one node."""

    def __init__(self, handle: NodeHandle) -> None:
        self.handle = handle

    def describe(self) -> list[Metric]:
        """Nothing up front: the families are known once scraped (no collect at register)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The families, read from the runtime's counters now."""
        node = node_of(self.handle)
        embedded = node.local_workflows  # the counters and gauges are the embedded host's own
        if embedded is not None:
            yield from _workflows(embedded.counters)
            yield from _workflow_gauges(embedded)
        else:  # another host (Temporal's) may count what this node's workers ran
            counters = getattr(node.workflows, "counters", None)
            if isinstance(counters, RuntimeCounters):
                yield from _workflows(counters)
        if node.store is not None:
            yield from _store(node.store.stats)
        yield from _queues(self.handle)
        procs = GaugeMetricFamily("roost_processes", "Live processes on the node.")
        procs.add_metric([], len(node.procs))
        yield procs
        yield from _loop(node)
        yield from _mailboxes(node)


def _mailboxes(node: Any) -> Iterator[Metric]:
    warn_at = int(node.settings.get("mailbox_warning", 10_000))
    most = over = total = 0
    for proc in list(node.procs.values()):
        box = proc.mailbox  # made on first use: a process that never received has none
        if box is not None:
            unread = box.unread_messages()
            most = max(most, unread)
            over += unread >= warn_at
            total += unread
    depth = GaugeMetricFamily(
        "roost_unread_messages", "Unread messages in live processes' mailboxes, summed."
    )
    depth.add_metric([], total)
    yield depth
    largest = GaugeMetricFamily(
        "roost_mailbox_unread_max", "The most unread messages one live process's mailbox holds."
    )
    largest.add_metric([], most)
    yield largest
    count = GaugeMetricFamily(
        "roost_mailboxes_over_warning",
        "Live processes whose mailbox holds at least mailbox_warning unread messages.",
    )
    count.add_metric([], over)
    yield count


def _loop(node: Any) -> Iterator[Metric]:
    watchdog = node.ext.get("loop_watchdog")
    if watchdog is not None:
        stalls = CounterMetricFamily(
            "roost_loop_stalls_total",
            "Times the event loop did not run for longer than the loop_stall threshold.",
        )
        stalls.add_metric([], watchdog.stalls)
        yield stalls
        seconds = CounterMetricFamily(
            "roost_loop_stall_seconds_total", "Seconds the event loop spent in those stalls."
        )
        seconds.add_metric([], watchdog.stall_seconds)
        yield seconds


def _workflows(counters: RuntimeCounters) -> Iterator[Metric]:
    started = CounterMetricFamily(
        "roost_workflows_started_total", "Workflows started, by type.", labels=["type"]
    )
    for kind, n in sorted(counters.started.items()):
        started.add_metric([kind], n)
    yield started
    by_status: dict[str, CounterMetricFamily] = {}
    for status, doc in (("completed", "completed"), ("failed", "failed")):
        by_status[status] = CounterMetricFamily(
            f"roost_workflows_{status}_total", f"Workflows that {doc}, by type.", labels=["type"]
        )
    closed = CounterMetricFamily(
        "roost_workflows_closed_total",
        "Workflows closed for good, by type and final status.",
        labels=["type", "status"],
    )
    for (kind, status), n in sorted(counters.closed.items()):
        closed.add_metric([kind, status], n)
        if status in by_status:
            by_status[status].add_metric([kind], n)
    yield from by_status.values()
    yield closed
    failures = CounterMetricFamily(
        "roost_workflow_task_failures_total",
        "Workflow task failures (an activation that raised or could not commit), by type.",
        labels=["type"],
    )
    for kind, n in sorted(counters.task_failures.items()):
        failures.add_metric([kind], n)
    yield failures
    attempts = CounterMetricFamily(
        "roost_activity_attempts_total", "Activity attempts started, by entry.", labels=["entry"]
    )
    for entry, n in sorted(counters.attempts.items()):
        attempts.add_metric([entry], n)
    yield attempts
    failed = CounterMetricFamily(
        "roost_activity_failures_total",
        "Activity attempts that failed, by entry.",
        labels=["entry"],
    )
    for entry, n in sorted(counters.failures.items()):
        failed.add_metric([entry], n)
    yield failed
    durations = HistogramMetricFamily(
        "roost_activity_duration_seconds",
        "How long activity attempts took, start to outcome, by entry.",
        labels=["entry"],
    )
    for entry, hist in sorted(counters.activity_seconds.items()):
        durations.add_metric([entry], hist.cumulative(), hist.total)
    yield durations


def _workflow_gauges(manager: Any) -> Iterator[Metric]:
    gauges = manager.gauges()
    open_runs = GaugeMetricFamily(
        "roost_workflows_open", "Open workflow runs, by type.", labels=["type"]
    )
    for kind, n in sorted(gauges["open"].items()):
        open_runs.add_metric([kind], n)
    yield open_runs
    pending = GaugeMetricFamily(
        "roost_activities_pending",
        "Activity tasks not resolved yet: running, or waiting for a retry.",
    )
    pending.add_metric([], gauges["activities"])
    yield pending
    timers = GaugeMetricFamily("roost_timers", "Durable workflow timers armed.")
    timers.add_metric([], gauges["timers"])
    yield timers


def _store(stats: Any) -> Iterator[Metric]:
    yield _histogram(
        "roost_commit_duration_seconds",
        "How long each store commit (its write and fsync) took.",
        stats.commit_seconds,
    )
    commits = CounterMetricFamily("roost_commits_total", "Store commits (one per group commit).")
    commits.add_metric([], stats.commits)
    yield commits
    requests = CounterMetricFamily(
        "roost_commit_requests_total",
        "Transactions committed through the store; per commit, the mean batch size.",
    )
    requests.add_metric([], stats.requests)
    yield requests
    largest = GaugeMetricFamily(
        "roost_commit_batch_largest", "The most transactions one group commit carried."
    )
    largest.add_metric([], stats.largest_batch)
    yield largest


def _queues(handle: NodeHandle) -> Iterator[Metric]:
    stats = queue_stats(handle)
    families = {
        "depth": GaugeMetricFamily(
            "roost_queue_depth", "Messages waiting in the queue.", labels=["queue"]
        ),
        "in_flight": GaugeMetricFamily(
            "roost_queue_in_flight", "Messages being handled now.", labels=["queue"]
        ),
        "dead": GaugeMetricFamily("roost_queue_dead", "Dead letters (DLQ size).", labels=["queue"]),
    }
    for queue, row in sorted(stats.items()):
        for field, family in families.items():
            family.add_metric([queue], row[field])
    yield from families.values()
    runtime = node_of(handle).ext.get("queues")
    for name, doc, counts in (
        (
            "roost_queue_deliveries_total",
            "Queue delivery attempts started (each handler call, retries included).",
            getattr(runtime, "deliveries", {}),
        ),
        (
            "roost_queue_delivery_failures_total",
            "Queue delivery attempts that failed (retried or dead-lettered).",
            getattr(runtime, "delivery_failures", {}),
        ),
    ):
        counter = CounterMetricFamily(name, doc, labels=["queue", "entry"])
        for (queue, entry), n in sorted(counts.items()):
            counter.add_metric([queue, entry], n)
        yield counter


def new_registry(handle: NodeHandle) -> CollectorRegistry:
    """A registry of its own for ``handle``'s node."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(handle))
    # The client library's own: the OS process (CPU, memory, open files), the platform
    # and Python's garbage collector, as every Python exporter shows them.
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


def metrics_text(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``."""
    return generate_latest(registry)
