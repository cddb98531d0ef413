"""TensorBoard event files: framing, CRCs, decoding, following, against TensorBoard's own reader."""

from __future__ import annotations

import glob
import json
import math
import os
import struct

import pytest

from runwatch.cli import main
from runwatch.errors import UsageError
from runwatch.judging.watchdog import Options, Watcher, check
from runwatch.reading.readers import ReadOptions, tfevents, tfrecord
from runwatch.reading.readers.keys import KeyMap
from runwatch.reading.records import iter_records, resolve_target

torch_tb = pytest.importorskip("torch.utils.tensorboard", reason="the [torch] extra is not installed")
pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
SummaryWriter = torch_tb.SummaryWriter


def write_events(log_dir, steps, *, nan_at=None, eval_every=None, walltime0=1_700_000_000.0, new_style=False):
    """A real SummaryWriter run: train/loss, lr-AdamW, train/grad_norm a step; val/loss, val/auroc."""
    w = SummaryWriter(str(log_dir), max_queue=1000)
    for s in steps:
        loss = float("nan") if s == nan_at else 1.0 / s
        w.add_scalar("train/loss", loss, s, walltime=walltime0 + s, new_style=new_style)
        w.add_scalar("lr-AdamW", 1e-3, s, walltime=walltime0 + s, new_style=new_style)
        w.add_scalar("train/grad_norm", 0.5, s, walltime=walltime0 + s, new_style=new_style)
        if eval_every and s % eval_every == 0:
            w.add_scalar("val/loss", 2.0 / s, s, walltime=walltime0 + s + 0.5, new_style=new_style)
            w.add_scalar("val/auroc", 0.875, s, walltime=walltime0 + s + 0.5, new_style=new_style)
    w.close()
    return sorted(glob.glob(os.path.join(str(log_dir), "*tfevents*")))[-1]


def read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def record_spans(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each record of an event file's bytes."""
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        out.append((pos, pos + 16 + n))
        pos += 16 + n
    return out


# --- CRC-32C and decoding -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, crc",
    [
        (b"", 0),
        (b"123456789", 0xE3069283),
        (b"\x00" * 32, 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
    ],
)
def test_crc32c_known_values(data, crc):
    assert tfrecord._crc32c_py(data) == crc
    assert tfrecord.crc32c(data) == crc


def test_crc32c_pure_python_equals_the_c_one_at_every_length():
    rnd = bytes((i * 131 + 7) % 256 for i in range(300))
    for n in range(len(rnd)):
        assert tfrecord._crc32c_py(rnd[:n]) == tfrecord.crc32c(rnd[:n]), n


def test_masked_crc_is_tensorflows():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    for data in (b"", b"abc", struct.pack("<Q", 42)):
        assert tfrecord.masked_crc32c(data) == masked_crc32c(data)


@pytest.mark.parametrize("new_style", [False, True], ids=["simple_value", "tensor"])
def test_scalars_equal_tensorboards_event_accumulator(tmp_path, new_style):
    """Every scalar (tag, step, wall time, value) as TensorBoard's own EventAccumulator reads it;
    non-scalar summaries (a histogram, text) are passed over. Both decoders agree."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    w = SummaryWriter(str(tmp_path), max_queue=1000)
    for s in range(1, 40):
        w.add_scalar("train/loss", 1.0 / s, s, walltime=1000.0 + s, new_style=new_style)
        w.add_scalar("val/auroc", 0.5 + s / 100, s, walltime=1000.5 + s, new_style=new_style)
        if s % 10 == 0:
            w.add_histogram("weights", torch_tb_tensor(s), s)
            w.add_text("note", f"step {s}", s)
    w.close()
    path = glob.glob(str(tmp_path / "*tfevents*"))[0]
    acc = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    expected = set()
    for tag in ("train/loss", "val/auroc"):
        if new_style:
            expected |= {
                (tag, e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)
            }
        else:
            expected |= {(tag, e.step, e.wall_time, e.value) for e in acc.Scalars(tag)}
    assert len(expected) == 78
    for decoder in ("pure", "pb2"):
        ef = tfevents.EventFile(
            path, decoder=tfrecord.event_decoder(decoder) if decoder == "pb2" else tfrecord.decode_event
        )
        events, error, *_ = ef.poll()
        assert error is None
        got = {(tag, step, wall, value) for _off, wall, step, scalars in events for tag, value in scalars}
        assert got == expected, decoder


def torch_tb_tensor(s):
    import torch

    return torch.arange(10, dtype=torch.float32) * s


def test_values_are_grouped_by_step_into_train_and_eval_records(tmp_path):
    write_events(tmp_path, range(1, 21), eval_every=10)
    recs = list(iter_records(resolve_target(str(tmp_path))))
    assert [(r.kind, r.step) for r in recs][8:12] == [("train", 9), ("train", 10), ("eval", 10), ("train", 11)]
    train10, eval10 = recs[9], recs[10]
    assert train10.loss == pytest.approx(0.1) and train10.lr == pytest.approx(1e-3) and train10.grad_mean == 0.5
    assert train10.time == 1_700_000_010.0
    assert eval10.eval_loss == pytest.approx(0.2) and eval10.metrics == {"auroc": 0.875}
    assert eval10.where.startswith("events.out.tfevents.") and "@" in eval10.where


# --- following ---------------------------------------------------------------------------------------


def test_a_record_is_applied_only_once_whole_at_every_cut(tmp_path):
    src = write_events(tmp_path / "src", range(1, 6))
    data = read_bytes(src)
    spans = record_spans(data)
    dest = tmp_path / "events.out.tfevents.1.host"
    dest.write_bytes(b"")
    ef = tfevents.EventFile(str(dest))
    seen = 0
    for cut in range(1, len(data) + 1):
        with open(dest, "ab") as f:
            f.write(data[cut - 1 : cut])
        events, error, *_ = ef.poll()
        assert error is None
        seen += len(events)
        whole = max(0, sum(1 for a, b in spans if b <= cut) - 1)  # the first record is the file version
        assert seen == whole, cut  # one scalar an event
        assert ef.offset == max([b for a, b in spans if b <= cut], default=0)


def test_idle_poll_reads_nothing(tmp_path, monkeypatch):
    path = write_events(tmp_path, range(1, 50))
    reader = tfevents.TensorBoardReader(path, KeyMap())
    assert reader.poll().items
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    for _ in range(3):
        chunk = reader.poll()
        assert not chunk.grew and not chunk.more
    assert opened == []


def test_bad_crc_in_the_middle_is_invalid_log_with_file_and_offset(tmp_path, capsys):
    path = write_events(tmp_path, range(1, 21))
    data = bytearray(read_bytes(path))
    a, b = record_spans(bytes(data))[30]
    data[b - 6] ^= 0x01  # a byte of the record's data
    write_bytes(path, bytes(data))
    name = os.path.basename(path)
    result = check(str(tmp_path))
    kinds = [(f.kind, f.step) for f in result.findings]
    assert kinds == [("invalid_log", 10)]
    assert result.findings[0].message == f"{name}: bad CRC of a record's data at byte {a}"
    assert main(["check", str(tmp_path)]) == 7
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == f"ANOMALY invalid_log step=10: {name}: bad CRC of a record's data at byte {a}"
    )


def test_bad_length_crc_names_the_record(tmp_path):
    path = write_events(tmp_path, range(1, 5))
    data = bytearray(read_bytes(path))
    a, _ = record_spans(bytes(data))[2]
    data[a + 9] ^= 0xFF
    write_bytes(path, bytes(data))
    result = check(path)
    assert [f.message for f in result.findings] == [
        f"{os.path.basename(path)}: bad CRC of a record's length at byte {a}"
    ]


def test_a_truncated_header_at_the_end_waits_and_check_leaves_it_out(tmp_path, capsys):
    path = write_events(tmp_path, range(1, 5))
    data = read_bytes(path)
    a, _ = record_spans(data)[-1]
    write_bytes(path, data[: a + 5])
    assert main(["check", path]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[-1] == "OK clean step=4"  # step 4 lost only its grad_norm
    assert f"left out {os.path.basename(path)}: the record being written at byte {a}" in captured.err


def test_a_file_that_is_not_an_event_file(tmp_path):
    path = tmp_path / "events.out.tfevents.123.host"
    path.write_bytes(b"this is plain text, not TensorBoard records\n" * 3)
    result = check(str(path))
    assert [(f.kind, f.message) for f in result.findings] == [
        ("invalid_log", f"{path.name}: not a TensorBoard event file: bad CRC of a record's length at byte 0")
    ]


def test_a_new_event_file_is_a_new_session(tmp_path):
    write_events(tmp_path, range(1, 11), walltime0=1_700_000_000.0)
    os.replace(glob.glob(str(tmp_path / "*tfevents*"))[0], tmp_path / "events.out.tfevents.1700000000.host.1.0")
    write_events(tmp_path, range(11, 21), walltime0=1_700_000_100.0)
    os.replace(
        sorted(glob.glob(str(tmp_path / "*tfevents*")))[-1], tmp_path / "events.out.tfevents.1700000100.host.2.0"
    )
    recs = list(iter_records(str(tmp_path)))
    assert [(r.session, r.step) for r in recs if r.step in (10, 11)] == [("session-1", 10), ("session-2", 11)]


def test_one_level_down_the_newest_directory_is_read(tmp_path):
    write_events(tmp_path / "version_0", range(1, 5), walltime0=1_000.0)
    os.replace(
        glob.glob(str(tmp_path / "version_0" / "*tfevents*"))[0],
        tmp_path / "version_0" / "events.out.tfevents.1000.h.1.0",
    )
    write_events(tmp_path / "version_1", range(1, 8), walltime0=2_000.0)
    os.replace(
        glob.glob(str(tmp_path / "version_1" / "*tfevents*"))[0],
        tmp_path / "version_1" / "events.out.tfevents.2000.h.1.0",
    )
    t = resolve_target(str(tmp_path))
    assert t.format == "tensorboard" and t.run_dir == str(tmp_path)
    assert [r.step for r in iter_records(t)] == list(range(1, 8))


def test_state_round_trips_through_json(tmp_path):
    path = write_events(tmp_path, range(1, 30), eval_every=5)
    data = read_bytes(path)
    dest = tmp_path / "copy" / "events.out.tfevents.1.h"
    dest.parent.mkdir()
    dest.write_bytes(data[: len(data) // 2])
    one = tfevents.TensorBoardReader(str(dest), KeyMap())
    first = one.poll().items
    state = json.loads(json.dumps(one.state_dict(), allow_nan=False))
    two = tfevents.TensorBoardReader(str(dest), KeyMap())
    two.load_state_dict(state)
    assert two.state_dict() == one.state_dict()
    with open(dest, "ab") as f:
        f.write(data[len(data) // 2 :])
    rest = two.poll().items + two.finish()
    whole = tfevents.TensorBoardReader(path, KeyMap())
    assert [json.dumps(r, sort_keys=True) for _w, r in first + rest] == [
        json.dumps(r, sort_keys=True) for _w, r in whole.poll().items + whole.finish()
    ]


# --- the watchdog following a growing file ---------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_watch_follows_a_growing_event_file_to_the_nan(tmp_path):
    """A real SummaryWriter flushed step by step; the watch sees the NaN at its step, no earlier."""
    clock = Clock()
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    watcher = Watcher(
        str(tmp_path), Options(poll=1, stall=1e6, startup_grace=1e6), clock=clock, log=lambda m: None, poll_checks=[]
    )
    verdict = None
    for s in range(1, 30):
        loss = float("nan") if s == 25 else 1.0 / s
        w.add_scalar("train/loss", loss, s)
        w.add_scalar("train/grad_norm", 1.0, s)
        w.flush()
        for _ in range(2):  # a poll that finds the file grown, then an idle one
            clock.now += 1
            verdict = watcher.poll_once()
            if verdict is not None:
                break
        if verdict is not None:
            break
    w.close()
    assert verdict is not None and (verdict.kind, verdict.step, s) == ("nonfinite_loss", 25, 25)
    assert verdict.message == "train loss is NaN"


def test_watch_applies_a_step_once_the_file_was_idle_for_a_poll(tmp_path):
    """A NaN written at the last step (nothing after it) is caught within two polls."""
    clock = Clock()
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    for s in range(1, 11):
        w.add_scalar("train/loss", 1.0 / s, s)
        w.add_scalar("train/grad_norm", 1.0, s)
    w.flush()
    watcher = Watcher(
        str(tmp_path), Options(stall=1e6, startup_grace=1e6), clock=clock, log=lambda m: None, poll_checks=[]
    )
    clock.now += 1
    assert watcher.poll_once() is None  # catches up: steps 1-9 applied, step 10 held while the file may grow
    w.add_scalar("train/loss", float("nan"), 11)
    w.flush()
    clock.now += 1
    assert watcher.poll_once() is None  # grown: step 11 may still get values
    clock.now += 1
    v = watcher.poll_once()  # idle for a poll: step 11 is applied
    w.close()
    assert v is not None and (v.kind, v.step, v.message) == ("nonfinite_loss", 11, "train loss is NaN")


def test_values_of_an_applied_step_that_come_later_are_not_a_relaunch(tmp_path):
    """Eval values logged after an idle poll, at the step of the train values already applied."""
    clock = Clock()
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    for s in range(1, 4):
        w.add_scalar("train/loss", 1.0, s)
    w.flush()
    watcher = Watcher(
        str(tmp_path), Options(stall=1e6, startup_grace=1e6), clock=clock, log=lambda m: None, poll_checks=[]
    )
    for _ in range(2):
        clock.now += 1
        assert watcher.poll_once() is None
    w.add_scalar("val/loss", 0.5, 3)
    w.add_scalar("train/loss", 0.9, 3)  # a repeated value of an applied step: the applied one stands
    w.add_scalar("train/loss", 0.8, 4)
    w.flush()
    w.close()
    for _ in range(2):
        clock.now += 1
        assert watcher.poll_once() is None
    assert (watcher.current, watcher.last_step, watcher.parser.session) == ("session-1", 4, "session-1")


def test_per_batch_values_under_the_epoch_number_are_one_record_an_epoch(tmp_path):
    """A logger that writes each batch's loss at the epoch number (Ultralytics YOLO's TensorBoard):
    one record an epoch with the last value, one session; its three `*loss*` keys are not guessed
    at: `no_signal` names them."""
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    for epoch in range(1, 6):
        for batch in range(30):
            for key in ("box", "cls", "dfl"):
                w.add_scalar(f"train/{key}_loss", 2.0 - epoch / 10 + batch / 1000, epoch)
        w.add_scalar("val/box_loss", 1.5, epoch)
    w.close()
    t = resolve_target(str(tmp_path))
    recs = list(iter_records(t))
    assert {r.session for r in recs} == {"session-1"}
    assert [r.step for r in recs] == [1, 2, 3, 4, 5]
    assert recs[0].raw["train/box_loss"] == pytest.approx(1.9 + 29 / 1000)
    [f] = check(str(tmp_path)).findings
    name = os.path.basename(glob.glob(os.path.join(str(tmp_path), "*tfevents*"))[0])
    assert (f.kind, f.severity, f.step) == ("no_signal", "warn", 5)
    assert f.message == (
        f"no train loss in {name}; keys seen: train/box_loss, train/cls_loss, train/dfl_loss, val/box_loss; "
        "use --map loss=KEY"
    )


def test_catboost_logloss_is_read_as_the_loss_and_named(tmp_path, capsys):
    """One train key with `loss` in its name (CatBoost's `Logloss`): it is the loss; the first finding
    and `status` say so."""
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    for s in range(0, 30):
        w.add_scalar("Logloss", 0.7 - s / 100 if s != 25 else float("nan"), s)
    w.close()
    assert main(["check", str(tmp_path)]) == 7
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "ANOMALY nonfinite_loss step=25: train loss is NaN (train loss read from 'Logloss')"
    assert "has no loss key: reading the train loss from 'Logloss'" in err
    assert main(["status", str(tmp_path), "--json"]) == 0
    st = json.loads(capsys.readouterr().out)
    assert (st["loss_key"], st["step"]) == ("Logloss", 29)
    assert main(["status", str(tmp_path)]) == 0
    assert "(from Logloss)" in capsys.readouterr().out


def test_a_hyperparameter_at_step_0_at_the_end_does_not_move_the_step_back(tmp_path, capsys):
    """Lightning writes `hp_metric` at step 0 when it ends: the log reached its last train step."""
    w = SummaryWriter(str(tmp_path), max_queue=1000)
    w.add_scalar("hp_metric", -1.0, 0)
    for s in range(49, 400, 50):
        w.add_scalar("train_loss_step", 1.0 - s / 1000, s)
    w.add_scalar("hp_metric", -1.0, 0)
    w.close()
    assert main(["check", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "OK clean step=399"
    assert main(["status", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["step"] == 399


def test_format_tensorboard_overrides_detection(tmp_path):
    path = write_events(tmp_path, range(1, 4))
    renamed = tmp_path / "scalars.bin"
    os.replace(path, renamed)
    with pytest.raises(UsageError, match=r"scalars.bin: not a JSON-lines log .*--format tensorboard\|"):
        resolve_target(str(renamed))  # never read as JSONL for want of a format
    t = resolve_target(str(renamed), ReadOptions(format="tensorboard"))
    assert t.format == "tensorboard"
    assert [r.step for r in iter_records(t)] == [1, 2, 3]
    assert math.isclose([r.loss for r in iter_records(t)][-1], 1 / 3, rel_tol=1e-6)


def test_when_the_process_is_gone_the_held_step_is_judged_before_the_verdict(tmp_path):
    """The last step (a NaN) is held back while the writer may add to it; once the process has
    exited it is complete: the verdict is the NaN, not process_exit."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    write_events(tmp_path, range(1, 6), nan_at=5)
    watcher = Watcher(
        str(tmp_path), Options(pid=proc.pid, stall=1e6, startup_grace=1e6), log=lambda m: None, poll_checks=[]
    )
    v = watcher.poll_once()
    assert v is not None and (v.kind, v.step, v.message) == ("nonfinite_loss", 5, "train loss is NaN")


# --- a run directory's TensorBoard folder: its launches are the sessions of one run ----------------


def test_a_run_directorys_tensorboard_folder_reads_every_launch_as_a_session(tmp_path):
    from runwatch.reading.records import load_sessions, resolve_target

    run = tmp_path / "r"
    # the second launch's folder sorts first by name: the order is the first event's wall time
    write_events(run / "runs" / "b_first", range(1, 13), walltime0=1_700_000_000.0)
    write_events(run / "runs" / "a_second", range(11, 31), walltime0=1_700_000_100.0)
    alone = [s for s in load_sessions(resolve_target(str(run / "runs"))) if s.records]
    assert [(s.records[0].step, s.records[-1].step) for s in alone] == [(11, 30)]  # no run directory: the newest
    (run / "launch.json").write_text(json.dumps({"pid": 1, "read": {"log": "runs"}, "by": "supervise"}))
    t = resolve_target(str(run))
    assert (t.run_dir, t.log_path, t.format, t.read.sessions) == (str(run), str(run / "runs"), "tensorboard", True)
    sessions = [s for s in load_sessions(t) if s.records]
    assert [(s.records[0].step, s.records[-1].step) for s in sessions] == [(1, 12), (11, 30)]
