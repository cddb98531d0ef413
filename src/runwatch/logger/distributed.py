"""The ranks of the logger's world, and each rank's heartbeat.

`RunLogger` calls `rank_group()` once. Under an initialised `torch.distributed` process group
(world size > 1) it gets a `RankGroup`: rank 0 writes the log; at every window close each rank
writes its heartbeat and then takes part in ONE `all_gather` of a short float64 row (the window's
sums and maxima) — the only synchronisation runwatch adds to a training loop. Otherwise it gets a
`SoloGroup`, the world of one, whose exchange and gather return the process's own values: a single
process takes the very same path, without torch.

`HeartbeatWriter` keeps `RUN_DIR/heartbeats/rank-<k>.json`: written at every window close and
phase change; under torch.distributed also refreshed from a daemon thread that samples where the
main thread is (inside a collective or backward, or not), which is what tells a hung rank from
the ranks waiting for it, and a straggler from the ranks idling at its pace.

torch is never imported here: it is taken from `sys.modules` when the program already has it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from ..files import HEARTBEATS, HISTORY_WINDOWS, HeartbeatConfig, dumps, heartbeat_path

if TYPE_CHECKING:
    import torch
    import torch.distributed


# Python source directories whose frames mean "blocked on other ranks" (or, for autograd, inside a
# backward pass: DDP overlaps its gradient all-reduce with backward, and a rank waiting for a slow
# peer waits there; from Python the two cannot be told apart, so backward counts as waiting).
_WAITING_DIRS = tuple(
    os.sep + os.path.join("torch", d) + os.sep for d in ("distributed", os.path.join("nn", "parallel"), "autograd")
)
_THIS_FILE = os.path.abspath(__file__)
_MAX_STACK = 64  # frames looked at a sample; deeper stacks are judged by their innermost 64
# How often a single process's writer thread looks for windows posted since its last write (and
# writes them, all in one): fast windows then cost one atomic replace a second, not one a window,
# the file is at most this much behind the latest window, and a watchdog judging staleness in
# minutes loses nothing.
POSTED_WRITE_SPACING = 1.0

T = TypeVar("T")


def process_group() -> RankGroup | None:
    """The initialised default process group with more than one rank, or None.

    Never imports torch: a program that has not imported it has no process group.
    """
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None
    return RankGroup(dist)


def rank_group() -> RankGroup | SoloGroup:
    """The logger's world: the process group of `process_group()`, else a world of one."""
    group = process_group()
    return SoloGroup() if group is None else group


class SoloGroup:
    """A single process as a world of one rank: every exchange returns its own values."""

    rank = 0
    world_size = 1
    solo = True  # val/checkpoint/state_dict close the window at once; step() decides alone

    def __init__(self) -> None:
        self.host = socket.gethostname()

    def exchange(self, obj: T) -> list[T]:
        """`[obj]`: the only rank's object."""
        return [obj]

    def gather(self, row: list[float]) -> list[list[float]]:
        """`[row]`: the only rank's row."""
        return [row]

    # Rank 0's decision is this process's own: bool(flag), a C call (step() makes it every step).
    agree = staticmethod(bool)


class RankGroup:
    """The default process group, as the logger uses it: once at start, once per window (and,
    when windows may close on time, a one-byte CPU broadcast per step; see `agree`)."""

    solo = False

    def __init__(self, dist: ModuleType) -> None:
        import torch

        self._dist = dist  # torch.distributed
        self._torch = torch
        self.rank: int = dist.get_rank()
        self.world_size: int = dist.get_world_size()
        self.host = socket.gethostname()
        backend = str(dist.get_backend()).lower()
        # The row goes where the backend can reduce it: NCCL needs the current CUDA device.
        self.device: torch.device
        if "nccl" in backend and torch.cuda.is_available():
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")
        gather = getattr(dist, "all_gather_single", None)  # torch >= 2.13 name
        self._gather: Callable[[torch.Tensor, torch.Tensor], object] = (
            gather if gather is not None else dist.all_gather_into_tensor
        )
        # `agree` broadcasts on the CPU, never through the device: gloo itself, or a gloo group
        # beside NCCL (made here, on every rank at once, as new_group requires).
        self._cpu_group: torch.distributed.ProcessGroup | None = (
            None if "gloo" in backend else dist.new_group(backend="gloo")
        )

    def exchange(self, obj: T) -> list[T]:
        """Every rank's `obj` (each rank passes one of the same kind), in rank order
        (all_gather_object: once per session, at start)."""
        out: list[Any] = [None] * self.world_size
        self._dist.all_gather_object(out, obj)
        return out

    def gather(self, row: list[float]) -> list[list[float]]:
        """Every rank's `row` (same length on every rank), in rank order: one all_gather."""
        torch = self._torch
        mine = torch.tensor(row, dtype=torch.float64, device=self.device)
        out = torch.empty(self.world_size * len(row), dtype=torch.float64, device=self.device)
        # note: the one sync point runwatch adds: every rank waits here for the slowest, once a window
        self._gather(out, mine)
        rows: list[list[float]] = out.view(self.world_size, len(row)).tolist()
        return rows

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag`, on every rank: one broadcast of one byte over the CPU group.

        Every rank must call it at the same point (the same attempted update); no host-device
        sync (a CPU tensor), and the caller's own flag counts on rank 0 only.
        """
        torch = self._torch
        value = torch.tensor([1 if flag else 0], dtype=torch.uint8)
        self._dist.broadcast(value, src=0, group=self._cpu_group)
        return bool(value[0])


def is_waiting_frame(frame: FrameType | None) -> bool:
    """Whether a stack (innermost frame first) is inside torch.distributed, DDP, autograd, or the
    logger's own window collective."""
    depth = 0
    while frame is not None and depth < _MAX_STACK:
        name = frame.f_code.co_filename
        if any(d in name for d in _WAITING_DIRS) or name == _THIS_FILE:
            return True
        frame = frame.f_back
        depth += 1
    return False


def _where(frame: FrameType | None) -> str | None:
    if frame is None:
        return None
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"


class HeartbeatWriter:
    """Keeps one rank's heartbeat file: at each window close and phase change and, when started
    with `refresh`, every `config.every_seconds` (from a daemon thread that samples the training
    thread's stack every `config.sample_seconds`).

    At a window close the training thread only posts the window's numbers (`window`: one append of
    a tuple; no dict, no JSON, no clock, no lock). Whoever writes the file next folds the posts into
    the heartbeat's fields: under torch.distributed the training thread itself, at once, before the
    window's collective (a rank blocked in it has shown that it got there); in a single process a
    small writer thread that looks for new posts every `POSTED_WRITE_SPACING` (an atomic replace
    costs from ~15 µs on tmpfs to over a millisecond on a busy ext4, which flushes a file renamed
    over another). That thread writes nothing but posts: a hung training thread posts nothing, so
    its heartbeat stops. Nothing on the training thread wakes it, so a window close never hands
    the interpreter lock to it. Phase changes and the end are written at once, by the training
    thread, so the file shows a phase before the work inside it begins.

    Writes are atomic (temp file + `os.replace`) and not fsynced: a heartbeat is liveness for a
    watchdog reading the same page cache or shared-file-system client; after a host crash a stale
    heartbeat is the right signal, and an fsync per window would cost milliseconds on a shared file
    system for nothing the durable log (metrics.jsonl) does not already keep.
    """

    def __init__(
        self,
        run_dir: str,
        rank: int,
        world_size: int,
        session_id: str,
        progress: Callable[[], tuple[int, float]],
        config: HeartbeatConfig,
    ) -> None:
        self.path = heartbeat_path(run_dir, rank)
        self._tmp = f"{self.path}.tmp-{os.getpid()}"
        os.makedirs(os.path.join(run_dir, HEARTBEATS), exist_ok=True)
        self._progress = progress  # () -> (attempted updates so far, perf_counter of the last step())
        self._config = config
        self._lock = threading.Lock()  # the fields, and folding the posts into them
        self._file_lock = threading.Lock()  # the file: one write at a time, never an older one last
        self._seq = self._written = 0
        self._fields: dict[str, Any] = {
            "rank": rank,
            "world_size": world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "session_id": session_id,
            "state": "running",
            "time": 0.0,
            "step": 0,
            "window": 0,
            "attempted": 0,
            "progress_time": 0.0,
            "train_seconds": None,
            "window_seconds": [],
            "busy_seconds": [],
            "where": None,
            "waiting": None,
            "phase": None,
            "phase_since": None,
        }
        # Windows posted by the training thread, (window, step, train_seconds, busy samples, waiting
        # samples) each: deque.append is atomic, so posting needs no lock; older posts than the
        # history holds are of no use.
        self._posts: collections.deque[tuple[int, int, float, int, int]] = collections.deque(maxlen=HISTORY_WINDOWS)
        self._windows = 0  # windows posted (the training thread's count)
        # Samples outside and inside collectives so far (the sampler thread's counts, never reset:
        # a window's share is the difference between its post and the one before).
        self._busy = self._wait = 0
        self._folded = (0, 0, 0)  # (window, busy, wait) of the latest post folded into the fields
        self._history: collections.deque[tuple[float, float]] = collections.deque(maxlen=HISTORY_WINDOWS)
        self._main = threading.get_ident()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwatch-heartbeat", daemon=True)
        self._write_windows = True  # whether window() writes at once (the refresh thread's ranks)

    def start(self, step: int, refresh: bool = True) -> None:
        """Write the first heartbeat (window 0 at `step`); with `refresh`, start the refresh
        thread, else the writer thread of posted windows."""
        with self._lock:
            self._fields["step"] = step
            self._write_locked()
        if not refresh:
            self._write_windows = False
            self._thread = threading.Thread(target=self._write_posted, name="runwatch-heartbeat-writer", daemon=True)
        self._thread.start()

    def phase(self, name: str | None, since: float | None) -> None:
        """The process entered phase `name` at `since` (Unix seconds), or left every phase
        (None, None): write, now (with the windows posted so far)."""
        with self._lock:
            self._fields["phase"] = name
            self._fields["phase_since"] = since
            self._write_locked()

    def window(self, step: int, train_seconds: float) -> None:
        """A window closed at `step` (as this rank sees it) after `train_seconds` of training: post
        it. Under torch.distributed write it now; a single process's writer thread writes it."""
        self._windows += 1
        self._posts.append((self._windows, step, train_seconds, self._busy, self._wait))
        if self._write_windows:
            with self._lock:
                self._write_locked()

    def end(self) -> None:
        """The session ended on this rank: a last heartbeat with state `ended`; stop the thread."""
        self._stop.set()
        with self._lock:
            self._fields["state"] = "ended"
            self._write_locked()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _unfolded(self) -> bool:
        """Whether a window was posted after the latest one folded into the fields."""
        posts = self._posts
        return bool(posts) and posts[-1][0] > self._folded[0]

    def _fold_locked(self) -> None:
        """Bring the window fields up to date with the posts (under `_lock`)."""
        if not self._unfolded():
            return
        window, busy, wait = self._folded
        f = self._fields
        for post in list(self._posts):  # a copy in one C call: a post appended meanwhile waits
            if post[0] <= window:
                continue
            window, f["step"], seconds, busy_now, wait_now = post
            samples = busy_now - busy + wait_now - wait
            # the window's time outside collectives, by the share of its samples taken there
            self._history.append((seconds, seconds * (busy_now - busy) / samples if samples else seconds))
            busy, wait = busy_now, wait_now
            f["train_seconds"] = seconds
        self._folded = (window, busy, wait)
        f["window"] = window
        f["window_seconds"] = [h[0] for h in self._history]
        f["busy_seconds"] = [h[1] for h in self._history]

    def _write_locked(self) -> None:
        self._put(*self._snapshot_locked())

    def _snapshot_locked(self) -> tuple[int, bytes]:
        """The heartbeat as of now (under `_lock`), numbered so that an older one never replaces it."""
        self._fold_locked()
        attempted, mark = self._progress()
        now = time.time()
        f = self._fields
        f["attempted"] = attempted
        f["progress_time"] = now - max(0.0, time.perf_counter() - mark)
        f["time"] = now
        self._seq += 1
        return self._seq, (dumps(f) + "\n").encode("utf-8")

    def _put(self, seq: int, data: bytes) -> None:
        with self._file_lock:
            if seq <= self._written:
                return  # a newer heartbeat is on disk already
            self._written = seq
            try:
                # a new file: never through a symlink, a hard link or a FIFO planted at the temporary name
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._tmp)
                fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                try:
                    os.write(fd, data)  # ~0.8 KB: one write
                finally:
                    os.close(fd)
                os.replace(self._tmp, self.path)
            except OSError:
                # A heartbeat that cannot be written shows as a stale one; training goes on.
                with contextlib.suppress(OSError):
                    os.unlink(self._tmp)

    def _sample(self) -> None:
        frame = sys._current_frames().get(self._main)
        waiting = is_waiting_frame(frame)
        with self._lock:
            if waiting:
                self._wait += 1
            else:
                self._busy += 1
            self._fields["where"] = _where(frame)
            self._fields["waiting"] = waiting

    def _write_posted(self) -> None:
        """The writer of a single process: every `POSTED_WRITE_SPACING`, the windows posted since
        its last write, if any; nothing else (no post, no write: a training thread that stopped
        closing windows stops the file). It is never woken by the training thread, which only
        appends a post: a window close costs no lock, no event and no thread switch."""
        while not self._stop.wait(POSTED_WRITE_SPACING):
            if not self._unfolded():
                continue  # nothing new, or a phase change has written it meanwhile
            with self._lock:
                if self._stop.is_set():
                    return
                snapshot = self._snapshot_locked()
            self._put(*snapshot)  # outside `_lock`: the training thread never waits for the disk

    def _run(self) -> None:
        every = self._config.every_seconds
        next_write = time.monotonic() + every
        while not self._stop.wait(self._config.sample_seconds):
            try:
                self._sample()
                if time.monotonic() >= next_write:
                    next_write = time.monotonic() + every
                    with self._lock:
                        if not self._stop.is_set():
                            self._write_locked()
            except Exception:  # pragma: no cover - never let the heartbeat kill the process
                continue
