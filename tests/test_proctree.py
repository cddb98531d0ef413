"""`proctree` and the waiter: every process a launched program started is found, in whatever
process group or session, after its parent died, after the waiter died; stopping reaches them all
(SIGCONT to stopped ones), and the waiter records how the command ended. Real processes, real
signals, `runwatch.supervising.launch.launch` as the supervisor uses it."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from runwatch.files.rundir import ENV_ATTEMPT_ID
from runwatch.procs.process import alive, read_exit, wait_exit
from runwatch.procs.proctree import ProcessTree, Stopped, scan, stop
from runwatch.supervising.launch import launch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the tree is found through /proc")

# A program like torchrun: it starts two workers in sessions of their own; worker 1 starts a
# grandchild that double-forks away (its parent exits, it calls setsid). Every pid goes to pids.json.
FAMILY = r"""
import json, os, subprocess, sys, time
run_dir = sys.argv[1]
ignore = sys.argv[2] == "ignore-term"
sleeper = "import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore else "") + "time.sleep(300)"
daemon = (
    "import os, sys, time\n"
    "if os.fork(): os._exit(0)\n"
    "os.setsid()\n"
    f"open({run_dir!r} + '/daemon.pid.tmp', 'w').write(str(os.getpid()))\n"
    f"os.replace({run_dir!r} + '/daemon.pid.tmp', {run_dir!r} + '/daemon.pid')\n"
    "time.sleep(300)\n"
)
workers = [subprocess.Popen([sys.executable, "-c", sleeper], start_new_session=True) for _ in range(2)]
helper = subprocess.Popen([sys.executable, "-c", daemon])
helper.wait()
while not os.path.exists(run_dir + "/daemon.pid"):
    time.sleep(0.01)
pids = {"agent": os.getpid(), "workers": [w.pid for w in workers], "daemon": int(open(run_dir + "/daemon.pid").read())}
with open(run_dir + "/pids.json.tmp", "w") as f:
    json.dump(pids, f)
os.replace(run_dir + "/pids.json.tmp", run_dir + "/pids.json")
time.sleep(300)
"""


def _wait(cond, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def family(tmp_path):
    """Launch FAMILY; yield (run_dir, launch info, pids); SIGKILL whatever a test left."""
    started = []

    def start(mode: str = "obey"):
        run = str(tmp_path / f"run-{len(started)}")
        info = launch(run, [sys.executable, "-c", FAMILY, run, mode])
        if not _wait(lambda: os.path.exists(os.path.join(run, "pids.json"))):
            with open(os.path.join(run, "stdout.log")) as f:
                pytest.fail(f"the family did not start:\n{f.read()}")
        with open(os.path.join(run, "pids.json")) as f:
            pids = json.load(f)
        every = [pids["agent"], *pids["workers"], pids["daemon"]]
        started.append((info, every))
        return run, info, every

    yield start
    for info, every in started:
        for pid in [*every, info["waiter"]]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_every_process_is_found_in_any_session_and_after_its_parent_died(family):
    run, info, every = family()
    tree = ProcessTree.of_launch(run)
    assert tree is not None and tree.root == info["pid"] and tree.waiter == info["waiter"]
    members = tree.members()
    assert set(members) == set(every)  # the waiter is not one
    procs = scan()
    assert len({procs[p].sid for p in every}) == 4  # the agent's session, each worker's, the daemon's
    assert procs[every[-1]].ppid == info["waiter"]  # the daemon's parent died: the waiter adopted it


def test_stop_reaches_every_process_and_the_waiter_records_the_exit(family):
    run, info, every = family()
    done = stop(ProcessTree.of_launch(run), grace=10)
    assert (done.count, done.killed, done.continued, done.left) == (4, 0, 0, ())
    assert not any(alive(p) for p in every)
    ended = wait_exit(run, info["pid"])
    assert ended is not None and (ended.status, ended.signal) == (None, "SIGTERM")
    assert ended.describe() == "killed by SIGTERM"
    assert _wait(lambda: not alive(info["waiter"]))  # no child left: the waiter is gone too


def test_stopped_processes_get_sigcont_and_a_stubborn_tree_sigkill(family):
    run, info, every = family("ignore-term")
    os.kill(every[1], signal.SIGSTOP)  # a worker frozen, as a debugger or a test would leave it
    assert _wait(lambda: scan()[every[1]].state == "T")
    t0 = time.monotonic()
    done = stop(ProcessTree.of_launch(run), grace=1.0)
    assert (done.count, done.continued, done.killed, done.left) == (4, 1, 2, ())  # the workers ignore SIGTERM
    assert 1.0 <= time.monotonic() - t0 < 15
    assert done.describe() == ("SIGTERM, then SIGKILL after 1 s (4 processes; 1 was stopped by a signal: SIGCONT)")
    assert not any(alive(p) for p in every)


def test_the_marker_finds_the_orphans_when_the_waiter_itself_was_killed(family):
    run, info, every = family()
    os.kill(info["waiter"], signal.SIGKILL)
    os.kill(info["pid"], signal.SIGKILL)  # the agent too: its workers and the daemon are orphans of init now
    assert _wait(lambda: not alive(info["pid"]) and not alive(info["waiter"]))
    tree = ProcessTree.of_launch(run)
    assert set(tree.members()) == set(every[1:])
    with open(f"/proc/{every[1]}/environ", "rb") as f:
        assert f"{ENV_ATTEMPT_ID}={info['attempt_id']}".encode() in f.read()
    assert stop(tree, grace=10).count == 3
    assert not any(alive(p) for p in every)


def test_a_pid_the_user_gives_is_the_process_and_its_descendants_one_without_a_launch_is_nothing(tmp_path):
    import subprocess

    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            proc.stdout.readline()
            unproven = ProcessTree.of_launch(str(tmp_path), proc.pid)  # no launch.json: not runwatch's
            assert unproven is not None and not unproven.root_proven and unproven.members() == {}
            assert unproven.refused == "launch.json does not record it"
            tree = ProcessTree.given(proc.pid)  # `watch --pid`: the user named it
            assert tree.root == proc.pid and tree.waiter is None
            assert _wait(lambda: len(tree.members()) == 2)
            assert stop(tree, grace=10).count == 2
        finally:
            proc.kill()
    assert ProcessTree.of_launch(str(tmp_path)) is None


def test_exit_json_is_trusted_only_for_its_own_pid(tmp_path):
    (tmp_path / "exit.json").write_text(json.dumps({"pid": 5, "status": 0, "signal": None, "time": 1.0}))
    assert read_exit(str(tmp_path), 5).status == 0
    assert read_exit(str(tmp_path), 6) is None
    for bad in ({"pid": 5, "status": 0, "signal": "SIGKILL"}, {"pid": 5, "status": "0"}, [5]):
        (tmp_path / "exit.json").write_text(json.dumps(bad))
        assert read_exit(str(tmp_path), 5) is None
    assert wait_exit(str(tmp_path), 5, timeout=0.1) is None  # no waiter recorded: no wait


@pytest.mark.parametrize(
    "stopped, text",
    [
        (Stopped(1, 0, 0, (), 30.0, 0.1), "SIGTERM (1 process)"),
        (Stopped(3, 0, 1, (), 30.0, 30.2), "SIGTERM, then SIGKILL after 30 s (3 processes)"),
        (Stopped(2, 2, 0, (), 30.0, 0.1), "SIGTERM (2 processes; 2 were stopped by a signal: SIGCONT)"),
        (
            Stopped(2, 0, 2, (41, 42), 5.0, 35.0),
            "SIGTERM, then SIGKILL after 5 s (2 processes; still there after SIGKILL: 41, 42)",
        ),
    ],
)
def test_stopped_describes_what_was_done(stopped, text):
    assert stopped.describe() == text
