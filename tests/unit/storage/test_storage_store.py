"""Store semantics every backend must keep (run against MemoryStore and LMDB)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import trio

from roost import Error, ErrorKind
from roost.storage import MAX_KEY_SIZE, TABLES, ReadTxn, Store, WriteTxn, key


def fill(store: Store, table: str, keys: list[bytes]) -> None:
    def write(txn: WriteTxn) -> None:
        for k in keys:
            txn.put(table, k, b"v:" + k)

    store.transact_sync(write)


def keys_of(pairs: Any) -> list[bytes]:
    return [k for k, _ in pairs]


def test_the_protocol_is_implemented(store: Store) -> None:
    assert isinstance(store, Store)
    with store.read() as txn:
        assert isinstance(txn, ReadTxn)
        assert all(txn.count(t) == 0 for t in TABLES)


def test_transact_returns_the_function_result_and_commits(store: Store) -> None:
    def write(txn: WriteTxn) -> str:
        txn.put("state", b"a", b"1")
        assert txn.get("state", b"a") == b"1"  # a transaction reads its own writes
        return "done"

    assert store.transact_sync(write) == "done"
    with store.read() as txn:
        assert txn.get("state", b"a") == b"1"
        assert txn.get("state", b"missing") is None


def test_a_function_that_raises_writes_nothing(store: Store) -> None:
    fill(store, "state", [b"keep"])

    def half_done(txn: WriteTxn) -> None:
        txn.put("state", b"new", b"x")
        txn.delete("state", b"keep")
        txn.put("runs", b"other-table", b"x")
        raise LookupError("stop here")

    with pytest.raises(LookupError, match="stop here"):
        store.transact_sync(half_done)
    with store.read() as txn:
        assert keys_of(txn.range("state")) == [b"keep"]
        assert txn.count("runs") == 0


def test_delete_reports_whether_the_key_existed(store: Store) -> None:
    fill(store, "names", [b"x"])
    assert store.transact_sync(lambda txn: txn.delete("names", b"x")) is True
    assert store.transact_sync(lambda txn: txn.delete("names", b"x")) is False


KEYS = [b"a", b"b", b"ba", b"bb", b"c", b"d"]


@pytest.mark.parametrize(
    ("start", "stop", "reverse", "limit", "expected"),
    [
        (None, None, False, None, KEYS),
        (b"b", b"c", False, None, [b"b", b"ba", b"bb"]),
        (b"b", b"c", True, None, [b"bb", b"ba", b"b"]),
        (b"ab", b"bz", False, 2, [b"b", b"ba"]),
        (b"ab", b"bz", True, 2, [b"bb", b"ba"]),
        (None, b"b", True, None, [b"a"]),
        (b"c", None, True, None, [b"d", b"c"]),
        (b"e", None, False, None, []),
        (None, b"a", False, None, []),
        (b"c", b"b", False, None, []),
        (None, None, True, 0, []),
        (b"0", b"zz", True, 100, KEYS[::-1]),
    ],
)
def test_range_bounds_reverse_and_limit(
    store: Store,
    start: bytes | None,
    stop: bytes | None,
    reverse: bool,
    limit: int | None,
    expected: list[bytes],
) -> None:
    fill(store, "timers", KEYS)
    with store.read() as txn:
        got = list(txn.range("timers", start, stop, reverse=reverse, limit=limit))
    assert keys_of(got) == expected
    assert all(v == b"v:" + k for k, v in got)


def test_prefix_scans_composite_keys_without_collisions(store: Store) -> None:
    fill(store, "histories", [key(b"wf-1", n) for n in (3, 1, 2)] + [key(b"wf-10", 1)])
    with store.read() as txn:
        assert keys_of(txn.prefix("histories", key(b"wf-1"))) == [
            key(b"wf-1", n) for n in (1, 2, 3)
        ]
        assert keys_of(txn.prefix("histories", key(b"wf-1"), reverse=True, limit=1)) == [
            key(b"wf-1", 3)
        ]
        assert len(list(txn.prefix("histories", b""))) == 4
    fill(store, "meta", [b"\xff", b"\xff\xff", b"\xfe"])
    with store.read() as txn:
        assert keys_of(txn.prefix("meta", b"\xff")) == [b"\xff", b"\xff\xff"]


def test_a_snapshot_does_not_see_later_commits(store: Store) -> None:
    fill(store, "state", [b"a"])
    with store.read() as snapshot:
        fill(store, "state", [b"b"])
        store.transact_sync(lambda txn: txn.delete("state", b"a"))
        assert keys_of(snapshot.range("state")) == [b"a"]
        assert snapshot.count("state") == 1
    with store.read() as fresh:
        assert keys_of(fresh.range("state")) == [b"b"]


def test_incarnation_starts_at_one_and_increments(store: Store) -> None:
    assert [store.next_incarnation() for _ in range(3)] == [1, 2, 3]
    with store.read() as txn:
        assert txn.count("meta") == 1


@pytest.mark.parametrize(
    ("op", "fragment"),
    [
        (lambda txn: txn.put("nope", b"k", b"v"), "unknown table 'nope'"),
        (lambda txn: txn.put("state", "k", b"v"), "keys must be bytes"),
        (lambda txn: txn.put("state", b"", b"v"), "keys must be 1 to 511 bytes"),
        (lambda txn: txn.put("state", b"k" * (MAX_KEY_SIZE + 1), b"v"), "1 to 511 bytes"),
        (lambda txn: txn.put("state", b"k", {"a": 1}), "encode it with a Codec"),
        (lambda txn: txn.put("state", b"k", bytearray(b"v")), "encode it with a Codec"),
        (lambda txn: txn.put("state", bytearray(b"k"), b"v"), "keys must be bytes"),
        (lambda txn: txn.delete("state", "k"), "keys must be bytes"),
        (lambda txn: txn.delete("state", b""), "keys must be 1 to 511 bytes"),
        (lambda txn: txn.delete("nope", b"k"), "unknown table 'nope'"),
        (lambda txn: txn.get("state", b"k" * (MAX_KEY_SIZE + 1)), "1 to 511 bytes"),
        (lambda txn: txn.get("state", 7), "keys must be bytes"),
        (lambda txn: txn.get("nope", b"k"), "unknown table 'nope'"),
        (lambda txn: list(txn.range("state", "a")), "range start must be bytes"),
        (lambda txn: list(txn.range("state", limit=-1)), "range limit"),
        (lambda txn: list(txn.prefix("state", "a")), "prefix must be bytes"),
    ],
)
def test_bad_input_is_invalid_and_changes_nothing(store: Store, op: Any, fragment: str) -> None:
    def write(txn: WriteTxn) -> None:
        txn.put("state", b"before", b"x")
        op(txn)

    with pytest.raises(Error) as info:
        store.transact_sync(write)
    assert info.value.kind is ErrorKind.INVALID
    assert fragment in info.value.message
    with store.read() as txn:
        assert txn.count("state") == 0


def test_a_txn_used_after_its_block_is_invalid_state(store: Store) -> None:
    with store.read() as txn:
        pass
    with pytest.raises(Error) as info:
        txn.get("state", b"a")
    assert info.value.kind is ErrorKind.INVALID_STATE
    escaped = store.transact_sync(lambda txn: txn)
    with pytest.raises(Error, match="transaction is finished"):
        escaped.put("state", b"a", b"b")


def test_a_range_iterated_after_its_block_is_invalid_state(store: Store) -> None:
    fill(store, "state", [b"a", b"b"])
    with store.read() as txn:
        pairs = txn.range("state")
        next(pairs)
    with pytest.raises(Error, match="transaction is finished"):
        list(pairs)


@pytest.mark.parametrize("call", ["transact_sync", "read", "close"])
def test_calling_the_store_from_a_transact_function_is_invalid_state(
    store: Store, call: str
) -> None:
    calls = {
        "transact_sync": lambda: store.transact_sync(lambda inner: None),
        "read": lambda: store.read().__enter__(),
        "close": store.close,
    }
    with pytest.raises(Error) as info:
        store.transact_sync(lambda txn: calls[call]())
    assert info.value.kind is ErrorKind.INVALID_STATE
    assert not store.closed


def test_a_closed_store_is_unavailable(store: Store) -> None:
    store.close()
    assert store.closed
    for attempt in (lambda: store.transact_sync(lambda txn: None), store.read().__enter__):
        with pytest.raises(Error, match="store closed") as info:
            attempt()
        assert info.value.kind is ErrorKind.UNAVAILABLE


def test_writers_on_several_threads_all_land(store: Store) -> None:
    def worker(n: int) -> None:
        for i in range(20):
            store.transact_sync(lambda txn, i=i: txn.put("tasks", key(n, i), b"x"))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with store.read() as txn:
        assert txn.count("tasks") == 80


async def test_async_transact_returns_and_raises(store: Store) -> None:
    assert await store.transact(lambda txn: txn.put("state", b"k", b"v")) is None
    assert await store.transact(lambda txn: txn.get("state", b"k")) == b"v"

    def boom(txn: WriteTxn) -> None:
        txn.put("state", b"k", b"changed")
        raise KeyError("boom")

    with pytest.raises(KeyError):
        await store.transact(boom)
    with store.read() as txn:
        assert txn.get("state", b"k") == b"v"


async def test_a_caller_cancelled_before_submitting_writes_nothing(store: Store) -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.transact(lambda txn: txn.put("state", b"k", b"v"))
    assert scope.cancelled_caught
    with store.read() as txn:
        assert txn.count("state") == 0


async def test_many_concurrent_transacts_all_land(store: Store) -> None:
    async def one(i: int) -> None:
        assert await store.transact(lambda txn: txn.put("outbox", key(i), b"%d" % i)) is None

    async with trio.open_nursery() as nursery:
        for i in range(200):
            nursery.start_soon(one, i)
    with store.read() as txn:
        assert keys_of(txn.range("outbox")) == [key(i) for i in range(200)]
    assert store.stats.requests == 200


async def test_aclose(store: Store) -> None:
    await store.aclose()
    assert store.closed
