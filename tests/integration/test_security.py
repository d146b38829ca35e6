"""The security context (docs/security.md): who acts, signed envelopes, tickets, policies.

Hostile actors as tests: a process whose scope does not allow an action cannot take it,
and nothing changes; a workflow whose stored envelope was tampered with, moved to another
workflow or signed with a key the node no longer has fails on its next activation after a
real reopen of the data directory, without running its body.
"""

from __future__ import annotations

import os
import stat

import attrs
import pytest
import trio
import trio.testing
from click.testing import CliRunner

import roost
from roost import funcs, process, security
from roost._security import SECURITY_KEY
from roost.storage import Codec, open_lmdb_store
from roost.workflow._history import MessageArrived, Started, new_activation
from roost.workflow._history_format import encode_activation, read_activation
from roost.workflow._local._records import history_key

K1 = b"k1-secret-0123456789abcdef-32byt"
K2 = b"k2-secret-0123456789abcdef-32byt"
RING = {"k1": K1}

app = roost.App("shop")
app.queue("jobs")
ran: list[str] = []  # what bodies ran past their first wait (module-level: tests reset it)


@app.policy("orders.write")
def orders_write(actor: security.Actor, action: str, resource: str) -> bool:
    return actor.id.startswith("user:") and action in {
        "process.spawn",
        "process.send",
        "process.call",
        "state.read",
        "state.write",
        "registry.register",
        "registry.unregister",
        "process.cancel",
        "process.terminate",
    }


@app.policy("flaky")
def flaky(actor: security.Actor, action: str, resource: str) -> bool:
    raise RuntimeError("a policy that fails denies")


@app.policy("read.public")
def read_public(actor: security.Actor, action: str, resource: str) -> bool:
    return action == "state.read" and resource.startswith("public/")


@app.policy("spawn.only")
def spawn_only(actor: security.Actor, action: str, resource: str) -> bool:
    return action == "process.spawn"


@app.policy("write.secrets")
def write_secrets(actor: security.Actor, action: str, resource: str) -> bool:
    return action == "state.write" and resource.startswith("secrets/")


@app.policy("enqueue.only")
def enqueue_only(actor: security.Actor, action: str, resource: str) -> bool:
    return action == "queue.enqueue"


@app.activity
def who_is_acting() -> list:
    actor, scope = security.actor(), security.scope()
    return [actor.id if actor else None, list(scope) if scope else None, roost.ctx.all()]


@app.activity
def note(what: str) -> None:
    ran.append(what)


@app.workflow
async def order(n: int) -> dict:
    actor = security.actor()
    seen = await funcs.call(who_is_acting)
    go = await process.listen("go").receive()
    ran.append(f"order {n} body")  # workflow code itself, before any activity could refuse
    await funcs.call(note, f"order {n} went on")
    return {"actor": actor.id, "meta": dict(actor.meta), "activity": seen, "go": go}


@app.workflow
async def parent_flow() -> list:
    child = await process.exec("shop:child_flow")
    return [security.actor().id, child]


@app.workflow
async def child_flow() -> list:
    return [security.actor().id, list(security.scope())]


@app.process
async def reporter(out: trio.MemorySendChannel) -> None:
    actor = security.actor()
    await out.send((actor.id if actor else None, roost.ctx.all()))
    await process.spawn(inner_reporter, out)


@app.process
async def inner_reporter(out: trio.MemorySendChannel) -> None:
    actor, scope = security.actor(), security.scope()
    await out.send((actor.id if actor else None, list(scope) if scope else None))


@app.process
async def holder(ready: trio.MemorySendChannel) -> None:
    process.registry.register("payments")
    await ready.send(None)
    await roost.sleep("1d")


@app.process
async def attempt(what: str, target: str, out: trio.MemorySendChannel) -> None:
    """A hostile process: tries ``what`` on ``target`` and reports what happened."""
    try:
        match what:
            case "cancel":
                process.cancel(target, "intruder")
            case "terminate":
                process.terminate(target)
            case "signal":
                await process.send(target, "go", "intruder")
            case "unregister":
                result = process.registry.unregister(target)
                await out.send(("returned", result))
                return
            case "read":
                await out.send(("returned", await roost.state.get("secrets", target)))
                return
            case "write":
                await roost.state.set("secrets", target, "overwritten")
            case "update":
                await out.send(("returned", await roost.state.update("secrets", target, [])))
                return
            case "start-named":
                await process.with_options(name=target).spawn(order, 9)
            case "spawn-named":
                named = process.with_options().with_name(target).with_message("go", "intruder")
                await named.spawn(inner_reporter, out)
            case "monitor":
                process.monitor(target)
            case "link":
                process.link(target)
            case "spawn":
                await process.spawn(target)
            case "enqueue":
                await roost.enqueue(target, "shop:note", "queued")
            case "call":
                await process.call(target, "go", "intruder", timeout="1s")
            case "start-signal":
                existing = process.with_options(id=target, id_conflict_policy="use_existing")
                await existing.with_message("go", "intruder").spawn(order, 9)
            case "start-replace":
                replace = process.with_options(id=target, id_conflict_policy="terminate_existing")
                await replace.spawn(order, 9)
            case "as-actor":
                escalated = process.with_options().with_actor(security.Actor(target))
                await escalated.with_scope(security.Scope("orders.write")).spawn(
                    inner_reporter, out
                )
            case "as-scope":
                await (
                    process.with_options()
                    .with_scope(security.Scope(target))
                    .spawn(inner_reporter, out)
                )
    except roost.Error as exc:
        await out.send(("raised", exc.kind))
        return
    await out.send(("returned", None))


def actor_spawner(actor: str = "user:42", *policies: str, **options: object) -> roost.Spawner:
    spawner = process.with_options(**options) if options else process.with_options()
    return spawner.with_actor(security.Actor(actor, meta={"tenant": "acme"})).with_scope(
        security.Scope(*(policies or ("orders.write",)))
    )


def started_of(node: roost.NodeHandle, workflow_id: str) -> Started:
    return next(e for e in node.history(workflow_id) if isinstance(e, Started))


def messages_of(node: roost.NodeHandle, workflow_id: str) -> list[MessageArrived]:
    return [e for e in node.history(workflow_id) if isinstance(e, MessageArrived)]


async def wait_exit(pid: roost.Pid) -> roost.Exit:
    process.monitor(pid)
    async for event in process.events():
        if isinstance(event, roost.Exit) and event.pid == pid:
            return event
    raise AssertionError("unreachable")


# -- the context travels -------------------------------------------------------------------


async def test_workflow_activity_and_child_see_the_signed_context(autojump_clock):
    async with roost.open_node(app, signing_keys=RING, signing_key="k1") as node:
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        await process.send(pid, "go", "yes")
        done = await wait_exit(pid)
        assert done.error is None
        assert done.value == {
            "actor": "user:42",
            "meta": {"tenant": "acme"},
            "activity": ["user:42", ["orders.write"], {}],
            "go": "yes",
        }
        # The start record holds the envelope, bound to the workflow's id.
        sealed = started_of(node, "o-1").context[SECURITY_KEY]
        assert sealed["addressee"] == "o-1" and sealed["key_id"] == "k1"
        # A child without an explicit id gets a derived id, and its envelope is bound to it.
        result = await actor_spawner(id="p-1").exec(parent_flow)
        assert result == ["user:42", ["user:42", ["orders.write"]]]
        child = [w for w in node.list_workflows() if w["workflow_type"] == "shop:child_flow"]
        child_id = child[0]["workflow_id"]
        assert child_id.startswith("p-1.")
        assert started_of(node, child_id).context[SECURITY_KEY]["addressee"] == child_id


async def test_processes_inherit_the_context_and_ctx_does_not_show_it(autojump_clock):
    send, receive = trio.open_memory_channel(2)
    async with roost.open_node(app):
        await actor_spawner("user:7").with_context({"tenant": "acme"}).spawn(reporter, send)
        assert await receive.receive() == ("user:7", {"tenant": "acme"})
        assert await receive.receive() == ("user:7", ["orders.write"])
        with pytest.raises(roost.Error) as err:
            process.with_context({SECURITY_KEY: {"actor": None}})
        assert err.value.kind == roost.ErrorKind.INVALID
        assert security.actor() is None and security.scope() is None  # the open_node block


async def test_a_context_without_a_signing_key_cannot_start_a_workflow(autojump_clock, monkeypatch):
    monkeypatch.delenv("ROOST_SIGNING_KEYS", raising=False)
    async with roost.open_node(app) as node:
        with pytest.raises(roost.Error) as err:
            await actor_spawner(id="o-1").spawn(order, 1)
        assert err.value.kind == roost.ErrorKind.INVALID_STATE
        assert "signing key" in err.value.message
        with pytest.raises(roost.Error) as missing:
            node.describe("o-1")
        assert missing.value.kind == roost.ErrorKind.NOT_FOUND


async def test_an_actor_without_a_scope_cannot_start_a_workflow(autojump_clock):
    async with roost.open_node(app, signing_keys=RING) as node:
        with pytest.raises(roost.Error) as err:
            await (
                process.with_options(id="o-1").with_actor(security.Actor("user:1")).spawn(order, 1)
            )
        assert err.value.kind == roost.ErrorKind.INVALID
        assert "an actor needs a scope" in err.value.message
        assert node.list_workflows() == []


async def test_the_ring_comes_from_the_environment(autojump_clock, monkeypatch):
    monkeypatch.setenv("ROOST_SIGNING_KEYS", f"k9:{K2.hex()},k1:{K1.hex()}")
    async with roost.open_node(app) as node:
        await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        assert started_of(node, "o-1").context[SECURITY_KEY]["key_id"] == "k9"


# -- hostile actors --------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["cancel", "terminate", "signal"])
async def test_an_intruder_cannot_steer_a_workflow(autojump_clock, what):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING) as node:
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        before = node.history("o-1")
        await actor_spawner("intruder", "read.public").spawn(attempt, what, str(pid), out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("o-1")["status"] == "running"
        assert node.history("o-1") == before  # nothing stored


@pytest.mark.parametrize(("what", "target"), [("as-actor", "root"), ("as-scope", "read.public")])
async def test_a_process_cannot_start_a_child_under_another_actor_or_wider_scope(
    autojump_clock, what, target
):
    out_send, out = trio.open_memory_channel(2)
    async with roost.open_node(app):
        await actor_spawner("user:42").spawn(attempt, what, target, out_send)
        with trio.fail_after(60):  # a child that started reports first
            assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert out.statistics().current_buffer_used == 0  # the child never started


async def test_a_process_may_narrow_its_scope_for_a_child(autojump_clock):
    out_send, out = trio.open_memory_channel(2)
    async with roost.open_node(app):
        await actor_spawner("user:42", "orders.write", "read.public").spawn(
            attempt, "as-scope", "read.public", out_send
        )
        got = [await out.receive(), await out.receive()]
        assert ("user:42", ["read.public"]) in got and ("returned", None) in got


async def test_enqueue_does_not_run_an_entry_the_caller_may_not_start(autojump_clock):
    ran.clear()
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING):
        await actor_spawner("user:3", "enqueue.only").spawn(attempt, "enqueue", "jobs", out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert ran == []  # the queued call never ran


@pytest.mark.parametrize("what", ["start-signal", "start-replace"])
async def test_an_intruder_cannot_reach_a_secured_workflow_through_start_options(
    autojump_clock, what
):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING) as node:
        await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        before = node.history("o-1")
        await actor_spawner("intruder", "spawn.only").spawn(attempt, what, "o-1", out_send)
        with trio.fail_after(60):
            assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("o-1")["status"] == "running"
        assert node.history("o-1") == before  # nothing stored


async def test_an_allowed_actor_starts_into_an_existing_secured_workflow(autojump_clock):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING):
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        await actor_spawner("user:5").spawn(attempt, "start-signal", "o-1", out_send)
        assert await out.receive() == ("returned", None)
        done = await wait_exit(pid)
        assert done.value["go"] == "intruder"


async def test_an_intruder_cannot_unregister_or_take_a_name(autojump_clock):
    ready_send, ready = trio.open_memory_channel(1)
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        owner = await process.spawn(holder, ready_send)
        await ready.receive()
        # Even a scope that allows registry.unregister cannot drop another live process's name.
        await actor_spawner("user:9").spawn(attempt, "unregister", "payments", out_send)
        assert await out.receive() == ("returned", False)
        await actor_spawner("intruder", "read.public").spawn(
            attempt, "unregister", "payments", out_send
        )
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        assert process.registry.lookup("payments") == owner


@pytest.mark.parametrize("what", ["monitor", "link", "call"])
async def test_an_intruder_cannot_watch_link_or_call_a_process(autojump_clock, what):
    ready_send, ready = trio.open_memory_channel(1)
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        owner = await process.spawn(holder, ready_send)
        await ready.receive()
        await actor_spawner("intruder", "read.public").spawn(attempt, what, str(owner), out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)


@pytest.mark.parametrize(("what", "target"), [("spawn", "shop:order"), ("enqueue", "jobs")])
async def test_an_intruder_cannot_start_or_enqueue_work(autojump_clock, what, target):
    ran.clear()
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING) as node:
        await actor_spawner("intruder", "flaky", "read.public").spawn(
            attempt, what, target, out_send
        )
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert node.list_workflows() == []
        assert node.dlq.list("jobs") == []
        assert ran == []


@pytest.mark.parametrize("what", ["read", "write"])
async def test_an_intruder_cannot_read_or_write_state_outside_its_scope(autojump_clock, what):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        await roost.state.set("secrets", "api_key", "s3cr3t")
        await roost.state.set("public", "motd", "hello")
        await actor_spawner("intruder", "read.public").spawn(attempt, what, "api_key", out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        assert await roost.state.get("secrets", "api_key") == "s3cr3t"


async def test_an_allowed_actor_acts(autojump_clock):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        await roost.state.set("secrets", "api_key", "s3cr3t")
        await actor_spawner("user:1").spawn(attempt, "read", "api_key", out_send)
        assert await out.receive() == ("returned", "s3cr3t")


async def test_a_secure_app_denies_processes_without_a_context(autojump_clock):
    secure = roost.App("vault", secure=True)

    @secure.policy("all")
    def allow_all(actor: security.Actor, action: str, resource: str) -> bool:
        return True

    @secure.process
    async def reader(out: trio.MemorySendChannel) -> None:
        try:
            await out.send(("returned", await roost.state.get("s", "k")))
        except roost.Error as exc:
            await out.send(("raised", exc.kind))

    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(secure):
        await roost.state.set("s", "k", 1)  # the open_node block is the operator's own code
        await process.spawn(reader, out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await (
            process.with_options()
            .with_actor(security.Actor("svc:reader"))
            .with_scope(security.Scope("all"))
            .spawn(reader, out_send)
        )
        assert await out.receive() == ("returned", 1)


secure_app = roost.App("vault", secure=True)


@secure_app.process
async def sink() -> None:
    await roost.sleep("1d")


@secure_app.workflow
async def messenger(target: str, what: str) -> str:
    try:
        if what == "send":
            process.send(target, "hello", 1)
        else:
            await process.call(target, "hello", 1, timeout="1s")
    except roost.Error as exc:
        return exc.kind.value
    return "delivered"


@pytest.mark.parametrize("what", ["send", "call"])
async def test_a_secure_app_denies_workflows_without_a_context(autojump_clock, what):
    async with roost.open_node(secure_app):
        target = await process.spawn(sink)
        result = await process.exec(messenger, str(target), what)
        assert result == roost.ErrorKind.PERMISSION_DENIED.value


@app.process
async def pricer(answer: trio.MemoryReceiveChannel) -> None:
    request = await process.inbox().receive()
    process.send(request.sender, "ok", await answer.receive())


@app.workflow
async def asker(target: str) -> object:
    return await process.call(target, "price", None, timeout="1h")


async def test_only_the_called_process_can_reply_to_a_workflow_call(autojump_clock):
    answer_send, answer = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING) as node:
        callee = await process.spawn(pricer, answer)
        pid = await actor_spawner(id="a-1").spawn(asker, str(callee))
        await trio.testing.wait_all_tasks_blocked()
        run_id = node.describe("a-1")["run_id"]
        reply_address = roost.Pid("local", "shop:replies", f"{run_id}.1.a-1")
        with pytest.raises(roost.Error) as err:
            process.send(reply_address, "ok", "forged")
        assert err.value.kind == roost.ErrorKind.PERMISSION_DENIED
        await trio.testing.wait_all_tasks_blocked()
        assert not messages_of(node, "a-1")  # nothing stored
        await answer_send.send(42)
        done = await wait_exit(pid)
        assert done.value == 42


# -- envelopes under damage: a real reopen of the data directory ----------------------------


def rewrite_start(data_dir, workflow_id: str, change) -> None:
    """Rewrite the Started event in ``workflow_id``'s first stored activation."""
    codec = Codec()
    store = open_lmdb_store(data_dir)
    try:
        with store.read() as txn:
            run_id = next(
                codec.decode(v).run_id
                for _, v in txn.prefix("runs", b"")
                if getattr(codec.decode(v), "workflow_id", None) == workflow_id
            )
            data = txn.get("histories", history_key(run_id, 1))
        index, at, events, commands = read_activation(codec, data)
        started = events[0]
        assert isinstance(started, Started)
        context = change(dict(started.context))
        events[0] = attrs.evolve(started, context=context)
        row = encode_activation(codec, new_activation(index, at, events, commands))
        store.transact_sync(lambda txn: txn.put("histories", history_key(run_id, 1), row))
    finally:
        store.close()


async def start_orders(data_dir, ids, ring=RING) -> None:
    async with roost.open_node(app, data_dir, signing_keys=ring) as node:
        for workflow_id in ids:
            await actor_spawner(id=workflow_id).spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        for workflow_id in ids:
            assert node.describe(workflow_id)["status"] == "running"


async def next_activation(data_dir, workflow_id, ring=RING) -> dict:
    async with roost.open_node(app, data_dir, signing_keys=ring) as node:
        pid = roost.Pid.parse(f"{{shop:workflows|{workflow_id}}}")
        await process.send(pid, "go", "now")
        await wait_exit(pid)
        return node.describe(workflow_id)


def assert_failed_unrun(described: dict, why: str) -> None:
    assert described["status"] == "failed"
    assert described["error"].kind == roost.ErrorKind.PERMISSION_DENIED
    assert why in described["error"].message
    assert ran == []  # the body never went past its wait


async def test_a_tampered_envelope_fails_after_a_reopen(autojump_clock, tmp_path):
    ran.clear()
    await start_orders(tmp_path, ["o-1"])

    def promote(context):
        sealed = dict(context[SECURITY_KEY])
        sealed["actor"] = {"id": "user:admin", "meta": {}}
        return {**context, SECURITY_KEY: sealed}

    rewrite_start(tmp_path, "o-1", promote)
    assert_failed_unrun(await next_activation(tmp_path, "o-1"), "bad signature")


async def test_a_misaddressed_envelope_fails_after_a_reopen(autojump_clock, tmp_path):
    ran.clear()
    await start_orders(tmp_path, ["o-1", "o-2"])
    taken = {}
    rewrite_start(tmp_path, "o-2", lambda context: taken.update(context) or context)
    rewrite_start(tmp_path, "o-1", lambda context: {**context, SECURITY_KEY: taken[SECURITY_KEY]})
    assert_failed_unrun(await next_activation(tmp_path, "o-1"), "bound to 'o-2'")


async def test_a_re_keyed_node_fails_runs_signed_with_a_dropped_key(autojump_clock, tmp_path):
    ran.clear()
    await start_orders(tmp_path, ["o-1"])
    assert_failed_unrun(await next_activation(tmp_path, "o-1", {"k2": K2}), "'k1'")


async def test_an_envelope_without_its_scope_fails(autojump_clock, tmp_path):
    ran.clear()
    await start_orders(tmp_path, ["o-1"])

    def strip(context):
        sealed = dict(context[SECURITY_KEY])
        del sealed["policies"]
        return {**context, SECURITY_KEY: sealed}

    rewrite_start(tmp_path, "o-1", strip)
    assert_failed_unrun(await next_activation(tmp_path, "o-1"), "malformed")


async def test_keys_rotate_verify_with_any_sign_with_the_active(autojump_clock, tmp_path):
    ran.clear()
    await start_orders(tmp_path, ["o-1"])
    rotated = {"k2": K2, "k1": K1}  # k2 signs now; k1 still verifies the older runs
    described = await next_activation(tmp_path, "o-1", rotated)
    assert described["status"] == "completed"
    assert ran == ["order 1 body", "order 1 went on"]
    async with roost.open_node(app, tmp_path, signing_keys=rotated) as node:
        await actor_spawner(id="o-3").spawn(order, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert started_of(node, "o-3").context[SECURITY_KEY]["key_id"] == "k2"


# -- relay tickets: the command line ---------------------------------------------------------


def cli(*args: str, env: dict | None = None):
    from roost.cli import main  # noqa: PLC0415

    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


async def test_unsigned_cli_signal_is_refused_and_a_signed_one_lands(
    autojump_clock, tmp_path, monkeypatch
):
    monkeypatch.delenv("ROOST_SIGNING_KEYS", raising=False)
    ran.clear()
    data = tmp_path / "data"
    await start_orders(data, ["o-1"])
    unsigned = cli("workflow", "signal", "o-1", "go", '"cli"', "--data-dir", str(data))
    assert unsigned.exit_code == 1
    assert "PermissionDenied" in unsigned.output or "signed" in unsigned.output
    async with roost.open_node(app, data, signing_keys=RING) as node:
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("o-1")["status"] == "running"
        assert not messages_of(node, "o-1")
    key_file = tmp_path / "ring.keys"
    key_file.write_text(f"k1:{K1.hex()}\n")
    signed = cli(
        "workflow", "signal", "o-1", "go", '"cli"', "--data-dir", str(data),
        "--key-file", str(key_file),
    )  # fmt: skip
    assert signed.exit_code == 0, signed.output
    async with roost.open_node(app, data, signing_keys=RING) as node:
        pid = roost.Pid.parse("{shop:workflows|o-1}")
        done = await wait_exit(pid)
        assert done.value["go"] == "cli"


async def test_an_offline_cli_signal_signed_with_a_self_made_key_is_refused(
    autojump_clock, tmp_path, monkeypatch
):
    monkeypatch.delenv("ROOST_SIGNING_KEYS", raising=False)
    data = tmp_path / "data"
    await start_orders(data, ["o-1"])
    key_file = tmp_path / "mine.keys"
    key_file.write_text(f"k1:{K2.hex()}\n")  # the node's key id, another secret
    forged = cli(
        "workflow", "signal", "o-1", "go", '"forged"', "--data-dir", str(data),
        "--key-file", str(key_file),
    )  # fmt: skip
    assert forged.exit_code == 1
    assert "does not verify" in forged.output
    async with roost.open_node(app, data, signing_keys=RING) as node:
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("o-1")["status"] == "running"
        assert not messages_of(node, "o-1")  # nothing stored


async def test_a_signed_process_send_lands_and_a_forged_ticket_is_refused(autojump_clock):
    async with roost.open_node(app, signing_keys=RING) as node:
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
        host = node._node.workflows
        forged = {"actor": "user:42", "key_id": "k1", "sig": "00" * 32}
        with pytest.raises(roost.Error) as err:
            host.signal(None, pid, "go", "forged", forged)
        assert err.value.kind == roost.ErrorKind.PERMISSION_DENIED
        with pytest.raises(roost.Error):
            host.signal(None, pid, "go", "unsigned")
        await process.send(pid, "go", "signed")
        done = await wait_exit(pid)
        assert done.value["go"] == "signed"


# -- files outside the data directory ------------------------------------------------------


async def test_history_exports_are_private_whatever_the_umask(autojump_clock, tmp_path):
    data = tmp_path / "data"
    async with roost.open_node(app, data, signing_keys=RING):
        await actor_spawner(id="o-1").spawn(order, 1)
        await trio.testing.wait_all_tasks_blocked()
    old = os.umask(0)
    try:
        one = tmp_path / "one.cbor"
        assert cli("history", "export", "o-1", str(one), "--data-dir", str(data)).exit_code == 0
        many = tmp_path / "exports"
        result = cli("history", "export-all", str(many), "--data-dir", str(data))
        assert result.exit_code == 0, result.output
    finally:
        os.umask(old)
    assert stat.S_IMODE(one.stat().st_mode) == 0o600
    assert stat.S_IMODE(many.stat().st_mode) == 0o700
    files = list(many.iterdir())
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)


async def test_the_admin_api_takes_only_a_signed_signal_for_a_secured_workflow():
    import json  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from roost.cli._signing import operator_ticket  # noqa: PLC0415

    ran.clear()
    async with roost.open_node(app, admin="127.0.0.1:0", signing_keys=RING) as node:
        token = json.loads((node.data_dir / "admin.json").read_text())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            url = "/api/workflows/o-1/signal"
            refused = await client.post(url, json={"topic": "go", "payload": "admin"})
            assert refused.status_code == 403
            assert refused.json()["error"]["kind"] == "PermissionDenied"
            assert not messages_of(node, "o-1")  # nothing stored
            other_topic = operator_ticket(roost._security.KeyRing.build(RING), "o-1", "stop")
            misaddressed = await client.post(
                url, json={"topic": "go", "payload": "admin", "ticket": other_topic}
            )
            assert misaddressed.status_code == 403
            ticket = operator_ticket(roost._security.KeyRing.build(RING), "o-1", "go")
            signed = await client.post(url, json={"topic": "go", "payload": "ok", "ticket": ticket})
            assert signed.status_code == 200, signed.text
        done = await wait_exit(pid)
        assert done.value["go"] == "ok"


async def test_the_admin_api_takes_only_a_signed_call_for_a_secured_workflow():
    import json  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from roost.cli._signing import operator_ticket  # noqa: PLC0415

    async with roost.open_node(app, admin="127.0.0.1:0", signing_keys=RING) as node:
        token = json.loads((node.data_dir / "admin.json").read_text())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        await actor_spawner(id="o-1").spawn(order, 1)
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            url = "/api/workflows/o-1/call"
            refused = await client.post(url, json={"topic": "go", "payload": "x", "timeout": 1})
            assert refused.status_code == 403
            assert refused.json()["error"]["kind"] == "PermissionDenied"
            ticket = operator_ticket(roost._security.KeyRing.build(RING), "o-1", "stop")
            misaddressed = await client.post(
                url, json={"topic": "go", "payload": "x", "timeout": 1, "ticket": ticket}
            )
            assert misaddressed.status_code == 403
        assert not messages_of(node, "o-1")  # nothing stored


# -- operators: cancel and terminate of a secured workflow from outside the node -----------


@pytest.mark.parametrize("action", ["cancel", "terminate"])
async def test_an_unsigned_cli_cancel_or_terminate_of_a_secured_workflow_is_refused(
    autojump_clock, tmp_path, monkeypatch, action
):
    monkeypatch.delenv("ROOST_SIGNING_KEYS", raising=False)
    data = tmp_path / "data"
    await start_orders(data, ["o-1"])
    mine = tmp_path / "mine.keys"
    mine.write_text(f"k1:{K2.hex()}\n")  # the node's key id, another secret
    for extra in ([], ["--key-file", str(mine)]):
        refused = cli("workflow", action, "o-1", "--data-dir", str(data), *extra)
        assert refused.exit_code == 1, refused.output
        assert "PermissionDenied" in refused.output
    async with roost.open_node(app, data, signing_keys=RING) as node:
        await trio.testing.wait_all_tasks_blocked()
        assert node.describe("o-1")["status"] == "running"  # nothing stored
        assert not any(type(e).__name__ == "CancelRequested" for e in node.history("o-1"))
    ring = tmp_path / "ring.keys"
    ring.write_text(f"k1:{K1.hex()}\n")
    signed = cli("workflow", action, "o-1", "--data-dir", str(data), "--key-file", str(ring))
    assert signed.exit_code == 0, signed.output
    async with roost.open_node(app, data, signing_keys=RING) as node:
        await trio.testing.wait_all_tasks_blocked()
        if action == "terminate":
            assert node.describe("o-1")["status"] == "terminated"
        else:  # stored: the workflow decides what to do with it
            assert any(type(e).__name__ == "CancelRequested" for e in node.history("o-1"))
    audit = (data / "audit.log").read_text()
    assert f"workflow {action}" in audit and "operator:" in audit


async def test_the_admin_api_cancels_or_terminates_a_secured_workflow_only_signed():
    import json  # noqa: PLC0415

    import httpx  # noqa: PLC0415

    from roost._security import KeyRing, make_control_ticket  # noqa: PLC0415
    from roost.cli._signing import operator_control, operator_ticket  # noqa: PLC0415

    ring = KeyRing.build(RING)
    async with roost.open_node(app, admin="127.0.0.1:0", signing_keys=RING) as node:
        token = json.loads((node.data_dir / "admin.json").read_text())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        pid = await actor_spawner(id="o-1").spawn(order, 1)
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            wrong = [
                None,
                operator_control(ring, "o-1", "cancel"),  # another action
                operator_control(ring, "o-2", "terminate"),  # another workflow
                operator_ticket(ring, "o-1", "terminate"),  # a relay ticket for that topic
                make_control_ticket(KeyRing.build({"k1": K2}), "o-1", "terminate", "x"),
            ]
            for ticket in wrong:
                body = {} if ticket is None else {"ticket": ticket}
                refused = await client.post("/api/workflows/o-1/terminate", json=body)
                assert refused.status_code == 403, refused.text
                assert refused.json()["error"]["kind"] == "PermissionDenied"
            refused = await client.post("/api/workflows/o-1/cancel", json={"reason": "x"})
            assert refused.status_code == 403
            # Replacing the run through a start terminates it: the same ticket is needed.
            replace = {
                "entry": "shop:order",
                "args": [2],
                "id": "o-1",
                "options": {"id_conflict_policy": "terminate_existing"},
            }
            refused = await client.post("/api/workflows", json=replace)
            assert refused.status_code == 403, refused.text
            await trio.testing.wait_all_tasks_blocked()
            assert node.describe("o-1")["status"] == "running"
            assert not any(type(e).__name__ == "CancelRequested" for e in node.history("o-1"))
            ticket = operator_control(ring, "o-1", "terminate")
            done = await client.post("/api/workflows/o-1/terminate", json={"ticket": ticket})
            assert done.status_code == 200, done.text
        await wait_exit(pid)
        assert node.describe("o-1")["status"] == "terminated"


async def test_the_console_cannot_change_a_secured_workflow():
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    sys.path.insert(0, str(Path(__file__).parent))
    from console_fixture import open_console_node  # noqa: PLC0415

    async with open_console_node(app, signing_keys=RING) as c:
        await actor_spawner(id="o-1").spawn(order, 1)
        async with c.client() as http:
            for form in [
                {"action": "signal", "topic": "go", "payload": '"console"'},
                {"action": "cancel", "reason": "x"},
                {"action": "terminate"},
            ]:
                refused = await http.post("/workflows/o-1", data=form)
                assert refused.status_code == 403, (form, refused.text)
                assert "key ring" in refused.text or "signed" in refused.text
        await trio.testing.wait_all_tasks_blocked()
        assert c.node.describe("o-1")["status"] == "running"
        history = c.node.history("o-1")
        assert not messages_of(c.node, "o-1")  # nothing stored
        assert not any(type(e).__name__ == "CancelRequested" for e in history)


async def test_a_write_only_scope_cannot_read_through_state_update(autojump_clock):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        await roost.state.set("secrets", "api_key", "s3cr3t")
        await actor_spawner("intruder", "write.secrets").spawn(
            attempt, "update", "api_key", out_send
        )
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        assert await roost.state.get("secrets", "api_key") == "s3cr3t"
        # With both a read and a write policy, update answers the value.
        await actor_spawner("user:1").spawn(attempt, "update", "api_key", out_send)
        assert await out.receive() == ("returned", "s3cr3t")


@app.process
async def mailbox_holder(ready: trio.MemorySendChannel, got: list) -> None:
    process.registry.register("payments")
    await ready.send(None)
    got.append(await process.inbox().receive())


@pytest.mark.parametrize("name", ["payments", "free-name"])
async def test_a_named_spawn_asks_for_the_name_or_the_holder(autojump_clock, name):
    ready_send, ready = trio.open_memory_channel(1)
    out_send, out = trio.open_memory_channel(2)
    got: list = []
    async with roost.open_node(app):
        owner = await process.spawn(mailbox_holder, ready_send, got)
        await ready.receive()
        # spawn.only allows process.spawn, neither registry.register nor process.send.
        await actor_spawner("intruder", "spawn.only").spawn(attempt, "spawn-named", name, out_send)
        with trio.fail_after(60):  # a child that started reports first
            assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []  # the holder got no message
        assert process.registry.lookup("payments") == owner
        with pytest.raises(roost.Error) as free:  # the free name was not taken
            process.registry.lookup("free-name")
        assert free.value.kind == roost.ErrorKind.NOT_FOUND
        assert out.statistics().current_buffer_used == 0  # no child started


@app.process
async def slow_echo(addresses: trio.MemorySendChannel, go: trio.MemoryReceiveChannel) -> None:
    """Takes one request, tells the test its reply address, replies once told to."""
    request = await process.inbox().receive()
    await addresses.send(request.sender)
    await go.receive()
    await process.send(request.sender, "ok", f"echo {request.payload}")


@app.process
async def forger(address: str) -> None:
    await process.send(address, "ok", "forged")


@app.process
async def secured_caller(target: str, out: trio.MemorySendChannel) -> None:
    await out.send(await process.call(target, "ask", "hi", timeout="1m"))


async def test_a_secured_process_call_takes_its_reply_only_from_the_called(autojump_clock):
    addr_send, addresses = trio.open_memory_channel(1)
    go_send, go = trio.open_memory_channel(1)
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app):
        callee = await process.spawn(slow_echo, addr_send, go)
        await actor_spawner("user:1").spawn(secured_caller, str(callee), out_send)
        reply_address = await addresses.receive()
        await process.spawn(forger, str(reply_address))  # a guessable PID: anyone may send
        await trio.testing.wait_all_tasks_blocked()
        assert out.statistics().current_buffer_used == 0  # the forged reply was not taken
        await go_send.send(None)
        assert await out.receive() == "echo hi"


async def test_a_named_workflow_start_asks_for_the_name(autojump_clock):
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app, signing_keys=RING) as node:
        await actor_spawner("intruder", "spawn.only").spawn(attempt, "start-named", "pay", out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.PERMISSION_DENIED)
        assert node.list_workflows() == []
        with pytest.raises(roost.Error) as free:
            process.registry.lookup("pay")
        assert free.value.kind == roost.ErrorKind.NOT_FOUND
