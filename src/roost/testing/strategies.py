"""Hypothesis strategies for workflow property tests (needs the ``hypothesis`` package).

``workflow_programs()`` draws workflow programs as plain data, ``program_app()`` builds an
app whose workflow ``"<name>:program"`` runs them, and ``event_schedules(program)`` draws
the signals and crash points of a run; see ``roost.testing.assert_crash_equivalent``.
"""

from roost.testing._programs import program_app
from roost.testing._strategies import Schedule, event_schedules, workflow_programs

__all__ = ["Schedule", "event_schedules", "program_app", "workflow_programs"]
