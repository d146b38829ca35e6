"""``@app.main``: the entry a node starts after recovery, through open_node, roost.run and
``roost run``; its supervision tree is what the admin API's processes listing shows.

In-process tests run on trio's MockClock; the admin listing goes over real HTTP on the
real clock (as test_admin.py); ``roost run`` and the ``roost.run`` script are real
subprocesses, stopped with a real SIGINT once they said they are up.
"""

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
import trio

import roost
from roost import ErrorKind

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import main_app  # noqa: E402

WAIT = 60.0  # bound on a subprocess (a loaded box is slow, never this slow)


def entries(node: roost.NodeHandle) -> list[str | None]:
    return sorted(str(p["entry"]) for p in process_rows(node))


def process_rows(node: roost.NodeHandle) -> list[dict]:
    from roost.admin._views import process_list  # noqa: PLC0415 - the API's own listing

    return process_list(node)


async def test_main_starts_the_tree_and_the_node_keeps_serving_after_it_returns(
    autojump_clock, monkeypatch
):
    monkeypatch.setenv("MAIN_MODE", "tree")
    async with roost.open_node(main_app.app) as node:
        assert isinstance(node.main_pid, roost.Pid)
        await trio.testing.wait_all_tasks_blocked()
        # main returned (no longer listed); the supervisor and its workers live on.
        assert entries(node) == ["None", "whole:root", "whole:worker", "whole:worker"]
        await trio.sleep(3600)
        assert node.process_count() == 4


async def test_a_node_of_an_app_without_main_has_no_main_pid(autojump_clock):
    app = roost.App("plain")

    @app.process
    async def idle() -> None:
        await trio.sleep_forever()

    async with roost.open_node(app) as node:
        assert node.main_pid is None
        assert node.process_count() == 1


async def test_a_failing_main_stops_the_node_with_its_error(autojump_clock, monkeypatch):
    monkeypatch.setenv("MAIN_MODE", "fail")
    with pytest.raises(roost.Error) as caught:
        async with roost.open_node(main_app.app) as node:
            await trio.sleep_forever()
    assert "the app's configuration is missing" in caught.value.message
    assert caught.value.details["linked_pid"] == str(node.main_pid)


def test_an_app_has_one_main_and_it_takes_no_arguments():
    app = roost.App("two")

    @app.main
    async def first() -> None:
        pass

    with pytest.raises(roost.Error, match="already has a main") as twice:

        @app.main
        async def second() -> None:
            pass

    assert twice.value.kind is ErrorKind.INVALID
    other = roost.App("args")
    with pytest.raises(roost.Error, match=r"must take no arguments") as needs:

        @other.main
        async def with_config(path: str) -> None:
            pass

    assert needs.value.kind is ErrorKind.INVALID
    assert other.main_entry is None and "args:with_config" not in other.entries
    assert app.main_entry is not None and app.main_entry.id == "two:first"


async def test_the_admin_processes_listing_shows_the_tree_under_main(tmp_path, monkeypatch):
    monkeypatch.setenv("MAIN_MODE", "tree")
    async with roost.open_node(main_app.app, tmp_path, admin="127.0.0.1:0") as node:
        token = json.loads((tmp_path / "admin.json").read_text())["token"]
        await trio.testing.wait_all_tasks_blocked()
        async with httpx.AsyncClient(
            base_url=node.admin_url, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            response = await client.get("/api/processes")
    assert response.status_code == 200, response.text
    rows = {row["pid"]: row for row in response.json()}
    (root,) = [row for row in rows.values() if row["entry"] == "whole:root"]
    assert root["name"] == "whole-root" and root["status"] == "supervisor"
    assert len(root["children"]) == 2
    assert all(rows[kid]["entry"] == "whole:worker" for kid in root["children"])
    assert all(rows[kid]["parent"] == root["pid"] for kid in root["children"])


def python_script() -> list[str]:
    """Python running a script with Ctrl-C's handler in place.

    A shell starts background jobs with SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler; a terminal's Ctrl-C reaches a script with it.
    """
    boot = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    return [sys.executable, "-c", boot]


class RoostRun:
    """``roost run main_app:app`` with MAIN_MODE=mode, its stderr read by a thread."""

    def __init__(self, data_dir: Path, mode: str, ready_line: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "roost", "run", "main_app:app", "--data-dir", str(data_dir)],
            cwd=HERE,
            env={**os.environ, "MAIN_MODE": mode},
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.ready_line = ready_line
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.ready.wait(WAIT)

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if self.ready_line in line:
                self.ready.set()
        self.ready.set()

    def wait(self) -> tuple[int, str]:
        """The exit code and the whole log, once it exited."""
        code = self.proc.wait(WAIT)
        self.reader.join(WAIT)
        self.proc.stderr.close()
        return code, "".join(self.lines)


@pytest.mark.slow
def test_roost_run_starts_main_and_stops_quietly_on_sigint(tmp_path):
    node = RoostRun(tmp_path / "data", "tree", "the tree is up")
    node.proc.send_signal(signal.SIGINT)
    code, log = node.wait()
    assert code == 0, log
    assert "runs app 'whole'" in log and "; main {whole:processes|" in log
    assert "SIGINT received: shutting down" in log and "Traceback" not in log


@pytest.mark.slow
def test_roost_run_exits_1_when_main_fails(tmp_path):
    code, log = RoostRun(tmp_path / "data", "fail", "node stopped").wait()
    assert code == 1, log
    assert "the app's main failed" in log and "the app's configuration is missing" in log
    assert "ERROR roost.cli: main {whole:processes|" in log


@pytest.mark.slow
def test_ctrl_c_on_a_roost_run_script_prints_one_line(tmp_path):
    proc = subprocess.Popen(
        [*python_script(), str(HERE / "main_app.py"), str(tmp_path / "data")],
        cwd=HERE,
        env={**os.environ, "MAIN_MODE": "ready"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0
    assert err == "roost: SIGINT received: node 'local' shut down\n"


@pytest.mark.slow
def test_ctrl_c_while_roost_run_runs_an_entry_exits_130_with_one_line(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import roost, main_app, trio\n"
        "app = main_app.app\n"
        "@app.process\n"
        "async def job() -> None:\n"
        "    print('ready', flush=True)\n"
        "    await trio.sleep_forever()\n"
        "roost.run(app, job)\n"
    )
    proc = subprocess.Popen(
        [*python_script(), str(script)],
        env={**os.environ, "MAIN_MODE": "ready"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Both "ready" lines: main's tree is up and the entry runs, so the Ctrl-C finds the
    # node started (one during its start is another test's matter).
    assert [proc.stdout.readline() for _ in range(2)] == ["ready\n", "ready\n"]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130
    assert err == "roost: interrupted (Ctrl-C): the node shut down\n"


@pytest.mark.slow
def test_a_ctrl_c_lands_at_a_checkpoint_never_inside_running_code(tmp_path):
    marker = tmp_path / "finished"
    script = tmp_path / "script.py"
    script.write_text(
        "import os, signal, sys\n"
        f"sys.path.insert(0, {str(HERE)!r})\n"
        "import roost, main_app, trio\n"
        "app = main_app.app\n"
        "@app.process\n"
        "async def job() -> None:\n"
        "    await trio.sleep(0)\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C arrives while this code runs\n"
        "    total = sum(range(3_000_000))  # no checkpoint in here\n"
        f"    open({str(marker)!r}, 'w').write(str(total))\n"
        "    await trio.sleep_forever()\n"
        "roost.run(app, job)\n"
    )
    proc = subprocess.run(
        [*python_script(), str(script)],
        env={**os.environ, "MAIN_MODE": "ready"},
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    # Raised inside the running code, the KeyboardInterrupt would have cut the sum short.
    assert marker.read_text() == str(sum(range(3_000_000))), proc.stderr
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "roost: interrupted (Ctrl-C): the node shut down\n"
