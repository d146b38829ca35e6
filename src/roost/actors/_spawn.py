"""``process.spawn*`` / ``exec`` and the immutable ``Spawner`` builder."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar, TypeVarTuple, overload

import attrs
import trio

from roost._errors import invalid
from roost._pid import Pid
from roost._security import SECURITY_KEY, Actor, Scope, actor_of, claim, denied, scope_of
from roost.actors._app import ENTRY_ATTR, Entry, EntryKind, check_arguments
from roost.actors._authorize import authorize, is_secured
from roost.actors._current import current_any, current_process, maybe_current_process
from roost.actors._node import SpawnRequest, terminated_error
from roost.actors._process import Process
from roost.actors._registry import check_name
from roost.mailbox._mailbox import check_topic
from roost.storage._values import result_of

# An entry's arguments and result, for type checkers. mypy cannot match the implementations'
# ``*args: Any`` against the overloads' ``*args: *_Ts`` (hence their ``type: ignore[misc]``).
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")

__all__ = [
    "PROCESS_OPTIONS",
    "WORKFLOW_OPTIONS",
    "Spawner",
    "exec",
    "spawn",
    "spawn_linked",
    "spawn_linked_monitored",
    "spawn_monitored",
    "with_context",
    "with_options",
]

PROCESS_OPTIONS: Final = frozenset({"name", "host", "mailbox_limit", "trap_links"})
_PLAIN_ONLY: Final = PROCESS_OPTIONS - {"name"}  # a workflow takes a name too
WORKFLOW_OPTIONS: Final = frozenset(
    {
        "id",
        "task_queue",
        "execution_timeout",
        "run_timeout",
        "task_timeout",
        "id_conflict_policy",
        "id_reuse_policy",
        "execution_error_when_already_started",
        "retry_policy",
        "cron_schedule",
        "memo",
        "search_attributes",
        "start_delay",
        "parent_close_policy",
        "summary",
        "details",
    }
)
_LEGACY_PREFIX: Final = "temporal.workflow."
_PREFIXES: Final = (_LEGACY_PREFIX, "workflow.", "process.")


def _canonical_key(key: object) -> str:
    if not isinstance(key, str) or not key:
        raise invalid(f"option keys must be non-empty strings, got {key!r}")
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            short = key[len(prefix) :]
            allowed = PROCESS_OPTIONS if prefix == "process." else WORKFLOW_OPTIONS
            if short in allowed:
                return short
            break
    if key in PROCESS_OPTIONS or key in WORKFLOW_OPTIONS:
        return key
    known = ", ".join(sorted(PROCESS_OPTIONS | WORKFLOW_OPTIONS))
    raise invalid(f"unknown spawn option {key!r}; known options: {known}", option=key)


def _check_process_options(entry_id: str, options: Mapping[str, Any]) -> None:
    for key, value in options.items():
        if key not in PROCESS_OPTIONS:
            raise invalid(
                f"option {key!r} applies to workflows, but {entry_id!r} is a plain process",
                option=key,
                entry=entry_id,
            )
        if (
            key == "mailbox_limit"
            and value is not None
            and (isinstance(value, bool) or not isinstance(value, int) or value < 1)
        ):
            raise invalid(f"mailbox_limit must be an int >= 1 or None, got {value!r}")
        if key == "trap_links" and not isinstance(value, bool):
            raise invalid(f"trap_links must be a bool, got {value!r}")


def _check_narrowing(
    had_actor: Actor | None, had_scope: Scope | None, actor: Actor | None, scope: Scope | None
) -> None:
    """Refuse a child security context that is not the parent's actor with fewer policies."""
    if actor != had_actor:
        raise denied(
            f"a process running as {had_actor.id if had_actor else None!r} cannot start a "
            f"child as {actor.id if actor else None!r}: with_actor may only repeat the "
            "caller's own actor (set other actors from the open_node block)",
            actor=had_actor.id if had_actor else None,
        )
    allowed = set(had_scope or ())
    extra = [name for name in scope or () if name not in allowed]
    if extra:
        raise denied(
            f"with_scope may only narrow the caller's scope {sorted(allowed)}; "
            f"{extra} are not in it",
            policies=extra,
        )


@attrs.frozen(kw_only=True)
class Spawner:
    """An immutable spawn configuration: every ``with_*`` returns a new Spawner."""

    options: Mapping[str, Any] = attrs.field(factory=dict)
    context: Mapping[str, Any] = attrs.field(factory=dict)
    name: str | None = None
    messages: tuple[tuple[str, Any], ...] = ()
    # The options whose value came from a legacy "temporal.workflow.*" key.
    legacy: frozenset[str] = attrs.field(factory=frozenset, repr=False)
    actor: Actor | None = None
    scope: Scope | None = None

    def with_options(self, mapping: Mapping[str, Any] | None = None, **opts: Any) -> Spawner:
        """Merge spawn options (later keys win); Wippy-style prefixed keys are accepted.

        As in Wippy, a canonical key (``"workflow.id"`` or ``id``) wins over its legacy
        ``"temporal.workflow.id"`` spelling, whichever comes first.
        """
        if mapping is not None and not isinstance(mapping, Mapping):
            raise invalid(f"with_options takes a mapping, got {type(mapping).__name__}")
        merged = dict(self.options)
        legacy = set(self.legacy)
        for key, value in {**(mapping or {}), **opts}.items():
            short = _canonical_key(key)
            if key.startswith(_LEGACY_PREFIX):
                if short in merged and short not in legacy:
                    continue
                legacy.add(short)
            else:
                legacy.discard(short)
            merged[short] = value
        return attrs.evolve(self, options=merged, legacy=frozenset(legacy))

    def with_context(self, mapping: Mapping[str, Any]) -> Spawner:
        """Merge context values, readable with ``ctx.get`` in the child and its children."""
        if not isinstance(mapping, Mapping):
            raise invalid(f"with_context takes a mapping, got {type(mapping).__name__}")
        for key in mapping:
            if not isinstance(key, str):
                raise invalid(f"context keys must be strings, got {key!r}")
            if key == SECURITY_KEY:
                raise invalid(
                    f"context key {SECURITY_KEY!r} is reserved for the security context: "
                    "use with_actor / with_scope"
                )
        return attrs.evolve(self, context={**self.context, **mapping})

    def with_actor(self, actor: Actor) -> Spawner:
        """Run what this Spawner starts as ``actor`` (a ``roost.security.Actor``)."""
        if not isinstance(actor, Actor):
            raise invalid(f"with_actor takes a roost.security.Actor, got {type(actor).__name__}")
        return attrs.evolve(self, actor=actor)

    def with_scope(self, scope: Scope) -> Spawner:
        """Run what this Spawner starts under ``scope`` (a ``roost.security.Scope``)."""
        if not isinstance(scope, Scope):
            raise invalid(f"with_scope takes a roost.security.Scope, got {type(scope).__name__}")
        return attrs.evolve(self, scope=scope)

    def _own_context(self, inherited: Mapping[str, Any]) -> Mapping[str, Any]:
        """This Spawner's context values, with the security context when it sets one.

        An actor or scope set here replaces the inherited one; the other is inherited.
        Under an inherited security context only narrowing is allowed: the same actor and
        a subset of its policies (the ``open_node`` block, with none, may set any).

        Raises:
            roost.Error: PermissionDenied for another actor or a policy outside the
                inherited scope (checked before anything starts).
        """
        if self.actor is None and self.scope is None:
            return self.context
        actor = self.actor if self.actor is not None else actor_of(inherited)
        scope = self.scope if self.scope is not None else scope_of(inherited)
        if SECURITY_KEY in inherited:
            _check_narrowing(actor_of(inherited), scope_of(inherited), actor, scope)
        return {**self.context, SECURITY_KEY: claim(actor, scope)}

    def with_name(self, name: str) -> Spawner:
        """Spawn-or-signal under ``name``: if it is taken, the holder gets the messages."""
        return attrs.evolve(self, name=check_name(name))

    def with_message(self, topic: str, payload: Any = None) -> Spawner:
        """Queue a start message, delivered before the process runs."""
        check_topic(topic)
        return attrs.evolve(self, messages=(*self.messages, (topic, payload)))

    @overload
    async def spawn(
        self, entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
    ) -> Pid: ...
    @overload
    async def spawn(self, entry: str | Entry, *args: Any, host: str | None = None) -> Pid: ...

    async def spawn(self, entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
        """Start ``entry`` with ``args``; returns its PID."""
        return await self._start(entry, args, host, link=False, monitor=False)

    @overload
    async def spawn_monitored(
        self, entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
    ) -> Pid: ...
    @overload
    async def spawn_monitored(
        self, entry: str | Entry, *args: Any, host: str | None = None
    ) -> Pid: ...

    async def spawn_monitored(self, entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
        """Start ``entry`` and monitor it (its EXIT arrives on ``events()``)."""
        return await self._start(entry, args, host, link=False, monitor=True)

    @overload
    async def spawn_linked(
        self, entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
    ) -> Pid: ...
    @overload
    async def spawn_linked(
        self, entry: str | Entry, *args: Any, host: str | None = None
    ) -> Pid: ...

    async def spawn_linked(self, entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
        """Start ``entry`` linked to the caller."""
        return await self._start(entry, args, host, link=True, monitor=False)

    @overload
    async def spawn_linked_monitored(
        self, entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
    ) -> Pid: ...
    @overload
    async def spawn_linked_monitored(
        self, entry: str | Entry, *args: Any, host: str | None = None
    ) -> Pid: ...

    async def spawn_linked_monitored(self, entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
        """Start ``entry`` linked to and monitored by the caller."""
        return await self._start(entry, args, host, link=True, monitor=True)

    @overload
    async def exec(
        self, entry: Callable[[*_Ts], Awaitable[_R]], *args: *_Ts, host: str | None = None
    ) -> _R: ...
    @overload
    async def exec(
        self, entry: Callable[[*_Ts], _R], *args: *_Ts, host: str | None = None
    ) -> _R: ...
    @overload
    async def exec(self, entry: str | Entry, *args: Any, host: str | None = None) -> Any: ...

    async def exec(self, entry: Any, *args: Any, host: str | None = None) -> Any:  # type: ignore[misc]
        """Start ``entry``, wait for it to end, and return its value or raise its error.

        If the caller is cancelled while waiting, the child is terminated.
        """
        caller = current_any("process.exec")
        if caller.workflow is not None:  # a synchronous child workflow
            resolved_entry = caller.node.app.resolve(entry) if caller.node else None
            if resolved_entry is None or resolved_entry.kind is not EntryKind.WORKFLOW:
                raise invalid("inside a workflow, process.exec runs a child workflow entry")
            authorize(caller, "process.spawn", resolved_entry.id)
            options = self._child_options()
            value = await caller.workflow.exec_child(resolved_entry.id, args, options)
            return result_of(resolved_entry.fn, value)
        parent = current_process("process.exec")
        await trio.lowlevel.checkpoint()
        node = parent.node
        resolved = node.app.resolve(entry)
        if parent.context or node.app.secure:
            authorize(parent, "process.spawn", resolved.id)
        if resolved.kind is EntryKind.WORKFLOW:
            pid = await self._start_workflow(parent, resolved, args, link=False, monitor=False)
            outcome = await node.require_workflows().wait_exit(pid)
            if outcome.error is not None:
                raise outcome.error.clone()
            return result_of(resolved.fn, outcome.value)
        child = self._spawn_now(parent, resolved, args, host, link=False, monitor=False)
        pid = child.pid
        if not child.alive:  # it ended before we could watch it (cannot happen in one step)
            raise invalid(f"process {pid} ended before exec could wait for it")
        chan = node.exit_channel(child)
        try:
            result = await chan.receive()
        except BaseException:
            node.kill(child, terminated_error(pid, "terminated: exec caller was cancelled"))
            raise
        if result.error is not None:
            raise result.error.clone()
        return result.value

    async def _start(
        self, entry: Any, args: tuple[Any, ...], host: str | None, *, link: bool, monitor: bool
    ) -> Pid:
        caller = _get_current()
        if caller is None:
            caller = current_any("process.spawn")  # raises: not inside a process
        if caller.workflow is not None:
            # Workflow code runs on the deterministic driver: no trio checkpoint here.
            return self._spawn_from_workflow(caller, entry, args, link=link)
        await trio.lowlevel.checkpoint_if_cancelled()
        node = caller.node
        resolved = node.app.resolve(entry)
        if resolved.kind is EntryKind.WORKFLOW:
            # The workflow host's spawn is this checkpoint's schedule point (see
            # WorkflowHost.spawn): no scheduler pass of its own before the start.
            if caller.context or node.app.secure:
                authorize(caller, "process.spawn", resolved.id)
            if host is not None:
                raise invalid("host= places plain processes; workflows run on the node itself")
            return await self._start_workflow(caller, resolved, args, link=link, monitor=monitor)
        await trio.lowlevel.checkpoint()
        if caller.context or node.app.secure:
            authorize(caller, "process.spawn", resolved.id)
        proc = self._spawn_now(caller, resolved, args, host, link=link, monitor=monitor)
        if proc.ready is not None:
            # Supervisors start synchronously, like OTP's start_link: when spawn returns,
            # the supervisor and its children are up (or it has already failed).
            await node.wait_ready(proc.pid)
        return proc.pid

    def _spawn_from_workflow(
        self, caller: Any, entry: Any, args: tuple[Any, ...], *, link: bool
    ) -> Pid:
        if link:
            raise invalid(
                "workflows cannot link; processes they spawn are monitored automatically "
                "(their EXIT arrives on process.events())"
            )
        node = caller.node
        resolved = node.app.resolve(entry) if node is not None else None
        if resolved is not None:
            authorize(caller, "process.spawn", resolved.id)
        if resolved is not None and resolved.kind is EntryKind.WORKFLOW:
            child: Pid = caller.workflow.start_child(resolved.id, args, self._child_options())
            return child
        if (
            self.options
            or self.name is not None
            or self.messages
            or self.context
            or self.actor is not None
            or self.scope is not None
        ):
            raise invalid("spawn options are not supported for processes spawned by workflows")
        if resolved is not None and resolved.kind not in (
            EntryKind.PROCESS,
            EntryKind.SUPERVISOR,
        ):
            raise invalid(
                f"a workflow can spawn processes and workflows; {resolved.id!r} is an "
                f"{resolved.kind.value} (call it with funcs.call)"
            )
        entry_id = resolved.id if resolved is not None else getattr(entry, ENTRY_ATTR, entry)
        pid: Pid = caller.workflow.spawn_process(entry_id, args)
        return pid

    def _child_options(self) -> dict[str, Any]:
        if self.messages or self.context or self.actor is not None or self.scope is not None:
            raise invalid(
                "child workflows take start options, not start messages, context, actor or "
                "scope (they inherit the parent's context and security context)"
            )
        options = dict(self.options)
        if self.name is not None:
            options.setdefault("id", self.name)
        return options

    async def _start_workflow(
        self, parent: Any, entry: Entry, args: tuple[Any, ...], *, link: bool, monitor: bool
    ) -> Pid:
        node = parent.node
        host = node.require_workflows()
        check_arguments(entry, args)  # before anything is stored
        options = dict(self.options)
        for key in _PLAIN_ONLY:
            if key in options:
                raise invalid(f"option {key!r} applies to plain processes, not workflows")
        if self.name is not None:
            options["name"] = self.name
        if options.get("name") is not None and is_secured(parent):
            # A workflow's name is registered for it: the starter's registry.register.
            authorize(parent, "registry.register", options["name"])
        pid: Pid = await host.spawn(
            parent.pid,
            entry=entry,
            args=args,
            options=options,
            messages=self.messages,
            context={**parent.context, **self._own_context(parent.context)},
        )
        if link:
            node.link(parent, pid)
        if monitor:
            node.monitor(parent, pid)
        return pid

    def _spawn_now(
        self,
        parent: Process,
        resolved: Entry,
        args: tuple[Any, ...],
        host: str | None,
        *,
        link: bool,
        monitor: bool,
    ) -> Process:
        node = parent.node
        if self is _DEFAULT and host is None:
            return node.start_process(parent, resolved, args, _PLAIN[link, monitor])
        _check_process_options(resolved.id, self.options)
        opts = self.options
        req = SpawnRequest(
            host=host if host is not None else opts.get("host"),
            name=self.name if self.name is not None else opts.get("name"),
            messages=self.messages,
            context=self._own_context(parent.context),
            link=link,
            monitor=monitor,
            mailbox_limit=opts.get("mailbox_limit"),
            trap_links=bool(opts.get("trap_links", False)),
        )
        if req.name is not None and is_secured(parent):
            _authorize_name(parent, req)
        return node.start_process(parent, resolved, args, req)


def _authorize_name(parent: Process, req: SpawnRequest) -> None:
    """Ask ``parent``'s policies what a named spawn does: take the name, or reach its holder.

    Spawn-or-signal registers a free name (``registry.register``) or hands the start
    messages to the live holder and links or monitors it (``process.send`` / ``link`` /
    ``monitor`` of the holder): each is the action it would be as a call of its own.
    """
    node = parent.node
    name = check_name(req.name)
    holder = node.registry.lookup(name)
    if holder is None or holder not in node.procs:
        authorize(parent, "registry.register", name)
        return
    for wanted, action in (
        (bool(req.messages), "process.send"),
        (req.link, "process.link"),
        (req.monitor, "process.monitor"),
    ):
        if wanted:
            authorize(parent, action, holder)


_DEFAULT = Spawner()
# The current process, read without a Python call (spawn is a hot path).
_get_current = maybe_current_process
# The common case (no options, default host) reuses one request per link/monitor pair.
_PLAIN = {
    (link, monitor): SpawnRequest(link=link, monitor=monitor)
    for link in (False, True)
    for monitor in (False, True)
}


# The module-level calls go straight to _start: one coroutine frame less per spawn.


@overload
async def spawn(entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None) -> Pid: ...
@overload
async def spawn(entry: str | Entry, *args: Any, host: str | None = None) -> Pid: ...


async def spawn(entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
    """Start a process; returns its PID."""
    return await _DEFAULT._start(entry, args, host, link=False, monitor=False)


@overload
async def spawn_monitored(
    entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
) -> Pid: ...
@overload
async def spawn_monitored(entry: str | Entry, *args: Any, host: str | None = None) -> Pid: ...


async def spawn_monitored(entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
    """Start a process and monitor it."""
    return await _DEFAULT._start(entry, args, host, link=False, monitor=True)


@overload
async def spawn_linked(
    entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
) -> Pid: ...
@overload
async def spawn_linked(entry: str | Entry, *args: Any, host: str | None = None) -> Pid: ...


async def spawn_linked(entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
    """Start a process linked to the caller."""
    return await _DEFAULT._start(entry, args, host, link=True, monitor=False)


@overload
async def spawn_linked_monitored(
    entry: Callable[[*_Ts], object], *args: *_Ts, host: str | None = None
) -> Pid: ...
@overload
async def spawn_linked_monitored(
    entry: str | Entry, *args: Any, host: str | None = None
) -> Pid: ...


async def spawn_linked_monitored(entry: Any, *args: Any, host: str | None = None) -> Pid:  # type: ignore[misc]
    """Start a process linked to and monitored by the caller."""
    return await _DEFAULT._start(entry, args, host, link=True, monitor=True)


@overload
async def exec(  # noqa: A001 - API name
    entry: Callable[[*_Ts], Awaitable[_R]], *args: *_Ts, host: str | None = None
) -> _R: ...
@overload
async def exec(  # noqa: A001 - API name
    entry: Callable[[*_Ts], _R], *args: *_Ts, host: str | None = None
) -> _R: ...
@overload
async def exec(entry: str | Entry, *args: Any, host: str | None = None) -> Any: ...  # noqa: A001 - API name


async def exec(entry: Any, *args: Any, host: str | None = None) -> Any:  # type: ignore[misc]  # noqa: A001 - API name
    """Start a process, wait for it, return its value or raise its error."""
    return await _DEFAULT.exec(entry, *args, host=host)


def with_options(mapping: Mapping[str, Any] | None = None, **opts: Any) -> Spawner:
    """A Spawner with these options."""
    return _DEFAULT.with_options(mapping, **opts)


def with_context(mapping: Mapping[str, Any]) -> Spawner:
    """A Spawner with these context values."""
    return _DEFAULT.with_context(mapping)
