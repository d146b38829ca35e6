"""``roost.App``: the registry of entries (processes, activities, ...) and hosts."""

from __future__ import annotations

import contextlib
import enum
import importlib
import inspect
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar, overload

import attrs

from roost._errors import Error, ErrorKind, invalid, not_found, shown
from roost._text import check_text
from roost.storage._values import add_converter, entry_types, wrap_entry

__all__ = ["App", "Entry", "EntryKind", "HostSpec", "check_arguments"]

_NAME_FORBIDDEN = frozenset("{}|@: ")
ENTRY_ATTR = "__roost_entry__"

# The decorators return the function unchanged, so they are typed to hand its exact type
# (signature, return type, name) back to type checkers.
_Fn = TypeVar("_Fn", bound=Callable[..., Any])
_AsyncFn = TypeVar("_AsyncFn", bound=Callable[..., Coroutine[Any, Any, Any]])
_PolicyFn = TypeVar("_PolicyFn", bound=Callable[..., bool])


class EntryKind(enum.StrEnum):
    """What an entry is, which decides how it can be started."""

    PROCESS = "process"
    ACTIVITY = "activity"
    SUPERVISOR = "supervisor"
    WORKFLOW = "workflow"


@attrs.frozen
class _Arity:
    """How many positional arguments a plain signature takes: the door's fast check."""

    least: int
    most: int | None  # None: any number (a ``*args``)


def _arity_of(entry: Entry) -> _Arity | inspect.Signature | None:
    """The entry's signature, reduced to an arity when positional counts decide binding.

    None when the callable has no signature Python can read (a builtin): nothing checked.
    """
    try:
        sig = inspect.signature(entry.fn)
    except (TypeError, ValueError):
        return None
    least = 0
    most: int | None = 0
    for param in sig.parameters.values():
        if param.kind is param.VAR_POSITIONAL:
            most = None
        elif param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            if most is not None:
                most += 1
            if param.default is param.empty:
                least += 1
        elif param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            return sig  # a required keyword-only parameter: positional args never bind
    return _Arity(least, most)


@attrs.frozen(kw_only=True)
class Entry:
    """A registered function and how roost runs it."""

    id: str
    kind: EntryKind
    fn: Callable[..., Any]
    is_async: bool
    options: Mapping[str, Any] = attrs.field(factory=dict)
    # Read once at registration: every start checks its arguments against it.
    arity: _Arity | inspect.Signature | None = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(_arity_of, takes_self=True)
    )


def check_arguments(entry: Entry, args: tuple[Any, ...], app: App | None = None) -> None:
    """Refuse a start whose arguments do not bind to the entry's signature.

    With ``app``, a first argument that is one of its host ids makes the message name
    Wippy's host-argument form, ``process.spawn(entry, "app:worker", input)``.

    Raises:
        roost.Error: kind Invalid naming the entry, its signature and the arguments given.
    """
    arity = entry.arity
    if arity is None:
        return
    if isinstance(arity, _Arity):
        count = len(args)
        if count >= arity.least and (arity.most is None or count <= arity.most):
            return
        problem = (
            f"it takes {_expected(arity)} positional argument"
            f"{'' if arity.least == arity.most == 1 else 's'}, got {count}"
        )
    else:
        try:
            arity.bind(*args)
        except TypeError as exc:
            problem = str(exc)
        else:  # pragma: no cover - _arity_of returns a Signature only when it cannot bind
            return
    signature = _signature_text(entry)
    hint = ""
    first = args[0] if args else None
    if isinstance(first, str) and app is not None and first in app.hosts:
        hint = (
            f"; {first!r} is a host: roost takes it as a keyword, "
            f"process.spawn(entry, input, host={first!r}), not as Wippy's second argument"
        )
    raise invalid(
        f"the arguments do not fit {entry.id} {signature}: {problem}{hint}; nothing was started",
        entry=entry.id,
        signature=signature,
        arguments=len(args),
    )


def _expected(arity: _Arity) -> str:
    if arity.most is None:
        return f"at least {arity.least}"
    if arity.least == arity.most:
        return str(arity.least)
    return f"{arity.least} to {arity.most}"


class _Annotation:
    """An annotation shown as its source text (``str``, not ``'str'``) in a signature."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text


def _signature_text(entry: Entry) -> str:
    """The entry's signature as written, e.g. ``(order_id: str, amount: int) -> str``."""
    try:
        sig = inspect.signature(entry.fn)
    except (TypeError, ValueError):  # pragma: no cover - a check needs a signature
        return "(...)"

    def bare(annotation: Any) -> Any:
        return _Annotation(annotation) if isinstance(annotation, str) else annotation

    params = [p.replace(annotation=bare(p.annotation)) for p in sig.parameters.values()]
    return str(sig.replace(parameters=params, return_annotation=bare(sig.return_annotation)))


@attrs.frozen(kw_only=True)
class HostSpec:
    """A process host: where spawns land, with an optional process limit."""

    id: str
    max_processes: int | None = None


# Entry kinds implemented above this layer (supervisors, later workflows) plug in here, so
# that ``app.supervisor(...)`` can live on App while imports still point down only.
_EXTENSIONS: dict[str, Callable[..., Any]] = {}


def register_extension(name: str, declare: Callable[..., Any]) -> None:
    """Install the declaration function behind ``App.<name>(...)``."""
    _EXTENSIONS[name] = declare


# Services higher layers run on every node (the workflow runtime): called with the node
# and a system nursery when the node starts.
_NODE_SERVICES: list[Callable[..., Any]] = []


def register_node_service(start: Callable[..., Any]) -> None:
    """Run ``await start(node, nursery)`` whenever a node starts."""
    if start not in _NODE_SERVICES:
        _NODE_SERVICES.append(start)


def node_services() -> list[Callable[..., Any]]:
    """The registered node services, in registration order."""
    _load_plug_ins()
    return list(_NODE_SERVICES)


# Whole-app checks of higher layers (HTTP routes naming entries by id), run by validate().
_APP_CHECKS: list[Callable[[App], None]] = []


def register_app_check(check: Callable[[App], None]) -> None:
    """Run ``check(app)`` in every ``App.validate()`` (it raises Invalid for a bad app)."""
    if check not in _APP_CHECKS:
        _APP_CHECKS.append(check)


# The modules that plug the layers above in (``roost._wiring``). ``roost/__init__`` names
# them and they load when an App or a node first needs an extension, so that importing a
# pure core through its package does not load the runtime (and trio).
_PLUG_INS: list[str] = []


def plug_in(module: str) -> None:
    """Import ``module`` (which registers extensions and node services) on first need."""
    if module not in _PLUG_INS:
        _PLUG_INS.append(module)


def _load_plug_ins() -> None:
    while _PLUG_INS:
        module = _PLUG_INS[0]
        importlib.import_module(module)  # a failed import stays pending, and is retried
        if _PLUG_INS and _PLUG_INS[0] == module:  # (a nested call may have taken it)
            del _PLUG_INS[0]


def extension_or_none(name: str) -> Callable[..., Any] | None:
    """The declaration function registered as ``name``, or None if no layer provides it."""
    _load_plug_ins()
    return _EXTENSIONS.get(name)


def _extension(name: str) -> Callable[..., Any]:
    declare = extension_or_none(name)
    if declare is None:
        raise Error(
            f"app.{name}() needs roost.{name.rsplit('_', maxsplit=1)[-1]} loaded: import roost",
            kind=ErrorKind.INVALID_STATE,
        )
    return declare


def _check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not name:
        raise invalid(f"{what} must be a non-empty string, got {name!r}")
    bad = sorted(ch for ch in set(name) if ch in _NAME_FORBIDDEN)
    if bad:
        raise invalid(f"{what} {name!r} must not contain {''.join(bad)!r}", name=name)
    return check_text(name, what)


class App:
    """The set of entries a node can run; entry ids are ``"<app name>:<function name>"``.

    Args:
        name: the namespace of this app's entries and hosts, e.g. "app".
        secure: deny every checked action of a process without a security context
            (docs/security.md); False: such processes are not checked.
    """

    def __init__(self, name: str, *, secure: bool = False) -> None:
        self.name = _check_name("app name", name)
        if not isinstance(secure, bool):
            raise invalid(f"secure must be a bool, got {secure!r}")
        self.secure = secure
        # Authorization policies by name: (actor, action, resource) -> bool.
        self._policies: dict[str, Callable[[Any, str, str], bool]] = {}
        self._default_host = f"{self.name}:processes"
        self._entries: dict[str, Entry] = {}
        self._hosts: dict[str, HostSpec] = {}
        # What extensions declare on the app (queues, routes, ...), by extension name.
        self.declared: dict[str, dict[str, Any]] = {}
        self._main: str | None = None
        self.host("processes")

    def __repr__(self) -> str:
        return f"<roost.App {self.name!r} entries={len(self._entries)}>"

    @property
    def default_host(self) -> str:
        """The host id spawns land on unless told otherwise."""
        return self._default_host

    @property
    def entries(self) -> Mapping[str, Entry]:
        """Every registered entry, by id."""
        return dict(self._entries)

    @property
    def hosts(self) -> Mapping[str, HostSpec]:
        """Every declared host, by id."""
        return dict(self._hosts)

    def host(self, name: str, *, max_processes: int | None = None) -> HostSpec:
        """Declare (or redeclare) a process host ``"<app>:<name>"``.

        Raises:
            roost.Error: kind Invalid for a bad name or a max_processes below 1.
        """
        _check_name("host name", name)
        if max_processes is not None and (
            isinstance(max_processes, bool) or not isinstance(max_processes, int)
        ):
            raise invalid(f"max_processes must be an int or None, got {max_processes!r}")
        if max_processes is not None and max_processes < 1:
            raise invalid(f"max_processes must be at least 1, got {max_processes}")
        spec = HostSpec(id=f"{self.name}:{name}", max_processes=max_processes)
        self._hosts[spec.id] = spec
        return spec

    @property
    def policies(self) -> Mapping[str, Callable[[Any, str, str], bool]]:
        """Every registered policy, by name."""
        return dict(self._policies)

    def find_policy(self, name: str) -> Callable[[Any, str, str], bool] | None:
        """The policy registered as ``name``, if any (no copy: asked on every checked call)."""
        return self._policies.get(name)

    def policy(self, name: str) -> Callable[[_PolicyFn], _PolicyFn]:
        """Register a policy ``fn(actor, action, resource) -> bool`` under ``name``.

        A process whose scope names the policy may take an action when one of its scope's
        policies returns True for it (docs/security.md).

        Raises:
            roost.Error: Invalid for an empty name or one already registered.
        """
        if not isinstance(name, str) or not name:
            raise invalid(f"a policy name is a non-empty string, got {name!r}")
        if name in self._policies:
            raise invalid(f"policy {name!r} is already registered on app {self.name!r}")

        def register(fn: _PolicyFn) -> _PolicyFn:
            if not callable(fn) or inspect.iscoroutinefunction(fn):
                raise invalid(f"policy {name!r} must be a plain function, got {fn!r}")
            self._policies[name] = fn
            return fn

        return register

    @overload
    def process(self, fn: _AsyncFn, /, *, name: str | None = None) -> _AsyncFn: ...

    @overload
    def process(
        self, fn: None = None, /, *, name: str | None = None
    ) -> Callable[[_AsyncFn], _AsyncFn]: ...

    def process(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
        """Register an ``async def`` as a plain (in-memory) process entry.

        Use bare (``@app.process``) or with a name (``@app.process(name="w")``); the
        function is returned unchanged.
        """
        return self._decorate(fn, EntryKind.PROCESS, name, {}, need_async=True)

    @overload
    def main(self, fn: _AsyncFn, /, *, name: str | None = None) -> _AsyncFn: ...

    @overload
    def main(
        self, fn: None = None, /, *, name: str | None = None
    ) -> Callable[[_AsyncFn], _AsyncFn]: ...

    def main(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
        """Register an ``async def`` (no arguments) as the app's main process.

        A node for the app starts it once recovery is done (``roost run``,
        ``roost.run(app)``, ``open_node``), linked to the node: typically it spawns the
        app's supervision tree. If it fails, the node shuts down with its error; if it
        returns, the node keeps serving. ``node.main_pid`` is its PID.

        Raises:
            roost.Error: kind Invalid when the app already has a main, or for a function
                that needs arguments (a main is started with none).
        """

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            if self._main is not None:
                raise invalid(
                    f"app {self.name!r} already has a main ({self._main!r}); an app has one "
                    "main: start the other processes from it",
                    main=self._main,
                )
            probe = Entry(id="main", kind=EntryKind.PROCESS, fn=func, is_async=True)
            try:
                check_arguments(probe, ())
            except Error:
                raise invalid(
                    f"main {getattr(func, '__qualname__', func)}{_signature_text(probe)} must "
                    "take no arguments: a node starts it with none (read settings from the "
                    "environment or a config file instead)",
                ) from None
            self._main = self.register(func, EntryKind.PROCESS, name=name, need_async=True).id
            return func

        return register(fn) if fn is not None else register

    @property
    def main_entry(self) -> Entry | None:
        """The entry marked with ``@app.main``, or None."""
        return None if self._main is None else self._entries[self._main]

    @overload
    def activity(self, fn: _Fn, /, *, name: str | None = None, **options: Any) -> _Fn: ...

    @overload
    def activity(
        self, fn: None = None, /, *, name: str | None = None, **options: Any
    ) -> Callable[[_Fn], _Fn]: ...

    def activity(
        self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None, **options: Any
    ) -> Any:
        """Register a function (sync or async) as an activity, called with ``funcs.call``.

        Options (``retry_policy``, ``start_to_close_timeout``, ...) are the defaults for
        every call; ``funcs.new().with_options(...)`` overrides them per call.
        """
        check = extension_or_none("activity_options") if options else None
        if check is not None:
            check(options)  # raises Invalid for a bad option
        return self._decorate(fn, EntryKind.ACTIVITY, name, options, need_async=False)

    @overload
    def workflow(self, fn: _AsyncFn, /, *, name: str | None = None) -> _AsyncFn: ...

    @overload
    def workflow(
        self, fn: None = None, /, *, name: str | None = None
    ) -> Callable[[_AsyncFn], _AsyncFn]: ...

    def workflow(self, fn: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
        """Register an ``async def`` as a durable workflow entry."""
        return self._decorate(fn, EntryKind.WORKFLOW, name, {}, need_async=True)

    def supervisor(self, name_or_fn: Any = None, /, **options: Any) -> Any:
        """Declare a supervisor entry ``"<app>:<name>"``.

        ``app.supervisor("root", children=[...], strategy="one_for_one", intensity=1,
        period="5s")``, or as a decorator on a function that returns the children (called
        with the spawn arguments when the supervisor starts).
        """
        return _extension("supervisor")(self, name_or_fn, **options)

    def dynamic_supervisor(self, name: str, /, **options: Any) -> Any:
        """Declare a dynamic supervisor, whose children come from one template.

        ``app.dynamic_supervisor("pool", template=supervisor.child("w", "app:worker"))``;
        children are added at run time with ``supervisor.start_child``.
        """
        return _extension("dynamic_supervisor")(self, name, **options)

    def queue(self, name: str, /, **settings: Any) -> Any:
        """Declare (or redeclare) a named durable queue; see ``roost.queues``.

        ``app.queue("order-payment", max_retries=5, backoff="2s", concurrency=2,
        type="fifo", message_group_field="order_id")``. A ``default`` queue always exists.

        Raises:
            roost.Error: kind Invalid for an unknown setting or a bad value.
        """
        return _extension("queue")(self, name, **settings)

    def load_config(self, path: Any) -> Any:
        """Declare the queues of a ``roost.toml`` file (its ``[queues.<name>]`` tables).

        Raises:
            roost.Error: kind Invalid for a missing or malformed file or a bad setting;
                nothing is declared then.
        """
        return _extension("config")(self, path)

    def cron(self, expression: str, entry: Any, catch_up: str = "skip") -> Any:
        """Run ``entry`` with a ``roost.CronTick`` on a cron schedule (UTC).

        5 fields (minute first) or 6/7 fields (seconds first, optional year);
        ``catch_up`` is "skip", "one" or "all" for fire times missed while down.

        Raises:
            roost.Error: kind Invalid for a bad expression or catch_up.
        """
        return _extension("cron")(self, expression, entry, catch_up)

    def subscribe(
        self, topic: str, entry: Any, *, durable: bool = False, queue: str | None = None
    ) -> Any:
        """Run ``entry`` with the data of every ``roost.publish`` on ``topic``.

        In memory by default; ``durable=True`` feeds it through ``queue`` (default: the
        ``default`` queue), at least once, with that queue's retries and DLQ.

        Raises:
            roost.Error: kind Invalid for a bad topic or option.
        """
        return _extension("subscribe")(self, topic, entry, durable=durable, queue=queue)

    def http(self, method: str, path: str, entry: Any, *, auth: Any = None) -> Any:
        """Declare an HTTP trigger: ``method`` on ``path`` runs ``entry``; see ``roost.http``.

        ``app.http("GET", "/orders/{id}", get_order)``: the entry (an activity, process or
        workflow) gets one ``roost.http.Request`` and returns a value (sent as JSON) or a
        ``roost.http.Response``. Served by nodes opened with ``open_node(..., http=...)``.
        ``auth``: an activity or process entry that gets the ``Request`` first and returns
        the ``security.Actor`` (or an ``(Actor, Scope)`` pair) the handler runs as, or raises
        PermissionDenied (401, or 403 with ``details={"status": 403}``): the handler never
        runs.

        Raises:
            roost.Error: kind Invalid for an unknown method, a path not starting with '/',
                a duplicate method and path, or an entry (or auth entry) that cannot serve
                requests (by id: checked by ``validate()``).
        """
        return _extension("http")(self, method, path, entry, auth)

    def _decorate(
        self,
        fn: Callable[..., Any] | None,
        kind: EntryKind,
        name: str | None,
        options: dict[str, Any],
        *,
        need_async: bool,
    ) -> Any:
        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self.register(func, kind, name=name, options=options, need_async=need_async)
            return func

        return register(fn) if fn is not None else register

    def register(
        self,
        fn: Callable[..., Any],
        kind: EntryKind,
        *,
        name: str | None = None,
        options: Mapping[str, Any] | None = None,
        need_async: bool = False,
    ) -> Entry:
        """Register ``fn`` under ``"<app>:<name or fn.__name__>"``.

        Raises:
            roost.Error: kind Invalid for a non-callable, a sync function where an
                ``async def`` is required, or a bad name; AlreadyExists for a taken id.
        """
        if not callable(fn):
            raise invalid(f"an entry must be a function, got {type(fn).__name__}")
        is_async = inspect.iscoroutinefunction(fn)
        if need_async and not is_async:
            raise invalid(
                f"{getattr(fn, '__qualname__', fn)!r} must be an 'async def' to be a "
                f"{kind.value} entry",
            )
        short = _check_name("entry name", name or getattr(fn, "__name__", ""))
        entry_id = f"{self.name}:{short}"
        if entry_id in self._entries:
            raise Error(
                f"entry {entry_id!r} is already registered; give one of them another name",
                kind=ErrorKind.ALREADY_EXISTS,
                details={"entry": entry_id},
            )
        # Its annotations register the value classes it takes and returns; ``run`` converts
        # arguments that arrive as plain data (from the store or the CLI) to those types.
        run = wrap_entry(entry_id, fn)
        entry = Entry(id=entry_id, kind=kind, fn=run, is_async=is_async, options=options or {})
        self._entries[entry_id] = entry
        # Builtins and some callables take no attributes; the id still works for them.
        for target in {id(fn): fn, id(run): run}.values():
            with contextlib.suppress(AttributeError, TypeError):
                setattr(target, ENTRY_ATTR, entry_id)
        return entry

    def converter(
        self,
        cls: type,
        encode: Callable[[Any], Any],
        decode: Callable[[Any], Any],
        *,
        tag: str | None = None,
    ) -> None:
        """Store instances of ``cls`` as ``encode(obj)`` and read them back with ``decode``.

        For a class the codec does not take as it is (``Decimal``, a class of your own):
        ``app.converter(Decimal, str, Decimal)``. ``encode`` returns any payload; the value
        is stored under ``tag`` (default ``"<module>:<qualname>"``). A converter applies to
        every codec of the process, as ``@roost.storage.record`` does.

        Raises:
            roost.Error: kind Invalid for a non-class, hooks that are not callable, or a
                class already stored as another record.
        """
        add_converter(cls, encode, decode, tag)

    def resolve(self, ref: object) -> Entry:
        """Find an entry by id (``"app:name"``) or by its decorated function.

        Raises:
            roost.Error: kind Invalid for a malformed reference, NotFound for an unknown one.
        """
        if isinstance(ref, Entry):
            return ref
        entry_id = getattr(ref, ENTRY_ATTR, None) if callable(ref) else ref
        if not isinstance(entry_id, str) or ":" not in entry_id:
            raise invalid(
                f"an entry is an id like '{self.name}:worker' or a function registered "
                f"with @app.process / @app.activity; got {shown(ref)}",
            )
        entry = self._entries.get(entry_id)
        if entry is None:
            known = ", ".join(sorted(self._entries)) or "none"
            raise not_found(
                f"unknown entry {entry_id!r}; registered entries: {known}", entry=entry_id
            )
        return entry

    def validate(self) -> None:
        """Check every entry's declaration against the others (e.g. a supervisor's children).

        Raises:
            roost.Error: kind Invalid naming the first bad declaration.
        """
        for entry in list(self._entries.values()):
            entry_types(entry.fn)  # annotations naming classes defined after the entry
            check = entry.options.get("validate")
            if check is not None:
                check(self)
        _load_plug_ins()
        for app_check in _APP_CHECKS:
            app_check(self)

    def resolve_host(self, host: str | None) -> HostSpec:
        """Find a host by id (``"app:workers"``) or short name; None means the default."""
        if host is None:
            return self._hosts[self._default_host]
        if not isinstance(host, str):
            raise invalid(f"host must be a host id string, got {host!r}")
        spec = self._hosts.get(host) or self._hosts.get(f"{self.name}:{host}")
        if spec is None:
            known = ", ".join(sorted(self._hosts))
            raise not_found(f"unknown host {host!r}; declared hosts: {known}", host=host)
        return spec
