"""The ``roost`` command line refuses what the runtime and the admin API refuse, the same way.

Real subprocesses against a real data directory: bad arguments exit 2 and store nothing; a
start under the id of a running workflow exits 1 with or without a node; a stale
``admin.json`` never decides where a change (or the token) goes, the directory's lock does;
tables show bounded previews of big values, ``--json`` the full values.
"""

import http.server
import json
import signal
import threading
from typing import ClassVar

import pytest
from test_cli_ops import APP, Node, cli_json, roost_cli, seed

import roost
from roost import process

pytestmark = pytest.mark.slow


async def test_bad_arguments_exit_2_and_store_nothing(tmp_path, autojump_clock):
    fresh = tmp_path / "fresh"
    deep = "[" * 5000 + "]" * 5000
    nested = roost_cli(fresh, "workflow", "start", "ops:greet", deep, check=2)
    assert "nested too deeply" in nested.stderr
    assert "Traceback" not in nested.stderr
    for entry in ("op{s}:x", "ops:x}", "ops:a:b", "o|ps:x"):
        braces = roost_cli(fresh, "workflow", "start", entry, check=2)
        assert "must not contain" in braces.stderr, entry
    bad_id = roost_cli(fresh, "workflow", "start", "ops:greet", '["a"]', "--id", "a{b}", check=2)
    assert "must not contain" in bad_id.stderr
    assert not fresh.exists()  # nothing stored, not even an empty store

    data = tmp_path / "data"
    await seed(data)
    deep_signal = roost_cli(data, "workflow", "signal", "w1", "go", deep, check=2)
    assert "nested too deeply" in deep_signal.stderr
    bogus = roost_cli(data, "workflow", "list", "--status", "bogus", check=2)
    assert "status must be one of" in bogus.stderr and "quarantined" in bogus.stderr
    assert (
        roost_cli(data, "history", "export-all", str(tmp_path / "x"), "-s", "nope").returncode == 2
    )
    assert [w["workflow_id"] for w in cli_json(data, "workflow", "list", "-s", "completed")] == [
        "g1"
    ]

    # dlq list: a queue the store has no row of is unknown (the API's 404), unless --app
    # declares it.
    unknown = roost_cli(data, "dlq", "list", "nosuch", check=1)
    assert "queue 'nosuch' is not declared" in unknown.stderr
    roost_cli(data, "dlq", "list", "default", check=1)
    assert cli_json(data, "dlq", "list", "default", "--app", APP) == []
    assert "nor declared by the app" in roost_cli(data, "dlq", "list", "no", "--app", APP).stderr
    assert len(cli_json(data, "dlq", "list", "jobs")) == 2


async def test_an_explicit_running_id_is_refused_with_or_without_a_node(tmp_path, autojump_clock):
    data = tmp_path / "data"
    await seed(data)
    offline = roost_cli(data, "workflow", "start", "ops:waiter", "--id", "w1", check=1)
    assert "[AlreadyExists] workflow 'w1' is already running" in offline.stderr
    assert "roost workflow signal|cancel|terminate w1" in offline.stderr
    node = Node(data, "--admin", "127.0.0.1:0")
    try:
        online = roost_cli(data, "workflow", "start", "ops:waiter", "--id", "w1", check=1)
        assert online.stderr == offline.stderr
        fresh = cli_json(data, "workflow", "start", "ops:waiter")["workflow_id"]
        assert fresh.startswith("ops-")
    finally:
        node.stop()
    again = cli_json(data, "workflow", "start", "ops:waiter")["workflow_id"]
    assert again.startswith("ops-") and again != fresh
    running = {w["workflow_id"] for w in cli_json(data, "workflow", "list", "-s", "running")}
    assert running == {"w1", "w2", "w3", fresh, again}


class _Impostor(http.server.BaseHTTPRequestHandler):
    """Another program on a port a killed node's admin server had: it records what it gets."""

    seen: ClassVar[list[str]] = []

    def _answer(self):
        self.seen.append(f"{self.command} {self.path} {self.headers.get('Authorization')}")
        body = b'{"pid": 1, "data_dir": "/elsewhere"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self._answer()

    def log_message(self, *args):
        pass


def impostor(port):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Impostor)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


async def test_a_stale_admin_json_never_decides_where_a_change_goes(tmp_path, autojump_clock):
    data = tmp_path / "data"
    await seed(data)
    killed = Node(data, "--admin", "127.0.0.1:0")
    info = json.loads((data / "admin.json").read_text())
    assert info["pid"] == killed.proc.pid
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait()
    killed.proc.stderr.close()
    stale = (data / "admin.json").read_text()
    port = int(info["url"].rsplit(":", 1)[1])
    _Impostor.seen = []
    server = impostor(port)
    try:
        # The lock is free: no node runs, whatever admin.json says and whoever answers there.
        roost_cli(data, "workflow", "signal", "w1", "go", '"offline"', check=0)
        assert not (data / "admin.json").exists()  # the killed node's file is deleted
        assert _Impostor.seen == []  # the token went nowhere

        # A node opened without --admin removes a killed node's admin.json at once.
        (data / "admin.json").write_text(stale)
        node = Node(data)
        try:
            assert not (data / "admin.json").exists()
            # An admin.json that names another process than the lock's holder is no node's.
            (data / "admin.json").write_text(stale)
            refused = roost_cli(data, "workflow", "signal", "w2", "go", check=1)
            assert f"OS pid {node.proc.pid}" in refused.stderr and "--admin" in refused.stderr
            assert _Impostor.seen == []
            # Naming the holder is not enough: the server must answer for that process.
            forged = {**info, "pid": node.proc.pid}
            (data / "admin.json").write_text(json.dumps(forged))
            roost_cli(data, "workflow", "signal", "w2", "go", check=1)
            assert [seen.split()[:2] for seen in _Impostor.seen] == [["GET", "/api/node"]]
        finally:
            node.stop()
    finally:
        server.shutdown()
        server.server_close()
    assert cli_json(data, "workflow", "describe", "w1")["result"] == "offline"


async def test_tables_preview_big_values_and_json_prints_them_in_full(tmp_path, autojump_clock):
    data, size = tmp_path / "data", 4 * 1024 * 1024
    import cli_ops_app  # noqa: PLC0415 - the app module lives beside the tests

    async with roost.open_node(cli_ops_app.app, data):
        await process.with_options(id="big").exec("ops:greet", "x" * size)
    for command in ("show", "describe"):
        shown = roost_cli(data, "workflow", command, "big", check=0).stdout
        assert len(shown) < 20_000, (command, len(shown))
        assert "xxxx…" in shown, command
    full = cli_json(data, "workflow", "show", "big")
    [started] = [item for item in full if item["type"] == "Started"]
    assert started["args"] == ["x" * size]
    assert cli_json(data, "workflow", "describe", "big")["result"] == "hello " + "x" * size
