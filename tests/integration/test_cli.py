"""The ``roost`` command: replay recorded histories against a build."""

import importlib
import sys
from pathlib import Path

from click.testing import CliRunner

import roost
from roost import process
from roost.cli import main
from roost.testing import save_history

HERE = Path(__file__).parent


async def record(tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        cli_app = importlib.import_module("cli_app")
        async with roost.open_node(cli_app.app) as node:
            await process.with_options(id="flow-1").exec("cli:flow")
            return save_history(node.history("flow-1"), tmp_path / "flow-1.cbor")
    finally:
        sys.path.remove(str(HERE))


def run_cli(*args, env=None):
    sys.modules.pop("cli_app", None)
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


async def test_replay_ok_and_diverged(tmp_path, monkeypatch):
    path = await record(tmp_path)
    monkeypatch.chdir(HERE)
    ok = run_cli("replay", "--history", str(path), "--app", "cli_app:app")
    assert ok.exit_code == 0, ok.output
    assert "replays to 'b'" in ok.output
    changed = run_cli(
        "replay", "--history", str(path), "--app", "cli_app:app", env={"ROOST_CLI_CHANGED": "1"}
    )
    assert changed.exit_code == 1
    assert "DIVERGED" in changed.output
    assert "issued: #1 schedule activity 'cli:audit'" in changed.output
    assert "recorded: #1 schedule activity 'cli:step'" in changed.output
    assert "cli_app.py" in changed.output  # the code location of the divergence


def test_bad_app_reference(tmp_path, monkeypatch):
    monkeypatch.chdir(HERE)
    (tmp_path / "h.cbor").write_bytes(b"")
    result = CliRunner().invoke(
        main, ["replay", "--history", str(tmp_path / "h.cbor"), "--app", "nope"]
    )
    assert result.exit_code == 2
    assert "module:attribute" in result.output
