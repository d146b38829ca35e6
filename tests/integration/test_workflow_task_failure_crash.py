"""Workflow task failures across a real crash: the node stays up and starts again.

``crash_task_app.py`` runs in a fresh interpreter on an LMDB data dir. Workflows whose tasks
fail (``SystemExit`` in their code, a divergence after the restart because the code reads
``time.time()``, a result that cannot be recorded) run beside workflows that work. The node
is killed with SIGKILL and started again on the same data dir: it starts, the working
workflows complete, and each failing one shows its task failure in ``describe`` and is
retried. A real Ctrl-C still stops a node whose workflow computes in a loop.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

APP = Path(__file__).with_name("crash_task_app.py")
sys.path.insert(0, str(APP.parent))
import crash_harness  # noqa: E402 - next to this module, on the path set above

pytestmark = pytest.mark.slow


class Child(crash_harness.Child):
    """A crash_task_app node (see ``crash_harness.Child``)."""

    app = APP


_no_stray_children = crash_harness.no_stray_children  # autouse: no node outlives a test


def test_failing_tasks_never_stop_the_node_before_or_after_a_crash(tmp_path: Path) -> None:
    child = Child(tmp_path, "task_failures")
    child.start()
    # "exits" raises SystemExit in every try: the node goes on (the ok-k ran their step).
    child.wait_for("the first run to be ready", lambda: child.marker("ready"))
    child.kill()
    report = child.resume()  # the node starts again on the same data dir

    assert report["exits"] == {"ok-0": 6, "ok-1": 12, "ok-2": 18}
    described = report["described"]
    for workflow_id in ("ok-0", "ok-1", "ok-2"):
        assert described[workflow_id]["status"] == "completed"
        assert described[workflow_id]["task_failure"] is None

    exits = described["exits"]
    assert exits["status"] == "running" and exits["tasks"] == []  # nothing committed
    failure = exits["task_failure"]
    assert (failure["type"], failure["kind"]) == ("Error", "Internal")
    assert "SystemExit: workflow code called sys.exit()" in failure["message"]
    assert failure["details"]["stage"] == "activation"
    lines = APP.read_text().splitlines()
    raising = next(i for i, line in enumerate(lines, 1) if "sys.exit(" in line)
    assert failure["details"]["location"] == f"{APP}:{raising}"
    assert failure["details"]["attempt"] >= 2  # retried

    clock = described["clock"]
    assert clock["status"] == "running" and clock["tasks"] == [1]  # the history is kept
    failure = clock["task_failure"]
    assert failure["type"] == "NondeterminismError"
    assert "diverged from its history in activation 1" in failure["message"]
    assert "time.time()" in failure["message"] and "roost.now()" in failure["message"]
    assert failure["details"]["stage"] == "replay"
    assert failure["details"]["recorded"] == "#1 start timer 3600s"

    result = described["result"]
    assert result["status"] == "running" and result["tasks"] == [1]
    failure = result["task_failure"]
    assert (failure["kind"], failure["details"]["activation"]) == ("Invalid", 2)
    assert "the workflow's result cannot be recorded" in failure["message"]

    # Logged at ERROR with the traceback, each try.
    for name, exc_type in (("'exits'", "SystemExit"), ("'clock'", "NondeterminismError")):
        tries = [r for r in report["errors"] if name in r["message"]]
        assert len(tries) >= 2 and all(r["exc_type"] == exc_type for r in tries), tries


def test_ctrl_c_stops_a_node_whose_workflow_computes(tmp_path: Path) -> None:
    child = Child(tmp_path, "ctrl_c")
    child.start()
    child.wait_for("the workflow to compute", lambda: child.marker("computing"))
    assert child.proc is not None
    child.proc.send_signal(signal.SIGINT)
    code = child.proc.wait(timeout=crash_harness.WAIT)
    assert code != 0
    assert "KeyboardInterrupt" in child.output()
