"""A request committed with its target's hand-over reaches the next run after a SIGKILL.

``crash_handover_app.py`` runs in a fresh interpreter on an LMDB data dir. A cancel, a
message and a terminate, each from one workflow to another, commit in one group
transaction with their targets' continue-as-new steps; the node SIGKILLs itself right
after that commit, before any issuer's effects are carried out (the kill point is the
first issuer's ``Effects.dispatch``: no user code runs between a commit and its effects,
so the node marks the point itself, as the cron crash test does). Restarted on the same
data dir, each continued run gets its request exactly once, and no inbox row is left.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

APP = Path(__file__).with_name("crash_handover_app.py")
sys.path.insert(0, str(APP.parent))
import crash_harness  # noqa: E402 - next to this module, on the path set above

pytestmark = pytest.mark.slow


class Child(crash_harness.Child):
    """A crash_handover_app node (see ``crash_harness.Child``)."""

    app = APP


_no_stray_children = crash_harness.no_stray_children  # autouse: no node outlives a test


def test_requests_committed_with_their_targets_hand_over_survive_a_sigkill(
    tmp_path: Path,
) -> None:
    child = Child(tmp_path, "handover")
    child.start()
    child.wait_killed_itself()
    [state] = child.lines("kill.log")
    # The window: every step committed, every target continued as new in that commit,
    # and nothing of it applied in memory yet.
    assert state["issuers"] == dict.fromkeys(["i-cancel", "i-send", "i-terminate"], "completed")
    assert state["continued"] == dict.fromkeys(["t-cancel", "t-send", "t-terminate"], True)
    assert state["targets"] == dict.fromkeys(["t-cancel", "t-send", "t-terminate"], "running")

    report = child.resume()
    described = report["described"]
    assert described["t-cancel"] == {
        "status": "canceled",
        "result": "cancelled: from a workflow",
        "error_kind": None,
    }
    assert described["t-send"] == {"status": "completed", "result": ["hello"], "error_kind": None}
    assert described["t-terminate"]["status"] == "terminated"
    assert described["t-terminate"]["error_kind"] == "Canceled"
    assert report["exits"]["t-send"] == ["hello"]  # delivered once
    assert report["inbox"] == []  # every row read or deleted with its run
