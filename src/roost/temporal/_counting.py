"""The node's workflow metrics for what its Temporal worker runs, under roost's own names.

Each node's app worker gets a ``RunCounting`` interceptor holding the node's
``RuntimeCounters`` (the ones ``/metrics`` reads as ``roost_workflows_*`` and
``roost_workflow_task_failures_total``; the activity attempts are counted by the activity
itself). A workflow task's code runs inside the interceptor's ``execute_workflow``, so the
run's close finds the counters of the worker running it through a context variable. Only
what happens for the first time is counted: a replayed task (a worker without the run in
its cache replays the history) counts nothing again.
"""

from __future__ import annotations

import contextvars
from typing import Any, ClassVar

import temporalio.exceptions
import temporalio.worker
import temporalio.workflow as tw

from roost._counters import RuntimeCounters

__all__ = ["RunCounting", "count_close"]

_counters: contextvars.ContextVar[RuntimeCounters | None] = contextvars.ContextVar(
    "roost_temporal_counters", default=None
)


def count_close(workflow_type: str, status: str) -> None:
    """The run closes the workflow for good with ``status`` (not counted in a replay)."""
    counters = _counters.get()
    if counters is not None and not tw.unsafe.is_replaying():
        counters.run_closed(workflow_type, status)


class RunCounting(temporalio.worker.Interceptor):
    """Counts the roost workflows a worker runs into one node's ``RuntimeCounters``."""

    def __init__(self, counters: RuntimeCounters) -> None:
        self._counters = counters

    def workflow_interceptor_class(
        self, workflow: temporalio.worker.WorkflowInterceptorClassInput
    ) -> type[temporalio.worker.WorkflowInboundInterceptor]:
        """A run interceptor bound to this node's counters."""
        return type("CountedRun", (_CountedRun,), {"counters": self._counters})


class _CountedRun(temporalio.worker.WorkflowInboundInterceptor):
    counters: ClassVar[RuntimeCounters]

    async def execute_workflow(self, input: temporalio.worker.ExecuteWorkflowInput) -> Any:  # noqa: A002 - temporalio's name
        info = tw.info()
        if info.workflow_type.startswith("@roost."):  # roost's own machinery, not the app's
            return await self.next.execute_workflow(input)
        _counters.set(self.counters)
        if not tw.unsafe.is_replaying() and info.attempt == 1 and info.continued_run_id is None:
            self.counters.run_started(info.workflow_type)
        try:
            return await self.next.execute_workflow(input)
        except temporalio.exceptions.FailureError:
            raise  # the run failed: counted at its close
        except Exception:
            if not tw.unsafe.is_replaying():  # the workflow task fails; Temporal retries it
                self.counters.task_failed(info.workflow_type)
            raise
