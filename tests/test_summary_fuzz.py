"""The readers never crash and never hang (docs/RELIABILITY.md): the record parser and the summary
on random and mutated logs, and on hostile files.

The only outcomes allowed: a valid result (strict JSON), or InvalidRunError, which the command line
prints as one line `Invalid training run: ...` with exit 1. The fast (orjson) and the standard
library paths must agree exactly, result or message.

`make test` runs RUNWATCH_FUZZ_EXAMPLES=150 examples a property; `make fuzz` runs 5000.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runwatch import RunLogger, summarize
from runwatch import schema
from runwatch.cli import main
from runwatch.errors import InvalidRunError

EXAMPLES = int(os.environ.get("RUNWATCH_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DATA = os.path.join(os.path.dirname(__file__), "data")
RECIPE = {"batch_size": 2, "seq_len": 4, "gradient_accumulation_steps": 1, "qk_clip_threshold": 50.0}


def _make_base() -> dict[str, bytes]:
    """A real two-session run with every event and optional field, from the logger."""
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "run")
        with RunLogger(d, recipe=RECIPE, window=2, hardware={"device": "cpu"}) as log:
            for i in range(5):
                log.step(loss=1.0 / (i + 1), lr=0.1, grad_norm=float(i), clipped=i % 2 == 0,
                         qk_observed=4, qk_clipped=i % 3, qk_max_logit=40.0 + i)
            state = log.state_dict()
            log.val(loss=0.5, metrics={"auroc": 0.8})
            log.checkpoint(os.path.join(tmp, "ckpt"), seconds=0.1, bytes=10, verified=True)
        with RunLogger(d, recipe=RECIPE, window=3, hardware={}, resume_from=state) as log:
            for i in range(7):
                log.step(loss=0.4, lr=0.05, grad_norm=2.0, skipped=i == 2)
            log.val(loss=0.45)
        with open(os.path.join(d, "metrics.jsonl"), "rb") as f, open(os.path.join(d, "run.json"), "rb") as g:
            return {"metrics.jsonl": f.read(), "run.json": g.read()}


BASE = _make_base()


def _outcome(run_dir: str, fast: bool) -> tuple[str, object]:
    try:
        result = summarize(run_dir, fast=fast)
    except InvalidRunError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        return "invalid", message
    json.dumps(result, allow_nan=False)  # strict JSON, as the command prints it
    return "valid", result


def _check_run(files: dict[str, bytes]) -> tuple[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        fast = _outcome(tmp, fast=True)
        slow = _outcome(tmp, fast=False)
        assert fast == slow
        return fast


# --- mutations ------------------------------------------------------------------------------------

HOSTILE_VALUES = [
    b"1e400", b"-1e400", b"1E-400", b"-0", b"0.0", b"18446744073709551616", b"-9223372036854775809",
    b"1" + b"0" * 4300, b"1" + b"0" * 5000, b"NaN", b"Infinity", b"-Infinity", b"true", b"false", b"null",
    b'"1"', b'""', b"[]", b"{}", b'"\\ud800"', b'"\\u0000"', b"[" * 200 + b"]" * 200,
    b"[" * 5000 + b"]" * 5000, b'{"a":' * 3000 + b"1" + b"}" * 3000,
]
INVALID_BYTES = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x00", b"\r", b"\x1b[2J"]
NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """`data` after 1-4 mutations: byte-level and structural ones, and schema-shaped ones."""
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from([
            "flip", "truncate", "duplicate", "delete", "swap", "number", "value", "bytes", "field", "drop",
            "crlf", "blank", "no_newline",
        ]))
        lines = _lines(data)
        if not data:
            data = draw(st.binary(max_size=64))
            continue
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if kind == "flip":
            pos = draw(st.integers(0, len(data) - 1))
            data = data[:pos] + bytes([data[pos] ^ (1 << draw(st.integers(0, 7)))]) + data[pos + 1:]
        elif kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "duplicate":
            lines.insert(draw(st.integers(0, len(lines))), line)
            data = b"".join(lines)
        elif kind == "delete":
            del lines[i]
            data = b"".join(lines)
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = b"".join(lines)
        elif kind == "number":
            spans = [m.span() for m in NUMBER.finditer(line)]
            if spans:
                a, b = draw(st.sampled_from(spans))
                lines[i] = line[:a] + draw(st.sampled_from(HOSTILE_VALUES)) + line[b:]
                data = b"".join(lines)
        elif kind == "bytes":
            pos = draw(st.integers(0, len(data)))
            data = data[:pos] + draw(st.sampled_from(INVALID_BYTES)) + data[pos:]
        elif kind in ("value", "field", "drop"):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            target = rec
            while isinstance(target, dict) and target and draw(st.booleans()):
                key = draw(st.sampled_from(sorted(target)))
                if not isinstance(target[key], dict):
                    break
                target = target[key]
            if not isinstance(target, dict):
                continue
            if kind == "drop" and target:
                del target[draw(st.sampled_from(sorted(target)))]
            elif kind == "value" and target:
                target[draw(st.sampled_from(sorted(target)))] = draw(json_values)
            else:
                target[draw(st.text(max_size=6))] = draw(json_values)
            text = json.dumps(rec, allow_nan=True).encode() + (b"\n" if line.endswith(b"\n") else b"")
            lines[i] = text
            data = b"".join(lines)
        elif kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif kind == "blank":
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"\n", b" \n", b"\t\n", b"\x00\n"])))
            data = b"".join(lines)
        elif kind == "no_newline":
            data = data.rstrip(b"\n")
    return data


# --- properties -----------------------------------------------------------------------------------


@FUZZ
@given(data=st.binary(max_size=512))
def test_parser_on_random_bytes(data):
    try:
        schema.loads(data, "metrics.jsonl:1")
    except InvalidRunError as exc:
        assert str(exc).startswith("metrics.jsonl:1: ") and "\n" not in str(exc)


@FUZZ
@given(data=st.data())
def test_summary_on_mutated_metrics(data):
    metrics = data.draw(mutated(BASE["metrics.jsonl"]))
    _check_run({"run.json": BASE["run.json"], "metrics.jsonl": metrics})


@FUZZ
@given(data=st.data())
def test_summary_on_mutated_manifest(data):
    manifest = data.draw(mutated(BASE["run.json"]))
    _check_run({"run.json": manifest, "metrics.jsonl": BASE["metrics.jsonl"]})


@FUZZ
@given(metrics=st.lists(st.binary(max_size=80), max_size=6).map(b"\n".join))
def test_summary_on_random_lines(metrics):
    kind, _ = _check_run({"run.json": BASE["run.json"], "metrics.jsonl": metrics})
    assert kind == "invalid"


def test_mutations_reach_both_outcomes():
    """The fuzzer is worth running only if its mutants are sometimes still valid."""
    seen = set()

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def probe(data):
        seen.add(_check_run({"run.json": BASE["run.json"], "metrics.jsonl": data.draw(mutated(BASE["metrics.jsonl"]))})[0])

    probe()
    assert seen == {"valid", "invalid"}


def _latest_session_lines() -> list[int]:
    """Indexes of the latest session's train, val and session_end lines (the summary skips the rest)."""
    lines = _lines(BASE["metrics.jsonl"])
    latest = json.loads(BASE["run.json"])["sessions"][-1]["session_id"]
    picked: dict[str, int] = {}
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec["session_id"] == latest:
            picked.setdefault(rec["event"], i)
    return [picked["train"], picked["val"], picked["session_end"]]


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=lambda v: v[:12].decode("latin-1"))
def test_every_hostile_value_in_every_number_of_a_record(value):
    """Each hostile value in place of each number of the latest session's records: valid, or one
    clear line, the same on both parsing paths."""
    lines = _lines(BASE["metrics.jsonl"])
    for i in _latest_session_lines():
        line = lines[i]
        for a, b in (m.span() for m in NUMBER.finditer(line)):
            mutant = lines[:]
            mutant[i] = line[:a] + value + line[b:]
            _check_run({"run.json": BASE["run.json"], "metrics.jsonl": b"".join(mutant)})


# --- hostile files --------------------------------------------------------------------------------


def _copy_base(tmp_path) -> str:
    d = tmp_path / "run"
    d.mkdir()
    for name, data in BASE.items():
        (d / name).write_bytes(data)
    return str(d)


# Peak memory of the process: VmHWM, not ru_maxrss, which Linux carries over an exec from the
# process that forked it (here: pytest, ~250 MB).
MAXRSS = """
import sys
from runwatch.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as f:
    print(next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:")), file=sys.stderr)
sys.exit(code)
"""


def _run_bounded(args: list[str], timeout: float = 120) -> tuple[int, str, str, int]:
    """`runwatch ARGS` in a subprocess: exit code, stdout, stderr without the last line, peak RSS."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) to read the peak memory")
    proc = subprocess.run([sys.executable, "-c", MAXRSS, *args], capture_output=True, text=True, timeout=timeout)
    *err, rss = proc.stderr.splitlines()
    return proc.returncode, proc.stdout, "\n".join(err), int(rss)


@pytest.mark.parametrize("name", ["metrics.jsonl", "run.json"])
def test_2gb_line_without_newline_costs_bounded_memory(tmp_path, name):
    """A sparse 2 GiB file without a newline: refused after reading a bounded prefix."""
    d = _copy_base(tmp_path)
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(b'{"run_id": "')
        f.truncate(2 * 1024 ** 3)
    code, out, err, rss = _run_bounded(["summarize", d])
    expected = {"metrics.jsonl": f"metrics.jsonl:1: line longer than {schema.MAX_LINE_BYTES} bytes",
                "run.json": f"run.json: larger than {schema.MAX_MANIFEST_BYTES} bytes"}[name]
    assert (code, out, err) == (1, "", f"Invalid training run: {expected}")
    assert rss < 200 * 1024 ** 2, f"peak RSS {rss / 2 ** 20:.0f} MiB"


@pytest.mark.parametrize("what, expected", [
    ("fifo", "run.json: not a regular file"),
    ("dev_zero", "run.json: not a regular file"),
    ("symlink_loop", "run.json: cannot open: Too many levels of symbolic links"),
    ("directory", "run.json: a directory"),
])
def test_hostile_run_json(tmp_path, capsys, what, expected):
    d = _copy_base(tmp_path)
    path = os.path.join(d, "run.json")
    os.unlink(path)
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dev_zero":
        os.symlink("/dev/zero", path)
    elif what == "directory":
        os.mkdir(path)
    else:
        os.symlink(path, path)
    assert main(["summarize", d]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Invalid training run: {expected}") and err.count("\n") == 1


GROWN = 20_000  # records: ~10 MB, long enough to be cut or replaced while being read


@pytest.fixture(scope="module")
def grown_log(tmp_path_factory) -> dict[str, bytes]:
    """One logged window, repeated with its step advanced (the logger writing 20k is slower)."""
    d = str(tmp_path_factory.mktemp("grown") / "run")
    log = RunLogger(d, recipe=RECIPE, window=1, hardware={})
    log.step(loss=0.5, lr=0.1, grad_norm=1.0)
    log._release()  # no session_end: the session is still running
    with open(os.path.join(d, "metrics.jsonl"), "rb") as f, open(os.path.join(d, "run.json"), "rb") as g:
        (line,), manifest = f.read().splitlines(), g.read()
    rec = json.loads(line)
    lines = []
    for step in range(1, GROWN + 1):
        rec["step"] = step
        lines.append(json.dumps(rec) + "\n")
    return {"metrics.jsonl": "".join(lines).encode(), "run.json": manifest}


@pytest.mark.parametrize("how", ["truncate", "truncate_mid_line", "replace", "zero_fill"])
def test_file_changed_while_being_read(tmp_path, grown_log, how):
    """Cut, replaced or zero-filled while the summary streams it: a result of what it read or one
    clear line, never a hang or a traceback."""
    d = tmp_path / "run"
    d.mkdir()
    path = str(d / "metrics.jsonl")
    size = len(grown_log["metrics.jsonl"])
    (d / "run.json").write_bytes(grown_log["run.json"])
    for delay in (0.05, 0.2):
        (d / "metrics.jsonl").write_bytes(grown_log["metrics.jsonl"])
        proc = subprocess.Popen([sys.executable, "-m", "runwatch", "summarize", str(d)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        if how == "truncate":
            os.truncate(path, size // 2 - (size // 2) % 100)
        elif how == "truncate_mid_line":
            os.truncate(path, size // 3)
        elif how == "replace":
            with open(path + ".new", "wb") as f:
                f.write(b"garbage\n")
            os.replace(path + ".new", path)
        else:
            with open(path, "r+b") as f:
                f.seek(size // 4)
                f.write(b"\x00" * 4096)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), err
        if proc.returncode == 1:
            assert out == "" and err.startswith("Invalid training run: ") and err.count("\n") == 1, err
        else:
            assert err == "" and json.loads(out)["run_id"]
