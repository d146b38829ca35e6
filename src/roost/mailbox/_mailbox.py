"""A process's mailbox: exact-topic routing, inbox fallback, retention, optional limit.

Pure state: no scheduler. Each subscription is an unbounded channel, so routing a message
never blocks and per-sender order is the order of ``deliver`` calls. A message whose topic
has a subscription goes there; otherwise to the inbox if it exists; otherwise it is kept,
in arrival order, until a matching ``listen`` or the ``inbox`` takes it. Nothing is dropped:
a dropped subscription hands its unread messages back for re-routing.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any, Final

import attrs

from roost._errors import ChannelClosed, Error, ErrorKind, invalid, shown
from roost._pid import Pid
from roost._text import check_text
from roost.mailbox._backend import Waiter
from roost.mailbox._channel import UNBOUNDED, Channel, _take_receiver

__all__ = ["DEFAULT_WARN_AT", "EVENTS", "INBOX", "Mailbox", "Message", "check_topic"]

INBOX: Final = "@inbox"
EVENTS: Final = "@events"
# Unread messages in one queue of a mailbox past which it logs a WARNING, once
# (``open_node(..., mailbox_warning=...)``).
DEFAULT_WARN_AT: Final = 10_000

log = logging.getLogger("roost.process")


@attrs.frozen(slots=True)
class Message:
    """A message as the inbox (or ``listen(topic, message=True)``) delivers it.

    Attributes:
        topic: the topic it was sent on.
        payload: the value sent.
        sender: the sending process's PID, or None.
    """

    topic: str
    payload: Any = None
    sender: Pid | None = None


def check_topic(topic: object) -> str:
    """Validate a user topic: a non-empty string not starting with '@'."""
    if not isinstance(topic, str) or not topic:
        raise invalid(f"a topic must be a non-empty string, got {shown(topic)}")
    if topic[0] == "@":
        raise invalid(
            f"topic {topic!r} is reserved: topics starting with '@' belong to roost "
            "(use process.inbox() / process.events() to read them)",
            topic=topic,
        )
    return check_text(topic, "a topic")


class _SubChannel(Channel[Any]):
    """An unbounded channel that knows the topic it serves and what it delivers.

    It always buffers whole ``Message``s and unwraps the payload on the way out when
    ``message`` is False, so a dropped subscription can hand back its unread messages with
    their senders intact.
    """

    __slots__ = ("message", "topic")

    def __init__(self, topic: str, message: bool) -> None:
        super().__init__(UNBOUNDED)
        self.topic = topic
        self.message = message

    def put(self, topic: str, payload: Any, sender: Pid | None) -> None:
        """Deliver a message: straight to a waiting receiver, else into the buffer.

        A payload handed straight to a receiver needs no ``Message`` object: the hot path
        of request/reply allocates nothing here.
        """
        if self._recvq is not None:
            receiver = _take_receiver(self)
            if receiver is not None:
                receiver.done = True
                receiver.value = Message(topic, payload, sender) if self.message else payload
                receiver.ok = True
                receiver.wake()
                return
        buf = self._buf
        if buf is None:
            buf = self._buf = deque()
        buf.append(Message(topic, payload, sender))

    def put_message(self, msg: Message) -> None:
        """Deliver an existing ``Message`` (re-routing keeps the original object)."""
        self.put(msg.topic, msg.payload, msg.sender)

    def _try_receive(self) -> tuple[Any, bool] | None:
        # Nobody ever waits to send into an unbounded channel, so only the buffer matters.
        buf = self._buf
        if buf:
            msg = buf.popleft()
            return (msg if self.message else msg.payload), True
        if self._closed:
            return None, False
        return None

    def _try_send(self, value: Any) -> bool:
        # Code may send into its own subscription channel: keep the buffer all Messages.
        if self._closed:
            raise ChannelClosed("send on a closed channel")
        msg = value if isinstance(value, Message) and self.message else None
        if msg is None:
            msg = Message(self.topic, value, None)
        self.put_message(msg)
        return True

    def prepend(self, msgs: list[Message]) -> None:
        """Put ``msgs`` (in order) ahead of everything buffered."""
        if not self._buf:
            for msg in msgs:
                self.put_message(msg)
            return
        self._buf.extendleft(reversed(msgs))


class Mailbox:
    """Routing state for one process.

    Args:
        limit: the most messages (and events) it may hold unread; None for no limit.
        owner: the PID, used in error messages.
        warn_at: how many unread messages one of its queues (a subscription's, or the
            retained ones) may hold before it logs a WARNING, once.
    """

    __slots__ = (
        "_events",
        "_inbox",
        "_pending",
        "_pending_events",
        "_topics",
        "limit",
        "owner",
        "warn_at",
    )

    def __init__(
        self, limit: int | None = None, owner: Pid | None = None, warn_at: int = DEFAULT_WARN_AT
    ) -> None:
        self._inbox: _SubChannel | None = None
        self._events: _SubChannel | None = None
        self._topics: dict[str, _SubChannel] | None = None
        self._pending: deque[Message] | None = None
        self._pending_events = 0  # how many of _pending are events
        self.limit = limit
        self.owner = owner
        self.warn_at = warn_at  # 0 once it warned: it warns once

    def _warn(self, held: int) -> None:
        self.warn_at = 0
        log.warning(
            "the mailbox of %s holds %d unread messages: its process is not reading them "
            "(a topic nobody listens to, or a reader slower than its senders). Nothing is "
            "dropped and each one takes memory; read them, or give the process a "
            "mailbox_limit so that sends past it are refused (this is logged once)",
            self.owner,
            held,
        )

    # -- delivery ------------------------------------------------------------------------

    def deliver(self, topic: str, payload: Any, sender: Pid | None, *, force: bool = False) -> None:
        """Route one message (or, on topic EVENTS, one event).

        Args:
            topic: the message topic, or EVENTS for an event.
            payload: the value.
            sender: who sent it.
            force: bypass the limit (events, and messages handed back for re-routing).

        Raises:
            roost.Error: kind LimitExceeded when the mailbox is full; nothing is queued.
        """
        if self.limit is not None and not force and self.unread() >= self.limit:
            raise Error(
                f"mailbox of {self.owner} is full ({self.limit} unread messages); the "
                "receiver is not keeping up: read faster or raise its mailbox_limit",
                kind=ErrorKind.LIMIT_EXCEEDED,
                retryable=True,
                details={"limit": self.limit},
                pid=self.owner,
            )
        # _route, inlined: one call less on every message.
        if topic == EVENTS:
            sub = self._events
        else:
            topics = self._topics
            sub = topics.get(topic) if topics is not None else None
            if sub is None:
                sub = self._inbox
        if sub is None:
            self._retain(Message(topic, payload, sender))
        elif sub._closed:
            self._drop(sub)
            self.deliver(topic, payload, sender, force=True)
        elif sub._recvq is None:
            sub.put(topic, payload, sender)
            buf = sub._buf
            if buf is not None and len(buf) >= self.warn_at > 0:
                self._warn(len(buf))
        else:
            # A reader is waiting: hand it over (sub.put's first step, inlined for the
            # hottest path of message passing; a payload needs no Message object).
            queue = sub._recvq
            receiver: Waiter | None
            if isinstance(queue, Waiter) and not queue.done:
                receiver = queue  # the usual case: the owner alone, in a plain receive
                sub._recvq = None
            else:
                receiver = _take_receiver(sub)
                if receiver is None:
                    sub.put(topic, payload, sender)
                    return
            receiver.done = True
            receiver.value = Message(topic, payload, sender) if sub.message else payload
            receiver.ok = True
            receiver.wake()

    def _retain(self, msg: Message) -> None:
        """Keep ``msg`` until a subscription takes it."""
        pending = self._pending
        if pending is None:
            pending = self._pending = deque()
        pending.append(msg)
        if msg.topic == EVENTS:
            self._pending_events += 1
        if len(pending) >= self.warn_at > 0:
            self._warn(len(pending))

    def _route(self, topic: str) -> _SubChannel | None:
        if topic == EVENTS:
            return self._events
        topics = self._topics
        if topics is not None:
            sub = topics.get(topic)
            if sub is not None:
                return sub
        return self._inbox

    # -- subscriptions -------------------------------------------------------------------

    def subscribe(self, topic: str, *, message: bool) -> Channel[Any]:
        """Return the channel for ``topic`` (INBOX and EVENTS included), making it once."""
        sub = self._get(topic)
        if sub is not None and not sub._closed:
            if sub.message != message:
                raise invalid(
                    f"topic {topic!r} is already listened to with message={sub.message}; "
                    "unlisten it first to change how it is delivered",
                    topic=topic,
                )
            return sub
        if sub is not None:
            self._drop(sub)
        sub = _SubChannel(topic, message)
        self._set(topic, sub)
        inbox = self._inbox
        if inbox is not None and topic not in (INBOX, EVENTS) and inbox._buf:
            # Unread inbox messages of this topic belong to the new subscription (routing
            # binds when a message is read, as in Wippy): a reader of the topic never sees
            # an older message after a newer one.
            kept = [m for m in inbox._buf if m.topic != topic]
            mine = [m for m in inbox._buf if m.topic == topic]
            inbox._buf.clear()
            inbox._buf.extend(kept)
            for msg in mine:
                sub.put_message(msg)
        self._claim_pending(sub)
        return sub

    def unsubscribe(self, channel: Channel[Any]) -> bool:
        """Drop the subscription that owns ``channel``; its unread messages are re-routed.

        Returns True if a subscription was dropped.
        """
        if isinstance(channel, _SubChannel) and self._get(channel.topic) is channel:
            self._drop(channel)
            return True
        return False

    def subscription(self, topic: str) -> Channel[Any] | None:
        """The channel subscribed to ``topic``, if any."""
        return self._get(topic)

    def unread(self) -> int:
        """Messages and events held: queued unrouted, or buffered in a subscription."""
        held = len(self._pending) if self._pending else 0
        for sub in self._subs():
            held += len(sub)
        return held

    def unread_messages(self) -> int:
        """Like ``unread``, without events: the messages sent to the owner, not yet read."""
        held = self.unread() - self._pending_events
        if self._events is not None:
            held -= len(self._events)
        return held

    def pending(self) -> list[Message]:
        """Messages (and events) that no subscription has taken yet, oldest first."""
        return list(self._pending) if self._pending else []

    def peek_unread(self) -> list[Message]:
        """Every unread message, in ``take_unread``'s order, without removing any."""
        out: list[Message] = []
        for sub in self._subs():
            out.extend(sub._peek())
        if self._pending:
            out.extend(self._pending)
        return out

    def take_unread(self) -> list[Message]:
        """Remove and return every unread message, subscriptions' and retained ones.

        Per topic the order is kept; across topics the order is subscription by
        subscription, then the retained queue.
        """
        out: list[Message] = []
        for sub in self._subs():
            out.extend(sub._drain())
        if self._pending:
            out.extend(self._pending)
            self._pending = None
            self._pending_events = 0
        return out

    def close(self) -> None:
        """Close every subscription channel (the owner has exited)."""
        for sub in self._subs():
            sub.close()
        self._inbox = self._events = None
        self._topics = None
        self._pending = None
        self._pending_events = 0

    # -- internals -----------------------------------------------------------------------

    def _subs(self) -> list[_SubChannel]:
        subs = list(self._topics.values()) if self._topics else []
        if self._inbox is not None:
            subs.append(self._inbox)
        if self._events is not None:
            subs.append(self._events)
        return subs

    def _get(self, topic: str) -> _SubChannel | None:
        if topic == INBOX:
            return self._inbox
        if topic == EVENTS:
            return self._events
        return self._topics.get(topic) if self._topics else None

    def _set(self, topic: str, sub: _SubChannel | None) -> None:
        if topic == INBOX:
            self._inbox = sub
        elif topic == EVENTS:
            self._events = sub
        elif sub is not None:
            if self._topics is None:
                self._topics = {}
            self._topics[topic] = sub
        elif self._topics:
            self._topics.pop(topic, None)

    def _claim_pending(self, sub: _SubChannel) -> None:
        pending = self._pending
        if not pending:
            return
        keep: deque[Message] = deque()
        for msg in pending:
            if self._route(msg.topic) is sub:
                sub.put_message(msg)
            else:
                keep.append(msg)
        self._pending = keep or None
        if sub is self._events:
            self._pending_events = 0  # every retained event went to the events channel

    def _drop(self, sub: _SubChannel) -> None:
        self._set(sub.topic, None)
        leftovers = sub._drain()
        sub.close()
        ahead: dict[int, tuple[_SubChannel, list[Message]]] = {}
        for msg in leftovers:
            target = self._route(msg.topic)
            if target is None or target is self._inbox or target is self._events:
                # The inbox (or the retained queue) holds only *older* messages of this
                # topic: these go after them.
                self.deliver(msg.topic, msg.payload, msg.sender, force=True)
            else:
                # A topic subscription made after these arrived holds only *newer* ones of
                # this topic: these go in front, keeping per-sender order.
                ahead.setdefault(id(target), (target, []))[1].append(msg)
        for target, msgs in ahead.values():
            target.prepend(msgs)
