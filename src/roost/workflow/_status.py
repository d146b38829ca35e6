"""A run's status, in a module of its own so the pure planner can name it without the store."""

from __future__ import annotations

import enum

__all__ = ["RunStatus"]


class RunStatus(enum.StrEnum):
    """Where a run is in its life."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TERMINATED = "terminated"
    CANCELED = "canceled"  # returned after a cancel request
    TIMED_OUT = "timed_out"  # run_timeout or execution_timeout
