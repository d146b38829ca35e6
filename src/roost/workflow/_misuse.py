"""What misuse inside a workflow becomes: the driver's error reports and their advice.

A divergence from the history, a foreign awaitable or a trio call in workflow code, a
result that cannot be recorded, a ``workflow.version`` range a replayed run is outside:
each is an ``Error`` (or ``NondeterminismError``) that names the call and the fix.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roost._errors import Error, NondeterminismError, invalid
from roost._errors import safe_text as text_of
from roost.workflow._history import describe

if TYPE_CHECKING:
    from roost.workflow._awaitables import Task
    from roost.workflow._history import Command

__all__ = [
    "NONDETERMINISM_ADVICE",
    "call_site",
    "check_version_range",
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


NONDETERMINISM_ADVICE = (
    "time.time() or datetime.now() (use roost.now()), random (use roost.random(), "
    "roost.uuid4()), I/O such as files, the network or os.environ (use an activity), or "
    "global state shared between runs"
)


def divergence(
    workflow: str, activation: int, issued: Command | None, recorded: Command | None, where: str
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
