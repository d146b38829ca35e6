"""``roost.workflow``: what workflow code can ask about itself."""

from __future__ import annotations

from typing import Any

import attrs

from roost.actors._process import maybe_current_process

__all__ = ["WorkflowInfo", "history_length", "history_size", "info"]


@attrs.frozen(kw_only=True)
class WorkflowInfo:
    """The running workflow's identity and history size (``workflow.info()``)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    task_queue: str
    namespace: str
    attempt: int
    history_length: int
    history_size: int


def _driver() -> Any:
    proc = maybe_current_process()
    return proc.workflow if proc is not None else None


def info() -> WorkflowInfo | None:
    """The running workflow's info, or None outside a workflow."""
    driver = _driver()
    if driver is None or driver.started is None:
        return None
    started = driver.started
    return WorkflowInfo(
        workflow_id=started.workflow_id,
        run_id=started.run_id,
        workflow_type=started.workflow_type,
        task_queue=started.task_queue,
        namespace="default",
        attempt=started.attempt,
        history_length=driver.history_length,
        history_size=driver.history_size,
    )


def history_length() -> int:
    """Events in the run's history so far (0 outside a workflow)."""
    driver = _driver()
    return int(driver.history_length) if driver is not None else 0


def history_size() -> int:
    """Bytes of the run's history so far (0 outside a workflow)."""
    driver = _driver()
    return int(driver.history_size) if driver is not None else 0
