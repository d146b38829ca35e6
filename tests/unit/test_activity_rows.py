"""An attempt's outcome settles its task's row: the key it builds is the row's own key."""

from __future__ import annotations

import datetime as dt

from hypothesis import given
from hypothesis import strategies as st

from roost.storage import key
from roost.workflow._local._records import ActivityTask, history_key, row_prefix, task_key
from roost.workflow._local.activities._attempt import task_row

# Any text a key part can hold (a lone surrogate has no UTF-8 form: no row has one).
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
_AT = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _task(run_id: str, seq: int) -> ActivityTask:
    return ActivityTask(
        workflow_id="wf",
        run_id=run_id,
        seq=seq,
        entry="app:act",
        args=[],
        options={},
        scheduled_at=_AT,
    )


@given(run_id=_TEXT, seq=st.integers(min_value=0, max_value=2**64 - 1))
def test_the_row_an_outcome_settles_is_the_row_the_task_was_written_to(run_id, seq):
    assert task_row(_task(run_id, seq)) == task_key(run_id, seq)


def test_a_run_id_with_nul_bytes_and_a_large_seq_keep_their_escapes():
    for run_id in ("\x00", "a\x00b", "\x00\x00", "é\x00✓", ""):
        for seq in (0, 1, 255, 2**32, 2**64 - 1):
            assert task_row(_task(run_id, seq)) == task_key(run_id, seq)


@given(run_id=_TEXT)
def test_the_row_prefix_is_the_run_ids_key(run_id: str) -> None:
    # Every key of a run's rows in histories, inbox and tasks begins with it.
    assert row_prefix(run_id) == key(run_id)
    assert history_key(run_id, 7).startswith(row_prefix(run_id))
