"""``GET /metrics`` on the admin server: Prometheus text from the node's own counters.

Real HTTP on trio's real clock, as in test_admin.py; queue work is waited for through events
its handlers set, workflows through the API's ``?wait=1``.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import prometheus_client
import trio
from prometheus_client.parser import text_string_to_metric_families

import roost
from roost import funcs, workflow

app = roost.App("met")
app.queue("slow", concurrency=1)
app.queue("doomed", max_retries=0, concurrency=1)

EVENTS: dict[str, trio.Event] = {}


@app.activity
async def double(x: int) -> int:
    return 2 * x


@app.activity(retry_policy=roost.RetryPolicy(maximum_attempts=1))
async def explode(x: int) -> int:
    raise ValueError("boom")


@app.workflow
async def doubler(x: int) -> int:
    return await funcs.call(double, x)


@app.workflow
async def exploder(x: int) -> int:
    return await funcs.call(explode, x)


@app.workflow
async def parent(x: int) -> int:
    return await workflow.exec(doubler, x) + 1


@app.workflow
async def unstorable() -> object:
    return object()  # the codec refuses it: a workflow task failure, retried with backoff


@app.activity
async def gated(payload: int) -> None:
    EVENTS["started"].set()
    await EVENTS["gate"].wait()


@app.activity
async def bad_job(payload: int) -> None:
    raise ValueError("bad")


@app.activity
async def marker(payload: int) -> None:
    EVENTS["marker"].set()


@asynccontextmanager
async def admin_node() -> AsyncIterator[tuple[roost.NodeHandle, httpx.AsyncClient]]:
    async with roost.open_node(app, admin="127.0.0.1:0") as node:
        token = json.loads((node.data_dir / "admin.json").read_text())["token"]
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=node.admin_url, headers=headers) as client:
            yield node, client


async def scrape(client: httpx.AsyncClient) -> dict:
    """{(sample name, frozenset of labels): value} of one scrape."""
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def run(client: httpx.AsyncClient, entry: str, *args) -> dict:
    started = await client.post("/api/workflows", json={"entry": entry, "args": list(args)})
    workflow_id = started.json()["workflow_id"]
    done = await client.get(f"/api/workflows/{workflow_id}/result", params={"wait": "1"})
    return done.json()


async def test_metrics_count_what_ran():
    EVENTS.update(started=trio.Event(), gate=trio.Event(), marker=trio.Event())
    async with admin_node() as (node, client):
        before = await scrape(client)
        assert value(before, "roost_workflows_started_total", type="met:doubler") == 0
        for x in range(3):
            assert (await run(client, "met:doubler", x))["result"] == 2 * x
        assert (await run(client, "met:parent", 5))["result"] == 11  # and its child
        failed = await run(client, "met:exploder", 1)
        assert failed["status"] == "failed"
        for n in range(3):
            await roost.enqueue("slow", "met:gated", n)
        await EVENTS["started"].wait()  # one running (concurrency 1), two waiting
        await roost.enqueue("doomed", "met:bad_job", 1)
        await roost.enqueue("doomed", "met:marker", 2)
        await EVENTS["marker"].wait()  # after the bad job's move to the DLQ

        samples = await scrape(client)
        assert value(samples, "roost_workflows_started_total", type="met:doubler") == 4
        assert value(samples, "roost_workflows_completed_total", type="met:doubler") == 4
        assert value(samples, "roost_workflows_started_total", type="met:parent") == 1
        assert value(samples, "roost_workflows_failed_total", type="met:doubler") == 0
        assert value(samples, "roost_workflows_started_total", type="met:exploder") == 1
        assert value(samples, "roost_workflows_failed_total", type="met:exploder") == 1
        assert value(samples, "roost_workflows_completed_total", type="met:exploder") == 0
        closed = value(
            samples, "roost_workflows_closed_total", type="met:exploder", status="failed"
        )
        assert closed == 1
        assert not [k for k in samples if k[0] == "roost_workflow_task_failures_total"]
        assert value(samples, "roost_activity_attempts_total", entry="met:double") == 4
        assert value(samples, "roost_activity_failures_total", entry="met:double") == 0
        assert value(samples, "roost_activity_attempts_total", entry="met:explode") == 1
        assert value(samples, "roost_activity_failures_total", entry="met:explode") == 1
        # Queue handlers run as targets, not as a workflow's activity attempts.
        assert value(samples, "roost_activity_attempts_total", entry="met:gated") == 0
        # They have counters of their own: each delivery attempt, and the failed ones.
        deliveries, failures = "roost_queue_deliveries_total", "roost_queue_delivery_failures_total"
        assert value(samples, deliveries, queue="slow", entry="met:gated") == 1
        assert value(samples, failures, queue="slow", entry="met:gated") == 0
        assert value(samples, deliveries, queue="doomed", entry="met:bad_job") == 1
        assert value(samples, failures, queue="doomed", entry="met:bad_job") == 1
        assert value(samples, deliveries, queue="doomed", entry="met:marker") == 1
        assert value(samples, failures, queue="doomed", entry="met:marker") == 0
        durations = "roost_activity_duration_seconds"
        assert value(samples, f"{durations}_count", entry="met:double") == 4
        assert value(samples, f"{durations}_count", entry="met:explode") == 1
        assert value(samples, f"{durations}_bucket", entry="met:double", le="+Inf") == 4
        assert value(samples, f"{durations}_sum", entry="met:double") > 0
        assert value(samples, f"{durations}_count", entry="met:gated") == 0  # a queue's
        commits = value(samples, "roost_commits_total")
        assert commits > 0
        assert value(samples, "roost_commit_duration_seconds_count") == commits
        assert value(samples, "roost_commit_requests_total") >= commits
        assert value(samples, "roost_commit_batch_largest") >= 1
        assert value(samples, "roost_queue_depth", queue="slow") == 2
        assert value(samples, "roost_queue_in_flight", queue="slow") == 1
        assert value(samples, "roost_queue_dead", queue="slow") == 0
        assert value(samples, "roost_queue_dead", queue="doomed") == 1
        assert value(samples, "roost_queue_depth", queue="doomed") == 0
        assert value(samples, "roost_processes") == node.process_count()
        assert value(samples, "roost_workflows_open", type="met:doubler") == 0  # all closed
        assert value(samples, "roost_activities_pending") == 0
        assert value(samples, "roost_timers") == 0
        # The client library's process collectors, on the node's own registry.
        assert value(samples, "process_resident_memory_bytes") > 0
        assert value(samples, "process_cpu_seconds_total") > 0
        assert [k for k in samples if k[0] == "python_info"]
        assert [k for k in samples if k[0] == "python_gc_collections_total"]
        EVENTS["gate"].set()


async def test_workflow_task_failures_are_counted():
    async with admin_node() as (node, client):
        started = await client.post("/api/workflows", json={"entry": "met:unstorable"})
        workflow_id = started.json()["workflow_id"]
        samples = await scrape(client)
        assert node.describe(workflow_id)["task_failure"] is not None
        failures = value(samples, "roost_workflow_task_failures_total", type="met:unstorable")
        assert failures >= 1
        assert value(samples, "roost_workflows_open", type="met:unstorable") == 1
        assert value(samples, "roost_workflows_failed_total", type="met:unstorable") == 0


async def test_each_node_has_its_own_registry_never_the_global_one():
    async with admin_node() as (_, one), admin_node() as (_, other):
        await run(one, "met:doubler", 1)
        assert value(await scrape(one), "roost_workflows_started_total", type="met:doubler") == 1
        assert value(await scrape(other), "roost_workflows_started_total", type="met:doubler") == 0
    global_text = prometheus_client.generate_latest().decode()
    assert "roost_" not in global_text


@app.workflow
async def sleeper(seconds: float) -> str:
    await roost.sleep(seconds)
    return "slept"


@app.activity
async def held(x: int) -> int:
    EVENTS["held"].set()
    await EVENTS["release"].wait()
    return x


@app.workflow
async def holder(x: int) -> int:
    return await funcs.call(held, x)


@app.process
async def hoarder() -> None:
    EVENTS["hoarder"].set()
    await trio.sleep_forever()  # never reads its mailbox


async def test_gauges_of_open_workflows_pending_activities_timers_and_mailboxes():
    EVENTS.update(held=trio.Event(), release=trio.Event(), hoarder=trio.Event())
    async with admin_node() as (_, client):
        for _ in range(2):
            await client.post("/api/workflows", json={"entry": "met:sleeper", "args": [3600]})
        await client.post("/api/workflows", json={"entry": "met:holder", "args": [7]})
        await EVENTS["held"].wait()
        pid = await roost.process.spawn(hoarder)
        await EVENTS["hoarder"].wait()
        for n in range(3):
            roost.process.send(pid, "job", n)
        samples = await scrape(client)
        assert value(samples, "roost_workflows_open", type="met:sleeper") == 2
        assert value(samples, "roost_workflows_open", type="met:holder") == 1
        assert value(samples, "roost_activities_pending") == 1
        assert value(samples, "roost_timers") == 2
        assert value(samples, "roost_unread_messages") >= 3
        assert value(samples, "roost_mailbox_unread_max") == 3
        EVENTS["release"].set()
