"""A start whose arguments do not fit the entry's signature is refused at the door.

From code (process.spawn / exec of a workflow or a process, funcs.call outside a
workflow), the admin API and the command line: ``Invalid``, naming the signature, and
nothing stored. A run that got in anyway (a start stored offline with no app to check it)
is marked in ``workflow list`` while its task keeps failing, and a cancel closes it.
"""

import json
import sys
from pathlib import Path

import httpx
import pytest
import trio
from click.testing import CliRunner

import roost
from roost import ErrorKind, funcs, process
from roost.cli import main

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import door_app  # noqa: E402

SIGNATURE = "door:order (order_id: str, cents: int) -> str"


def cli(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def refused(caught: pytest.ExceptionInfo) -> roost.Error:
    error = caught.value
    assert error.kind is ErrorKind.INVALID
    assert "nothing was started" in error.message
    return error


async def test_code_starting_a_workflow_with_the_wrong_arity_is_refused(autojump_clock):
    async with roost.open_node(door_app.app) as node:
        with pytest.raises(roost.Error) as spawned:
            await process.with_options(id="o-6").spawn("door:order", "o-6")
        error = refused(spawned)
        assert SIGNATURE in error.message
        assert "it takes 2 positional arguments, got 1" in error.message
        assert error.details["signature"] == "(order_id: str, cents: int) -> str"
        with pytest.raises(roost.Error) as executed:
            await process.exec(door_app.order, "o-7", 1, 2)
        assert "got 3" in refused(executed).message
        assert node.list_workflows() == []  # nothing stored
        assert await process.exec(door_app.order, "o-8", 5) == "o-8: 5"


async def test_spawning_a_process_or_calling_an_activity_with_bad_arguments_is_refused(
    autojump_clock,
):
    async with roost.open_node(door_app.app) as node:
        before = node.process_count()
        with pytest.raises(roost.Error) as none:
            await process.spawn(door_app.worker)
        assert "door:worker (job: dict) -> None" in refused(none).message
        with pytest.raises(roost.Error) as call:
            await funcs.call(door_app.charge, "o-1")
        assert "door:charge (order_id: str, cents: int) -> str" in refused(call).message
        with pytest.raises(roost.Error) as started:
            funcs.start(door_app.charge, "o-1", 1, 2)
        refused(started)
        assert node.process_count() == before
        assert await funcs.call(door_app.charge, "o-1", 3) == "o-1: 3"


async def test_wippys_host_argument_form_is_named(autojump_clock):
    async with roost.open_node(door_app.app):
        with pytest.raises(roost.Error) as caught:
            await process.spawn(door_app.worker, "door:workers", {"n": 1})
        message = refused(caught).message
        assert "'door:workers' is a host" in message
        assert "process.spawn(entry, input, host='door:workers')" in message
        pid = await process.spawn(door_app.worker, {"n": 1}, host="door:workers")
        assert pid.host == "door:workers"


async def test_the_admin_api_refuses_a_start_that_does_not_fit(tmp_path):
    async with roost.open_node(door_app.app, tmp_path, admin="127.0.0.1:0") as node:
        token = json.loads((tmp_path / "admin.json").read_text())["token"]
        async with httpx.AsyncClient(
            base_url=node.admin_url, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            response = await client.post(
                "/api/workflows", json={"entry": "door:order", "args": ["o-6"], "id": "o-6"}
            )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["kind"] == "Invalid" and SIGNATURE in error["message"]
        assert node.list_workflows() == []


def test_the_cli_refuses_a_start_that_does_not_fit_its_app_and_stores_nothing(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(HERE)
    data = tmp_path / "data"
    done = cli(
        "workflow", "start", "door:order", '["o-6"]', "--id", "o-6", "--app", "door_app:app",
        "--data-dir", str(data),
    )  # fmt: skip
    assert done.exit_code == 1, done.output
    assert SIGNATURE in done.output
    assert not data.exists()  # nothing stored, not even an empty store


def store_bad_start(data: Path, workflow_id: str) -> None:
    """A start of door:order with one argument of two, stored with nothing to check it."""
    stored = cli(
        "workflow", "start", "door:order", '["x"]', "--id", workflow_id, "--data-dir", str(data)
    )
    assert stored.exit_code == 0, stored.output


async def until_task_failed(node: roost.NodeHandle, workflow_id: str, attempts: int) -> None:
    while True:
        failure = node.describe(workflow_id)["task_failure"]
        if failure is not None and failure.details["attempt"] >= attempts:
            return
        await trio.sleep(1)


async def test_a_run_whose_task_keeps_failing_is_marked_and_cancel_closes_it(
    tmp_path, monkeypatch, autojump_clock
):
    monkeypatch.chdir(HERE)
    data = tmp_path / "data"
    store_bad_start(data, "o-6")
    async with roost.open_node(door_app.app, data) as node:
        await until_task_failed(node, "o-6", attempts=3)
    listed = cli("workflow", "list", "--data-dir", str(data))
    assert listed.exit_code == 0, listed.output
    assert "running (task failing, attempt 3" in listed.output
    async with roost.open_node(door_app.app, data) as node:
        await until_task_failed(node, "o-6", attempts=4)
        process.cancel(roost.Pid.parse("{door:workflows|o-6}"), "wrong input")
        await trio.testing.wait_all_tasks_blocked()
        described = node.describe("o-6")
    assert described["status"] == "canceled"
    assert described["error"].kind is ErrorKind.CANCELED
    assert "before its first activation completed: wrong input" in described["error"].message
    assert "running" not in cli("workflow", "list", "--data-dir", str(data)).output


async def test_a_cancel_stored_offline_closes_a_run_whose_first_activation_fails(
    tmp_path, monkeypatch, autojump_clock
):
    monkeypatch.chdir(HERE)
    data = tmp_path / "data"
    store_bad_start(data, "o-9")
    canceled = cli("workflow", "cancel", "o-9", "--reason", "typo", "--data-dir", str(data))
    assert canceled.exit_code == 0, canceled.output
    async with roost.open_node(door_app.app, data) as node:
        await trio.testing.wait_all_tasks_blocked()
        described = node.describe("o-9")
    # Its first activation failed with the cancel among its events: closed, not retried.
    assert described["status"] == "canceled"
    assert "typo" in described["error"].message


async def test_a_cancel_of_a_run_that_has_activated_is_delivered_to_its_code(autojump_clock):
    async with roost.open_node(door_app.app) as node:
        pid = await process.with_options(id="w-1").spawn(door_app.waiter)
        await trio.testing.wait_all_tasks_blocked()
        process.cancel(pid, "stop")
        await trio.testing.wait_all_tasks_blocked()
        # Its code runs and decides: waiting for "go", it does not stop on a cancel.
        assert node.describe("w-1")["status"] == "running"
        await process.send(pid, "go", None)
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("w-1")["status"] == "canceled"  # returned after a cancel


@pytest.mark.slow
async def test_the_cli_beside_a_node_with_an_admin_server_gets_the_refusal(tmp_path):
    data = tmp_path / "data"
    async with roost.open_node(door_app.app, data, admin="127.0.0.1:0") as node:
        # Another OS process, as a user's shell is: the node's own one may not open its dir.
        done = await trio.run_process(
            [sys.executable, "-m", "roost", "workflow", "start", "door:order", '["o-6"]',
             "--id", "o-6", "--data-dir", str(data)],
            cwd=HERE, capture_stdout=True, capture_stderr=True, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert SIGNATURE in done.stderr.decode()
        assert node.list_workflows() == []
