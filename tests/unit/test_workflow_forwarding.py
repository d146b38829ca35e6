"""Inbox rows keyed at commit time and moved by a hand-over (roost.workflow._local._forwarding)."""

from __future__ import annotations

from typing import Any

import attrs

from roost.storage import Codec, MemoryStore
from roost.workflow._history import CancelRequested, MessageArrived, ProcessExited
from roost.workflow._local._forwarding import FORWARD_BLOCK, Forwarding, move_inbox, put_rows
from roost.workflow._local._records import RunStatus, TerminateRequest, inbox_key

CODEC = Codec()


@attrs.define
class Record:
    workflow_id: str
    run_id: str
    status: RunStatus = RunStatus.RUNNING


@attrs.define(eq=False)
class FakeRun:
    """What the helpers read of a run: its record and its inbox numbering."""

    record: Record
    inbox_seq: int = 0

    def draw_inbox_numbers(self, count: int) -> int:
        """As ``Run.draw_inbox_numbers``: the next ``count`` numbers; the first."""
        first = self.inbox_seq + 1
        self.inbox_seq += count
        return first


def stored_run(txn: Any, workflow_id: str, run_id: str, status: str = "running") -> None:
    """The runs row the helpers read (a real RunRecord's fields that they use)."""
    data = CODEC.encode({"run_id": run_id, "status": status})
    txn.put("runs", workflow_id.encode(), data)


def decoding_codec() -> Any:
    """A codec whose runs rows decode to an object with ``run_id`` and ``status``."""

    class RowCodec:
        def decode(self, data: bytes) -> Any:
            value = CODEC.decode(data)
            if isinstance(value, dict) and "run_id" in value:
                return Record("", value["run_id"], RunStatus(value["status"]))
            return value

    return RowCodec()


def rows(store: MemoryStore) -> dict[bytes, Any]:
    with store.read() as txn:
        return {k: CODEC.decode(v) for k, v in txn.range("inbox")}


def chain() -> tuple[Forwarding, FakeRun, FakeRun]:
    forwarding = Forwarding()
    old = FakeRun(Record("w", "r0"), inbox_seq=5)
    new = FakeRun(Record("w", "r1"), inbox_seq=2)  # its Started and one carried event
    forwarding.reserve(old, new)  # type: ignore[arg-type]
    return forwarding, old, new


def test_a_successor_keeps_a_block_after_its_own_rows_and_before_later_ones() -> None:
    forwarding, _, new = chain()
    succ = forwarding.after("r0")
    assert succ is not None and succ.run is new
    assert succ.next_seq == 3  # right after its Started and carried events
    assert new.inbox_seq == 2 + FORWARD_BLOCK  # what it stages itself comes after the block
    assert forwarding.into("r1", from_run="r0") is succ
    assert forwarding.into("r1", from_run="r-other") is None
    forwarding.forget(new)  # type: ignore[arg-type]
    assert forwarding.after("r0") is None and forwarding.into("r1", from_run="r0") is None


def test_the_hand_over_moves_what_follows_the_id_and_drops_the_rest() -> None:
    forwarding, _, new = chain()
    succ = forwarding.after("r0")
    assert succ is not None
    store = MemoryStore()
    events = {
        1: MessageArrived(topic="carried"),  # restaged by the hand-over itself: kept as is
        2: CancelRequested(reason="r"),
        3: MessageArrived(topic="reply", call=7),  # a reply to the old run's call
        4: TerminateRequest(),
        5: MessageArrived(topic="m"),
        6: ProcessExited(pid=None),  # type: ignore[arg-type]
    }

    def write(txn: Any) -> list[Any]:
        for n, event in events.items():
            txn.put("inbox", inbox_key("r0", n), CODEC.encode(event))
        out: list[Any] = []
        move_inbox(txn, CODEC, "r0", succ, keep={inbox_key("r0", 1)}, out=out)
        return out

    out = store.transact_sync(write)
    assert rows(store) == {
        inbox_key("r0", 1): events[1],
        inbox_key("r1", 3): events[2],
        inbox_key("r1", 4): events[4],
        inbox_key("r1", 5): events[5],
    }
    # What memory re-keys: not the terminate request (never an accepted event).
    assert out == [
        (inbox_key("r0", 2), new, inbox_key("r1", 3)),
        (inbox_key("r0", 5), new, inbox_key("r1", 5)),
    ]


def test_a_row_is_keyed_by_the_run_the_store_holds_as_it_is_written() -> None:
    forwarding, old, new = chain()
    closed = FakeRun(Record("c", "rc"))
    unstored = FakeRun(Record("u", "ru"))
    replaced = FakeRun(Record("n", "r-new"))  # a new run whose start is not stored yet
    store = MemoryStore()
    cancel, reply = CancelRequested(reason="x"), MessageArrived(topic="t", call=1)
    staged = [
        (old, inbox_key("r0", 6), CODEC.encode(cancel), cancel),
        (old, inbox_key("r0", 7), CODEC.encode(reply), reply),
        (closed, inbox_key("rc", 1), CODEC.encode(cancel), cancel),
        (unstored, inbox_key("ru", 1), CODEC.encode(cancel), cancel),
        (replaced, inbox_key("r-new", 2), CODEC.encode(cancel), cancel),
        (None, inbox_key("kid", 2), CODEC.encode(cancel), cancel),
    ]

    def write(txn: Any) -> list[Any]:
        stored_run(txn, "w", "r1")  # the hand-over committed before this write
        stored_run(txn, "c", "rc", "completed")
        stored_run(txn, "n", "r-old", "completed")
        out: list[Any] = []
        put_rows(txn, decoding_codec(), forwarding, staged, out)
        return out

    out = store.transact_sync(write)
    assert set(rows(store)) == {
        inbox_key("r1", 3),  # the cancel, in the run that followed
        inbox_key("ru", 1),
        inbox_key("r-new", 2),
        inbox_key("kid", 2),
    }  # not the reply (the old run's own) nor anything for the closed run
    assert out == [(inbox_key("r0", 6), new, inbox_key("r1", 3))]


def test_memory_takes_a_moved_row_once_under_its_new_key() -> None:
    forwarding, _, new = chain()
    forwarding.record([(b"k0", new, b"k1")])  # type: ignore[list-item]
    assert forwarding.take([(b"k0", "e"), (b"other", "f")]) == (
        [(new, (b"k1", "e"))],
        [(b"other", "f")],
    )
    assert forwarding.take([(b"k0", "e")]) == ([], [(b"k0", "e")])  # once
