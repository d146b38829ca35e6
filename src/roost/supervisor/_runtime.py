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
from roost.actors._events import Cancel, Exit, LinkDown
from roost.actors._node import Node, SpawnRequest, terminated_error
from roost.actors._process import Process, current_process
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

__all__ = ["Child", "SupervisorState", "run_supervisor", "state_of"]

log = logging.getLogger("roost.supervisor")
_LINKED = SpawnRequest(link=True, monitor=True)
_STATES = "roost.supervisor.states"


@attrs.define(eq=False)
class Child:
    """A child as its supervisor tracks it."""

    spec: ChildSpec
    entry: Entry
    pid: Pid | None = None
    started_at: float = 0.0
    attempts: int = 0


def state_of(node: Node, pid: Pid) -> SupervisorState | None:
    """The live supervisor state for ``pid``, if it is a supervisor."""
    states: dict[Pid, SupervisorState] = node.ext.get(_STATES, {})
    return states.get(pid)


class SupervisorState:
    """One running supervisor: its children, restart history and pending restarts."""

    def __init__(self, spec: SupervisorSpec, proc: Process, children: Sequence[ChildSpec]) -> None:
        self.spec = spec
        self.proc = proc
        self.node: Node = proc.node
        self.flags = Flags(strategy=spec.strategy, intensity=spec.intensity, period=spec.period)
        self.children: list[Child] = [
            Child(spec=c, entry=resolve_child(self.node.app, spec.name, c)) for c in children
        ]
        self.by_pid: dict[Pid, Child] = {}
        # Children that ended with an error still owe us a LINK_DOWN (posted right after
        # their EXIT); any other LINK_DOWN means our parent failed.
        self.owed_link_down: set[Pid] = set()
        self.history: tuple[float, ...] = ()
        self.control: Channel[tuple[str, Any]] = Channel(UNBOUNDED)
        self.timers: list[tuple[Channel[Any], tuple[str, ...]]] = []
        self.rand = random.Random()  # noqa: S311 - jitter, not cryptography

    # -- starting ------------------------------------------------------------------------

    def start(self, child: Child) -> Pid:
        """Spawn ``child`` linked to and monitored by the supervisor."""
        pid = self.node.spawn(self.proc, child.entry, child.spec.args, _LINKED)
        child.pid = pid
        child.started_at = trio.current_time()
        self.by_pid[pid] = child
        return pid

    def start_dynamic(self, args: tuple[Any, ...]) -> Pid:
        """Start one more child from the template, with ``args`` appended."""
        template = self.spec.template
        if template is None:
            raise invalid(f"supervisor {self.spec.name!r} is not dynamic: it has no template")
        spec = attrs.evolve(template, args=(*template.args, *args))
        child = Child(spec=spec, entry=resolve_child(self.node.app, self.spec.name, spec))
        self.children.append(child)
        return self.start(child)

    def child_by_id(self, child_id: str) -> Child | None:
        """The child with this id (static supervisors)."""
        return next((c for c in self.children if c.spec.id == child_id), None)

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
        target = self.node.procs.get(pid)
        if target is None:
            return
        done = self.node.exit_channel(target)
        timeout = child.spec.shutdown_timeout
        result = None
        if timeout == 0:
            self.node.kill(target, terminated_error(pid, "terminated: supervisor shutdown"))
        else:
            self.node.cancel(target, "shutdown")
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
        events = self.proc.get_mailbox().subscribe(EVENTS, message=False)
        while True:
            cases = [events, self.control, *(timer for timer, _ in self.timers)]
            got = await select(*cases)
            if got.channel is self.control:
                await self._on_control(got.value)
                continue
            if got.channel is not events:
                ids = next(ids for timer, ids in self.timers if timer is got.channel)
                self.timers = [t for t in self.timers if t[0] is not got.channel]
                await self._start_ids(ids)
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

    async def _on_control(self, command: tuple[str, Any]) -> None:
        match command:
            case ("terminate", Pid() as pid):
                child = self.by_pid.get(pid)
                if child is not None:
                    await self._stop_one(child)
                    self.children.remove(child)

    async def _on_exit(self, pid: Pid, value: Any, error: Error | None) -> None:
        child = self.by_pid.pop(pid, None)
        if child is None:
            return  # a child we stopped ourselves, or an old incarnation
        if error is not None:
            self.owed_link_down.add(pid)
        child.pid = None
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
            order=[c.spec.id for c in self.children],
            specs={c.spec.id: c.spec for c in self.children},
            child_id=child.spec.id,
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
                await self.stop([c for cid in stop if (c := self.child_by_id(cid))])
                self.children = [c for c in self.children if c.spec.id not in delete]
                if delay > 0:
                    self.timers.append((self.node.timers.add(delay), start))
                else:
                    await self._start_ids(start)

    async def _start_ids(self, ids: Sequence[str]) -> None:
        for cid in ids:
            child = self.child_by_id(cid)
            if child is None or child.pid is not None:
                continue
            try:
                self.start(child)
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
    try:
        started: list[Child] = []
        try:
            for child in state.children:
                state.start(child)
                started.append(child)
                await trio.lowlevel.checkpoint()
        except Error:
            await state.stop(list(reversed(started)))
            raise
        proc.node.mark_ready(proc)
        return await state.run()
    finally:
        states.pop(proc.pid, None)
