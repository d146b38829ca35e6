"""State machine: a ``Mailbox`` driven directly (sans-IO) against a plain list model.

The model is the routing contract of DESIGN §2: a message goes to the subscription for
its exact topic, else to the inbox, else it waits in ``pending`` (arrival order); a new
subscription claims the pending messages of its topic (a new inbox: every pending
non-event message); ``unsubscribe`` hands unread messages back for re-routing, in order,
senders kept (those landing on a topic subscription made after they arrived go in front
of it: it holds only newer ones); events travel only on ``EVENTS``; a ``limit`` refuses
(LimitExceeded, nothing queued) once ``unread()`` reaches it, unless the delivery is forced.

Every payload is a unique, increasing integer, so ``sent[payload]`` says which topic and
sender it came from, and order is checkable from the payload alone.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import roost
from roost import ErrorKind, Pid
from roost.mailbox import EVENTS, INBOX, Channel, Mailbox, Message

TOPICS = ("a", "b")
KEYS = (*TOPICS, INBOX, EVENTS)  # everything one can subscribe to
P1 = Pid("local", "sm:processes", "1.00001")
P2 = Pid("local", "sm:processes", "1.00002")
senders = st.sampled_from([P1, P2, None])
keys = st.sampled_from(KEYS)
headroom = st.none() | st.integers(min_value=0, max_value=3)


def buffered(ch: Channel[Any]) -> list[Any]:
    """What a channel would yield, in order, without taking it.

    Payloads here are ints, so a ``Message`` in a payload-only channel's buffer can only be
    its internal wrapper (a subscription may keep whole messages to re-route them later).
    """
    items = list(ch._buf or ())
    if getattr(ch, "message", True):
        return items
    return [item.payload if isinstance(item, Message) else item for item in items]


class ModelSub:
    def __init__(self, message: bool) -> None:
        self.message = message
        self.queue: deque[Message] = deque()

    def shape(self, msg: Message) -> Any:
        """How the real channel carries ``msg``: the Message itself, or only its payload."""
        return msg if self.message else msg.payload


class MailboxMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.box = Mailbox()
        self.counter = 0
        self.sent: dict[int, Message] = {}  # every accepted payload -> its message
        # The model.
        self.subs: dict[str, ModelSub] = {}
        self.pending: list[Message] = []
        self.limit: int | None = None
        # Real side bookkeeping.
        self.chans: dict[str, Channel[Any]] = {}  # key -> the channel subscribe returned
        self.dropped: list[Channel[Any]] = []  # channels already unsubscribed
        self.received: list[tuple[int, int]] = []  # (id(channel), payload), in order

    # -- the model -------------------------------------------------------------------

    def model_route(self, topic: str) -> ModelSub | None:
        if topic == EVENTS:
            return self.subs.get(EVENTS)
        return self.subs.get(topic) or self.subs.get(INBOX)

    def model_deliver(self, msg: Message) -> None:
        sub = self.model_route(msg.topic)
        if sub is None:
            self.pending.append(msg)
        else:
            sub.queue.append(msg)

    def model_unread(self) -> int:
        return len(self.pending) + sum(len(sub.queue) for sub in self.subs.values())

    def model_claims(self, key: str, msg: Message) -> bool:
        if key == INBOX:
            return msg.topic != EVENTS
        return msg.topic == key

    # -- rules -----------------------------------------------------------------------

    def _deliver(self, topic: str, sender: Pid | None, force: bool) -> None:
        self.counter += 1
        payload = self.counter
        msg = Message(topic, payload, sender)
        refuse = not force and self.limit is not None and self.model_unread() >= self.limit
        if refuse:
            before = self.snapshot()
            with pytest.raises(roost.Error) as info:
                self.box.deliver(topic, payload, sender, force=force)
            assert info.value.kind is ErrorKind.LIMIT_EXCEEDED
            assert self.snapshot() == before, "a refused delivery changed the mailbox"
            return
        self.box.deliver(topic, payload, sender, force=force)
        self.sent[payload] = msg
        self.model_deliver(msg)

    @rule(topic=st.sampled_from([*TOPICS, EVENTS]), sender=senders, force=st.booleans())
    def deliver(self, topic: str, sender: Pid | None, force: bool) -> None:
        if topic == EVENTS:
            sender = None  # the node posts events with no sender (and forced, but either works)
        self._deliver(topic, sender, force)

    @rule(key=keys, message=st.booleans())
    def subscribe(self, key: str, message: bool) -> None:
        # process.inbox() asks for Messages, process.events() for bare events.
        if key == INBOX:
            message = True
        elif key == EVENTS:
            message = False
        existing = self.subs.get(key)
        if existing is not None and existing.message != message:
            before = self.snapshot()
            with pytest.raises(roost.Error) as info:
                self.box.subscribe(key, message=message)
            assert info.value.kind is ErrorKind.INVALID
            assert self.snapshot() == before
            return
        ch = self.box.subscribe(key, message=message)
        if existing is not None:
            assert ch is self.chans[key], "subscribing twice must return the same channel"
            return
        assert key not in self.chans
        self.chans[key] = ch
        sub = self.subs[key] = ModelSub(message)
        inbox = self.subs.get(INBOX)
        if key not in (INBOX, EVENTS) and inbox is not None:
            # Routing binds when a message is read: unread inbox messages of this topic
            # move to the new subscription, in order.
            sub.queue.extend(m for m in inbox.queue if m.topic == key)
            inbox.queue = deque(m for m in inbox.queue if m.topic != key)
        keep = []
        for msg in self.pending:
            (sub.queue if self.model_claims(key, msg) else keep).append(msg)
        self.pending = keep

    @rule(key=st.sampled_from([*KEYS, "stale"]))
    def unsubscribe(self, key: str) -> None:
        if key == "stale":
            self.unsubscribe_stale()
            return
        ch = self.chans.pop(key, None)
        if ch is None:
            assert self.box.subscription(key) is None
            return
        assert self.box.unsubscribe(ch) is True
        self.dropped.append(ch)
        sub = self.subs.pop(key)
        ahead: dict[str, list[Message]] = {}
        for msg in sub.queue:  # handed back, in order, and re-routed (never refused)
            target = self.model_route(msg.topic)
            if target is None or target is self.subs.get(INBOX):
                self.model_deliver(msg)
            else:  # a topic subscription made since: it holds only newer ones
                ahead.setdefault(msg.topic, []).append(msg)
        for topic, msgs in ahead.items():
            self.subs[topic].queue.extendleft(reversed(msgs))
        assert ch.closed
        assert len(ch) == 0

    def unsubscribe_stale(self) -> None:
        """Dropping a channel that is not (or no longer) a subscription changes nothing."""
        ch = self.dropped[-1] if self.dropped else Channel(3)
        before = self.snapshot()
        assert self.box.unsubscribe(ch) is False
        assert self.snapshot() == before
        if ch.closed:
            assert ch._try_receive() == (None, False)

    @rule(key=keys)
    def receive(self, key: str) -> None:
        ch = self.chans.get(key)
        if ch is None:
            assert self.box.subscription(key) is None
            return
        sub = self.subs[key]
        got = ch._try_receive()
        if not sub.queue:
            assert got is None, f"{key!r} gave {got!r}, but the model holds nothing for it"
            return
        expected = sub.shape(sub.queue.popleft())
        assert got == (expected, True)
        self.received.append((id(ch), got[0].payload if sub.message else got[0]))

    @rule(headroom=headroom)
    def set_limit(self, headroom: int | None) -> None:
        """Limit the mailbox to what it holds now plus ``headroom`` (None: no limit)."""
        limit = None if headroom is None else self.model_unread() + headroom
        self.box.limit = self.limit = limit

    # -- invariants ------------------------------------------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        return (
            self.box.pending(),
            {key: buffered(ch) for key, ch in self.chans.items()},
            self.box.unread(),
        )

    @invariant()
    def matches_model(self) -> None:
        assert self.box.pending() == self.pending
        for key in KEYS:
            ch = self.box.subscription(key)
            assert ch is self.chans.get(key)
            if ch is not None:
                sub = self.subs[key]
                assert buffered(ch) == [sub.shape(msg) for msg in sub.queue], key
                assert len(ch) == len(sub.queue)
                assert not ch.closed

    @invariant()
    def unread_is_the_model_count(self) -> None:
        assert self.box.unread() == self.model_unread()

    @invariant()
    def nothing_lost_or_duplicated(self) -> None:
        held = [msg.payload for msg in self.box.pending()]
        for key, ch in self.chans.items():
            message = self.subs[key].message
            held += [item.payload if message else item for item in buffered(ch)]
        everywhere = Counter(held + [payload for _, payload in self.received])
        assert everywhere == Counter(self.sent.keys()), "a payload was lost or duplicated"

    @invariant()
    def fifo_per_sender_and_topic_in_each_channel(self) -> None:
        """What each channel yields (read so far, then still buffered) keeps send order.

        Order is checked per channel: a message that reached the inbox before
        ``listen(topic)`` stays there (docs/processes.md), so a reader of both channels may
        see it after newer ones on the topic channel; that interleaving is its own choice.
        """
        streams: dict[int, list[int]] = {}
        for chan_id, payload in self.received:
            streams.setdefault(chan_id, []).append(payload)
        for key, ch in self.chans.items():
            message = self.subs[key].message
            held = [item.payload if message else item for item in buffered(ch)]
            streams.setdefault(id(ch), []).extend(held)
        for stream in streams.values():
            last: dict[tuple[Pid | None, str], int] = {}
            for payload in stream:
                origin = self.sent[payload]
                key = (origin.sender, origin.topic)
                assert payload > last.get(key, 0), (
                    f"a channel yields payload {payload} after {last[key]}, both from "
                    f"{origin.sender} on {origin.topic!r}: {stream}"
                )
                last[key] = payload

    @invariant()
    def message_channels_carry_the_original_sender_and_topic(self) -> None:
        for key, ch in self.chans.items():
            if self.subs[key].message:
                for msg in buffered(ch):
                    assert msg == self.sent[msg.payload], f"{key!r} holds {msg!r}"
        for msg in self.box.pending():
            assert msg == self.sent[msg.payload], f"pending holds {msg!r}"

    @invariant()
    def events_only_on_the_events_channel(self) -> None:
        for key, ch in self.chans.items():
            message = self.subs[key].message
            for item in buffered(ch):
                topic = self.sent[item.payload if message else item].topic
                assert (topic == EVENTS) == (key == EVENTS), f"{topic!r} reached {key!r}"


TestMailboxMachine = MailboxMachine.TestCase


# -- the shortest cases behind the machine's ordering and sender checks --------------------
# (hypothesis rarely strings these together by chance, so they are pinned here too)


def drain(ch: Channel[Any]) -> list[Any]:
    out = []
    while (got := ch._try_receive()) is not None and got[1]:
        out.append(got[0])
    return out


def test_dropped_payload_subscription_hands_back_messages_with_their_sender():
    box = Mailbox()
    topic = box.subscribe("a", message=False)
    box.deliver("a", 1, P1)
    box.unsubscribe(topic)
    assert box.pending() == [Message("a", 1, P1)]
    assert drain(box.subscribe(INBOX, message=True)) == [Message("a", 1, P1)]


def test_dropped_inbox_puts_older_messages_before_newer_ones_on_a_topic():
    box = Mailbox()
    inbox = box.subscribe(INBOX, message=True)
    box.deliver("a", 1, P1)  # no listener for "a" yet: the inbox takes it
    topic = box.subscribe("a", message=False)
    box.deliver("a", 2, P1)
    box.unsubscribe(inbox)
    assert drain(topic) == [1, 2]


def test_a_topic_channel_never_yields_an_older_message_after_a_newer_one():
    box = Mailbox()
    inbox = box.subscribe(INBOX, message=True)
    box.deliver("a", 1, P1)
    topic = box.subscribe("a", message=False)
    box.deliver("a", 2, P1)
    yielded = drain(topic)  # a reader of "a" alone...
    box.unsubscribe(inbox)
    yielded += drain(topic)  # ...must never see P1's 1 after P1's 2
    assert yielded == sorted(yielded)
