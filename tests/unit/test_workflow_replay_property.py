"""Generated workflow programs: replay reproduces every command, and a crash (drop the
driver, rebuild it by replay, continue) changes nothing about the outcome."""

from hypothesis import given
from hypothesis import strategies as st
from workflow_sim import Sim, replay

import roost
from roost import channel, coroutine, funcs, process

TOPICS = ["a", "b"]

step = st.recursive(
    st.one_of(
        st.tuples(st.just("activity"), st.integers(0, 99)),
        st.tuples(st.just("failing"), st.integers(0, 99)),
        st.tuples(st.just("sleep"), st.integers(1, 120)),
        st.tuples(st.just("signal"), st.sampled_from(TOPICS)),
        st.tuples(st.just("select"), st.sampled_from(TOPICS), st.integers(1, 120)),
        st.tuples(st.just("uuid")),
    ),
    lambda inner: st.tuples(st.just("coroutine"), st.lists(inner, max_size=3)),
    max_leaves=8,
)
programs = st.lists(step, max_size=8)
signals = st.lists(
    st.tuples(st.integers(0, 600), st.sampled_from(TOPICS), st.integers(0, 9)), max_size=6
)


def activities():
    def echo(x):
        return x

    def failing(x):
        raise roost.Error(f"no {x}", kind=roost.ErrorKind.UNAVAILABLE)

    return {"t:echo": echo, "t:failing": failing}


async def run_steps(steps, out, joins=None):
    for s in steps:
        match s:
            case ("activity", x):
                out.append(await funcs.call("t:echo", x))
            case ("failing", x):
                try:
                    await funcs.call("t:failing", x)
                except roost.Error as err:
                    out.append(err.message)
            case ("sleep", secs):
                await roost.sleep(secs)
                out.append(roost.now().isoformat())
            case ("signal", topic):
                got = await channel.select(process.listen(topic), roost.after(900))
                out.append((topic, got.value if got.index == 0 else "gave up"))
            case ("select", topic, secs):
                got = await channel.select(process.listen(topic), roost.after(secs))
                out.append(("sel", got.index, str(got.value)))
            case ("uuid",):
                out.append(str(roost.uuid4()))
            case ("coroutine", sub):
                # Runs concurrently with the rest of the program (and its siblings): the
                # interleaving of their commands is what the driver must reproduce.
                done = channel.new(1)

                async def child(sub=sub, done=done):
                    inner = []
                    await run_steps(sub, inner, [])
                    await done.send(inner)

                coroutine.spawn(child)
                out.append(("spawned", len(sub)))
                if joins is not None:
                    joins.append(done)


async def program(steps):
    out, joins = [], []
    await run_steps(steps, out, joins)
    out.extend([await done.receive() for done in joins])
    return out


@given(steps=programs, sigs=signals)
def test_replay_reproduces_commands_and_result(steps, sigs):
    sim = Sim(program, steps, activities=activities(), signals=sigs)
    live = sim.run()
    again = replay(program, sim.history)  # raises NondeterminismError on any divergence
    assert (again.status, again.result, again.error) == (live.status, live.result, live.error)


@given(steps=programs, sigs=signals, data=st.data())
def test_a_crash_at_any_activation_changes_nothing(steps, sigs, data):
    baseline = Sim(program, steps, activities=activities(), signals=sigs)
    expected = baseline.run()
    crash_at = data.draw(st.integers(1, max(1, len(baseline.history))))
    crashed = Sim(program, steps, activities=activities(), signals=sigs)
    got = crashed.run(crash_at=crash_at)
    assert (got.status, got.result) == (expected.status, expected.result)
    assert [a.commands for a in crashed.history] == [a.commands for a in baseline.history]
