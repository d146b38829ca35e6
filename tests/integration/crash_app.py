"""The node that ``test_workflow_crash.py`` and ``test_workflow_crash_features.py`` run in a
real subprocess, kill and restart.

Usage: ``python crash_app.py DATA_DIR WORK_DIR SCENARIO PHASE``

- ``PHASE=run`` opens a node on ``DATA_DIR``, starts the scenario's workflows and then waits
  to be killed (SIGKILL, by the test or by an activity of the scenario).
- ``PHASE=resume`` first reads what the killed node left in the store (``before``), then
  opens a node on the same directory (it recovers the open runs by itself), waits for every
  workflow to close, shuts down, reads the store again (``after``) and writes everything as
  JSON to ``WORK_DIR/resume.json``.

Activities append JSON lines to ``WORK_DIR/activities.log`` when they start and when they
finish (just before returning their value), tagged with the phase; the signal sender appends
to ``WORK_DIR/signals.log`` after each receipt resolved. Every line is one ``os.write`` on an
``O_APPEND`` descriptor, so a SIGKILL cannot tear it.

The scenarios of ``FEATURES`` (child workflows, calls between workflows, retry policies, cron
schedules, start delays, run timeouts) resume differently: after the restart each runs its own
step (wait for the workflows, stop a callee, terminate a schedule ...), and the report holds
the store per run id (``snapshot_runs``), closed runs of a retried or cron workflow included.

This module is the entry point; the scenarios live by family in ``crash_app_core`` and
``crash_app_features``, on what ``crash_app_base`` shares (the app, activities, logs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import crash_app_base
import crash_app_core
import crash_child
import trio
from crash_app_base import app, touch
from crash_app_core import resume_phase
from crash_app_features import FEATURES, feature_resume_phase

import roost

SCENARIOS = {**crash_app_core.SCENARIOS, **{n: run for n, (run, _) in FEATURES.items()}}


async def run_phase(data_dir: str, scenario: str) -> None:
    """Start the scenario, then wait to be killed."""
    async with roost.open_node(app, data_dir, durability="sync") as node:
        await SCENARIOS[scenario](node)
        touch("started")
        await trio.sleep_forever()


def main(argv: list[str] | None = None) -> None:
    """``crash_app.py DATA_DIR WORK_DIR SCENARIO PHASE``."""
    data_dir, work_dir, scenario, phase = argv if argv is not None else sys.argv[1:]
    if scenario not in SCENARIOS or phase not in ("run", "resume"):
        raise SystemExit(f"unknown scenario {scenario!r} or phase {phase!r}")
    # The activities and scenarios read them (see crash_app_base).
    crash_app_base.WORK, crash_app_base.PHASE = Path(work_dir), phase
    crash_child.seal_logs(crash_app_base.WORK)
    if phase == "run":
        trio.run(run_phase, data_dir, scenario)
    elif scenario in FEATURES:
        trio.run(feature_resume_phase, data_dir, scenario)
    else:
        trio.run(resume_phase, data_dir, scenario)


if __name__ == "__main__":
    main()
