"""The app ``test_cli_ops.py`` drives through ``roost`` in real subprocesses.

- ``ops:greet(name)``: one activity, then ``"hello <name>"``.
- ``ops:waiter()``: waits for a ``go`` message (returns its payload) or a cancel (returns
  ``"canceled: <reason>"``); ``ACTIVITY_LOG`` records every activity that ran, so a test
  can tell that reading the store ran none.
- the ``jobs`` queue: ``ops:doomed`` always fails (no retries): its messages become dead
  letters; ``ops:record`` appends its payload to ``ACTIVITY_LOG``.
- a cron trigger of ``ops:tick`` once a year, so it never fires during a test.
"""

import os

import roost
from roost import channel, funcs, process

app = roost.App("ops")
app.queue("jobs", max_retries=0, jitter=0)
app.cron("0 0 1 1 *", "ops:tick")


def _log(line):
    path = os.environ.get("ACTIVITY_LOG")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)


@app.activity
async def shout(name):
    _log(f"shout {name}")
    return f"hello {name}"


@app.workflow
async def greet(name):
    return await funcs.call("ops:shout", name)


@app.workflow
async def waiter():
    inbox, events = process.inbox(), process.events()
    while True:
        got = await channel.select(inbox.case_receive(), events.case_receive())
        value = got.value
        if isinstance(value, roost.Cancel):
            return f"canceled: {value.reason}"
        if getattr(value, "topic", None) == "go":
            return value.payload


@app.activity
async def doomed(payload):
    raise ValueError(f"doomed {payload}")


@app.activity
async def record(payload):
    _log(f"record {payload}")


@app.process
async def tick(_tick):
    _log("tick")
