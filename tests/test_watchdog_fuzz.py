"""`runwatch check` and `watch` never crash and never hang (docs/RELIABILITY.md).

On random and mutated logs — schema v1, minimal telemetry, trainer_state.json — `check` ends with
exit 0 (`OK clean step=N`) or 7 (`ANOMALY <kind> step=N: ...`, a broken record being `invalid_log`),
every line well formed; hostile files give an `invalid_log` verdict or a usage error, with bounded
memory, within a timeout.

`make test` runs RUNWATCH_FUZZ_EXAMPLES=150 examples a property; `make fuzz` runs 5000.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzzing import BASE, FUZZ, mutated
from runwatch.cli import main

KINDS = (
    "nonfinite_loss|stall|stuck_metric|inverted_metric|loss_at_chance|throughput_drop|grad_explosion|"
    "grad_collapse|timeout|process_exit|oom|session_error|invalid_log|nonfinite_grad|loss_spike|"
    "loss_collapse|overfitting|rank_stall|straggler|no_progress|no_signal"
)
STEP = r"-?[0-9][0-9.e+-]*|-?inf|nan"  # fmt_step of an int or a float
FINDING = re.compile(rf"^(FINDING|WARNING) ({KINDS}) step=({STEP}): \S.*$")
# What check may say on stderr: a torn last line left out, how a log without steps or `loss` is read
NOTE = re.compile(
    r"runwatch check: (left out the torn last line \d+ \(no newline yet\)"
    r"|.* has no step column or field: stepping by (its epoch column|record number)"
    r"|.* has no loss key: reading the train loss from '.*')"
)
VERDICT = re.compile(rf"^(OK clean step=({STEP})|ANOMALY ({KINDS}) step=({STEP}): \S.*)$")


def _check(files: dict[str, bytes], target: str = "") -> tuple[int, list[str], str]:
    """`runwatch check` in this process on `files`; exit code, stdout lines, stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in files.items():
            with open(os.path.join(tmp, name), "wb") as f:
                f.write(data)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["check", os.path.join(tmp, target)])
        return code, out.getvalue().splitlines(), err.getvalue()


def _assert_well_formed(code: int, lines: list[str], err: str) -> str:
    """Exit 0 or 7 and the lines docs/WATCHDOG.md prescribes; return the verdict line."""
    assert code in (0, 7), (code, lines, err)
    assert lines, err
    *findings, verdict = lines
    assert all(FINDING.match(line) for line in findings), findings
    assert VERDICT.match(verdict), verdict
    stops = [line for line in findings if line.startswith("FINDING")]  # WARNING lines never decide
    assert (code == 7) == verdict.startswith("ANOMALY") == bool(stops)
    if stops:
        assert verdict == "ANOMALY" + stops[0][len("FINDING") :]
    assert all(NOTE.fullmatch(line) for line in err.splitlines()), err
    return verdict


@FUZZ
@given(data=st.data())
def test_check_on_mutated_schema_v1_logs(data):
    metrics = data.draw(mutated(BASE["metrics.jsonl"]))
    _assert_well_formed(*_check({"run.json": BASE["run.json"], "metrics.jsonl": metrics}))


@FUZZ
@given(data=st.data())
def test_check_on_mutated_manifests(data):
    manifest = data.draw(mutated(BASE["run.json"]))
    _assert_well_formed(*_check({"run.json": manifest, "metrics.jsonl": BASE["metrics.jsonl"]}))


def test_check_of_the_base_run_is_clean():
    """The mutation properties start from a log that check accepts."""
    code, lines, err = _check({"run.json": BASE["run.json"], "metrics.jsonl": BASE["metrics.jsonl"]})
    assert (code, lines[-1], err) == (0, "OK clean step=11", "")


numbers = st.integers(-(2**70), 2**70) | st.floats() | st.sampled_from([0, 0.0, -0.0, 1e308, -1e308, 2**63])
telemetry_value = numbers | st.none() | st.booleans() | st.text(max_size=4) | st.lists(numbers, max_size=2)
telemetry_record = st.dictionaries(
    st.sampled_from(
        [
            "step",
            "t",
            "loss",
            "lr",
            "learning_rate",
            "grad_norm",
            "sps",
            "eval_loss",
            "eval_auroc",
            "eval_acc",
            "FATAL",
            "epoch",
            "",
        ]
    ),
    telemetry_value,
    max_size=7,
)


def _dump(obj) -> bytes:
    return json.dumps(obj, allow_nan=True).encode()


@FUZZ
@given(records=st.lists(telemetry_record | telemetry_value, max_size=12), tail=st.binary(max_size=20))
def test_check_on_random_minimal_telemetry(records, tail):
    log = b"".join(_dump(r) + b"\n" for r in records) + tail
    _assert_well_formed(*_check({"train_log.jsonl": log}, "train_log.jsonl"))


@FUZZ
@given(history=st.lists(telemetry_record, max_size=12) | telemetry_value, garbage=st.booleans())
def test_check_on_random_trainer_state(history, garbage):
    state = _dump({"log_history": history, "global_step": 3})
    if garbage:
        state = state[: len(state) // 2]
    code, lines, err = _check({"trainer_state.json": state}, "trainer_state.json")
    _assert_well_formed(code, lines, err)


# --- hostile files --------------------------------------------------------------------------------

PEAK = """
import sys
from runwatch.cli import main
code = main(sys.argv[1:])
with open("/proc/self/status") as f:  # VmHWM: ru_maxrss would include the forking parent's
    print(next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:")), file=sys.stderr)
sys.exit(code)
"""


def _run(args: list[str], timeout: float = 120) -> tuple[int, list[str], str, int]:
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc/self/status (Linux) to read the peak memory")
    proc = subprocess.run([sys.executable, "-c", PEAK, *args], capture_output=True, text=True, timeout=timeout)
    *err, peak = proc.stderr.splitlines()
    return proc.returncode, proc.stdout.splitlines(), "\n".join(err), int(peak)


def _run_dir(tmp_path) -> str:
    d = tmp_path / "run"
    d.mkdir()
    for name, data in BASE.items():
        (d / name).write_bytes(data)
    return str(d)


@pytest.mark.parametrize("what", ["fifo", "dev_zero", "directory", "symlink_loop"])
@pytest.mark.parametrize("name", ["metrics.jsonl", "run.json"])
def test_check_on_hostile_files(tmp_path, name, what):
    """What is not a regular file is an invalid_log verdict (or, for a log that is not there at
    all, a usage error): never a hang, a traceback or exit 1."""
    d = _run_dir(tmp_path)
    path = os.path.join(d, name)
    os.unlink(path)
    {
        "fifo": os.mkfifo,
        "dev_zero": lambda p: os.symlink("/dev/zero", p),
        "directory": os.mkdir,
        "symlink_loop": lambda p: os.symlink(p, p),
    }[what](path)
    code, lines, err, _ = _run(["check", d], timeout=60)
    if code == 2:
        assert lines == [] and err.startswith("check: ") and err.count("\n") == 0, err
    else:
        assert code == 7 and lines[-1].startswith("ANOMALY invalid_log step="), (code, lines, err)


@pytest.mark.parametrize("what", ["fifo", "dev_zero"])
def test_check_on_a_hostile_trainer_state(tmp_path, what):
    path = str(tmp_path / "trainer_state.json")
    os.mkfifo(path) if what == "fifo" else os.symlink("/dev/zero", path)
    code, lines, err, peak = _run(["check", path], timeout=60)
    assert code == 7 and lines[-1].startswith("ANOMALY invalid_log step=0: trainer_state.json: "), (code, lines, err)
    assert peak < 200 * 2**20


def test_check_on_a_2gb_line_without_newline(tmp_path):
    d = _run_dir(tmp_path)
    with open(os.path.join(d, "metrics.jsonl"), "ab") as f:
        f.write(b'{"run_id": "')
        f.truncate(f.tell() + 2 * 1024**3)
    code, lines, err, peak = _run(["check", d], timeout=300)
    lineno = BASE["metrics.jsonl"].count(b"\n") + 1
    assert code == 7 and lines[-1] == (
        f"ANOMALY invalid_log step=11: metrics.jsonl:{lineno}: line longer than {16 * 1024 * 1024} bytes"
    ), (lines, err)
    assert peak < 200 * 2**20, f"peak RSS {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("value", [b"18446744073709551616", b"-9223372036854775809", b"1" + b"0" * 30])
def test_check_reads_wide_integers_the_same_with_and_without_orjson(monkeypatch, value):
    """orjson reads an integer beyond 64 bits as a float; check must not depend on it being installed."""
    from runwatch.reading import parsing

    lines = BASE["metrics.jsonl"].splitlines(keepends=True)
    latest = json.loads(BASE["run.json"])["sessions"][-1]["session_id"]
    i = next(i for i, line in enumerate(lines) if json.loads(line)["session_id"] == latest)
    seen = set()
    for a, b in (m.span() for m in re.finditer(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", lines[i])):
        mutant = lines[:]
        mutant[i] = lines[i][:a] + value + lines[i][b:]
        files = {"run.json": BASE["run.json"], "metrics.jsonl": b"".join(mutant)}
        fast = _check(files)
        with monkeypatch.context() as m:
            m.setattr(parsing, "_orjson", None)
            slow = _check(files)
        assert fast == slow
        seen.add(fast[1][-1].split()[0])
    assert seen == {"OK", "ANOMALY"}  # some places take a wide int, some refuse it
