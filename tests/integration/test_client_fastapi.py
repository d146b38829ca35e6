"""examples/fastapi_shop.py under ``asyncio.run``, against a real node: ``roost run`` in a
subprocess, found by the web app's ``roost.connect_async`` through the data directory."""

import asyncio
import importlib.util
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT = 60.0  # bound on the subprocess (a loaded box is slow, never this slow)


def load_example():
    spec = importlib.util.spec_from_file_location("fastapi_shop", EXAMPLES / "fastapi_shop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RoostRun:
    """``roost run fastapi_shop:shop --admin 127.0.0.1:0`` in a subprocess."""

    def __init__(self, data_dir):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "roost",
                "run",
                "fastapi_shop:shop",
                "--data-dir",
                str(data_dir),
                "--admin",
                "127.0.0.1:0",
            ],
            cwd=EXAMPLES,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(WAIT) or self.proc.poll() is not None:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"roost run did not start: {''.join(self.lines)}")

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if "stop it with Ctrl-C or SIGTERM" in line:
                self.ready.set()
        self.ready.set()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=WAIT) == 0, "".join(self.lines)
        self.reader.join(WAIT)
        self.proc.stderr.close()


async def drive(web_app):
    transport = httpx.ASGITransport(app=web_app)
    async with (
        web_app.router.lifespan_context(web_app),
        httpx.AsyncClient(transport=transport, base_url="http://shop") as web,
    ):
        created = await web.post("/orders", json={"order_id": "o-1", "amount": 4200})
        assert (created.status_code, created.json()) == (201, {"workflow_id": "o-1"})
        status = await web.get("/orders/o-1")
        assert status.json() == {"order": "o-1", "status": "running"}
        again = await web.post("/orders", json={"order_id": "o-1", "amount": 1})
        assert again.status_code == 409
        assert again.json()["error"]["kind"] == "AlreadyExists"
        approved = await web.post("/orders/o-1/approve", params={"approver": "ann"})
        assert approved.status_code == 200
        result = await web.get("/orders/o-1/result")
        assert result.json() == {"order": "o-1", "approved_by": "ann", "payment": "pay-o-1-4200"}
        missing = await web.get("/orders/o-404")
        assert missing.status_code == 404
        bad = await web.post("/orders", json={"order_id": "o-2"})
        assert bad.status_code == 422  # FastAPI's own check of the body, before roost


def test_the_fastapi_example_under_asyncio_against_roost_run(tmp_path):
    shop = load_example()
    data = tmp_path / "roost-data"
    node = RoostRun(data)
    try:
        assert json.loads((data / "admin.json").read_text())["pid"] == node.proc.pid
        asyncio.run(drive(shop.make_api(data)))
    finally:
        node.stop()
