"""The ``process`` calls that do not spawn: messaging, events, monitors, links, names."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

import trio

from roost._duration import Duration, parse_duration
from roost._errors import Error, ErrorKind, invalid, not_found
from roost._pid import Pid
from roost._security import (
    SECURITY_KEY,
    Actor,
    Scope,
    actor_of,
    make_ticket,
    scope_of,
    visible,
)
from roost.actors._authorize import authorize, is_secured
from roost.actors._current import (
    activity_context,
    current_any,
    current_process,
    maybe_current_process,
)
from roost.actors._events import Event
from roost.actors._registry import check_name
from roost.actors._upgrade import Upgrade
from roost.mailbox._channel import Channel
from roost.mailbox._mailbox import EVENTS, INBOX, Message, check_topic
from roost.workflow._host_protocol import CallingHost

if TYPE_CHECKING:
    from roost.workflow._host_protocol import Durable, WorkflowHost

_log = logging.getLogger("roost.process")

__all__ = [
    "Receipt",
    "Registry",
    "call",
    "cancel",
    "coroutine_spawn",
    "ctx_all",
    "ctx_get",
    "events",
    "get_options",
    "id",
    "inbox",
    "link",
    "listen",
    "monitor",
    "pid",
    "registry",
    "send",
    "set_options",
    "terminate",
    "unlink",
    "unlisten",
    "unmonitor",
    "upgrade",
]


class Receipt:
    """The acknowledgement of a send; ``await`` it to wait until the send is accepted.

    For plain processes a send is accepted when ``send`` returns; for a workflow
    destination, awaiting waits until the message is durably in its history.
    """

    __slots__ = ()

    @property
    def accepted(self) -> bool:
        """Whether the send has been accepted (always, for an in-memory destination)."""
        return True

    def __await__(self) -> Generator[Any, None, None]:
        # Delegating to the checkpoint coroutine makes awaiting a receipt a checkpoint.
        return trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105 - awaited via __await__

    def __repr__(self) -> str:
        return "<roost.Receipt accepted>"


_ACCEPTED = Receipt()
# The current process, read without a Python call: `send` is the hottest call there is.
_get_current = maybe_current_process


class _RecordedReceipt(Receipt):
    """A send from a workflow: part of its own commit, so awaiting it returns at once."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that never yields: no checkpoint on the workflow driver


_RECORDED = _RecordedReceipt()


class DurableReceipt(Receipt):
    """A send to a workflow: awaiting it waits until the message is in its history."""

    __slots__ = ("_done",)

    def __init__(self, done: Durable) -> None:
        self._done = done

    @property
    def accepted(self) -> bool:
        """Whether the message is durably in the workflow's history yet."""
        return self._done.is_set()

    def __await__(self) -> Generator[Any, None, None]:
        return self._done.wait().__await__()

    def __repr__(self) -> str:
        state = "accepted" if self._done.is_set() else "pending"
        return f"<roost.Receipt {state}>"


def send(dest: Pid | str, topic: str, payload: Any = None) -> Receipt:
    """Send ``payload`` on ``topic`` to ``dest`` without blocking.

    Raises:
        roost.Error: Invalid for a bad topic or destination; NotFound when ``dest`` is a
            name nobody holds or a PID that is not alive; LimitExceeded when the
            receiver's mailbox is full.
    """
    proc = _get_current()
    if proc is None:
        proc = current_any("process.send")  # raises: not inside a process
    if topic.__class__ is not str or not topic or topic[0] == "@":
        check_topic(topic)
    if proc.workflow is not None:
        if proc.context or (proc.node is not None and proc.node.app.secure):
            authorize(proc, "process.send", dest)
        proc.workflow.send(_workflow_dest(dest), topic, payload)
        return _RECORDED
    node = proc.node
    target = node.procs.get(dest) if dest.__class__ is Pid else None
    if target is None:
        pid_ = node.resolve(dest)
        if proc.context or node.app.secure:
            authorize(proc, "process.send", pid_)
        host = node.workflow_host_of(pid_)
        if host is not None:
            return DurableReceipt(_signal(host, proc, proc.pid, pid_, (topic, payload)))
        target = node.live(pid_)
    elif proc.context or node.app.secure:
        authorize(proc, "process.send", target.pid)
    box = target.mailbox
    if box is None:
        box = target.get_mailbox()
    box.deliver(topic, payload, proc.pid)
    return _ACCEPTED


def _signal(
    host: WorkflowHost, proc: Any, sender: Pid, dest: Pid, message: tuple[str, Any]
) -> Durable:
    """``host.signal``, with the relay ticket of ``proc``'s actor when the node has a ring.

    Without a ring no ticket is passed: a host written before tickets keeps working.
    """
    topic, payload = message
    ring = proc.node.settings.get("keyring")
    if ring is None:
        return host.signal(sender, dest, topic, payload)
    actor = actor_of(proc.context)
    ticket = make_ticket(ring, dest.id, topic, actor.id if actor is not None else None)
    return host.signal(sender, dest, topic, payload, ticket=ticket)


def _workflow_dest(dest: object) -> Pid | str:
    # A name is resolved when the message is delivered, never during replay.
    if isinstance(dest, Pid):
        return dest
    if isinstance(dest, str) and dest[:1] == "{":
        return Pid.parse(dest)
    if isinstance(dest, str):
        return check_name(dest)
    raise invalid(f"a destination is a Pid, a PID string or a registered name, got {dest!r}")


async def call(
    dest: Pid | str,
    topic: str,
    payload: Any = None,
    *,
    timeout: Duration = "5s",  # noqa: ASYNC109 - the issue's API names this keyword
) -> Any:
    """Send a request and wait for its reply (request/response, Wippy's update protocol).

    The request's sender is a private reply address, so concurrent calls never mix. The
    receiver replies to ``msg.sender``: optionally ``"ack"`` first, then ``"ok"`` with the
    result or ``"error"``; ``"nak"`` rejects the request. A reply on any other topic is the
    result.

    Raises:
        roost.Error: Timeout when no final reply came in time; Conflict for a ``nak``
            (its reason in details); the error sent with ``"error"``; NotFound when ``dest``
            is not alive.
    """
    check_topic(topic)
    seconds = parse_duration(timeout, what="call timeout", allow_zero=False)
    caller = current_any("process.call")
    if caller.workflow is not None:  # durable: the request and replies are recorded
        if caller.context or (caller.node is not None and caller.node.app.secure):
            authorize(caller, "process.call", dest)
        reply = await caller.workflow.call(_workflow_dest(dest), topic, payload, seconds)
        if reply is None:
            raise _call_timeout(dest, topic, seconds)
        return _reply_value(dest, topic, reply)
    proc = current_process("process.call")
    node = proc.node
    if proc.context or node.app.secure:
        authorize(proc, "process.call", node.resolve(dest))
    alias = node.attach(proc.context)  # a mailbox-only process: the reply address
    try:
        target = node.resolve(dest)
        host = node.workflow_host_of(target)
        calling: object = host
        if isinstance(calling, CallingHost):  # the host carries the call and its final reply
            final: Message | None = None
            with trio.move_on_after(seconds):
                ring = node.settings.get("keyring")
                actor = actor_of(proc.context)
                ticket = (
                    make_ticket(ring, target.id, topic, actor.id if actor is not None else None)
                    if ring is not None
                    else None
                )
                answer, value = await calling.call(alias.pid, target, topic, payload, ticket)
                final = Message(answer, value, target)
            if final is None:
                raise _call_timeout(target, topic, seconds)
            return _reply_value(target, topic, final)
        if host is not None:
            await DurableReceipt(_signal(host, proc, alias.pid, target, (topic, payload)))
        else:
            node.live(target).get_mailbox().deliver(topic, payload, alias.pid)
        replies = alias.get_mailbox().subscribe(INBOX, message=True)
        # A secured caller takes replies only from what it called: the reply address is
        # a PID another process can guess, and a forged reply would be its result.
        only_from = target if is_secured(proc) else None
        with trio.move_on_after(seconds):
            while True:
                reply = await replies.receive()
                if only_from is not None and reply.sender != only_from:
                    _log.warning(
                        "process.call %r to %s: dropped a reply from %s (only %s may reply)",
                        topic,
                        target,
                        reply.sender,
                        target,
                    )
                    continue
                if reply.topic != "ack":
                    return _reply_value(target, topic, reply)
        raise _call_timeout(target, topic, seconds)
    finally:
        node.exit(alias, None, None)


def _call_timeout(target: object, topic: str, seconds: float) -> Error:
    return Error(
        f"no reply to {topic!r} from {target} within {seconds:g}s",
        kind=ErrorKind.TIMEOUT,
        details={"dest": str(target), "topic": topic, "timeout": seconds},
    )


def _reply_value(target: object, topic: str, reply: Message) -> Any:
    match reply.topic:
        case "nak":
            raise Error(
                f"{target} rejected {topic!r}: {reply.payload}",
                kind=ErrorKind.CONFLICT,
                details={"reason": reply.payload, "dest": str(target), "topic": topic},
            )
        case "error":
            if isinstance(reply.payload, Error):
                raise reply.payload.clone()
            raise Error(
                f"{target} failed {topic!r}: {reply.payload}", details={"dest": str(target)}
            )
    return reply.payload


def pid() -> Pid:
    """The caller's PID."""
    return current_any("process.pid").pid


def id() -> str | None:  # noqa: A001 - API name
    """The id of the entry the caller is running (None for an ``open_node`` block)."""
    entry = current_any("process.id").entry
    return entry.id if entry is not None else None


def inbox() -> Channel[Message]:
    """Messages whose topic nobody listens to; the same channel on every call."""
    return current_any("process.inbox").get_mailbox().subscribe(INBOX, message=True)


def listen(topic: str, *, message: bool = False) -> Channel[Any]:
    """Payloads (or ``Message``s) sent on ``topic``; the same channel on repeat calls."""
    check_topic(topic)
    return current_any("process.listen").get_mailbox().subscribe(topic, message=message)


def unlisten(channel: Channel[Any]) -> None:
    """Drop a subscription; unread messages go back to be routed again (never dropped)."""
    if not isinstance(channel, Channel):
        raise invalid(f"unlisten takes a channel from process.listen(), got {channel!r}")
    current_any("process.unlisten").get_mailbox().unsubscribe(channel)


def events() -> Channel[Event]:
    """``Exit``, ``LinkDown`` and ``Cancel`` events; the same channel on every call."""
    return current_any("process.events").get_mailbox().subscribe(EVENTS, message=False)


def monitor(dest: Pid | str) -> None:
    """Get one EXIT event when ``dest`` ends (at once, with a "noproc" error, if dead)."""
    proc = current_process("process.monitor")
    if proc.context or proc.node.app.secure:
        authorize(proc, "process.monitor", proc.node.resolve(dest))
    proc.node.monitor(proc, dest)


def unmonitor(dest: Pid | str) -> None:
    """Stop monitoring ``dest``; a no-op if not monitoring it."""
    proc = current_process("process.unmonitor")
    proc.node.unmonitor(proc, dest)


def link(dest: Pid | str) -> None:
    """Link to ``dest``: if either ends with an error, the other gets LINK_DOWN."""
    proc = current_process("process.link")
    if proc.context or proc.node.app.secure:
        authorize(proc, "process.link", proc.node.resolve(dest))
    proc.node.link(proc, dest)


def unlink(dest: Pid | str) -> None:
    """Remove a link; a no-op if there is none."""
    proc = current_process("process.unlink")
    proc.node.unlink(proc, dest)


def terminate(dest: Pid | str) -> None:
    """Hard-stop ``dest``: it exits with a Canceled "terminated" error.

    Raises:
        roost.Error: NotFound when ``dest`` is not alive.
    """
    proc = current_any("process.terminate")
    if proc.context or (proc.node is not None and proc.node.app.secure):
        authorize(proc, "process.terminate", _resource(proc, dest))
    if proc.workflow is not None:
        proc.workflow.stop(_workflow_dest(dest), None, hard=True)
        return
    proc.node.stop(dest, hard=True)


def cancel(dest: Pid | str, reason: str | None = None) -> None:
    """Ask ``dest`` to stop: it gets a ``Cancel`` event and decides what to do.

    Raises:
        roost.Error: NotFound when ``dest`` is not alive.
    """
    if reason is not None and not isinstance(reason, str):
        raise invalid(f"cancel reason must be a string or None, got {reason!r}")
    proc = current_any("process.cancel")
    if proc.context or (proc.node is not None and proc.node.app.secure):
        authorize(proc, "process.cancel", _resource(proc, dest))
    if proc.workflow is not None:
        proc.workflow.stop(_workflow_dest(dest), reason, hard=False)
        return
    proc.node.stop(dest, reason, hard=False)


def _resource(proc: Any, dest: object) -> object:
    """``dest`` as a policy sees it: a PID (a name is resolved, outside workflows)."""
    if proc.workflow is not None or isinstance(dest, Pid):
        return dest
    return proc.node.resolve(dest)


_OPTION_KEYS = frozenset({"trap_links"})


def set_options(options: Mapping[str, Any] | None = None, **kw: Any) -> None:
    """Set process flags; today one: ``trap_links``."""
    proc = current_process("process.set_options")
    merged = {**(options or {}), **kw}
    for key, value in merged.items():
        if key not in _OPTION_KEYS:
            raise invalid(
                f"process option {key!r} is not supported; supported: trap_links", option=key
            )
        if not isinstance(value, bool):
            raise invalid(f"{key} must be a bool, got {value!r}")
    if "trap_links" in merged:
        proc.trap_links = merged["trap_links"]


def get_options() -> dict[str, Any]:
    """The caller's process flags."""
    return {"trap_links": current_process("process.get_options").trap_links}


async def upgrade(entry: Any = None, *args: Any) -> None:
    """Swap the running code: run ``entry`` (default: the same one) with ``args``.

    Keeps the PID, mailbox, names, links and monitors. Does not return.
    """
    caller = current_any("process.upgrade")
    if caller.workflow is not None:
        raise Upgrade(_upgrade_target(caller, entry, "workflow"), args)  # continue-as-new
    proc = current_process("process.upgrade")
    await trio.lowlevel.checkpoint()
    if entry is None:
        if proc.entry is None:
            raise invalid("an open_node block has no entry to restart; name the entry")
        target = proc.entry
    else:
        target = proc.node.app.resolve(entry)
    if target.kind.value not in ("process", "supervisor"):
        raise invalid(f"process.upgrade needs a process entry; {target.id!r} is not one")
    raise Upgrade(target, args)


def _upgrade_target(caller: Any, entry: Any, kind: str) -> Any:
    if entry is None:
        return caller.entry
    node = caller.node
    resolved = node.app.resolve(entry)
    if resolved.kind.value != kind:
        raise invalid(f"continue-as-new needs a {kind} entry; {resolved.id!r} is not one")
    return resolved


class Registry:
    """``process.registry``: names for PIDs, released when the process exits."""

    @staticmethod
    def register(name: str, pid: Pid | str | None = None) -> bool:
        """Give ``name`` to ``pid`` (default: the caller).

        Raises:
            roost.Error: AlreadyExists when another live process holds the name;
                NotFound when ``pid`` is not alive; Invalid for a bad name.
        """
        proc = current_process("process.registry.register")
        check_name(name)
        node = proc.node
        if proc.context or node.app.secure:
            authorize(proc, "registry.register", name)
        target = proc.pid if pid is None else node.resolve(pid)
        if not node.alive(target):
            raise not_found(f"process {target} is not alive", pid=str(target))
        holder = node.registry.lookup(name)
        if holder is not None and not node.alive(holder):
            node.registry.unregister(name)
        node.registry.register(name, target)
        return True

    @staticmethod
    def lookup(name: str) -> Pid:
        """The PID registered as ``name``.

        Raises:
            roost.Error: NotFound when nobody holds it.
        """
        proc = current_process("process.registry.lookup")
        return proc.node.registry.require(check_name(name))

    @staticmethod
    def unregister(name: str) -> bool:
        """Drop ``name``; True if it was registered."""
        proc = current_process("process.registry.unregister")
        check_name(name)
        node = proc.node
        if is_secured(proc):
            authorize(proc, "registry.unregister", name)
            holder = node.registry.lookup(name)
            # Only the holder gives up a name: another live process's stays its own.
            if holder is not None and holder != proc.pid and node.alive(holder):
                return False
        return node.registry.unregister(name)


registry = Registry()


def coroutine_spawn(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    """Run ``fn(*args)`` concurrently inside the calling process.

    It shares the process's PID and mailbox; an error in it fails the process, and it is
    cancelled when the process ends.
    """
    proc = current_any("coroutine.spawn")
    if not callable(fn):
        raise invalid(f"coroutine.spawn takes an async function, got {fn!r}")
    if proc.workflow is not None:
        proc.workflow.spawn_coroutine(fn, args)
    else:
        proc.node.start_coroutine(proc, fn, args)


def ctx_get(key: str, default: Any = None) -> Any:
    """A context value set with ``with_context`` by this process or an ancestor."""
    if key == SECURITY_KEY:  # the security context is read with roost.security
        return default
    values = _context_values()
    return values.get(key, default) if values is not None else default


def ctx_all() -> dict[str, Any]:
    """Every context value visible to the caller."""
    values = _context_values()
    return visible(values) if values is not None else {}


def security_actor() -> Actor | None:
    """The caller's actor (``roost.security.actor()``), None without one or outside roost."""
    return actor_of(_context_values())


def security_scope() -> Scope | None:
    """The caller's scope (``roost.security.scope()``), None without a security context."""
    return scope_of(_context_values())


def _context_values() -> Mapping[str, Any] | None:
    proc = maybe_current_process()
    if proc is not None:
        return proc.context
    port = activity_context.get()  # an activity's port: its workflow's values
    return port.context if port is not None else None
