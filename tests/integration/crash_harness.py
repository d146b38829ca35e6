"""The SIGKILL crash-test harness: a node program in a subprocess, killed and restarted.

Test modules subclass ``Child`` with their program's path and import ``no_stray_children``
(an autouse fixture). The parent polls marker and log files the child writes (a bounded
loop of short sleeps: it waits for another OS process, which no trio clock can do).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["POLL", "WAIT", "Child", "no_stray_children"]

WAIT = 30.0  # generous bound for anything the child does on a loaded box
POLL = 0.005

CHILDREN: list[Child] = []


@pytest.fixture(autouse=True)
def no_stray_children() -> Any:
    """Whatever a test did, no node process outlives it."""
    yield
    while CHILDREN:
        proc = CHILDREN.pop().proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


class Child:
    """A node program (``app``) in a subprocess on ``tmp_path/data``, logging to ``tmp_path/work``.

    The program takes ``DATA_DIR WORK_DIR SCENARIO PHASE``; subclasses set ``app``.
    """

    app: Path

    def __init__(self, tmp_path: Path, scenario: str) -> None:
        CHILDREN.append(self)
        self.data = tmp_path / "data"
        self.work = tmp_path / "work"
        self.work.mkdir()
        self.scenario = scenario
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.kills: list[float] = []  # wall times of each SIGKILL

    def _argv(self, phase: str) -> list[str]:
        argv = [str(self.app), str(self.data), str(self.work), self.scenario, phase]
        return [sys.executable, "-W", "error", *argv]

    def start(self, phase: str = "run") -> int:
        """Start the node; returns its OS pid (the ``os_pid`` of its log lines)."""
        name = f"{phase}{self.runs}"
        self.runs += 1
        with (
            (self.work / f"{name}.out").open("wb") as out,
            (self.work / f"{name}.err").open("wb") as err,
        ):
            self.proc = subprocess.Popen(self._argv(phase), stdout=out, stderr=err)
        return self.proc.pid

    @property
    def killed_at(self) -> float:
        """Wall time of the last SIGKILL (0 before any)."""
        return self.kills[-1] if self.kills else 0.0

    def output(self) -> str:
        paths = sorted(self.work.glob("*.out")) + sorted(self.work.glob("*.err"))
        parts = [f"--- {path.name}:\n{path.read_text(errors='replace')}" for path in paths]
        return "\n".join(parts)

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float = WAIT) -> None:
        """Poll ``ready`` until it holds; fail if the child exits or ``timeout`` passes."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the node exited ({self.proc.returncode}) before {what}\n{self.output()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{self.output()}")
            time.sleep(POLL)

    def sleep_until(self, wall: float) -> None:
        time.sleep(max(0.0, wall - time.time()))

    def kill(self) -> None:
        """SIGKILL the node and reap it."""
        assert self.proc is not None
        self.kills.append(time.time())
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=WAIT)

    def wait_killed_itself(self) -> None:
        """Wait for the node to die by its own SIGKILL (a crash point of the scenario)."""
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"the node did not kill itself within {WAIT:g}s\n{self.output()}")
        self.kills.append(time.time())
        assert code == -signal.SIGKILL, f"exit code {code}\n{self.output()}"

    def resume(self) -> dict[str, Any]:
        """Restart on the same data dir (the ``resume`` phase); its JSON report."""
        with (
            (self.work / "resume.out").open("wb") as out,
            (self.work / "resume.err").open("wb") as err,
        ):
            proc = subprocess.run(
                self._argv("resume"), stdout=out, stderr=err, timeout=90, check=False
            )
        assert proc.returncode == 0, f"the restarted node failed\n{self.output()}"
        report: dict[str, Any] = json.loads((self.work / "resume.json").read_text())
        return report

    def lines(self, name: str) -> list[dict[str, Any]]:
        """The complete JSON lines of a log (a line being written right now is skipped)."""
        path = self.work / name
        if not path.exists():
            return []
        *complete, _partial = path.read_text().split("\n")
        return [record for line in complete if (record := _parse(line)) is not None]

    def has_lines(self, name: str, count: int, **match: Any) -> bool:
        found = [x for x in self.lines(name) if all(x.get(k) == v for k, v in match.items())]
        return len(found) >= count

    def marker(self, name: str) -> bool:
        return (self.work / name).exists()


def _parse(line: str) -> dict[str, Any] | None:
    """A log line's record; None for a line a SIGKILL cut short (see crash_child)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None
