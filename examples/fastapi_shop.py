"""A FastAPI app that starts, steers and waits for roost workflows with ``roost.connect_async``.

The web app and the node are two programs. In ``examples/``:

    roost run fastapi_shop:shop --data-dir roost-data --admin 127.0.0.1:0
    ROOST_DATA_DIR=roost-data uvicorn fastapi_shop:api        # any ASGI server

The web app finds the node through its data directory (``admin.json``); with no node
running, starts and approvals are stored and the next node runs them. Run as a script, this
file plays both parts in one process: the node on a thread of its own, the web app under
``asyncio.run``, driven by an in-memory HTTP client.
"""

import asyncio
import contextlib
import os
import tempfile
import threading
from pathlib import Path

import fastapi
import httpx
import pydantic
import trio
from fastapi.responses import JSONResponse

import roost
from roost import funcs, process

shop = roost.App("shop")


@shop.activity
async def charge(order_id: str, amount: int) -> str:
    return f"pay-{order_id}-{amount}"


@shop.workflow
async def order(order_id: str, amount: int) -> dict:
    approver = await process.listen("approve").receive()  # durable: survives restarts
    payment = await funcs.call(charge, order_id, amount)
    return {"order": order_id, "approved_by": approver, "payment": payment}


class NewOrder(pydantic.BaseModel):
    order_id: str
    amount: int


# The HTTP status of each roost.Error kind this API can meet (the rest are 500).
STATUS = {
    roost.ErrorKind.INVALID: 400,
    roost.ErrorKind.NOT_FOUND: 404,
    roost.ErrorKind.ALREADY_EXISTS: 409,
    roost.ErrorKind.INVALID_STATE: 409,
    roost.ErrorKind.UNAVAILABLE: 503,
    roost.ErrorKind.TIMEOUT: 504,
}


def make_api(target, token=None) -> fastapi.FastAPI:
    """The web app, talking to the node on ``target`` (a data directory or an admin URL)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: fastapi.FastAPI):
        async with roost.connect_async(target, token=token) as client:
            app.state.roost = client
            yield

    api = fastapi.FastAPI(title="shop", lifespan=lifespan)

    def node(request: fastapi.Request) -> roost.AsyncClient:
        return request.app.state.roost

    @api.exception_handler(roost.Error)
    async def roost_error(request: fastapi.Request, exc: roost.Error) -> JSONResponse:
        body = {"error": {"kind": exc.kind.value, "message": exc.message}}
        return JSONResponse(body, status_code=STATUS.get(exc.kind, 500))

    @api.post("/orders", status_code=201)
    async def create_order(new: NewOrder, request: fastapi.Request) -> dict:
        workflow_id = await node(request).start(order, new.order_id, new.amount, id=new.order_id)
        return {"workflow_id": workflow_id}

    @api.post("/orders/{order_id}/approve")
    async def approve(order_id: str, approver: str, request: fastapi.Request) -> dict:
        await node(request).signal(order_id, "approve", approver)
        return {"approved": order_id}

    @api.get("/orders/{order_id}")
    async def order_status(order_id: str, request: fastapi.Request) -> dict:
        described = await node(request).describe(order_id)
        return {"order": order_id, "status": described["status"]}

    @api.get("/orders/{order_id}/result")
    async def order_result(order_id: str, request: fastapi.Request, wait: float = 30) -> dict:
        return await node(request).result(order_id, timeout=wait)

    return api


api = make_api(os.environ.get("ROOST_DATA_DIR", "roost-data"))


# -- the demo: both programs in one process ----------------------------------------------


class NodeThread:
    """``roost.open_node`` with an admin server, under ``trio.run`` on a thread of its own."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ready = threading.Event()
        self.thread = threading.Thread(target=trio.run, args=(self.serve,))

    async def serve(self) -> None:
        async with roost.open_node(shop, self.data_dir, admin="127.0.0.1:0"):
            self.token = trio.lowlevel.current_trio_token()
            self.stop = trio.Event()
            self.ready.set()
            await self.stop.wait()

    def __enter__(self) -> "NodeThread":
        self.thread.start()
        self.ready.wait()
        return self

    def __exit__(self, *exc: object) -> None:
        trio.from_thread.run_sync(self.stop.set, trio_token=self.token)
        self.thread.join()


async def demo(web_app: fastapi.FastAPI) -> None:
    transport = httpx.ASGITransport(app=web_app)
    async with (
        web_app.router.lifespan_context(web_app),
        httpx.AsyncClient(transport=transport, base_url="http://shop") as web,
    ):

        async def show(method: str, url: str, **kwargs) -> None:
            answer = await web.request(method, url, **kwargs)
            print(f"{method} {url} -> {answer.status_code} {answer.json()}")

        await show("POST", "/orders", json={"order_id": "o-1", "amount": 4200})
        await show("GET", "/orders/o-1")
        await show("POST", "/orders", json={"order_id": "o-1", "amount": 1})  # it runs: 409
        await show("POST", "/orders/o-1/approve", params={"approver": "ann"})
        await show("GET", "/orders/o-1/result")
        await show("GET", "/orders/o-404")
        await show("POST", "/orders", json={"order_id": "o-2", "amount": 99})
        await show("GET", "/orders/o-2/result", params={"wait": 0})


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "roost-data"
        with NodeThread(data):
            print("node up; the web app finds it through", data.name)
            asyncio.run(demo(make_api(data)))
        print("node stopped; the web app's client needs no node to start an order:")
        asyncio.run(offline(make_api(data)))


async def offline(web_app: fastapi.FastAPI) -> None:
    transport = httpx.ASGITransport(app=web_app)
    async with (
        web_app.router.lifespan_context(web_app),
        httpx.AsyncClient(transport=transport, base_url="http://shop") as web,
    ):
        started = await web.post("/orders", json={"order_id": "o-3", "amount": 7})
        print("POST /orders ->", started.status_code, started.json(), "(stored for the next node)")
        waited = await web.get("/orders/o-3/result", params={"wait": 0})
        print("GET /orders/o-3/result ->", waited.status_code, waited.json()["error"]["kind"])


if __name__ == "__main__":
    main()
