"""runwatch.preflight.subsample: allocation per value, bottom-k determinism, the three formats, warnings, errors."""

from __future__ import annotations

import csv
import json
import os
import random

import pytest

from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.preflight.subsample import SubsampleOptions, allocate, subsample

LABELS = ["cat"] * 60 + ["dog"] * 30 + ["eel"] * 9 + ["yak"]  # shares 60/30/9/1 in 100


def make_jsonl(path, n=1000, seed=1, extra=None):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "label": LABELS[i % 100], "text": "x" * rng.randint(0, 20)}) + "\n")
        for line in extra or ():
            f.write(line + "\n")
    return str(path)


def lines(path):
    with open(path) as f:
        return f.read().splitlines()


# (counts, n, balanced) -> allocation
@pytest.mark.parametrize(
    "counts, n, balanced, expected",
    [
        ({"a": 600, "b": 300, "c": 90, "d": 10}, 100, False, {"a": 60, "b": 30, "c": 9, "d": 1}),
        ({"a": 600, "b": 300, "c": 90, "d": 10}, 10, False, {"a": 6, "b": 3, "c": 1, "d": 0}),  # remainders .9 .1
        ({"a": 1, "b": 1, "c": 1}, 2, False, {"a": 1, "b": 1, "c": 0}),  # ties: first seen
        ({"a": 1, "b": 2, "c": 1}, 2, False, {"a": 1, "b": 1, "c": 0}),  # b: .333 floor 1
        ({"a": 600, "b": 300, "c": 90, "d": 10}, 100, True, {"a": 30, "b": 30, "c": 30, "d": 10}),  # d short: shared
        ({"a": 600, "b": 300, "c": 90, "d": 10}, 101, True, {"a": 31, "b": 30, "c": 30, "d": 10}),
        ({"a": 5, "b": 3, "c": 100}, 40, True, {"a": 5, "b": 3, "c": 32}),  # two rounds of filling
        ({"a": 5, "b": 3}, 40, True, {"a": 5, "b": 3}),  # n >= total: all
        ({"a": 5, "b": 3}, 8, False, {"a": 5, "b": 3}),
    ],
)
def test_allocate(counts, n, balanced, expected):
    alloc = allocate(counts, n, balanced)
    assert alloc == expected
    assert sum(alloc.values()) == min(n, sum(counts.values()))
    assert all(alloc[k] <= counts[k] for k in counts)


def test_stratified_jsonl(tmp_path, capsys):
    data = make_jsonl(tmp_path / "d.jsonl")
    out = str(tmp_path / "s.jsonl")
    assert main(["subsample", data, "--n", "50", "--stratify", "label", "--out", out]) == 0
    got = lines(out)
    source = lines(data)
    assert len(got) == 50
    assert all(line in source for line in got)  # the lines as read, byte for byte
    assert [source.index(line) for line in got] == sorted(source.index(line) for line in got)  # input order
    rows = [json.loads(line) for line in got]
    assert all("label" in r for r in rows)
    with open(out + ".json") as f:
        report = json.load(f)
    per_value = {r["value"]: r["written"] for r in report["counts"]}
    assert per_value == {label: sum(r["label"] == label for r in rows) for label in per_value}
    assert sum(per_value.values()) == 50
    assert (report["rows"], report["written"], report["stratify"], report["unreadable"]) == (1000, 50, "label", {})
    assert not [n for n in os.listdir(tmp_path) if ".tmp" in n]


def test_table_and_largest_remainder(tmp_path, capsys):
    data = make_jsonl(tmp_path / "d.jsonl")
    out = str(tmp_path / "s.jsonl")
    assert main(["subsample", data, "--n", "50", "--stratify", "label", "--out", out]) == 0
    # shares 30, 15, 4.5, 0.5: two halves left over for one row; ties go to the value with more rows
    assert capsys.readouterr().out.splitlines() == [
        f"subsample {data} -> {out}: 50 of 1,000 rows per label, in proportion (seed 0)",
        "label          rows     written",
        '"cat"           600          30',
        '"dog"           300          15',
        '"eel"            90           5',
        '"yak"            10           0',
        "total         1,000          50",
        f"wrote {out} and {out}.json in " + capsys_seconds(out),
    ]


def capsys_seconds(out):
    with open(out + ".json") as f:
        return f"{json.load(f)['seconds']:.1f}s"


def test_same_seed_same_rows_whatever_the_order_and_size(tmp_path):
    data = make_jsonl(tmp_path / "d.jsonl")
    a = str(tmp_path / "a.jsonl")
    subsample(data, SubsampleOptions(n=40, out=a, stratify="label", seed=7))
    subsample(data, SubsampleOptions(n=40, out=a + "2.jsonl", stratify="label", seed=7))
    assert lines(a) == lines(a + "2.jsonl")
    subsample(data, SubsampleOptions(n=40, out=str(tmp_path / "b.jsonl"), stratify="label", seed=8))
    assert lines(a) != lines(tmp_path / "b.jsonl")
    # the same rows from the file shuffled: priorities belong to the rows, not to their positions
    shuffled = lines(data)
    random.Random(3).shuffle(shuffled)
    (tmp_path / "shuffled.jsonl").write_text("\n".join(shuffled) + "\n")
    subsample(
        str(tmp_path / "shuffled.jsonl"),
        SubsampleOptions(n=40, out=str(tmp_path / "c.jsonl"), stratify="label", seed=7),
    )
    assert sorted(lines(a)) == sorted(lines(tmp_path / "c.jsonl"))
    # a larger file (the same 1,000 rows, then 4,000 more): what it draws from the first 1,000 is what
    # a draw of that many from the first file alone gives (bottom-k samples nest)
    big = make_jsonl(
        tmp_path / "big.jsonl", n=1000, extra=[json.dumps({"id": 5000 + i, "label": "cat"}) for i in range(4000)]
    )
    subsample(big, SubsampleOptions(n=200, out=str(tmp_path / "large.jsonl"), seed=7))
    from_first = [line for line in lines(tmp_path / "large.jsonl") if json.loads(line)["id"] < 1000]
    subsample(data, SubsampleOptions(n=len(from_first), out=str(tmp_path / "small.jsonl"), seed=7))
    assert 10 < len(from_first) < 200 and from_first == lines(tmp_path / "small.jsonl")


def test_balanced_short_value_warns_and_others_fill(tmp_path, capsys):
    data = make_jsonl(tmp_path / "d.jsonl")
    out = str(tmp_path / "s.jsonl")
    assert main(["subsample", data, "--n", "100", "--stratify", "label", "--balanced", "--out", out]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        'subsample: warning: label="yak" has 10 rows, fewer than its equal share 25: all of them'
        " written; the others make up the difference\n"
    )
    assert '"yak"            10          10  all (short of its share)' in captured.out.splitlines()
    counts = {}
    for line in lines(out):
        label = json.loads(line)["label"]
        counts[label] = counts.get(label, 0) + 1
    assert counts == {"cat": 30, "dog": 30, "eel": 30, "yak": 10}


def test_unreadable_and_missing_rows_are_counted(tmp_path, capsys):
    data = make_jsonl(tmp_path / "d.jsonl", n=100, extra=["{not json", json.dumps({"text": "no label"}), "[1, 2]"])
    out = str(tmp_path / "s.jsonl")
    assert main(["subsample", data, "--n", "200", "--stratify", "label", "--json", "--out", out]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"subsample: warning: {data} has 100 readable rows, not more than --n 200: all of them written",
        "subsample: warning: 2 unreadable rows never drawn (malformed_json 1, not_object 1); first at d.jsonl:101",
        "subsample: warning: 1 rows without 'label' never drawn; first at d.jsonl:102",
    ]
    report = json.loads(captured.out)
    assert (report["written"], report["unreadable"], report["missing_field"]) == (
        100,
        {"malformed_json": 1, "not_object": 1},
        1,
    )
    assert lines(out) == lines(data)[:100]


def test_csv(tmp_path):
    path = tmp_path / "d.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["text", "label"])
        for i in range(300):
            w.writerow([f"row, {i}", LABELS[i % 100]])
    out = str(tmp_path / "s.csv")
    report = subsample(str(path), SubsampleOptions(n=30, out=out, stratify="label"))
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["text", "label"]  # the header as it was: no id column added
    assert len(rows) == 31
    assert {r["value"]: r["written"] for r in report["counts"]} == {"cat": 18, "dog": 9, "eel": 3, "yak": 0}


def test_parquet_keeps_schema_and_typed_labels(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.table({"label": [i % 3 for i in range(3000)], "x": [float(i) for i in range(3000)]})
    pq.write_table(table, tmp_path / "d.parquet")
    out = str(tmp_path / "s.parquet")
    report = subsample(str(tmp_path / "d.parquet"), SubsampleOptions(n=90, out=out, stratify="label", balanced=True))
    got = pq.read_table(out)
    assert got.schema == table.schema
    assert sorted(got.column("label").to_pylist()) == [0] * 30 + [1] * 30 + [2] * 30
    assert got.column("x").to_pylist() == sorted(got.column("x").to_pylist())  # input order
    assert {r["value"] for r in report["counts"]} == {0, 1, 2}


def test_labels_of_different_types_stay_apart(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"label": v}) + "\n" for v in [1, 1.0, True, "1", None, [1]] * 5))
    report = subsample(str(path), SubsampleOptions(n=6, out=str(tmp_path / "s.jsonl"), stratify="label"))
    assert sorted(json.dumps(r["value"]) for r in report["counts"]) == sorted(
        ["1", "1.0", "true", '"1"', "null", "[1]"]
    )
    assert all(r["written"] == 1 for r in report["counts"])


@pytest.mark.parametrize(
    "argv, code, err",
    [
        (["--n", "0", "--out", "{t}/s.jsonl"], 2, "subsample.n must be an int >= 1, got 0"),
        (
            ["--n", "5", "--balanced", "--out", "{t}/s.jsonl"],
            2,
            "subsample.balanced needs --stratify FIELD (equal counts per value of FIELD)",
        ),
        (["--n", "5", "--out", "{t}/s.txt"], 2, "subsample.out must end in .jsonl, .csv or .parquet, got '{t}/s.txt'"),
        (
            ["--n", "5", "--out", "{t}/s.csv"],
            2,
            "subsample: --out {t}/s.csv is csv, the input is jsonl; write a .jsonl file",
        ),
        (["--n", "5", "--out", "{t}/d.jsonl"], 2, "subsample: --out {t}/d.jsonl is the input"),
        (
            ["--n", "5", "--out", "{t}/nowhere/s.jsonl"],
            2,
            "subsample: --out {t}/nowhere/s.jsonl: no directory {t}/nowhere",
        ),
        (
            ["--n", "5", "--seed", "-1", "--out", "{t}/s.jsonl"],
            2,
            "subsample.seed must be an int in [0, 2**63), got -1",
        ),
    ],
)
def test_usage_errors(tmp_path, capsys, argv, code, err):
    data = make_jsonl(tmp_path / "d.jsonl", n=10)
    t = str(tmp_path)
    assert main(["subsample", data, *[a.format(t=t) for a in argv]]) == code
    assert capsys.readouterr().err.strip() == err.format(t=t)


def test_unreadable_inputs(tmp_path, capsys):
    assert main(["subsample", str(tmp_path / "missing.jsonl"), "--n", "5", "--out", str(tmp_path / "s.jsonl")]) == 1
    assert capsys.readouterr().err.strip() == f"runwatch: {tmp_path}/missing.jsonl: no such file or directory"
    (tmp_path / "d.csv").write_text("text,kind\na,b\n")
    (tmp_path / "s.csv").write_text("earlier output\n")
    assert (
        main(
            ["subsample", str(tmp_path / "d.csv"), "--n", "5", "--stratify", "label", "--out", str(tmp_path / "s.csv")]
        )
        == 1
    )
    assert capsys.readouterr().err.strip() == f"runwatch: {tmp_path}/d.csv: no column 'label' (columns: text, kind)"
    assert (tmp_path / "s.csv").read_text() == "earlier output\n"  # untouched


def test_stratify_on_a_field_no_row_has_is_an_error(tmp_path, capsys):
    """A typo in the label's name: exit 1, one line naming the field and the keys seen; nothing written."""
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": f"t{i}", "label": i % 2}) + "\n" for i in range(50)))
    out = tmp_path / "s.jsonl"
    assert main(["subsample", str(data), "--n", "5", "--stratify", "category", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err == f"runwatch: {data}: no row has the field 'category' (keys seen: text, label)\n"
    assert not out.exists() and not (tmp_path / "s.jsonl.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]


def test_options_dataclass():
    with pytest.raises(UsageError) as e:
        SubsampleOptions(n=True, out="x.jsonl")
    assert str(e.value) == "subsample.n must be an int >= 1, got True"


@pytest.mark.parametrize(
    "content, why",
    [
        (b'[{"text": "a", "label": 1}, {"text": "b", "label": 0}]\n', "1 unreadable (not_object 1); first at {name}:1"),
        (bytes(range(128, 256)) * 4 + b"\n", "1 unreadable (invalid_utf8 1); first at {name}:1"),
        (b"", "it is empty"),
    ],
    ids=["json-array", "binary", "empty"],
)
def test_no_readable_row_exits_1_and_writes_nothing(tmp_path, capsys, content, why):
    src = tmp_path / "d.jsonl"
    src.write_bytes(content)
    out = tmp_path / "o.jsonl"
    assert main(["subsample", str(src), "--n", "5", "--out", str(out)]) == 1
    assert capsys.readouterr().err.strip() == f"runwatch: {src}: no readable row; " + why.format(name=src.name)
    assert sorted(os.listdir(tmp_path)) == ["d.jsonl"]
