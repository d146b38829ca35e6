"""The supervisor process: start children in order, apply the restart policy, stop in reverse."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

from roost._errors import Error, ErrorKind, invalid
from roost._pid import Pid
from roost.actors._app import App, Entry, EntryKind
from roost.actors._current import current_process
from roost.actors._events import Cancel, Exit, LinkDown
from roost.actors._node import SpawnRequest, terminated_error
from roost.actors._process import NodeOps, Process
from roost.actors._stopping import shut_down, until_running
from roost.mailbox._channel import UNBOUNDED, Channel, select
from roost.mailbox._mailbox import EVENTS
from roost.supervisor._policy import (
    Escalate,
    ExitInfo,
    Flags,
    GiveUp,
    RestartChildren,
    Stay,
    decide,
)
from roost.supervisor._spec import (
    ChildSpec,
    SupervisorSpec,
    order_by_requires,
)

__all__ = ["Child", "ShuttingDown", "SupervisorState", "run_supervisor", "state_of"]

log = logging.getLogger("roost.supervisor")
_LINKED = SpawnRequest(link=True, monitor=True)
_STATES = "roost.supervisor.states"


@attrs.define(eq=False)
class Child:
    """A child as its supervisor tracks it.

    Attributes:
        key: how the restart policy names it: its spec id, or for a dynamic child (whose
            id is the template's, shared by all) an id of its own instance.
        pid: its current process, from the spawn on; None while it is down.
        up: whether it has finished starting (a supervisor child: its whole subtree).
    """

    spec: ChildSpec
    entry: Entry
    key: str
    pid: Pid | None = None
    up: bool = False
    started_at: float = 0.0
    attempts: int = 0


class ShuttingDown(Exception):  # noqa: N818 - a signal to unwind, not an error
    """The node is stopping and starts nothing: the supervisor shuts down as well."""


def _forget(proc: Process, chan: Channel[Any]) -> None:
    """Drop an exit channel nobody waits on any more (a long-lived process keeps them)."""
    chans = proc.exit_chans
    if chans is not None and chan in chans:
        chans.remove(chan)


def state_of(node: NodeOps, pid: Pid) -> SupervisorState | None:
    """The live supervisor state for ``pid``, if it is a supervisor."""
    states: dict[Pid, SupervisorState] = node.ext.get(_STATES, {})
    return states.get(pid)


class SupervisorState:
    """One running supervisor: its children, restart history and pending restarts."""

    def __init__(self, spec: SupervisorSpec, proc: Process, children: Sequence[ChildSpec]) -> None:
        self.spec = spec
        self.proc = proc
        self.node: NodeOps = proc.node
        self.flags = Flags(strategy=spec.strategy, intensity=spec.intensity, period=spec.period)
        self.children: list[Child] = [
            Child(spec=c, entry=resolve_child(self.node.app, spec.name, c), key=c.id)
            for c in children
        ]
        # Opened before any child starts, so that the supervisor hears a Cancel (and
        # counts as listening, see _stopping) during its start as well.
        self.events = proc.get_mailbox().subscribe(EVENTS, message=False)
        self._instances = 0
        self.by_pid: dict[Pid, Child] = {}
        # Children that ended with an error still owe us a LINK_DOWN (posted right after
        # their EXIT); any other LINK_DOWN means our parent failed.
        self.owed_link_down: set[Pid] = set()
        self.history: tuple[float, ...] = ()
        self.control: Channel[tuple[Any, ...]] = Channel(UNBOUNDED)
        self.timers: list[tuple[Channel[Any], tuple[str, ...]]] = []
        self.rand = random.Random()  # noqa: S311 - jitter, not cryptography

    # -- starting ------------------------------------------------------------------------

    async def start(self, child: Child) -> None:
        """Spawn ``child`` linked to and monitored by the supervisor; return once it is up.

        A supervisor child is up once its whole subtree has started (OTP's synchronous
        ``start_link``), so a tree starts depth first and a sibling that requires it
        starts after all of it.

        Raises:
            roost.Error: it did not start: the spawn was refused, or a supervisor child
                failed during its own start (with that child's error).
            ShuttingDown: the node is stopping.
        """
        if self.node.stopping:
            raise ShuttingDown
        proc = self.node.start_process(self.proc, child.entry, child.spec.args, _LINKED)
        pid = proc.pid
        child.pid = pid
        child.started_at = trio.current_time()
        self.by_pid[pid] = child
        if proc.ready is None:
            child.up = True
            return
        done = self.node.exit_channel(proc)
        try:
            got = await select(proc.ready.case_receive(), done.case_receive())
        finally:
            _forget(proc, done)
        if got.channel is not done:
            child.up = True
            return
        error = got.value.error
        if error is None:
            return  # it stopped during its start (a shutdown): its EXIT, queued, says so
        # A failed start, not a crash of a running child: its EXIT and LINK_DOWN (queued
        # already) must not be taken for one.
        self.by_pid.pop(pid, None)
        child.pid = None
        self.owed_link_down.add(pid)
        raise error.clone()

    async def start_dynamic(self, args: tuple[Any, ...]) -> Pid:
        """Start one more child from the template, with ``args`` appended (in the loop)."""
        template = self.spec.template
        assert template is not None
        spec = attrs.evolve(template, args=(*template.args, *args))
        entry = resolve_child(self.node.app, self.spec.name, spec)
        self._instances += 1
        child = Child(spec=spec, entry=entry, key=f"{spec.id}#{self._instances}")
        await self.start(child)
        self.children.append(child)
        assert child.pid is not None
        return child.pid

    async def request_start(self, args: tuple[Any, ...]) -> Pid:
        """``supervisor.start_child``: ask the supervisor's loop to start a child, and wait.

        The start runs in the supervisor, as OTP's does, so that it is ordered with the
        exits and restarts the supervisor handles.

        Raises:
            roost.Error: Invalid if the supervisor is not dynamic; the start's error if
                the child did not start; Unavailable if the supervisor stopped first.
        """
        if self.spec.template is None:
            raise invalid(f"supervisor {self.spec.name!r} is not dynamic: it has no template")
        reply: Channel[Pid | Error] = Channel(1)
        self.control._try_send(("start", args, reply))
        done = self.node.exit_channel(self.proc)
        try:
            got = await select(reply.case_receive(), done.case_receive())
        finally:
            _forget(self.proc, done)
        if got.channel is done:
            raise Error(
                f"supervisor {self.spec.name!r} stopped before it started the child",
                kind=ErrorKind.UNAVAILABLE,
                details={"supervisor": self.spec.name},
                pid=self.proc.pid,
            )
        if isinstance(got.value, Error):
            raise got.value
        pid: Pid = got.value
        return pid

    def child_by_key(self, key: str) -> Child | None:
        """The child the restart policy calls ``key``."""
        return next((c for c in self.children if c.key == key), None)

    # -- stopping ------------------------------------------------------------------------

    async def stop(self, children: Sequence[Child]) -> None:
        """Stop ``children`` one by one, in the order given, per their shutdown spec."""
        for child in children:
            await self._stop_one(child)

    async def _stop_one(self, child: Child) -> None:
        pid = child.pid
        if pid is None:
            return
        self.by_pid.pop(pid, None)
        child.pid = None
        child.up = False
        target = self.node.procs.get(pid)
        if target is None:
            return
        done = self.node.exit_channel(target)
        timeout = child.spec.shutdown_timeout
        result = None
        if timeout == 0:
            self.node.kill(target, terminated_error(pid, "terminated: supervisor shutdown"))
        else:
            await until_running([target])
            if target.alive and not shut_down(self.node, target, "shutdown", by="supervisor"):
                with trio.move_on_after(timeout):
                    result = await done.receive()
                if result is None:
                    self.node.kill(target, terminated_error(pid, "terminated: shutdown timeout"))
        if result is None:
            result = await done.receive()
        if result.error is not None:
            self.owed_link_down.add(pid)

    async def stop_all(self) -> None:
        """Stop every child: reverse start order, or in parallel for a dynamic supervisor."""
        if self.spec.dynamic:
            await self._stop_parallel([c for c in self.children if c.pid is not None])
        else:
            await self.stop(list(reversed(self.children)))

    async def _stop_parallel(self, children: Sequence[Child]) -> None:
        # All at once, each on its own (identical, template) timeout: OTP's shared timer.
        async with trio.open_nursery() as nursery:
            for child in children:
                nursery.start_soon(self._stop_one, child)

    # -- the loop ------------------------------------------------------------------------

    async def run(self) -> str:
        """Supervise until cancelled (normal exit) or intensity is exceeded (error)."""
        events = self.events
        while True:
            cases = [events, self.control, *(timer for timer, _ in self.timers)]
            got = await select(*cases)
            if got.channel is self.control:
                await self._on_control(got.value)
                continue
            if got.channel is not events:
                keys = next(keys for timer, keys in self.timers if timer is got.channel)
                self.timers = [t for t in self.timers if t[0] is not got.channel]
                await self._start_keys(keys)
                continue
            match got.value:
                case Cancel():
                    await self.stop_all()
                    return "shutdown"
                case Exit(pid=pid, value=value, error=error):
                    await self._on_exit(pid, value, error)
                case LinkDown(pid=pid) if pid in self.owed_link_down or pid in self.by_pid:
                    self.owed_link_down.discard(pid)  # a child's: its EXIT has the news
                case LinkDown(error=error):
                    # Not a child: our parent failed. Stop everything and fail with it.
                    await self.stop_all()
                    raise error.clone()

    async def _on_control(self, command: tuple[Any, ...]) -> None:
        match command:
            case ("terminate", Pid() as pid):
                child = self.by_pid.get(pid)
                if child is not None:
                    await self._stop_one(child)
                    self.children.remove(child)
            case ("start", tuple() as args, Channel() as reply):
                try:
                    reply._try_send(await self.start_dynamic(args))
                except Error as exc:
                    reply._try_send(exc)
                except ShuttingDown:
                    reply._try_send(
                        Error(
                            "the node is shutting down and starts no new processes",
                            kind=ErrorKind.UNAVAILABLE,
                        )
                    )
                    raise

    async def _on_exit(self, pid: Pid, value: Any, error: Error | None) -> None:
        child = self.by_pid.pop(pid, None)
        if child is None:
            return  # a child we stopped ourselves, or an old incarnation
        if error is not None:
            self.owed_link_down.add(pid)
        child.pid = None
        child.up = False
        info = ExitInfo(
            normal=error is None,
            error_kind=error.kind if error is not None else None,
            retryable=error.retryable if error is not None else None,
            ran_for=trio.current_time() - child.started_at,
        )
        await self._apply(child, self._decide(child, info), error)

    def _decide(self, child: Child, info: ExitInfo) -> Any:
        """Ask the pure policy, and keep the history and attempt count it returns."""
        decision, self.history, child.attempts = decide(
            flags=self.flags,
            order=[c.key for c in self.children],
            specs={c.key: c.spec for c in self.children},
            child_id=child.key,
            exit_info=info,
            history=self.history,
            attempts=child.attempts,
            now=trio.current_time(),
            rand=self.rand.random(),
        )
        return decision

    async def _apply(self, child: Child, decision: Any, error: Error | None) -> None:
        extra = {"supervisor": self.spec.name, "child_id": child.spec.id}
        reason = str(error) if error is not None else "normal exit"
        match decision:
            case Stay(delete=delete):
                if delete or self.spec.dynamic:
                    self.children.remove(child)
            case GiveUp(reason=why):
                if self.spec.dynamic:
                    self.children.remove(child)  # a dynamic child that stays down is gone
                log.warning(
                    "supervisor %s: giving up on child %s: %s",
                    self.spec.name,
                    child.spec.id,
                    why,
                    extra={**extra, "reason": why, "attempt": child.attempts},
                )
            case Escalate(reason=why):
                log.error(
                    "supervisor %s: %s",
                    self.spec.name,
                    why,
                    extra={**extra, "reason": reason, "attempt": child.attempts},
                )
                await self.stop_all()
                raise Error(
                    f"supervisor {self.spec.name!r} shut down: {why}",
                    kind=ErrorKind.LIMIT_EXCEEDED,
                    retryable=True,
                    details={"supervisor": self.spec.name, "child_id": child.spec.id},
                )
            case RestartChildren(stop=stop, delete=delete, start=start, delay=delay):
                log.info(
                    "supervisor %s: restarting %s after %s (attempt %d, delay %.3gs)",
                    self.spec.name,
                    ", ".join(start),
                    reason,
                    child.attempts,
                    delay,
                    extra={**extra, "reason": reason, "attempt": child.attempts},
                )
                await self.stop([c for key in stop if (c := self.child_by_key(key))])
                self.children = [c for c in self.children if c.key not in delete]
                if delay > 0:
                    self.timers.append((self.node.timers.add(delay), start))
                else:
                    await self._start_keys(start)

    async def _start_keys(self, keys: Sequence[str]) -> None:
        for key in keys:
            child = self.child_by_key(key)
            if child is None or child.pid is not None:
                continue
            try:
                await self.start(child)
            except Error as exc:
                # A failed restart counts as another failure of that child (OTP).
                info = ExitInfo(normal=False, error_kind=exc.kind, retryable=exc.retryable)
                await self._apply(child, self._decide(child, info), exc)
                return
            await trio.lowlevel.checkpoint()


def resolve_child(app: App, sup_name: str, spec: ChildSpec) -> Entry:
    """The entry a child spec names; Invalid unless it is a process or a supervisor."""
    try:
        entry = app.resolve(spec.entry)
    except Error as exc:
        raise invalid(
            f"supervisor {sup_name!r}: child {spec.id!r} has a bad entry: {exc.message}",
            supervisor=sup_name,
            child_id=spec.id,
        ) from exc
    if entry.kind not in (EntryKind.PROCESS, EntryKind.SUPERVISOR):
        raise invalid(
            f"supervisor {sup_name!r}: child {spec.id!r} entry {entry.id!r} is an "
            f"{entry.kind.value}; children must be processes or supervisors",
        )
    return entry


async def run_supervisor(
    spec: SupervisorSpec,
    children_fn: Callable[..., Sequence[ChildSpec]] | None,
    *args: Any,
) -> str:
    """The body of every supervisor process."""
    proc = current_process("a supervisor")
    proc.trap_links = True
    raw = children_fn(*args) if children_fn is not None else spec.children
    children = order_by_requires(list(raw)) if not spec.dynamic else ()
    state = SupervisorState(spec, proc, children)
    states: dict[Pid, SupervisorState] = proc.node.ext.setdefault(_STATES, {})
    states[proc.pid] = state
    started: list[Child] = []
    try:
        try:
            for child in state.children:
                await state.start(child)
                started.append(child)
                await trio.lowlevel.checkpoint()
        except Error:
            await state.stop(list(reversed(started)))
            raise
        proc.node.mark_ready(proc)
        return await state.run()
    except ShuttingDown:
        # The node stops: whatever is running stops in order and the supervisor ends
        # as a cancelled one does, rather than failing for a start the node refused.
        await state.stop_all()
        return "shutdown"
    finally:
        states.pop(proc.pid, None)
