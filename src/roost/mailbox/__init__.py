"""Mailboxes and channels: plain state machines with a pluggable parking backend."""

from roost.mailbox._backend import (
    Backend,
    Waiter,
    current_backend,
    set_default_backend,
    use_backend,
)
from roost.mailbox._channel import UNBOUNDED, Case, Channel, Selected, new, select
from roost.mailbox._mailbox import EVENTS, INBOX, Mailbox, Message, check_topic

__all__ = [
    "EVENTS",
    "INBOX",
    "UNBOUNDED",
    "Backend",
    "Case",
    "Channel",
    "Mailbox",
    "Message",
    "Selected",
    "Waiter",
    "check_topic",
    "current_backend",
    "new",
    "select",
    "set_default_backend",
    "use_backend",
]
