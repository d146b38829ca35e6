"""A hand-over race leaves nothing behind in the in-memory map of moved inbox rows.

A row re-keyed to the next run is remembered until its committer hands it to memory; a
terminate request is never handed to memory, so it must not be remembered either (the
map, and the closed run it names, would stay for good and keep ``take`` off its fast path).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_workflow_handover_requests import app, check_outcome, go, issuer, target

from roost import process
from roost.testing import open_test_node


def forwarding(node: Any) -> Any:
    return node._node.local_workflows.forwarding


@pytest.mark.parametrize("order", ["issuer-first", "target-first", "target-a-pass-earlier"])
@pytest.mark.parametrize("kind", ["cancel", "send", "terminate"])
async def test_no_moved_entry_is_left_in_memory(kind: str, order: str, autojump_clock: Any) -> None:
    async with open_test_node(app) as node:
        tgt = await process.with_options(id="target").spawn(target, kind, 1)
        iss = await process.with_options(id="issuer").spawn(issuer, kind, "target")
        await node.wait_until_blocked()
        first, second = (iss, tgt) if order == "issuer-first" else (tgt, iss)
        await go(node, first, second, same_pass=order != "target-a-pass-earlier")
        await check_outcome(node, kind)
        fw = forwarding(node)
        assert fw._moved == {}, fw._moved
        assert fw._by_old == {} and fw._by_new == {}, (fw._by_old, fw._by_new)
