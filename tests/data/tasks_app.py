"""The workflows of the activity-task fixture (``make_tasks_store.py``): keep them unchanged.

The committed store in ``tasks_store.tar.gz`` was written by running these workflows with
the code that kept a row per scheduled activity in ``tasks``; a change here that alters the
commands they issue makes the fixture's open runs diverge.
"""

import trio

import roost
from roost import funcs

app = roost.App("tasks")

# Until a test sets it, ``blocking`` never returns and ``flaky`` always fails.
RELEASED = {"now": False}
CALLS: list[str] = []  # every attempt of every activity, in order


@app.activity
async def blocking(tag):
    CALLS.append(tag)
    if not RELEASED["now"]:
        await trio.sleep_forever()
    return f"{tag} done"


@app.activity
def quick(n):
    CALLS.append(f"quick {n}")
    return n + 1


@app.activity(
    retry_policy=roost.RetryPolicy(
        initial_interval=0.05, backoff_coefficient=100_000.0, maximum_attempts=10
    )
)
def flaky(tag):
    attempt = roost.activity_info().attempt
    CALLS.append(f"{tag} {attempt}")
    if not RELEASED["now"]:
        raise ConnectionError(f"{tag}: provider down")
    return f"{tag} done at attempt {attempt}"


@app.workflow
async def done():
    """Closed before the fixture was taken: one activity."""
    return await funcs.call(quick, 1)


@app.workflow
async def mid():
    """Open with its one activity in flight (attempt 1)."""
    return await funcs.call(blocking, "mid")


@app.workflow
async def retrying():
    """Open between attempts: two failed, the third due long after the fixture was taken."""
    return await funcs.call(flaky, "retry")


@app.workflow
async def parallel():
    """Open after one activity: two pending ones, and a third cancelled."""
    first = await funcs.call(quick, 10)
    a = funcs.start(blocking, "p-a")
    b = funcs.start(blocking, "p-b")
    c = funcs.start(blocking, "p-c")
    c.cancel()
    return [first, await a, await b]
