"""``roost.connect_async``: the async client, under asyncio (FastAPI, Starlette) or trio."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar, TypeVarTuple, overload

import anyio
import anyio.to_thread
import httpx

from roost._duration import Duration
from roost._errors import Error
from roost.actors._app import App
from roost.client._core import Blocking, Core, Http, Plan, Step, WorkflowId
from roost.client._target import core_for
from roost.client._temporal import TemporalCore

__all__ = ["AsyncClient", "connect_async"]

T = TypeVar("T")
# A workflow entry's arguments and result, for type checkers. mypy cannot match the
# implementations' ``*args: Any`` against the overloads' ``*args: *_Ts``.
_Ts = TypeVarTuple("_Ts")
_R = TypeVar("_R")


def connect_async(
    target: str | os.PathLike[str] | None = None,
    *,
    token: str | None = None,
    temporal: str | None = None,
    temporal_namespace: str = "default",
    app: App | None = None,
) -> AsyncClient:
    """An async client of the node on ``target`` (as ``roost.connect``), for asyncio or trio.

    Use it as an async context manager (``async with roost.connect_async(...) as client``)
    or close it with ``await client.aclose()``. Requests on a stopped data directory run in
    a worker thread, so they never block the event loop.

    With ``temporal="HOST:PORT"`` (and ``temporal_namespace``) the workflow requests go to
    that Temporal cluster, where the app's workflows run (docs/temporal.md); ``target`` is
    then optional and serves ``enqueue`` (queues stay on the nodes).

    With ``app`` (the ``roost.App`` the workflows belong to), ``result`` of a workflow named
    by its id string returns its entry's annotated result type, as ``result`` of the id
    ``start`` returned for an entry function does; without it, the JSON data.

    Raises:
        roost.Error: Invalid for a target that is neither a data directory nor an admin
            URL, or an admin URL without a token.
    """
    return AsyncClient(core_for(target, token, temporal, temporal_namespace, app))


class AsyncClient:
    """An async client of one node (see ``roost.connect_async``)."""

    def __init__(self, core: Core | TemporalCore) -> None:
        self._core = core
        self._http = httpx.AsyncClient(trust_env=False)

    def __repr__(self) -> str:
        return f"<roost.AsyncClient of {self._core.target}>"

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._http.aclose()

    async def _run(self, plan: Plan[T]) -> T:
        outcome: Any = None
        failure: Error | None = None
        while True:
            try:
                step = plan.send(outcome) if failure is None else plan.throw(failure)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            outcome, failure = None, None
            try:
                outcome = await self._do(step)
            except Error as exc:
                failure = exc

    async def _do(self, step: Step) -> Any:
        if isinstance(step, Http):
            try:
                answer = await self._http.request(
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
            return await anyio.to_thread.run_sync(step.fn)
        await anyio.sleep(step.seconds)
        return None

    @overload
    async def start(
        self, entry: Callable[[*_Ts], Awaitable[_R]], /, *args: *_Ts, **options: Any
    ) -> WorkflowId[_R]: ...
    @overload
    async def start(self, entry: str, /, *args: Any, **options: Any) -> WorkflowId[Any]: ...

    async def start(  # type: ignore[misc]  # see _Ts
        self, entry: str | Callable[..., Any], /, *args: Any, **options: Any
    ) -> WorkflowId[Any]:
        """Start workflow ``entry`` with ``args`` and start ``options``; the workflow id."""
        return await self._run(self._core.start(entry, args, options))

    async def signal(self, id: str, topic: str, payload: Any = None) -> None:  # noqa: A002
        """Send ``topic`` with ``payload`` to running workflow ``id``; durable on return."""
        await self._run(self._core.signal(id, topic, payload))

    async def call(
        self,
        id: str,  # noqa: A002 - API name
        topic: str,
        payload: Any = None,
        timeout: Duration | None = None,  # noqa: ASYNC109 - API.md names this keyword
    ) -> Any:
        """Send a request to workflow ``id`` and return its reply (``process.call``)."""
        return await self._run(self._core.call(id, topic, payload, timeout))

    @overload
    async def result(
        self,
        id: WorkflowId[_R],
        timeout: Duration | None = None,  # noqa: ASYNC109 - API.md names this keyword
    ) -> _R: ...
    @overload
    async def result(
        self,
        id: str,
        timeout: Duration | None = None,  # noqa: ASYNC109 - API.md names this keyword
    ) -> Any: ...

    async def result(
        self,
        id: str,  # noqa: A002 - API name
        timeout: Duration | None = None,  # noqa: ASYNC109 - API.md names this keyword
    ) -> Any:
        """Wait for workflow ``id`` to close: its result, or its error raised."""
        return await self._run(self._core.result(id, timeout))

    async def describe(self, id: str) -> dict[str, Any]:  # noqa: A002 - API name
        """Status, result or error, type, timestamps ... of workflow ``id`` (JSON data)."""
        return await self._run(self._core.describe(id))

    async def list(
        self, query: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """The workflows matching ``query`` (e.g. ``"workflow_type = 'shop:order'"``)."""
        return await self._run(self._core.list(query, status))

    async def cancel(self, id: str, reason: str | None = None) -> None:  # noqa: A002
        """Ask running workflow ``id`` to cancel (it decides what to do)."""
        await self._run(self._core.cancel(id, reason))

    async def terminate(self, id: str) -> None:  # noqa: A002 - API name
        """Stop running workflow ``id`` at once."""
        await self._run(self._core.terminate(id))

    async def enqueue(self, queue: str, entry: str | Callable[..., Any], payload: Any) -> str:
        """Enqueue a call of ``entry`` with ``payload`` on ``queue``; the receipt id."""
        return await self._run(self._core.enqueue(queue, entry, payload))
