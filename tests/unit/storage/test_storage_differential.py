"""Differential test: random operations on an LMDB store and a MemoryStore must agree."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from roost.storage import LmdbStore, MemoryStore, WriteTxn, open_lmdb_store

TABLES_USED = ("state", "meta")
tables = st.sampled_from(TABLES_USED)
# A tiny key alphabet, so puts, deletes and range bounds keep hitting the same keys.
keys = st.lists(st.sampled_from([0x00, 0x01, 0xFF]), min_size=1, max_size=3).map(bytes)
values = st.binary(max_size=8)
bounds = st.none() | keys
limits = st.none() | st.integers(min_value=0, max_value=5)
ops = st.lists(
    st.tuples(st.sampled_from(["put", "delete"]), tables, keys, values), min_size=1, max_size=6
)


class AbortError(Exception):
    """Raised by a transact function half-way through."""


def apply(
    txn: WriteTxn, batch: list[tuple[str, str, bytes, bytes]], fail_at: int | None
) -> list[Any]:
    seen: list[Any] = []
    for i, (op, table, key, value) in enumerate(batch):
        if i == fail_at:
            raise AbortError
        if op == "put":
            txn.put(table, key, value)
            seen.append(txn.get(table, key))
        else:
            seen.append(txn.delete(table, key))
        seen.append(list(txn.range(table)))
    return seen


class StoresAgree(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="roost-diff-")
        self.lmdb: LmdbStore = open_lmdb_store(self.dir, durability="fast")
        self.memory = MemoryStore()

    def both(self, fn: Any) -> Any:
        """Run ``fn`` in a write transaction on both stores; same result or same exception."""
        outcomes = []
        for store in (self.lmdb, self.memory):
            try:
                outcomes.append(("ok", store.transact_sync(fn)))
            except AbortError:
                outcomes.append(("raised", None))
        assert outcomes[0] == outcomes[1]
        return outcomes[0][1]

    @rule(table=tables, key=keys, value=values)
    def put(self, table: str, key: bytes, value: bytes) -> None:
        self.both(lambda txn: txn.put(table, key, value))

    @rule(table=tables, key=keys)
    def delete(self, table: str, key: bytes) -> None:
        self.both(lambda txn: txn.delete(table, key))

    @rule(batch=ops, fail_at=st.none() | st.integers(min_value=0, max_value=5))
    def transact(self, batch: list[tuple[str, str, bytes, bytes]], fail_at: int | None) -> None:
        self.both(lambda txn: apply(txn, batch, fail_at))

    @rule(table=tables, start=bounds, stop=bounds, reverse=st.booleans(), limit=limits)
    def read_range(
        self, table: str, start: bytes | None, stop: bytes | None, reverse: bool, limit: int | None
    ) -> None:
        results = []
        for store in (self.lmdb, self.memory):
            with store.read() as txn:
                results.append(list(txn.range(table, start, stop, reverse=reverse, limit=limit)))
        assert results[0] == results[1]

    @rule(table=tables, prefix=st.binary(max_size=2), reverse=st.booleans(), limit=limits)
    def read_prefix(self, table: str, prefix: bytes, reverse: bool, limit: int | None) -> None:
        results = []
        for store in (self.lmdb, self.memory):
            with store.read() as txn:
                results.append(list(txn.prefix(table, prefix, reverse=reverse, limit=limit)))
        assert results[0] == results[1]

    @rule(table=tables, key=keys, value=values)
    def snapshot_is_isolated(self, table: str, key: bytes, value: bytes) -> None:
        with self.lmdb.read() as old_lmdb, self.memory.read() as old_memory:
            before = list(old_lmdb.range(table))
            assert list(old_memory.range(table)) == before
            self.both(lambda txn: (txn.put(table, key, value), txn.delete(table, b"\x00")))
            assert list(old_lmdb.range(table)) == before
            assert list(old_memory.range(table)) == before
            assert old_lmdb.count(table) == old_memory.count(table) == len(before)

    @rule()
    def reopen(self) -> None:
        self.lmdb.close()
        self.lmdb = open_lmdb_store(self.dir, durability="fast")

    @rule()
    def incarnation(self) -> None:
        assert self.lmdb.next_incarnation() == self.memory.next_incarnation()

    @invariant()
    def same_contents(self) -> None:
        with self.lmdb.read() as a, self.memory.read() as b:
            for table in TABLES_USED:
                assert list(a.range(table)) == list(b.range(table))
                assert list(a.range(table, reverse=True, limit=3)) == list(
                    b.range(table, reverse=True, limit=3)
                )
                assert a.count(table) == b.count(table)

    def teardown(self) -> None:
        self.lmdb.close()
        self.memory.close()
        shutil.rmtree(self.dir, ignore_errors=True)


TestStoresAgree = StoresAgree.TestCase
TestStoresAgree.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
