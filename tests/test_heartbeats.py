"""Heartbeat files and the two rank rules: behaviour tables, garbage files, state round trips."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from runwatch.errors import InvalidRunError
from runwatch.files.heartbeats import (
    Heartbeat,
    HeartbeatConfig,
    current_session,
    heartbeat_path,
    parse_heartbeat,
    read_heartbeats,
)
from runwatch.judging.ranks import RankMonitor, StragglerRule, rank_stall_finding, rank_status_lines
from runwatch.judging.rules import Finding

NOW = 1_000_000.0


def beat(rank: int, **kw) -> Heartbeat:
    fields = dict(
        rank=rank,
        world_size=kw.pop("world_size", 4),
        host=f"node{rank // 2}",
        pid=100 + rank,
        session_id="s-1",
        state="running",
        time=NOW - 1,
        step=50,
        window=5,
        attempted=50,
        progress_time=NOW - 1,
        train_seconds=1.0,
        window_seconds=(1.0,) * 5,
        busy_seconds=(1.0,) * 5,
        where="train.py:10 in main",
        waiting=False,
    )
    fields.update(kw)
    return Heartbeat(**fields)


def ranks(*beats: Heartbeat) -> dict[int, Heartbeat]:
    return {b.rank: b for b in beats}


def write(run_dir, b: Heartbeat) -> None:
    path = heartbeat_path(str(run_dir), b.rank)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(b.to_json(), f)


STALE = dict(progress_time=NOW - 400)

STALL_TABLE = [
    ("all fresh", [beat(0), beat(1)], None),
    (
        "one silent, the other fresh",
        [beat(0), beat(1, time=NOW - 301, step=40)],
        (
            1,
            40,
            "rank 1 (host node0, pid 101) stopped at step 40: its heartbeat is 301 s old while 1 other rank(s) went on",
        ),
    ),
    (
        "one silent, the other ended after it",
        [beat(0, state="ended", time=NOW - 305), beat(1, time=NOW - 310, step=40)],
        (
            1,
            40,
            "rank 1 (host node0, pid 101) stopped at step 40: its heartbeat is 310 s old while 1 other rank(s) went on",
        ),
    ),
    ("every rank silent: the job froze, no rank to name", [beat(0, time=NOW - 400), beat(1, time=NOW - 401)], None),
    ("all ended", [beat(0, state="ended", time=NOW - 999), beat(1, state="ended", time=NOW - 999)], None),
    (
        "no progress, one behind",
        [beat(0, **STALE, attempted=60), beat(1, **STALE), beat(2, **STALE, attempted=60)],
        (
            1,
            50,
            "rank 1 (host node0, pid 101) stopped at step 50, behind the others (attempted update 50, others up to 60); "
            "no progress on any rank for 400 s",
        ),
    ),
    (
        "no progress, two behind",
        [beat(0, **STALE, attempted=60), beat(1, **STALE), beat(3, **STALE)],
        (
            1,
            50,
            "rank 1 (host node0, pid 101) (and 1 more) stopped at step 50, behind the others (attempted update 50, "
            "others up to 60); no progress on any rank for 400 s",
        ),
    ),
    (
        "no progress, one outside the collective",
        [
            beat(0, **STALE, waiting=True, where="graph.py:979 in _engine_run_backward"),
            beat(1, **STALE, where="train.py:42 in main"),
        ],
        (
            1,
            50,
            "rank 1 (host node0, pid 101) stopped at step 50 outside any collective (in train.py:42 in main) while "
            "1 rank(s) wait in one (in graph.py:979 in _engine_run_backward); no progress on any rank for 400 s",
        ),
    ),
    (
        "no progress before the first window: a long first step is not judged by waiting",
        [beat(0, **STALE, window=0, waiting=True), beat(1, **STALE, window=0, where="train.py:42 in main")],
        None,
    ),
    ("no progress, all waiting: cannot tell", [beat(0, **STALE, waiting=True), beat(1, **STALE, waiting=True)], None),
    ("no progress, no samples: cannot tell", [beat(0, **STALE, waiting=None), beat(1, **STALE, waiting=None)], None),
    ("one rank still progressing", [beat(0, **STALE, attempted=60), beat(1, progress_time=NOW - 2)], None),
    ("a single rank", [beat(0, **STALE)], None),
    (
        "a rank that ended early while the others wait",
        [
            beat(0, **STALE, waiting=True),
            beat(1, state="ended", time=NOW - 390, step=20, attempted=20),
            beat(2, **STALE, waiting=True),
        ],
        (
            1,
            20,
            "rank 1 (host node0, pid 101) ended at step 20 while 2 rank(s) still run; no progress on any running "
            "rank for 400 s",
        ),
    ),
]


@pytest.mark.parametrize("name,beats,expected", STALL_TABLE, ids=[t[0] for t in STALL_TABLE])
def test_rank_stall(name, beats, expected):
    assert rank_stall_finding(ranks(*beats), NOW, 300.0) == expected


def times(rank: int, series: list[float], **kw) -> Heartbeat:
    return beat(
        rank,
        window=kw.pop("window", len(series)),
        busy_seconds=tuple(series[-16:]),
        window_seconds=tuple(series[-16:]),
        **kw,
    )


STRAGGLER_TABLE = [
    ("steady ranks", [[1.0] * 8, [1.1] * 8, [0.9] * 8], None),
    (
        "rank 2 slow for 5 windows",
        [[1.0] * 8, [1.0] * 8, [1.0] * 3 + [2.0] * 5],
        (2, 50, "rank 2 (host node1) took 2.0x the median window time (2 s vs 1 s) for 5 consecutive windows"),
    ),
    ("slow for 4 windows only", [[1.0] * 8, [1.0] * 8, [1.0] * 4 + [2.0] * 4], None),
    ("slow windows interrupted", [[1.0] * 8, [1.0] * 8, [2.0, 2.0, 2.0, 1.0, 2.0, 2.0, 2.0, 2.0]], None),
    ("just at the factor is not slower", [[1.0] * 8, [1.0] * 8, [1.5] * 8], None),
    (
        "two ranks: the median is their mean",
        [[1.0] * 8, [3.5] * 8],
        (1, 50, "rank 1 (host node0) took 1.6x the median window time (3.5 s vs 2.25 s) for 5 consecutive windows"),
    ),
    ("zero median", [[0.0] * 8, [0.0] * 8, [1.0] * 8], None),
]


@pytest.mark.parametrize("name,series,expected", STRAGGLER_TABLE, ids=[t[0] for t in STRAGGLER_TABLE])
def test_straggler(name, series, expected):
    rule = StragglerRule(1.5, 5)
    assert rule.update(ranks(*(times(k, s) for k, s in enumerate(series)))) == expected


def test_straggler_judges_each_window_once_across_polls_and_reports_once():
    rule = StragglerRule(1.5, 3)
    fast, slow = [1.0] * 20, [1.0] * 4 + [3.0] * 16
    found = []
    for w in range(1, 21):  # one poll per window; rank 1 a window ahead of the others
        beats = ranks(times(0, fast[:w]), times(1, slow[: w + 1 if w < 20 else w]), times(2, fast[:w]))
        found.append(rule.update(beats))
    assert [i for i, f in enumerate(found, 1) if f is not None] == [7]  # windows 5, 6, 7 slow
    assert found[6][0] == 1
    assert rule.state_dict() == {"session_id": "s-1", "judged_window": 20, "counts": {"1": 16}, "active": [1]}


def test_straggler_skips_windows_no_longer_in_every_history_and_restarts_on_a_new_session():
    rule = StragglerRule(1.5, 2)
    assert rule.update(ranks(times(0, [1.0] * 40), times(1, [1.0] * 38 + [5.0] * 2), times(2, [1.0] * 40))) is not None
    assert rule.judged_window == 40
    new = {
        k: dataclasses.replace(b, session_id="s-2")
        for k, b in ranks(times(0, [1.0] * 3), times(1, [1.0] * 3), times(2, [1.0] * 3)).items()
    }
    assert rule.update(new) is None and rule.judged_window == 3 and rule.active == set()


def test_straggler_state_round_trip():
    rule = StragglerRule(1.5, 5)
    rule.update(ranks(times(0, [1.0] * 6), times(1, [1.0] * 3 + [2.0] * 3), times(2, [1.0] * 6)))
    state = json.loads(json.dumps(rule.state_dict()))
    again = StragglerRule(1.5, 5)
    again.load_state_dict(state)
    assert again.state_dict() == rule.state_dict() and again.counts == {1: 3}
    later = ranks(times(0, [1.0] * 8), times(1, [1.0] * 3 + [2.0] * 5), times(2, [1.0] * 8))
    assert again.update(later) == rule.update(later) is not None


def test_monitor_reports_a_stall_once_until_it_clears_and_round_trips(tmp_path):
    monitor = RankMonitor(rank_stall=300)
    write(tmp_path, beat(0))
    write(tmp_path, beat(1, time=NOW - 400, step=40))
    assert monitor.poll(str(tmp_path), NOW) == Finding(
        "rank_stall",
        40,
        "rank 1 (host node0, pid 101) stopped at step 40: its heartbeat is 400 s old while 1 other rank(s) went on",
    )
    assert monitor.poll(str(tmp_path), NOW + 1) is None  # reported once
    state = json.loads(json.dumps(monitor.state_dict()))
    again = RankMonitor(rank_stall=300)
    again.load_state_dict(state)
    assert (
        again.state_dict() == monitor.state_dict() == {"stalled": [1, 40], "straggler": monitor.straggler.state_dict()}
    )
    assert again.poll(str(tmp_path), NOW + 2) is None
    write(tmp_path, beat(1, time=NOW + 3, step=60))  # it moved again: cleared
    assert monitor.poll(str(tmp_path), NOW + 3) is None and monitor.stalled is None


def test_an_earlier_attempts_heartbeats_are_never_judged(tmp_path):
    # the first attempt's files (rank 1 frozen long ago) lie there when the relaunch starts
    write(tmp_path, beat(0, session_id="s-old"))
    write(tmp_path, beat(1, session_id="s-old", time=NOW - 400, step=40))
    assert RankMonitor(rank_stall=300).poll(str(tmp_path), NOW).kind == "rank_stall"
    monitor = RankMonitor(rank_stall=300)
    assert monitor.poll(str(tmp_path), NOW, ignore=frozenset({"s-old"})) is None
    # the new attempt's rank 0 has written; rank 1's file is still the old one: nothing to compare
    write(tmp_path, beat(0, session_id="s-new", time=NOW + 1))
    assert monitor.poll(str(tmp_path), NOW + 1, ignore=frozenset({"s-old"})) is None
    # both ranks of the new session, one of them frozen: judged as usual
    write(tmp_path, beat(1, session_id="s-new", time=NOW + 1, step=10))
    write(tmp_path, beat(0, session_id="s-new", time=NOW + 399, step=20))
    finding = monitor.poll(str(tmp_path), NOW + 400, ignore=frozenset({"s-old"}))
    assert finding is not None and finding.kind == "rank_stall"


def test_monitor_on_a_run_without_heartbeats(tmp_path):
    assert RankMonitor().poll(str(tmp_path), NOW) is None
    assert rank_status_lines(str(tmp_path), NOW) == []


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"rank_stall": 0}, "watch.rank_stall must be a number > 0, got 0"),
        ({"rank_stall": float("nan")}, "watch.rank_stall must be a number > 0, got nan"),
        ({"straggler_factor": 1.0}, "watch.straggler_factor must be a number > 1, got 1"),
        ({"straggler_patience": 0}, "watch.straggler_patience must be an int >= 1, got 0"),
        ({"straggler_patience": 2.0}, "watch.straggler_patience must be an int >= 1, got 2"),
    ],
)
def test_rank_options_are_validated(kwargs, message):
    from runwatch.judging.watchdog import Options

    with pytest.raises(ValueError) as err:  # ConfigError is a ValueError (and a UsageError: exit 2)
        Options(**kwargs)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"every_seconds": 0}, "heartbeat.every_seconds must be a finite number > 0, got 0"),
        ({"sample_seconds": -1.0}, "heartbeat.sample_seconds must be a finite number > 0, got -1.0"),
        ({"sample_seconds": "1"}, "heartbeat.sample_seconds must be a finite number > 0, got '1'"),
    ],
)
def test_heartbeat_config_is_validated(kwargs, message):
    with pytest.raises(ValueError) as err:
        HeartbeatConfig(**kwargs)
    assert str(err.value) == message


def _good() -> dict:
    return beat(3).to_json()


GARBAGE = [
    (
        "torn",
        b'{"rank": 3, "world_si',
        "heartbeats/rank-3.json: malformed JSON: Unterminated string starting at at column 13",
    ),
    ("empty", b"", "heartbeats/rank-3.json: malformed JSON: Expecting value at column 1"),
    ("not an object", b"[1, 2]", "heartbeats/rank-3.json: expected a JSON object, got list"),
    (
        "NaN token",
        json.dumps({**_good(), "time": float("nan")}).encode(),
        "heartbeats/rank-3.json: malformed JSON: NaN is not a valid JSON number",
    ),
    ("invalid UTF-8", b'{"host": "\xff"}', "heartbeats/rank-3.json: invalid UTF-8 at byte 10"),
    (
        "wrong type",
        json.dumps({**_good(), "step": "50"}).encode(),
        'heartbeats/rank-3.json: step must be an int >= 0, got "50"',
    ),
    (
        "bool for int",
        json.dumps({**_good(), "pid": True}).encode(),
        "heartbeats/rank-3.json: pid must be an int >= 0, got true",
    ),
    (
        "missing key",
        json.dumps({k: v for k, v in _good().items() if k != "host"}).encode(),
        "heartbeats/rank-3.json: host must be a string, got null",
    ),
    (
        "bad state",
        json.dumps({**_good(), "state": "zombie"}).encode(),
        "heartbeats/rank-3.json: state must be 'running' or 'ended', got 'zombie'",
    ),
    (
        "rank beyond world",
        json.dumps({**_good(), "world_size": 2}).encode(),
        "heartbeats/rank-3.json: rank must be < world_size (2), got 3",
    ),
    (
        "another rank's file",
        json.dumps({**_good(), "rank": 2}).encode(),
        "heartbeats/rank-3.json: rank must be 3 (the file's name), got 2",
    ),
    (
        "history lengths differ",
        json.dumps({**_good(), "busy_seconds": [1.0]}).encode(),
        "heartbeats/rank-3.json: busy_seconds must be as long as window_seconds (5), got 1",
    ),
    (
        "history too long",
        json.dumps({**_good(), "window_seconds": [1.0] * 17}).encode(),
        "heartbeats/rank-3.json: window_seconds must be a list of at most 16 finite numbers >= 0, got [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0,",
    ),
    ("too large", b" " * (64 * 1024 + 1), "heartbeats/rank-3.json: larger than 65536 bytes"),
]


@pytest.mark.parametrize("name,data,message", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_a_bad_heartbeat_file_is_reported_not_fatal(tmp_path, name, data, message):
    write(tmp_path, beat(0, world_size=4))
    with open(heartbeat_path(str(tmp_path), 3), "wb") as f:
        f.write(data)
    beats, problems = read_heartbeats(str(tmp_path))
    assert sorted(beats) == [0] and problems == [message]
    assert RankMonitor().poll(str(tmp_path), NOW) is None
    lines = rank_status_lines(str(tmp_path), NOW)
    assert lines[-1] == f"unreadable heartbeats: 1 ({message})"


def test_parse_heartbeat_round_trip():
    b = beat(2, where=None, waiting=None, train_seconds=None)
    assert parse_heartbeat(json.dumps(b.to_json()).encode(), "x") == b
    with pytest.raises(InvalidRunError, match="^x: window_seconds holds 5 windows, more than window \\(2\\)$"):
        parse_heartbeat(json.dumps({**b.to_json(), "window": 2}).encode(), "x")


def test_reading_skips_temp_files_and_other_names_and_a_folder_in_the_way(tmp_path):
    write(tmp_path, beat(0))
    folder = tmp_path / "heartbeats"
    (folder / "rank-1.json.tmp-123").write_text("{")
    (folder / "notes.txt").write_text("hello")
    (folder / "rank-2.json").mkdir()
    os.mkfifo(folder / "rank-3.json")  # would block a plain open() until someone writes
    beats, problems = read_heartbeats(str(tmp_path))
    assert sorted(beats) == [0]
    assert problems == ["heartbeats/rank-2.json: not a regular file", "heartbeats/rank-3.json: not a regular file"]


def test_current_session_keeps_the_newest_heartbeats_session():
    old = [beat(k, session_id="s-0", time=NOW - 900, world_size=4) for k in range(4)]
    new = [beat(k, session_id="s-1", world_size=2) for k in range(2)]
    assert sorted(current_session(ranks(*old, *new))) == [0, 1]
    # files of the old session for ranks beyond the new world are left out even if the session matched
    assert sorted(current_session(ranks(*old))) == [0, 1, 2, 3]


def test_status_lines_name_the_most_behind_and_the_slowest(tmp_path):
    write(tmp_path, times(0, [1.0] * 6, step=60, attempted=60))
    write(tmp_path, times(1, [1.0] * 5 + [3.0], step=60, attempted=60, host="gpu7"))
    write(tmp_path, times(2, [1.0] * 5, window=5, step=50, attempted=52, progress_time=NOW - 30, waiting=True))
    lines = rank_status_lines(str(tmp_path), NOW)
    assert lines == [
        "ranks: 3/4 heartbeats on 3 host(s), steps 50..60, newest 1.0 s ago; missing ranks 3",
        "most behind: rank 2 (host node1, pid 102) at step 50 (attempted update 52), last step 30 s ago, waiting in a collective",
        "slowest: rank 0 (host node0) 1.00x the median window time (1 s vs 1 s) at window 5",
    ]


def test_status_lines_with_a_straggler_at_the_latest_common_window(tmp_path):
    for k in range(3):
        write(tmp_path, times(k, [1.0] * 4 + ([2.5] if k == 1 else [1.0]), world_size=3))
    assert rank_status_lines(str(tmp_path), NOW)[2] == (
        "slowest: rank 1 (host node0) 2.50x the median window time (2.5 s vs 1 s) at window 5 (straggler threshold 1.5x)"
    )


def test_the_modules_need_only_the_standard_library():
    code = "import runwatch.files.heartbeats, runwatch.logger.distributed, runwatch.logger.metrics, sys; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": os.environ["PYTHONPATH"]},
    )
    assert out.stdout.strip() == "False"


def _minimal_log(run_dir) -> None:
    with open(os.path.join(str(run_dir), "metrics.jsonl"), "w", encoding="utf-8") as f:
        for step in (10, 20, 30):
            f.write(json.dumps({"step": step, "loss": 1.0 / step, "lr": 0.1}) + "\n")


def test_the_watchdog_polls_the_rank_rules(tmp_path, capsys):
    import time as _time

    from runwatch.cli import main

    _minimal_log(tmp_path)
    now = _time.time()
    write(tmp_path, beat(0, world_size=2, time=now, progress_time=now))
    write(tmp_path, beat(1, world_size=2, time=now - 400, step=40))
    assert main(["watch", str(tmp_path), "--poll", "0.1", "--stall", "600", "--rank-stall", "300"]) == 7
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(
        "ANOMALY rank_stall step=40: rank 1 (host node0, pid 101) stopped at step 40: its heartbeat is "
    )
    with open(tmp_path / "watchdog.json", encoding="utf-8") as f:
        assert json.load(f)["kind"] == "rank_stall"


def test_status_shows_the_rank_lines(tmp_path, capsys):
    import time as _time

    from runwatch.cli import main

    _minimal_log(tmp_path)
    now = _time.time()
    for k in range(3):
        write(tmp_path, times(k, [1.0] * 4 + ([2.5] if k == 1 else [1.0]), world_size=3, time=now, progress_time=now))
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    ranks = [line for line in out if line.startswith(("ranks    ", "         most", "         slowest"))]
    assert ranks[0].startswith("ranks    3/3 heartbeats on 2 host(s), steps 50..50, newest ")
    assert ranks[1].startswith("         most behind: rank 0 (host node0, pid 100) at step 50")
    assert ranks[2] == (
        "         slowest: rank 1 (host node0) 2.50x the median window time (2.5 s vs 1 s) at window 5 "
        "(straggler threshold 1.5x)"
    )
    assert main(["status", str(tmp_path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["ranks"]) == 3


# --- phases: two keys, absent in files of older writers ---------------------------------------------

PHASES = [
    ("absent (an older writer)", {}, (None, None)),
    ("outside a phase", {"phase": None, "phase_since": None}, (None, None)),
    ("inside eval", {"phase": "eval", "phase_since": NOW - 5}, ("eval", NOW - 5)),
]


@pytest.mark.parametrize("name,keys,expected", PHASES, ids=[p[0] for p in PHASES])
def test_phase_and_phase_since_are_read(name, keys, expected):
    obj = {k: v for k, v in _good().items() if k not in ("phase", "phase_since")}
    b = parse_heartbeat(json.dumps({**obj, **keys}).encode(), "x")
    assert (b.phase, b.phase_since) == expected
    assert parse_heartbeat(json.dumps(b.to_json()).encode(), "x") == b


BAD_PHASES = [
    (
        "phase_since without phase",
        {"phase": None, "phase_since": NOW},
        f"x: phase and phase_since must both be null or both be set, got None and {NOW!r}",
    ),
    (
        "phase without phase_since",
        {"phase": "eval", "phase_since": None},
        "x: phase and phase_since must both be null or both be set, got 'eval' and None",
    ),
    ("phase not a string", {"phase": 3, "phase_since": NOW}, "x: phase must be a string or null, got 3"),
    (
        "phase_since negative",
        {"phase": "eval", "phase_since": -1},
        "x: phase_since must be a finite number >= 0 or null, got -1",
    ),
]


@pytest.mark.parametrize("name,keys,message", BAD_PHASES, ids=[p[0] for p in BAD_PHASES])
def test_a_bad_phase_is_a_clear_error(name, keys, message):
    with pytest.raises(InvalidRunError) as err:
        parse_heartbeat(json.dumps({**_good(), **keys}).encode(), "x")
    assert str(err.value) == message


def test_a_world_of_one_gets_no_rank_lines_and_no_rank_findings(tmp_path):
    write(tmp_path, beat(0, world_size=1, progress_time=NOW - 10_000, time=NOW - 10_000, waiting=None, where=None))
    assert rank_status_lines(str(tmp_path), NOW) == []
    monitor = RankMonitor(rank_stall=5.0, straggler_patience=1)
    assert monitor.poll(str(tmp_path), NOW) is None and monitor.poll(str(tmp_path), NOW + 1) is None


def test_a_straggler_is_named_when_the_ranks_waiting_for_it_are_idle_throughout():
    # A quiet machine: the waiting ranks never sampled busy (busy 0 s of 0.22-s windows).
    def idle_or_busy(rank: int, busy: float) -> Heartbeat:
        return beat(rank, world_size=3, window=8, busy_seconds=(busy,) * 8, window_seconds=(0.22,) * 8)

    finding = StragglerRule(1.5, 5).update(ranks(idle_or_busy(0, 0.0), idle_or_busy(1, 0.0), idle_or_busy(2, 0.2)))
    assert finding == (
        2,
        50,
        "rank 2 (host node1) took 18.2x the median window time (0.2 s vs 0.011 s) for 5 consecutive windows",
    )
    noise = StragglerRule(1.5, 5).update(ranks(idle_or_busy(0, 0.0), idle_or_busy(1, 0.0), idle_or_busy(2, 0.01)))
    assert noise is None  # a sample or two: idle too
