"""Traces survive a real crash: SIGKILL a traced node mid-workflow, restart it, compare spans.

``crash_trace_app.py`` exports every span to a file as it ends. The workflow runs an
activity and a child workflow, then an activity that kills the node; after the restart the
workflow finishes. The spans of both processes must form one trace with one span per run
and per real attempt, every activity under its run's span and the child's run under the
parent's, though the parent's run span is emitted by the second process only.

The parent polls marker and log files the child writes (a bounded loop of short sleeps: it
waits for another OS process, which no trio clock can do).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest

APP = Path(__file__).with_name("crash_trace_app.py")
sys.path.insert(0, str(APP.parent))
import crash_harness  # noqa: E402 - next to this module, on the path set above

pytestmark = pytest.mark.slow

_no_stray_children = crash_harness.no_stray_children  # autouse: no node outlives a test


class Child(crash_harness.Child):
    """A crash_trace_app node (see ``crash_harness.Child``)."""

    app = APP


def test_one_trace_and_no_duplicate_spans_across_a_sigkill(tmp_path: Path) -> None:
    child = Child(tmp_path, "order")
    child.start("run")
    child.wait_killed_itself()
    before = child.lines("spans.log")
    assert {x["phase"] for x in before} == {"run"}
    report = child.resume()
    assert report["result"] == ["O", "O/PART", "survived"]
    spans = child.lines("spans.log")
    names = Counter(x["span"] for x in spans)
    # One span per run, however often it was rebuilt; one per attempt that really ran
    # to its end (the attempt the SIGKILL cut short never ended, so it has none).
    assert names == {
        "workflow ct:order": 1,
        "workflow ct:part": 1,
        "activity ct:step": 2,
        "activity ct:die": 1,
    }
    ran = Counter((x["phase"], x["label"]) for x in child.lines("activities.log"))
    assert ran == {("run", "o"): 1, ("run", "o/part"): 1, ("run", "die"): 1, ("resume", "die"): 1}
    by_name = {x["span"]: x for x in spans if x["span"].startswith("workflow")}
    run, part = by_name["workflow ct:order"], by_name["workflow ct:part"]
    assert run["phase"] == "resume" and part["phase"] == "run"
    assert {x["trace_id"] for x in spans} == {run["trace_id"]}  # one trace, both processes
    assert run["parent_id"] is None
    # The child closed before the crash; its parent span is the one emitted after it.
    assert part["parent_id"] == run["span_id"]
    for span in spans:
        if span["span"].startswith("activity"):
            owner = part if span["attributes"]["roost.workflow.id"] != "order-1" else run
            assert span["parent_id"] == owner["span_id"], span
    # The run span spans the whole run: from its start in the first process.
    assert run["start"] <= min(x["start"] for x in spans)
    assert run["end"] >= max(x["end"] for x in spans if x is not run)
