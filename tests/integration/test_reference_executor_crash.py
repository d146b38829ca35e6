"""The benchmarks' reference executor survives a real SIGKILL (benchmarks/_reference.py).

For each variant, ``reference_crash_app.py`` runs 30 workflows of 3 activities in a fresh
interpreter on an LMDB data dir; after 30 committed results its writer blocks just before
its next batch and says so on a pipe, and the test SIGKILLs it. A second interpreter
recovers the same directory. Checked:

- every workflow completes with the right result, and nothing committed before the kill
  changed (nothing lost);
- no activity whose result was committed before the kill ran again; every activity that
  ran uncommitted ran exactly once more after the restart, and there was such an activity
  (the blocked batch's), so the test shows replay and re-execution both.
"""

from __future__ import annotations

import selectors
import sys
from collections import Counter
from pathlib import Path

import pytest

APP = Path(__file__).with_name("reference_crash_app.py")
sys.path.insert(0, str(APP.parent))
sys.path.insert(0, str(APP.parents[2]))  # the repo root: benchmarks/
import crash_harness  # noqa: E402 - next to this module, on the path set above
import reference_crash_app as app_consts  # noqa: E402 - imported for N and SEQS only
from benchmarks._reference import snapshot  # noqa: E402 - needs the repo root on the path

pytestmark = pytest.mark.slow

_no_stray_children = crash_harness.no_stray_children  # autouse: no child outlives a test


class Child(crash_harness.Child):
    """A reference executor process; its stdout is a pipe the test reads."""

    app = APP

    def start_piped(self) -> str:
        """Start the run phase; the first line it prints (within the harness' bound)."""
        import subprocess  # noqa: PLC0415 - only this method starts a process itself

        err = (self.work / "run.err").open("wb")
        self.proc = subprocess.Popen(self._argv("run"), stdout=subprocess.PIPE, stderr=err)
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            ready = sel.select(crash_harness.WAIT)
        line = self.proc.stdout.readline().decode() if ready else ""
        self.proc.stdout.close()  # the child prints nothing more
        err.close()
        return line.strip()


def runs_log(child: Child) -> Counter[tuple[int, int, str]]:
    lines = (child.work / "runs.log").read_text().splitlines()
    return Counter((int(i), int(seq), phase) for i, seq, phase in map(str.split, lines))


@pytest.mark.parametrize("variant", ["a", "b", "c"])
def test_sigkill_mid_run_then_recover(tmp_path: Path, variant: str) -> None:
    n, seqs = app_consts.N, app_consts.SEQS
    child = Child(tmp_path, variant)
    assert child.start_piped() == "blocked", child.output()
    child.kill()

    at_kill = snapshot(str(child.data))
    assert at_kill["started"] == set(range(1, n + 1)), "a start was not committed up front"
    assert len(at_kill["done"]) < n, "the kill came after the end: the test proves nothing"
    before = runs_log(child)
    for wf_id, seq in at_kill["results"]:
        assert before[wf_id - 1, seq, "run"] == 1, "a committed activity had not run once"

    report = child.resume()

    assert report["recovered"] == n - len(at_kill["done"])
    done = snapshot(str(child.data))
    assert done["done"] == {i + 1: [i, 10 * i + seqs] for i in range(n)}
    assert {k: done["results"][k] for k in at_kill["results"]} == at_kill["results"]
    after = runs_log(child)
    for wf_id, seq in at_kill["results"]:
        assert after[wf_id - 1, seq, "resume"] == 0, f"committed step {wf_id}/{seq} ran again"
    rerun = [(i, seq) for i, seq, phase in after if phase == "resume" and before[i, seq, "run"]]
    assert rerun, "no activity had run uncommitted at the kill: the test proves nothing"
    for i in range(n):
        for seq in range(seqs):
            assert after[i, seq, "run"] <= 1
            assert after[i, seq, "resume"] <= 1
            assert after[i, seq, "run"] + after[i, seq, "resume"] >= 1
