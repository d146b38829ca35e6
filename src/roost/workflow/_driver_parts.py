"""The awaitables the driver hands to workflow code, and its misuse reports (no trio)."""

from __future__ import annotations

import abc
import contextvars
import datetime as dt
import logging
import random
import sys
import types
import uuid
from collections.abc import Awaitable, Coroutine, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from roost._errors import Error, ErrorKind, NondeterminismError, invalid
from roost._errors import safe_text as text_of
from roost._interrupt import is_ctrl_c
from roost.actors._workflow_ops import WorkflowOps
from roost.mailbox._backend import Waiter
from roost.workflow._history import describe

if TYPE_CHECKING:
    from roost._pid import Pid
    from roost.workflow._history import Started

__all__ = [
    "BETWEEN_ACTIVATIONS",
    "NONDETERMINISM_ADVICE",
    "NONE",
    "PARKS",
    "Chance",
    "DriverBackend",
    "DriverView",
    "Dropped",
    "Future",
    "NoEntries",
    "Ports",
    "Status",
    "Task",
    "WorkflowActivity",
    "call_site",
    "check_version_range",
    "close_all",
    "divergence",
    "exception_text",
    "foreign_error",
    "recordable_error",
    "trio_misuse",
    "unrecordable",
    "version_dropped",
    "workflow_error",
]

_ROOST_DIR = str(Path(__file__).resolve().parents[1])
log = logging.getLogger("roost.workflow")


class DriverView(WorkflowOps, Protocol):
    """The driver as its parts and its host's ports see it (``Driver`` implements it).

    Workflow code reaches the driver through ``WorkflowOps``; the parts here requeue parked
    coroutines and cancel activities; a port installs the driver's channel backend.
    """

    @property
    def backend(self) -> DriverBackend:
        """The channel backend of the driver's workflow code."""
        ...

    _ready: list[Task]

    def cancel_activity(self, seq: int, entry: str) -> None:
        """Stop waiting for activity ``seq``."""
        ...


class Ports(abc.ABC):
    """What a driver asks of whoever runs it: one object, not a closure per need.

    The runtime's subclass holds its run; every cached workflow keeps one, so one small
    object here instead of five closures and their cells is memory and collector time
    saved per workflow. The defaults suit a driver that only replays plain code: values are
    not checked, and PIDs (processes, child workflows, reply addresses) are refused.
    """

    __slots__ = ()

    @abc.abstractmethod
    def make_context(self, driver: DriverView) -> contextvars.Context:
        """A fresh context in which workflow code sees ``driver`` (one per coroutine)."""

    def check(self, value: object, what: str) -> None:  # noqa: B027 - by default, no check
        """Raise ``Invalid`` if ``value`` cannot be recorded."""

    def spawn_pid(self, seq: int) -> Pid:
        """The PID of the process started by command ``seq``."""
        raise _cannot("spawn processes")

    def child_pid(self, workflow_id: str) -> Pid:
        """The PID of the child workflow ``workflow_id``."""
        raise _cannot("start child workflows")

    def reply_pid(self, seq: int) -> Pid:
        """The private reply address of call ``seq``."""
        raise _cannot("make calls")

    def encoded_size(self, value: object) -> int:
        """Bytes ``value`` takes in the history (0 by default: sizes are not measured)."""
        return 0

    def kept_start(self, started: Started) -> Started:
        """The ``Started`` the driver keeps for the run's life (``started`` by default).

        A host whose run record holds the same identity returns an equal event that shares
        the record's strings: a decoded event's own copies would stay in memory with every
        cached run.
        """
        return started


def _cannot(what: str) -> Error:
    return Error(f"this driver cannot {what}", kind=ErrorKind.INVALID_STATE)


class Task:
    """One coroutine of a run; ``throw``: the error to resume it with, when queued so."""

    __slots__ = ("coro", "ctx", "main", "name", "throw")

    def __init__(self, coro: Coroutine[Any, Any, Any], ctx: contextvars.Context, name: str) -> None:
        self.coro = coro
        self.ctx = ctx
        self.name = name
        self.main = False
        self.throw: BaseException | None = None


class DriverWaiter(Waiter):
    """A channel operation's parked coroutine; it is itself what the coroutine yields.

    Its own awaitable (``__await__`` returns it, ``__next__`` yields it once), so parking
    makes no ``Park`` object or generator: one object per wait, kept while a run is idle.
    """

    __slots__ = ("driver", "task")

    def __init__(self, driver: DriverView) -> None:
        super().__init__()
        self.driver = driver
        self.task: Task | None = None

    def wake(self) -> None:
        """Queue the parked coroutine on its driver."""
        assert self.task is not None
        self.driver._ready.append(self.task)

    def __await__(self) -> Generator[Any, None, None]:
        return self  # type: ignore[return-value]  # an iterator: all ``await`` needs

    def __next__(self) -> DriverWaiter:
        # Yielded once: the driver sets ``task`` on what it receives, and the next resume
        # (after ``wake``) ends the await.
        if self.task is None:
            return self
        raise StopIteration


async def _no_yield() -> None:
    return None


class DriverBackend:
    """Channel backend for workflow code: parking yields to the driver, checkpoints are free.

    A base of ``Driver`` (no object of its own per run): the driver is its own backend.
    """

    __slots__ = ()
    _ready: list[Task]

    @property
    def backend(self) -> DriverBackend:
        """The channel backend of this driver's workflow code: the driver itself."""
        return self

    def checkpoint_if_cancelled(self) -> Coroutine[Any, Any, None]:
        """Workflows are never trio-cancelled: a no-op."""
        return _no_yield()

    def cancel_shielded_checkpoint(self) -> Coroutine[Any, Any, None]:
        """Scheduling is the driver's FIFO queue: a no-op."""
        return _no_yield()

    def new_waiter(self) -> Waiter:
        """A waiter that requeues the parked coroutine on the driver."""
        return DriverWaiter(self)  # type: ignore[arg-type]  # a base of Driver only

    def park(self, waiter: Waiter) -> Awaitable[Any]:
        """Yield to the driver until the waiter is woken (the waiter is the awaitable)."""
        assert type(waiter) is DriverWaiter
        return waiter


class Future:
    """A command's result: parked on until the matching event arrives.

    Its own awaitable, like ``DriverWaiter``: awaiting yields the future itself to the
    driver, which records the waiting coroutine in ``task``.
    """

    __slots__ = ("driver", "error", "resolved", "task", "value")

    def __init__(self, driver: DriverView) -> None:
        self.driver = driver
        self.task: Task | None = None
        self.resolved = False
        self.value: Any = None
        self.error: Error | None = None

    def resolve(self, value: Any, error: Error | None) -> None:
        self.resolved = True
        self.value, self.error = value, error
        task = self.task
        if task is not None:
            self.task = None
            self.driver._ready.append(task)

    def __await__(self) -> Generator[Any, None, Any]:
        return self  # type: ignore[return-value]  # an iterator: all ``await`` needs

    def __next__(self) -> Future:
        if not self.resolved:
            return self
        if self.error is not None:
            raise self.error.clone()
        raise StopIteration(self.value)


def call_site() -> str:
    """file:line of the innermost frame outside roost (where the workflow issued a command)."""
    frame: types.FrameType | None = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_ROOST_DIR):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


_ADVICE = (
    "inside workflows await only roost calls: roost.sleep instead of trio.sleep, "
    "roost.channel instead of trio memory channels, coroutine.spawn instead of nurseries, "
    "funcs.call (an activity) for any I/O"
)


_FOREIGN_LOOPS = frozenset({"trio", "asyncio", "anyio", "sniffio"})


def trio_misuse(error: BaseException) -> Error | None:
    """Turn trio's "must be called from async context" into advice on the roost call."""
    if isinstance(error, Error):
        return None
    tb = error.__traceback__
    culprit = None
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if module.split(".")[0] in _FOREIGN_LOOPS and culprit is None:
            culprit = f"{module.split('.')[0]}: {tb.tb_frame.f_code.co_qualname}"
        tb = tb.tb_next
    if culprit is None:
        return None
    return invalid(f"a workflow called {culprit}, which cannot run there; {_ADVICE}")


def foreign_error(task: Task, yielded: object) -> Error:
    culprit = type(yielded).__module__.split(".")[0]
    chain: list[str] = []
    coro: Any = task.coro
    while coro is not None:
        chain.append(getattr(coro, "__qualname__", type(coro).__name__))
        coro = getattr(coro, "cr_await", None)
    return invalid(
        f"a workflow awaited a foreign awaitable ({culprit}: {type(yielded).__name__}, via "
        f"{' -> '.join(chain[-3:])}); {_ADVICE}",
        awaited=type(yielded).__qualname__,
    )


class Chance:
    """The deterministic randomness of a run (a base of ``Driver``, which has its other slots)."""

    __slots__ = ("_rng",)
    started: Started | None
    now: dt.datetime

    def __init__(self) -> None:
        self._rng: random.Random | None = None

    def rng(self) -> random.Random:
        """The run's random generator, seeded from its history."""
        if self._rng is None:
            if self.started is None:
                raise Error("the workflow has not started", kind=ErrorKind.INVALID_STATE)
            # Seeded on first use: most workflows never draw, and a generator is 2.5 KB.
            self._rng = random.Random(self.started.seed)  # noqa: S311 - replayable, not crypto
        return self._rng

    def uuid4(self) -> uuid.UUID:
        """A UUID drawn from the run's seeded generator."""
        return uuid.UUID(int=self.rng().getrandbits(128), version=4)

    def uuid7(self) -> uuid.UUID:
        """A version-7 UUID from the workflow time and the seeded generator."""
        ms = int(self.now.timestamp() * 1000) & ((1 << 48) - 1)
        rand = self.rng().getrandbits(74)
        value = ms << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | (rand & ((1 << 62) - 1))
        return uuid.UUID(int=value)

    def random_bytes(self, n: int) -> bytes:
        """``n`` bytes from the run's seeded generator."""
        return self.rng().randbytes(n)

    def random(self) -> random.Random:
        """A ``random.Random`` seeded from the run's generator (so itself replayable)."""
        return random.Random(self.rng().getrandbits(64))  # noqa: S311 - not crypto


class WorkflowActivity(Future):
    """``funcs.start`` inside a workflow: await it for the result, or ``cancel()`` it.

    The handle is the future the activity's result resolves (one object per activity).
    """

    __slots__ = ("_entry", "_seq")

    def __init__(self, driver: DriverView, seq: int, entry: str) -> None:
        # Future's fields set here: no chained ``__init__`` call on every activity.
        self.driver, self.task, self.resolved = driver, None, False
        self.value, self.error = None, None
        self._seq, self._entry = seq, entry

    @property
    def done(self) -> bool:
        """Whether the result (or the error) is in."""
        return self.resolved

    def cancel(self) -> None:
        """Stop waiting for it; awaiting the handle then raises Canceled.

        Its stored task is dropped and a running attempt is stopped. A no-op once the
        result is in.
        """
        self.driver.cancel_activity(self._seq, self._entry)


# What a workflow coroutine may yield to its driver (anything else is a foreign awaitable).
PARKS: frozenset[type] = frozenset({DriverWaiter, Future, WorkflowActivity})


class Status:
    """Run states."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CONTINUED = "continued"


NONDETERMINISM_ADVICE = (
    "time.time() or datetime.now() (use roost.now()), random (use roost.random(), "
    "roost.uuid4()), I/O such as files, the network or os.environ (use an activity), or "
    "global state shared between runs"
)


def divergence(
    workflow: str, activation: int, issued: Any, recorded: Any, where: str
) -> NondeterminismError:
    """The error of replayed code issuing ``issued`` where the history has ``recorded``."""
    return NondeterminismError(
        f"workflow {workflow!r} diverged from its history in activation {activation}: the "
        f"code issued {describe(issued)} at {where}, but the history recorded "
        f"{describe(recorded)}. Either the code changed while the workflow was running "
        "(guard the change with workflow.version()), or the workflow code depends on "
        f"something that differs when it runs again: {NONDETERMINISM_ADVICE}",
        details={
            "workflow_id": workflow,
            "activation": activation,
            "issued": describe(issued),
            "recorded": describe(recorded),
            "location": where,
        },
    )


def exception_text(exc: BaseException) -> str:
    """The text of ``exc`` (an Error's message), never raising, in a form that encodes."""
    return text_of(exc.message if isinstance(exc, Error) else exc)


def unrecordable(what: str, exc: BaseException, task: Task) -> Error:
    """The workflow's result or continue-as-new input ``what`` cannot be encoded.

    There is no call site to raise it at, so it fails the workflow task; the location is
    the workflow function.
    """
    code: types.CodeType | None = getattr(task.coro, "cr_code", None)
    location = f"{code.co_filename}:{code.co_firstlineno}" if code else "<unknown>"
    function = code.co_qualname if code else "?"
    reason = (
        exception_text(exc)
        if isinstance(exc, Error)
        else f"{type(exc).__name__}: {exception_text(exc)}"
    )
    return invalid(
        f"the workflow's {what} cannot be recorded ({reason}); the workflow function "
        f"{function} (defined at {location}) must return values the codec encodes",
        location=location,
    )


def workflow_error(exc: Exception) -> Error:
    """What an exception that workflow code did not catch fails the workflow with."""
    return Error.from_exception(exc)  # never raises, whatever the exception's __str__ does


def recordable_error(error: Error, problem: BaseException) -> Error:
    """``error`` in a form the history can hold (its details or text could not be encoded).

    The kind, ``retryable`` and the message (lone surrogates escaped) are kept; details
    that do not encode are replaced by a note of why.
    """
    return Error(
        exception_text(error),
        kind=error.kind,
        retryable=error.retryable,
        details={"unrecorded_details": exception_text(problem)},
    )


def close_all(tasks: list[Task], workflow_id: str) -> None:
    """Close discarded coroutines; what one raises as it closes is logged, never raised.

    (A ``finally`` that fails, say: the run it belonged to is over, or rebuilt elsewhere.)
    """
    for task in tasks:
        try:
            task.ctx.run(task.coro.close)
        except BaseException as exc:
            if is_ctrl_c(exc):
                raise
            log.warning(
                "workflow %r: coroutine %s raised while it was discarded",
                workflow_id,
                task.name,
                exc_info=True,
            )


def check_version_range(change_id: str, min_supported: int, max_supported: int) -> None:
    """Raise ``Invalid`` for ``workflow.version`` arguments that are not a range of ints."""
    if not isinstance(change_id, str) or not change_id:
        raise invalid(f"change_id must be a non-empty string, got {change_id!r}")
    for value in (min_supported, max_supported):
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid(f"versions must be ints, got {value!r}")
    if min_supported > max_supported:
        raise invalid(
            f"workflow.version({change_id!r}): min_supported {min_supported} is greater "
            f"than max_supported {max_supported}"
        )


def version_dropped(change_id: str, chosen: int, low: int, high: int) -> NondeterminismError:
    """A replayed run recorded version ``chosen``, outside what the code supports now."""
    return NondeterminismError(
        f"workflow.version({change_id!r}): this run recorded version {chosen}, outside the "
        f"supported range {low}..{high}; keep the code for that version until such runs "
        "have finished",
        details={"change_id": change_id, "recorded": chosen, "location": call_site()},
    )


# -- shared empties of the driver -------------------------------------------------------


class NoEntries(dict[Any, Any]):
    """The one empty dict every driver shares until it needs one of its own.

    Reads (``get``, ``pop`` with a default, ``in``) work as on any empty dict; a write
    raises, so a missed ``_own`` cannot leak entries into every run.
    """

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("the shared empty dict of drivers is read-only")

    def setdefault(self, key: Any, default: Any = None) -> Any:
        raise TypeError("the shared empty dict of drivers is read-only")

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("the shared empty dict of drivers is read-only")

    def __ior__(self, other: Any) -> Any:  # type: ignore[misc]  # refuses, returns nothing
        raise TypeError("the shared empty dict of drivers is read-only")


# Most runs never make a call, wait on a child, start a ticker or ask for a version; and
# an idle run has no command pending. Each empty dict is 64 bytes per cached run: they
# start as this shared one (see ``Driver._own``).
NONE: Any = NoEntries()


class Dropped(list[Any]):
    """Where commands go between activations: nowhere.

    Only a discarded coroutine runs then (a ``finally`` as ``close`` ends it), and what it
    issues belongs to no activation. One shared object, not an idle list per cached run.
    """

    __slots__ = ()

    def append(self, command: Any) -> None:
        """Drop ``command``."""

    def extend(self, commands: Any) -> None:
        """Refused: the driver only appends (a guard for the shared object)."""
        raise TypeError("commands between activations are dropped one by one")

    def insert(self, index: Any, command: Any) -> None:
        """Refused, as ``extend``."""
        raise TypeError("commands between activations are dropped one by one")

    def __iadd__(self, commands: Any) -> Any:  # type: ignore[misc]  # refuses, returns nothing
        """Refused, as ``extend``."""
        raise TypeError("commands between activations are dropped one by one")

    def __setitem__(self, index: Any, commands: Any) -> None:
        """Refused, as ``extend`` (the shared list stays empty)."""
        raise TypeError("commands between activations are dropped one by one")


BETWEEN_ACTIVATIONS = Dropped()
