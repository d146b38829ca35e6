"""A call with bad input gets ``Invalid`` at the call site and stores nothing (public API)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

import roost
from roost import funcs, process, workflow
from roost._duration import LATEST, MAX_DURATION
from roost.storage._codec import MAX_DEPTH
from roost.testing import Replayer, load_history, open_test_node, save_history
from roost.testing.strategies import nested
from roost.workflow._options import MAX_ID_BYTES

app = roost.App("bad")
attempts: list[int] = []


@app.workflow
async def echo(value: Any) -> Any:
    return value


@app.workflow
async def sleeper(seconds: Any) -> str:
    try:
        await roost.sleep(seconds)
    except roost.Error as err:
        return f"{err.kind.value}: {err.message}"
    return "slept"


@app.workflow
async def sleeps_to_the_end_of_time(times: int) -> int:
    for _ in range(times):
        await roost.sleep(MAX_DURATION)
    return roost.now().year


@app.workflow
async def chain(depth: int) -> str:
    """Start a child without an id (so ``<id>.<n>``) ``depth`` times down."""
    if depth == 0:
        return f"bottom at {len(workflow.info().workflow_id)} bytes"
    try:
        return str(await workflow.exec("bad:chain", depth - 1))
    except roost.Error as err:
        return f"{err.kind.value}: {err.message}"


@app.activity
def refuses() -> None:
    attempts.append(1)
    raise roost.Error("no", kind=roost.ErrorKind.INVALID)


@app.workflow
async def with_policy(policy: dict[str, Any]) -> str:
    try:
        await funcs.new().with_options(retry_policy=policy).call("bad:refuses")
    except roost.Error as err:
        return f"{err.kind.value} after {len(attempts)} attempt(s)"
    return "done"


async def refused(call: Any) -> roost.Error:
    with pytest.raises(roost.Error) as info:
        await call
    assert info.value.kind is roost.ErrorKind.INVALID, info.value
    return info.value


# --- workflow ids ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["a{b}", "}", "x|y", "\ud800", "é" * MAX_ID_BYTES])
async def test_a_workflow_id_that_breaks_its_pid_or_keys_is_refused_and_nothing_stored(
    autojump_clock: Any, bad: str
) -> None:
    async with roost.open_node(app) as node:
        error = await refused(process.with_options(id=bad).spawn("bad:echo", 1))
        if len(bad) == MAX_ID_BYTES:
            assert f"at most {MAX_ID_BYTES}" in error.message
        assert node.list_workflows() == []
        # The node is fine: a good id starts, and its PID parses back.
        pid = await process.with_options(id="good@id").spawn("bad:echo", 1)
        assert roost.Pid.parse(str(pid)) == pid
        assert await process.exec("bad:echo", 2) == 2


async def test_a_generated_child_id_past_the_key_size_fails_that_child_start(
    autojump_clock: Any,
) -> None:
    top = "t" * MAX_ID_BYTES  # each generation adds ".1": past 511 bytes after 129 of them
    async with roost.open_node(app) as node:
        result = await process.with_options(id=top).exec("bad:chain", 200)
        assert result.startswith("Invalid: the child workflow id"), result
        assert "511-byte key size" in result
        deepest = max(len(w["workflow_id"]) for w in node.list_workflows())
        assert 500 < deepest <= 511


# --- durations ------------------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [1e12, "99999999999d", 10**400, float("nan"), -5])
async def test_a_sleep_past_the_calendar_is_invalid_in_workflow_code(
    autojump_clock: Any, seconds: Any
) -> None:
    async with roost.open_node(app):
        result = await process.exec("bad:sleeper", seconds)
        assert result.startswith("Invalid: sleep duration must be"), result
        with pytest.raises(roost.Error) as info:
            await roost.sleep(seconds)  # and in a plain process (the attached caller)
        assert info.value.kind is roost.ErrorKind.INVALID


@pytest.mark.parametrize("option", ["start_delay", "execution_timeout", "run_timeout"])
async def test_start_options_past_the_calendar_are_invalid_and_nothing_stored(
    autojump_clock: Any, option: str
) -> None:
    async with roost.open_node(app) as node:
        await refused(process.with_options({f"workflow.{option}": 1e12}).spawn("bad:echo", 1))
        await refused(process.with_options({option: "99999999999d"}).spawn("bad:echo", 1))
        assert node.list_workflows() == []


async def test_timers_stop_at_the_latest_time_instead_of_overflowing() -> None:
    # 40 x 292 years pass year 9999: each timer's due time stops at LATEST instead.
    async with open_test_node(app) as node:
        spawner = process.with_options(id="forever")
        year = await spawner.exec("bad:sleeps_to_the_end_of_time", 40)
        assert LATEST.year - 1 <= year <= LATEST.year  # (float clock: a few µs either way)
        assert node.describe("forever")["task_failure"] is None
        assert await process.exec("bad:echo", "alive") == "alive"
        for _ in range(40):  # a plain process takes the clock on, past year 9999
            await roost.sleep(MAX_DURATION)
        assert roost.now() == LATEST  # the node's time stops there instead of overflowing
        assert await process.exec("bad:echo", "still alive") == "still alive"


# --- retry policies -------------------------------------------------------------------------


async def test_a_retry_policy_with_an_unknown_key_is_refused_at_the_start(
    autojump_clock: Any,
) -> None:
    async with roost.open_node(app) as node:
        error = await refused(
            process.with_options(retry_policy={"max_attempts": 3}).spawn("bad:echo", 1)
        )
        assert "known keys" in error.message
        assert "maximum_attempts" in error.message
        assert node.list_workflows() == []


async def test_wippys_non_retryable_error_types_spelling_stops_retries(
    autojump_clock: Any,
) -> None:
    attempts.clear()
    async with roost.open_node(app):
        policy = {"non_retryable_error_types": ["Invalid"], "maximum_attempts": 5}
        assert await process.exec("bad:with_policy", policy) == "Invalid after 1 attempt(s)"


# --- cron, inspection, data dirs, config ----------------------------------------------------


@pytest.mark.parametrize("expression", ["0 0 31 2 *", "0 0 0 1 1 * 2021"])
def test_app_cron_refuses_a_schedule_that_never_fires(expression: str) -> None:
    cron_app = roost.App("cronbad")
    with pytest.raises(roost.Error) as info:
        cron_app.cron(expression, "cronbad:nothing")
    assert info.value.kind is roost.ErrorKind.INVALID
    assert "never fires" in info.value.message
    assert cron_app.declared.get("cron", {}) == {}


@pytest.mark.parametrize("bad", [None, 5, ["x"], roost.Pid("local", "bad:workflows", "x")])
async def test_node_inspection_with_a_wrong_type_is_invalid(autojump_clock: Any, bad: Any) -> None:
    async with roost.open_node(app) as node:
        for call in (node.describe, node.history):
            with pytest.raises(roost.Error) as info:
                call(bad)
            assert info.value.kind is roost.ErrorKind.INVALID
        if bad is not None:
            with pytest.raises(roost.Error) as info:
                node.list_workflows(bad)
            assert info.value.kind is roost.ErrorKind.INVALID
        if bad is not None:
            with pytest.raises(roost.Error) as info:
                node.dlq.list(bad)
            assert info.value.kind is roost.ErrorKind.INVALID
        for impossible in ("", "\ud800", "x" * 600):  # ids no workflow can have
            with pytest.raises(roost.Error) as info:
                node.describe(impossible)
            assert info.value.kind is roost.ErrorKind.NOT_FOUND


async def test_open_node_on_a_file_or_under_one_is_invalid(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("not a directory")
    for path, words in [(file, "is a file"), (file / "sub", "is under the file")]:
        with pytest.raises(roost.Error) as info:
            async with roost.open_node(app, path):
                pass
        assert info.value.kind is roost.ErrorKind.INVALID
        assert words in info.value.message
    assert file.read_text() == "not a directory"


def _open_as_nobody(data_dir: Path) -> str:
    # root may write anywhere: the child process drops to 'nobody' (after importing roost,
    # which may live where 'nobody' cannot read) and then opens a node on ``data_dir``.
    # ``import roost`` loads its modules on first use, so the script imports every module of
    # the package while the files are still readable (a clone under a 0700 directory is not
    # readable by 'nobody').
    script = textwrap.dedent(
        f"""
        import importlib, os, pkgutil, trio, roost
        for found in pkgutil.walk_packages(roost.__path__, "roost."):
            if not found.name.endswith("__main__"):  # that one runs the command line
                importlib.import_module(found.name)
        os.setgid(65534)
        os.setuid(65534)
        async def main():
            try:
                async with roost.open_node(roost.App("x"), {str(data_dir)!r}):
                    pass
            except roost.Error as err:
                print(err.kind.value, err.message)
        trio.run(main)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.stderr == ""
    return done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the check as another user")
def test_open_node_under_a_read_only_parent_is_invalid(tmp_path: Path) -> None:
    # pytest's tmp_path sits in a 0700 directory of root's: 'nobody' cannot even look.
    assert "cannot be reached (Permission denied)" in _open_as_nobody(tmp_path / "data")
    base = Path(tempfile.mkdtemp(prefix="roost-ro-"))
    try:
        base.chmod(0o755)
        parent = base / "ro"
        parent.mkdir(mode=0o555)
        out = _open_as_nobody(parent / "data")
        assert out.startswith("Invalid data_dir"), out
        assert "cannot be created in" in out
        assert not (parent / "data").exists()
        assert "is not writable" in _open_as_nobody(parent)
    finally:
        shutil.rmtree(base)


def test_load_config_on_a_directory_is_invalid(tmp_path: Path) -> None:
    config_app = roost.App("cfg")
    for path, words in [(tmp_path, "is a directory"), (5, "path of a roost.toml")]:
        with pytest.raises(roost.Error) as info:
            config_app.load_config(path)
        assert info.value.kind is roost.ErrorKind.INVALID
        assert words in info.value.message
    assert config_app.declared.get("queues", {}) == {}
    (tmp_path / "latin1.toml").write_bytes(b"[queues.q]\nx = '\xe9'\n")
    with pytest.raises(roost.Error) as info:
        config_app.load_config(tmp_path / "latin1.toml")
    assert "not UTF-8" in info.value.message


# --- option spellings -----------------------------------------------------------------------


@pytest.mark.parametrize("canonical_first", [True, False])
async def test_the_canonical_workflow_option_wins_at_the_start(
    autojump_clock: Any, canonical_first: bool
) -> None:
    pairs = [("workflow.id", "canonical"), ("temporal.workflow.id", "legacy")]
    options = dict(pairs if canonical_first else pairs[::-1])
    async with roost.open_node(app) as node:
        pid = await process.with_options(options).spawn("bad:echo", 1)
        assert pid.id == "canonical"
        assert [w["workflow_id"] for w in node.list_workflows()] == ["canonical"]


# --- the reproducer -----------------------------------------------------------------


def _load_example(name: str) -> Any:
    path = Path(__file__).parents[2] / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bad_input_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_an_order_nested_450_deep_over_http_is_a_400_and_the_node_goes_on(
    tmp_path: Path,
) -> None:
    shop = _load_example("order_fulfillment")
    deep: Any = {"sku": "a"}
    for _ in range(450):
        deep = [deep]
    for _ in range(2):  # and the data dir opens again
        async with (
            roost.open_node(shop.app, tmp_path, http="127.0.0.1:0") as node,
            httpx.AsyncClient(base_url=node.http_url) as client,
        ):
            refused = await client.post("/orders", json={"items": deep, "card": "4242"})
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["kind"] == "Invalid"
            assert "levels deep" in refused.json()["error"]["message"]
            good = {"items": ["a"], "card": "4242"}
            accepted = await client.post("/orders", json=good)
            assert accepted.status_code == 202, accepted.text


web = roost.App("web")


@web.activity
async def echo_json(request: roost.http.Request) -> Any:
    return request.json


@web.activity
async def odd_name(request: roost.http.Request) -> Any:
    return {"name": "bad \ud800 name"}  # made by the handler, not taken from the request


web.http("POST", "/echo", echo_json)
web.http("GET", "/odd", odd_name)


async def test_a_lone_surrogate_in_request_json_is_a_400_and_one_in_a_result_goes_out_escaped() -> (
    None
):
    async with (
        roost.open_node(web, http="127.0.0.1:0") as node,
        httpx.AsyncClient(base_url=node.http_url) as client,
    ):
        sent = b'{"name": "bad \\ud800 name"}'
        refused = await client.post(
            "/echo", content=sent, headers={"content-type": "application/json"}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["kind"] == "Invalid"
        response = await client.get("/odd")
        assert response.status_code == 200, response.text
        assert b"\\ud800" in response.content
        assert response.json() == {"name": "bad \ud800 name"}


@pytest.mark.parametrize("bad", ["a}b", "x{", "p|q", "n\ud800"])
async def test_names_that_would_break_a_pid_are_invalid(autojump_clock: Any, bad: str) -> None:
    async with roost.open_node(app):
        with pytest.raises(roost.Error) as info:
            process.registry.register(bad)
        assert info.value.kind is roost.ErrorKind.INVALID
        with pytest.raises(roost.Error) as info:
            process.with_options().with_name(bad)
        assert info.value.kind is roost.ErrorKind.INVALID
    with pytest.raises(roost.Error) as info:
        async with roost.open_node(app, name=bad):
            pass
    assert info.value.kind is roost.ErrorKind.INVALID


async def test_a_history_holding_a_payload_at_the_depth_limit_saves_and_loads(
    autojump_clock: Any, tmp_path: Path
) -> None:
    deep = nested(MAX_DEPTH)
    async with roost.open_node(app) as node:
        await process.with_options(id="deep").exec("bad:echo", deep)
        path = save_history(node.history("deep"), tmp_path / "deep.cbor")
    assert Replayer(app).replay(load_history(path)) == deep


class HostileRepr:
    """Bad input whose repr() and str() raise: the refusal must still be an Invalid."""

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")


async def test_bad_input_whose_repr_raises_is_still_invalid(autojump_clock: Any) -> None:
    bad = HostileRepr()
    async with roost.open_node(app) as node:
        refusals: dict[str, Callable[[], Any]] = {
            "send topic": lambda: process.send(process.pid(), bad),
            "send dest": lambda: process.send(bad, "t"),
            "describe": lambda: node.describe(bad),
            "list_workflows": lambda: node.list_workflows(bad),
            "Pid.parse": lambda: roost.Pid.parse(bad),
            "app.cron": lambda: app.cron(bad, "bad:never"),
            "app.queue": lambda: app.queue(bad),
            "publish": lambda: roost.publish(bad, 1),
        }
        for what, call in refusals.items():
            with pytest.raises(roost.Error) as info:
                call()
            assert info.value.kind is roost.ErrorKind.INVALID, what
            assert "repr() raised RuntimeError" in info.value.message, what
        for what, acall in {
            "enqueue": lambda: roost.enqueue(bad, "bad:echo", 1),
            "state.get": lambda: roost.state.get(bad, "k"),
            "spawn": lambda: process.spawn(bad),
        }.items():
            with pytest.raises(roost.Error) as info:
                await acall()
            assert info.value.kind is roost.ErrorKind.INVALID, what
