"""runwatch.preflight.audit / runwatch.preflight.corpus: generated corpora with known broken rows, in every format."""

from __future__ import annotations

import ast
import csv
import json
import os
import subprocess
import sys

import pytest

from runwatch.cli import main
from runwatch.preflight.audit import AuditOptions, audit

N = 100
BROKEN = [i for i in range(N) if i % 7 == 3]  # 14 rows that do not parse
TIMING = ("seconds", "rows_per_second", "workers", "out", "input")


def snippet(i: int) -> str:
    if i in BROKEN:
        return f"def broken_{i}(:\n    return {i}\n"
    return f"def f_{i}(x,  y = {i}):\n    return [x*y   for _ in range( {i % 5} )]\n"


def write_jsonl(path, rows, extra_lines=()):
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return str(path)


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def run_audit(path, out, **kw):
    kw.setdefault("workers", 2)
    return audit(str(path), AuditOptions(field="code", out=str(out), **kw))


def test_jsonl_counts_alignment_and_read_errors(tmp_path):
    src = write_jsonl(
        tmp_path / "c.jsonl",
        [{"code": snippet(i), "n": i} for i in range(N)],
        extra_lines=["", "{not json", json.dumps({"text": "x"}), json.dumps({"code": 7}), "[1, 2]"],
    )
    out = tmp_path / "out"
    r = run_audit(src, out, normalize="ast", chunk_rows=9)
    assert (r["rows"], r["kept"], r["rejected"], r["blank_lines"]) == (N + 4, N - 14, 18, 1)
    assert r["rejected_by_reason"] == {
        "check": {"SyntaxError": 14},
        "read": {"malformed_json": 1, "missing_field": 1, "not_object": 1, "not_text": 1},
    }
    assert r["fraction_kept"] == (N - 14) / (N + 4)
    assert r["made_ids"] is True
    assert sorted(os.listdir(out)) == ["audit.json", "kept.normalized.jsonl", "kept.raw.jsonl", "rejected.jsonl"]
    raw, norm = read_jsonl(out / "kept.raw.jsonl"), read_jsonl(out / "kept.normalized.jsonl")
    assert [x["id"] for x in raw] == [x["id"] for x in norm] == [i for i in range(N) if i not in BROKEN]
    for a, b in zip(raw, norm):
        assert a["code"] == snippet(a["id"]) and a["n"] == a["id"]
        assert b["code"] == ast.unparse(ast.parse(a["code"])) != a["code"]
    rejected = read_jsonl(out / "rejected.jsonl")
    assert [x["id"] for x in rejected] == BROKEN + [100, 101, 102, 103]
    assert rejected[0] == {
        "id": 3,
        "stage": "check",
        "reason": "SyntaxError",
        "message": "invalid syntax (<unknown>, line 1)",
        "where": "c.jsonl:4",
    }
    assert [(x["stage"], x["reason"], x["where"]) for x in rejected[14:]] == [
        ("read", "malformed_json", "c.jsonl:102"),
        ("read", "missing_field", "c.jsonl:103"),
        ("read", "not_text", "c.jsonl:104"),
        ("read", "not_object", "c.jsonl:105"),
    ]
    assert json.loads((out / "audit.json").read_text()) == r


def test_jsonl_ids_kept_and_raw_bytes_untouched(tmp_path):
    lines = [json.dumps({"id": f"row-{i}", "code": snippet(i)}, separators=(",", ":")) for i in range(20)]
    src = tmp_path / "c.jsonl"
    src.write_text("\n".join(lines) + "\n")
    r = run_audit(src, tmp_path / "out", workers=1)
    assert r["made_ids"] is False
    kept = [line for i, line in enumerate(lines) if i not in BROKEN]
    assert (tmp_path / "out" / "kept.raw.jsonl").read_text().splitlines() == kept
    assert (tmp_path / "out" / "kept.normalized.jsonl").read_text().splitlines() == kept  # --normalize none
    assert [x["id"] for x in read_jsonl(tmp_path / "out" / "rejected.jsonl")] == ["row-3", "row-10", "row-17"]


def test_explicit_id_field_missing_is_a_read_rejection(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", [{"key": "a", "code": "x = 1"}, {"code": "y = 2"}])
    r = audit(src, AuditOptions(field="code", id_field="key", out=str(tmp_path / "o"), workers=0))
    assert r["kept"] == 1 and r["rejected_by_reason"] == {"read": {"missing_id": 1}}


def test_csv(tmp_path):
    src = tmp_path / "c.csv"
    with open(src, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["code", "lang"])
        for i in range(N):
            w.writerow([snippet(i), "py"])
        w.writerow(["x = 1", "py", "extra"])
    with open(src, "ab") as f:
        f.write(b"y = '\xff',py\n")  # not UTF-8: that row is rejected, the ones after it are read
        f.write(b"z = 1,py\n")
    r = run_audit(src, tmp_path / "out", normalize="ast", chunk_rows=16)
    assert (r["rows"], r["kept"]) == (N + 3, N - 14 + 1)
    assert r["rejected_by_reason"] == {"check": {"SyntaxError": 14}, "read": {"field_count": 1, "invalid_utf8": 1}}
    with open(tmp_path / "out" / "kept.raw.csv", newline="", encoding="utf-8") as f:
        raw = list(csv.reader(f))
    with open(tmp_path / "out" / "kept.normalized.csv", newline="", encoding="utf-8") as f:
        norm = list(csv.reader(f))
    assert raw[0] == norm[0] == ["id", "code", "lang"]
    assert (
        [x[0] for x in raw[1:]]
        == [x[0] for x in norm[1:]]
        == [str(i) for i in range(N + 3) if i not in BROKEN and i not in (N, N + 1)]
    )
    assert all(b[1] == ast.unparse(ast.parse(a[1])) for a, b in zip(raw[1:], norm[1:]))
    # where a record starts: each snippet spans 3 physical lines
    assert [x["where"] for x in read_jsonl(tmp_path / "out" / "rejected.jsonl")[-2:]] == [
        f"c.csv:{2 + 3 * N}",
        f"c.csv:{3 + 3 * N}",
    ]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    codes = [snippet(i) for i in range(N)] + [None]
    pq.write_table(
        pa.table({"id": list(range(1000, 1000 + N + 1)), "code": codes}), tmp_path / "c.parquet", row_group_size=30
    )
    r = run_audit(tmp_path / "c.parquet", tmp_path / "out", normalize="ast", chunk_rows=16)
    assert (r["rows"], r["kept"], r["made_ids"]) == (N + 1, N - 14, False)
    assert r["rejected_by_reason"] == {"check": {"SyntaxError": 14}, "read": {"not_text": 1}}
    raw = pq.read_table(tmp_path / "out" / "kept.raw.parquet")
    norm = pq.read_table(tmp_path / "out" / "kept.normalized.parquet")
    assert raw.schema.equals(norm.schema)
    assert raw["id"].to_pylist() == norm["id"].to_pylist() == [1000 + i for i in range(N) if i not in BROKEN]
    assert raw["code"].to_pylist() == [snippet(i) for i in range(N) if i not in BROKEN]
    assert norm["code"].to_pylist() == [ast.unparse(ast.parse(c)) for c in raw["code"].to_pylist()]


def test_directory_of_files(tmp_path):
    d = tmp_path / "corpus"
    d.mkdir()
    write_jsonl(d / "b.jsonl", [{"code": snippet(i)} for i in range(50, N)])
    write_jsonl(d / "a.jsonl", [{"code": snippet(i)} for i in range(50)])
    (d / "notes.txt").write_text("not part of the corpus")
    r = run_audit(d, tmp_path / "out")
    assert (r["files"], r["rows"], r["kept"]) == (2, N, N - 14)
    assert [x["id"] for x in read_jsonl(tmp_path / "out" / "kept.raw.jsonl")] == [
        i for i in range(N) if i not in BROKEN
    ]
    assert read_jsonl(tmp_path / "out" / "rejected.jsonl")[-1]["where"] == "b.jsonl:45"  # row 94


def test_normalizer_that_fails_rejects_the_row(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": snippet(i)} for i in range(N)])
    r = run_audit(src, tmp_path / "out", check="preflight_helpers:accept_all", normalize="ast")
    assert r["rejected_by_reason"] == {"normalize": {"SyntaxError": 14}}
    raw = read_jsonl(tmp_path / "out" / "kept.raw.jsonl")
    norm = read_jsonl(tmp_path / "out" / "kept.normalized.jsonl")
    assert [x["id"] for x in raw] == [x["id"] for x in norm] and len(raw) == N - 14
    assert all(b["code"] == ast.unparse(ast.parse(a["code"])) for a, b in zip(raw, norm))  # never raw text


def test_black_normalizer(tmp_path):
    black = pytest.importorskip("black")
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": snippet(i)} for i in range(12)])
    r = run_audit(src, tmp_path / "out", normalize="black", workers=1)
    assert r["kept"] == 12 - 2
    norm = read_jsonl(tmp_path / "out" / "kept.normalized.jsonl")
    assert (
        norm[0]["code"]
        == black.format_str(snippet(0), mode=black.Mode())
        == ("def f_0(x, y=0):\n    return [x * y for _ in range(0)]\n")
    )


def test_json_check(tmp_path):
    texts = ['{"a": 1}', "[1, 2", "NaN", '"s"', "{'a': 1}"]
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": t} for t in texts])
    r = run_audit(src, tmp_path / "out", check="json")
    assert r["kept"] == 2 and r["rejected_by_reason"] == {"check": {"JSONDecodeError": 2, "ValueError": 1}}


def test_hanging_row_cut_off_and_the_chunk_finished(tmp_path):
    rows = [{"code": f"x = {i}"} for i in range(40)]
    rows[13] = {"code": "y = 1  #HANG"}
    rows[14] = {"code": "bad = 2"}
    rows[30] = {"code": "bad = 3"}
    src = write_jsonl(tmp_path / "c.jsonl", rows)
    r = run_audit(src, tmp_path / "out", check="preflight_helpers:hang_on_marker", row_timeout=1.0, chunk_rows=8)
    assert (r["rows"], r["kept"]) == (40, 37)
    assert r["rejected_by_reason"] == {"check": {"starts with bad": 2, "timeout": 1}}
    rejected = read_jsonl(tmp_path / "out" / "rejected.jsonl")
    assert rejected[0] == {
        "id": 13,
        "stage": "check",
        "reason": "timeout",
        "where": "c.jsonl:14",
        "message": "no result within --row-timeout 1s; the worker was killed and replaced",
    }
    kept = [x["id"] for x in read_jsonl(tmp_path / "out" / "kept.raw.jsonl")]
    assert kept == [i for i in range(40) if i not in (13, 14, 30)]


def test_worker_that_dies_on_a_row(tmp_path):
    rows = [{"code": f"x = {i}"} for i in range(30)]
    rows[5] = {"code": "z = 0  #CRASH"}
    src = write_jsonl(tmp_path / "c.jsonl", rows)
    r = run_audit(src, tmp_path / "out", check="preflight_helpers:crash_on_marker", chunk_rows=4)
    assert r["kept"] == 29 and r["rejected_by_reason"] == {"check": {"worker_died": 1}}
    assert read_jsonl(tmp_path / "out" / "rejected.jsonl")[0]["message"] == (
        "the worker process died on this row (exit code -9)"
    )


def test_deterministic_whatever_the_workers(tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": snippet(i % N), "k": i} for i in range(3 * N)] + [{"x": 1}])
    outputs = {}
    for workers in (0, 1, 2):
        out = tmp_path / f"out{workers}"
        r = run_audit(src, out, workers=workers, normalize="ast", chunk_rows=7)
        files = {
            name: (out / name).read_bytes() for name in ("kept.raw.jsonl", "kept.normalized.jsonl", "rejected.jsonl")
        }
        outputs[workers] = (files, {k: v for k, v in r.items() if k not in TIMING})
    assert outputs[0] == outputs[1] == outputs[2]
    assert outputs[2][1]["kept"] == 3 * (N - 14)


def test_failed_audit_leaves_no_partial_files(tmp_path):
    rows = [{"code": f"x = {i}"} for i in range(600)]
    src = write_jsonl(tmp_path / "c.jsonl", rows)
    out = tmp_path / "out"
    first = run_audit(src, out, workers=0, check="preflight_helpers:interrupt_on_marker")
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    rows[500] = {"code": "x = 1  #INTERRUPT"}
    write_jsonl(src, rows)
    with pytest.raises(KeyboardInterrupt):
        run_audit(src, out, workers=0, check="preflight_helpers:interrupt_on_marker")
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before  # old outputs intact, no temps
    assert first["kept"] == 600


def test_progress_bar_only_when_asked_or_on_a_tty(tmp_path, capsys):
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": "x = 1"}] * 10)
    run_audit(src, tmp_path / "o1", workers=0)
    assert capsys.readouterr().err == ""  # stderr is not a TTY here
    run_audit(src, tmp_path / "o2", workers=0, progress=True)
    assert "audit-data: 10 rows  100.0% kept" in capsys.readouterr().err


def test_cli(tmp_path, capsys):
    src = write_jsonl(tmp_path / "c.jsonl", [{"code": snippet(i)} for i in range(N)])
    # exit 1: rows were rejected
    assert main(["audit-data", src, "--field", "code", "--workers", "2", "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert (r["kept"], r["out"]) == (N - 14, src + ".audit")
    assert main(["audit-data", src, "--field", "code", "--out", str(tmp_path / "o"), "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        f"audit-data: 86 of 100 rows kept, 14 rejected; most common: check SyntaxError (14 rows);"
        f" see {tmp_path}/o/rejected.jsonl"
    )
    assert "  kept      86 (86.00%)\n  rejected  14\n    check: SyntaxError  14\n" in out
    sound = write_jsonl(tmp_path / "s.jsonl", [{"code": "x = 1"}])
    assert main(["audit-data", sound, "--field", "code", "--workers", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "audit-data: 1 of 1 rows kept, 0 rejected: every row passed"


def test_text_rows_with_required_label(tmp_path, capsys):
    """Sound {"text", "label"} rows pass; a truncated line, an empty text, a missing or empty label do not."""
    rows = [json.dumps({"text": f"review {i}", "label": i % 2}) for i in range(20)]
    rows[3] = rows[3][:12]  # truncated
    rows[5] = json.dumps({"text": "  ", "label": 1})
    rows[7] = json.dumps({"text": "no label"})
    rows[9] = json.dumps({"text": "empty label", "label": ""})
    src = tmp_path / "t.jsonl"
    src.write_text("\n".join(rows) + "\n")
    argv = ["audit-data", str(src), "--field", "text", "--check", "text", "--require", "label", "--workers", "0"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("audit-data: 16 of 20 rows kept, 4 rejected; most common: ")
    rejected = [json.loads(x) for x in (tmp_path / "o" / "rejected.jsonl").read_text().splitlines()]
    assert [(r["id"], r["stage"], r["reason"]) for r in rejected] == [
        (3, "read", "malformed_json"),
        (5, "check", "empty_text"),
        (7, "require", "missing_label"),
        (9, "require", "empty_label"),
    ]
    good = tmp_path / "g.jsonl"
    good.write_text("\n".join(json.dumps({"text": f"review {i}", "label": i % 2}) for i in range(20)) + "\n")
    assert main(["audit-data", str(good), *argv[2:], "--out", str(tmp_path / "g")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "audit-data: 20 of 20 rows kept, 0 rejected: every row passed"


@pytest.mark.parametrize(
    "setup, argv, code, err",
    [
        ("csv", ["--field", "text"], 1, "runwatch: {d}/c.csv: no column 'text' (columns: id, code)"),
        (
            "csv",
            ["--field", "code", "--id-field", "key"],
            1,
            "runwatch: {d}/c.csv: no id column 'key' (columns: id, code)",
        ),
        ("mixed", ["--field", "code"], 1, "runwatch: {d}/m: mixes formats (csv, jsonl); audit one format at a time"),
        ("none", ["--field", "code"], 1, "runwatch: {d}/missing.jsonl: no such file or directory"),
        (
            "txt",
            ["--field", "code"],
            1,
            "runwatch: {d}/c.txt: unknown format '.txt'; expected .jsonl, .csv or .parquet",
        ),
        (
            "jsonl",
            ["--field", "code", "--check", "no_such_module_x:f"],
            2,
            "--check no_such_module_x:f: cannot import no_such_module_x: ModuleNotFoundError: No module named 'no_such_module_x'",
        ),
        (
            "jsonl",
            ["--field", "code", "--check", "preflight_helpers:nope"],
            2,
            "--check preflight_helpers:nope: preflight_helpers has no function 'nope'",
        ),
        (
            "jsonl",
            ["--field", "code", "--check", "ruby"],
            2,
            "audit.check must be python, json, text or MODULE:FUNCTION, got 'ruby'",
        ),
        ("jsonl", ["--field", "code", "--workers", "-1"], 2, "audit.workers must be an int >= 0, got -1"),
        (
            "jsonl",
            ["--field", "code", "--row-timeout", "0"],
            2,
            "audit.row_timeout must be a finite number > 0, got 0.0",
        ),
        (
            "mixed-out",
            ["--field", "code", "--out", "{d}/m/out"],
            2,
            "--out {d}/m/out: inside the input directory {d}/m; a rerun would read the outputs",
        ),
    ],
)
def test_cli_errors(tmp_path, capsys, setup, argv, code, err):
    d = str(tmp_path)
    target = {
        "csv": "c.csv",
        "mixed": "m",
        "none": "missing.jsonl",
        "txt": "c.txt",
        "jsonl": "c.jsonl",
        "mixed-out": "m",
    }[setup]
    (tmp_path / "c.csv").write_text("id,code\n1,x = 1\n")
    (tmp_path / "c.txt").write_text("x")
    write_jsonl(tmp_path / "c.jsonl", [{"code": "x = 1"}])
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.csv").write_text("code\nx\n")
    if setup != "mixed-out":
        write_jsonl(tmp_path / "m" / "b.jsonl", [{"code": "x"}])
    assert main(["audit-data", os.path.join(d, target), *[a.format(d=d) for a in argv]]) == code
    captured = capsys.readouterr()
    assert captured.err.strip() == err.format(d=d)
    assert captured.out == ""
    assert not os.path.exists(os.path.join(d, target) + ".audit") or code == 0


def test_preflight_modules_import_only_the_standard_library():
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "import runwatch.preflight.plan, runwatch.preflight.smoke, runwatch.preflight.audit, runwatch.preflight.auditpool, runwatch.preflight.rowcheck, runwatch.preflight.corpus, runwatch.files.checkpoint, runwatch.cli\n"
        "heavy = sorted(m for m in ('torch', 'pyarrow', 'black', 'safetensors', 'numpy') if m in sys.modules)\n"
        "print(heavy)" % src
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_values_survive_the_round_trip(tmp_path):
    # long integers, NaN and lone surrogates read the same with or without orjson's fast path
    line = '{"id": 123456789012345678901234567890, "code": "x  =  1", "v": NaN, "s": "\\ud800"}'
    src = tmp_path / "c.jsonl"
    src.write_text(line + "\n")
    r = run_audit(src, tmp_path / "out", normalize="ast", workers=0)
    assert r["kept"] == 1
    assert (tmp_path / "out" / "kept.raw.jsonl").read_text() == line + "\n"
    assert (tmp_path / "out" / "kept.normalized.jsonl").read_text() == (
        '{"id": 123456789012345678901234567890, "code": "x = 1", "v": NaN, "s": "\\ud800"}\n'
    )
