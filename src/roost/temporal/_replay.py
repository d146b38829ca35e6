"""Replaying a Temporal-hosted run's history against the app's current code.

temporalio's ``Replayer`` runs ``RoostWorkflow`` (and so roost's driver with the app's
workflow code) over the recorded Temporal events, with no worker cache and no server: a
change that issues other commands than the history recorded is a replay failure.
"""

from __future__ import annotations

import asyncio

import attrs
import temporalio.client
import temporalio.worker

from roost.actors._app import App
from roost.temporal._converter import data_converter
from roost.temporal._workflow import RoostWorkflow, apps

__all__ = ["TemporalReplay", "replay_temporal_history"]


@attrs.frozen
class TemporalReplay:
    """The outcome of one replay: ``failure`` is None when the code replays the history."""

    workflow_id: str
    failure: str | None


async def _replay(app: App, history: temporalio.client.WorkflowHistory) -> TemporalReplay:
    replayer = temporalio.worker.Replayer(
        workflows=[RoostWorkflow],
        data_converter=data_converter(),
        workflow_runner=temporalio.worker.UnsandboxedWorkflowRunner(),
    )
    apps.add(app)
    try:
        result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    finally:
        apps.remove(app)
    failure = result.replay_failure
    return TemporalReplay(
        history.workflow_id,
        None if failure is None else f"{type(failure).__name__}: {failure}",
    )


def replay_temporal_history(app: App, history: temporalio.client.WorkflowHistory) -> TemporalReplay:
    """Replay ``history`` (of a run of one of ``app``'s workflows) against ``app``'s code.

    Runs its own asyncio loop: call it from synchronous code (the CLI, a test's thread).
    """
    return asyncio.run(_replay(app, history))
