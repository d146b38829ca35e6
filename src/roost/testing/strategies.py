"""Hypothesis strategies for workflow property tests (needs the ``hypothesis`` package).

``workflow_programs()`` draws workflow programs as plain data, ``program_app()`` builds an
app whose workflow ``"<name>:program"`` runs them, and ``event_schedules(program)`` draws
the signals and crash points of a run; see ``roost.testing.assert_crash_equivalent``.

``payloads()``, ``hostile_values()`` and ``durations()`` draw what a call may be given, from
valid to malicious; ``same_value(stored, original)`` says whether a stored value came back.
"""

from roost.testing._hostile import durations, hostile_values, nested, payloads, same_value
from roost.testing._programs import program_app
from roost.testing._strategies import Schedule, event_schedules, workflow_programs

__all__ = [
    "Schedule",
    "durations",
    "event_schedules",
    "hostile_values",
    "nested",
    "payloads",
    "program_app",
    "same_value",
    "workflow_programs",
]
