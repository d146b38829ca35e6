"""A whole app for ``test_app_main.py``: ``@app.main`` starts a supervision tree.

``MAIN_MODE`` (environment) picks what main does: ``tree`` (default) spawns the
``whole:root`` supervisor, whose two workers run until stopped, and returns; ``fail``
raises; ``ready`` also prints ``ready`` to stdout once the tree is up (for scripts that
wait for it before sending a signal). Run as a script, it serves under ``roost.run(app)``.
"""

import logging
import os
import sys

import trio

import roost
from roost import process, supervisor

app = roost.App("whole")


@app.process
async def worker() -> None:
    await trio.sleep_forever()


app.supervisor(
    "root",
    children=[supervisor.child("a", "whole:worker"), supervisor.child("b", "whole:worker")],
)


@app.main
async def main() -> None:
    mode = os.environ.get("MAIN_MODE", "tree")
    if mode == "fail":
        raise RuntimeError("the app's configuration is missing")
    await process.with_options(name="whole-root").spawn("whole:root")
    logging.getLogger("whole").info("the tree is up")
    if mode == "ready":
        print("ready", flush=True)


if __name__ == "__main__":
    data = sys.argv[1] if len(sys.argv) > 1 else None
    roost.run(app, data_dir=data)
