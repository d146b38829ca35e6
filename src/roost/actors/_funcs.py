"""The ``funcs`` calls: activities, durable inside a workflow and direct calls elsewhere."""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import Any, Protocol, TypeVar, TypeVarTuple, overload

import trio

from roost._errors import Error, ErrorKind, invalid
from roost.actors._app import ENTRY_ATTR, Entry, check_arguments, extension_or_none
from roost.actors._contain import in_worker_thread, must_propagate
from roost.actors._current import current_any, maybe_current_process
from roost.actors._process import Process
from roost.storage._values import EntryTypes, entry_types, result_of

__all__ = ["ActivityHandle", "Executor", "funcs_call", "funcs_new", "funcs_start"]

_get_current = maybe_current_process
# An entry's arguments and result, for type checkers (see docs/values.md, "Typed calls").
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")
_NO_OPTIONS: Mapping[str, Any] = types.MappingProxyType({})  # funcs.call's own: none


def _activity_id(proc: Any, entry: Any) -> tuple[str, Mapping[str, Any]]:
    node = proc.node
    if node is not None:
        resolved = node.app.resolve(entry)
        if resolved.kind != "activity":  # a StrEnum: no ``.value`` lookup on every call
            raise invalid(f"funcs.call runs activities; {resolved.id!r} is a {resolved.kind.value}")
        return resolved.id, resolved.options
    entry_id = getattr(entry, ENTRY_ATTR, entry) if callable(entry) else entry
    if not isinstance(entry_id, str) or ":" not in entry_id:
        raise invalid(f"an activity is an id like 'app:charge' or its function, got {entry!r}")
    return entry_id, {}


@overload
async def funcs_call(entry: Callable[[*_Ts], Awaitable[_R]], *args: *_Ts) -> _R: ...
@overload
async def funcs_call(entry: Callable[[*_Ts], _R], *args: *_Ts) -> _R: ...
@overload
async def funcs_call(entry: str | Entry, *args: Any) -> Any: ...


# mypy cannot match ``*args: Any`` against the TypeVarTuple overloads' ``*args``.
async def funcs_call(entry: Any, *args: Any) -> Any:  # type: ignore[misc]
    """Call an activity: durable and retried inside a workflow, a direct call elsewhere.

    Raises:
        roost.Error: the activity's error; a plain exception arrives as kind Internal.
    """
    # ``_call_activity`` inlined: a workflow's every activity passes here, and a profile
    # counts this coroutine twice per activity (its start, and its one resumption with
    # the result).
    proc = _get_current()
    if proc is not None and proc.workflow is not None:
        node = proc.node
        if node is not None:  # ``_activity_id``'s common case
            resolved = node.app.resolve(entry)
            if resolved.kind == "activity":
                options = (resolved.options, _NO_OPTIONS)
                value = await proc.workflow.start_activity(resolved.id, args, options)
                types = entry_types(resolved.fn)
                return value if types is None else types.value(value)
        entry_id, defaults = _activity_id(proc, entry)  # its refusal, or no node (a replay)
        value = await proc.workflow.start_activity(entry_id, args, (defaults, _NO_OPTIONS))
        return result_of(entry, value) if callable(entry) else value
    return await _call_activity(entry, args, {})


class Executor:
    """``funcs.new()``: an immutable activity caller with per-call options."""

    __slots__ = ("_options",)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self._options: dict[str, Any] = dict(options or {})

    def with_options(self, mapping: Mapping[str, Any] | None = None, **opts: Any) -> Executor:
        """A new Executor with these options merged in (``retry_policy``, timeouts)."""
        merged = {**self._options, **(mapping or {}), **opts}
        check = _activity_option_check()
        if check is not None:
            check(merged)
        return Executor(merged)

    @overload
    async def call(self, entry: Callable[[*_Ts], Awaitable[_R]], *args: *_Ts) -> _R: ...
    @overload
    async def call(self, entry: Callable[[*_Ts], _R], *args: *_Ts) -> _R: ...
    @overload
    async def call(self, entry: str | Entry, *args: Any) -> Any: ...

    async def call(self, entry: Any, *args: Any) -> Any:  # type: ignore[misc]
        """Call ``entry`` with these options (see ``funcs.call``)."""
        return await _call_activity(entry, args, self._options)

    def start(self, entry: Any, *args: Any) -> ActivityHandle:
        """Start ``entry`` with these options (see ``funcs.start``)."""
        handle: ActivityHandle = _start_activity(entry, args, self._options)
        return handle


def funcs_start(entry: Any, *args: Any) -> ActivityHandle:
    """Start an activity without waiting for it; await the handle for its result.

    Inside a workflow it is durable like ``funcs.call`` (start several, then await them:
    they run in parallel); elsewhere it runs as a coroutine of the calling process.
    ``handle.cancel()`` stops it: awaiting then raises Canceled.

    Raises:
        roost.Error: Invalid for an entry that is not an activity (at the call).
    """
    handle: ActivityHandle = _start_activity(entry, args, {})
    return handle


class ActivityHandle(Protocol):
    """What ``funcs.start`` returns: awaitable for the result; ``cancel()``; ``done``."""

    @property
    def done(self) -> bool: ...
    def cancel(self) -> None: ...
    def __await__(self) -> Generator[Any, None, Any]: ...


class _LocalActivity:
    """``funcs.start`` in a plain process: a coroutine of that process."""

    __slots__ = ("_done", "_error", "_scope", "_value")

    def __init__(self) -> None:
        self._done = trio.Event()
        self._scope = trio.CancelScope()
        self._value: Any = None
        self._error: Error | None = None

    async def _run(self, entry: Any, args: tuple[Any, ...], options: dict[str, Any]) -> None:
        with self._scope:
            try:
                self._value = await _call_activity(entry, args, options)
            except Error as exc:
                self._error = exc
        if self._scope.cancelled_caught:
            self._error = Error(
                f"activity {entry!r} was cancelled", kind=ErrorKind.CANCELED, retryable=False
            )
        self._done.set()

    @property
    def done(self) -> bool:
        """Whether the result (or the error) is in."""
        return self._done.is_set()

    def cancel(self) -> None:
        """Stop it; awaiting the handle then raises Canceled (a no-op once done)."""
        if not self._done.is_set():
            self._scope.cancel()

    async def _result(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error.clone()
        return self._value

    def __await__(self) -> Generator[Any, None, Any]:
        return self._result().__await__()


def _start_activity(entry: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    proc = current_any("funcs.start")
    if proc.workflow is not None:
        entry_id, defaults = _activity_id(proc, entry)
        return proc.workflow.start_activity(entry_id, args, (defaults, options))
    resolved = proc.node.app.resolve(entry)
    if resolved.kind.value != "activity":
        raise invalid(f"funcs.start runs activities; {resolved.id!r} is a {resolved.kind.value}")
    check_arguments(resolved, args)
    handle = _LocalActivity()
    proc.node.start_coroutine(proc, handle._run, (resolved.id, args, options))
    return handle


def funcs_new() -> Executor:
    """An activity caller to configure with ``.with_options(...)``."""
    return Executor()


def _activity_option_check() -> Callable[..., Any] | None:
    return extension_or_none("activity_options")


def _call_activity(entry: Any, args: tuple[Any, ...], options: dict[str, Any]) -> Awaitable[Any]:
    """What ``funcs.call`` awaits: in a workflow the driver's handle itself.

    A plain function, so a workflow waiting on an activity keeps no frame of it (nor of
    the driver's): one coroutine (the caller's) and the handle, at every step.
    """
    proc = current_any("funcs.call")
    if proc.workflow is not None:
        entry_id, defaults = _activity_id(proc, entry)
        handle: Awaitable[Any] = proc.workflow.start_activity(entry_id, args, (defaults, options))
        fn = _entry_fn(proc, entry)
        types = entry_types(fn) if fn is not None else None
        if types is not None and types.result is not None:
            return _typed_result(handle, types)
        return handle
    return _call_local(proc, entry, args)


def _entry_fn(proc: Any, entry: Any) -> Any:
    """The function behind ``entry`` (for its annotations), or None if unknown here."""
    node = proc.node
    if node is not None:
        return node.app.resolve(entry).fn
    return entry if callable(entry) else None


async def _typed_result(handle: Awaitable[Any], types: EntryTypes) -> Any:
    return types.value(await handle)


async def _call_local(proc: Process, entry: Any, args: tuple[Any, ...]) -> Any:
    await trio.lowlevel.checkpoint()
    resolved = proc.node.app.resolve(entry)
    if resolved.kind.value != "activity":
        raise invalid(
            f"funcs.call runs activities; {resolved.id!r} is a {resolved.kind.value} "
            "(start it with process.spawn or process.exec)",
        )
    check_arguments(resolved, args)
    try:
        if resolved.is_async:
            return await resolved.fn(*args)
        if proc.node.mock_time:
            # Under a MockClock a thread would let virtual time race ahead of the call.
            return resolved.fn(*args)
        # abandon_on_cancel: a timeout (a queue's, a caller's) is not held up by the thread.
        return await trio.to_thread.run_sync(
            in_worker_thread, resolved.fn, *args, abandon_on_cancel=True
        )
    except BaseException as exc:
        if must_propagate(exc):  # a cancel of the caller, or a real Ctrl-C (see _contain)
            raise
        # Anything else (SystemExit and GeneratorExit included) is the call's error.
        err = Error.from_exception(exc)
        if err is exc:
            raise
        raise err from exc
