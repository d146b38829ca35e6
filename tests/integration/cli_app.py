"""An app for the CLI tests (imported by ``roost replay --app cli_app:app``)."""

import os

import roost
from roost import funcs

app = roost.App("cli")


@app.activity
async def step(name):
    return name


@app.activity
async def audit(name):
    return name


if os.environ.get("ROOST_CLI_CHANGED"):

    @app.workflow
    async def flow():  # the "new build": an audit step inserted first
        await funcs.call("cli:audit", "a")
        await funcs.call("cli:step", "a")
        return await funcs.call("cli:step", "b")

else:

    @app.workflow
    async def flow():
        await funcs.call("cli:step", "a")
        return await funcs.call("cli:step", "b")
