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
import subprocess
import sys
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzzing import BASE, FUZZ, HOSTILE_VALUES, NUMBER, RECIPE, lines_of, mutated
from runwatch import RunLogger, summarize
from runwatch.cli import main
from runwatch.errors import InvalidRunError
from runwatch.files import lines, schema


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
        seen.add(
            _check_run({"run.json": BASE["run.json"], "metrics.jsonl": data.draw(mutated(BASE["metrics.jsonl"]))})[0]
        )

    probe()
    assert seen == {"valid", "invalid"}


def _latest_session_lines() -> list[int]:
    """Indexes of the latest session's train, val and session_end lines (the summary skips the rest)."""
    lines = lines_of(BASE["metrics.jsonl"])
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
    lines = lines_of(BASE["metrics.jsonl"])
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
        f.truncate(2 * 1024**3)
    code, out, err, rss = _run_bounded(["summarize", d])
    expected = {
        "metrics.jsonl": f"metrics.jsonl:1: line longer than {lines.MAX_LINE_BYTES} bytes",
        "run.json": f"run.json: larger than {schema.MAX_MANIFEST_BYTES} bytes",
    }[name]
    assert (code, out, err) == (1, "", f"Invalid training run: {expected}")
    assert rss < 200 * 1024**2, f"peak RSS {rss / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    "what, expected",
    [
        ("fifo", "run.json: not a regular file"),
        ("dev_zero", "run.json: not a regular file"),
        ("symlink_loop", "run.json: cannot open: Too many levels of symbolic links"),
        ("directory", "run.json: a directory"),
    ],
)
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
        proc = subprocess.Popen(
            [sys.executable, "-m", "runwatch", "summarize", str(d)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
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
