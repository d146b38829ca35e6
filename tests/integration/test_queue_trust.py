"""A queued message carries its enqueuer's security context (docs/security.md, "Queues").

The handler of a delivery, and a workflow or process the queue starts, run as the enqueuer,
under its scope, through retries and DLQ redrives. The context is signed and bound to the
message: a message whose context was changed in the store, copied from another message,
signed by a dropped key or written unsigned into a node with a ring never runs; it goes to
the DLQ with the reason. A message stored without a context still delivers, with none.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import roost
from roost import process, security
from roost.queues._records import DeadLetter, QueueMessage, message_key
from roost.storage import Codec, open_lmdb_store

K1 = b"k1-secret-0123456789abcdef-32byt"
K2 = b"k2-secret-0123456789abcdef-32byt"
RING = {"k1": K1}

app = roost.App("qt")
app.queue("jobs", max_retries=2, backoff="1s", jitter=0)
app.queue("once", max_retries=0)
app.subscribe("placed", "qt:job")
app.subscribe("placed.durable", "qt:proc_job", durable=True, queue="jobs")
seen: list[tuple[str, str | None, list[str] | None, int]] = []
fail_left: dict[str, int] = {}


@app.policy("jobs.run")
def jobs_run(actor: security.Actor, action: str, resource: str) -> bool:
    return actor.id.startswith("user:") and action in {
        "queue.enqueue",
        "process.spawn",
        "dlq.change",
    }


@app.policy("secrets.read")
def secrets_read(actor: security.Actor, action: str, resource: str) -> bool:
    return action == "state.read" and resource.startswith("secrets/")


def _note(where: str) -> None:
    actor, scope = security.actor(), security.scope()
    info = roost.queue_info()
    seen.append(
        (
            where,
            actor.id if actor else None,
            list(scope) if scope else None,
            info.attempt if info else 0,
        )
    )
    left = fail_left.get(where, 0)
    if left:
        fail_left[where] = left - 1
        raise roost.Error(f"{where} failed on purpose", kind="Unavailable")


@app.activity
def job(payload: str) -> str:
    _note(f"activity {payload}")
    return payload


@app.process
async def proc_job(payload: str) -> str:
    _note(f"process {payload}")
    return payload


@app.workflow
async def wf_job(payload: str) -> str:
    _note(f"workflow {payload}")
    return payload


@app.activity
async def read_secret(payload: str) -> str:
    """A handler that reads what only its enqueuer's scope allows."""
    try:
        value = await roost.state.get("secrets", "api_key")
    except roost.Error as exc:
        seen.append(("read", str(exc.kind), None, 0))
        raise
    seen.append(("read", value, None, 0))
    return value


@app.process
async def enqueuer(queue: str, entry: str, payload: str, out: trio.MemorySendChannel) -> None:
    """A process under a security context that enqueues; reports the receipt or the error."""
    try:
        await out.send(("receipt", await roost.enqueue(queue, entry, payload)))
    except roost.Error as exc:
        await out.send(("raised", exc.kind))


@app.process
async def publisher(topic: str, data: str) -> None:
    await roost.publish(topic, data)


def as_actor(actor: str = "user:42", *policies: str) -> roost.Spawner:
    return (
        process.with_options()
        .with_actor(security.Actor(actor, meta={"tenant": "acme"}))
        .with_scope(security.Scope(*(policies or ("jobs.run",))))
    )


async def enqueue_as(
    queue: str, entry: str, payload: str, actor: str = "user:42", *policies: str
) -> str:
    out_send, out = trio.open_memory_channel(1)
    await as_actor(actor, *policies).spawn(enqueuer, queue, entry, payload, out_send)
    what, value = await out.receive()
    assert what == "receipt", value
    return value


@pytest.fixture(autouse=True)
def _reset():
    seen.clear()
    fail_left.clear()


# -- the context travels with the message ---------------------------------------------------


@pytest.mark.parametrize("entry", ["qt:job", "qt:proc_job", "qt:wf_job"])
async def test_the_handler_runs_as_the_enqueuer(autojump_clock, entry):
    kind = entry.split(":")[1].replace("proc_job", "process").replace("wf_job", "workflow")
    kind = kind.replace("job", "activity")
    async with roost.open_node(app, signing_keys=RING) as node:
        await enqueue_as("jobs", entry, "a")
        await roost.sleep(5)
        assert seen == [(f"{kind} a", "user:42", ["jobs.run"], 1)]
        assert node.dlq.list("jobs") == []
        # Enqueued from the open_node block (no context): the delivery has none either.
        await roost.enqueue("jobs", entry, "b")
        await roost.sleep(5)
        assert seen[-1] == (f"{kind} b", None, None, 1)


async def test_a_handler_may_do_what_its_enqueuer_may(autojump_clock):
    async with roost.open_node(app, signing_keys=RING):
        await roost.state.set("secrets", "api_key", "s3cr3t")
        await enqueue_as("once", "qt:read_secret", "x", "user:1", "jobs.run", "secrets.read")
        await roost.sleep(5)
        assert seen == [("read", "s3cr3t", None, 0)]


async def test_the_enqueuer_context_is_not_laundered_into_more(autojump_clock):
    # The handler runs as the enqueuer: a scope without secrets.read cannot read them
    # through a queue (without the context the handler would read them unchecked).
    async with roost.open_node(app, signing_keys=RING) as node:
        await roost.state.set("secrets", "api_key", "s3cr3t")
        await enqueue_as("once", "qt:read_secret", "x")
        await roost.sleep(5)
        assert seen == [("read", "PermissionDenied", None, 0)]
        (dead,) = node.dlq.list("once")
        assert dead.errors[-1].kind is roost.ErrorKind.PERMISSION_DENIED


async def test_retries_and_redrives_keep_the_context(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path, signing_keys=RING) as node:
        fail_left["activity r"] = 10
        receipt = await enqueue_as("jobs", "qt:job", "r")
        await roost.sleep(60)
        assert seen == [("activity r", "user:42", ["jobs.run"], n) for n in (1, 2, 3)]
        (dead,) = node.dlq.list("jobs")
        assert dead.security["actor"]["id"] == "user:42" and dead.security["key_id"] == "k1"
    # The redrive (here after a reopen, by the node's own code) keeps the enqueuer's.
    async with roost.open_node(app, tmp_path, signing_keys=RING) as node:
        fail_left["activity r"] = 0
        await node.dlq.redrive("jobs", receipt)
        await roost.sleep(5)
        assert seen[-1] == ("activity r", "user:42", ["jobs.run"], 1)
        assert node.dlq.list("jobs") == []


async def test_a_workflow_entry_under_a_context_needs_a_ring(autojump_clock, monkeypatch):
    monkeypatch.delenv("ROOST_SIGNING_KEYS", raising=False)
    out_send, out = trio.open_memory_channel(1)
    async with roost.open_node(app) as node:
        await as_actor().spawn(enqueuer, "jobs", "qt:wf_job", "w", out_send)
        assert await out.receive() == ("raised", roost.ErrorKind.INVALID_STATE)
        # Without a ring an activity's message keeps the context unsigned, and runs under it.
        await enqueue_as("jobs", "qt:job", "u")
        await roost.sleep(5)
        assert seen == [("activity u", "user:42", ["jobs.run"], 1)]
        assert node.dlq.list("jobs") == []


# -- hostile changes to the stored context: a real reopen of the data directory -----------


def rewrite(data_dir, table: str, change) -> None:
    """Rewrite every record of ``table`` with ``change(record)`` (None: leave it)."""
    codec = Codec()
    store = open_lmdb_store(data_dir)
    try:
        with store.read() as txn:
            rows = [(k, codec.decode(v)) for k, v in txn.prefix(table, b"")]
        changed = [(k, change(r)) for k, r in rows]

        def write(txn):
            for k, record in changed:
                if record is not None:
                    txn.put(table, k, codec.encode(record))

        store.transact_sync(write)
    finally:
        store.close()


def put_message(data_dir, message: QueueMessage) -> None:
    codec = Codec()
    store = open_lmdb_store(data_dir)
    try:
        row = message_key(message.queue, message.seq)
        store.transact_sync(lambda txn: txn.put("queue_messages", row, codec.encode(message)))
    finally:
        store.close()


async def dead_letters_of(data_dir, receipts, *, actors=("user:42",)) -> list[DeadLetter]:
    """Enqueue one failing message per receipt tag as each actor; returns their dead letters."""
    async with roost.open_node(app, data_dir, signing_keys=RING) as node:
        for tag, actor in zip(receipts, actors, strict=True):
            fail_left[f"activity {tag}"] = 1
            await enqueue_as("once", "qt:job", tag, actor)
        await roost.sleep(5)
        dead = node.dlq.list("once")
    assert len(dead) == len(receipts)
    seen.clear()
    return dead


async def redrive_after_reopen(data_dir, ring=RING) -> list[DeadLetter]:
    async with roost.open_node(app, data_dir, signing_keys=ring) as node:
        await node.dlq.redrive_all("once")
        await roost.sleep(5)
        return node.dlq.list("once")


def assert_refused(dead: DeadLetter, why: str) -> None:
    error = dead.errors[-1]
    assert error.kind is roost.ErrorKind.PERMISSION_DENIED
    assert "security context" in error.message and why in error.message


async def test_a_changed_actor_never_runs(autojump_clock, tmp_path):
    (dead,) = await dead_letters_of(tmp_path, ["t"])

    def promote(letter):
        return attrs.evolve(
            letter, security={**letter.security, "actor": {"id": "user:admin", "meta": {}}}
        )

    rewrite(tmp_path, "dlq", promote)
    (again,) = await redrive_after_reopen(tmp_path)
    assert seen == []  # the handler never ran, as anyone
    assert again.receipt_id == dead.receipt_id
    assert_refused(again, "does not verify")
    assert again.security["actor"]["id"] == "user:admin"  # kept as found, for the operator


async def test_a_context_copied_from_another_message_never_runs(autojump_clock, tmp_path):
    low, high = await dead_letters_of(tmp_path, ["low", "high"], actors=("user:1", "user:2"))
    by_tag = {d.payload: d for d in (low, high)}

    def swap(letter):
        other = by_tag["high" if letter.payload == "low" else "low"]
        return attrs.evolve(letter, security=other.security)

    rewrite(tmp_path, "dlq", swap)
    refused = await redrive_after_reopen(tmp_path)
    assert seen == []
    assert len(refused) == 2
    for dead in refused:
        assert_refused(dead, "does not verify")


async def test_a_context_signed_by_a_dropped_key_never_runs(autojump_clock, tmp_path):
    await dead_letters_of(tmp_path, ["k"])
    (again,) = await redrive_after_reopen(tmp_path, ring={"k2": K2})
    assert seen == []
    assert_refused(again, "does not verify")


def stored_message(receipt_id: str, queue: str, payload: str, **fields: Any) -> QueueMessage:
    """The first message of ``queue`` for ``qt:job``, as the store would hold it."""
    return QueueMessage(
        receipt_id=receipt_id,
        queue=queue,
        seq=1,
        entry="qt:job",
        payload=payload,
        enqueued_at=dt.datetime.now(dt.UTC),
        **fields,
    )


async def test_a_forged_message_written_into_the_store_never_runs(autojump_clock, tmp_path):
    async with roost.open_node(app, tmp_path, signing_keys=RING):
        pass
    forged = stored_message(
        "r-forged",
        "once",
        "f",
        security={"actor": {"id": "user:admin", "meta": {}}, "policies": ["jobs.run"]},
    )
    put_message(tmp_path, forged)
    async with roost.open_node(app, tmp_path, signing_keys=RING) as node:
        await roost.sleep(5)
        (dead,) = node.dlq.list("once")
    assert seen == []
    assert dead.receipt_id == "r-forged"
    assert_refused(dead, "is unsigned, but this node has a key ring")


async def test_a_message_without_a_context_still_delivers(autojump_clock, tmp_path):
    # As a message stored before messages kept a context: no ``security`` field at all.
    async with roost.open_node(app, tmp_path, signing_keys=RING):
        pass
    old = stored_message("r-old", "jobs", "o")
    codec = Codec()
    data = codec.encode(old)
    field = b"hsecurity\xf6"  # the last field: "security": None
    header = b"\xd9\x98[\x83iq.message\x01"  # the record tag, its name and version
    assert data.startswith(header + b"\xac") and data.endswith(field)  # a map of 12 fields
    legacy = header + b"\xab" + data[len(header) + 1 : -len(field)]
    assert codec.decode(legacy) == old
    store = open_lmdb_store(tmp_path)
    try:
        store.transact_sync(lambda txn: txn.put("queue_messages", message_key("jobs", 1), legacy))
    finally:
        store.close()
    async with roost.open_node(app, tmp_path, signing_keys=RING) as node:
        await roost.sleep(5)
        assert node.dlq.list("jobs") == []
    assert seen == [("activity o", None, None, 1)]


@pytest.mark.parametrize(("topic", "kind"), [("placed", "activity"), ("placed.durable", "process")])
async def test_a_subscriber_runs_as_the_publisher(autojump_clock, topic, kind):
    async with roost.open_node(app, signing_keys=RING):
        await as_actor("user:7").spawn(publisher, topic, "p")
        await roost.sleep(5)
        assert seen == [(f"{kind} p", "user:7", ["jobs.run"], 1 if kind == "process" else 0)]


async def test_a_cli_redrive_of_a_stopped_store_keeps_the_context(autojump_clock, tmp_path):
    from click.testing import CliRunner  # noqa: PLC0415

    from roost.cli import main  # noqa: PLC0415

    (dead,) = await dead_letters_of(tmp_path, ["c"])
    result = CliRunner().invoke(
        main, ["dlq", "redrive", "once", dead.receipt_id, "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    async with roost.open_node(app, tmp_path, signing_keys=RING) as node:
        await roost.sleep(5)
        assert node.dlq.list("once") == []
    assert seen == [("activity c", "user:42", ["jobs.run"], 1)]
