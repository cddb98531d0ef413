"""A real single-node Slurm for the tests: munged, slurmctld and slurmd on localhost.

    python tests/slurm_cluster.py up      # prints `export SLURM_CONF=...` and the directory
    python tests/slurm_cluster.py down DIR

Debian's packages (`slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge`) are installed
with apt-get when missing (root only). Everything else lives in one temporary directory: a munge
key, socket and logs, a minimal `slurm.conf` (ports chosen free, the node as `slurmd -C` describes
it, `proctrack/linuxproc`, no accounting database), the daemons' state, pids and logs. Clients find
it through `SLURM_CONF`; nothing under /etc is touched. `down` cancels the jobs and stops the
daemons by pid. `Cluster.up()` raises `Unavailable` with the reason when Slurm cannot run here.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "slurm-wlm-basic-plugins", "munge")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "squeue")
# The node shows idle about 1 s after the daemons start on a 2-core machine; a loaded one is slower.
READY_SECONDS = 60.0
STOP_SECONDS = 30.0


class Unavailable(Exception):
    """Slurm cannot run on this machine; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install() -> None:
    """apt-get install the packages when a daemon or client is missing (root and apt-get needed)."""
    if all(shutil.which(d) or os.path.exists(f"/usr/sbin/{d}") for d in DAEMONS):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable(
            "Slurm is not installed and cannot be installed here (needs root and apt-get): "
            "apt-get install " + " ".join(PACKAGES)
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:  # stale package lists: update once and try again
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True, env=env, timeout=1800)
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if res.returncode != 0:
        raise Unavailable(f"apt-get install {' '.join(PACKAGES)} failed: {(res.stderr or res.stdout).strip()[-300:]}")


def _exe(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if found is None:
        raise Unavailable(f"{name} not found after installing {' '.join(PACKAGES)}")
    return found


class Cluster:
    """One single-node cluster in `root` (a new temporary directory when None)."""

    def __init__(self, root: str | None = None) -> None:
        self.root = root or tempfile.mkdtemp(prefix="runwatch-slurm-")
        os.chmod(self.root, 0o755)  # munge wants every directory on its socket's path 0755
        self.conf = os.path.join(self.root, "slurm.conf")
        self.node = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        """The environment a client (sbatch, scontrol) needs: os.environ with SLURM_CONF."""
        return dict(os.environ, SLURM_CONF=self.conf)

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _start(self, name: str, cmd: list[str]) -> None:
        log = open(self.path(f"{name}.out"), "ab")
        try:
            self.procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def _log_tail(self, name: str) -> str:
        for candidate in (self.path(f"{name}.log"), self.path(f"{name}.out")):
            try:
                with open(candidate, errors="replace") as f:
                    text = f.read().strip()
            except OSError:
                continue
            if text:
                return text.splitlines()[-1][:300]
        return "(no log)"

    def _munge(self) -> None:
        os.makedirs(self.path("munge"), mode=0o755, exist_ok=True)
        os.chmod(self.path("munge"), 0o755)
        key = self.path("munge", "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.socket = self.path("munge", "munge.socket")
        self._start(
            "munged",
            [
                _exe("munged"),
                "--foreground",
                "--force",
                f"--key-file={key}",
                f"--socket={self.socket}",
                f"--pid-file={self.path('munge', 'munged.pid')}",
                f"--log-file={self.path('munged.log')}",
                f"--seed-file={self.path('munge', 'munged.seed')}",
            ],
        )
        end = time.monotonic() + READY_SECONDS
        while not os.path.exists(self.socket):
            if self.procs["munged"].poll() is not None:
                raise Unavailable(f"munged did not start: {self._log_tail('munged')}")
            if time.monotonic() > end:
                raise Unavailable("munged did not create its socket within 60 s")
            time.sleep(0.05)

    def _node_line(self) -> str:
        res = subprocess.run([_exe("slurmd"), "-C"], capture_output=True, text=True, timeout=60)
        first = res.stdout.strip().splitlines()[0] if res.stdout.strip() else ""
        if res.returncode != 0 or not first.startswith("NodeName="):
            raise Unavailable(f"slurmd -C failed: {(res.stderr or res.stdout).strip()[-300:]}")
        fields = dict(kv.split("=", 1) for kv in first.split() if "=" in kv)
        fields["NodeName"] = self.node
        # more CPUs than the machine has, so that test jobs run side by side (config_overrides)
        cpus = 16
        fields.update(CPUs=str(cpus), Boards="1", SocketsPerBoard="1", CoresPerSocket=str(cpus), ThreadsPerCore="1")
        fields["NodeAddr"] = "127.0.0.1"
        fields["State"] = "UNKNOWN"
        return " ".join(f"{k}={v}" for k, v in fields.items())

    def write_conf(self) -> None:
        for d in ("state", "spool"):
            os.makedirs(self.path(d), exist_ok=True)
        lines = [
            "ClusterName=runwatch",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={self.path('state')}",
            f"SlurmdSpoolDir={self.path('spool')}",
            f"SlurmctldPidFile={self.path('slurmctld.pid')}",
            f"SlurmdPidFile={self.path('slurmd.pid')}",
            f"SlurmctldLogFile={self.path('slurmctld.log')}",
            f"SlurmdLogFile={self.path('slurmd.log')}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # follows the parent chain: a program in its own session is still the job's
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "JobRequeue=1",
            "ReturnToService=2",
            "KillWait=30",
            "MinJobAge=3600",  # finished jobs stay in `scontrol show job` (there is no sacct)
            "SlurmdParameters=config_overrides",
            self._node_line(),
            f"PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def up(self) -> Cluster:
        """Install if needed, start the daemons, wait until the node is idle."""
        if os.geteuid() != 0:
            raise Unavailable("the test cluster runs its daemons as root (SlurmUser=root); not root here")
        install()
        try:
            self._munge()
            self.write_conf()
            self._start("slurmctld", [_exe("slurmctld"), "-D", "-i", "-f", self.conf])
            self._start("slurmd", [_exe("slurmd"), "-D", "-f", self.conf, "-N", self.node])
            self._wait_idle()
        except BaseException:
            self.down()
            raise
        return self

    def _wait_idle(self) -> None:
        end = time.monotonic() + READY_SECONDS
        state = ""
        while time.monotonic() < end:
            for name in ("slurmctld", "slurmd"):
                if self.procs[name].poll() is not None:
                    raise Unavailable(f"{name} exited at start: {self._log_tail(name)}")
            res = subprocess.run(
                [_exe("sinfo"), "-h", "-N", "-o", "%T"], capture_output=True, text=True, env=self.env, timeout=70
            )
            state = res.stdout.strip()
            if res.returncode == 0 and state.startswith("idle"):
                return
            time.sleep(0.2)
        raise Unavailable(f"the node did not become idle within 60 s (state {state or 'unknown'})")

    def run(self, *cmd: str, check: bool = True, timeout: float = 70, env: dict[str, str] | None = None) -> str:
        """A client command (`scontrol`, `sbatch`, ...) against this cluster; its stdout."""
        res = subprocess.run(
            [_exe(cmd[0]), *cmd[1:]], capture_output=True, text=True, env=env or self.env, timeout=timeout
        )
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()}")
        return res.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as {key: value}."""
        out = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", out))

    def down(self) -> None:
        """Cancel every job, stop the daemons by pid (SIGTERM, SIGKILL after 30 s), remove nothing
        the caller may still want to read (the directory stays; `remove()` deletes it)."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run([_exe("scancel"), "--full", "--user", "root"], capture_output=True, env=self.env, timeout=70)
            end = time.monotonic() + STOP_SECONDS
            while time.monotonic() < end:
                res = subprocess.run(
                    [_exe("squeue"), "-h", "-o", "%i"], capture_output=True, text=True, env=self.env, timeout=70
                )
                if res.returncode != 0 or not res.stdout.strip():
                    break
                time.sleep(0.2)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(STOP_SECONDS)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) == 1 and argv[0] == "up":
        try:
            c = Cluster().up()
        except Unavailable as exc:
            print(f"slurm_cluster: {exc}", file=sys.stderr)
            return 1
        print(f"export SLURM_CONF={c.conf}\n# stop with: python {sys.argv[0]} down {c.root}")
        return 0
    if len(argv) == 2 and argv[0] == "down":
        root = argv[1]
        env = dict(os.environ, SLURM_CONF=os.path.join(root, "slurm.conf"))
        subprocess.run(["scancel", "--full", "--user", "root"], capture_output=True, env=env, timeout=70)
        for pidfile in ("slurmd.pid", "slurmctld.pid", os.path.join("munge", "munged.pid")):
            try:
                with open(os.path.join(root, pidfile)) as f:
                    os.kill(int(f.read().split()[0]), signal.SIGTERM)
            except (OSError, ValueError, IndexError):
                pass
        return 0
    print("usage: python tests/slurm_cluster.py up | down DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
