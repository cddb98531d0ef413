"""The watchdog under load (docs/RELIABILITY.md): `runwatch watch` follows a real logger writing
10k records/s. Schema v1 checks every record's step against the one before, so a record missed or
read twice would end the watch with `invalid_log`; the watch must end `OK done` at the writer's
final step, with no `stall` and no `invalid_log`.

`make test` runs RUNWATCH_FUZZ_LOAD_SECONDS=5 s of writing; `make fuzz` runs 60 s.
"""

from __future__ import annotations

import os
import subprocess
import sys

from runwatch import RunLogger, summarize

SECONDS = float(os.environ.get("RUNWATCH_FUZZ_LOAD_SECONDS", "5"))
RATE = 10_000  # records a second

WRITER = """
import json, os, sys, time
run_dir, seconds, rate = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
path = os.path.join(run_dir, "metrics.jsonl")
with open(path, "rb") as f:
    template = json.loads(f.readline())  # the logger's first record
tokens = template["tokens"]
total = int(seconds * rate)
template["step"] = "STEP"
head, tail = (json.dumps(template) + "\\n").encode().split(b'"STEP"')
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
print("ready", flush=True)
t0 = time.monotonic()
for step in range(2, total + 1):
    os.write(fd, head + b"%d" % step + tail)  # one write() a record, as the logger
    if step % 100 == 0:  # paced to `rate`, in bursts of 100 records
        ahead = step / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
template.update(step=total, event="session_end", reason="normal", error=None, totals={"tokens": total * tokens, "skipped": 0})
os.write(fd, (json.dumps(template) + "\\n").encode())
print(total, time.monotonic() - t0, flush=True)
"""


def test_watch_follows_a_10k_records_per_second_writer(tmp_path):
    """The writer appends the logger's own record with the step advanced, one write() each, as
    RunLogger does; the logger itself writes ~15-70k records/s (window=1), but not on two busy
    cores next to the watch, and the watch is what this test loads."""
    d = str(tmp_path / "run")
    log = RunLogger(d, recipe={"batch_size": 1, "seq_len": 1, "gradient_accumulation_steps": 1}, window=1, hardware={})
    log.step(loss=0.5, lr=0.1, grad_norm=1.0)
    log._release()  # the session stays open: the writer goes on with it
    writer = subprocess.Popen(
        [sys.executable, "-S", "-c", WRITER, d, str(SECONDS), str(RATE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline() == "ready\n", writer.communicate(timeout=30)
        # --stall 10: the writer never pauses that long, a stall verdict would be false.
        watch = subprocess.run(
            [
                sys.executable,
                "-m",
                "runwatch",
                "watch",
                d,
                "--poll",
                "0.05",
                "--stall",
                "10",
                "--startup-grace",
                "30",
                "--pid",
                str(writer.pid),
                "--throughput-patience",
                str(10**9),
                "--severity",
                "no_progress=off",
            ],  # the pacing sleeps look like slow steps; the copied record's loss never falls
            capture_output=True,
            text=True,
            timeout=SECONDS * 10 + 120,
        )
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:  # pragma: no cover - a hang is the failure
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    total, seconds = int(out.split()[0]), float(out.split()[1])
    print(f"watch followed {total} records written in {seconds:.1f} s ({total / seconds:.0f}/s)")  # -s shows it
    assert watch.returncode == 0, (watch.stdout, watch.stderr)
    assert watch.stdout.splitlines()[-1].startswith(f"OK done step={total}"), watch.stdout
    assert summarize(d, expect_step=total)["train_windows"] == total
