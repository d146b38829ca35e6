"""The ``roost`` command line, run as a real subprocess against a real data directory.

With no node: reading commands see what a node stored and change nothing (no activity runs,
the store's bytes stay the same); changing commands store what the runtime would, and the
next ``open_node`` acts on it. Beside a node running in another process (``roost run``):
reads work while it runs, a change without an admin server is refused with exit 1, and
SIGTERM shuts it down cleanly.
"""

import hashlib
import json
import os
import pty
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trio

import roost
from roost import process

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
APP = "cli_ops_app:app"
WAIT = 60.0  # bound on a subprocess (a loaded box is slow, never this slow)


def roost_cli(data_dir, *args, log=None, check=None):
    env = {**os.environ, "ROOST_DATA_DIR": str(data_dir), "COLUMNS": "200"}
    if log is not None:
        env["ACTIVITY_LOG"] = str(log)
    done = subprocess.run(
        [sys.executable, "-m", "roost", *args],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout, done.stderr)
    return done


def cli_json(data_dir, *args, log=None):
    done = roost_cli(data_dir, *args, "--json", log=log, check=0)
    return json.loads(done.stdout)


def digest(data_dir):
    return hashlib.sha256((Path(data_dir) / "data.mdb").read_bytes()).hexdigest()


async def until(predicate):
    # Under the autojump clock: virtual time, no wall-clock wait.
    while not predicate():  # noqa: ASYNC110 - state of a node, no event to wait on
        await trio.sleep(0.01)


async def seed(data_dir):
    """g1 completed, w1..w3 waiting, two dead letters in ``jobs``."""
    import cli_ops_app  # noqa: PLC0415 - the app module lives beside the tests

    async with roost.open_node(cli_ops_app.app, data_dir) as node:
        assert await process.with_options(id="g1").exec("ops:greet", "ann") == "hello ann"
        for wid in ("w1", "w2", "w3"):
            await process.with_options(id=wid).spawn("ops:waiter")
        await roost.enqueue("jobs", "ops:doomed", 1)
        await roost.enqueue("jobs", "ops:doomed", 2)
        await until(lambda: len(node.dlq.list("jobs")) == 2)


async def test_reading_a_stopped_data_dir_runs_nothing_and_writes_nothing(tmp_path, autojump_clock):
    data, log = tmp_path / "data", tmp_path / "activities.log"
    await seed(data)
    before = digest(data)

    listed = cli_json(data, "workflow", "list", log=log)
    assert {(w["workflow_id"], w["status"]) for w in listed} == {
        ("g1", "completed"),
        ("w1", "running"),
        ("w2", "running"),
        ("w3", "running"),
    }
    running = cli_json(data, "workflow", "list", "--status", "running", log=log)
    assert sorted(w["workflow_id"] for w in running) == ["w1", "w2", "w3"]
    queried = cli_json(data, "workflow", "list", "--query", "workflow_id = 'g1'", log=log)
    assert [w["workflow_id"] for w in queried] == ["g1"]

    described = cli_json(data, "workflow", "describe", "g1", log=log)
    assert described["result"] == "hello ann"
    assert described["workflow_type"] == "ops:greet"
    assert described["started_at"].startswith("20")  # ISO 8601

    shown = cli_json(data, "workflow", "show", "g1", log=log)
    types = [item["type"] for item in shown]
    assert "Started" in types
    assert any(item.get("entry") == "ops:shout" for item in shown)

    assert cli_json(data, "workflow", "result", "g1", log=log) == {
        "status": "completed",
        "result": "hello ann",
        "error": None,
    }
    assert cli_json(data, "queue", "stats", log=log) == {
        "jobs": {"depth": 0, "in_flight": 0, "dead": 2}
    }
    with_app = cli_json(data, "queue", "stats", "--app", APP, log=log)
    assert with_app["default"] == {"depth": 0, "in_flight": 0, "dead": 0}

    dead = cli_json(data, "dlq", "list", "jobs", log=log)
    assert [d["payload"] for d in dead] == [1, 2]
    assert dead[0]["entry"] == "ops:doomed"
    assert dead[0]["errors"][-1]["message"].endswith("doomed 1")
    assert set(dead[0]) == {"receipt_id", "entry", "payload", "errors", "failed_at"}

    crons = cli_json(data, "cron", "list", "--app", APP, log=log)
    assert [(c["expression"], c["entry"]) for c in crons] == [("0 0 1 1 *", "ops:tick")]
    assert crons[0]["next_fire_at"].endswith("-01-01T00:00:00+00:00")

    table = roost_cli(data, "workflow", "list", log=log, check=0).stdout
    assert "g1" in table and "completed" in table and "w1" in table

    exported = tmp_path / "g1.cbor"
    roost_cli(data, "history", "export", "g1", str(exported), log=log, check=0)
    replayed = roost_cli(data, "replay", "--history", str(exported), "--app", APP, check=0)
    assert "replays to 'hello ann'" in replayed.stdout

    assert digest(data) == before  # nothing written
    assert not log.exists()  # no activity ran


def test_exit_codes(tmp_path):
    missing = roost_cli(tmp_path / "none", "workflow", "list")
    assert missing.returncode == 1
    assert "no roost store" in missing.stderr
    bad = roost_cli(tmp_path / "none", "workflow", "start", "ops:greet", "not json")
    assert bad.returncode == 2
    assert "ARGS must be JSON" in bad.stderr
    not_a_list = roost_cli(tmp_path / "none", "workflow", "start", "ops:greet", '{"a": 1}')
    assert not_a_list.returncode == 2
    no_entry = roost_cli(tmp_path / "none", "workflow", "start", "greet")
    assert no_entry.returncode == 2
    assert "'app:name'" in no_entry.stderr
    assert not (tmp_path / "none").exists()  # bad input stored nothing
    no_app = roost_cli(tmp_path / "none", "run", "cli_ops_app:nothing")
    assert no_app.returncode == 2
    assert "is not a roost.App" in no_app.stderr
    version = roost_cli(tmp_path, "--version", check=0)
    assert version.stdout.startswith("roost, version ")


async def test_offline_changes_are_picked_up_by_the_next_node(tmp_path, autojump_clock):
    data, log = tmp_path / "data", tmp_path / "activities.log"
    await seed(data)
    dead = cli_json(data, "dlq", "list", "jobs")
    first, second = dead[0]["receipt_id"], dead[1]["receipt_id"]
    closed = roost_cli(data, "workflow", "cancel", "g1")
    assert closed.returncode == 1
    assert "'g1' is not running" in closed.stderr

    started = roost_cli(data, "workflow", "start", "ops:greet", '["bob"]', "--id", "g2", log=log)
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "g2"
    roost_cli(data, "workflow", "signal", "w1", "go", '"yes"', log=log, check=0)
    roost_cli(data, "workflow", "cancel", "w2", "--reason", "stop", log=log, check=0)
    roost_cli(data, "workflow", "terminate", "w3", log=log, check=0)
    roost_cli(data, "dlq", "redrive", "jobs", first, log=log, check=0)
    roost_cli(data, "dlq", "discard", "jobs", second, log=log, check=0)

    # The id policies of a start: a running id is refused (as the admin API does), a
    # closed one reused.
    same = roost_cli(data, "workflow", "start", "ops:waiter", "--id", "w1", check=1)
    assert "'w1' is already running" in same.stderr
    old_run = cli_json(data, "workflow", "describe", "g1")["run_id"]
    roost_cli(data, "workflow", "start", "ops:greet", '["cid"]', "--id", "g1", check=0)
    assert cli_json(data, "workflow", "describe", "g1")["run_id"] != old_run
    # admin.json left by a node that was killed: nobody answers there, the lock is free.
    (data / "admin.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "x"}))
    roost_cli(data, "workflow", "describe", "g1", check=0)

    # Stored, not run: nothing ran, and the reads show the stored state.
    assert not log.exists()
    assert cli_json(data, "workflow", "describe", "g2")["status"] == "running"
    assert cli_json(data, "queue", "stats") == {"jobs": {"depth": 1, "in_flight": 0, "dead": 0}}
    refused = roost_cli(data, "workflow", "signal", "nope", "go")
    assert refused.returncode == 1
    assert "not running" in refused.stderr
    unknown = roost_cli(data, "dlq", "discard", "jobs", "nope")
    assert unknown.returncode == 1
    assert "no dead letter" in unknown.stderr
    both = roost_cli(data, "dlq", "redrive", "jobs", first, "--all")
    assert both.returncode == 2

    import cli_ops_app  # noqa: PLC0415 - the app module lives beside the tests

    os.environ["ACTIVITY_LOG"] = str(log)
    try:
        async with roost.open_node(cli_ops_app.app, data) as node:
            assert node.incarnation == 2  # the seeding node was 1; the CLI is no node
            await until(
                lambda: all(
                    node.describe(w)["status"] != "running" for w in ("g1", "g2", "w1", "w2", "w3")
                )
            )
            assert node.describe("g1")["result"] == "hello cid"
            await until(lambda: len(node.dlq.list("jobs")) == 1)
            assert node.describe("g2")["result"] == "hello bob"
            assert node.describe("w1")["result"] == "yes"
            assert node.describe("w2")["status"] == "canceled"
            assert node.describe("w2")["result"] == "canceled: stop"
            assert node.describe("w3")["status"] == "terminated"
            [again] = node.dlq.list("jobs")
            assert (again.receipt_id, again.redrives) == (first, 1)
    finally:
        del os.environ["ACTIVITY_LOG"]
    assert sorted(log.read_text().splitlines()) == ["shout bob", "shout cid"]


def on_terminal(data_dir, *args):
    """Run ``roost ARGS`` with stderr on a pseudo-terminal; return stdout, what it showed."""
    leader, follower = pty.openpty()
    env = {**os.environ, "ROOST_DATA_DIR": str(data_dir), "TERM": "xterm", "COLUMNS": "100"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "roost", *args],
        cwd=HERE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=follower,
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=WAIT) == 0, shown
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return out, shown


async def test_export_all_shows_progress_on_a_terminal_only(tmp_path, autojump_clock):
    data, out = tmp_path / "data", tmp_path / "out"
    await seed(data)
    plain = roost_cli(data, "history", "export-all", str(out), "--status", "running", check=0)
    assert plain.stderr == ""  # piped: no bar, no control characters
    assert sorted(p.name for p in out.iterdir()) == ["w1.cbor", "w2.cbor", "w3.cbor"]
    replayed = roost_cli(
        data, "replay", "--app", APP, *(f"--history={p}" for p in sorted(out.iterdir())), check=0
    )
    assert replayed.stdout.count("ok ") == 3

    out, shown = on_terminal(data, "history", "export-all", str(tmp_path / "tty"))
    assert out.startswith("wrote 4 histories")
    assert b"exporting histories" in shown


async def test_start_checks_its_entry_against_an_app(tmp_path, autojump_clock):
    data = tmp_path / "data"
    await seed(data)
    activity = roost_cli(data, "workflow", "start", "ops:shout", "--app", APP)
    assert activity.returncode == 2
    assert "not a workflow" in activity.stderr
    unknown = roost_cli(data, "workflow", "start", "ops:nope", "--app", APP)
    assert unknown.returncode == 1
    assert [w["workflow_id"] for w in cli_json(data, "workflow", "list")] == [
        "g1",
        "w1",
        "w2",
        "w3",
    ]


class Node:
    """``roost run`` in a subprocess, its stderr collected by a thread."""

    def __init__(self, data_dir, *extra, stdout=False):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "roost", "run", APP, "--data-dir", str(data_dir), *extra],
            cwd=HERE,
            stderr=subprocess.PIPE,
            # stdout=True: a line or two (the console's URL), read at stop.
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            text=True,
        )
        self.out = ""
        self.lines = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if not self.ready.wait(WAIT):
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"roost run did not start: {self.log}")

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line)
            if "stop it with Ctrl-C or SIGTERM" in line:
                self.ready.set()
        self.ready.set()  # it exited: the caller sees no ready line

    @property
    def log(self):
        return "".join(self.lines)

    def stop(self, signum=signal.SIGTERM):
        self.proc.send_signal(signum)
        code = self.proc.wait(timeout=WAIT)
        self.reader.join(WAIT)
        self.proc.stderr.close()
        if self.proc.stdout is not None:
            self.out = self.proc.stdout.read()
            self.proc.stdout.close()
        assert code == 0, self.log
        return self.log


async def test_reads_beside_a_running_node_and_changes_need_its_admin_server(
    tmp_path, autojump_clock
):
    data = tmp_path / "data"
    await seed(data)
    roost_cli(data, "workflow", "start", "ops:greet", '["dee"]', "--id", "g4", check=0)
    node = Node(data)
    try:
        # The running node runs the offline start; the CLI waits for it in another process.
        waited = cli_json(data, "workflow", "result", "g4", "--wait")
        assert waited == {"status": "completed", "result": "hello dee", "error": None}
        listed = cli_json(data, "workflow", "list", "--status", "running")
        assert sorted(w["workflow_id"] for w in listed) == ["w1", "w2", "w3"]
        assert cli_json(data, "dlq", "list", "jobs")[0]["payload"] == 1
        refused = roost_cli(data, "workflow", "signal", "w1", "go")
        assert refused.returncode == 1
        assert "--admin" in refused.stderr
        assert f"OS pid {node.proc.pid}" in refused.stderr
        second = roost_cli(data, "run", APP)
        assert second.returncode == 1
        assert f"in use by another roost process (OS pid {node.proc.pid}" in second.stderr
    finally:
        log = node.stop()
    assert "SIGTERM received: shutting down" in log
    assert "node stopped" in log
    # A clean stop released the directory: a change applies to the store again.
    roost_cli(data, "workflow", "signal", "w1", "go", '"later"', check=0)


def test_run_serves_http_and_stops_cleanly_on_sigint(tmp_path):
    node = Node(tmp_path / "data", "--http", "0")
    log = node.stop(signal.SIGINT)
    assert "runs app 'ops'" in log
    assert "HTTP triggers at http://127.0.0.1:" in log
    assert "SIGINT received: shutting down" in log
    assert "Traceback" not in log
    # Closed cleanly: the directory is free, and the next node is incarnation 2.
    assert "(incarnation 2)" in Node(tmp_path / "data").stop()


async def test_changes_go_through_the_admin_api_of_a_running_node(tmp_path, autojump_clock):
    data = tmp_path / "data"
    await seed(data)
    node = Node(data, "--admin", "127.0.0.1:0", stdout=True)
    try:
        assert json.loads((data / "admin.json").read_text())["url"].startswith("http://")
        roost_cli(data, "workflow", "signal", "w1", "go", '"via admin"', check=0)
        waited = cli_json(data, "workflow", "result", "w1", "--wait")
        assert waited == {"status": "completed", "result": "via admin", "error": None}
        started = cli_json(data, "workflow", "start", "ops:greet", '["cy"]', "--id", "g3")
        assert started == {"workflow_id": "g3"}
        assert cli_json(data, "workflow", "result", "g3", "--wait")["result"] == "hello cy"
        roost_cli(data, "workflow", "cancel", "w2", "--reason", "admin", check=0)
        # A workflow that closed unsuccessfully: its result, and exit code 1.
        canceled = roost_cli(data, "workflow", "result", "w2", "--wait", "--json", check=1)
        assert json.loads(canceled.stdout)["result"] == "canceled: admin"
        roost_cli(data, "workflow", "terminate", "w3", check=0)
        terminated = roost_cli(data, "workflow", "result", "w3", "--wait", "--json", check=1)
        assert json.loads(terminated.stdout)["status"] == "terminated"
        receipt = cli_json(data, "dlq", "list", "jobs")[1]["receipt_id"]
        roost_cli(data, "dlq", "discard", "jobs", receipt, check=0)
        assert [d["payload"] for d in cli_json(data, "dlq", "list", "jobs")] == [1]
        missing = roost_cli(data, "workflow", "signal", "nope", "go")
        assert missing.returncode == 1
    finally:
        node.stop()
    assert not (data / "admin.json").exists()
    # The console's URL, printed once (without the token); every change with its actor.
    url = node.out.strip().splitlines()
    assert len(url) == 1 and url[0].startswith("console: http://127.0.0.1:"), node.out
    token = (data / "admin.token").read_text().strip()
    assert token not in node.out
    changes = [json.loads(line) for line in (data / "audit.log").read_text().splitlines()]
    by_api = [c for c in changes if c["via"] == "admin API"]
    assert [c["action"] for c in by_api][:2] == [
        "POST /api/workflows/w1/signal",
        "POST /api/workflows",
    ]
    assert {c["actor"] for c in by_api} == {changes[0]["actor"]}
    assert changes[0]["actor"].startswith("operator:")
