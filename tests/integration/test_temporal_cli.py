"""``roost run --temporal`` and ``roost workflow ... --temporal`` against a real dev server.

One ``roost run temporal_cli_app:app --temporal HOST:PORT --name NODE`` subprocess is the
cluster's worker; the commands run in this process (click's runner), as a second machine
would run them: they talk to the cluster only, never to the node.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from temporal_server import dev_server  # noqa: F401 - the fixture `temporal_server`

from roost.cli import main

pytestmark = pytest.mark.timeout(120)

HERE = Path(__file__).parent
APP = "temporal_cli_app:app"
WAIT = 60.0  # bound on the node's start (a loaded box is slow, never this slow)


def _id(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class RunningNode:
    """A ``roost run --temporal`` subprocess, ready once it logged that it runs the app."""

    def __init__(self, server, data_dir, name):
        command = [sys.executable, "-m", "roost", "run", APP, "--temporal", server]
        command += ["--name", name, "--data-dir", str(data_dir)]
        self.process = subprocess.Popen(
            command, cwd=HERE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.lines = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stderr:
            self.lines.append(line)
            if "runs app 'tcli'" in line:
                self.ready.set()
        self.ready.set()  # ended: whoever waits sees why

    def wait_ready(self):
        assert self.ready.wait(WAIT), "".join(self.lines)
        assert self.process.poll() is None, "".join(self.lines)

    def stop(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        code = self.process.wait(WAIT)
        self.reader.join(WAIT)
        self.process.stderr.close()
        return code


@pytest.fixture
def cluster_node(temporal_server, tmp_path):
    node = RunningNode(temporal_server, tmp_path / "data", f"cli-{uuid.uuid4().hex[:8]}")
    try:
        node.wait_ready()
        yield node
    finally:
        code = node.stop()
    assert code == 0, "".join(node.lines)
    assert any("node stopped" in line for line in node.lines)


def cli(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env, catch_exceptions=False)


def ok_json(*args):
    done = cli(*args, "--json")
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def test_the_workflow_commands_steer_workflows_on_the_cluster(
    temporal_server, cluster_node, tmp_path, monkeypatch
):
    monkeypatch.chdir(HERE)
    at = ("--temporal", temporal_server)
    paid, waiting, polite, blunt = _id("pay"), _id("wait"), _id("polite"), _id("blunt")

    assert ok_json("workflow", "start", "tcli:pay", "[5]", "--id", paid, *at) == {
        "workflow_id": paid
    }
    assert ok_json("workflow", "result", paid, "--wait", *at) == {
        "status": "completed",
        "result": {"charged": 5},
        "error": None,
    }
    described = ok_json("workflow", "describe", paid, *at)
    assert described["workflow_type"] == "tcli:pay" and described["task_queue"] == "tcli"
    assert described["search_attributes"] == {"Shop": "tcli", "Priority": 5}
    assert described["memo"] == {"paid": 5}

    started = cli("workflow", "start", "tcli:waiter", "--id", waiting, *at)
    assert started.exit_code == 0 and started.output.strip() == waiting
    again = cli("workflow", "start", "tcli:waiter", "--id", waiting, *at)
    assert again.exit_code == 1
    assert f"workflow {waiting!r} is already running" in again.output
    running = ok_json("workflow", "result", waiting, *at)
    assert running == {"status": "running", "result": None, "error": None}
    signalled = cli("workflow", "signal", waiting, "go", '{"n": 1}', *at)
    assert signalled.exit_code == 0, signalled.output
    assert ok_json("workflow", "result", waiting, "--wait", *at)["result"] == {"go": {"n": 1}}

    for wid in (polite, blunt):
        assert cli("workflow", "start", "tcli:cancellable", "--id", wid, *at).exit_code == 0
    assert cli("workflow", "cancel", polite, "--reason", "enough", *at).exit_code == 0
    assert cli("workflow", "terminate", blunt, *at).exit_code == 0
    canceled = cli("workflow", "result", polite, "--wait", "--json", *at)
    assert canceled.exit_code == 1  # it returned after a cancel: not completed
    assert json.loads(canceled.output) == {
        "status": "canceled",
        "result": "stopped: enough",
        "error": None,
    }
    terminated = cli("workflow", "result", blunt, "--wait", "--json", *at)
    assert terminated.exit_code == 1  # it closed unsuccessfully
    assert json.loads(terminated.output)["status"] == "terminated"
    failed = ok_json("workflow", "start", "tcli:failing", *at)["workflow_id"]
    broken = cli("workflow", "result", failed, "--wait", "--json", *at)
    assert broken.exit_code == 1
    assert json.loads(broken.output)["error"]["kind"] == "Conflict"

    events = ok_json("workflow", "show", paid, *at)
    scheduled = [
        e["activityTaskScheduledEventAttributes"]["activityType"]["name"]
        for e in events
        if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED"
    ]
    assert scheduled == ["tcli:charge"]
    table = cli("workflow", "show", paid, *at, env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "ACTIVITY_TASK_SCHEDULED" in table.output

    # Temporal's visibility store is eventually consistent and tells nobody when it has
    # caught up: asking again (bounded) is the only way to see the search attributes listed.
    query = f"Shop = 'tcli' AND Priority = 5 AND WorkflowId = '{paid}'"
    deadline = time.monotonic() + 20
    while not (listed := ok_json("workflow", "list", "--query", query, *at)):
        assert time.monotonic() < deadline, "the run never showed up in the list"
        time.sleep(0.1)
    assert [w["workflow_id"] for w in listed] == [paid]
    closed = ok_json(
        "workflow", "list", "--query", f"WorkflowId = '{paid}'", "--status", "running", *at
    )
    assert closed == []

    # The run's Temporal history, exported, replays against the same code and diverges
    # from a build that calls another activity first.
    exported = tmp_path / "pay.json"
    done = cli("history", "export", paid, exported, *at)
    assert done.exit_code == 0 and "Temporal events" in done.output
    replayed = cli("replay", "--history", exported, "--app", APP)
    assert replayed.exit_code == 0, replayed.output
    assert f"ok {exported}: replays" in replayed.output
    changed = cli("replay", "--history", exported, "--app", APP, env={"ROOST_TCLI_CHANGED": "1"})
    assert changed.exit_code == 1
    assert f"DIVERGED {exported}" in changed.output
    assert "Nondeterminism" in changed.output


def test_a_second_roost_run_with_a_taken_name_and_bad_cluster_arguments_fail(
    temporal_server, cluster_node, tmp_path, monkeypatch
):
    monkeypatch.chdir(HERE)
    name = next(arg for arg in cluster_node.process.args if arg.startswith("cli-"))
    command = [sys.executable, "-m", "roost", "run", APP, "--temporal", temporal_server]
    second = subprocess.run(
        [*command, "--name", name, "--data-dir", str(tmp_path / "other")],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert second.returncode == 1, second.stderr
    assert f"[InvalidState] a live node named {name!r} already serves" in second.stderr

    nameless = cli("run", APP, "--temporal", temporal_server)
    assert nameless.exit_code == 2 and "--temporal needs --name" in nameless.output
    missing = cli("workflow", "describe", _id("nobody"), "--temporal", temporal_server)
    assert missing.exit_code == 1 and "[NotFound]" in missing.output
    namespace = cli("workflow", "list", "--temporal", temporal_server, "--namespace", "nope")
    assert namespace.exit_code == 1 and "has no namespace 'nope'" in namespace.output
    bad_status = cli("workflow", "list", "--status", "asleep", "--temporal", temporal_server)
    assert bad_status.exit_code == 2 and "unknown status 'asleep'" in bad_status.output
    own_topic = cli("workflow", "signal", "x", "@roost.cancel", "--temporal", temporal_server)
    assert own_topic.exit_code == 2 and "roost's own" in own_topic.output


@pytest.mark.slow
def test_a_node_killed_mid_activity_leaves_its_workflows_to_the_other_node(
    temporal_server, tmp_path, monkeypatch
):
    monkeypatch.chdir(HERE)
    effects = tmp_path / "effects.jsonl"
    monkeypatch.setenv("TCLI_EFFECTS", str(effects))  # the nodes inherit it
    nodes = [
        RunningNode(temporal_server, tmp_path / f"d{n}", f"kill-{n}-{uuid.uuid4().hex[:6]}")
        for n in range(2)
    ]
    try:
        for node in nodes:
            node.wait_ready()
        orders = [_id("order") for _ in range(6)]
        at = ("--temporal", temporal_server)
        for order in orders:
            done = cli(
                "workflow", "start", "tcli:effectful", json.dumps([order]), "--id", order, *at
            )
            assert done.exit_code == 0, done.output

        def begun():
            if not effects.exists():
                return []
            return [json.loads(line) for line in effects.read_text().splitlines()]

        deadline = time.monotonic() + WAIT
        while len({line["order"] for line in begun()}) < len(orders):  # every one mid-activity
            assert time.monotonic() < deadline, begun()
            time.sleep(0.05)
        busy = {line["pid"] for line in begun()}
        victim = next(node for node in nodes if node.process.pid in busy)
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(WAIT)
        Path(f"{effects}.release").touch()
        for order in orders:
            finished = ok_json("workflow", "result", order, "--wait", *at)
            assert finished["status"] == "completed", finished
    finally:
        codes = [node.stop() for node in nodes]
    survivor = next(node for node in nodes if node is not victim)
    assert codes[nodes.index(survivor)] == 0, "".join(survivor.lines)
    applied = [line for line in begun() if line["event"] == "effect"]
    assert sorted(line["order"] for line in applied) == sorted(orders)  # each applied once
    assert all(line["pid"] == survivor.process.pid for line in applied)
    keys = {}
    for line in begun():
        keys.setdefault(line["order"], set()).add(line["key"])
    assert all(len(found) == 1 for found in keys.values())  # one idempotency key per effect
    retried = {line["order"] for line in begun() if line["pid"] == victim.process.pid}
    assert retried and all(
        any(line["order"] == order and line["attempt"] > 1 for line in applied) for order in retried
    )  # what the dead node had begun, the survivor redid as a later attempt
