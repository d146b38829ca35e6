"""Go-style channels and ``select``, as plain state plus a pluggable parking backend."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any, Generic, TypeVar

import attrs

from roost._errors import ChannelClosed, Error, invalid
from roost.mailbox import _backend
from roost.mailbox._backend import Waiter, current_backend

__all__ = ["UNBOUNDED", "Case", "Channel", "Selected", "new", "select"]

T = TypeVar("T")
UNBOUNDED = sys.maxsize
# The backend override, read directly by receive (current_backend() is a call per message).
_override_get = _backend._override.get

# Queue entries. A receiver is its waiter (a plain receive, case index 0) or, for a select
# case, (waiter, case index); a sender is (waiter, case index, value). A receive queue is
# None, one entry, or a list of entries in arrival order: nearly every channel has at most
# one receiver waiting (a mailbox has its owner), and an idle process parked on its inbox
# should not carry a list and a tuple for it.
_RecvEntry = Waiter | tuple[Waiter, int]
_RecvQueue = _RecvEntry | list[_RecvEntry]
_SendEntry = tuple[Waiter, int, Any]


class Channel(Generic[T]):
    """A Go-style channel: unbuffered (rendezvous) by default, or buffered.

    ``await ch.send(v)`` blocks until a receiver takes ``v`` (or buffer space frees up);
    ``await ch.receive()`` blocks until a value arrives and raises ``roost.ChannelClosed``
    once the channel is closed and drained. Values buffered before ``close()`` stay
    readable. Select over channels with ``channel.select``.
    """

    __slots__ = ("_buf", "_closed", "_recvq", "_sendq", "_size")

    def __init__(self, size: int = 0) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise invalid(f"channel size must be an int >= 0, got {size!r}")
        self._size = size
        # Created on first use: most channels never hold a waiting sender, and an idle
        # process's inbox should cost as little memory as possible.
        self._buf: deque[T] | None = None
        self._recvq: _RecvQueue | None = None
        self._sendq: list[_SendEntry] | None = None
        self._closed = False

    def __repr__(self) -> str:
        size = "unbounded" if self._size == UNBOUNDED else str(self._size)
        state = "closed" if self._closed else "open"
        return f"<roost.Channel size={size} buffered={len(self)} {state}>"

    def __len__(self) -> int:
        """Number of values buffered now."""
        return len(self._buf) if self._buf else 0

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has been called."""
        return self._closed

    def close(self) -> None:
        """Close the channel: blocked senders fail, blocked receivers see it closed.

        Closing twice is a no-op.
        """
        if self._closed:
            return
        self._closed = True
        sendq, self._sendq = self._sendq, None
        while True:
            receiver = _take_receiver(self)
            if receiver is None:
                break
            _finish(receiver, None, ok=False)
        for waiter, index, _value in sendq or ():
            if not waiter.done:
                _complete(waiter, index, None, ok=False)

    def case_send(self, value: T) -> Case:
        """A select case that sends ``value``."""
        return Case(channel=self, is_send=True, value=value)

    def case_receive(self) -> Case:
        """A select case that receives a value."""
        return Case(channel=self, is_send=False)

    async def send(self, value: T) -> None:
        """Send ``value``; blocks until it is taken or buffered.

        Raises:
            roost.ChannelClosed: the channel is (or becomes) closed.
        """
        backend = current_backend()
        await backend.checkpoint_if_cancelled()
        if self._try_send(value):
            await backend.cancel_shielded_checkpoint()
            return
        waiter = backend.new_waiter()
        entry = (waiter, 0, value)
        self._send_queue().append(entry)
        try:
            await backend.park(waiter)
        except BaseException:
            _discard(self._sendq, entry)
            raise
        if not waiter.ok:
            raise ChannelClosed("send on a closed channel")

    async def receive(self) -> T:
        """Receive the next value.

        Raises:
            roost.ChannelClosed: the channel is closed and drained.
        """
        # Kept in one frame (no helper coroutine): an idle process sits here, and every
        # coroutine frame on its stack costs memory. current_backend(), inlined.
        backend = _override_get() or _backend._default or current_backend()
        if self._buf or self._sendq or self._closed:
            await backend.checkpoint_if_cancelled()
            polled = self._try_receive()
            if polled is not None:
                await backend.cancel_shielded_checkpoint()
                if not polled[1]:
                    raise ChannelClosed("receive on a closed and drained channel")
                return polled[0]  # type: ignore[no-any-return]
        # Nothing to take: park. Parking is itself a cancel point (a cancelled caller is
        # aborted at once, before anything could be handed to it), so the separate
        # cancellation check above is only needed before taking a value.
        waiter = backend.new_waiter()
        if self._recvq is None:
            self._recvq = waiter
        else:
            _add_receiver(self, waiter)
        try:
            await backend.park(waiter)
        except BaseException:
            _drop_receiver(self, waiter)
            raise
        if not waiter.ok:
            raise ChannelClosed("receive on a closed and drained channel")
        return waiter.value  # type: ignore[no-any-return]

    def __aiter__(self) -> Channel[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.receive()
        except ChannelClosed:
            raise StopAsyncIteration from None

    # -- non-blocking core, shared by send/receive/select and the mailbox ----------------

    def _try_send(self, value: Any) -> bool:
        """Hand ``value`` to a waiting receiver or buffer it; False if it must wait."""
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        if self._recvq is not None:
            receiver = _take_receiver(self)
            if receiver is not None:
                _finish(receiver, value, ok=True)
                return True
        if self._size:
            buf = self._buf
            if buf is None:
                buf = self._buf = deque()
            if len(buf) < self._size:
                buf.append(value)
                return True
        return False

    def _try_receive(self) -> tuple[Any, bool] | None:
        """Take a value (value, True), see the close (None, False), or None to wait."""
        buf = self._buf
        if buf:
            value = buf.popleft()
            sender = self._pop_sender()
            if sender is not None:
                buf.append(sender[2])
                _complete(sender[0], sender[1], None, ok=True)
            return value, True
        sender = self._pop_sender()
        if sender is not None:
            _complete(sender[0], sender[1], None, ok=True)
            return sender[2], True
        if self._closed:
            return None, False
        return None

    def _send_queue(self) -> list[_SendEntry]:
        sendq = self._sendq
        if sendq is None:
            sendq = self._sendq = []
        return sendq

    def _pop_sender(self) -> _SendEntry | None:
        sendq = self._sendq
        while sendq:
            entry = sendq.pop(0)
            if not entry[0].done:
                return entry
        return None

    def _peek(self) -> list[Any]:
        """Every buffered value, oldest first, left in place."""
        return list(self._buf) if self._buf else []

    def _drain(self) -> list[Any]:
        """Remove and return every buffered value (used when a subscription is dropped)."""
        buf = self._buf
        if not buf:
            return []
        values = list(buf)
        buf.clear()
        return values


def _complete(waiter: Waiter, index: int, value: Any, *, ok: bool) -> None:
    waiter.index = index
    _finish(waiter, value, ok=ok)


def _finish(waiter: Waiter, value: Any, *, ok: bool) -> None:
    """Complete ``waiter`` (its case index already set) and wake it."""
    waiter.done = True
    waiter.value = value
    waiter.ok = ok
    waiter.wake()


def _add_receiver(chan: Channel[Any], entry: _RecvEntry) -> None:
    """Queue a receiver behind those already waiting."""
    queue = chan._recvq
    if queue is None:
        chan._recvq = entry
    elif isinstance(queue, list):
        queue.append(entry)
    else:
        chan._recvq = [queue, entry]


def _take_receiver(chan: Channel[Any]) -> Waiter | None:
    """Dequeue the first receiver still waiting, its case index set; None if there is none.

    Receivers already done (completed through another select case, or aborted) are
    dropped on the way.
    """
    while True:
        queue = chan._recvq
        if queue is None:
            return None
        entry: _RecvEntry
        if isinstance(queue, list):
            entry = queue.pop(0)
            if not queue:
                chan._recvq = None
        else:
            entry = queue
            chan._recvq = None
        if isinstance(entry, tuple):
            waiter, index = entry
            if not waiter.done:
                waiter.index = index
                return waiter
        elif not entry.done:
            return entry  # a plain receive: its index is 0 already


def _drop_receiver(chan: Channel[Any], entry: _RecvEntry) -> None:
    """Remove a receiver that stopped waiting (it was cancelled, or its select is over)."""
    queue = chan._recvq
    if queue is entry:
        chan._recvq = None
    elif isinstance(queue, list):
        _discard(queue, entry)
        if not queue:
            chan._recvq = None


def _discard(queue: list[Any] | None, entry: Any) -> None:
    if not queue:
        return
    for i, item in enumerate(queue):
        if item is entry:
            del queue[i]
            return


@attrs.frozen(kw_only=True)
class Case:
    """One arm of a ``select``: a send of ``value`` or a receive on ``channel``."""

    channel: Channel[Any]
    is_send: bool
    value: Any = None


class Selected:
    """The outcome of ``select``.

    A plain slotted class rather than an attrs record: one is built per ``select``, on the
    hottest path of message loops, and attrs' frozen ``__init__`` costs twice as much.

    Attributes:
        channel: the channel whose case won (None for ``default``).
        value: the received value (None for a send case or a closed channel).
        ok: False when the winning receive saw a closed, drained channel.
        default: True when no case was ready and ``default=True`` was given.
        index: the position of the winning case among the arguments (-1 for default).
    """

    __slots__ = ("channel", "default", "index", "ok", "value")
    __match_args__ = ("channel", "value", "ok", "default", "index")

    def __init__(
        self,
        *,
        channel: Channel[Any] | None,
        value: Any = None,
        ok: bool = True,
        default: bool = False,
        index: int = -1,
    ) -> None:
        self.channel = channel
        self.value = value
        self.ok = ok
        self.default = default
        self.index = index

    def _key(self) -> tuple[Any, ...]:
        return (id(self.channel), self.value, self.ok, self.default, self.index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Selected):
            return NotImplemented
        return self.channel is other.channel and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # mutable-looking value objects do not hash

    def __repr__(self) -> str:
        return (
            f"Selected(channel={self.channel!r}, value={self.value!r}, ok={self.ok}, "
            f"default={self.default}, index={self.index})"
        )


def new(size: int = 0) -> Channel[Any]:
    """Create a channel; unbuffered (rendezvous) by default."""
    return Channel(size)


def _bad_case(case: object) -> Error:
    return invalid(
        "select takes cases made with ch.case_receive() / ch.case_send(v) "
        f"(or channels, meaning receive); got {type(case).__name__}"
    )


def _poll(cases: tuple[Case | Channel[Any], ...]) -> Selected | None:
    """Try every case in argument order without blocking; the first ready one wins."""
    for index, case in enumerate(cases):
        if isinstance(case, Channel):
            polled = case._try_receive()
            if polled is not None:
                return Selected(channel=case, value=polled[0], ok=polled[1], index=index)
        elif isinstance(case, Case):
            chan = case.channel
            if case.is_send:
                if chan._try_send(case.value):
                    return Selected(channel=chan, ok=True, index=index)
            else:
                polled = chan._try_receive()
                if polled is not None:
                    return Selected(channel=chan, value=polled[0], ok=polled[1], index=index)
        else:
            raise _bad_case(case)
    return None


def _enqueue(
    cases: tuple[Case | Channel[Any], ...], waiter: Waiter
) -> list[tuple[Channel[Any], Any]]:
    entries: list[tuple[Channel[Any], Any]] = []
    for index, case in enumerate(cases):
        if isinstance(case, Case) and case.is_send:
            send_entry: _SendEntry = (waiter, index, case.value)
            case.channel._send_queue().append(send_entry)
            entries.append((case.channel, send_entry))
        else:
            chan = case if isinstance(case, Channel) else case.channel
            recv_entry = (waiter, index)
            _add_receiver(chan, recv_entry)
            entries.append((chan, recv_entry))
    return entries


async def select(*cases: Case | Channel[Any], default: bool = False) -> Selected:
    """Wait for the first ready case; ready cases win in argument order.

    Args:
        cases: ``ch.case_receive()``, ``ch.case_send(v)``, or a channel (a receive).
        default: return at once with ``Selected(default=True)`` when nothing is ready.

    Raises:
        roost.ChannelClosed: a send case's channel is closed.
        roost.Error: kind Invalid, for no cases and no default, or a non-case argument.
    """
    if not cases and not default:
        raise invalid("select needs at least one case, or default=True")
    backend = current_backend()
    await backend.checkpoint_if_cancelled()
    ready = _poll(cases)
    if ready is not None or default:
        await backend.cancel_shielded_checkpoint()
        return ready or Selected(channel=None, default=True, ok=True)
    waiter = backend.new_waiter()
    entries = _enqueue(cases, waiter)
    try:
        await backend.park(waiter)
    finally:
        for chan, entry in entries:
            # close() may have replaced the queues; the entry is then already gone.
            if len(entry) == 3:
                _discard(chan._sendq, entry)
            else:
                _drop_receiver(chan, entry)
    winner = cases[waiter.index]
    if isinstance(winner, Case) and winner.is_send:
        if not waiter.ok:
            raise ChannelClosed("select sent on a channel that was closed")
        return Selected(channel=winner.channel, ok=True, index=waiter.index)
    chan = winner if isinstance(winner, Channel) else winner.channel
    return Selected(channel=chan, value=waiter.value, ok=waiter.ok, index=waiter.index)
