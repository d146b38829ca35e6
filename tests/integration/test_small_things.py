"""The small things of the first hour: ``roost.__version__``, ``roost replay --json``, one
name per cron trigger in ``roost cron list`` (store or --app), ``open_test_node(cron=False)``.
"""

import datetime as dt
import importlib
import importlib.metadata
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import roost
from roost import process
from roost.cli import main
from roost.storage import Codec, key, open_lmdb_store
from roost.testing import Replayer, open_test_node, save_history

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

FIRED: list[roost.CronTick] = []

app = roost.App("small")


@app.activity
async def minutely(tick: roost.CronTick) -> None:
    FIRED.append(tick)


app.cron("* * * * *", minutely)


def cli(*args: str, env: dict | None = None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_version_is_the_package_metadata():
    assert roost.__version__ == importlib.metadata.version("roost")
    assert roost.__version__ in cli("--version").output


async def test_replay_json_reports_each_history(tmp_path, monkeypatch):
    monkeypatch.delenv("ROOST_CLI_CHANGED", raising=False)
    sys.modules.pop("cli_app", None)  # the first build, whatever an earlier test imported
    cli_app = importlib.import_module("cli_app")
    async with roost.open_node(cli_app.app) as node:
        await process.with_options(id="flow-1").exec("cli:flow")
        path = save_history(node.history("flow-1"), tmp_path / "flow-1.cbor")
    monkeypatch.chdir(HERE)
    sys.modules.pop("cli_app", None)
    ok = cli("replay", "--history", str(path), "--app", "cli_app:app", "--json")
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output) == [{"history": str(path), "outcome": "result", "result": "b"}]
    sys.modules.pop("cli_app", None)  # load the changed build
    changed = cli(
        "replay", "--history", str(path), "--app", "cli_app:app", "--json",
        env={"ROOST_CLI_CHANGED": "1"},
    )  # fmt: skip
    sys.modules.pop("cli_app", None)
    assert changed.exit_code == 1
    (report,) = json.loads(changed.stdout)
    assert report["outcome"] == "diverged"
    assert report["issued"] == "#1 schedule activity 'cli:audit'"
    assert report["recorded"] == "#1 schedule activity 'cli:step'"
    assert "cli_app.py" in report["location"]


async def test_cron_list_names_a_trigger_alike_from_the_store_and_with_app(
    tmp_path, autojump_clock
):
    data = tmp_path / "data"
    async with roost.open_node(app, data):
        await roost.sleep(61)  # it fires once: the store holds its last fire time
    assert FIRED
    from_store = json.loads(cli("cron", "list", "--data-dir", str(data), "--json").output)
    with_app = json.loads(
        cli("cron", "list", "--app", f"{__name__}:app", "--data-dir", str(data), "--json").output
    )
    assert [c["entry"] for c in from_store] == ["small:minutely"]
    assert [(c["entry"], c["expression"]) for c in with_app] == [("small:minutely", "* * * * *")]


async def test_a_stored_trigger_named_by_its_function_is_renamed_to_its_entry_id(
    tmp_path, autojump_clock
):
    data = tmp_path / "data"
    data.mkdir()
    store = open_lmdb_store(data)
    last = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    # As an older roost named it: by the function's name.
    store.transact_sync(
        lambda txn: txn.put("cron", key("minutely @ * * * * *"), Codec().encode(last))
    )
    store.close()
    listed = cli("cron", "list", "--app", f"{__name__}:app", "--data-dir", str(data), "--json")
    assert [c["entry"] for c in json.loads(listed.output)] == ["small:minutely"]
    FIRED.clear()
    async with roost.open_node(app, data):
        await roost.sleep(61)
    from_store = json.loads(cli("cron", "list", "--data-dir", str(data), "--json").output)
    assert [c["entry"] for c in from_store] == ["small:minutely"]  # one row, by its id


async def test_a_test_node_with_cron_off_fires_no_trigger():
    FIRED.clear()
    async with open_test_node(app, cron=False):
        await roost.sleep("1h")
    assert FIRED == []
    async with open_test_node(app):
        await roost.sleep("1h")
    assert len(FIRED) >= 59


shop = roost.App("app")


@shop.activity
async def charge(order: dict) -> str:
    return order["id"]


@shop.activity
async def ship(order: dict) -> str:
    return order["id"]


@shop.workflow
async def order_workflow(order: dict) -> str:
    step = ship if CHANGED else charge  # the "new build" ships first
    return f"shipped {await roost.funcs.call(step, order)}"


CHANGED = False


def normalized(text: str) -> str:
    return re.sub(r" at \S+:\d+,", " at LOCATION,", " ".join(text.split()))


async def test_docs_quote_the_divergence_message_as_it_is(autojump_clock, monkeypatch):
    async with roost.open_node(shop) as node:
        await process.with_options(id="order-1").exec(order_workflow, {"id": "o-1"})
        history = node.history("order-1")
    monkeypatch.setattr(sys.modules[__name__], "CHANGED", True)
    with pytest.raises(roost.NondeterminismError) as caught:
        Replayer(shop).replay(history)
    docs = (HERE.parents[1] / "docs" / "testing.md").read_text()
    quoted = docs.split("workflow 'order-1' diverged", 1)[1].split("```", 1)[0]
    assert normalized("workflow 'order-1' diverged" + quoted) == normalized(caught.value.message)


@pytest.mark.slow
def test_the_node_the_demo_tells_you_to_run_serves_the_app(tmp_path):
    """``make demo`` ends with ``roost run examples.order_fulfillment:app ...``: it serves."""
    root = HERE.parents[1]
    node = subprocess.Popen(
        [
            sys.executable, "-m", "roost", "run", "examples.order_fulfillment:app",
            "--data-dir", str(tmp_path / "shop-data"), "--http", "0", "--admin", "0",
        ],
        cwd=root,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    lines = []
    for line in node.stderr:
        lines.append(line)
        if "stop it with Ctrl-C or SIGTERM" in line:
            node.send_signal(signal.SIGTERM)
    node.stderr.close()
    assert node.wait(60) == 0, "".join(lines)
    log = "".join(lines)
    assert "runs app 'shop'" in log and "HTTP triggers at http://127.0.0.1:" in log
    assert "admin API at http://127.0.0.1:" in log
