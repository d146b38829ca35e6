"""Mailbox routing rules at the sans-IO level (the state machine covers them at random)."""

import pytest

import roost
from roost.mailbox import EVENTS, INBOX, Mailbox, Message

ALICE = roost.Pid("local", "t:processes", "1.00001")


def drain(ch):
    out = []
    while (polled := ch._try_receive()) is not None and polled[1]:
        out.append(polled[0])
    return out


def test_routing_inbox_fallback_and_retention():
    box = Mailbox()
    box.deliver("a", 1, ALICE)
    box.deliver("b", 2, ALICE)
    assert [m.payload for m in box.pending()] == [1, 2]
    a = box.subscribe("a", message=False)
    assert drain(a) == [1]
    inbox = box.subscribe(INBOX, message=True)
    assert drain(inbox) == [Message("b", 2, ALICE)]
    box.deliver("c", 3, ALICE)
    assert drain(inbox) == [Message("c", 3, ALICE)]
    box.deliver(EVENTS, "ev", None)
    assert box.pending() == [Message(EVENTS, "ev", None)]  # events never go to the inbox


def test_rerouted_messages_keep_per_sender_order_and_sender():
    box = Mailbox()
    inbox = box.subscribe(INBOX, message=True)
    box.deliver("a", 1, ALICE)  # nobody listens to "a" yet: the inbox takes it
    a = box.subscribe("a", message=False)
    box.deliver("a", 2, ALICE)
    box.unsubscribe(inbox)  # its unread "a" message is older than what "a" holds
    assert drain(a) == [1, 2]
    listened = box.subscribe("b", message=False)
    box.deliver("b", 3, ALICE)
    box.unsubscribe(listened)
    inbox = box.subscribe(INBOX, message=True)
    assert drain(inbox) == [Message("b", 3, ALICE)]  # the sender survives re-routing


def test_limit_refuses_and_keeps_nothing():
    box = Mailbox(limit=2, owner=ALICE)
    box.deliver("a", 1, None)
    box.deliver("a", 2, None)
    with pytest.raises(roost.Error) as info:
        box.deliver("a", 3, None)
    assert info.value.kind is roost.ErrorKind.LIMIT_EXCEEDED
    assert box.unread() == 2
    box.deliver(EVENTS, "exit", None, force=True)  # events are never refused
    assert box.unread() == 3


def test_sending_into_a_subscription_channel_is_delivered():
    box = Mailbox()
    a = box.subscribe("a", message=False)
    assert a._try_send("local")
    assert drain(a) == ["local"]
