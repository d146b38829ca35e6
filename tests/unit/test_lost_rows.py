"""Which open runs lost a timer row to a damaged store (``workflow._local._lost``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from roost.storage import Codec
from roost.workflow._local._lost import timer_lost
from roost.workflow._local._records import RunRecord
from roost.workflow._plan_start import SYSTEM_SEQ
from roost.workflow._status import RunStatus

AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class _NoHistory:
    """A read transaction whose runs have no history rows yet."""

    def prefix(self, table: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return []


def _record(**fields: Any) -> RunRecord:
    return RunRecord(
        workflow_id="w",
        run_id="r1",
        workflow_type="app:flow",
        status=RunStatus.RUNNING,
        started_at=AT,
        **fields,
    )


def test_an_open_run_without_its_run_timeout_row_lost_it() -> None:
    record = _record(options={"run_timeout": 60.0})
    codec = Codec()
    assert timer_lost(_NoHistory(), codec, record, set(), [])  # type: ignore[arg-type]
    rows = {("r1", SYSTEM_SEQ["run_timeout"])}
    assert not timer_lost(_NoHistory(), codec, record, rows, [])  # type: ignore[arg-type]


def test_an_open_run_without_its_execution_deadline_row_lost_it() -> None:
    record = _record(execution_deadline=AT + dt.timedelta(hours=1))
    codec = Codec()
    assert timer_lost(_NoHistory(), codec, record, set(), [])  # type: ignore[arg-type]
    rows = {("r1", SYSTEM_SEQ["execution_timeout"])}
    assert not timer_lost(_NoHistory(), codec, record, rows, [])  # type: ignore[arg-type]


def test_a_run_with_no_runtime_timer_needs_no_row() -> None:
    assert not timer_lost(_NoHistory(), Codec(), _record(), set(), [])  # type: ignore[arg-type]
