"""The follower reads only new bytes, holds back torn lines, notices truncation and replacement."""

from __future__ import annotations

import os

import pytest

from runwatch.errors import InvalidRunError
from runwatch.reading.follow import LogFollower, ManifestFollower, tail_lines


def _append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


def test_missing_then_growing(tmp_path):
    p = tmp_path / "m.jsonl"
    f = LogFollower(str(p))
    assert f.poll().exists is False
    _append(p, b'{"a":1}\n{"a":')
    b = f.poll()
    assert b.exists and b.lines == [(1, b'{"a":1}')]
    assert f.pending_bytes() == 5
    assert f.poll().lines == []  # nothing new: the torn line stays held back
    _append(p, b"2}\n")
    assert f.poll().lines == [(2, b'{"a":2}')]
    f.close()


def test_idle_poll_reads_nothing(tmp_path, monkeypatch):
    p = tmp_path / "m.jsonl"
    _append(p, b"x\n" * 1000)
    f = LogFollower(str(p))
    assert len(f.poll().lines) == 1000
    calls = []
    real = os.pread
    monkeypatch.setattr(os, "pread", lambda *a: calls.append(a) or real(*a))
    b = f.poll()
    assert (b.lines, b.grew, calls) == ([], False, [])
    f.close()


def test_chunked_catch_up(tmp_path):
    p = tmp_path / "m.jsonl"
    _append(p, b"".join(b"%d\n" % i for i in range(10000)))
    f = LogFollower(str(p), max_line_bytes=64, chunk_bytes=1000)
    seen = []
    while True:
        b = f.poll()
        seen += b.lines
        if not b.more:
            break
    assert [int(x) for _, x in seen] == list(range(10000))
    assert [n for n, _ in seen] == list(range(1, 10001))
    f.close()


@pytest.mark.parametrize("how", ["truncate", "replace"])
def test_truncation_and_replacement_restart(tmp_path, how):
    p = tmp_path / "m.jsonl"
    _append(p, b"a\nb\nc\n")
    f = LogFollower(str(p))
    assert len(f.poll().lines) == 3
    if how == "truncate":
        os.truncate(p, 0)
        _append(p, b"z\n")
    else:
        q = tmp_path / "new"
        q.write_bytes(b"z\ny\nx\nw\n")
        os.replace(q, p)
    b = f.poll()
    assert b.reset == {"truncate": "truncated", "replace": "replaced"}[how]
    assert b.lines[0] == (1, b"z")
    f.close()


def test_torn_tail_set_aside_is_not_a_truncation(tmp_path):
    # the logger cuts a torn tail before appending: the size shrinks, but not below what was read
    p = tmp_path / "m.jsonl"
    _append(p, b"a\nb\ntorn")
    f = LogFollower(str(p))
    assert len(f.poll().lines) == 2
    os.truncate(p, 4)
    _append(p, b"c\n")
    b = f.poll()
    assert (b.reset, b.lines) == (None, [(3, b"c")])
    f.close()


def test_long_line_is_bounded_and_skipped(tmp_path):
    p = tmp_path / "m.jsonl"
    _append(p, b"ok\n" + b"x" * 5000)
    f = LogFollower(str(p), max_line_bytes=100, chunk_bytes=64)
    lines, too_long = [], None
    for _ in range(200):
        b = f.poll()
        lines += b.lines
        too_long = too_long or b.too_long
        if not b.more:
            break
    assert lines == [(1, b"ok")] and too_long == 2
    _append(p, b"xx\nnext\n")
    b = f.poll()
    while b.more:
        lines += b.lines
        b = f.poll()
    lines += b.lines
    assert lines[-1] == (3, b"next")
    f.close()


def test_state_round_trip(tmp_path):
    p = tmp_path / "m.jsonl"
    _append(p, b"a\nb\n")
    f = LogFollower(str(p))
    f.poll()
    g = LogFollower.from_state(f.state_dict())
    assert g.state_dict() == f.state_dict()
    _append(p, b"c\n")
    assert g.poll().lines == [(3, b"c")]
    f.close()
    g.close()


def test_not_a_regular_file(tmp_path):
    with pytest.raises(InvalidRunError, match="a directory"):
        LogFollower(str(tmp_path)).poll()


@pytest.mark.parametrize("n", [1, 3, 100])
def test_tail_lines(tmp_path, n):
    p = tmp_path / "m.jsonl"
    _append(p, b"".join(b"line %d\n" % i for i in range(50000)) + b"tor")
    lines, torn = tail_lines(str(p), n)
    assert torn is True
    assert lines == [b"line %d" % i for i in range(50000 - n, 50000)]


def test_tail_lines_small_and_empty(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_bytes(b"")
    assert tail_lines(str(p), 5) == ([], False)
    p.write_bytes(b"a\nb\n")
    assert tail_lines(str(p), 5) == ([b"a", b"b"], False)


def test_manifest_follower_notices_a_new_session(tmp_path):
    from runwatch import RunLogger

    recipe = {"batch_size": 1, "seq_len": 1, "gradient_accumulation_steps": 1, "qk_clip_threshold": None}
    with RunLogger(tmp_path, recipe=recipe, hardware={}) as log:
        log.step(1.0, 0.1, 1.0)
        saved = log.state_dict()
    m = ManifestFollower(str(tmp_path))
    assert m.poll() is True and len(m.manifest["sessions"]) == 1
    assert m.poll() is False
    with RunLogger(tmp_path, recipe=recipe, hardware={}, resume_from=saved) as log2:
        log2.step(1.0, 0.1, 1.0)
    assert m.poll() is True and len(m.manifest["sessions"]) == 2
