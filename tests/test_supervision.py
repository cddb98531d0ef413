"""supervision.py: the counters a journal record carries (save, load, equal), the journal read back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runwatch.files.rundir import JOURNAL
from runwatch.supervising.supervision import Counters, append, read_journal

_counters = st.builds(
    Counters,
    attempt=st.integers(0, 10**6),
    restarts=st.integers(0, 1000),
    rollbacks=st.integers(0, 1000),
    streak=st.integers(0, 60),
    env=st.dictionaries(
        st.sampled_from(["RUNWATCH_RESUME_FROM", "RUNWATCH_ROLLBACK", "RUNWATCH_SKIP_STEPS"]), st.text()
    ),
    checkpoints_at_launch=st.integers(0, 10**6),
    high_step=st.floats(0, 1e9, allow_nan=False),
    stuck=st.integers(0, 100),
    first_launch=st.none() | st.floats(1e9, 2e9, allow_nan=False),
    stale_sessions=st.frozensets(st.text(min_size=1)),
)


@given(_counters)
def test_counters_save_load_equal(c):
    assert Counters.from_json(json.loads(json.dumps(c.to_json(), allow_nan=False))) == c


@pytest.mark.parametrize(
    "rec",
    [{}, {"attempt": "3", "restarts": -1, "env": [], "high_step": True, "stale_sessions": "x"}, {"first_launch": None}],
)
def test_counters_of_a_record_without_them_are_the_defaults(rec):
    assert Counters.from_json(rec) == Counters()


def test_read_journal_leaves_out_a_torn_last_line(tmp_path):
    append(str(tmp_path), {"event": "launch", "attempt": 1})
    append(str(tmp_path), {"event": "verdict", "attempt": 1})
    with open(tmp_path / JOURNAL, "a") as f:
        f.write('{"event": "sto')
    assert [r["event"] for r in read_journal(str(tmp_path))] == ["launch", "verdict"]
    assert read_journal(str(tmp_path / "missing")) == []
