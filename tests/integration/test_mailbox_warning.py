"""A mailbox past its warning size logs once and shows in a gauge (issue 24)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

import roost
from roost import process
from roost.admin._metrics import metrics_text, new_registry
from roost.mailbox._mailbox import Mailbox

app = roost.App("mbw")


@app.process
async def never_reads() -> None:
    await trio.sleep_forever()


def _gauges(node: roost.NodeHandle) -> dict[str, float]:
    text = metrics_text(new_registry(node)).decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("roost_mailbox")
    }


async def test_a_mailbox_past_its_warning_size_logs_once_and_shows_in_the_gauges(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="roost.process")
    async with roost.open_node(app, mailbox_warning=5) as node:
        pid = await process.spawn(never_reads)
        quiet = await process.spawn(never_reads)
        for i in range(4):
            process.send(pid, "job", i)
        process.send(quiet, "job", 0)
        assert _gauges(node) == {
            "roost_mailbox_unread_max": 4.0,
            "roost_mailboxes_over_warning": 0.0,
        }
        assert not [r for r in caplog.records if "unread messages" in r.getMessage()]
        for i in range(4, 12):
            process.send(pid, "job", i)
        warnings = [r for r in caplog.records if "unread messages" in r.getMessage()]
        assert len(warnings) == 1  # once, at the fifth
        assert warnings[0].levelno == logging.WARNING
        assert f"the mailbox of {pid} holds 5 unread messages" in warnings[0].getMessage()
        assert "mailbox_limit" in warnings[0].getMessage()  # the advice
        assert _gauges(node) == {
            "roost_mailbox_unread_max": 12.0,
            "roost_mailboxes_over_warning": 1.0,
        }


def test_messages_kept_for_a_later_listen_count_toward_the_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="roost.process")
    box = Mailbox(None, None, warn_at=3)  # no subscription at all: every message is retained
    for i in range(5):
        box.deliver("t", i, None)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        "the mailbox of None holds 3 unread messages"
    ]


async def test_open_node_refuses_a_mailbox_warning_that_is_not_a_positive_int() -> None:
    for bad in (0, -1, 1.5, "10"):
        with pytest.raises(roost.Error) as info:
            async with roost.open_node(app, mailbox_warning=bad):  # type: ignore[arg-type]
                pass
        assert info.value.kind is roost.ErrorKind.INVALID
        assert "mailbox_warning" in info.value.message
