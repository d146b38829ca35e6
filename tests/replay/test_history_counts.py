"""``workflow.history_length()`` / ``history_size()`` count the history so far, exactly.

During an activation they count every activation recorded before it (events and commands;
their stored bytes) plus this activation's incoming events (the start event and start
messages in the first one). A live run, the same run rebuilt after a restart, and the
Replayer all read the same values, so code that decides on them (continue-as-new at some
size, say) replays.
"""

import datetime as dt

import roost
from roost import funcs, process, workflow
from roost.storage import Codec
from roost.testing import Replayer
from roost.workflow._history import ScheduleActivity, unflatten
from roost.workflow._history_format import encode_activation

app = roost.App("hc")
STEPS = 4
PAUSE_AFTER = 1  # the step after which the workflow waits for "go" (the test restarts)
# Values that the history stores in another form than they were given (a tuple as a list,
# an aware datetime): sizes are of what is stored, live as on replay.
ODD = ("t", 1.5, {"k": [1, 2]}, dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))))


@app.activity
async def note(step: int, seen: list[int], odd: tuple) -> tuple:
    return odd


@app.workflow
async def measures(notify: roost.Pid) -> list[list[int]]:
    seen = []
    for step in range(STEPS):
        seen.append([workflow.history_length(), workflow.history_size()])
        await funcs.call(note, step, seen[-1], ODD)  # the values seen go into the history
        if step == PAUSE_AFTER:
            process.send(notify, "paused")
            await process.listen("go").receive()
    seen.append([workflow.history_length(), workflow.history_size()])
    info = workflow.info()
    assert info is not None
    assert [info.history_length, info.history_size] == seen[-1]
    return seen


def expected(history: list) -> list[list[int]]:
    """Per activation: (events and commands, bytes) recorded before it, plus its events."""
    codec, out, length, size = Codec(), [], 0, 0
    for act in unflatten(history):
        out.append([length + len(act.events), size + len(codec.encode(list(act.events)))])
        length += len(act.events) + len(act.commands)
        size += len(encode_activation(codec, act))  # as stored
    return out


async def test_history_counts_are_the_same_live_after_a_restart_and_in_the_replayer(
    autojump_clock, tmp_path
):
    async with roost.open_node(app, tmp_path) as node:
        paused = process.listen("paused")
        await process.with_options(id="m").with_message("hello", 1).spawn(measures, process.pid())
        await paused.receive()  # it waits for "go": the test restarts the node
    async with roost.open_node(app, tmp_path) as node:  # rebuilt by replay on "go"
        await process.send(roost.Pid("local", "hc:workflows", "m"), "go")
        seen = await process.with_options(id="m").exec(measures, None)  # joins the open run
        history = node.history("m")
        described = node.describe("m")
    # The first step counts the start event and the start message.
    started_and_message = unflatten(history)[0].events
    assert seen[0] == [2, len(Codec().encode(started_and_message))]
    # Each value is the history so far when the step ran (steps 0-1 ran live on the first
    # node and were replayed on the second; the "go" came in activation 4).
    per_activation = expected(history)
    assert seen == [per_activation[i] for i in (0, 1, 3, 4, 5)]
    # What the first node saw live (recorded as the activity's arguments) is what the
    # replay on the second node computed.
    recorded = [
        c.args[1]
        for act in unflatten(history)
        for c in act.commands
        if isinstance(c, ScheduleActivity)
    ]
    assert recorded == seen[:STEPS]
    assert Replayer(app).replay(history) == seen
    assert described["history_length"] == sum(
        len(a.events) + len(a.commands) for a in unflatten(history)
    )
