"""Which messages of one queue may run now: the sans-IO scheduling core (no trio).

Standard queues run ready messages in enqueue order, up to ``concurrency`` at once. FIFO
queues keep strict order per group: only a group's oldest message may run, one at a time,
so a failing message blocks its group through its backoff (later messages of the group
never overtake it), while different groups run concurrently up to ``concurrency``.
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections.abc import Iterator

from roost.queues._records import QueueMessage
from roost.queues._spec import QueueSpec

__all__ = ["QueueState"]


class QueueState:
    """The pending and running messages of one queue."""

    def __init__(self, spec: QueueSpec) -> None:
        self.spec = spec
        self.pending: dict[int, QueueMessage] = {}  # by seq; dicts keep insertion order
        self.running: dict[int, QueueMessage] = {}
        self._busy_groups: set[str] = set()
        self._sorted = True
        # (not_before, seq) of waiting messages; stale entries are dropped when seen.
        self._waits: list[tuple[dt.datetime, int]] = []

    def add(self, message: QueueMessage) -> None:
        """A new (or retried, or recovered) message."""
        if self.pending and message.seq < next(reversed(self.pending)):
            self._sorted = False
        self.pending[message.seq] = message
        if message.not_before is not None:
            heapq.heappush(self._waits, (message.not_before, message.seq))

    def take_ready(self, now: dt.datetime) -> list[QueueMessage]:
        """Messages to start now (they move to running); respects order and concurrency."""
        room = self.spec.concurrency - len(self.running)
        out: list[QueueMessage] = []
        if room <= 0:
            return out
        blocked: set[str] = set(self._busy_groups)
        for message in self._in_order():
            group = message.group
            if group is not None and group in blocked:
                continue
            if message.not_before is not None and message.not_before > now:
                if group is not None:
                    blocked.add(group)  # the head waits out its backoff: the group waits
                continue
            out.append(message)
            if group is not None:
                blocked.add(group)
            if len(out) == room:
                break
        for message in out:
            del self.pending[message.seq]
            self.running[message.seq] = message
            if message.group is not None:
                self._busy_groups.add(message.group)
        return out

    def finished(self, message: QueueMessage, retry: QueueMessage | None = None) -> None:
        """``message`` ended: acknowledged or dead-lettered (None), or to be retried."""
        self.running.pop(message.seq, None)
        if message.group is not None:
            self._busy_groups.discard(message.group)
        if retry is not None:
            self.add(retry)

    def next_wakeup(self, now: dt.datetime) -> dt.datetime | None:
        """The earliest time after ``now`` a waiting message becomes ready (None: none).

        A message already due but not started waits for a slot or its group, which a
        finishing message frees: that wakes the dispatcher, not a timer.
        """
        waits = self._waits
        while waits:
            when, seq = waits[0]
            message = self.pending.get(seq)
            if message is not None and message.not_before == when and when > now:
                return when
            heapq.heappop(waits)  # started, re-added with another time, or already due
        return None

    def _in_order(self) -> Iterator[QueueMessage]:
        if not self._sorted:
            self.pending = dict(sorted(self.pending.items()))
            self._sorted = True
        return iter(self.pending.values())  # take_ready changes ``pending`` only after
