"""Any bytes in a run directory's side files (the journal, watchdog.json, a heartbeat, launch.json,
exit.json, pid) give a clear result: `status --json`, `goodput --json`, the page's journal view, the
MCP tools' verdict state, the supervisor's journal readers and the proof of a launch never raise,
never hang and never write (hypothesis; `make fuzz` raises the example budget)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import time

from hypothesis import given
from hypothesis import strategies as st

from fuzzing import FUZZ, HOSTILE_VALUES
from runwatch.cli import main
from runwatch.files.rundir import JOURNAL
from runwatch.procs.launched import not_launched, not_supervisor
from runwatch.procs.proctree import ProcessTree
from runwatch.supervising.supervision import last_record, read_journal, supervise_status
from runwatch.views.agent.verdicts import watch_state
from runwatch.views.serve.supervision import SupervisionView

NOW = 1_700_000_000.0
JOURNAL_REC = {
    "time": NOW,
    "event": "launch",
    "attempt": 1,
    "pid": 4242,
    "kind": None,
    "class": None,
    "step": 3,
    "checkpoint": None,
    "restarts": 0,
    "rollbacks": 0,
    "budgets": {"restarts": 5, "rollbacks": 2},
    "supervisor": 4243,
    "log": {"target": "metrics.jsonl", "format": None, "pattern": [], "run": None, "map": []},
}
WATCHDOG = {"verdict": "anomaly", "kind": "stall", "class": "transient", "step": 3, "message": "m", "time": NOW}
HEARTBEAT = {"state": "running", "rank": 0, "world_size": 1, "session_id": "s", "time": NOW, "step": 3}
LAUNCH = {"pid": 4242, "pgid": 4242, "start_ticks": 1, "attempt_id": "a", "waiter": 4241, "command": ["x"]}
EXIT = {"pid": 4242, "status": 0, "signal": None, "time": NOW}
BASES = {
    JOURNAL: json.dumps(JOURNAL_REC).encode() + b"\n",
    "watchdog.json": json.dumps(WATCHDOG).encode(),
    "heartbeats/rank-0.json": json.dumps(HEARTBEAT).encode(),
    "launch.json": json.dumps(LAUNCH).encode(),
    "exit.json": json.dumps(EXIT).encode(),
    "pid": b"4242\n",
}
HOSTILE = [
    b"[" * 50_000 + b"]" * 50_000,
    b'{"a":' * 20_000 + b"1" + b"}" * 20_000,
    b"\xff\xfe\x00",
    b"NaN",
    b"",
    b"\n\n\n",
    b"-1",
    b"0",
    b"99999999999999999999999999",
]


@st.composite
def side_file(draw: st.DrawFn, name: str) -> bytes:
    """The file's real content, mutated: a value swapped for a hostile one, bytes inserted, a cut,
    repeated lines, or something else entirely."""
    data = BASES[name]
    kind = draw(st.sampled_from(["value", "bytes", "cut", "repeat", "hostile", "binary", "keep"]))
    if kind == "value" and name != "pid":
        doc = json.loads(data)
        key = draw(st.sampled_from(sorted(doc)))
        text = json.dumps({**doc, key: "@@"})
        return text.replace('"@@"', draw(st.sampled_from(HOSTILE_VALUES)).decode("latin-1")).encode("latin-1") + b"\n"
    if kind == "bytes":
        pos = draw(st.integers(0, len(data)))
        return data[:pos] + draw(st.binary(max_size=8)) + data[pos:]
    if kind == "cut":
        return data[: draw(st.integers(0, len(data)))]
    if kind == "repeat":
        return data * draw(st.integers(2, 40)) + data[: draw(st.integers(0, len(data)))]
    if kind == "hostile":
        return draw(st.sampled_from(HOSTILE)) + draw(st.sampled_from([b"", b"\n"]))
    if kind == "binary":
        return draw(st.binary(max_size=200))
    return data


def _tree(root: str) -> dict[str, tuple[int, int]]:
    out = {}
    for folder, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(folder, n)
            s = os.lstat(p)
            out[os.path.relpath(p, root)] = (s.st_size, s.st_mtime_ns)
    return out


@FUZZ
@given(st.fixed_dictionaries({name: st.none() | side_file(name) for name in BASES}))
def test_any_bytes_in_the_side_files_give_a_clear_result(files):
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        os.makedirs(os.path.join(run, "heartbeats"))
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for s in range(1, 4):
                f.write(json.dumps({"step": s, "t": NOW + s, "loss": 1.0 / s}) + "\n")
        for name, data in files.items():
            if data is not None:
                with open(os.path.join(run, name), "wb") as f:
                    f.write(data)
        before = _tree(tmp)
        t0 = time.monotonic()
        for argv in (["status", run, "--json"], ["goodput", run, "--json"]):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(argv)
            assert code in (0, 1, 2, 7), (argv, code, err.getvalue())
            if code in (0, 7):
                json.loads(out.getvalue(), parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))
            else:
                assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        read_journal(run)
        last_record(run)
        supervise_status(run)
        view = SupervisionView(os.path.join(run, JOURNAL))
        view.refresh()
        json.dumps(view.facts(), allow_nan=False)
        watch_state(run)
        assert not_launched(run, os.getpid()) is not None  # nothing written there proves this process
        not_supervisor(run, os.getpid())
        tree = ProcessTree.of_launch(run)
        assert tree is None or os.getpid() not in tree.members()
        assert time.monotonic() - t0 < 30  # no hang (a quadratic read of a torn line would show here)
        assert _tree(tmp) == before  # nothing written
