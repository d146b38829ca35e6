"""``roost.connect``: the blocking client, for scripts, Django views, threads."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar, TypeVarTuple, overload

import httpx

from roost._duration import Duration
from roost._errors import Error
from roost.actors._app import App
from roost.client._core import Blocking, Core, Http, Plan, Step, WorkflowId
from roost.client._target import core_for
from roost.client._temporal import TemporalCore

__all__ = ["Client", "connect"]

T = TypeVar("T")
# A workflow entry's arguments and result, for type checkers. mypy cannot match the
# implementations' ``*args: Any`` against the overloads' ``*args: *_Ts``.
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")


def connect(
    target: str | os.PathLike[str] | None = None,
    *,
    token: str | None = None,
    temporal: str | None = None,
    temporal_namespace: str = "default",
    app: App | None = None,
) -> Client:
    """A client of the node on ``target``: a data directory, or an admin URL with its token.

    Use it as a context manager (``with roost.connect("roost-data") as client: ...``) or
    close it with ``close()``. On a data directory with no node running, ``start``,
    ``signal``, ``cancel``, ``terminate`` and ``enqueue`` store the request for the next
    node (as ``roost workflow start`` does), and ``result`` of an open run raises Timeout.

    With ``temporal="HOST:PORT"`` (and ``temporal_namespace``) the workflow requests go to
    that Temporal cluster, where the app's workflows run (docs/temporal.md); ``target`` is
    then optional and serves ``enqueue`` (queues stay on the nodes).

    With ``app`` (the ``roost.App`` the workflows belong to), ``result`` of a workflow named
    by its id string returns its entry's annotated result type, as ``result`` of the id
    ``start`` returned for an entry function does; without it, the JSON data.

    Raises:
        roost.Error: Invalid for a target that is neither, or an admin URL without a token
            (``token=``, or ``ROOST_ADMIN_TOKEN``).
    """
    return Client(core_for(target, token, temporal, temporal_namespace, app))


class Client:
    """A blocking client of one node (see ``roost.connect``); safe to share between threads."""

    def __init__(self, core: Core | TemporalCore) -> None:
        self._core = core
        self._http = httpx.Client(trust_env=False)

    def __repr__(self) -> str:
        return f"<roost.Client of {self._core.target}>"

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the client's connections."""
        self._http.close()

    def _run(self, plan: Plan[T]) -> T:
        outcome: Any = None
        failure: Error | None = None
        while True:
            try:
                step = plan.send(outcome) if failure is None else plan.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            outcome, failure = None, None
            try:
                outcome = self._do(step)
            except Error as exc:
                failure = exc

    def _do(self, step: Step) -> Any:
        if isinstance(step, Http):
            try:
                answer = self._http.request(
                    step.method,
                    step.url,
                    params=step.params,
                    content=step.content(),
                    headers=step.headers(),
                    timeout=step.timeout,
                )
            except httpx.HTTPError as exc:
                raise step.unreachable(exc) from None
            return step.answer(answer.status_code, answer.content)
        if isinstance(step, Blocking):
            return step.fn()
        time.sleep(step.seconds)
        return None

    @overload
    def start(
        self, entry: Callable[[*_Ts], Awaitable[_R]], /, *args: *_Ts, **options: Any
    ) -> WorkflowId[_R]: ...
    @overload
    def start(self, entry: str, /, *args: Any, **options: Any) -> WorkflowId[Any]: ...

    def start(  # type: ignore[misc]  # see _Ts
        self, entry: str | Callable[..., Any], /, *args: Any, **options: Any
    ) -> WorkflowId[Any]:
        """Start workflow ``entry`` with ``args`` and start ``options``; the workflow id.

        ``options`` are the workflow start options (``id``, ``task_queue``,
        ``execution_timeout``, ...); an explicit ``id`` of a running workflow is refused
        (AlreadyExists) unless ``id_conflict_policy`` says otherwise.
        """
        return self._run(self._core.start(entry, args, options))

    def signal(self, id: str, topic: str, payload: Any = None) -> None:  # noqa: A002 - API name
        """Send ``topic`` with ``payload`` to running workflow ``id``; durable on return."""
        self._run(self._core.signal(id, topic, payload))

    def call(
        self,
        id: str,  # noqa: A002 - API name
        topic: str,
        payload: Any = None,
        timeout: Duration | None = None,
    ) -> Any:
        """Send a request to workflow ``id`` and return its reply (``process.call``)."""
        return self._run(self._core.call(id, topic, payload, timeout))

    @overload
    def result(self, id: WorkflowId[_R], timeout: Duration | None = None) -> _R: ...
    @overload
    def result(self, id: str, timeout: Duration | None = None) -> Any: ...

    def result(self, id: str, timeout: Duration | None = None) -> Any:  # noqa: A002 - API name
        """Wait for workflow ``id`` to close: its result, or its error raised.

        ``timeout`` (None: no bound) passed first raises Timeout, as does an open run on a
        data directory no node runs.
        """
        return self._run(self._core.result(id, timeout))

    def describe(self, id: str) -> dict[str, Any]:  # noqa: A002 - API name
        """Status, result or error, type, timestamps ... of workflow ``id`` (JSON data)."""
        return self._run(self._core.describe(id))

    def list(self, query: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """The workflows matching ``query`` (e.g. ``"workflow_type = 'shop:order'"``)."""
        return self._run(self._core.list(query, status))

    def cancel(self, id: str, reason: str | None = None) -> None:  # noqa: A002 - API name
        """Ask running workflow ``id`` to cancel (it decides what to do)."""
        self._run(self._core.cancel(id, reason))

    def terminate(self, id: str) -> None:  # noqa: A002 - API name
        """Stop running workflow ``id`` at once."""
        self._run(self._core.terminate(id))

    def enqueue(self, queue: str, entry: str | Callable[..., Any], payload: Any) -> str:
        """Enqueue a call of ``entry`` with ``payload`` on ``queue``; the receipt id."""
        return self._run(self._core.enqueue(queue, entry, payload))
