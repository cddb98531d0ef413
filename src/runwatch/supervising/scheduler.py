"""The batch scheduler a supervisor runs under, as far as it acts on it (docs/SUPERVISE.md, "Under a scheduler").

    job = SlurmJob.from_env()          # None outside a Slurm job
    job.facts()                        # {"slurm_job_id": "42", "slurm_restart_count": 1} for the journal
    requeue(job)                       # `scontrol requeue` of this job (or array task) while it runs

Slurm sets `SLURM_JOB_ID` in every job and `SLURM_RESTART_COUNT` in a job it started again (a
requeue); an array task also has `SLURM_ARRAY_JOB_ID` and `SLURM_ARRAY_TASK_ID`, and `scontrol
requeue $SLURM_JOB_ID` from the task whose job id is the array's would requeue the whole array
(its running siblings cancelled), so a task is requeued by `<array job>_<task>`. A job is requeued
only while Slurm still shows it RUNNING: a SIGTERM that comes from `scancel`, the time limit or
an outside `scontrol requeue` finds it COMPLETING, and requeueing it then would bring back a job
its owner cancelled. Kubernetes and SkyPilot need nothing here: they act on the exit status.
Standard library only.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# scontrol answers in milliseconds when slurmctld is up; it retries for about 60 s when it is not.
# A preempted job has seconds left: wait no longer than this for an answer.
SCONTROL_TIMEOUT_SECONDS = 20.0
# How much of scontrol's output goes to the journal.
OUTPUT_CHARS = 300


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """The Slurm job this process runs in, from its environment."""

    job_id: str
    restart_count: int = 0  # SLURM_RESTART_COUNT: 0 in the first run, N after the Nth requeue
    array_job_id: str | None = None
    array_task_id: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SlurmJob | None:
        """The job of `env` (default os.environ); None outside Slurm."""
        env = os.environ if env is None else env
        job = env.get("SLURM_JOB_ID", "").strip()
        if not job:
            return None
        count = env.get("SLURM_RESTART_COUNT", "").strip()
        return cls(
            job,
            int(count) if count.isdigit() else 0,
            env.get("SLURM_ARRAY_JOB_ID", "").strip() or None,
            env.get("SLURM_ARRAY_TASK_ID", "").strip() or None,
        )

    @property
    def requeue_id(self) -> str:
        """What `scontrol requeue` is given: this task alone in an array, else the job."""
        if self.array_job_id and self.array_task_id:
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id

    def continues(self, journal: list[dict[str, Any]]) -> bool:
        """This run is a later one of the job that wrote `journal` (a requeue): a record of this job
        at a lower SLURM_RESTART_COUNT."""
        return self.restart_count > 0 and any(
            r.get("slurm_job_id") == self.job_id
            and type(r.get("slurm_restart_count")) is int
            and r["slurm_restart_count"] < self.restart_count
            for r in journal
        )

    def facts(self) -> dict[str, Any]:
        """The journal's view of the job (on every launch record)."""
        out: dict[str, Any] = {"slurm_job_id": self.job_id, "slurm_restart_count": self.restart_count}
        if self.array_job_id and self.array_task_id:
            out["slurm_array_task"] = self.requeue_id
        return out


def _scontrol(*args: str) -> tuple[int | None, str]:
    try:
        res = subprocess.run(
            ["scontrol", *args],
            capture_output=True,
            text=True,
            timeout=SCONTROL_TIMEOUT_SECONDS,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        return None, "scontrol not found on PATH"
    except subprocess.TimeoutExpired:
        return None, f"scontrol did not answer within {SCONTROL_TIMEOUT_SECONDS:g} s"
    except OSError as exc:
        return None, f"scontrol: {exc.strerror or exc}"
    return res.returncode, (res.stdout + res.stderr).strip()[:OUTPUT_CHARS]


def job_state(job: SlurmJob) -> str | None:
    """JobState as `scontrol show job` reports it (RUNNING, COMPLETING, ...); None when unknown."""
    code, out = _scontrol("show", "job", "-o", job.requeue_id)
    m = re.search(r"\bJobState=(\S+)", out) if code == 0 else None
    return m.group(1) if m else None


def requeue(job: SlurmJob) -> dict[str, Any]:
    """`scontrol requeue` the job while it runs; what happened, for the journal: `{"command",
    "requeued", "status", "output"}` (`status` null when scontrol did not run or was not asked)."""
    command = ["scontrol", "requeue", job.requeue_id]
    state = job_state(job)
    if state is not None and state != "RUNNING":
        return {"command": command, "requeued": False, "status": None, "output": f"not requeued: the job is {state}"}
    code, out = _scontrol("requeue", job.requeue_id)
    return {"command": command, "requeued": code == 0, "status": code, "output": out}
