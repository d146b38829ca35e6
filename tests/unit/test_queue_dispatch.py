"""The queue scheduling core against FIFO-per-group rules, under random failures."""

import datetime as dt
import heapq

import attrs
from hypothesis import given
from hypothesis import strategies as st

from roost.queues._dispatch import QueueState
from roost.queues._records import QueueMessage
from roost.queues._spec import make_spec

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

messages_st = st.lists(
    st.tuples(
        st.sampled_from(["A", "B", "C", None]),  # None: standard queue ignores groups
        st.integers(0, 3),  # failures before success
        st.integers(1, 3),  # seconds each attempt takes
    ),
    min_size=1,
    max_size=25,
)


def simulate(fifo, concurrency, max_retries, plan):
    """Run the plan through QueueState with simulated time; return the trace."""
    settings = {"concurrency": concurrency, "max_retries": max_retries, "backoff": 2, "jitter": 0}
    if fifo:
        settings.update(type="fifo", message_group_field="g")
    spec = make_spec("q", settings)
    state = QueueState(spec)
    failures = {}
    for seq, (drawn, fails, _) in enumerate(plan, start=1):
        group = (drawn or "A") if fifo else None
        failures[seq] = fails
        state.add(
            QueueMessage(
                receipt_id=str(seq), queue="q", seq=seq, entry="e", group=group, enqueued_at=T0
            )
        )
    now = 0.0
    running: list = []  # heap of (ends_at, seq, message)
    trace = []  # ("start" | "done" | "dead", seq, time)
    for _ in range(10_000):
        for message in state.take_ready(T0 + dt.timedelta(seconds=now)):
            trace.append(("start", message.seq, now))
            heapq.heappush(running, (now + plan[message.seq - 1][2], message.seq, message))
            in_flight = [m for _, _, m in running]
            assert len(in_flight) <= concurrency
            groups = [m.group for m in in_flight if m.group is not None]
            assert len(groups) == len(set(groups)), "two messages of one group ran together"
        wake = state.next_wakeup(T0 + dt.timedelta(seconds=now))
        candidates = [running[0][0]] if running else []
        if wake is not None:
            assert (wake - T0).total_seconds() > now  # a timer only for what is still ahead
            candidates.append((wake - T0).total_seconds())
        if not candidates:
            break
        now = max(now, min(candidates))
        while running and running[0][0] <= now:
            _, seq, message = heapq.heappop(running)
            if failures[seq]:
                failures[seq] -= 1
                if message.attempt <= max_retries:
                    retry = attrs.evolve(
                        message,
                        attempt=message.attempt + 1,
                        not_before=T0 + dt.timedelta(seconds=now + 2),
                    )
                    state.finished(message, retry)
                    continue
                trace.append(("dead", seq, now))
            else:
                trace.append(("done", seq, now))
            state.finished(message)
    return trace, state


@given(st.booleans(), st.integers(1, 4), st.integers(0, 3), messages_st)
def test_every_message_ends_once_and_fifo_groups_keep_order(fifo, concurrency, retries, plan):
    trace, state = simulate(fifo, concurrency, retries, plan)
    ended = [(seq, t) for kind, seq, t in trace if kind in ("done", "dead")]
    assert sorted(seq for seq, _ in ended) == list(range(1, len(plan) + 1))  # once each
    assert not state.pending and not state.running
    for seq, (_, fails, _) in enumerate(plan, start=1):
        kinds = [kind for kind, s, _ in trace if s == seq and kind != "start"]
        assert kinds == (["done"] if fails <= retries else ["dead"])
    if fifo:
        groups = {seq: (g or "A") for seq, (g, _, _) in enumerate(plan, start=1)}
        for group in set(groups.values()):
            order = [seq for seq, _ in ended if groups[seq] == group]
            assert order == sorted(order), f"group {group} finished out of order: {order}"
            starts = [s for kind, s, _ in trace if kind == "start" and groups[s] == group]
            firsts = list(dict.fromkeys(starts))
            assert firsts == sorted(firsts), "a later message overtook its group's head"


def test_a_waiting_head_blocks_only_its_group():
    spec = make_spec("q", {"type": "fifo", "message_group_field": "g", "concurrency": 5})
    state = QueueState(spec)
    later = T0 + dt.timedelta(seconds=10)
    state.add(
        QueueMessage(
            receipt_id="1", queue="q", seq=1, entry="e", group="A", enqueued_at=T0, not_before=later
        )
    )
    state.add(QueueMessage(receipt_id="2", queue="q", seq=2, entry="e", group="A", enqueued_at=T0))
    state.add(QueueMessage(receipt_id="3", queue="q", seq=3, entry="e", group="B", enqueued_at=T0))
    assert [m.seq for m in state.take_ready(T0)] == [3]
    assert state.next_wakeup(T0) == later
    assert state.next_wakeup(later) is None  # due now: no timer, it starts when taken
    assert [m.seq for m in state.take_ready(later)] == [1]
