"""Every committed history of the example workflows still replays against today's code.

A code change that would break workflows recorded by older code fails here, before deploy.
Re-record (tests/replay/record.py) only for a deliberate, versioned change.
"""

from pathlib import Path

import pytest
from record import EXAMPLES, HISTORIES, load_example

import roost
from roost.testing import Replayer, load_history
from roost.workflow._history import Complete, Fail

FILES = sorted(HISTORIES.glob("*.cbor"))


def recorded_outcome(history):
    last = history[-1]
    if isinstance(last, Complete):
        return ("value", last.value)
    if isinstance(last, Fail):
        return ("error", last.error.kind, last.error.message)
    return ("open", None)


def replayed_outcome(app, history):
    try:
        value = Replayer(app).replay(history)  # NondeterminismError propagates: a failure
    except roost.NondeterminismError:
        raise
    except roost.Error as err:
        return ("error", err.kind, err.message)
    return ("value", value) if value is not None else ("open", None)


def test_there_are_golden_histories():
    assert {path.name.split("--")[0] for path in FILES} == set(EXAMPLES)


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_golden_history_replays_to_its_recorded_outcome(path: Path):
    app = load_example(path.name.split("--")[0]).app
    history = load_history(path)
    assert replayed_outcome(app, history) == recorded_outcome(history)
